//! Session namespaces, as the Python nanobot 0.3.5 lays them out.
//!
//! Each workspace owns one folder `<config dir>/sessions/<id>/`, where `<id>` (32 lowercase hex digits) is
//! kept in `<workspace>/.nanobot/workspace-id` and the folder records the workspace it belongs to in its
//! `.workspace` marker (the workspace's absolute path and a newline). 0.3.5 refuses a namespace that holds
//! data without a marker, so this module writes the marker exactly as it does and claims namespaces by the
//! same rules, under the same lock (`sessions/.workspace-migration.lock`, an advisory `flock`):
//!
//! * the id file exists → use it (it must be 32 hex digits and not a symlink);
//! * otherwise a namespace whose marker names this workspace is adopted (the id file was cleaned away);
//! * otherwise a new random id is created (exclusively, so two starters agree).
//!
//! Claiming the namespace then:
//!
//! * no folder yet → create it with its marker;
//! * folder without marker → write the marker. 0.3.5 refuses this when the folder has data; nanobot-rs
//!   before this version never wrote markers, so its folders are adopted (the id file already pointed at
//!   them, which is all the proof 0.3.5 would have had);
//! * marker names this workspace (or the same file by another path) → keep it;
//! * marker names a path that no longer exists → the workspace was moved: rewrite the marker;
//! * marker names another existing workspace → this one is a copy: it gets a fresh id (at most three tries).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, SessionError};
use crate::fsio;

/// File name of the marker inside a namespace folder.
pub const MARKER_FILE: &str = ".workspace";
/// File name of the lock taken while claiming, inside `<config dir>/sessions/`.
pub const MIGRATION_LOCK_FILE: &str = ".workspace-migration.lock";

/// A claimed namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// The id (32 lowercase hex digits).
    pub id: String,
    /// `<sessions root>/<id>`.
    pub dir: PathBuf,
    /// Whether a marker was added to a folder that had data but none (a home written by older nanobot-rs).
    pub adopted_unmarked: bool,
}

/// True for 32 lowercase hex digits, the only id 0.3.5 accepts.
pub fn is_valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Makes `path` absolute and resolves symlinks where it exists (like Python's `resolve(strict=False)`).
pub fn canonical(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    if let Ok(p) = fs::canonicalize(&abs) {
        return p;
    }
    // Resolve the longest existing ancestor, then append the rest.
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    while let Some(parent) = cur.parent() {
        if let Some(name) = cur.file_name() {
            rest.push(name.to_os_string());
        }
        if let Ok(mut p) = fs::canonicalize(parent) {
            for n in rest.iter().rev() {
                p.push(n);
            }
            return p;
        }
        cur = parent;
    }
    abs
}

/// Claims the namespace of `workspace` under `sessions_root` (`<config dir>/sessions`), creating the id file,
/// the folder and its marker as needed. Blocking I/O.
pub fn claim(sessions_root: &Path, workspace: &Path) -> Result<Namespace> {
    let workspace = canonical(workspace);
    fsio::create_dir_private(&workspace)?;
    fsio::create_dir_private(sessions_root)?;
    let lock_path = sessions_root.join(MIGRATION_LOCK_FILE);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| SessionError::io("open", &lock_path, e))?;
    lock.lock().map_err(|e| SessionError::io("lock", &lock_path, e))?;
    let result = claim_locked(sessions_root, &workspace);
    drop(lock);
    result
}

