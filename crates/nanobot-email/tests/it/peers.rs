//! Real mail servers for the tests: Dovecot (IMAP with IDLE, TLS on one port and STARTTLS on another) and an
//! aiosmtpd SMTP server (STARTTLS + AUTH) that delivers into the Maildirs Dovecot serves. Both listen on
//! loopback, on free ports, with throwaway users and a CA and certificate generated here.

use nanobot_util::lock;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, bail};
use async_imap::Session;
use futures::TryStreamExt as _;
use nanobot_email::EmailSettings;
use nanobot_testkit::peers::{self, ChildGuard};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The mail domain of every test account.
pub(crate) const DOMAIN: &str = "nanobot.test";

/// One set of accounts (`<scenario>-bot`, `-alice`, `-mallory`) per test, so tests sharing the servers never
/// see each other's mail.
const SCENARIOS: &[&str] = &[
    "reply", "stranger", "attach", "restart", "outage", "verify", "badpass", "starttls", "gateway", "poll",
    "pamove", "padelete", "paskip",
];

/// The address of `user` (`"reply-alice"`).
pub(crate) fn addr(user: &str) -> String {
    format!("{user}@{DOMAIN}")
}

/// The password of `user`.
pub(crate) fn password(user: &str) -> String {
    format!("pw-{user}")
}

/// A running Dovecot + SMTP server pair.
pub(crate) struct MailPeers {
    dir: tempfile::TempDir,
    /// The test CA (PEM) that signed the servers' certificate.
    pub(crate) ca: PathBuf,
    /// IMAP with TLS from the first byte.
    pub(crate) imaps_port: u16,
    /// IMAP with STARTTLS.
    pub(crate) imap_port: u16,
    /// SMTP with STARTTLS.
    pub(crate) smtp_port: u16,
    dovecot: Mutex<Option<(ChildGuard, ChildStdin)>>,
    _smtp: (ChildGuard, ChildStdin),
    dovecot_bin: PathBuf,
}

static SHARED: OnceLock<Result<Option<MailPeers>, String>> = OnceLock::new();

/// The servers shared by this test binary (started once). `None` = skipped (peers missing and not on CI).
pub(crate) fn shared() -> Option<&'static MailPeers> {
    match SHARED.get_or_init(|| MailPeers::start().map_err(|e| format!("{e:#}"))) {
        Ok(p) => p.as_ref(),
        Err(e) => panic!("starting the mail servers failed: {e}"),
    }
}

/// Uid and gid the mail processes run as: ours, or Dovecot's own user when we are root (Dovecot refuses to
/// give mail access to uid 0).
fn mail_owner() -> anyhow::Result<Option<(u32, u32)>> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 3 && f[0] == "dovecot" {
            return Ok(Some((f[2].parse()?, f[3].parse()?)));
        }
    }
    bail!("running as root but there is no 'dovecot' user (is dovecot-imapd installed?)")
}

fn chown_tree(path: &Path, owner: Option<(u32, u32)>) -> anyhow::Result<()> {
    let Some((uid, gid)) = owner else { return Ok(()) };
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), owner)?;
        }
    }
    Ok(())
}

/// A CA and a certificate for `localhost` / `127.0.0.1` signed by it: (ca.pem, cert.pem, key.pem).
fn certificates(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "nanobot-email test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    params.distinguished_name.push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca)?;
    let paths = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&paths.0, ca.pem())?;
    std::fs::write(&paths.1, cert.pem())?;
    std::fs::write(&paths.2, key.serialize_pem())?;
    Ok(paths)
}

/// Spawns `program args…` behind a shell that kills it when our end of its stdin closes (when the test
/// process exits), in its own process group.
fn spawn_tied(
    name: &str,
    program: &Path,
    args: &[&str],
    owner: Option<(u32, u32)>,
    log: &Path,
) -> anyhow::Result<(ChildGuard, ChildStdin)> {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("\"$@\" </dev/null & p=$!; read _ignored; kill -TERM $p 2>/dev/null; wait $p")
        .arg("sh")
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(log)?)
        .stderr(std::fs::File::create(log.with_extension("err"))?);
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    let mut guard = ChildGuard::spawn(name, &mut cmd)?;
    let stdin = guard
        .std_child_mut()
        .and_then(|c| c.stdin.take())
        .context("no stdin pipe")?;
    Ok((guard, stdin))
}

