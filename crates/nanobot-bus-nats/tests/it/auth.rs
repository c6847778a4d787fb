//! Who may use the bus: the credentials NATS offers (a user and password, an NKey, a TLS client certificate),
//! and a server that lets a client without credentials publish on the bus's subjects refused unless the user
//! opts in. Each server is a real `nats-server` configured as its documentation says.

use std::path::{Path, PathBuf};

use anyhow::Result;
use nanobot_bus::{Bus, InboundMessage};
use nanobot_bus_nats::{AnonymousAccess, NatsBus, NatsBusError, NatsBusSettings, anonymous_access};
use nanobot_testkit::nats::NatsServer;

use crate::{next, settings, settle};

/// Connects, expecting the refusal of an open server.
async fn refused(s: NatsBusSettings) -> String {
    match NatsBus::connect(s).await {
        Err(e @ NatsBusError::OpenServer { .. }) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a server anyone may publish on was accepted"),
    }
}

/// Messages stored in the inbound stream, read through `url` (a client allowed to).
async fn inbound_messages(url: &str, options: async_nats::ConnectOptions) -> Result<u64> {
    let js = async_nats::jetstream::new(options.connect(url).await?);
    Ok(js.get_stream("NANOBOT_IN").await?.info().await?.state.messages)
}

/// A message goes round: published by one handle, taken and settled by the other.
async fn round_trip(bus: &NatsBus) -> Result<()> {
    bus.publish_inbound(InboundMessage::new("telegram", "1", "c1", "hello"))
        .await?;
    let d = next(bus).await?;
    assert_eq!(settle(d, nanobot_bus::Settlement::Done).await.content, "hello");
    Ok(())
}

#[tokio::test]
async fn an_open_server_is_refused_unless_the_user_opts_in() -> Result<()> {
    let Some(server) = NatsServer::start_open().await? else {
        return Ok(());
    };
    let e = refused(settings(&server)).await;
    assert!(
        e.contains(&server.url()) && e.contains("nanobot.in.*") && e.contains("allowAnonymous"),
        "{e}"
    );
    // The anonymous check left nothing behind for a replica to take.
    assert_eq!(
        inbound_messages(&server.url(), async_nats::ConnectOptions::new()).await?,
        0
    );

    let mut s = settings(&server);
    s.allow_anonymous = true;
    let bus = NatsBus::connect(s).await?;
    assert_eq!(
        inbound_messages(&server.url(), async_nats::ConnectOptions::new()).await?,
        0
    );
    round_trip(&bus).await?;
    let access = anonymous_access(&settings(&server), None).await?;
    assert_eq!(access, AnonymousAccess::Publishes);
    Ok(())
}

#[tokio::test]
async fn a_user_and_password_let_the_bus_in_and_a_stranger_is_turned_away() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    // In the URL, as the other tests give it.
    let bus = NatsBus::connect(settings(&server)).await?;
    round_trip(&bus).await?;
    assert_eq!(
        anonymous_access(&settings(&server), None).await?,
        AnonymousAccess::Refused
    );
    bus.close();
    drop(bus);

    // As fields: the password from the URL the server was given.
    let url = server.url();
    let password = url
        .split_once("nanobot:")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(p, _)| p.to_owned())
        .unwrap();
    let mut s = settings(&server);
    s.url = server.url_without_credentials();
    s.user = Some("nanobot".into());
    s.password = Some(password.as_str().into());
    let fields = NatsBus::connect(s.clone()).await?;
    round_trip(&fields).await?;

    // A wrong password is named as such, and never shown.
    s.password = Some("not-the-sekrit".into());
    let e = NatsBus::connect(s).await.unwrap_err().to_string();
    assert!(
        e.contains("cannot connect to NATS at") && e.contains("authorization"),
        "{e}"
    );
    assert!(!e.contains("not-the-sekrit") && !e.contains(&password), "{e}");
    Ok(())
}

