//! With a deployment key (issue 42): every message of a shared file is sealed, and a client of the server without
//! the key can neither read a file nor change one, by forging, replaying or moving messages.

use anyhow::Result;
use async_nats::HeaderMap;
use nanobot_store_nats::NatsFiles;
use nanobot_testkit::nats::NatsServer;

use crate::{Replica, append, settings, write};

const KEY: &str = "the replicas' shared deployment key, 32+ characters";

async fn sealed(server: &NatsServer) -> Result<Replica> {
    let mut s = settings(server);
    s.key = Some(KEY.into());
    Ok(Replica {
        files: NatsFiles::open(&s).await?,
        dir: tempfile::Builder::new().prefix("h42-sealed-").tempdir()?,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_files_cannot_be_read_forged_replayed_or_moved_without_the_key() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (sealed(&server).await?, sealed(&server).await?);
    let name = "sessions/c2VhbGVk.jsonl";
    write(&a.path(name), b"{\"content\":\"the owner's words\"}\n");
    a.push(name).await?;
    append(&a.path(name), b"{\"content\":\"more words\"}\n");
    a.push(name).await?;
    assert!(b.pull(name).await?);
    let truth = std::fs::read(a.path(name))?;
    assert_eq!(std::fs::read(b.path(name))?, truth);

    // Passive reading: what the server holds is no plaintext.
    let client = server.client().await?;
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream(a.files.stream_name()).await?;
    let subject = a.files.subject_of(name)?;
    let put = stream.direct_get_next_for_subject(subject.as_str(), None).await?;
    let appended = stream
        .direct_get_next_for_subject(subject.as_str(), Some(put.sequence + 1))
        .await?;
    for m in [&put, &appended] {
        assert!(!contains(&m.payload, b"words"), "plaintext on the server");
    }

    let op = |m: &async_nats::jetstream::message::StreamMessage| {
        let mut h = HeaderMap::new();
        for k in ["Nanobot-Op", "Nanobot-Sealed"] {
            if let Some(v) = m.headers.get(k) {
                h.insert(k, v.as_str());
            }
        }
        h
    };
    // A plain message, as a client without the key would write one.
    let mut forged = HeaderMap::new();
    forged.insert("Nanobot-Op", "put");
    js.publish_with_headers(subject.clone(), forged, "{\"content\":\"forged\"}\n".into())
        .await?
        .await?;
    // The captured append, published again at the end; the captured put, moved to another file.
    js.publish_with_headers(subject.clone(), op(&appended), appended.payload.clone())
        .await?
        .await?;
    let other = "sessions/b3RoZXI.jsonl";
    js.publish_with_headers(a.files.subject_of(other)?, op(&put), put.payload.clone())
        .await?
        .await?;

    // Nothing of it is taken: not by a replica up to date, not by one rebuilding the file from the stream.
    assert!(!b.pull(name).await?, "nothing changed");
    assert_eq!(std::fs::read(b.path(name))?, truth);
    let c = sealed(&server).await?;
    assert!(c.pull(name).await?);
    assert_eq!(std::fs::read(c.path(name))?, truth);
    assert!(!c.pull(other).await?);
    assert!(
        !c.path(other).exists(),
        "a message moved to another file makes none"
    );

    // The replicas go on writing after what they refused.
    append(&b.path(name), b"{\"content\":\"three\"}\n");
    b.push(name).await?;
    assert!(a.pull(name).await?);
    assert_eq!(std::fs::read(a.path(name))?, std::fs::read(b.path(name))?);

    // Chunked, a part at a time, each sealed to follow the one before.
    let chunked = Replica {
        files: a.files.clone().with_chunk_size(16),
        dir: tempfile::Builder::new().prefix("h42-sealed-").tempdir()?,
    };
    let big = "sessions/Ymln.jsonl";
    let text: Vec<u8> = (0..40).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
    write(&chunked.path(big), &text);
    chunked.push(big).await?;
    assert!(b.pull(big).await?);
    assert_eq!(std::fs::read(b.path(big))?, text);

    // A replica without the key takes nothing sealed (it would write ciphertext into its files): of this file,
    // it sees only the plain forgery, which no keyed replica took.
    let plain = Replica::open(&server).await?;
    assert!(plain.pull(name).await?);
    assert_eq!(std::fs::read(plain.path(name))?, b"{\"content\":\"forged\"}\n");
    Ok(())
}
