//! `nanobot_memory::MemorySync` over the shared files: two replicas with separate workspaces share their memory
//! files and their profile (`SOUL.md`, `USER.md`); history lines appended on both survive, a `MEMORY.md` or
//! `SOUL.md` rewritten on both keeps the stored version and the other as a conflict copy.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use nanobot_memory::{HistoryEntry, MemoryStore, MemorySync, ScopeKey, SyncReport};
use nanobot_store_nats::NatsFiles;
use nanobot_testkit::nats::NatsServer;
use nanobot_util::SharedFiles as _;

struct Replica {
    ws: tempfile::TempDir,
    files: Arc<NatsFiles>,
    sync: MemorySync,
}

impl Replica {
    async fn open(server: &NatsServer) -> Result<Self> {
        let ws = tempfile::Builder::new().prefix("h7-memory-").tempdir()?;
        let files = Arc::new(NatsFiles::open(&nanobot_bus_nats::NatsBusSettings::new(server.url())).await?);
        let sync = MemorySync::new(files.clone(), ws.path());
        Ok(Self { ws, files, sync })
    }

    fn store(&self) -> MemoryStore {
        MemoryStore::new(self.ws.path())
    }

    /// Syncs the shared memory on the blocking pool (where the agent loop calls it).
    async fn sync(&self) -> Result<SyncReport> {
        let sync = self.sync.clone();
        Ok(tokio::task::spawn_blocking(move || sync.sync(&ScopeKey::Shared)).await??)
    }