#[tokio::test]
async fn an_nkey_user_signs_in_with_its_seed_and_another_key_is_turned_away() -> Result<()> {
    let user = nkeys::KeyPair::new_user();
    let config = format!(
        "authorization {{ users = [ {{ nkey: {} }} ] }}",
        user.public_key()
    );
    let Some(server) = NatsServer::start_with_config(&config).await? else {
        return Ok(());
    };
    let mut s = settings(&server);
    s.nkey_seed = Some(user.seed()?.as_str().into());
    let bus = NatsBus::connect(s.clone()).await?;
    round_trip(&bus).await?;
    assert_eq!(anonymous_access(&s, None).await?, AnonymousAccess::Refused);

    s.nkey_seed = Some(nkeys::KeyPair::new_user().seed()?.as_str().into());
    let e = NatsBus::connect(s).await.unwrap_err().to_string();
    assert!(e.contains("cannot connect to NATS at"), "{e}");
    Ok(())
}

/// A server where a client without credentials is the `guest` user, with `guest_permissions`.
fn guest_config(guest_permissions: &str) -> String {
    format!(
        "accounts {{ APP {{ jetstream: enabled, users = [ {{ user: bot, password: b0t-pw }}, \
         {{ user: guest, password: guest-pw, permissions: {guest_permissions} }} ] }} }}\nno_auth_user: guest"
    )
}

#[tokio::test]
async fn a_default_user_that_may_not_publish_on_the_bus_is_no_open_server_and_one_that_may_is() -> Result<()>
{
    // Let in without credentials, but allowed to publish nowhere: the bus runs, no opt-in needed.
    let Some(server) = NatsServer::start_with_config(&guest_config("{ publish: { deny: \">\" } }")).await?
    else {
        return Ok(());
    };
    let mut s = settings(&server);
    s.user = Some("bot".into());
    s.password = Some("b0t-pw".into());
    let bus = NatsBus::connect(s.clone()).await?;
    round_trip(&bus).await?;
    assert_eq!(anonymous_access(&s, None).await?, AnonymousAccess::CannotPublish);
    drop(bus);

    // Allowed to publish on the inbound subjects: that guest is anyone, so the server is refused.
    let Some(server) = NatsServer::start_with_config(&guest_config(
        "{ publish: { allow: [\"nanobot.in.>\", \"_INBOX.>\"] } }",
    ))
    .await?
    else {
        return Ok(());
    };
    let mut s = settings(&server);
    s.user = Some("bot".into());
    s.password = Some("b0t-pw".into());
    let e = refused(s).await;
    assert!(
        e.contains("lets a client without credentials publish on nanobot.in.*"),
        "{e}"
    );
    let bot = async_nats::ConnectOptions::new().user_and_password("bot".into(), "b0t-pw".into());
    assert_eq!(
        inbound_messages(&server.url(), bot).await?,
        0,
        "the probe is purged"
    );
    Ok(())
}

/// A certificate and its key (PEM files).
type Pair = (PathBuf, PathBuf);

/// A CA, a server certificate for 127.0.0.1 and a client certificate, signed by it: (ca, server, client).
fn certificates(dir: &Path) -> Result<(PathBuf, Pair, Pair)> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "nanobot-bus-nats test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let write = |name: &str, params: CertificateParams| -> Result<Pair> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        let paths = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&paths.0, cert.pem())?;
        std::fs::write(&paths.1, key.serialize_pem())?;
        Ok(paths)
    };
    let server = write("server", CertificateParams::new(vec!["127.0.0.1".to_string()])?)?;
    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client.distinguished_name.push(DnType::CommonName, "replica-1");
    let client = write("client", client)?;
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem())?;
    Ok((ca_path, server, client))
}

#[tokio::test]
async fn a_client_certificate_lets_the_bus_in_and_a_client_without_one_is_turned_away() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (ca, (cert, key), (client_cert, client_key)) = certificates(dir.path())?;
    let config = format!(
        "tls {{ cert_file: {cert:?}, key_file: {key:?}, ca_file: {ca:?}, verify: true, timeout: 5 }}"
    );
    let Some(server) = NatsServer::start_with_config(&config).await? else {
        return Ok(());
    };
    let mut s = settings(&server);
    s.tls_ca_file = Some(ca.clone());
    s.tls_cert = Some(client_cert);
    s.tls_key = Some(client_key);
    let bus = NatsBus::connect(s.clone()).await?;
    round_trip(&bus).await?;
    assert_eq!(anonymous_access(&s, None).await?, AnonymousAccess::Refused);

    // Without the certificate the bus itself is turned away, by name.
    s.tls_cert = None;
    s.tls_key = None;
    let e = NatsBus::connect(s).await.unwrap_err().to_string();
    assert!(e.contains("cannot connect to NATS at"), "{e}");
    Ok(())
}

