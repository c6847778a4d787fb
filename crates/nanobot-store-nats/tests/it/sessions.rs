//! `nanobot_sessions::SessionStore` over the shared files: two stores with separate homes (two machines) serve
//! the same sessions; export and import move them to and from a home's JSONL layout.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use nanobot_sessions::{SessionError, SessionMessage, SessionStore, StoreOptions};
use nanobot_store_nats::{HomeLayout, NatsFiles};
use nanobot_testkit::nats::NatsServer;
use nanobot_util::{SharedFile, SharedFiles, SharedFilesError};
use serde_json::json;

/// A replica's home: its own data directory and workspace.
struct Home {
    data: tempfile::TempDir,
    workspace: tempfile::TempDir,
}

impl Home {
    fn new() -> Result<Self> {
        Ok(Self {
            data: tempfile::Builder::new().prefix("h26-home-").tempdir()?,
            workspace: tempfile::Builder::new().prefix("h26-ws-").tempdir()?,
        })
    }

    fn store(&self, shared: Option<Arc<dyn SharedFiles>>) -> Result<SessionStore> {
        let mut options = StoreOptions::default();
        if let Some(s) = shared {
            options = options.shared(s);
        }
        Ok(SessionStore::with_options(
            self.data.path(),
            self.workspace.path(),
            options,
        )?)
    }
}

async fn open(server: &NatsServer) -> Result<NatsFiles> {
    Ok(NatsFiles::open(&nanobot_bus_nats::NatsBusSettings::new(server.url())).await?)
}

fn texts(history: &[SessionMessage]) -> Vec<String> {
    history.iter().filter_map(SessionMessage::content_text).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_with_separate_homes_serve_one_session() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (ha, hb) = (Home::new()?, Home::new()?);
    let a = ha.store(Some(Arc::new(open(&server).await?)))?;
    let b = hb.store(Some(Arc::new(open(&server).await?)))?;
    assert_ne!(a.dir(), b.dir());
    let key = "telegram:42";

    // Written on A, read on B (which has never seen it), answered on B, read on A (whose cache is stale).
    a.append(key, vec![SessionMessage::new("user", "one")]).await?;
    assert_eq!(texts(&a.history(key, 50).await?), ["one"]);
    assert_eq!(texts(&b.history(key, 50).await?), ["one"]);
    b.append(key, vec![SessionMessage::new("assistant", "two")])
        .await?;
    assert_eq!(texts(&a.history(key, 50).await?), ["one", "two"]);
    assert_eq!(std::fs::read(a.path_for(key))?, std::fs::read(b.path_for(key))?);

    // A metadata change (appended record) and a compaction (whole rewrite) travel too.
    a.update_header(key, |h| {
        h.metadata.insert("topic".into(), json!("tests"));
    })
    .await?;
    assert_eq!(b.metadata(key).await?.get("topic"), Some(&json!("tests")));
    let mut whole = b.session(key).await?;
    whole.metadata.insert("compacted".into(), json!(true));
    b.save(whole).await?;
    assert_eq!(a.metadata(key).await?.get("compacted"), Some(&json!(true)));
    assert_eq!(std::fs::read(a.path_for(key))?, std::fs::read(b.path_for(key))?);

    // A message over 1 MiB: spilled to a side file, which B gets too.
    let big = "x".repeat(1024 * 1024 + 4096);
    a.append(key, vec![SessionMessage::new("user", big.clone())])
        .await?;
    let seen_on_b = b.history(key, 50).await?;
    let note = seen_on_b.last().and_then(SessionMessage::content_text).unwrap();
    assert!(
        note.contains("message shortened"),
        "{}",
        &note[note.len().saturating_sub(200)..]
    );
    let spill_a: Vec<_> = std::fs::read_dir(format!("{}.spill", a.path_for(key).display()))?.collect();
    let spill_b: Vec<_> = std::fs::read_dir(format!("{}.spill", b.path_for(key).display()))?.collect();
    assert_eq!((spill_a.len(), spill_b.len()), (1, 1));
    let on_b = std::fs::read_to_string(spill_b[0].as_ref().unwrap().path())?;
    assert_eq!(on_b, big);

    // A checkpoint written on A is read on B; cleared on B, gone on A.
    let cp = json!({"messages": [{"role": "user", "content": "three"}], "message_id": "m3"});
    a.write_checkpoint(key, &cp).await?;
    assert_eq!(b.read_checkpoint(key).await?, Some(cp));
    b.clear_checkpoint(key).await?;
    assert_eq!(a.read_checkpoint(key).await?, None);

    // B lists what A created; /new on A empties it for B; deleting on B removes it on A.
    a.append("api:other", vec![SessionMessage::new("user", "elsewhere")])
        .await?;
    let listed: Vec<String> = b.list_sessions().await?.into_iter().map(|i| i.key).collect();
    assert!(
        listed.contains(&"api:other".to_owned()) && listed.contains(&key.to_owned()),
        "{listed:?}"
    );
    let old = a.reset(key).await?;
    assert_eq!(old.messages.len(), 3);
    assert!(b.history(key, 50).await?.is_empty());
    b.delete(key).await?;
    assert!(!a.exists(key).await?);
    assert!(!a.path_for(key).exists());
    Ok(())
}

