//! `nanobot agent`: one message with `-m` (only the answer on stdout), or the interactive chat (line
//! editing and history, streamed Markdown answers, a spinner, tool hints, Ctrl-C stops the turn, cron jobs
//! fire while it runs). Also `nanobot cron run`.

use nanobot_util::lock;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nanobot_bus::InboundMessage;
use nanobot_core::{AgentHook, AgentLoop, BoxError, StopReason, ToolBatch, TurnOptions, tool_hint};
use nanobot_providers::Provider;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::args::AgentArgs;
use crate::error::CliError;
use crate::render::MarkdownStream;
use crate::setup::{self, CliEnv, Setup};

/// The interactive prompt.
pub(crate) const PROMPT: &str = "You: ";

/// Something the UI shows while a turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UiEvent {
    /// A tool is about to run (`read_file("notes.md")`).
    ToolHint(String),
}

/// Asks the terminal's user before a call that needs approval (`tools.approval.mode`): the question goes to the
/// running [`chat_turn`], which reads the answer with the line editor.
struct TerminalApprover {
    tx: mpsc::UnboundedSender<(String, oneshot::Sender<nanobot_core::ApprovalAnswer>)>,
}

#[async_trait]
impl nanobot_core::Approver for TerminalApprover {
    async fn ask(
        &self,
        request: &nanobot_core::ApprovalRequest,
        timeout: Duration,
    ) -> Option<nanobot_core::ApprovalAnswer> {
        let (tx, rx) = oneshot::channel();
        let question = format!(
            "🔐 Approval needed ({}):\n   {}\n(no answer within {} s counts as no)",
            request.reason,
            request.action,
            timeout.as_secs()
        );
        self.tx.send((question, tx)).ok()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

/// `y`/`yes` (any case) approves; anything else refuses.
fn is_yes(line: &str) -> bool {
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// A hook that forwards tool hints to whoever listens (the spinner/terminal in the CLI).
#[derive(Default)]
pub(crate) struct UiHook {
    tx: Mutex<Option<mpsc::UnboundedSender<UiEvent>>>,
    max_len: usize,
}

impl UiHook {
    pub(crate) fn new(max_len: usize) -> Self {
        UiHook {
            tx: Mutex::new(None),
            max_len,
        }
    }

    /// Starts forwarding to a new receiver (replacing any earlier one).
    pub(crate) fn listen(&self) -> mpsc::UnboundedReceiver<UiEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.tx) = Some(tx);
        rx
    }
}

#[async_trait]
impl AgentHook for UiHook {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<nanobot_core::Veto>, BoxError> {
        let tx = lock(&self.tx).clone();
        if let Some(tx) = tx {
            for call in batch.calls {
                let _ = tx.send(UiEvent::ToolHint(tool_hint(call, self.max_len)));
            }
        }
        Ok(Vec::new())
    }
}

/// Builds the agent loop for this setup: the provider (resolved from the config and the environment, or
/// `provider` when given), the tools, skills, MCP servers and cron store of the config, plus `hooks`.
pub(crate) fn build_loop(
    env: &CliEnv,
    s: &Setup,
    provider: Option<Arc<dyn Provider>>,
    hooks: Vec<Arc<dyn AgentHook>>,
) -> Result<AgentLoop, CliError> {
    nanobot_providers::install_ring();
    let config = &s.loaded.config;
    let core_env = env.core_env(&s.paths);
    let provider = match provider {
        Some(p) => p,
        // The runtime's one way (it knows this config's data directory, where the xAI login is kept).
        None => nanobot_runtime::provider(config, &core_env).map_err(|e| match e {
            nanobot_runtime::RuntimeError::Provider(e) => CliError::from_provider(e, s.paths.config_path()),
            other => other.into(),
        })?,
    };
    let mut builder = nanobot_runtime::agent_builder(config, &core_env, provider)?;
    for h in hooks {
        builder = builder.hook(h);
    }
    Ok(builder.build()?)
}

fn spinner(env: &CliEnv) -> ProgressBar {
    if !env.stderr_tty {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        pb.set_style(style);
    }
    pb.set_message("nanobot is thinking…");
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

fn show_hint(pb: &ProgressBar, hint: &str) {
    let line = format!("  ↳ {hint}");
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.suspend(|| eprintln!("{line}"));
    }
}

/// `nanobot agent`.
pub(crate) async fn run(env: &CliEnv, a: &AgentArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let s = setup::load(env, &a.config, true)?;
    // Missing workspace files are added (never overwritten), as the Python nanobot does.
    crate::onboard::write_templates(&s.workspace)?;
    let hint_len = s.loaded.config.agents.defaults.tool_hint_max_length.max(8) as usize;
    let ui = Arc::new(UiHook::new(hint_len));
    let agent = build_loop(env, &s, None, vec![ui.clone() as Arc<dyn AgentHook>])?;
    let local = a.message.as_deref().and_then(|text| local_command(&s, text));
    let result = match (&a.message, local) {
        (_, Some(reply)) => write_line(out, &reply),
        (Some(text), None) => {
            let r = one_shot(env, a, &agent, &ui, text, out).await;
            // What the turn started (the `/new` archive, consolidation) finishes before the process exits.
            if !agent.finish_background(ONE_SHOT_FINISH_LIMIT).await {
                eprintln!(
                    "nanobot: memory work (archive or consolidation) still running after {}s; left unfinished \
                     (the session keeps what was not archived)",
                    ONE_SHOT_FINISH_LIMIT.as_secs()
                );
            }
            r
        }
        (None, None) => interactive(env, &s, a, &agent, &ui).await,
    };
    if let Some(m) = agent.mcp() {
        m.shutdown().await;
    }
    result
}

/// The answer to a command the terminal answers itself, not the agent: `/pairing` (the local user is the owner
/// who approves other people's pairing requests, as in 0.3.5's CLI). `None` for anything else.
fn local_command(s: &Setup, text: &str) -> Option<String> {
    let args = nanobot_channels::pairing_command_args(text)?;
    Some(
        match nanobot_channels::PairingStore::in_config_dir(&s.paths.data_dir()) {
            Ok(store) => nanobot_channels::pairing_command(&store, "cli", args),
            Err(e) => format!("Pairing: {e}"),
        },
    )
}

fn write_line(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| CliError::io("write", "stdout", e))
}