    fn history(&self) -> Result<Vec<HistoryEntry>> {
        Ok(self.store().read_history_after(0)?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lines_appended_on_two_replicas_both_survive_with_unique_cursors() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    a.sync().await?;
    b.sync().await?;
    a.store()
        .append_history("[2026-01-01 10:00] Alice likes tea.", Some("telegram:1"))?;
    a.sync().await?;
    b.sync().await?;
    assert_eq!(b.history()?.len(), 1, "B has A's first line");
    // Overlapping turns: both append from the same version.
    a.store()
        .append_history("[2026-01-02 10:00] from A", Some("telegram:1"))?;
    b.store()
        .append_history("[2026-01-02 10:01] from B", Some("slack:2"))?;
    assert_eq!(a.sync().await?, SyncReport::default());
    let report = b.sync().await?;
    assert_eq!(report.reapplied_lines, 1, "{report:?}");
    assert!(report.conflicts.is_empty(), "{report:?}");
    a.sync().await?;
    for (who, r) in [("A", &a), ("B", &b)] {
        let entries = r.history()?;
        let texts: Vec<&str> = entries.iter().map(|e| e.content.as_str()).collect();
        assert_eq!(
            texts,
            [
                "[2026-01-01 10:00] Alice likes tea.",
                "[2026-01-02 10:00] from A",
                "[2026-01-02 10:01] from B"
            ],
            "{who}"
        );
        let cursors: Vec<u64> = entries.iter().map(|e| e.cursor).collect();
        assert_eq!(cursors, [1, 2, 3], "{who}: cursors stay unique and increasing");
        assert_eq!(entries[2].session_key.as_deref(), Some("slack:2"), "{who}");
    }
    assert_eq!(
        std::fs::read(a.store().history_path())?,
        std::fs::read(b.store().history_path())?
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_rewritten_on_two_replicas_keeps_the_stored_one_and_the_other_as_a_conflict_copy()
-> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    // The same template in both homes, never published: not a conflict (only a change is published).
    for r in [&a, &b] {
        r.store().write_memory("# Long-term Memory\n")?;
        r.sync().await?;
    }
    a.store()
        .write_memory("# Long-term Memory\n- Alice likes tea\n")?;
    assert_eq!(a.sync().await?, SyncReport::default(), "A changed it alone");
    b.sync().await?;
    assert!(
        b.store().read_memory()?.contains("Alice likes tea"),
        "B has A's memory"
    );
    // Overlapping turns of two sessions rewrite it from the same version.
    a.store()
        .write_memory("# Long-term Memory\n- Alice likes tea\n- Alice moved to Oslo\n")?;
    b.store()
        .write_memory("# Long-term Memory\n- Alice likes tea\n- Bob plays chess\n")?;
    a.sync().await?;
    let report = b.sync().await?;
    let [copy] = report.conflicts.as_slice() else {
        panic!("one conflict copy: {report:?}");
    };
    assert!(
        b.store().read_memory()?.contains("Oslo"),
        "the stored version is kept"
    );
    assert!(
        std::fs::read_to_string(copy)?.contains("Bob plays chess"),
        "B's version is kept beside it"
    );
    let copy_name = copy.file_name().and_then(|n| n.to_str()).context("a file name")?;
    assert!(copy_name.starts_with("MEMORY.md.conflict-"), "{copy_name}");
    // Published too: every replica (and `nanobot store export`) can find it.
    let files = a.files.clone();
    let listed = tokio::task::spawn_blocking(move || files.list("memory/")).await??;
    assert!(listed.contains(&format!("memory/{copy_name}")), "{listed:?}");
    // Nothing more to settle: the next syncs are quiet on both.
    assert_eq!(b.sync().await?, SyncReport::default());
    assert_eq!(a.sync().await?, SyncReport::default());
    assert_eq!(a.store().read_memory()?, b.store().read_memory()?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profile_travels_with_every_sync_and_a_conflict_keeps_both_versions() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let soul = |r: &Replica| r.ws.path().join("SOUL.md");
    let user = |r: &Replica| r.ws.path().join("USER.md");
    // The same templates in both homes, never published: not a conflict.
    for r in [&a, &b] {
        std::fs::write(soul(r), "# Soul\n")?;
        std::fs::write(user(r), "# User\n")?;
        r.sync().await?;
    }
    // A's turn (in a scope of its own) learns who the user is; B's next turn, in the shared memory, has it.
    std::fs::write(user(&a), "# User\nAna, in Oslo.\n")?;
    let scoped = a.sync.clone();
    let report =
        tokio::task::spawn_blocking(move || scoped.sync(&ScopeKey::Chat("telegram:1".into()))).await??;
    assert_eq!(report, SyncReport::default());
    b.sync().await?;
    assert_eq!(std::fs::read_to_string(user(&b))?, "# User\nAna, in Oslo.\n");
    let files = a.files.clone();
    let listed = tokio::task::spawn_blocking(move || files.list("profile/")).await??;
    assert!(listed.contains(&"profile/USER.md".to_owned()), "{listed:?}");
    assert!(
        !listed.contains(&"profile/SOUL.md".to_owned()),
        "an unchanged template is not published: {listed:?}"
    );

    // Both rewrite SOUL.md from the same version: the stored one stays, B's is kept beside it.
    std::fs::write(soul(&a), "# Soul\nTerse.\n")?;
    std::fs::write(soul(&b), "# Soul\nChatty.\n")?;
    a.sync().await?;
    let report = b.sync().await?;
    let [copy] = report.conflicts.as_slice() else {
        panic!("one conflict copy: {report:?}");
    };
    assert_eq!(std::fs::read_to_string(soul(&b))?, "# Soul\nTerse.\n");
    assert_eq!(std::fs::read_to_string(copy)?, "# Soul\nChatty.\n");
    assert_eq!(copy.parent(), Some(b.ws.path()), "beside SOUL.md");
    let copy_name = copy.file_name().and_then(|n| n.to_str()).context("a file name")?;
    assert!(copy_name.starts_with("SOUL.md.conflict-"), "{copy_name}");
    let files = a.files.clone();
    let listed = tokio::task::spawn_blocking(move || files.list("profile/")).await??;
    assert!(listed.contains(&format!("profile/{copy_name}")), "{listed:?}");
    assert_eq!(b.sync().await?, SyncReport::default());
    assert_eq!(a.sync().await?, SyncReport::default());
    Ok(())
}

/// Writes a Dream record as Dream does (`memory/.dream/<version>.json`).
fn write_record(r: &Replica, version: u64, summary: &str) -> Result<()> {
    let dir = r.ws.path().join("memory/.dream");
    std::fs::create_dir_all(&dir)?;
    let record = serde_json::json!({
        "version": version, "kind": "dream", "timestamp": "2026-11-26 10:00", "summary": summary, "changes": []
    });
    std::fs::write(
        dir.join(format!("{version}.json")),
        serde_json::to_vec_pretty(&record)?,
    )?;
    Ok(())
}

/// The Dream records of a home: (version, summary), by version.
fn records(r: &Replica) -> Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(r.ws.path().join("memory/.dream"))? {
        let bytes = std::fs::read(e?.path())?;
        let record: nanobot_memory::DreamRecord = serde_json::from_slice(&bytes)?;
        out.push((record.version, record.summary));
    }
    out.sort();
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dream_records_travel_and_one_numbered_twice_is_renumbered() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let (a, b) = (Replica::open(&server).await?, Replica::open(&server).await?);
    let with_records = |r: &Replica| {
        let sync = r.sync.clone();
        tokio::task::spawn_blocking(move || sync.sync_with_records(&ScopeKey::Shared))
    };
    // A's Dream writes two records; B, at its next Dream (or /dream-log), has them.
    write_record(&a, 1, "first run on A")?;
    write_record(&a, 2, "second run on A")?;
    with_records(&a).await??;
    assert_eq!(with_records(&b).await??, SyncReport::default());
    assert_eq!(records(&b)?, records(&a)?);
    // A file there that is not a record Dream can read stays where it is, unshared.
    let odd = a.ws.path().join("memory/.dream/9.json");
    std::fs::write(&odd, "not a record")?;
    with_records(&a).await??;
    let files = a.files.clone();
    let listed = tokio::task::spawn_blocking(move || files.list("memory/.dream/")).await??;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(std::fs::read_to_string(&odd)?, "not a record");
    std::fs::remove_file(&odd)?;
    // An ordinary turn's sync does not carry them (they matter to Dream only).
    write_record(&a, 3, "third run on A")?;
    b.sync().await?;
    a.sync().await?;
    assert_eq!(records(&b)?.len(), 2);

    // Both write record 3 from the same state: A's is stored first, B's becomes 4.
    write_record(&b, 3, "a run on B")?;
    with_records(&a).await??;
    let report = with_records(&b).await??;
    assert_eq!(report.renumbered_records, 1, "{report:?}");
    let expected = vec![
        (1, "first run on A".to_owned()),
        (2, "second run on A".to_owned()),
        (3, "third run on A".to_owned()),
        (4, "a run on B".to_owned()),
    ];
    assert_eq!(records(&b)?, expected);
    with_records(&a).await??;
    assert_eq!(records(&a)?, expected, "A has B's record under its new number");
    Ok(())
}
