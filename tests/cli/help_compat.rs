//! The command line of 0.3.5, as its `--help` shows it, exists here: every command and subcommand it lists, and
//! every option flag (long and short) of each, at the same place in the tree.
//!
//! The tree is discovered from 0.3.5's own help (the top level, then each command it lists, recursively), so
//! a command 0.3.5 gains is compared without editing this test. Its help is read in click's plain form
//! (`TYPER_USE_RICH=0`: the same commands and options, without the boxes). What 0.3.5 has and this program
//! lacks on purpose is listed in docs/compatibility.md between the `cli-differences` markers, one table row
//! each (`| command | missing here | why |`); a difference that is not listed fails, and so does a listed one
//! that no longer exists.
//!
//! The Python nanobot is `.ci/.peers/nanobot-venv/bin/nanobot`; missing, the test skips, or fails under `CI`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use nanobot_testkit::TempHome;
use nanobot_testkit::peers;

use crate::compat_python::{bounded, python_nanobot};
use crate::support::nanobot;

/// What one `--help` lists: subcommand names and option flags (`--long`, `-s`).
#[derive(Debug, Default, PartialEq)]
struct Help {
    commands: BTreeSet<String>,
    options: BTreeSet<String>,
}

/// The flags named in an option's first column (`-m, --message <str>`, `--logs / --no-logs`,
/// `--classic, --no-tui`, `      --no-api`): the words that start with `-`, without a value placeholder.
fn flags_in(spec: &str) -> impl Iterator<Item = String> + '_ {
    spec.split([' ', ',', '/'])
        .filter(|w| w.len() > 1 && w.starts_with('-'))
        .map(|w| w.split(['=', '[', '<']).next().unwrap_or(w).to_owned())
}

/// Reads click's plain help (0.3.5) and clap's (ours): sections start with an unindented `Name:` line; an entry
/// of `Options:` is a line indented at most six spaces whose text starts with `-` (its first column ends at two
/// spaces); an entry of `Commands:` is a line indented two spaces; a blank line ends a section. A visible alias clap shows as
/// `[alias: --main]` / `[aliases: …]` counts as listed.
fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            // A section ends at a blank line (what follows the last one is the epilogue).
            section.clear();
            continue;
        }
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line.trim_end_matches(':').to_ascii_lowercase();
            continue;
        }
        let body = line.trim_start();
        let indent = line.len() - body.len();
        match section.as_str() {
            "options" => {
                if indent <= 6 && body.starts_with('-') {
                    let spec = body.split("  ").next().unwrap_or(body);
                    help.options.extend(flags_in(spec));
                }
                for marker in ["[alias: ", "[aliases: "] {
                    if let Some(rest) = body.split(marker).nth(1) {
                        let list = rest.split(']').next().unwrap_or(rest);
                        help.options.extend(flags_in(list));
                    }
                }
            }
            "commands" if indent == 2 && !body.is_empty() => {
                let name = body.split_whitespace().next().unwrap_or(body);
                help.commands.insert(name.to_owned());
            }
            _ => {}
        }
    }
    help
}

/// `<exe> <path…> --help` of 0.3.5, in click's plain layout.
fn python_help(exe: &Path, home: &Path, path: &[String]) -> String {
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TYPER_USE_RICH", "0")
        .env("NO_COLOR", "1")
        .env("TERM", "dumb")
        .env("COLUMNS", "200")
        .current_dir(home)
        .args(path)
        .arg("--help");
    checked(cmd, &format!("0.3.5 `{}`", shown(path)))
}

/// `nanobot <path…> --help` of this program.
fn our_help(home: &Path, path: &[String]) -> String {
    let mut cmd = nanobot(home);
    cmd.args(path).arg("--help");
    checked(cmd, &format!("our `{}`", shown(path)))
}