/// How long `agent -m` waits, after the answer, for the memory work the turn started.
const ONE_SHOT_FINISH_LIMIT: Duration = Duration::from_secs(120);

async fn one_shot(
    env: &CliEnv,
    a: &AgentArgs,
    agent: &AgentLoop,
    ui: &UiHook,
    text: &str,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let pb = spinner(env);
    let mut hints = ui.listen();
    // The answer streams as it comes, to a terminal or a pipe alike (as 0.3.5's `agent -m` does).
    let (tx, mut deltas) = mpsc::unbounded_channel::<String>();
    let opts = TurnOptions {
        stream: Some(tx),
        ..TurnOptions::default()
    };
    let turn = agent.process_message(cli_message(text, &a.session), opts);
    tokio::pin!(turn);
    let ansi = env.stdout_tty && !a.no_markdown;
    let mut md = MarkdownStream::new(ansi);
    let mut streamed = false;
    // Whether what was written so far ends a line (nothing written counts as not).
    let at_line_end = std::cell::Cell::new(false);
    let mut write = |s: &str| {
        if let Some(c) = s.chars().last() {
            at_line_end.set(c == '\n');
        }
        out.write_all(s.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| CliError::io("write", "stdout", e))
    };
    let reply = loop {
        tokio::select! {
            r = &mut turn => break r,
            Some(d) = deltas.recv() => {
                if !streamed {
                    pb.finish_and_clear();
                    streamed = true;
                }
                write(&md.push(&d))?;
            }
            Some(UiEvent::ToolHint(h)) = hints.recv() => {
                if streamed {
                    // What streamed before a tool call ends its paragraph.
                    write(&md.finish())?;
                    write("\n")?;
                }
                show_hint(&pb, &h);
            }
        }
    };
    while let Ok(d) = deltas.try_recv() {
        streamed = true;
        write(&md.push(&d))?;
    }
    pb.finish_and_clear();
    let reply = reply?;
    if reply.stop_reason == Some(StopReason::Error) {
        if streamed {
            write(&md.finish())?;
            write("\n")?;
        }
        return Err(CliError::Turn(reply.content));
    }
    let text = if streamed {
        md.finish()
    } else {
        MarkdownStream::render_all(&reply.content, ansi)
    };
    write(&text)?;
    // One newline ends the answer, whether it streamed or not.
    if !at_line_end.get() {
        write("\n")?;
    }
    Ok(())
}

