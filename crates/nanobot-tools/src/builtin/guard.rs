//! The `exec` command guard: refuses destructive commands while letting the same words through
//! when they are only data (quoted arguments, URLs, file names).
//!
//! The command is lexed like a shell would (quotes, escapes, `;`, `&&`, `||`, `|`, `&`,
//! redirections, `$(…)` and backticks); each simple command's *command word* is examined (after
//! `sudo`, `env`, `nohup`, `timeout` … wrappers), and `sh -c '…'`, `eval …`, `xargs …` and
//! `find -exec …` payloads are checked recursively. Redirection targets are checked for block
//! devices and nanobot's memory files.
//!
//! The guard is a friendly first line, **not the boundary**: its refusal tells the model why, but
//! shell can always say the same thing another way (decoding into `sh`, variables, `${IFS}`,
//! ANSI-C quoting, globbed command names, interpreters). What a command can reach is decided by
//! the kernel ([`crate::confine`], `docs/security.md`), which holds when this list misses.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

/// One lexed simple command: its words and its redirection targets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words (quotes removed).
    pub words: Vec<String>,
    /// Output redirection targets (`> x`, `>> x`, `2> x`, `&> x`).
    pub writes: Vec<String>,
    /// Input redirection sources (`< x`).
    pub reads: Vec<String>,
}

/// A lexed command line.
#[derive(Debug, Default, Clone)]
pub struct Lexed {
    /// Simple commands in order.
    pub commands: Vec<SimpleCommand>,
    /// Contents of `$(…)` and backtick substitutions (to check recursively).
    pub substitutions: Vec<String>,
    /// The command with quoted text blanked out (for structural regexes like fork bombs).
    pub unquoted: String,
}

