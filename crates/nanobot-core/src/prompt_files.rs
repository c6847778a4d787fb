//! [`PromptFiles`]: the workspace files of the system prompt (`AGENTS.md`, `SOUL.md`, `USER.md`, a scope's
//! `MEMORY.md`), read through the sandbox and kept while they are unchanged.
//!
//! Every turn builds the system prompt, and reading a file through the sandbox costs about ten system calls (the
//! workspace's handle, the fence, each directory beneath it, the file, its reads). A file whose identity, length,
//! modification and change times are what they were when it was last read is taken from memory instead: one
//! `lstat` per file and turn. A change by anyone (the user's editor, the model's `write_file`, a `git checkout`)
//! moves the change time, which no unprivileged program can set, so the next turn reads the file again. What the
//! prompt holds only ever comes from a read through the sandbox: a file replaced by a symbolic link or a hard
//! link to something outside is a new identity, read again, and refused there as before.

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use nanobot_tools::sandbox::{Opened, Sandbox};

/// The most of a prompt file that is read (the rest is left out).
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Files kept at most (each memory scope has its own `MEMORY.md`); past this the cache starts over.
const MAX_KEPT: usize = 256;

/// What tells two versions of a file apart without reading it (kept only once settled: [`nanobot_util::SETTLED`]).
type Stamp = nanobot_util::FileStamp;

#[derive(Debug)]
struct Kept {
    stamp: Stamp,
    text: Arc<str>,
    /// What [`PromptFiles::read_wanted`]'s test said of `text`, once asked.
    wanted: Option<bool>,
}

/// The prompt's files of one workspace. Shared by the clones of a context builder.
#[derive(Debug)]
pub(crate) struct PromptFiles {
    workspace: PathBuf,
    /// Resolved once the workspace exists (its real path costs a `readlink` per component); until then resolved
    /// again at each call.
    sandbox: OnceLock<Arc<Sandbox>>,
    kept: Mutex<HashMap<String, Kept>>,
    /// Reads through the sandbox so far (for tests: a file taken from memory adds none).
    reads: std::sync::atomic::AtomicUsize,
}

impl PromptFiles {
    pub(crate) fn new(workspace: PathBuf) -> Self {
        Self {
            workspace,
            sandbox: OnceLock::new(),
            kept: Mutex::default(),
            reads: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The workspace, restricted, for reading the prompt's files.
    pub(crate) fn sandbox(&self) -> Arc<Sandbox> {
        if let Some(s) = self.sandbox.get() {
            return s.clone();
        }
        let sandbox = Arc::new(Sandbox::new(&self.workspace, true));
        if self.workspace.is_dir() {
            let _ = self.sandbox.set(sandbox.clone());
        }
        sandbox
    }

    /// The text of the workspace file `rel` (at most 8 MiB), or `None` when it is missing, not a regular file,
    /// unreadable, or refused by the sandbox (a link leading outside, a hard link to another file).
    pub(crate) fn read(&self, rel: &str) -> Option<Arc<str>> {
        let sandbox = self.sandbox();
        let stamp = match std::fs::symlink_metadata(sandbox.workspace_real().join(rel)) {
            Ok(m) => Stamp::of(&m),
            // Nothing there: nothing to read (the sandbox would find nothing either).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget(rel);
                return None;
            }
            Err(_) => return self.read_through(&sandbox, rel).map(|(_, text)| text),
        };
        if let Some(k) = self.lock().get(rel)
            && k.stamp == stamp
        {
            return Some(k.text.clone());
        }
        let started = SystemTime::now();
        let Some((opened, text)) = self.read_through(&sandbox, rel) else {
            self.forget(rel);
            return None;
        };
        // Kept only when the file read is the one stamped (not replaced in between) and has been left alone
        // long enough for its times to tell a later change apart.
        if opened == (stamp.dev, stamp.ino) && stamp.settled_before(started) {
            let mut kept = self.lock();
            if kept.len() >= MAX_KEPT && !kept.contains_key(rel) {
                kept.clear();
            }
            kept.insert(
                rel.to_owned(),
                Kept {
                    stamp,
                    text: text.clone(),
                    wanted: None,
                },
            );
        } else {
            self.forget(rel);
        }
        Some(text)
    }

    /// The text of the workspace file `rel` (as [`PromptFiles::read`]) when `wanted` says so of it (not blank,
    /// not an unedited template: a SHA-256 of the text). `wanted` runs once per version of the file, not at every
    /// turn (the answer is kept with the kept file), so `rel` must always be asked with the same test.
    pub(crate) fn read_wanted(&self, rel: &str, wanted: impl FnOnce(&str) -> bool) -> Option<Arc<str>> {
        let text = self.read(rel)?;
        let mut kept = self.lock();
        let keep = match kept.get_mut(rel).filter(|k| Arc::ptr_eq(&k.text, &text)) {
            Some(k) => *k.wanted.get_or_insert_with(|| wanted(&text)),
            // Not kept (changed lately): asked each time, as it is read each time.
            None => wanted(&text),
        };
        keep.then_some(text)
    }

    /// How many times a file was read through the sandbox.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads `rel` beneath the workspace's handle; the file's `(dev, ino)` and its text.
    fn read_through(&self, sandbox: &Sandbox, rel: &str) -> Option<((u64, u64), Arc<str>)> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Opened::File(f) = sandbox.open_read(rel).ok()? else {
            return None;
        };
        if !f.meta.is_file() {
            return None;
        }
        let len = f.meta.len().min(MAX_FILE_BYTES);
        let mut text = String::with_capacity(usize::try_from(len).unwrap_or(0));
        (&f.file).take(MAX_FILE_BYTES).read_to_string(&mut text).ok()?;
        Some(((f.meta.dev(), f.meta.ino()), text.into()))
    }