fn claim_locked(root: &Path, workspace: &Path) -> Result<Namespace> {
    let mut id = load_or_create_id(workspace, root)?;
    for _ in 0..3 {
        let dir = root.join(&id);
        let marker = dir.join(MARKER_FILE);
        if is_symlink(&dir) {
            return Err(invalid(&dir, "the session namespace must not be a symlink"));
        }
        if !dir.exists() {
            fsio::create_dir_private(&dir)?;
            write_marker(&dir, workspace)?;
            return Ok(Namespace {
                id,
                dir,
                adopted_unmarked: false,
            });
        }
        if is_symlink(&marker) {
            return Err(invalid(&marker, "the workspace marker must not be a symlink"));
        }
        if !marker.exists() {
            let has_data = fs::read_dir(&dir)
                .map_err(|e| SessionError::io("list", &dir, e))?
                .next()
                .is_some();
            write_marker(&dir, workspace)?;
            if has_data {
                tracing::info!(dir = %dir.display(), "added the workspace marker the Python nanobot needs");
            }
            return Ok(Namespace {
                id,
                dir,
                adopted_unmarked: has_data,
            });
        }
        let text = fs::read_to_string(&marker).map_err(|e| SessionError::io("read", &marker, e))?;
        let text = text.trim();
        if text.is_empty() {
            return Err(invalid(&marker, "the workspace marker is empty"));
        }
        let recorded = canonical(&expand_home(text));
        let ns = |id: String, dir: PathBuf| Namespace {
            id,
            dir,
            adopted_unmarked: false,
        };
        if recorded == workspace {
            return Ok(ns(id, dir));
        }
        if !recorded.exists() || same_file(&recorded, workspace) {
            // Moved (the id travelled with the workspace) or the same folder by another path.
            write_marker(&dir, workspace)?;
            return Ok(ns(id, dir));
        }
        // Both exist and differ: this workspace is a copy of that one. Give it its own namespace.
        id = uuid::Uuid::new_v4().simple().to_string();
        fsio::write_atomic(&id_path(workspace)?, format!("{id}\n").as_bytes())?;
    }
    Err(invalid(
        workspace,
        "could not allocate a session namespace of its own for this workspace",
    ))
}

fn id_path(workspace: &Path) -> Result<PathBuf> {
    let state = workspace.join(".nanobot");
    if is_symlink(&state) {
        return Err(invalid(
            &state,
            "the workspace state directory must not be a symlink",
        ));
    }
    fsio::create_dir_private(&state)?;
    Ok(state.join(crate::store::WORKSPACE_ID_FILE))
}

fn read_id(path: &Path) -> Result<String> {
    if is_symlink(path) {
        return Err(SessionError::WorkspaceId {
            path: path.to_path_buf(),
            reason: "it must not be a symlink".into(),
        });
    }
    let id = fs::read_to_string(path).map_err(|e| SessionError::io("read", path, e))?;
    let id = id.trim();
    if is_valid_id(id) {
        Ok(id.to_owned())
    } else {
        Err(SessionError::WorkspaceId {
            path: path.to_path_buf(),
            reason: format!(
                "{id:?} is not 32 lowercase hex digits; restore the original identifier before starting"
            ),
        })
    }
}

fn load_or_create_id(workspace: &Path, root: &Path) -> Result<String> {
    let path = id_path(workspace)?;
    if path.exists() || is_symlink(&path) {
        return read_id(&path);
    }
    if let Some(found) = find_namespace(workspace, root)? {
        fsio::write_atomic(&path, format!("{found}\n").as_bytes())?;
        return Ok(found);
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    match fsio::private_new().open(&path) {
        Ok(mut f) => {
            let written = f
                .write_all(format!("{id}\n").as_bytes())
                .and_then(|()| f.sync_all());
            if let Err(e) = written {
                let _ = fs::remove_file(&path);
                return Err(SessionError::io("write", &path, e));
            }
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_id(&path),
        Err(e) => Err(SessionError::io("create", &path, e)),
    }
}

/// The namespace whose marker names `workspace`, if exactly one does.
fn find_namespace(workspace: &Path, root: &Path) -> Result<Option<String>> {
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::io("list", root, e)),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        if !is_valid_id(&name) || is_symlink(&dir) || !dir.is_dir() {
            continue;
        }
        let marker = dir.join(MARKER_FILE);
        if is_symlink(&marker) || !marker.is_file() {
            continue;
        }
        let Ok(text) = fs::read_to_string(&marker) else {
            continue;
        };
        let recorded = canonical(&expand_home(text.trim()));
        if recorded == workspace || same_file(&recorded, workspace) {
            found.push(name);
        }
    }
    if found.len() > 1 {
        return Err(invalid(
            root,
            &format!(
                "several session namespaces claim workspace {}; remove the stale marker",
                workspace.display()
            ),
        ));
    }
    Ok(found.pop())
}