/// Lets another replica write just before this one publishes its first change: the race a conflict guards.
struct Interleaved {
    inner: NatsFiles,
    before_push: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl SharedFiles for Interleaved {
    fn pull(&self, file: SharedFile<'_>) -> Result<bool, SharedFilesError> {
        self.inner.pull(file)
    }

    fn push(&self, file: SharedFile<'_>) -> Result<(), SharedFilesError> {
        let hook = self.before_push.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.inner.push(file)
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, SharedFilesError> {
        self.inner.list(prefix)
    }
}

impl std::fmt::Debug for Interleaved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleaved")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_is_refused_and_the_replica_catches_up() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (ha, hb) = (Home::new()?, Home::new()?);
    let a = ha.store(Some(Arc::new(open(&server).await?)))?;
    let interleaved = Arc::new(Interleaved {
        inner: open(&server).await?,
        before_push: Mutex::new(None),
    });
    let b = hb.store(Some(interleaved.clone()))?;
    let key = "slack:C1";
    a.append(key, vec![SessionMessage::new("user", "q")]).await?;
    assert_eq!(texts(&b.history(key, 50).await?), ["q"]);

    // B appends; between its local write and its publish, A appends (B's copy is now stale).
    let (a2, runtime) = (a.clone(), tokio::runtime::Handle::current());
    *interleaved.before_push.lock().unwrap() = Some(Box::new(move || {
        runtime
            .block_on(a2.append("slack:C1", vec![SessionMessage::new("assistant", "from A")]))
            .unwrap();
    }));
    let err = b
        .append(key, vec![SessionMessage::new("assistant", "from B")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, SessionError::Shared(SharedFilesError::Conflict { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains("another replica changed it first"),
        "{err}"
    );
    // Nothing of B's write is anywhere; B serves A's version, and its retry lands after it.
    assert_eq!(texts(&b.history(key, 50).await?), ["q", "from A"]);
    b.append(key, vec![SessionMessage::new("assistant", "from B")])
        .await?;
    assert_eq!(texts(&a.history(key, 50).await?), ["q", "from A", "from B"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_the_jsonl_layout_and_import_publishes_a_home() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    // A home used without NATS, with two sessions and a checkpoint.
    let old = Home::new()?;
    let local = old.store(None)?;
    local
        .append("cli:direct", vec![SessionMessage::new("user", "before NATS")])
        .await?;
    local
        .append("telegram:7", vec![SessionMessage::new("user", "hello")])
        .await?;
    local.write_checkpoint("telegram:7", &json!({"step": 1})).await?;
    let files = open(&server).await?;
    let layout = HomeLayout::new().area("sessions", local.dir());
    let (f, l) = (files.clone(), layout.clone());
    let report = tokio::task::spawn_blocking(move || nanobot_store_nats::import(&f, &l, false)).await??;
    assert_eq!((report.published, report.unchanged), (3, 0), "{report:?}");
    // Importing again changes nothing.
    let (f, l) = (files.clone(), layout.clone());
    let again = tokio::task::spawn_blocking(move || nanobot_store_nats::import(&f, &l, false)).await??;
    assert_eq!((again.published, again.unchanged), (0, 3), "{again:?}");

    // A replica with an empty home serves them, and answers.
    let hr = Home::new()?;
    let replica = hr.store(Some(Arc::new(open(&server).await?)))?;
    assert_eq!(texts(&replica.history("cli:direct", 50).await?), ["before NATS"]);
    assert_eq!(
        replica.read_checkpoint("telegram:7").await?,
        Some(json!({"step": 1}))
    );
    replica
        .append(
            "telegram:7",
            vec![SessionMessage::new("assistant", "hi from the replica")],
        )
        .await?;

    // The old home, changed meanwhile, conflicts on import: the stored session is kept.
    local
        .append("telegram:7", vec![SessionMessage::new("user", "offline edit")])
        .await?;
    let (f, l) = (files.clone(), layout.clone());
    let conflicted = tokio::task::spawn_blocking(move || nanobot_store_nats::import(&f, &l, false)).await??;
    assert_eq!(
        conflicted.conflicts,
        vec![format!(
            "sessions/{}",
            local
                .path_for("telegram:7")
                .file_name()
                .unwrap()
                .to_string_lossy()
        )]
    );
    assert_eq!(
        texts(&replica.history("telegram:7", 50).await?),
        ["hello", "hi from the replica"]
    );

    // Export into a fresh home: the files are the replica's, byte for byte, in the Python nanobot's layout
    // (`sessions/<workspace id>/<base64url(key)>.jsonl`), and a plain store reads them.
    let fresh = Home::new()?;
    let plain = fresh.store(None)?;
    let (f, l) = (files.clone(), HomeLayout::new().area("sessions", plain.dir()));
    let exported = tokio::task::spawn_blocking(move || nanobot_store_nats::export(&f, &l, false)).await??;
    assert_eq!(exported.written, 3, "{exported:?}");
    for key in ["cli:direct", "telegram:7"] {
        assert_eq!(
            std::fs::read(plain.path_for(key))?,
            std::fs::read(replica.path_for(key))?
        );
        assert!(
            plain
                .path_for(key)
                .starts_with(fresh.data.path().join("sessions"))
        );
    }
    assert!(plain.path_for("cli:direct").ends_with("Y2xpOmRpcmVjdA.jsonl"));
    assert_eq!(
        texts(&plain.history("telegram:7", 50).await?),
        ["hello", "hi from the replica"]
    );
    // Exporting over the old home keeps its diverging file unless asked.
    let (f, l) = (files.clone(), layout.clone());
    let kept = tokio::task::spawn_blocking(move || nanobot_store_nats::export(&f, &l, false)).await??;
    assert_eq!(kept.conflicts, vec![local.path_for("telegram:7")]);
    local.invalidate_all().await;
    assert_eq!(
        texts(&local.history("telegram:7", 50).await?),
        ["hello", "offline edit"]
    );
    Ok(())
}
