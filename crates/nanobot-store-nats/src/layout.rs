//! Moving between a home's directory layout and the stream: [`export`] writes the stored files where a home keeps
//! them (the Python nanobot's JSONL layout, byte for byte), [`import`] publishes a home's files.

use std::fs;
use std::path::{Path, PathBuf};

use nanobot_util::{SharedFile, SharedFiles, SharedFilesError};

use crate::{Folded, NatsFiles};

/// Where the stored files live in a home: each stored name `<area>/<rest>` is the file `<dir>/<rest>` of the
/// area's directory (`sessions` → `<home>/sessions/<workspace id>/`).
#[derive(Clone, Debug, Default)]
pub struct HomeLayout {
    areas: Vec<(String, PathBuf)>,
    files: Vec<(String, PathBuf)>,
}

impl HomeLayout {
    /// No areas yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stored names under `area/` are files of `dir`.
    #[must_use]
    pub fn area(mut self, area: &str, dir: impl Into<PathBuf>) -> Self {
        self.areas.push((area.trim_matches('/').to_owned(), dir.into()));
        self
    }

    /// The stored name `name` is the one file `path` (`cron/jobs.json` → `<workspace>/cron/jobs.json`, whose
    /// folder holds other files that are not shared).
    #[must_use]
    pub fn file(mut self, name: &str, path: impl Into<PathBuf>) -> Self {
        self.files.push((name.to_owned(), path.into()));
        self
    }

    /// The local file of the stored name `name`; `None` when no area holds it.
    pub fn local_of(&self, name: &str) -> Option<PathBuf> {
        if let Some((_, path)) = self.files.iter().find(|(n, _)| n == name) {
            return Some(path.clone());
        }
        let (area, rest) = name.split_once('/')?;
        let (_, dir) = self.areas.iter().find(|(a, _)| a == area)?;
        Some(dir.join(rest))
    }
}

/// What [`export`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportReport {
    /// Files written.
    pub written: usize,
    /// Files already there with the same bytes.
    pub unchanged: usize,
    /// Local files with other bytes, left as they were (nothing is overwritten unless asked).
    pub conflicts: Vec<PathBuf>,
    /// Stored names no area of the layout holds, and files deleted in the store: not written.
    pub skipped: Vec<String>,
}

/// What [`import`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// Files published.
    pub published: usize,
    /// Files the store already held with the same bytes.
    pub unchanged: usize,
    /// Files the store holds with other bytes, left as stored (nothing is overwritten unless asked).
    pub conflicts: Vec<String>,
}

/// Writes every stored file of the layout's areas into the home (atomically, mode 0600), byte for byte. A local
/// file with other bytes is a conflict and kept, unless `overwrite`. The stream is only read.
pub fn export(
    files: &NatsFiles,
    layout: &HomeLayout,
    overwrite: bool,
) -> Result<ExportReport, SharedFilesError> {
    let mut report = ExportReport::default();
    for name in files.list("")? {
        let Some(local) = layout.local_of(&name) else {
            report.skipped.push(name);
            continue;
        };
        let file = SharedFile::new(&name, &local);
        let bytes = match files.stored(&name)? {
            (Some(Folded::Whole(b)), _) => b,
            _ => {
                report.skipped.push(name);
                continue;
            }
        };
        match fs::read(&local) {
            Ok(old) if old == bytes => {
                report.unchanged += 1;
                continue;
            }
            Ok(_) if !overwrite => {
                report.conflicts.push(local);
                continue;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(crate::io_err(file, "read", e)),
        }
        crate::create_parent(file)?;
        nanobot_util::write_atomic(&local, &bytes).map_err(|e| SharedFilesError::Io {
            name: name.clone(),
            op: "write",
            path: local.clone(),
            source: std::io::Error::from(e),
        })?;
        report.written += 1;
    }
    Ok(report)
}

/// Publishes every file of the layout's areas (hidden files, `*.corrupt-*` and `*.replaced` copies and temporary
/// files left out)
/// and its single files.
/// A file the store holds with other bytes is a conflict and left as stored, unless `overwrite` (then the home's
/// version replaces it). Local files are only read.
pub fn import(
    files: &NatsFiles,
    layout: &HomeLayout,
    overwrite: bool,
) -> Result<ImportReport, SharedFilesError> {
    let mut report = ImportReport::default();
    let mut found = Vec::new();
    for (area, dir) in &layout.areas {
        walk(area, dir, dir, &mut found)?;
    }
    found.extend(layout.files.iter().filter(|(_, p)| p.is_file()).cloned());
    found.sort();
    for (name, local) in found {
        let bytes = fs::read(&local).map_err(|e| crate::io_err(SharedFile::new(&name, &local), "read", e))?;
        let (stored, seq) = files.stored(&name)?;
        match stored {
            Some(Folded::Whole(b)) if b == bytes => {
                report.unchanged += 1;
                continue;
            }
            Some(Folded::Whole(_)) if !overwrite => {
                report.conflicts.push(name);
                continue;
            }
            _ => {}
        }
        files.put_whole(SharedFile::new(&name, &local), seq)?;
        report.published += 1;
    }
    Ok(report)
}

/// The files under `dir` as `(stored name, path)`.
fn walk(
    area: &str,
    root: &Path,
    dir: &Path,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), SharedFilesError> {
    let listing_failed = |e| SharedFilesError::Io {
        name: area.to_owned(),
        op: "list",
        path: dir.to_owned(),
        source: e,
    };
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(listing_failed(e)),
    };
    for entry in entries {
        let entry = entry.map_err(listing_failed)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.')
            || name.contains(".corrupt-")
            || name.ends_with(".tmp")
            || name.ends_with(".replaced")
        {
            continue;
        }
        let path = entry.path();
        // A session's emptied checkpoint (its turn ended) holds nothing to move.
        if name.ends_with(".checkpoint.json") && entry.metadata().is_ok_and(|m| m.len() == 0) {
            continue;
        }
        let kind = entry.file_type().map_err(listing_failed)?;
        if kind.is_dir() {
            walk(area, root, &path, out)?;
        } else if kind.is_file() {
            let Ok(rel) = path.strip_prefix(root) else {
                continue;
            };
            let rel: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            out.push((format!("{area}/{}", rel.join("/")), path));
        }
    }
    Ok(())
}
