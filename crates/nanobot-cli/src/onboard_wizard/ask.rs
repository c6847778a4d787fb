//! How the wizard asks: one line at a time on the terminal (rustyline for editing, the terminal's echo turned
//! off for secrets), and the question shapes built on it (pick from a numbered list, yes/no, text with a
//! default). Ctrl-C or Ctrl-D at any question ends the wizard as [`CliError::Interrupted`], before anything is
//! written.

use std::io::{Read, Write};

use crate::error::CliError;

/// A place to ask questions: the real terminal, or a script in the unit tests.
pub(crate) trait Ask {
    /// Prints `text` as is.
    fn say(&mut self, text: &str) -> Result<(), CliError>;
    /// Reads one line after `prompt` (without its line ending).
    fn line(&mut self, prompt: &str) -> Result<String, CliError>;
    /// Reads one line after `prompt` without showing what is typed.
    fn secret(&mut self, prompt: &str) -> Result<String, CliError>;
}

/// The real terminal: output to `out` (stdout), lines through rustyline, secrets with echo off.
pub(crate) struct Terminal<'a> {
    out: &'a mut dyn Write,
    editor: rustyline::DefaultEditor,
}

impl<'a> Terminal<'a> {
    /// A terminal writing to `out`.
    pub(crate) fn new(out: &'a mut dyn Write) -> Result<Self, CliError> {
        let config = rustyline::Config::builder().auto_add_history(false).build();
        let editor = rustyline::DefaultEditor::with_config(config)
            .map_err(|e| CliError::io("open", "the terminal", std::io::Error::other(e.to_string())))?;
        Ok(Self { out, editor })
    }
}

fn write_err(e: std::io::Error) -> CliError {
    CliError::io("write", "stdout", e)
}

impl Ask for Terminal<'_> {
    fn say(&mut self, text: &str) -> Result<(), CliError> {
        self.out.write_all(text.as_bytes()).map_err(write_err)?;
        self.out.flush().map_err(write_err)
    }

    fn line(&mut self, prompt: &str) -> Result<String, CliError> {
        self.out.flush().map_err(write_err)?;
        match self.editor.readline(prompt) {
            Ok(line) => Ok(line),
            Err(rustyline::error::ReadlineError::Interrupted | rustyline::error::ReadlineError::Eof) => {
                Err(CliError::Interrupted)
            }
            Err(e) => Err(CliError::io(
                "read",
                "the terminal",
                std::io::Error::other(e.to_string()),
            )),
        }
    }

    fn secret(&mut self, prompt: &str) -> Result<String, CliError> {
        self.out.flush().map_err(write_err)?;
        let typed = read_hidden(self.out, prompt);
        // The Enter the user pressed was not echoed either.
        self.say("\n")?;
        typed
    }
}

/// Puts the terminal's settings back when dropped (also on an error or a panic).
struct RestoreTermios(nix::sys::termios::Termios);

impl Drop for RestoreTermios {
    fn drop(&mut self) {
        use std::os::fd::AsFd;
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin().as_fd(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.0,
        );
    }
}

/// Reads a line from the terminal with echo, line editing and signals off: each typed character shows as
/// `*`, Backspace removes one, Ctrl-U clears, Enter ends, Ctrl-C or Ctrl-D gives up. Escape sequences
/// (arrow keys) are skipped. Reads the file descriptor directly (no buffer that could hold later answers).
/// `prompt` is printed once echo is off, so nothing typed after it can show.
fn read_hidden(out: &mut dyn Write, prompt: &str) -> Result<String, CliError> {
    use nix::sys::termios::{LocalFlags, SetArg, SpecialCharacterIndices, tcgetattr, tcsetattr};
    use std::os::fd::AsFd;

    let term_err = |e: nix::Error| CliError::io("set up", "the terminal", std::io::Error::from(e));
    let stdin = std::io::stdin();
    let saved = tcgetattr(stdin.as_fd()).map_err(term_err)?;
    let mut quiet = saved.clone();
    quiet
        .local_flags
        .remove(LocalFlags::ECHO | LocalFlags::ICANON | LocalFlags::ISIG | LocalFlags::IEXTEN);
    quiet.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    quiet.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &quiet).map_err(term_err)?;
    let _restore = RestoreTermios(saved);
    out.write_all(prompt.as_bytes()).map_err(write_err)?;
    out.flush().map_err(write_err)?;

    let fd = stdin
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| CliError::io("read", "the terminal", e))?;
    let mut input = std::fs::File::from(fd);
    let mut bytes: Vec<u8> = Vec::new();
    let mut escape = Escape::None;
    loop {
        let mut b = [0u8; 1];
        match input.read(&mut b) {
            Ok(0) => return Err(CliError::Interrupted),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CliError::io("read", "the terminal", e)),
        }
        let b = b[0];
        match escape {
            Escape::Started => {
                escape = if b == b'[' || b == b'O' {
                    Escape::Sequence
                } else {
                    Escape::None
                };
                continue;
            }
            Escape::Sequence => {
                if (0x40..=0x7e).contains(&b) {
                    escape = Escape::None;
                }
                continue;
            }
            Escape::None => {}
        }
        match b {
            b'\r' | b'\n' => break,
            0x03 | 0x04 => return Err(CliError::Interrupted),
            0x1b => escape = Escape::Started,
            0x7f | 0x08 => {
                // Drop one whole UTF-8 character.
                let mut removed = false;
                while let Some(last) = bytes.pop() {
                    removed = true;
                    if last & 0xc0 != 0x80 {
                        break;
                    }
                }
                if removed {
                    out.write_all(b"\x08 \x08").map_err(write_err)?;
                }
            }
            0x15 => {
                let shown = String::from_utf8_lossy(&bytes).chars().count();
                bytes.clear();
                for _ in 0..shown {
                    out.write_all(b"\x08 \x08").map_err(write_err)?;
                }
            }
            b if b < 0x20 => {}
            b => {
                bytes.push(b);
                if b & 0xc0 != 0x80 {
                    out.write_all(b"*").map_err(write_err)?;
                }
            }
        }
        out.flush().map_err(write_err)?;
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[derive(Clone, Copy)]
enum Escape {
    None,
    Started,
    Sequence,
}

