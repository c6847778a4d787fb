//! [`FileStamp`]: what tells two versions of a file (or directory) apart without reading it, and when that is
//! enough to trust.

use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, SystemTime};

/// A stamp taken less than this after the file's last change is not trusted to tell a later change apart. File
/// systems keep times in steps (the kernel's clock tick; a second on some), so a file written again within the
/// same step as an earlier write can keep its times and length: a cache keyed by a stamp keeps only what was
/// read from a file left alone this long, and reads a recent file again each time.
pub const SETTLED: Duration = Duration::from_secs(2);

/// A file's identity, length, modification time and change time. A change by anyone (an editor, a `git
/// checkout`, a rename over it) moves the change time, which no unprivileged program can set back, so equal
/// stamps of a settled file ([`FileStamp::settled_before`]) mean the same contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileStamp {
    /// Device of the file.
    pub dev: u64,
    /// Inode of the file.
    pub ino: u64,
    /// Length in bytes.
    pub len: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Change time (seconds, nanoseconds).
    pub ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of what `m` describes.
    pub fn of(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// True when both times are at least [`SETTLED`] before `t` (a time before the file was read).
    pub fn settled_before(&self, t: SystemTime) -> bool {
        let Ok(since_epoch) = t.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let Some(limit) = since_epoch.checked_sub(SETTLED) else {
            return false;
        };
        let before = |(s, ns): (i64, i64)| {
            u64::try_from(s).is_ok_and(|s| {
                let ns = u32::try_from(ns).unwrap_or(u32::MAX).min(999_999_999);
                Duration::new(s, ns) <= limit
            })
        };
        before(self.mtime) && before(self.ctime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_within_the_settling_time_is_not_settled() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "x").unwrap();
        let s = FileStamp::of(&std::fs::symlink_metadata(&p).unwrap());
        assert!(!s.settled_before(SystemTime::now()));
        assert!(s.settled_before(SystemTime::now() + SETTLED + Duration::from_secs(1)));
        assert!(!s.settled_before(SystemTime::UNIX_EPOCH));
    }
}