fn cli_message(text: &str, session: &str) -> InboundMessage {
    let chat_id = session.split_once(':').map_or(session, |(_, id)| id);
    InboundMessage::new("cli", "user", chat_id, text).with_session_key(session)
}

type Editor = rustyline::DefaultEditor;

fn is_exit(line: &str) -> bool {
    matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "exit" | "quit" | "/exit" | "/quit" | ":q"
    )
}

async fn interactive(
    env: &CliEnv,
    s: &Setup,
    a: &AgentArgs,
    agent: &AgentLoop,
    ui: &UiHook,
) -> Result<(), CliError> {
    let mut editor =
        Editor::new().map_err(|e| CliError::Turn(format!("cannot start the line editor: {e}")))?;
    let history = s.paths.cli_history_path();
    if let Some(dir) = history.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    for entry in crate::cli_history::load(&history) {
        let _ = editor.add_history_entry(entry);
    }
    let printer: Option<Box<dyn rustyline::ExternalPrinter + Send>> = if env.stdin_tty {
        editor
            .create_external_printer()
            .ok()
            .map(|p| Box::new(p) as Box<dyn rustyline::ExternalPrinter + Send>)
    } else {
        None
    };
    let printer = Arc::new(Mutex::new(printer));

    // Cron jobs fire in this mode too; their answers are printed above the prompt.
    let cancel = CancellationToken::new();
    if let Some(svc) = agent.cron() {
        let mut finished = svc.subscribe();
        let run_svc = svc.clone();
        let c = cancel.clone();
        tokio::spawn(async move { run_svc.run(c).await });
        let printer = printer.clone();
        let c = cancel.clone();
        tokio::spawn(async move {
            loop {
                let outcome = tokio::select! {
                    () = c.cancelled() => break,
                    o = finished.recv() => o,
                };
                match outcome {
                    Ok(o) => {
                        let body = o
                            .output
                            .clone()
                            .or_else(|| o.record.error.clone().map(|e| format!("failed: {e}")))
                            .unwrap_or_default();
                        let text = format!("\n⏰ {}: {}\n", o.job.name, body);
                        let mut p = lock(&printer);
                        match p.as_mut() {
                            Some(p) => {
                                let _ = p.print(text);
                            }
                            None => {
                                print!("{text}");
                                let _ = std::io::stdout().flush();
                            }
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        });
    }

    println!(
        "🐈 nanobot interactive mode — type exit or press Ctrl-D to leave, Ctrl-C stops a running turn\n"
    );
    let ansi = env.stdout_tty && !a.no_markdown;
    let mut interrupts = Interrupts::new();
    let mut editor = Some(editor);
    let result = loop {
        let Some(mut ed) = editor.take() else {
            break Ok(());
        };
        let (ed, line) = match tokio::task::spawn_blocking(move || {
            let line = ed.readline(PROMPT);
            (ed, line)
        })
        .await
        {
            Ok(x) => x,
            Err(e) => break Err(CliError::Turn(format!("the line editor stopped: {e}"))),
        };
        let mut ed = ed;
        match line {
            Ok(line) => {
                let text = line.trim().to_owned();
                if text.is_empty() {
                    editor = Some(ed);
                    continue;
                }
                let _ = ed.add_history_entry(text.as_str());
                if let Err(e) = crate::cli_history::append(&history, &text) {
                    tracing::warn!(path = %history.display(), error = %e, "could not add to the line history");
                }
                editor = Some(ed);
                if is_exit(&text) {
                    break Ok(());
                }
                if let Some(reply) = local_command(s, &text) {
                    println!("\n{reply}\n");
                    continue;
                }
                let turn = Chat {
                    env,
                    agent,
                    ui,
                    editor: &mut editor,
                };
                if let Err(e) = chat_turn(turn, &mut interrupts, &a.session, &text, ansi).await {
                    eprintln!("Error: {e}");
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => {
                println!("(type exit or press Ctrl-D to leave)");
                editor = Some(ed);
            }
            Err(rustyline::error::ReadlineError::Eof) => break Ok(()),
            Err(e) => break Err(CliError::Turn(format!("cannot read the input: {e}"))),
        }
    };
    cancel.cancel();
    println!("Goodbye!");
    result
}

/// Ctrl-C while a turn runs (at the prompt the line editor reads it as a key). The handler is installed once,
/// before the first prompt, so an early Ctrl-C never kills the process.
struct Interrupts {
    #[cfg(unix)]
    sig: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    fn new() -> Self {
        Interrupts {
            #[cfg(unix)]
            sig: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok(),
        }
    }

    /// Forgets interrupts that arrived between turns.
    fn drain(&mut self) {
        #[cfg(unix)]
        if let Some(s) = self.sig.as_mut() {
            use futures::FutureExt;
            while let Some(Some(())) = s.recv().now_or_never() {}
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        match self.sig.as_mut() {
            Some(s) => {
                if s.recv().await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What one interactive turn works with.
struct Chat<'a> {
    env: &'a CliEnv,
    agent: &'a AgentLoop,
    ui: &'a UiHook,
    /// The line editor, lent to an approval question while the turn waits for its answer.
    editor: &'a mut Option<Editor>,
}

/// A line being read for an approval question: the editor comes back with it.
type PendingRead = tokio::task::JoinHandle<(Editor, rustyline::Result<String>)>;

async fn chat_turn(
    chat: Chat<'_>,
    interrupts: &mut Interrupts,
    session: &str,
    text: &str,
    ansi: bool,
) -> Result<(), CliError> {
    let Chat {
        env,
        agent,
        ui,
        editor,
    } = chat;
    // Before anything shows that the turn started: a Ctrl-C after that must count.
    interrupts.drain();
    let pb = spinner(env);
    let mut hints = ui.listen();
    let (tx, mut deltas) = mpsc::unbounded_channel::<String>();
    let (atx, mut questions) = mpsc::unbounded_channel();
    let opts = TurnOptions {
        stream: Some(tx),
        approver: Some(Arc::new(TerminalApprover { tx: atx })),
        ..TurnOptions::default()
    };
    let mut reading: Option<PendingRead> = None;
    let mut answer_to: Option<oneshot::Sender<nanobot_core::ApprovalAnswer>> = None;
    let turn = agent.process_message(cli_message(text, session), opts);
    tokio::pin!(turn);
    let mut md = MarkdownStream::new(ansi);
    let mut streamed = false;
    let mut stdout = std::io::stdout();
    let mut print = |s: &str| {
        let _ = stdout.write_all(s.as_bytes());
        let _ = stdout.flush();
    };
    let mut stopped = false;
    let mut confirmed = false;
    let mut retry = tokio::time::interval(Duration::from_millis(50));
    let reply = loop {
        tokio::select! {
            r = &mut turn => break r,
            Some(d) = deltas.recv() => {
                if !streamed {
                    pb.finish_and_clear();
                    print("\n🐈 ");
                    streamed = true;
                }
                print(&md.push(&d));
            }
            Some(UiEvent::ToolHint(h)) = hints.recv() => {
                if streamed {
                    print(&md.finish());
                    print("\n");
                }
                show_hint(&pb, &h);
            }
            Some((question, reply)) = questions.recv(), if answer_to.is_none() => {
                pb.finish_and_clear();
                if streamed {
                    print(&md.finish());
                    print("\n");
                }
                print(&format!("\n{question}\n"));
                match editor.take() {
                    Some(mut ed) => {
                        reading = Some(tokio::task::spawn_blocking(move || {
                            let line = ed.readline("Run it? [y/N] ");
                            (ed, line)
                        }));
                        answer_to = Some(reply);
                    }
                    None => {
                        let _ = reply.send(nanobot_core::ApprovalAnswer::Deny);
                    }
                }
            }
            r = async {
                match reading.as_mut() {
                    Some(h) => h.await,
                    None => std::future::pending().await,
                }
            }, if reading.is_some() => {
                reading = None;
                let yes = match r {
                    Ok((ed, line)) => {
                        *editor = Some(ed);
                        line.is_ok_and(|l| is_yes(&l))
                    }
                    Err(_) => false,
                };
                if let Some(reply) = answer_to.take() {
                    let _ = reply.send(if yes {
                        nanobot_core::ApprovalAnswer::Approve
                    } else {
                        nanobot_core::ApprovalAnswer::Deny
                    });
                }
                print(if yes { "✓ approved\n" } else { "✗ refused\n" });
            }
            () = interrupts.recv(), if !stopped => {
                stopped = true;
                confirmed = agent.stop_session(session) > 0;
            }
            // The turn may not have registered yet when Ctrl-C came: try again until it is stopped.
            _ = retry.tick(), if stopped && !confirmed => {
                confirmed = agent.stop_session(session) > 0;
            }
        }
    };
    while let Ok(d) = deltas.try_recv() {
        if !streamed {
            pb.finish_and_clear();
            print("\n🐈 ");
            streamed = true;
        }
        print(&md.push(&d));
    }
    pb.finish_and_clear();
    // The question timed out (or the turn was stopped) while its line was being read: the editor comes back
    // with that line, which answers nothing now.
    if let Some(h) = reading.take() {
        print("\n(the question is no longer open: press Enter)\n");
        if let Ok((ed, _)) = h.await {
            *editor = Some(ed);
        }
    }
    let reply = reply?;
    if stopped || reply.stop_reason == Some(StopReason::Cancelled) {
        print(&md.finish());
        print("\n⏹ Stopped.\n\n");
        return Ok(());
    }
    if streamed {
        print(&md.finish());
        print("\n\n");
    } else if !reply.content.is_empty() {
        // Command replies (`/help`, `/status`) carry their own 🐈 heading.
        print(if reply.content.starts_with('🐈') {
            "\n"
        } else {
            "\n🐈 "
        });
        print(&MarkdownStream::render_all(&reply.content, ansi));
        print("\n\n");
    }
    Ok(())
}

/// `nanobot cron run ID`: runs the job now as an agent turn and returns its answer.
pub(crate) async fn run_cron_job(env: &CliEnv, s: &Setup, id: &str, force: bool) -> Result<String, CliError> {
    let agent = build_loop(env, s, None, Vec::new())?;
    let svc = agent
        .cron()
        .cloned()
        .ok_or_else(|| CliError::Usage("cron is not available in this configuration".into()))?;
    let outcome = svc.run_now(id, force).await;
    if let Some(m) = agent.mcp() {
        m.shutdown().await;
    }
    let outcome = outcome?;
    match (&outcome.output, &outcome.record.error) {
        (Some(text), _) => Ok(format!("{text}\n")),
        (None, Some(e)) => Err(CliError::Turn(format!("job `{id}` failed: {e}"))),
        (None, None) => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_words() {
        for w in ["exit", "quit", " /quit ", "EXIT", ":q"] {
            assert!(is_exit(w), "{w}");
        }
        assert!(!is_exit("exit now"));
    }

    #[test]
    fn cli_messages_keep_the_session_key() {
        let m = cli_message("hi", "cli:direct");
        assert_eq!(m.session_key(), "cli:direct");
        assert_eq!(m.chat_id, "direct");
        let m = cli_message("hi", "project-x");
        assert_eq!(m.session_key(), "project-x");
    }
}
