//! The file protocol itself: appends, rewrites, deletions, chunks, conflicts.

use anyhow::Result;
use nanobot_testkit::nats::NatsServer;
use nanobot_util::SharedFilesError;

use crate::{Replica, append, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_on_one_replica_is_read_on_another() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let name = "sessions/dGVsZWdyYW06MQ.jsonl";

    // Nothing stored yet: nothing pulled, nothing created.
    assert!(!a.pull(name).await?);
    assert!(!a.path(name).exists());

    write(&a.path(name), b"{\"_type\":\"metadata\"}\n");
    a.push(name).await?;
    assert!(b.pull(name).await?);
    assert_eq!(std::fs::read(b.path(name))?, std::fs::read(a.path(name))?);
    assert!(!b.pull(name).await?, "up to date: nothing changes");

    // An append travels as an append: B's copy keeps its identity.
    use std::os::unix::fs::MetadataExt as _;
    let ino = std::fs::metadata(b.path(name))?.ino();
    assert!(!a.pull(name).await?);
    append(&a.path(name), b"{\"role\":\"user\",\"content\":\"hi\"}\n");
    a.push(name).await?;
    assert!(b.pull(name).await?);
    assert_eq!(std::fs::read(b.path(name))?, std::fs::read(a.path(name))?);
    assert_eq!(std::fs::metadata(b.path(name))?.ino(), ino);

    // B writes next (after pulling): a rewrite, then A reads it.
    write(&b.path(name), b"{\"_type\":\"metadata\",\"compacted\":true}\n");
    b.push(name).await?;
    assert!(a.pull(name).await?);
    assert_eq!(
        std::fs::read(a.path(name))?,
        b"{\"_type\":\"metadata\",\"compacted\":true}\n"
    );
    assert_eq!(a.list("sessions/").await?, vec![name.to_owned()]);

    // A deletes; B's copy goes.
    std::fs::remove_file(a.path(name))?;
    a.push(name).await?;
    assert!(b.pull(name).await?);
    assert!(!b.path(name).exists());

    // A third replica, opened now, rebuilds what is left from the stream.
    write(&b.path(name), b"again\n");
    b.push(name).await?;
    append(&b.path(name), b"more\n");
    b.push(name).await?;
    let c = Replica::open(&server).await?;
    assert!(c.pull(name).await?);
    assert_eq!(std::fs::read(c.path(name))?, b"again\nmore\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_go_in_chunks_and_history_stays_bounded() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let name = "sessions/big.jsonl";
    // Over the server's maximum payload (1 MiB by default), as a whole file and as one append.
    let big: Vec<u8> = (0..(2 * 1024 * 1024 + 17))
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    assert!(big.len() > a.files.chunk_size());
    write(&a.path(name), &big);
    a.push(name).await?;
    append(&a.path(name), &big);
    a.push(name).await?;
    assert!(b.pull(name).await?);
    assert_eq!(std::fs::read(b.path(name))?, std::fs::read(a.path(name))?);

    // A rewrite purges what came before it: the subject holds the new file's chunks only.
    write(&b.path(name), b"small\n");
    b.push(name).await?;
    let js = async_nats::jetstream::new(server.client().await?);
    let stream = js.get_stream(a.files.stream_name()).await?;
    let subject = a.files.subject_of(name)?;
    let per_subject = stream.info_with_subjects(subject.as_str()).await?;
    use futures::TryStreamExt as _;
    let counts: Vec<(String, usize)> = per_subject.try_collect().await?;
    assert_eq!(counts, vec![(subject, 1)]);
    assert!(a.pull(name).await?);
    assert_eq!(std::fs::read(a.path(name))?, b"small\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_replica_gets_a_conflict_and_catches_up() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let name = "cron/jobs.json";
    write(&a.path(name), b"{\"version\":1,\"jobs\":[]}");
    a.push(name).await?;
    assert!(b.pull(name).await?);

    // Both change it from the same version: the second to publish loses, and its copy is the stored one.
    write(&a.path(name), b"{\"version\":1,\"jobs\":[\"a\"]}");
    a.push(name).await?;
    write(&b.path(name), b"{\"version\":1,\"jobs\":[\"b\"]}");
    let err = b.push(name).await.unwrap_err();
    assert!(matches!(err, SharedFilesError::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("cron/jobs.json"), "{err}");
    assert_eq!(std::fs::read(b.path(name))?, b"{\"version\":1,\"jobs\":[\"a\"]}");

    // A change made without pulling first (a file the store holds) conflicts too, and is replaced.
    let c = Replica::open(&server).await?;
    write(&c.path(name), b"{}");
    assert!(matches!(
        c.push(name).await,
        Err(SharedFilesError::Conflict { .. })
    ));
    assert_eq!(std::fs::read(c.path(name))?, b"{\"version\":1,\"jobs\":[\"a\"]}");

    // A local copy changed behind the store's back is replaced at the next pull.
    write(&b.path(name), b"edited locally");
    assert!(b.pull(name).await?);
    assert_eq!(std::fs::read(b.path(name))?, b"{\"version\":1,\"jobs\":[\"a\"]}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stopped_between_parts_leaves_nothing_half_written() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let name = "sessions/torn.jsonl";
    // The first part of a file's first version, and then nothing: its writer died.
    let js = async_nats::jetstream::new(server.client().await?);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nanobot-Op", "part");
    js.publish_with_headers(a.files.subject_of(name)?, headers, "half of it".into())
        .await?
        .await?;
    // Nothing is written from it; a local copy is left as it is.
    assert!(!b.pull(name).await?);
    assert!(!b.path(name).exists());
    write(&a.path(name), b"local\n");
    assert!(!a.pull(name).await?);
    assert_eq!(std::fs::read(a.path(name))?, b"local\n");
    // The next writer publishes over it, and that is what everyone reads.
    a.push(name).await?;
    assert!(b.pull(name).await?);
    assert_eq!(std::fs::read(b.path(name))?, b"local\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_copy_never_published_is_kept_when_the_stored_one_replaces_it() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let name = "sessions/both.jsonl";
    // B's home holds a file it never published (used before `import`); A creates the same file in the store.
    write(&b.path(name), b"only on b\n");
    write(&a.path(name), b"from a\n");
    a.push(name).await?;
    assert!(b.pull(name).await?);
    assert_eq!(std::fs::read(b.path(name))?, b"from a\n");
    let kept = b.dir.path().join("sessions/both.jsonl.replaced");
    assert_eq!(std::fs::read(&kept)?, b"only on b\n");

    // A stale copy (an older version, as after a restart) is replaced without a copy.
    append(&a.path(name), b"more\n");
    a.push(name).await?;
    let c = Replica::open(&server).await?;
    write(&c.path(name), b"from a\n");
    assert!(c.pull(name).await?);
    assert_eq!(std::fs::read(c.path(name))?, b"from a\nmore\n");
    assert!(!c.dir.path().join("sessions/both.jsonl.replaced").exists());
    Ok(())
}
