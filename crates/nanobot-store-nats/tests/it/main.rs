//! The shared files against a real `nats-server` (JetStream on loopback, a store of its own per test): two
//! `NatsFiles` with separate local directories are two replicas on two machines.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod cron;
mod files;
mod memory;
mod sealed;
mod sessions;

use std::path::{Path, PathBuf};

use anyhow::Result;
use nanobot_bus_nats::NatsBusSettings;
use nanobot_store_nats::NatsFiles;
use nanobot_testkit::nats::NatsServer;
use nanobot_util::{SharedFile, SharedFiles as _, SharedFilesError};

fn settings(server: &NatsServer) -> NatsBusSettings {
    NatsBusSettings::new(server.url())
}

/// A replica: its store connection and its own local directory.
pub(crate) struct Replica {
    pub(crate) files: NatsFiles,
    pub(crate) dir: tempfile::TempDir,
}

impl Replica {
    pub(crate) async fn open(server: &NatsServer) -> Result<Self> {
        Ok(Self {
            files: NatsFiles::open(&settings(server)).await?,
            dir: tempfile::Builder::new().prefix("h26-replica-").tempdir()?,
        })
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Pulls `name` on the blocking pool (where the storage crates call it).
    pub(crate) async fn pull(&self, name: &str) -> Result<bool, SharedFilesError> {
        let (files, name, path) = (self.files.clone(), name.to_owned(), self.path(name));
        tokio::task::spawn_blocking(move || files.pull(SharedFile::new(&name, &path)))
            .await
            .expect("pull task")
    }

    pub(crate) async fn push(&self, name: &str) -> Result<(), SharedFilesError> {
        let (files, name, path) = (self.files.clone(), name.to_owned(), self.path(name));
        tokio::task::spawn_blocking(move || files.push(SharedFile::new(&name, &path)))
            .await
            .expect("push task")
    }

    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<String>, SharedFilesError> {
        let (files, prefix) = (self.files.clone(), prefix.to_owned());
        tokio::task::spawn_blocking(move || files.list(&prefix))
            .await
            .expect("list task")
    }
}

pub(crate) fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

pub(crate) fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}