    fn forget(&self, rel: &str) {
        self.lock().remove(rel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        nanobot_util::lock(&self.kept)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Sets a file's modification time (and so its change time to now) to `secs_ago`; a file written by a test
    /// is otherwise too recent to be kept.
    fn age(path: &std::path::Path, secs_ago: u64) {
        let t = SystemTime::now() - Duration::from_secs(secs_ago);
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(t).unwrap();
    }

    /// The change time cannot be set back: a file changed now stays "recent" for [`nanobot_util::SETTLED`]. These tests
    /// compare stamps taken now with [`Stamp::settled_before`] at a time after that instead of waiting.
    fn stamp_of(path: &std::path::Path) -> Stamp {
        Stamp::of(&std::fs::symlink_metadata(path).unwrap())
    }

    /// Reads `rel` and keeps it as a read two seconds after its last change would (the test cannot wait for the
    /// change time to age); the identity read is the one stamped.
    fn keep_as_settled(files: &PromptFiles, rel: &str, path: &std::path::Path) {
        let (id, text) = files.read_through(&files.sandbox(), rel).unwrap();
        let stamp = stamp_of(path);
        assert_eq!(id, (stamp.dev, stamp.ino));
        files.lock().insert(
            rel.into(),
            Kept {
                stamp,
                text,
                wanted: None,
            },
        );
    }

    #[test]
    fn a_recent_file_is_read_again_at_every_turn_and_changes_show_at_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("SOUL.md"), "be kind").unwrap();
        let files = PromptFiles::new(dir.path().to_owned());
        assert_eq!(files.read("SOUL.md").as_deref(), Some("be kind"));
        assert_eq!(files.read("SOUL.md").as_deref(), Some("be kind"));
        assert_eq!(files.reads(), 2, "a file changed just now is not kept");
        // Same length, written again at once: still seen.
        std::fs::write(dir.path().join("SOUL.md"), "be rude").unwrap();
        assert_eq!(files.read("SOUL.md").as_deref(), Some("be rude"));
    }

    #[test]
    fn a_settled_file_is_kept_until_it_changes_and_a_missing_one_costs_no_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("USER.md");
        std::fs::write(&p, "Name: Ada").unwrap();
        // Last modified a minute ago, so that the write below gives it another modification time whatever the
        // clock's step.
        age(&p, 60);
        let files = PromptFiles::new(dir.path().to_owned());
        keep_as_settled(&files, "USER.md", &p);
        let before = files.reads();
        assert_eq!(files.read("USER.md").as_deref(), Some("Name: Ada"));
        assert_eq!(files.reads(), before, "an unchanged file is taken from memory");
        // Changed (same length): the change time moves, the file is read again.
        std::fs::write(&p, "Name: Bob").unwrap();
        assert_eq!(files.read("USER.md").as_deref(), Some("Name: Bob"));
        assert_eq!(files.reads(), before + 1);
        // Removed: gone from the prompt, and nothing to read.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(files.read("USER.md"), None);
        assert_eq!(files.read("AGENTS.md"), None);
        assert_eq!(files.reads(), before + 1);
    }

    #[test]
    fn a_file_left_out_is_checked_once_per_version() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("USER.md");
        std::fs::write(&p, "  \n").unwrap();
        age(&p, 60);
        let files = PromptFiles::new(dir.path().to_owned());
        keep_as_settled(&files, "USER.md", &p);
        assert_eq!(
            files.read_wanted("USER.md", |t| !t.trim().is_empty()),
            None,
            "blank"
        );
        // The check is kept with the text it was made on: the same text (the kept one) is not checked again.
        let kept = files.read("USER.md").unwrap();
        let checked = files
            .lock()
            .get("USER.md")
            .map(|k| (k.text.clone(), k.wanted))
            .unwrap();
        assert!(Arc::ptr_eq(&checked.0, &kept) && checked.1 == Some(false));
        // Changed: checked anew.
        std::fs::write(&p, "Name: Ada").unwrap();
        assert_eq!(
            files.read_wanted("USER.md", |t| !t.trim().is_empty()).as_deref(),
            Some("Name: Ada")
        );
        assert_eq!(
            files.read_wanted("USER.md", |t| !t.trim().is_empty()).as_deref(),
            Some("Name: Ada")
        );
        std::fs::remove_file(&p).unwrap();
        assert_eq!(files.read_wanted("USER.md", |t| !t.trim().is_empty()), None);
    }

    #[test]
    fn a_kept_file_replaced_by_a_link_to_an_outside_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("config.json");
        std::fs::write(&secret, "{\"apiKey\": \"sk-secret\"}").unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let p = ws.join("SOUL.md");
        std::fs::write(&p, "be kind").unwrap();
        let files = PromptFiles::new(ws.clone());
        keep_as_settled(&files, "SOUL.md", &p);
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&secret, &p).unwrap();
        assert_eq!(files.read("SOUL.md"), None);
        // A hard link (same file system) to the outside file: a new identity, read again, refused.
        std::fs::remove_file(&p).unwrap();
        if std::fs::hard_link(&secret, &p).is_ok() {
            assert_eq!(files.read("SOUL.md"), None);
        }
    }
}