/// Lexes a shell command line. Never fails: unbalanced quotes run to the end.
pub fn lex(cmd: &str) -> Lexed {
    let mut out = Lexed::default();
    let mut cur = SimpleCommand::default();
    let mut word = String::new();
    let mut in_word = false;
    let mut pending_redirect: Option<bool> = None; // Some(true) = write, Some(false) = read
    let chars: Vec<char> = cmd.chars().collect();
    let mut i = 0;

    fn finish_word(
        word: &mut String,
        in_word: &mut bool,
        cur: &mut SimpleCommand,
        pending: &mut Option<bool>,
    ) {
        if *in_word {
            match pending.take() {
                Some(true) => cur.writes.push(std::mem::take(word)),
                Some(false) => cur.reads.push(std::mem::take(word)),
                None => cur.words.push(std::mem::take(word)),
            }
            *in_word = false;
        }
    }
    fn finish_cmd(cur: &mut SimpleCommand, out: &mut Lexed) {
        if !cur.words.is_empty() || !cur.writes.is_empty() || !cur.reads.is_empty() {
            out.commands.push(std::mem::take(cur));
        }
    }
    // Reads a `$(...)` starting after `$(`; returns the inner text and the index after `)`.
    fn read_subst(chars: &[char], mut i: usize) -> (String, usize) {
        let mut depth = 1;
        let mut inner = String::new();
        let mut quote: Option<char> = None;
        while i < chars.len() {
            let c = chars[i];
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '\'' | '"' => quote = Some(c),
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            return (inner, i + 1);
                        }
                    }
                    _ => {}
                },
            }
            inner.push(c);
            i += 1;
        }
        (inner, i)
    }

    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                if let Some(&n) = chars.get(i + 1) {
                    if n != '\n' {
                        word.push(n);
                        in_word = true;
                    }
                    out.unquoted.push(' ');
                    out.unquoted.push(' ');
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            '\'' => {
                in_word = true;
                out.unquoted.push(' ');
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    out.unquoted.push(' ');
                    i += 1;
                }
                out.unquoted.push(' ');
                i += 1;
                continue;
            }
            '"' => {
                in_word = true;
                out.unquoted.push(' ');
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        word.push(chars[i + 1]);
                        out.unquoted.push_str("  ");
                        i += 2;
                        continue;
                    }
                    if chars[i] == '$' && chars.get(i + 1) == Some(&'(') {
                        let (inner, next) = read_subst(&chars, i + 2);
                        out.substitutions.push(inner);
                        for _ in i..next {
                            out.unquoted.push(' ');
                        }
                        i = next;
                        continue;
                    }
                    if chars[i] == '`' {
                        let start = i + 1;
                        let mut j = start;
                        while j < chars.len() && chars[j] != '`' {
                            j += 1;
                        }
                        out.substitutions
                            .push(chars[start..j.min(chars.len())].iter().collect());
                        for _ in i..=j.min(chars.len() - 1) {
                            out.unquoted.push(' ');
                        }
                        i = j + 1;
                        continue;
                    }
                    word.push(chars[i]);
                    out.unquoted.push(' ');
                    i += 1;
                }
                out.unquoted.push(' ');
                i += 1;
                continue;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let (inner, next) = read_subst(&chars, i + 2);
                out.substitutions.push(inner);
                in_word = true;
                word.push_str("$()");
                for _ in i..next {
                    out.unquoted.push(' ');
                }
                i = next;
                continue;
            }
            '`' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && chars[j] != '`' {
                    j += 1;
                }
                out.substitutions
                    .push(chars[start..j.min(chars.len())].iter().collect());
                in_word = true;
                for _ in i..=j.min(chars.len().saturating_sub(1)) {
                    out.unquoted.push(' ');
                }
                i = j + 1;
                continue;
            }
            _ => {}
        }
        out.unquoted.push(c);
        match c {
            ' ' | '\t' => finish_word(&mut word, &mut in_word, &mut cur, &mut pending_redirect),
            ';' | '\n' | '|' | '&' | '(' | ')' | '{' | '}' if !(c == '{' || c == '}') || !in_word => {
                // `&>` / `>&` are redirections, handled below
                if c == '&' && chars.get(i + 1) == Some(&'>') {
                    finish_word(&mut word, &mut in_word, &mut cur, &mut pending_redirect);
                    pending_redirect = Some(true);
                    out.unquoted.push('>');
                    i += 2;
                    if chars.get(i) == Some(&'>') {
                        out.unquoted.push('>');
                        i += 1;
                    }
                    continue;
                }
                finish_word(&mut word, &mut in_word, &mut cur, &mut pending_redirect);
                finish_cmd(&mut cur, &mut out);
            }
            '>' | '<' => {
                // a fd number right before (2>) belongs to the redirection
                if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    finish_word(&mut word, &mut in_word, &mut cur, &mut pending_redirect);
                }
                let write = c == '>';
                // >>, >|, <<, <<<, <>
                while let Some(&n) = chars.get(i + 1) {
                    if n == '>' || n == '|' || n == '<' {
                        out.unquoted.push(n);
                        i += 1;
                    } else {
                        break;
                    }
                }
                // >&2 style duplications: skip the fd
                if chars.get(i + 1) == Some(&'&') {
                    out.unquoted.push('&');
                    i += 2;
                    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '-') {
                        out.unquoted.push(chars[i]);
                        i += 1;
                    }
                    continue;
                }
                pending_redirect = Some(write);
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    finish_word(&mut word, &mut in_word, &mut cur, &mut pending_redirect);
    finish_cmd(&mut cur, &mut out);
    out
}

const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "nohup", "nice", "ionice", "time", "exec", "command", "builtin", "stdbuf",
    "setsid", "chroot", "unbuffer", "busybox", "strace", "taskset", "chrt",
];

const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "ash", "fish"];

static FORK_BOMB: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r":\s*\(\s*\)\s*\{.*:\s*\|\s*:.*\}",
        r"(?s)\b(\w+)\s*\(\s*\)\s*\{[^}]*\b\w+\s*\|\s*\w+\s*&",
    ]
    .iter()
    .filter_map(|p| Regex::new(p).ok())
    .collect()
});

static BLOCK_DEVICE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|dm-\d|md\d|loop\d|mapper/|sr\d)",
    )
    .ok()
});

fn is_block_device(target: &str) -> bool {
    BLOCK_DEVICE.as_ref().is_some_and(|r| r.is_match(target))
}

fn is_memory_file(target: &str) -> bool {
    let t = target.trim_end_matches('/');
    t.ends_with("history.jsonl") || Path::new(t).file_name().is_some_and(|n| n == ".dream_cursor")
}

fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Checks a command line; `Err` names the reason it was blocked.
pub fn check(command: &str) -> Result<(), String> {
    check_depth(command, 0)
}