fn write_marker(dir: &Path, workspace: &Path) -> Result<()> {
    let mut text = workspace.as_os_str().to_string_lossy().into_owned();
    text.push('\n');
    fsio::write_atomic(&dir.join(MARKER_FILE), text.as_bytes())
}

fn expand_home(text: &str) -> PathBuf {
    // 0.3.5 writes absolute paths; `~` only appears in hand-edited markers. The process environment is not
    // read here (library rule), so `~` is left as is and compares unequal.
    PathBuf::from(text)
}

fn is_symlink(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (fs::metadata(a), fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        a == b
    }
}

fn invalid(path: &Path, what: &str) -> SessionError {
    SessionError::Namespace {
        path: path.to_path_buf(),
        what: what.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("home/sessions");
        let ws = t.path().join("ws");
        (t, root, ws)
    }

    #[test]
    fn new_workspace_gets_id_folder_and_marker() {
        let (_t, root, ws) = setup();
        let ns = claim(&root, &ws).unwrap();
        assert!(is_valid_id(&ns.id));
        let ws_c = canonical(&ws);
        assert_eq!(
            fs::read_to_string(ns.dir.join(MARKER_FILE)).unwrap(),
            format!("{}\n", ws_c.display())
        );
        assert_eq!(
            fs::read_to_string(ws.join(".nanobot/workspace-id")).unwrap(),
            format!("{}\n", ns.id)
        );
        assert_eq!(claim(&root, &ws).unwrap().id, ns.id);
    }

    #[test]
    fn unmarked_folder_with_data_is_adopted() {
        let (_t, root, ws) = setup();
        let id = "0123456789abcdef0123456789abcdef";
        fs::create_dir_all(ws.join(".nanobot")).unwrap();
        fs::write(ws.join(".nanobot/workspace-id"), format!("{id}\n")).unwrap();
        fs::create_dir_all(root.join(id)).unwrap();
        fs::write(root.join(id).join("cli_direct.jsonl"), "{}\n").unwrap();
        let ns = claim(&root, &ws).unwrap();
        assert_eq!(ns.id, id);
        assert!(ns.adopted_unmarked);
        assert!(root.join(id).join(MARKER_FILE).is_file());
    }

    #[test]
    fn lost_id_file_is_recovered_from_the_marker() {
        let (_t, root, ws) = setup();
        let first = claim(&root, &ws).unwrap();
        fs::remove_file(ws.join(".nanobot/workspace-id")).unwrap();
        assert_eq!(claim(&root, &ws).unwrap().id, first.id);
    }

    #[test]
    fn moved_workspace_keeps_its_namespace_and_copy_gets_a_new_one() {
        let (t, root, ws) = setup();
        let first = claim(&root, &ws).unwrap();
        let moved = t.path().join("moved");
        fs::rename(&ws, &moved).unwrap();
        let again = claim(&root, &moved).unwrap();
        assert_eq!(again.id, first.id);
        assert!(
            fs::read_to_string(again.dir.join(MARKER_FILE))
                .unwrap()
                .contains("moved")
        );
        // A copy while the original still exists.
        let copy = t.path().join("copy");
        fs::create_dir_all(copy.join(".nanobot")).unwrap();
        fs::copy(
            moved.join(".nanobot/workspace-id"),
            copy.join(".nanobot/workspace-id"),
        )
        .unwrap();
        let c = claim(&root, &copy).unwrap();
        assert_ne!(c.id, first.id);
        assert_eq!(
            fs::read_to_string(copy.join(".nanobot/workspace-id")).unwrap(),
            format!("{}\n", c.id)
        );
    }

    #[test]
    fn bad_id_and_symlinks_are_refused_by_name() {
        let (t, root, ws) = setup();
        fs::create_dir_all(ws.join(".nanobot")).unwrap();
        fs::write(ws.join(".nanobot/workspace-id"), "../../etc\n").unwrap();
        let e = claim(&root, &ws).unwrap_err().to_string();
        assert!(e.contains("workspace-id"), "{e}");
        let id = "fedcba9876543210fedcba9876543210";
        fs::write(ws.join(".nanobot/workspace-id"), format!("{id}\n")).unwrap();
        fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(t.path(), root.join(id)).unwrap();
        let e = claim(&root, &ws).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
    }
}