/// A NATS JWT (`ed25519-nkey`, as `nsc` writes them) of `kind` for `subject`, signed by `issuer`, with `nats` as
/// its type-specific claims.
fn jwt(
    issuer: &nkeys::KeyPair,
    subject: &str,
    name: &str,
    kind: &str,
    mut nats: serde_json::Value,
) -> Result<String> {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    nats["type"] = kind.into();
    nats["version"] = 2.into();
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = serde_json::json!({
        "jti": format!("{}{iat}", name.to_uppercase()),
        "iat": iat,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let signed = format!(
        "{}.{}",
        b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#),
        b64(&serde_json::to_vec(&claims)?)
    );
    let signature = issuer.sign(signed.as_bytes())?;
    Ok(format!("{signed}.{}", b64(&signature)))
}

/// The JWT of `user` (`name`), signed by `account`, with no limits.
fn user_jwt(account: &nkeys::KeyPair, user: &nkeys::KeyPair, name: &str) -> Result<String> {
    let unlimited = serde_json::json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1});
    jwt(account, &user.public_key(), name, "user", unlimited)
}

/// A `.creds` file as `nsc generate creds` writes it: the user's JWT and NKey seed.
fn creds(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// Issue 42: a server in operator mode (accounts and users as signed JWTs, as `nsc` sets it up) lets the bus in
/// with a `credsFile`, JetStream included; a user of another operator is turned away, and so is a client
/// without credentials.
#[tokio::test]
async fn a_creds_file_lets_the_bus_into_an_operator_mode_server_and_a_stranger_is_turned_away() -> Result<()>
{
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "test-operator",
        "operator",
        serde_json::json!({}),
    )?;
    // JetStream is on for the account when its limits give it storage.
    let account_jwt = jwt(
        &operator,
        &account.public_key(),
        "nanobot",
        "account",
        serde_json::json!({"limits": {
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
            "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1
        }}),
    )?;
    let replica_jwt = user_jwt(&account, &user, "replica")?;
    // JetStream in operator mode needs the server's system account.
    let system = nkeys::KeyPair::new_account();
    let system_jwt = jwt(
        &operator,
        &system.public_key(),
        "SYS",
        "account",
        serde_json::json!({}),
    )?;
    let config = format!(
        "operator: {operator_jwt}\nsystem_account: {sys}\nresolver: MEMORY\n\
         resolver_preload: {{ {sys}: {system_jwt}, {acc}: {account_jwt} }}",
        sys = system.public_key(),
        acc = account.public_key()
    );
    let Some(server) = NatsServer::start_with_config(&config).await? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("replica.creds");
    std::fs::write(&file, creds(&replica_jwt, &user.seed()?))?;
    let mut s = settings(&server);
    s.creds_file = Some(file.clone());
    let bus = NatsBus::connect(s.clone()).await?;
    round_trip(&bus).await?;
    assert_eq!(anonymous_access(&s, None).await?, AnonymousAccess::Refused);

    // A user signed by an account this server does not know (another operator's): turned away, by name.
    let stranger_account = nkeys::KeyPair::new_account();
    let stranger = nkeys::KeyPair::new_user();
    let stranger_jwt = user_jwt(&stranger_account, &stranger, "stranger")?;
    let other = dir.path().join("stranger.creds");
    std::fs::write(&other, creds(&stranger_jwt, &stranger.seed()?))?;
    s.creds_file = Some(other);
    let e = NatsBus::connect(s).await.unwrap_err().to_string();
    assert!(
        e.contains("cannot connect to NATS at") && e.contains("authorization"),
        "{e}"
    );
    assert!(!e.contains(&stranger.seed()?), "{e}");
    Ok(())
}
