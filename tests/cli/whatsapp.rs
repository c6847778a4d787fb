//! `nanobot channels login whatsapp` in a pseudo-terminal, against the real WhatsApp bridge (Node.js) whose
//! WhatsApp connection is the crate's scripted socket; `channels status` and `doctor` on a WhatsApp block.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use expectrl::{Eof, Expect, Regex, Session};
use nanobot_testkit::TempHome;
use nanobot_testkit::peers::{node, peers_dir, require};

use crate::support::{nanobot, run, stdout};

const WAIT: Duration = Duration::from_secs(120);

/// `node` and the bridge's npm packages from `scripts/install-peers.sh`.
fn bridge_peers() -> Option<(PathBuf, PathBuf)> {
    let node = require("node", node())?;
    let modules = peers_dir().map(|d| d.join("whatsapp-bridge/node_modules"));
    let modules = require(
        "ws for the WhatsApp bridge (.ci/.peers/whatsapp-bridge)",
        modules.filter(|m| m.join("ws/package.json").is_file()),
    )?;
    Some((node, modules))
}

fn scripted_socket() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/nanobot-whatsapp/tests/scripted-socket.cjs")
}

/// Accepts the scripted socket's control connection (bounded).
fn accept(listener: TcpListener) -> TcpStream {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(listener.accept().map(|(s, _)| s));
    });
    rx.recv_timeout(WAIT)
        .expect("the bridge never connected to the control port")
        .expect("accept")
}

#[test]
fn login_shows_the_qr_code_in_the_terminal_and_reports_the_linked_account() {
    let Some((node, modules)) = bridge_peers() else {
        return;
    };
    let home = TempHome::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let control = listener.local_addr().unwrap().to_string();
    let mut cmd = nanobot(home.home());
    cmd.env("TERM", "xterm")
        .env("NANOBOT_WHATSAPP_NODE", &node)
        .env("NANOBOT_WHATSAPP_NODE_MODULES", &modules)
        .env("NANOBOT_WHATSAPP_SOCKET_MODULE", scripted_socket())
        .env("NANOBOT_WA_TEST_CONTROL", &control)
        .env("OPENAI_API_KEY", "sk-must-not-reach-the-bridge")
        .args(["channels", "login", "whatsapp"]);
    let mut p = Session::spawn(cmd).expect("spawn nanobot in a pty");
    p.set_expect_timeout(Some(WAIT));
    p.expect("WhatsApp login").unwrap();

    let stream = accept(listener);
    let mut reports = BufReader::new(stream.try_clone().unwrap()).lines();
    let hello: serde_json::Value = serde_json::from_str(&reports.next().unwrap().unwrap()).unwrap();
    assert_eq!(hello["hello"]["mode"], "login");
    let auth_dir = home.home().join(".nanobot/whatsapp-auth/baileys");
    assert_eq!(hello["hello"]["authDir"], auth_dir.display().to_string());
    // The bridge runs with what Node needs, never nanobot's secrets.
    let pid = hello["hello"]["pid"].as_u64().unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains("sk-must-not-reach-the-bridge"));

    let mut control = stream;
    writeln!(
        control,
        r#"{{"emit":"qr","qr":"2@Zm9vYmFyYmF6cXV4,c2VjcmV0a2V5,aWRlbnRpdHk=,YWR2"}}"#
    )
    .unwrap();
    p.expect("Linked devices").unwrap();
    // A QR code: many terminal lines of the same width made of half and full blocks.
    let block = p.expect(Regex("(?:[ █▀▄]{25,}\r?\n){12,}")).unwrap();
    let shown = String::from_utf8_lossy(&block[0]).into_owned();
    let lines: Vec<&str> = shown.lines().map(|l| l.trim_end_matches('\r')).collect();
    let width = lines[0].chars().count();
    assert!(lines.iter().all(|l| l.chars().count() == width), "{shown}");
    assert!(
        shown.contains('█') && (shown.contains('▀') || shown.contains('▄')),
        "{shown}"
    );

    writeln!(
        control,
        r#"{{"emit":"open","me":"4915550000001:7@s.whatsapp.net"}}"#
    )
    .unwrap();
    p.expect("WhatsApp linked as +4915550000001").unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(
        matches!(status, expectrl::process::unix::WaitStatus::Exited(_, 0)),
        "{status:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&auth_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // nanobot waited for its bridge: no process is left behind.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty(),
        "the bridge outlived `nanobot channels login`: {stat}"
    );
}

#[test]
fn login_of_a_token_channel_or_an_unknown_one_is_refused() {
    let home = TempHome::new();
    let o = run(home.home(), &["channels", "login", "telegram"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("`telegram` has no interactive login"),
        "{o:?}"
    );
    let o = run(home.home(), &["channels", "login", "icq"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown channel \"icq\""),
        "{o:?}"
    );
}

#[test]
fn status_and_doctor_cover_whatsapp() {
    let home = TempHome::new();
    assert!(run(home.home(), &["onboard"]).status.success());
    let path = home.config_path();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["channels"]["whatsapp"] = serde_json::json!({"enabled": true, "allowFrom": ["+4915550000002"]});
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();

    let o = run(home.home(), &["channels", "status"]);
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.starts_with("whatsapp"))
        .unwrap_or_default();
    assert!(
        line.contains('✓') && line.contains('✗'),
        "enabled, not linked: {text}"
    );
    assert!(!text.contains("not supported by this build"), "{text}");

    let o = run(home.home(), &["doctor"]);
    let text = stdout(&o);
    assert!(
        text.contains("whatsapp is enabled but no device is linked"),
        "{text}"
    );
    assert!(text.contains("nanobot channels login whatsapp"), "{text}");

    // Switching from the Python nanobot 0.3.5: doctor names its login and says what to do.
    let neonize = home.home().join(".nanobot/whatsapp-auth/neonize.db");
    std::fs::create_dir_all(neonize.parent().unwrap()).unwrap();
    std::fs::write(&neonize, "SQLite format 3\0").unwrap();
    let text = stdout(&run(home.home(), &["doctor"]));
    assert!(
        text.contains("the Python nanobot 0.3.5's login") && text.contains("neonize.db"),
        "{text}"
    );
    assert!(
        text.contains("so 0.3.5 still works when you switch back"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(&neonize).unwrap(),
        b"SQLite format 3\0",
        "left as it is"
    );

    // Once credentials exist the device counts as linked.
    let auth = home.home().join(".nanobot/whatsapp-auth/baileys");
    std::fs::create_dir_all(&auth).unwrap();
    std::fs::write(auth.join("creds.json"), "{\"me\":{}}").unwrap();
    let text = stdout(&run(home.home(), &["channels", "status"]));
    let line = text
        .lines()
        .find(|l| l.starts_with("whatsapp"))
        .unwrap_or_default();
    assert!(!line.contains('✗'), "{text}");
    let text = stdout(&run(home.home(), &["doctor"]));
    assert!(text.contains("whatsapp device linked"), "{text}");
}
