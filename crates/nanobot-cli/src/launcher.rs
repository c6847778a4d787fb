//! Ending with the program that launched this one. The Python wheel's `nanobot.cli.commands.app` runs the
//! `nanobot` executable as a child and puts its own pid in [`LAUNCHER_PID_VAR`]; a harness that kills that
//! Python process (SIGKILL on a timeout included, which no Python code can react to) must not leave this
//! program running, holding the harness's pipes and finishing a turn nobody waits for.
//!
//! At start-up ([`bind_to_launcher`], called by the binary before anything else): on Linux the kernel is asked
//! to send this process SIGKILL when its parent ends (`PR_SET_PDEATHSIG`), then the parent is checked to still
//! be the launcher (it may have died before the request was made: then nothing would ever send the signal).
//! Elsewhere a watcher thread polls the parent pid instead. The variable never reaches the programs this one
//! starts ([`CliEnv::from_process`](crate::CliEnv::from_process) drops it; the background gateway is
//! started without it), so they are not bound to a launcher that is not their parent.

use std::ffi::OsStr;

use nix::unistd::{Pid, getppid};

/// The environment variable in which a launcher passes its process id.
pub const LAUNCHER_PID_VAR: &str = "NANOBOT_LAUNCHER_PID";

/// The exit status when the launcher was already gone at start-up: 128 + SIGKILL, as if the parent-death
/// signal had ended the process.
pub const EXIT_LAUNCHER_GONE: u8 = 137;

/// What [`bind_to_launcher`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherBinding {
    /// No launcher named (the variable is unset or not a process id): nothing was changed.
    NotLaunched,
    /// The launcher is this process's parent: this process now ends when it does.
    Bound,
    /// The named launcher is alive but is not this process's parent: the variable was inherited from further
    /// up, so it is ignored (nothing bound).
    Stale,
    /// The launcher has already ended: the caller exits at once, with [`EXIT_LAUNCHER_GONE`].
    Gone,
}

/// Binds this process's life to the launcher named by `launcher_pid` (the value of [`LAUNCHER_PID_VAR`],
/// passed in by the binary). See the module documentation.
///
/// Call it first thing in `main`, on the main thread: Linux keeps the request with the calling thread (any
/// thread holding it brings the whole process down), and a thread that ends takes its request with it.
pub fn bind_to_launcher(launcher_pid: Option<&OsStr>) -> LauncherBinding {
    let Some(pid) = launcher_pid
        .and_then(OsStr::to_str)
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|p| *p > 1)
        .map(Pid::from_raw)
    else {
        return LauncherBinding::NotLaunched;
    };
    // First the request, then the check: a parent that dies in between is caught by one or the other.
    let requested = die_with_parent(true);
    if getppid() == pid {
        if !requested {
            watch_parent(pid);
        }
        return LauncherBinding::Bound;
    }
    if requested {
        die_with_parent(false);
    }
    // Signal 0 tests for existence: EPERM means it exists under another user.
    match nix::sys::signal::kill(pid, None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => LauncherBinding::Stale,
        Err(_) => LauncherBinding::Gone,
    }
}

/// Asks the kernel to kill this process when its parent ends (`on`), or no longer (`!on`); false when that
/// cannot be asked on this system.
#[cfg(target_os = "linux")]
fn die_with_parent(on: bool) -> bool {
    use nix::sys::signal::Signal;
    nix::sys::prctl::set_pdeathsig(on.then_some(Signal::SIGKILL)).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_on: bool) -> bool {
    false
}

/// Without `PR_SET_PDEATHSIG`: a thread that ends the process once its parent is no longer `launcher`.
fn watch_parent(launcher: Pid) {
    let spawned = std::thread::Builder::new()
        .name("nanobot-launcher-watch".into())
        .spawn(move || {
            while getppid() == launcher {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            std::process::exit(i32::from(EXIT_LAUNCHER_GONE));
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot watch the launching process");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_or_unusable_variable_binds_nothing() {
        assert_eq!(bind_to_launcher(None), LauncherBinding::NotLaunched);
        for v in ["", "abc", "0", "1", "-5", "12x"] {
            assert_eq!(
                bind_to_launcher(Some(OsStr::new(v))),
                LauncherBinding::NotLaunched,
                "{v:?}"
            );
        }
    }

    #[test]
    fn a_live_process_that_is_not_the_parent_is_a_stale_variable() {
        // This test process itself: alive, and not its own parent.
        let me = std::process::id().to_string();
        assert_eq!(bind_to_launcher(Some(OsStr::new(&me))), LauncherBinding::Stale);
    }

    #[test]
    fn an_ended_process_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id().to_string();
        child.wait().unwrap();
        assert_eq!(bind_to_launcher(Some(OsStr::new(&pid))), LauncherBinding::Gone);
    }

    #[test]
    fn the_real_parent_binds() {
        let parent = getppid().as_raw();
        if parent <= 1 {
            return; // run directly under init: no launcher to stand for
        }
        let parent = parent.to_string();
        assert_eq!(
            bind_to_launcher(Some(OsStr::new(&parent))),
            LauncherBinding::Bound
        );
        // Undone, so the test process is not tied to the test runner beyond this test.
        die_with_parent(false);
    }
}