/// Waits (30 s at most) until the peer writing `log` prints its `READY` line.
fn wait_ready(log: &Path, what: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = std::fs::read_to_string(log).unwrap_or_default();
        if out.lines().any(|l| l.trim() == "READY") {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            let err = std::fs::read_to_string(log.with_extension("err")).unwrap_or_default();
            bail!("{what} did not start within 30 s\n{out}\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_port(port: u16, what: &str, log: &Path) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if std::time::Instant::now() > deadline {
            let out = std::fs::read_to_string(log).unwrap_or_default();
            let err = std::fs::read_to_string(log.with_extension("err")).unwrap_or_default();
            bail!("{what} did not listen on 127.0.0.1:{port} within 30 s\n{out}\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

impl MailPeers {
    /// Starts both servers in a fresh temporary directory. `Ok(None)`: a peer is missing and `CI` is unset.
    pub(crate) fn start() -> anyhow::Result<Option<Self>> {
        let Some(dovecot_bin) = peers::require(
            "dovecot (apt dovecot-imapd)",
            peers::which("dovecot")
                .or_else(|| Some(PathBuf::from("/usr/sbin/dovecot")).filter(|p| p.exists())),
        ) else {
            return Ok(None);
        };
        let Some(python) = peers::require_venv_exe("python") else {
            return Ok(None);
        };
        let has_aiosmtpd = Command::new(&python)
            .args(["-c", "import aiosmtpd"])
            .status()
            .is_ok_and(|s| s.success());
        if peers::require("aiosmtpd (pip)", has_aiosmtpd.then_some(())).is_none() {
            return Ok(None);
        }
        let owner = mail_owner()?;
        let dir = tempfile::Builder::new().prefix("nanobot-email-peers").tempdir()?;
        let root = dir.path();
        std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let (ca, cert, key) = certificates(root)?;
        let mail = root.join("mail");
        std::fs::create_dir_all(&mail)?;
        let mut passwd = String::new();
        let mut smtp_users = String::new();
        for s in SCENARIOS {
            for role in ["bot", "alice", "mallory"] {
                let user = format!("{s}-{role}");
                passwd.push_str(&format!("{}:{{PLAIN}}{}::::::\n", addr(&user), password(&user)));
                smtp_users.push_str(&format!("{}:{}\n", addr(&user), password(&user)));
                std::fs::create_dir_all(mail.join(&user).join("new"))?;
                std::fs::create_dir_all(mail.join(&user).join("cur"))?;
                std::fs::create_dir_all(mail.join(&user).join("tmp"))?;
            }
        }
        std::fs::write(root.join("passwd"), passwd)?;
        std::fs::write(root.join("smtp-users"), smtp_users)?;
        chown_tree(&mail, owner)?;
        let (imaps_port, imap_port, smtp_port) =
            (peers::free_port()?, peers::free_port()?, peers::free_port()?);
        let me = if owner.is_some() {
            (
                "dovecot".to_string(),
                "dovenull".to_string(),
                "uid=dovecot gid=dovecot ".to_string(),
            )
        } else {
            let name = std::fs::read_to_string("/etc/passwd")?
                .lines()
                .find_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    (f.len() > 2 && f[2] == rustix::process::geteuid().as_raw().to_string())
                        .then(|| f[0].to_string())
                })
                .context("our user is not in /etc/passwd")?;
            (name.clone(), name, String::new())
        };
        let config = format!(
            r#"# generated by the nanobot-email tests
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{cert}
ssl_key = <{key}
ssl_min_protocol = TLSv1.2
disable_plaintext_auth = yes
auth_mechanisms = plain login
default_internal_user = {internal}
default_login_user = {login}
first_valid_uid = 1
mail_location = maildir:{mail}/%n
mailbox_idle_check_interval = 1 secs
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%Lu {root}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%Lu {root}/passwd
  default_fields = {fields}home={mail}/%n
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {imaps_port}
    ssl = yes
  }}
}}
service anvil {{
  chroot =
}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"#,
            root = root.display(),
            cert = cert.display(),
            key = key.display(),
            mail = mail.display(),
            internal = me.0,
            login = me.1,
            fields = me.2,
        );
        std::fs::write(root.join("dovecot.conf"), config)?;
        // This file is also compiled into other crates' tests (the gateway's), so find the script from the root.
        let script = peers::repo_root()
            .context("no workspace root")?
            .join("crates/nanobot-email/tests/it/smtp_peer.py");
        let smtp_log = root.join("smtp.log");
        let smtp = spawn_tied(
            "aiosmtpd",
            &python,
            &[
                &script.display().to_string(),
                "--port",
                &smtp_port.to_string(),
                "--cert",
                &cert.display().to_string(),
                "--key",
                &key.display().to_string(),
                "--users",
                &root.join("smtp-users").display().to_string(),
                "--maildirs",
                &mail.display().to_string(),
                "--owner",
                &owner.map_or_else(String::new, |(u, g)| format!("{u}:{g}")),
            ],
            None,
            &smtp_log,
        )?;
        let peers = Self {
            dir,
            ca,
            imaps_port,
            imap_port,
            smtp_port,
            dovecot: Mutex::new(None),
            _smtp: smtp,
            dovecot_bin,
        };
        peers.start_imap()?;
        // Its own word, not just an open port: a port someone else took would accept connections too.
        wait_ready(&smtp_log, "aiosmtpd")?;
        Ok(Some(peers))
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Starts Dovecot (again) and waits until both IMAP ports listen.
    pub(crate) fn start_imap(&self) -> anyhow::Result<()> {
        let root = self.root();
        let conf = root.join("dovecot.conf");
        let log = root.join("dovecot.out");
        let child = spawn_tied(
            "dovecot",
            &self.dovecot_bin,
            &["-F", "-c", &conf.display().to_string()],
            None,
            &log,
        )?;
        *lock(&self.dovecot) = Some(child);
        let logged = root.join("dovecot.log");
        wait_port(self.imaps_port, "dovecot", &logged)
            .and_then(|()| wait_port(self.imap_port, "dovecot", &logged))
    }

    /// Stops Dovecot (its master detaches into its own session, so it is told through its wrapper, then by its
    /// PID file) and waits until the port no longer accepts connections.
    pub(crate) fn stop_imap(&self) {
        let taken = lock(&self.dovecot).take();
        if let Some((mut guard, stdin)) = taken {
            drop(stdin); // the wrapper sends SIGTERM to dovecot and waits for it
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            while !guard.has_exited() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            guard.kill();
        }
        let pid_file = self.root().join("run").join("master.pid");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.imaps_port)).is_ok() {
            if std::time::Instant::now() > deadline {
                if let Some(pid) = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Dovecot's log so far (for failure messages).
    pub(crate) fn dovecot_log(&self) -> String {
        std::fs::read_to_string(self.root().join("dovecot.log")).unwrap_or_default()
    }

    /// Channel settings for account `<scenario>-bot`, serving `<scenario>-alice`, no DKIM/SPF check, polling
    /// bounds short for tests. Media and state under `data`.
    pub(crate) fn settings(&self, scenario: &str, data: &Path) -> EmailSettings {
        let bot = format!("{scenario}-bot");
        let block = serde_json::json!({
            "enabled": true,
            "consentGranted": true,
            "imapHost": "127.0.0.1", "imapPort": self.imaps_port,
            "imapUsername": addr(&bot), "imapPassword": password(&bot),
            "smtpHost": "127.0.0.1", "smtpPort": self.smtp_port,
            "smtpUsername": addr(&bot), "smtpPassword": password(&bot),
            "allowFrom": [addr(&format!("{scenario}-alice"))],
            "verifyDkim": false, "verifySpf": false,
            "allowedAttachmentTypes": ["application/pdf", "text/*"],
        });
        let mut s = EmailSettings::from_block(&block, data.join("media"), data.join("data"))
            .unwrap_or_else(|e| panic!("test settings: {e}"));
        s.extra_roots = vec![self.ca.clone()];
        s.system_roots = false;
        s.timeout = Duration::from_secs(20);
        s.idle_renew = Duration::from_secs(20);
        s.poll_interval = Duration::from_millis(300);
        s
    }

    /// Sends a message as `from_user` over SMTP (STARTTLS + AUTH), to `to` (an address).
    pub(crate) async fn send(&self, from_user: &str, message: lettre::Message) -> anyhow::Result<()> {
        use lettre::AsyncTransport as _;
        use lettre::transport::smtp::authentication::Credentials;
        use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
        let pem = std::fs::read(&self.ca)?;
        let tls = TlsParameters::builder("localhost".into())
            .certificate_store(CertificateStore::None)
            .add_root_certificate(Certificate::from_pem(&pem)?)
            .build_rustls()?;
        let transport = lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(self.smtp_port)
            .tls(Tls::Required(tls))
            .credentials(Credentials::new(addr(from_user), password(from_user)))
            .timeout(Some(Duration::from_secs(20)))
            .build();
        transport
            .send(message)
            .await
            .context("sending the test message")?;
        Ok(())
    }

    /// A logged-in IMAP session of `user` (INBOX selected), for checking mailboxes.
    pub(crate) async fn imap(&self, user: &str) -> anyhow::Result<Session<TlsStream<TcpStream>>> {
        let mut store = rustls::RootCertStore::empty();
        let pem = std::fs::read(&self.ca)?;
        for cert in
            <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_slice_iter(&pem)
        {
            store.add(cert?)?;
        }
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
        let tcp = TcpStream::connect(("127.0.0.1", self.imaps_port)).await?;
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(rustls::pki_types::ServerName::try_from("localhost")?, tcp)
            .await?;
        let mut client = async_imap::Client::new(tls);
        client.read_response().await?.context("no greeting")?;
        let mut session = client
            .login(addr(user), password(user))
            .await
            .map_err(|(e, _)| anyhow::anyhow!("test login as {user}: {e}"))?;
        session.select("INBOX").await?;
        Ok(session)
    }

    /// Every message in `user`'s INBOX: (uid, flags, raw message), fetched without changing flags.
    pub(crate) async fn messages(&self, user: &str) -> anyhow::Result<Vec<(u32, Vec<String>, Vec<u8>)>> {
        let mut s = self.imap(user).await?;
        let fetched: Vec<_> = s
            .uid_fetch("1:*", "(UID FLAGS BODY.PEEK[])")
            .await?
            .try_collect()
            .await
            .unwrap_or_default();
        let mut out: Vec<_> = fetched
            .iter()
            .map(|f| {
                (
                    f.uid.unwrap_or(0),
                    f.flags().map(|fl| format!("{fl:?}")).collect(),
                    f.body().unwrap_or_default().to_vec(),
                )
            })
            .collect();
        out.sort_by_key(|m| m.0);
        let _ = s.logout().await;
        Ok(out)
    }

    /// Polls `user`'s INBOX until `done` holds for its messages (bounded: 60 s).
    pub(crate) async fn wait_for<F>(
        &self,
        user: &str,
        what: &str,
        done: F,
    ) -> anyhow::Result<Vec<(u32, Vec<String>, Vec<u8>)>>
    where
        F: Fn(&[(u32, Vec<String>, Vec<u8>)]) -> bool,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let msgs = self.messages(user).await?;
            if done(&msgs) {
                return Ok(msgs);
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "{user}: {what} did not happen within 60 s; mailbox has {} message(s)\n{}",
                    msgs.len(),
                    self.dovecot_log()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for MailPeers {
    fn drop(&mut self) {
        self.stop_imap();
    }
}
