//! `nanobot --show-completion` and `--install-completion` (0.3.5's root flags, from Typer): the completion
//! script for the shell this program was started from, printed or installed where Typer installs it.
//!
//! The script is clap's static one (the commands and flags of this build); Typer's calls the program back for
//! each completion. The shell is the parent process when it is a known shell, else `$SHELL`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::args::Cli;
use crate::error::CliError;
use crate::setup::CliEnv;

/// The name completions are registered for.
const PROGRAM: &str = "nanobot";

/// The shell named `name` (a process name or a path: `-zsh`, `/usr/bin/fish`), if completions exist for it.
fn shell_named(name: &str) -> Option<Shell> {
    let base = name.rsplit('/').next().unwrap_or(name).trim_start_matches('-');
    match base {
        "bash" => Some(Shell::Bash),
        "zsh" => Some(Shell::Zsh),
        "fish" => Some(Shell::Fish),
        "elvish" => Some(Shell::Elvish),
        "pwsh" | "powershell" => Some(Shell::PowerShell),
        _ => None,
    }
}

/// The shell this program runs under: the parent process's name when it is a shell, else `$SHELL`.
fn detect(env: &CliEnv) -> Result<Shell, CliError> {
    let comm = PathBuf::from(format!("/proc/{}/comm", std::os::unix::process::parent_id()));
    let parent = nanobot_util::read_to_string_bounded(&comm, 256)
        .ok()
        .and_then(|comm| shell_named(comm.trim()));
    parent
        .or_else(|| env.vars.get("SHELL").and_then(shell_named))
        .ok_or_else(|| {
            CliError::Usage(
                "cannot tell which shell this is (neither the parent process nor $SHELL is bash, zsh, fish, \
                 elvish or PowerShell)"
                    .into(),
            )
        })
}

/// The completion script for `shell`.
fn script(shell: Shell) -> Vec<u8> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), PROGRAM, &mut buf);
    buf
}

/// `nanobot --show-completion`: prints the script, to copy or to install by hand.
pub(crate) fn show(env: &CliEnv, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let shell = detect(env)?;
    out.write_all(&script(shell))
        .map_err(|e| CliError::io("write", "stdout", e))
}

/// `nanobot --install-completion`: writes the script where Typer puts it and, for bash and zsh, adds the line
/// that loads it to the shell's start-up file (once; the file is appended to, never rewritten).
pub(crate) fn install(env: &CliEnv, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let shell = detect(env)?;
    let home = &env.home;
    let path = match shell {
        Shell::Bash => {
            let path = home.join(".bash_completions").join(format!("{PROGRAM}.sh"));
            append_missing(&home.join(".bashrc"), &[format!("source '{}'", path.display())])?;
            path
        }
        Shell::Zsh => {
            let rc = home.join(".zshrc");
            let mut lines = vec!["fpath+=~/.zfunc; autoload -Uz compinit; compinit".to_owned()];
            // Typer adds a menu style only when the user has set no style of their own.
            if !read(&rc)?.contains("zstyle") {
                lines.push("zstyle ':completion:*' menu select".to_owned());
            }
            append_missing(&rc, &lines)?;
            home.join(".zfunc").join(format!("_{PROGRAM}"))
        }
        Shell::Fish => home
            .join(".config")
            .join("fish")
            .join("completions")
            .join(format!("{PROGRAM}.fish")),
        other => {
            return Err(CliError::Usage(format!(
                "installing the completion for {other} is not built; `nanobot --show-completion` prints the \
                 script to add to its profile"
            )));
        }
    };
    write_file(&path, &script(shell))?;
    let _ = writeln!(out, "{shell} completion installed in {}", path.display());
    let _ = writeln!(out, "Completion will take effect once you restart the terminal");
    Ok(())
}

/// The largest shell start-up file read (a bigger one is refused, naming it).
const MAX_RC_BYTES: u64 = 4 << 20;

/// The text of `path`, empty when it does not exist.
fn read(path: &Path) -> Result<String, CliError> {
    match nanobot_util::read_to_string_bounded(path, MAX_RC_BYTES) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(CliError::io("read", path, e)),
    }
}

/// Appends each of `lines` that `path` does not contain yet (creating the file).
fn append_missing(path: &Path, lines: &[String]) -> Result<(), CliError> {
    let text = read(path)?;
    let missing: Vec<&String> = lines.iter().filter(|l| !text.contains(l.as_str())).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut add = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        add.push('\n');
    }
    for l in missing {
        add.push('\n');
        add.push_str(l);
        add.push('\n');
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(add.as_bytes()))
        .map_err(|e| CliError::io("write", path, e))
}

/// Writes the script (replacing an older one atomically, so a shell starting meanwhile never reads half of it).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CliError::io("create", dir, e))?;
    }
    nanobot_util::write_atomic(path, bytes).map_err(|e| CliError::io("write", path, e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shells_are_known_by_process_name_and_path() {
        assert_eq!(shell_named("-zsh"), Some(Shell::Zsh));
        assert_eq!(shell_named("/usr/bin/fish"), Some(Shell::Fish));
        assert_eq!(shell_named("bash"), Some(Shell::Bash));
        assert_eq!(shell_named("pwsh"), Some(Shell::PowerShell));
        assert_eq!(shell_named("cargo"), None);
        assert_eq!(shell_named("/bin/sh"), None);
    }
}
