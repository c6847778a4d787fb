//! Flags 0.3.5 has for things this program does differently: accepted, with the effect their help states.
//! `agent --classic`/`--no-tui` (the line prompt is the only chat here), `agent --theme` (checked, unused),
//! `plugins enable --logs/--no-logs` (nothing is installed), and the shell completion of `--show-completion` /
//! `--install-completion`.

use std::time::Duration;

use expectrl::{Eof, Expect, Session};
use nanobot_testkit::{MockLlm, MockReply, TempHome};

use crate::support::{nanobot, onboarded, run, stderr, stdout};

#[test]
fn classic_and_no_tui_answer_like_plain_agent() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    for flag in ["--classic", "--no-tui"] {
        mock.push(MockReply::text(format!("Answer with {flag}.")));
        let o = run(home.home(), &["agent", flag, "-m", "hello"]);
        assert_eq!(o.status.code(), Some(0), "{flag}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("Answer with {flag}.\n"));
    }
    assert_eq!(mock.completion_requests().len(), 2);
}

#[test]
fn classic_opens_the_interactive_chat_and_theme_is_accepted() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Hello from the line prompt."));
    let mut cmd = nanobot(home.home());
    cmd.env("TERM", "xterm")
        .args(["agent", "--classic", "--theme", " Light "]);
    let mut p = Session::spawn(cmd).expect("spawn nanobot agent in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    p.expect("You: ").unwrap();
    p.send_line("hi").unwrap();
    p.expect("Hello from the line prompt.").unwrap();
    p.expect("You: ").unwrap();
    p.send_line("exit").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(mock.completion_requests().len(), 1);
}

#[test]
fn an_unknown_theme_is_a_usage_error() {
    let home = TempHome::new();
    let o = run(home.home(), &["agent", "--theme", "blue", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("--theme") && err.contains("auto, dark, or light"),
        "{err}"
    );
}

#[test]
fn plugins_enable_logs_says_nothing_is_installed_and_enables() {
    let home = TempHome::new();
    assert_eq!(run(home.home(), &["onboard"]).status.code(), Some(0));
    let o = run(home.home(), &["plugins", "enable", "telegram", "--logs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("Nothing to install"), "{}", stdout(&o));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["channels"]["telegram"]["enabled"], true);

    // `--no-logs` (the default, and the last of the pair wins) prints no such line.
    let o = run(
        home.home(),
        &["plugins", "enable", "telegram", "--logs", "--no-logs"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout(&o).contains("Nothing to install"), "{}", stdout(&o));
}

/// `nanobot --show-completion` / `--install-completion` with `SHELL` set (the parent process here is the test,
/// not a shell, so `$SHELL` decides).
fn completion(home: &TempHome, shell: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = nanobot(home.home());
    if let Some(shell) = shell {
        cmd.env("SHELL", shell);
    }
    cmd.args(args).output().unwrap()
}

#[test]
fn show_completion_prints_the_script_of_the_shell() {
    let home = TempHome::new();
    let o = completion(&home, Some("/bin/zsh"), &["--show-completion"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let zsh = stdout(&o);
    assert!(zsh.starts_with("#compdef nanobot"), "{zsh}");
    let o = completion(&home, Some("/usr/bin/fish"), &["--show-completion"]);
    let fish = stdout(&o);
    assert!(fish.contains("complete -c nanobot"), "{fish}");
    assert!(
        fish.contains("install-service"),
        "subcommands are completed: {fish}"
    );
    // Nothing is written.
    assert!(!home.home().join(".zfunc").exists());

    let o = completion(&home, None, &["--show-completion"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("which shell"), "{}", stderr(&o));
    let o = completion(&home, Some("/bin/bash"), &["--show-completion", "agent"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

#[test]
fn install_completion_for_bash_loads_it_from_bashrc_once() {
    let home = TempHome::new();
    std::fs::write(home.home().join(".bashrc"), "alias ll='ls -l'").unwrap();
    for _ in 0..2 {
        let o = completion(&home, Some("/bin/bash"), &["--install-completion"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).starts_with("bash completion installed in"),
            "{}",
            stdout(&o)
        );
    }
    let script = home.home().join(".bash_completions/nanobot.sh");
    let rc = std::fs::read_to_string(home.home().join(".bashrc")).unwrap();
    let source = format!("source '{}'", script.display());
    assert!(rc.starts_with("alias ll='ls -l'\n"), "{rc}");
    assert_eq!(rc.matches(&source).count(), 1, "{rc}");
    // The script registers the completion in a real bash.
    if let Ok(out) = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && complete -p nanobot", script.display()))
        .output()
    {
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("_nanobot"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn install_completion_for_zsh_and_fish_where_typer_puts_it() {
    let home = TempHome::new();
    std::fs::write(home.home().join(".zshrc"), "zstyle ':completion:*' mine\n").unwrap();
    let o = completion(&home, Some("zsh"), &["--install-completion"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let script = std::fs::read_to_string(home.home().join(".zfunc/_nanobot")).unwrap();
    assert!(script.starts_with("#compdef nanobot"));
    let rc = std::fs::read_to_string(home.home().join(".zshrc")).unwrap();
    assert!(
        rc.contains("fpath+=~/.zfunc; autoload -Uz compinit; compinit"),
        "{rc}"
    );
    assert!(
        !rc.contains("menu select"),
        "the user's own zstyle is left alone: {rc}"
    );

    let o = completion(&home, Some("/usr/bin/fish"), &["--install-completion"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fish = home.home().join(".config/fish/completions/nanobot.fish");
    assert!(
        std::fs::read_to_string(fish)
            .unwrap()
            .contains("complete -c nanobot")
    );

    let o = completion(&home, Some("/usr/bin/pwsh"), &["--install-completion"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--show-completion"), "{}", stderr(&o));
}