/// Why a command the guard lets through is still worth asking the user about (`tools.approval.mode: "risky"`):
/// it deletes or moves files, reaches the network, changes permissions or processes, runs as another user,
/// installs software, hands a string to an interpreter the guard cannot read, or writes to a path outside the
/// workspace. `None` for everything else (reading, listing, building, running tests …).
///
/// A word list, like [`check`]: it decides when to ask, never what is possible. The boundary is the kernel
/// confinement of `exec` (`docs/security.md`).
pub fn risk(command: &str) -> Option<String> {
    risk_depth(command, 0)
}

fn risk_depth(command: &str, depth: usize) -> Option<String> {
    if depth > 8 {
        return Some("deeply nested command substitutions".into());
    }
    let lexed = lex(command);
    for sub in &lexed.substitutions {
        if let Some(r) = risk_depth(sub, depth + 1) {
            return Some(r);
        }
    }
    for cmd in &lexed.commands {
        for w in &cmd.writes {
            if w.starts_with('/') && !w.starts_with("/dev/null") && !w.starts_with("/tmp/")
                || w.starts_with('~')
                || w.contains("..")
            {
                return Some(format!("writes to {w}"));
            }
        }
        if let Some(r) = risky_words(&cmd.words) {
            return Some(r);
        }
    }
    None
}

fn risky_words(words: &[String]) -> Option<String> {
    let i = command_index(words);
    if let Some(w) = words[..i]
        .iter()
        .map(|w| base_name(w))
        .find(|w| matches!(*w, "sudo" | "doas"))
    {
        return Some(format!("runs as another user ({w})"));
    }
    let cmd = words.get(i)?;
    let name = base_name(cmd).to_ascii_lowercase();
    let args = &words[i + 1..];
    let has = |flags: &[&str]| args.iter().any(|a| flags.contains(&a.as_str()));
    let reason = match name.as_str() {
        "rm" | "rmdir" | "unlink" | "shred" | "truncate" | "mv" => format!("deletes or moves files ({name})"),
        "curl" | "wget" | "ssh" | "scp" | "sftp" | "rsync" | "nc" | "ncat" | "netcat" | "socat"
        | "telnet" | "ftp" | "aria2c" => format!("uses the network ({name})"),
        "git"
            if args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "push" | "pull" | "fetch" | "clone" | "remote" | "reset" | "clean" | "rebase"
                )
            }) =>
        {
            format!(
                "git {}",
                args.iter()
                    .find(|a| !a.starts_with('-'))
                    .map_or("", String::as_str)
            )
        }
        "pip" | "pip3" | "npm" | "pnpm" | "yarn" | "cargo" | "gem" | "go" | "uv" | "pipx" | "apt"
        | "apt-get" | "dnf" | "yum" | "pacman" | "apk" | "brew" | "snap" | "flatpak"
            if has(&[
                "install",
                "add",
                "uninstall",
                "remove",
                "upgrade",
                "update",
                "publish",
                "i",
                "-S",
                "-R",
            ]) =>
        {
            format!("installs or removes software ({name})")
        }
        "chmod" | "chown" | "chgrp" | "setfacl" | "chattr" => format!("changes permissions ({name})"),
        "kill" | "pkill" | "killall" | "systemctl" | "service" | "crontab" | "at" | "launchctl" => {
            format!("controls processes or services ({name})")
        }
        "su" | "passwd" | "useradd" | "usermod" | "userdel" => format!("changes users ({name})"),
        "docker" | "podman" | "kubectl" => format!("controls containers ({name})"),
        "eval" | "source" | "." => format!("runs code the guard cannot read ({name})"),
        n if SHELLS.contains(&n) && has(&["-c"]) => format!("runs code the guard cannot read ({n} -c)"),
        n if (n.starts_with("python")
            || n == "perl"
            || n == "ruby"
            || n == "node"
            || n == "php"
            || n == "lua")
            && has(&["-c", "-e", "--eval", "-r"]) =>
        {
            format!("runs code the guard cannot read ({n})")
        }
        n if SHELLS.contains(&n) && args.is_empty() => format!("runs a shell reading its input ({n})"),
        "tee" | "cp" | "install" | "ln"
            if args.iter().any(|a| {
                a.starts_with('/') && !a.starts_with("/tmp/") || a.starts_with('~') || a.contains("..")
            }) =>
        {
            format!("writes outside the workspace ({name})")
        }
        _ => return None,
    };
    Some(reason)
}

