//! Bounded downloads and remote media behind the SSRF guard, against a real HTTP server on loopback.

use std::time::Duration;

use nanobot_channels::download::SsrfGuard;
use nanobot_channels::download::{RemoteMedia, read_body, save_body};
use nanobot_testkit::file_server::{Answer, FileServer as Server};

fn loopback_allowed() -> SsrfGuard {
    SsrfGuard::from_cidrs(&["127.0.0.0/8"]).unwrap()
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn internal_addresses_are_refused_before_any_request() {
    let server = Server::start(vec![("/a.png", Answer::ok(b"png"))]).await;
    let media = RemoteMedia::new(SsrfGuard::default());
    let err = media.fetch("test", &server.url("/a.png")).await.unwrap_err();
    assert!(err.to_string().contains("request rejected"), "{err}");
    let why = format!("{:?}", err);
    assert!(why.contains("blocked address"), "{why}");
    assert_eq!(server.hits("/a.png"), 0, "nothing was requested");
    for url in ["file:///etc/passwd", "ftp://127.0.0.1/x", "http:///nohost"] {
        assert!(media.fetch("test", url).await.is_err(), "{url} is refused");
    }
}

#[tokio::test]
async fn a_fetch_returns_the_body_its_name_and_type() {
    let server = Server::start(vec![("/pics/cat%20face.png", Answer::ok(b"\x89PNG data"))]).await;
    let media = RemoteMedia::new(loopback_allowed());
    let got = media
        .fetch("test", &server.url("/pics/cat%20face.png"))
        .await
        .unwrap();
    assert_eq!(got.bytes, b"\x89PNG data");
    assert_eq!(got.file_name, "cat_20face.png");
    assert_eq!(got.content_type.as_deref(), Some("image/png"));
}

#[tokio::test]
async fn redirects_follow_the_rules() {
    let target = Server::start(vec![("/final.png", Answer::ok(b"final"))]).await;
    let server = Server::start(vec![
        ("/same", Answer::redirect("/here.png")),
        ("/here.png", Answer::ok(b"here")),
        (
            "/away",
            Answer::redirect(&target.url("/final.png").replace("127.0.0.1", "localhost")),
        ),
        ("/loop", Answer::redirect("/loop")),
    ])
    .await;
    let off = RemoteMedia::new(loopback_allowed());
    let err = off.fetch("test", &server.url("/same")).await.unwrap_err();
    assert!(
        format!("{err:?}").contains("allowRemoteMediaRedirects"),
        "{err:?}"
    );
    assert_eq!(server.hits("/here.png"), 0);

    let on = RemoteMedia::new(loopback_allowed()).with_redirects(true, &[]);
    assert_eq!(
        on.fetch("test", &server.url("/same")).await.unwrap().bytes,
        b"here"
    );
    let err = on.fetch("test", &server.url("/away")).await.unwrap_err();
    assert!(format!("{err:?}").contains("another host (localhost)"), "{err:?}");
    assert_eq!(
        target.hits("/final.png"),
        0,
        "a cross-host hop is refused before it is made"
    );
    let err = on.fetch("test", &server.url("/loop")).await.unwrap_err();
    assert!(format!("{err:?}").contains("more than 3 redirects"), "{err:?}");
    assert_eq!(server.hits("/loop"), 4, "the first request and three redirects");

    let listed = RemoteMedia::new(loopback_allowed()).with_redirects(true, &["LOCALHOST".to_string()]);
    assert_eq!(
        listed.fetch("test", &server.url("/away")).await.unwrap().bytes,
        b"final"
    );
}

#[tokio::test]
async fn a_redirect_into_a_blocked_network_is_refused() {
    // The first server (127.0.0.2) is reachable through its whitelist entry; its redirect leads to 127.0.0.1,
    // which the redirect rules allow but the SSRF guard does not.
    let inner = Server::start(vec![("/secret", Answer::ok(b"secret"))]).await;
    let outer = Server::start_on(
        "127.0.0.2:0",
        vec![("/go", Answer::redirect(&inner.url("/secret")))],
    )
    .await;
    let guard = SsrfGuard::from_cidrs(&["127.0.0.2/32"]).unwrap();
    let media = RemoteMedia::new(guard).with_redirects(true, &["127.0.0.1".to_string()]);
    let err = media.fetch("test", &outer.url("/go")).await.unwrap_err();
    assert!(format!("{err:?}").contains("blocked address"), "{err:?}");
    assert_eq!(outer.hits("/go"), 1);
    assert_eq!(inner.hits("/secret"), 0, "the blocked hop is never requested");
}

#[tokio::test]
async fn bodies_over_the_limit_are_cut_off_whatever_the_server_claims() {
    let big = vec![7u8; 64 * 1024];
    let server = Server::start(vec![
        ("/honest", Answer::ok(&big)),
        ("/lying", Answer::ok(&big).without_length()),
        ("/small", Answer::ok(b"small")),
    ])
    .await;
    let media = RemoteMedia::new(loopback_allowed()).with_max_bytes(1024);
    for path in ["/honest", "/lying"] {
        let err = media.fetch("test", &server.url(path)).await.unwrap_err();
        assert!(err.is_too_large(), "{path}: {err:?}");
        assert!(
            nanobot_testkit::secrets::error_text(&err).contains("larger than 1024 bytes"),
            "{path}: {err:?}"
        );
    }
    assert_eq!(
        media.fetch("test", &server.url("/small")).await.unwrap().bytes,
        b"small"
    );

    let err = read_body("test", "the file", get(&server.url("/lying")).await, 1024)
        .await
        .unwrap_err();
    assert!(err.is_too_large(), "{err:?}");
    assert!(
        nanobot_testkit::secrets::error_text(&err).contains("the file is larger than 1024 bytes"),
        "{err:?}"
    );
    assert_eq!(
        read_body("test", "f", get(&server.url("/small")).await, 5)
            .await
            .unwrap(),
        b"small"
    );
}

#[tokio::test]
async fn saved_bodies_appear_whole_or_not_at_all() {
    let big = vec![1u8; 32 * 1024];
    let server = Server::start(vec![
        ("/big", Answer::ok(&big).without_length()),
        ("/ok", Answer::ok(b"content")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("sub/dir/file.bin");
    let err = save_body("test", "the file", get(&server.url("/big")).await, &dest, 1000)
        .await
        .unwrap_err();
    assert!(err.is_too_large(), "{err:?}");
    assert!(
        nanobot_testkit::secrets::error_text(&err).contains("larger than 1000 bytes"),
        "{err:?}"
    );
    assert!(!dest.exists(), "no file under the real name");
    assert!(
        !dir.path().join("sub/dir/file.bin.part").exists(),
        "the part file is removed"
    );

    let n = save_body("test", "the file", get(&server.url("/ok")).await, &dest, 1000)
        .await
        .unwrap();
    assert_eq!(n, 7);
    assert_eq!(std::fs::read(&dest).unwrap(), b"content");
}