/// Picks one of `choices` (shown numbered); the answer is a number or a choice's text. `default` is taken on
/// Enter. A wrong answer is said and the question asked again.
pub(crate) fn select(
    ask: &mut dyn Ask,
    question: &str,
    choices: &[String],
    default: Option<usize>,
) -> Result<usize, CliError> {
    let mut text = format!("\n{question}\n");
    for (i, c) in choices.iter().enumerate() {
        let mark = if Some(i) == default { "  (default)" } else { "" };
        text.push_str(&format!("  {:>2}) {c}{mark}\n", i + 1));
    }
    ask.say(&text)?;
    let prompt = match default {
        Some(d) => format!("Choose 1-{} [{}]: ", choices.len(), d + 1),
        None => format!("Choose 1-{}: ", choices.len()),
    };
    loop {
        let answer = ask.line(&prompt)?;
        let answer = answer.trim();
        if answer.is_empty()
            && let Some(d) = default
        {
            return Ok(d);
        }
        if let Ok(n) = answer.parse::<usize>()
            && (1..=choices.len()).contains(&n)
        {
            return Ok(n - 1);
        }
        if let Some(i) = choices.iter().position(|c| c.eq_ignore_ascii_case(answer)) {
            return Ok(i);
        }
        ask.say(&format!(
            "! \"{answer}\" is not one of the choices: enter a number from 1 to {}.\n",
            choices.len()
        ))?;
    }
}

/// A yes/no question; Enter takes `default`.
pub(crate) fn confirm(ask: &mut dyn Ask, question: &str, default: bool) -> Result<bool, CliError> {
    let hint = if default { "[Y/n]" } else { "[y/N]" };
    loop {
        let answer = ask.line(&format!("{question} {hint} "))?;
        match answer.trim().to_ascii_lowercase().as_str() {
            "" => return Ok(default),
            "y" | "yes" => return Ok(true),
            "n" | "no" => return Ok(false),
            other => ask.say(&format!("! \"{other}\" is neither yes nor no: answer y or n.\n"))?,
        }
    }
}

/// Free text; Enter takes `default` (shown in brackets when not empty). Surrounding spaces are trimmed.
pub(crate) fn text(ask: &mut dyn Ask, question: &str, default: &str) -> Result<String, CliError> {
    let prompt = if default.is_empty() {
        format!("{question}: ")
    } else {
        format!("{question} [{default}]: ")
    };
    let answer = ask.line(&prompt)?;
    let answer = answer.trim();
    Ok(if answer.is_empty() {
        default.to_owned()
    } else {
        answer.to_owned()
    })
}

/// Free text that must not be empty: asked again, with `why`, until it is not.
pub(crate) fn required_text(
    ask: &mut dyn Ask,
    question: &str,
    default: &str,
    why: &str,
) -> Result<String, CliError> {
    loop {
        let answer = text(ask, question, default)?;
        if !answer.is_empty() {
            return Ok(answer);
        }
        ask.say(&format!("! {why}\n"))?;
    }
}

/// A secret that must not be empty (never shown), asked again with `why` until it is not.
pub(crate) fn required_secret(ask: &mut dyn Ask, question: &str, why: &str) -> Result<String, CliError> {
    loop {
        let answer = ask.secret(&format!("{question}: "))?;
        let answer = answer.trim();
        if !answer.is_empty() {
            return Ok(answer.to_owned());
        }
        ask.say(&format!("! {why}\n"))?;
    }
}

/// Waits for Enter.
pub(crate) fn pause(ask: &mut dyn Ask, message: &str) -> Result<(), CliError> {
    ask.line(&format!("{message} ")).map(|_| ())
}

#[cfg(test)]
pub(crate) mod script {
    //! A scripted [`Ask`] for unit tests: answers in order, everything said kept.

    use std::collections::VecDeque;

    use super::Ask;
    use crate::error::CliError;

    /// Answers from a list; running out is Ctrl-D.
    pub(crate) struct Script {
        pub(crate) answers: VecDeque<String>,
        pub(crate) said: String,
    }

    impl Script {
        pub(crate) fn new(answers: &[&str]) -> Self {
            Self {
                answers: answers.iter().map(|a| (*a).to_owned()).collect(),
                said: String::new(),
            }
        }
    }

    impl Ask for Script {
        fn say(&mut self, text: &str) -> Result<(), CliError> {
            self.said.push_str(text);
            Ok(())
        }
        fn line(&mut self, prompt: &str) -> Result<String, CliError> {
            self.said.push_str(prompt);
            let a = self.answers.pop_front().ok_or(CliError::Interrupted)?;
            self.said.push_str(&a);
            self.said.push('\n');
            Ok(a)
        }
        fn secret(&mut self, prompt: &str) -> Result<String, CliError> {
            self.said.push_str(prompt);
            let a = self.answers.pop_front().ok_or(CliError::Interrupted)?;
            self.said.push_str("(hidden)\n");
            Ok(a)
        }
    }
}