fn checked(cmd: Command, what: &str) -> String {
    let out = bounded(cmd, &format!("{what} --help"));
    assert!(
        out.status.success(),
        "{what} --help failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nanobot gateway logs` for the path `["gateway", "logs"]`.
fn shown(path: &[String]) -> String {
    std::iter::once("nanobot")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Walks 0.3.5's command tree and returns what it lists that ours does not, as `(command, missing item)` where
/// the item is a flag or a subcommand's name.
fn missing_here(pyexe: &Path, home: &Path) -> BTreeSet<(String, String)> {
    let mut missing = BTreeSet::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = queue.pop() {
        seen += 1;
        let theirs = parse_help(&python_help(pyexe, home, &path));
        let ours = parse_help(&our_help(home, &path));
        assert!(
            !theirs.options.is_empty(),
            "no options read from 0.3.5's `{} --help`: has its layout changed?",
            shown(&path)
        );
        for flag in theirs.options.difference(&ours.options) {
            missing.insert((shown(&path), flag.clone()));
        }
        for sub in &theirs.commands {
            if ours.commands.contains(sub) {
                let mut next = path.clone();
                next.push(sub.clone());
                queue.push(next);
            } else {
                missing.insert((shown(&path), sub.clone()));
            }
        }
    }
    // The top level, its commands and the subcommands of gateway, channels, plugins, sessions and provider.
    assert!(seen >= 10, "only {seen} commands found in 0.3.5's help");
    missing
}

/// The rows of the `cli-differences` table of docs/compatibility.md: `(command, missing item)` → why.
fn listed_differences() -> BTreeMap<(String, String), String> {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/compatibility.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let block = doc
        .split("<!-- cli-differences:start -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- cli-differences:end -->").next())
        .expect("docs/compatibility.md has the cli-differences block");
    let unquote = |cell: &str| cell.trim().trim_matches('`').to_owned();
    let mut rows = BTreeMap::new();
    let rule = |l: &str| l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '));
    for line in block.lines().filter(|l| l.starts_with('|') && !rule(l)) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let [command, item, why] = cells[..] else {
            panic!("a cli-differences row has three cells: {line}")
        };
        if command.trim() == "command" {
            continue;
        }
        assert!(!why.trim().is_empty(), "a listed difference says why: {line}");
        rows.insert((unquote(command), unquote(item)), why.trim().to_owned());
    }
    rows
}

#[test]
fn every_command_and_option_of_0_3_5_exists_here_or_is_listed() {
    let Some(pyexe) = peers::require("python nanobot (nanobot-ai 0.3.5)", python_nanobot()) else {
        return;
    };
    let home = TempHome::new();
    let missing = missing_here(&pyexe, home.home());
    let listed = listed_differences();
    let not_listed: Vec<_> = missing.iter().filter(|k| !listed.contains_key(*k)).collect();
    let no_longer: Vec<_> = listed.keys().filter(|k| !missing.contains(*k)).collect();
    assert!(
        not_listed.is_empty() && no_longer.is_empty(),
        "docs/compatibility.md's command-line differences are out of date.\n\
         0.3.5 lists these and we do not (add them, or list them with the reason): {not_listed:#?}\n\
         listed, but no longer missing (remove the row): {no_longer:#?}"
    );
}

#[test]
fn both_help_layouts_are_read() {
    let click = "Usage: nanobot agent [OPTIONS]\n\nOptions:\n  -m, --message <str>         Message\n  \
                 --markdown / --no-markdown  Render  [default:\n                              markdown]\n  \
                 --classic, --no-tui         Use the classic\n  --manager <auto|systemd|launchd>\n  \
                                  auto, systemd, or launchd\n  --help  Show this message and exit.\n\n\
                 Commands:\n  login   Authenticate with a\n          -x continued\n  logout  Log out\n\n  \
                 Run `nanobot` alone to chat.\n";
    let help = parse_help(click);
    assert_eq!(
        help.options,
        [
            "--classic",
            "--help",
            "--manager",
            "--markdown",
            "--message",
            "--no-markdown",
            "--no-tui",
            "-m"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(help.commands, ["login", "logout"].map(String::from).into());
    let clap = "Usage: nanobot provider login [OPTIONS] <PROVIDER>\n\nArguments:\n  <PROVIDER>  The provider\n\n\
                Options:\n      --set-main         Also make it [alias: --main]\n  -m, --model <MODEL>    The model\n  \
                -h, --help             Print help\n";
    assert_eq!(
        parse_help(clap).options,
        ["--help", "--main", "--model", "--set-main", "-h", "-m"]
            .map(String::from)
            .into()
    );
}