fn check_depth(command: &str, depth: usize) -> Result<(), String> {
    if depth > 8 {
        return Err("command nesting too deep".into());
    }
    let lexed = lex(command);
    for re in FORK_BOMB.iter() {
        if re.is_match(&lexed.unquoted) {
            return Err("fork bomb".into());
        }
    }
    for sub in &lexed.substitutions {
        check_depth(sub, depth + 1)?;
    }
    for cmd in &lexed.commands {
        for w in &cmd.writes {
            if is_block_device(w) {
                return Err(format!("write to block device {w}"));
            }
            if is_memory_file(w) {
                return Err(format!("write to nanobot memory file {w}"));
            }
        }
        check_words(&cmd.words, depth)?;
    }
    Ok(())
}

/// Index of the command word: leading `VAR=value` assignments and wrappers (`sudo`, `env`, `nohup`, `timeout N`
/// …, with their options) are skipped.
fn command_index(words: &[String]) -> usize {
    // skip leading VAR=value assignments and wrappers (with their options)
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let b = base_name(w);
        if w.contains('=') && !w.starts_with('-') && !w.starts_with('=') && i == 0
            || (i > 0
                && w.contains('=')
                && !w.starts_with('-')
                && words[..i]
                    .iter()
                    .all(|p| p.contains('=') || WRAPPERS.contains(&base_name(p)) || p.starts_with('-')))
        {
            i += 1;
            continue;
        }
        if WRAPPERS.contains(&b) {
            i += 1;
            while i < words.len() && words[i].starts_with('-') {
                i += 1;
            }
            continue;
        }
        if b == "timeout" {
            i += 1;
            while i < words.len() && words[i].starts_with('-') {
                i += 1;
            }
            i += 1; // the duration
            continue;
        }
        break;
    }
    i
}

