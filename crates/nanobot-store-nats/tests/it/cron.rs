//! `nanobot_cron::JobStore` over the shared files: a job added on one replica is seen on another, and two
//! replicas' changes made from one version do not overwrite each other.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use nanobot_cron::{CronError, CronPayload, CronSchedule, CronService, JobStore, NewJob};
use nanobot_store_nats::NatsFiles;
use nanobot_testkit::nats::NatsServer;
use nanobot_util::SharedFilesError;

/// A job that runs `message` every minute.
fn every_minute(message: impl Into<String>) -> NewJob {
    NewJob::new(
        CronSchedule::every(Duration::from_secs(60)),
        CronPayload::agent_turn(message),
    )
}

fn service(store: JobStore) -> CronService {
    CronService::new(store, Arc::new(|_job| Box::pin(async { Ok(String::new()) })))
}

async fn replica(server: &NatsServer) -> Result<(tempfile::TempDir, Arc<NatsFiles>)> {
    let ws = tempfile::Builder::new().prefix("h26-cron-").tempdir()?;
    let files = NatsFiles::open(&nanobot_bus_nats::NatsBusSettings::new(server.url())).await?;
    Ok((ws, Arc::new(files)))
}

/// Replica A's cron service and replica B's store, with separate homes, over one server; A has added one job.
struct TwoStores {
    _server: NatsServer,
    _homes: (tempfile::TempDir, tempfile::TempDir),
    a: CronService,
    b: JobStore,
    first: nanobot_cron::CronJob,
}

/// `None` without a NATS server to run.
async fn two_stores_with_a_job() -> Result<Option<TwoStores>> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(None);
    };
    let ((ws_a, fa), (ws_b, fb)) = (replica(&server).await?, replica(&server).await?);
    let a = service(JobStore::new(ws_a.path().join("cron/jobs.json")).with_shared(fa));
    let b = JobStore::new(ws_b.path().join("cron/jobs.json")).with_shared(fb);
    let first = a.add(every_minute("one"))?;
    Ok(Some(TwoStores {
        _server: server,
        _homes: (ws_a, ws_b),
        a,
        b,
        first,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_added_on_one_replica_is_seen_on_another() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let ((ws_a, fa), (ws_b, fb)) = (replica(&server).await?, replica(&server).await?);
    let path = |ws: &tempfile::TempDir| ws.path().join("cron/jobs.json");
    let (pa, pb) = (path(&ws_a), path(&ws_b));
    let (a, b) = tokio::task::spawn_blocking(move || {
        (
            service(JobStore::new(pa).with_shared(fa)),
            service(JobStore::new(pb).with_shared(fb)),
        )
    })
    .await?;
    // The stores are used from async code, as the cron tool and the scheduler do.
    let job = a.add(
        NewJob::new(
            CronSchedule::every(Duration::from_secs(3600)),
            CronPayload::agent_turn("water the plants"),
        )
        .with_name("plants"),
    )?;
    let on_b = b.list()?;
    assert_eq!(
        on_b.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        [job.id.as_str()]
    );
    assert_eq!(std::fs::read(path(&ws_a))?, std::fs::read(path(&ws_b))?);

    // B removes it; A no longer lists it. B adds one; A sees it next to nothing else.
    assert_eq!(b.remove(&job.id)?.id, job.id);
    assert!(a.list()?.is_empty());
    let second = b.add(every_minute("stretch"))?;
    let on_a: Vec<String> = a.list()?.into_iter().map(|j| j.id).collect();
    assert_eq!(on_a, [second.id]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_on_a_stale_copy_is_made_again_on_top_and_nothing_is_lost() -> Result<()> {
    let Some(two) = two_stores_with_a_job().await? else {
        return Ok(());
    };
    let (sa, b, first) = (&two.a, &two.b, &two.first);
    // B changes the store from the version it has, while A adds a job in between (inside B's first attempt).
    let mut runs = 0;
    b.update(|file| {
        runs += 1;
        if runs == 1 {
            sa.add(every_minute("two")).unwrap();
        }
        // Each run sees what is stored: the second sees A's new job.
        assert_eq!(file.jobs.len(), runs);
        file.job_mut(&first.id).unwrap().name = "renamed on B".into();
        Ok(())
    })?;
    assert_eq!(runs, 2, "B's change is made again once, on A's version");
    // Both of A's jobs are there, on both replicas, with B's change on top.
    for jobs in [sa.list()?, b.load()?.jobs] {
        assert_eq!(jobs.len(), 2);
        assert!(jobs.iter().any(|j| j.name == "renamed on B"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_loses_every_race_gives_up_and_stores_nothing() -> Result<()> {
    let Some(two) = two_stores_with_a_job().await? else {
        return Ok(());
    };
    let (sa, b, first) = (&two.a, &two.b, &two.first);
    // A changes the store inside every one of B's attempts.
    let mut runs = 0;
    let err = b
        .update(|file| {
            runs += 1;
            sa.add(every_minute(format!("from A, during B's attempt {runs}")))
                .unwrap();
            file.job_mut(&first.id).unwrap().name = "renamed on B".into();
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(err, CronError::Shared(SharedFilesError::Conflict { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("cron/jobs.json"), "{err}");
    assert_eq!(runs, nanobot_cron::SHARED_CHANGE_ATTEMPTS as usize);
    // Every one of A's jobs is stored and B's copy is brought up to them; B's change is not.
    for jobs in [sa.list()?, b.load()?.jobs] {
        assert_eq!(jobs.len(), 1 + runs);
        assert!(jobs.iter().all(|j| j.name != "renamed on B"));
    }
    Ok(())
}
