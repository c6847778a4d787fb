//! The Python nanobot's queue of job changes, `<workspace>/cron/action.jsonl`.
//!
//! When the Python nanobot 0.3.5 runs without owning the scheduler (`nanobot agent`, the CLI), it does not
//! write `jobs.json`: it appends `{"action": "add"|"update"|"del", "params": …}` lines to `action.jsonl`
//! under the lock file `<workspace>/cron.lock` (the `cron` folder's path plus `.lock`), and the process that
//! owns the scheduler merges them. `params` is the job in snake_case (`every_ms`, `session_key`, …) for
//! `add`/`update`, `{"job_id": …}` for `del`.
//!
//! nanobot-rs merges the queue whenever it reads the store: under `cron.lock` (the same lock, so a Python
//! append waits), it applies the lines to `jobs.json` (its own read-modify-write, under `jobs.json.lock`),
//! then empties the queue. Lines that cannot be read are skipped with a warning naming the line, as 0.3.5
//! does; the queue is emptied only after `jobs.json` was written.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{CronError, CronJob, JobStore};

/// File name of the queue, beside `jobs.json`.
pub const ACTION_FILE: &str = "action.jsonl";

/// `<dir of jobs.json>.lock`, the lock 0.3.5 takes around the queue.
pub fn queue_lock_path(store_path: &Path) -> PathBuf {
    let dir = store_path.parent().unwrap_or(Path::new("."));
    let mut name = dir.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// One change read from the queue.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Upsert(Box<CronJob>),
    Delete(String),
}

fn parse_line(line: &str) -> Result<Option<Action>, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let Some(kind) = value.get("action").and_then(Value::as_str) else {
        return Ok(None);
    };
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    if kind == "del" {
        return Ok(params
            .get("job_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(|id| Action::Delete(id.to_owned())));
    }
    let job: CronJob = serde_json::from_value(params).map_err(|e| format!("`params`: {e}"))?;
    if job.id.is_empty() {
        return Err("`params.id` is empty".into());
    }
    Ok(Some(Action::Upsert(Box::new(job))))
}

/// Merges `action.jsonl` beside `store`'s `jobs.json` into it and empties the queue. Returns how many
/// changes were applied. A missing or empty queue costs one `stat`. The queue and its lock are opened beneath
/// the store's directory handle, like `jobs.json`.
pub fn merge(store: &JobStore) -> Result<usize, CronError> {
    let (files, jobs_rel) = store.confined();
    let queue_rel = jobs_rel.with_file_name(ACTION_FILE);
    let queue = files.display_path(&queue_rel);
    match files.symlink_metadata(&queue_rel) {
        Ok(Some(m)) if m.len() > 0 => {}
        _ => return Ok(0),
    }
    let lock_rel = queue_lock_path(jobs_rel);
    let _lock = files
        .open_lock(&lock_rel)
        .and_then(|f| f.lock().map(|()| f))
        .map_err(|source| CronError::Io {
            path: files.display_path(&lock_rel),
            source,
        })?;
    let text = match files.read_to_string(&queue_rel) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(0),
        Err(source) => return Err(CronError::Io { path: queue, source }),
    };
    let mut actions = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(Some(a)) => actions.push(a),
            Ok(None) => {}
            Err(e) => tracing::warn!(path = %queue.display(), line = i + 1, "cron queue line skipped: {e}"),
        }
    }
    let n = actions.len();
    if n > 0 {
        store.update(|file| {
            for action in &actions {
                match action {
                    Action::Delete(id) => {
                        file.remove(id);
                    }
                    Action::Upsert(job) => match file.job_mut(&job.id) {
                        Some(slot) => *slot = (**job).clone(),
                        None => file.jobs.push((**job).clone()),
                    },
                }
            }
            Ok(())
        })?;
        tracing::info!(path = %queue.display(), changes = n, "merged the Python nanobot's cron queue");
    }
    files
        .write_atomic(&queue_rel, b"")
        .map_err(|source| CronError::Io { path: queue, source })?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn python_queue_is_merged_and_emptied() {
        let t = tempfile::tempdir().unwrap();
        let cron = t.path().join("cron");
        fs::create_dir_all(&cron).unwrap();
        let store = JobStore::new(cron.join("jobs.json"));
        // Lines as 0.3.5's `_append_action` writes them (json.dumps of dataclasses.asdict(job)).
        let add = |id: &str| {
            format!(
                r#"{{"action": "add", "params": {{"id": "{id}", "name": "water", "enabled": true, "schedule": {{"kind": "every", "at_ms": null, "every_ms": 60000, "expr": null, "tz": null}}, "payload": {{"kind": "agent_turn", "message": "drink water", "deliver": false, "channel": null, "to": null, "channel_meta": {{}}, "session_key": "cli:direct", "origin_channel": "cli", "origin_chat_id": "direct", "origin_metadata": {{}}}}, "state": {{"next_run_at_ms": 1, "last_run_at_ms": null, "last_status": null, "last_error": null, "run_history": []}}, "created_at_ms": 1, "updated_at_ms": 1, "delete_after_run": false}}}}"#
            )
        };
        let text = format!(
            "{}\n{}\nnot json\n{{\"action\": \"del\", \"params\": {{\"job_id\": \"bbbb\"}}}}\n",
            add("aaaa"),
            add("bbbb")
        );
        fs::write(cron.join(ACTION_FILE), text).unwrap();
        assert_eq!(merge(&store).unwrap(), 3);
        let file = store.load().unwrap();
        assert_eq!(file.jobs.len(), 1);
        let job = &file.jobs[0];
        assert_eq!(job.id, "aaaa");
        assert_eq!(job.schedule.every_ms, Some(60000));
        assert_eq!(job.payload.session_key.as_deref(), Some("cli:direct"));
        assert_eq!(fs::read_to_string(cron.join(ACTION_FILE)).unwrap(), "");
        assert!(t.path().join("cron.lock").exists());
        assert_eq!(merge(&store).unwrap(), 0);
    }
}