fn check_words(words: &[String], depth: usize) -> Result<(), String> {
    let i = command_index(words);
    let Some(cmd) = words.get(i) else {
        return Ok(());
    };
    let name = base_name(cmd).to_ascii_lowercase();
    let args = &words[i + 1..];
    let name = name.as_str();
    match name {
        "rm" => {
            for a in args {
                if a == "--" {
                    break;
                }
                if a == "--recursive" || a == "--force" || a == "--no-preserve-root" {
                    return Err(format!("rm {a}"));
                }
                if a.starts_with('-')
                    && !a.starts_with("--")
                    && a.chars().skip(1).any(|c| matches!(c, 'r' | 'R' | 'f'))
                {
                    return Err("rm -r/-f".into());
                }
            }
            for a in args {
                if is_memory_file(a) {
                    return Err(format!("deleting nanobot memory file {a}"));
                }
            }
        }
        "shutdown" | "reboot" | "poweroff" | "halt" => return Err(name.to_owned()),
        "systemctl" | "loginctl"
            if args
                .iter()
                .any(|a| matches!(a.as_str(), "poweroff" | "reboot" | "halt" | "kexec" | "suspend")) =>
        {
            return Err(format!("{name} power action"));
        }
        "init" | "telinit" if args.first().is_some_and(|a| a == "0" || a == "6") => {
            return Err("init runlevel change".into());
        }
        "diskpart" | "format" | "wipefs" | "fdisk" | "sfdisk" | "parted" => {
            return Err(format!("disk tool {name}"));
        }
        n if n == "mkfs" || n.starts_with("mkfs.") || n.starts_with("mke2fs") || n == "mkswap" => {
            return Err(format!("filesystem creation ({n})"));
        }
        "dd" => {
            if args.iter().any(|a| a.starts_with("if=")) {
                return Err("dd if=".into());
            }
            if let Some(of) = args.iter().find_map(|a| a.strip_prefix("of="))
                && (is_block_device(of) || is_memory_file(of))
            {
                return Err(format!("dd of={of}"));
            }
        }
        "del" | "erase"
            if args.iter().any(|a| {
                a.eq_ignore_ascii_case("/f") || a.eq_ignore_ascii_case("/q") || a.eq_ignore_ascii_case("/s")
            }) =>
        {
            return Err(format!("{name} /f"));
        }
        "rmdir" | "rd" if args.iter().any(|a| a.eq_ignore_ascii_case("/s")) => {
            return Err("rmdir /s".into());
        }
        "shred" => return Err("shred".into()),
        "tee" | "truncate" | "cp" | "mv" | "install" | "ln" | "rsync" => {
            if let Some(t) = args.iter().rfind(|a| !a.starts_with('-'))
                && (is_memory_file(t) || (name == "tee" && is_block_device(t)))
            {
                return Err(format!("{name} onto {t}"));
            }
            if name == "tee"
                && let Some(t) = args.iter().find(|a| is_memory_file(a) || is_block_device(a))
            {
                return Err(format!("tee onto {t}"));
            }
        }
        "sed" | "perl" if args.iter().any(|a| a.starts_with("-i") || a == "--in-place") => {
            if let Some(t) = args.iter().find(|a| is_memory_file(a)) {
                return Err(format!("in-place edit of {t}"));
            }
        }
        "eval" => return check_depth(&args.join(" "), depth + 1),
        s if SHELLS.contains(&s) => {
            let mut it = args.iter();
            while let Some(a) = it.next() {
                if a.starts_with('-')
                    && a.contains('c')
                    && !a.starts_with("--")
                    && let Some(script) = it.next()
                {
                    return check_depth(script, depth + 1);
                }
            }
        }
        "xargs" => {
            let mut j = 0;
            while j < args.len() && args[j].starts_with('-') {
                // options that take a value
                if matches!(
                    args[j].as_str(),
                    "-I" | "-n" | "-P" | "-L" | "-d" | "-s" | "-E" | "-a"
                ) {
                    j += 1;
                }
                j += 1;
            }
            return check_words(&args[j.min(args.len())..], depth + 1);
        }
        "find" => {
            if args.iter().any(|a| a == "-delete") {
                return Err("find -delete".into());
            }
            let mut j = 0;
            while j < args.len() {
                if matches!(args[j].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                    let end = args[j + 1..]
                        .iter()
                        .position(|a| a == ";" || a == "+" || a == "\\;")
                        .map_or(args.len(), |p| j + 1 + p);
                    check_words(&args[j + 1..end], depth + 1)?;
                    j = end;
                }
                j += 1;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn risk_names_what_is_worth_asking_about_and_lets_ordinary_work_through() {
        for (cmd, want) in [
            ("rm notes.txt", "deletes"),
            ("mv a b", "deletes or moves"),
            ("curl https://example.org", "network"),
            ("env X=1 wget -q http://x", "network"),
            ("git push origin main", "git push"),
            ("pip install requests", "installs"),
            ("sudo ls", "another user"),
            ("chmod 777 run.sh", "permissions"),
            ("echo hi > /etc/motd", "writes to /etc/motd"),
            ("echo hi >> ~/.bashrc", "writes to ~/.bashrc"),
            ("cat x | sh", "shell reading its input"),
            ("bash -c 'echo hi'", "bash -c"),
            ("python3 -c 'print(1)'", "python3"),
            ("echo $(curl http://x)", "network"),
            ("cp report.pdf /home/user/", "outside the workspace"),
            ("kill -9 1234", "processes"),
        ] {
            let r = risk(cmd).unwrap_or_else(|| panic!("{cmd}: not risky"));
            assert!(r.contains(want), "{cmd}: {r}");
        }
        for cmd in [
            "ls -la",
            "cat notes.txt",
            "python3 script.py",
            "cargo build",
            "git status",
            "git log --oneline",
            "grep -r TODO src",
            "echo hi > out.txt",
            "echo hi > /dev/null",
            "sort data.csv | uniq -c",
            "mkdir -p build && cd build",
        ] {
            assert_eq!(risk(cmd), None, "{cmd}");
        }
    }
    use super::*;

    #[test]
    fn lexes_quotes_and_operators() {
        let l = lex(r#"echo "a; b" 'c|d' && ls -la > out.txt 2>/dev/null; cat < in"#);
        assert_eq!(l.commands.len(), 3);
        assert_eq!(l.commands[0].words, vec!["echo", "a; b", "c|d"]);
        assert_eq!(l.commands[1].words, vec!["ls", "-la"]);
        assert_eq!(l.commands[1].writes, vec!["out.txt", "/dev/null"]);
        assert_eq!(l.commands[2].reads, vec!["in"]);
    }

    #[test]
    fn substitutions_are_collected() {
        let l = lex(r#"echo "$(rm -rf /)" `id`"#);
        assert_eq!(l.substitutions, vec!["rm -rf /", "id"]);
    }
}
