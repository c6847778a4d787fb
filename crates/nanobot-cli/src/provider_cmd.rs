//! `nanobot provider login|logout NAME`: signing in to the OAuth providers (0.3.5's `cli/provider.py`). The
//! logins are kept where 0.3.5 keeps them, so either program finds the other's.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use nanobot_providers::oauth::{BrowserSignIn, OAuthError, TokenStore};
use nanobot_providers::registry::{PROVIDERS, ProviderSpec, find_spec};
use nanobot_providers::{codex, copilot, grok};
use nanobot_util::EnvMap;

use crate::setup::{self, CliEnv};
use crate::{CliError, ConfigArgs, write_out};

/// `nanobot provider …`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum ProviderAction {
    /// Sign in to an OAuth provider (github-copilot, openai-codex, xai-grok).
    Login(ProviderLoginArgs),
    /// Remove the stored sign-in of an OAuth provider.
    Logout(ProviderLogoutArgs),
}

/// `nanobot provider login NAME`.
#[derive(Debug, Clone, Args)]
pub struct ProviderLoginArgs {
    /// The OAuth provider (`github-copilot`, `openai-codex`, `xai-grok`).
    pub provider: String,
    /// Also make it the agent's provider (`agents.defaults.provider` and `model`).
    #[arg(long = "set-main", visible_alias = "main")]
    pub set_main: bool,
    /// The model to use when making it the agent's provider (implies `--set-main`).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Config file (default: ~/.nanobot/config.json).
    #[arg(short = 'c', long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
}

/// `nanobot provider logout NAME`.
#[derive(Debug, Clone, Args)]
pub struct ProviderLogoutArgs {
    /// The OAuth provider (`github-copilot`, `openai-codex`, `xai-grok`).
    pub provider: String,
    /// Config file (default: ~/.nanobot/config.json).
    #[arg(short = 'c', long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
}

/// The provider's name for people (0.3.5's).
fn display(spec: &ProviderSpec) -> &'static str {
    match spec.name {
        "github_copilot" => "GitHub Copilot",
        other => find_spec(other).map_or("", |s| s.display_name),
    }
}

/// The model `--set-main` chooses without `--model` (0.3.5's).
fn default_model(spec: &ProviderSpec) -> &'static str {
    match spec.name {
        "github_copilot" => "github-copilot/gpt-5.4-mini",
        "openai_codex" => "openai-codex/gpt-5.6-sol",
        "xai_grok" => "xai-grok/grok-4.6",
        _ => "",
    }
}

/// The registry spec of OAuth provider `name` (`github-copilot`, `github_copilot`), else a usage error listing
/// the supported ones.
fn oauth_spec(name: &str) -> Result<&'static ProviderSpec, CliError> {
    match find_spec(name) {
        Some(spec) if spec.is_oauth => Ok(spec),
        _ => {
            let names: Vec<String> = PROVIDERS
                .iter()
                .filter(|s| s.is_oauth)
                .map(|s| s.name.replace('_', "-"))
                .collect();
            Err(CliError::Usage(format!(
                "unknown OAuth provider {name:?}; supported: {}",
                names.join(", ")
            )))
        }
    }
}

/// The environment the provider code reads: the process's, with `HOME` filled in from the CLI's home.
fn oauth_env(env: &CliEnv) -> EnvMap {
    let mut vars = env.vars.clone();
    if vars.non_empty("HOME").is_none() {
        vars.insert("HOME", env.home.to_string_lossy());
    }
    vars
}

/// The token store of `spec`; the xAI login lives in nanobot's data directory (`data_dir`, else the default).
fn store_in(spec: &ProviderSpec, vars: &EnvMap, data_dir: Option<PathBuf>) -> Result<TokenStore, CliError> {
    let store = match spec.name {
        "xai_grok" => data_dir
            .or_else(|| grok::default_data_dir(vars))
            .map(|d| grok::token_store(&d))
            .ok_or(OAuthError::NoHome),
        "github_copilot" => copilot::token_store(vars),
        "openai_codex" => codex::token_store(vars),
        other => Err(OAuthError::Flow(format!(
            "no login for `{other}` in this version"
        ))),
    };
    store.map_err(|e| CliError::Failed(e.to_string()))
}

/// Opens `url` in the user's browser, as 0.3.5 does, when there is one to open: on a terminal, with `$BROWSER`
/// set, on macOS, or with a graphical session (`DISPLAY`, `WAYLAND_DISPLAY`). Whether it was started.
fn try_browser(env: &CliEnv, url: &str) -> bool {
    let graphical = cfg!(target_os = "macos")
        || ["BROWSER", "DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| env.vars.non_empty(v).is_some());
    env.stdout_tty && graphical && crate::webui::open_browser(env, url).is_ok()
}

/// Runs `nanobot provider …`.
pub(crate) fn run(env: &CliEnv, action: ProviderAction, out: &mut dyn Write) -> Result<(), CliError> {
    match action {
        ProviderAction::Login(a) => login(env, &a, out),
        ProviderAction::Logout(a) => logout(env, &a, out),
    }
}

fn login(env: &CliEnv, a: &ProviderLoginArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let spec = oauth_spec(&a.provider)?;
    let vars = oauth_env(env);
    write_out(out, &format!("🐈 nanobot OAuth Login - {}\n\n", display(spec)))?;
    let account = match spec.name {
        "github_copilot" => login_copilot(env, &vars, out)?,
        "openai_codex" => login_codex(env, &vars, out)?,
        "xai_grok" => login_grok(env, a, &vars, out)?,
        _ => {
            return Err(CliError::Failed(format!(
                "login is not built for {}",
                display(spec)
            )));
        }
    };
    write_out(
        out,
        &format!(
            "✓ Authenticated with {}  {}\n",
            display(spec),
            account.as_deref().unwrap_or("")
        ),
    )?;
    if a.set_main || a.model.as_deref().is_some_and(|m| !m.trim().is_empty()) {
        set_main(env, spec, a, out)?;
    }
    Ok(())
}

fn login_copilot(env: &CliEnv, vars: &EnvMap, out: &mut dyn Write) -> Result<Option<String>, CliError> {
    let store = copilot::token_store(vars).map_err(auth_failed)?;
    write_out(out, "Starting GitHub Copilot device flow...\n\n")?;
    let flow = copilot::GithubDeviceLogin::new(copilot::CopilotUrls::from_env(vars)).map_err(auth_failed)?;
    let rt = crate::runtime()?;
    let token = rt.block_on(async {
        let code = flow.start().await.map_err(auth_failed)?;
        write_out(
            out,
            &format!("Open: {}\nCode: {}\n", code.verification_uri, code.user_code),
        )?;
        try_browser(
            env,
            code.verification_uri_complete
                .as_deref()
                .unwrap_or(&code.verification_uri),
        );
        flow.finish(&code).await.map_err(auth_failed)
    })?;
    store.save(&token).map_err(auth_failed)?;
    Ok(token.account_id)
}

/// How long the browser sign-in may take (0.3.5's WebUI flow allows ten minutes).
const BROWSER_LOGIN_BOUND: std::time::Duration = std::time::Duration::from_secs(600);

/// OpenAI Codex: an existing login (refreshed when needed) is kept, as 0.3.5 does; otherwise the browser
/// sign-in, its answer arriving at the callback on this machine or, on a terminal, pasted.
fn login_codex(env: &CliEnv, vars: &EnvMap, out: &mut dyn Write) -> Result<Option<String>, CliError> {
    let store = codex::token_store(vars).map_err(auth_failed)?;
    let urls = codex::CodexUrls::from_env(vars);
    let rt = crate::runtime()?;
    let http = http_client()?;
    let existing = codex::CodexTokens::new(urls.clone(), store.clone(), http, Some(&env.home));
    if let Ok(token) = rt.block_on(existing.token()) {
        return Ok(token.account_id);
    }
    write_out(out, "Starting interactive OAuth login...\n\n")?;
    let token = rt.block_on(async {
        let login = codex::CodexLogin::start(urls).await.map_err(auth_failed)?;
        let code = browser_code(env, login.browser(), out).await?;
        write_out(out, "\nExchanging authorization code for tokens...\n")?;
        login.exchange(&code).await.map_err(auth_failed)
    })?;
    store.save(&token).map_err(auth_failed)?;
    Ok(token.account_id)
}

/// The error of a failed sign-in, as 0.3.5 words it.
fn auth_failed(e: OAuthError) -> CliError {
    CliError::Failed(format!("Authentication error: {e}"))
}

fn http_client() -> Result<nanobot_providers::reqwest::Client, CliError> {
    nanobot_providers::http_client()
        .map_err(|e| CliError::Failed(format!("cannot build the HTTP client: {e}")))
}

/// The authorization code of a browser sign-in: the URL is printed and opened in the browser where there is one;
/// the code comes from the browser's callback (when it can be received) or, on a terminal, from a pasted
/// callback URL or code, whichever comes first.
async fn browser_code(
    env: &CliEnv,
    sign_in: &BrowserSignIn,
    out: &mut dyn Write,
) -> Result<String, CliError> {
    let url = sign_in.authorize_url();
    write_out(out, &format!("Open this URL in a browser to sign in:\n{url}\n"))?;
    try_browser(env, url);
    if let Some(why) = sign_in.callback_problem() {
        write_out(out, &format!("The local callback cannot be received ({why}).\n"))?;
    }
    let tty = env.stdin_tty;
    let listening = sign_in.callback_problem().is_none();
    let callback = sign_in.wait_for_callback(BROWSER_LOGIN_BOUND);
    let pasted = |line: &str| sign_in.code_from_pasted(line);
    if !tty {
        if !listening {
            return Err(CliError::Failed(
                "Authentication error: the callback cannot be received and there is no terminal to paste the \
                 code into"
                    .into(),
            ));
        }
        write_out(out, "Waiting for the browser...\n")?;
        return callback.await.map_err(auth_failed);
    }
    write_out(
        out,
        "Waiting for the browser; or paste the callback URL or authorization code here: ",
    )?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_ok() {
            let _ = tx.send(line);
        }
    });
    let callback = async {
        if listening {
            callback.await
        } else {
            std::future::pending().await
        }
    };
    tokio::select! {
        code = callback => code.map_err(auth_failed),
        line = rx => match line {
            Ok(line) => pasted(&line).map_err(auth_failed),
            Err(_) => Err(CliError::Failed("no authorization code was given".into())),
        },
    }
}

/// xAI Grok: an existing login (refreshed when needed) is kept, as 0.3.5 does; otherwise the browser sign-in.
fn login_grok(
    env: &CliEnv,
    a: &ProviderLoginArgs,
    vars: &EnvMap,
    out: &mut dyn Write,
) -> Result<Option<String>, CliError> {
    let store = grok::token_store(&env.paths(a.config.as_deref()).0.data_dir());
    let issuer = grok::issuer(vars);
    let rt = crate::runtime()?;
    let http = http_client()?;
    let existing = grok::GrokTokens::new(issuer.clone(), store.clone(), http);
    if let Ok(token) = rt.block_on(existing.token(false)) {
        return Ok(Some(token.account_id.unwrap_or_else(|| "xAI account".into())));
    }
    write_out(
        out,
        "Starting xAI browser sign-in for your X Premium / Grok subscription...\n\n",
    )?;
    let token = rt.block_on(async {
        let login = grok::GrokLogin::start(&issuer).await.map_err(auth_failed)?;
        let code = browser_code(env, login.browser(), out).await?;
        login.exchange(&code).await.map_err(auth_failed)
    })?;
    store.save(&token).map_err(auth_failed)?;
    Ok(Some(token.account_id.unwrap_or_else(|| "xAI account".into())))
}

/// `--set-main`: the provider and model become the agent's defaults (0.3.5 clears `modelPreset` too).
fn set_main(
    env: &CliEnv,
    spec: &ProviderSpec,
    a: &ProviderLoginArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut s = setup::load(
        env,
        &ConfigArgs {
            config: a.config.clone(),
            workspace: None,
        },
        false,
    )?;
    let model = a
        .model
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or(default_model(spec))
        .to_owned();
    let d = &mut s.loaded.config.agents.defaults;
    d.model_preset = None;
    d.provider = spec.name.to_owned();
    d.model = model.clone();
    // 0.3.5: Grok 4.5 and 4.6 have a 500k-token window.
    if spec.name == "xai_grok" && matches!(model.as_str(), "xai-grok/grok-4.5" | "xai-grok/grok-4.6") {
        d.context_window_tokens = 500_000;
    }
    s.loaded.save().map_err(|e| CliError::from_config(e, None))?;
    write_out(
        out,
        &format!(
            "✓ Set {} as the main provider  {model}\nSaved: {}\n",
            spec.name.replace('_', "-"),
            s.loaded.path.display()
        ),
    )
}

fn logout(env: &CliEnv, a: &ProviderLogoutArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let spec = oauth_spec(&a.provider)?;
    let vars = oauth_env(env);
    write_out(out, &format!("🐈 nanobot OAuth Logout - {}\n\n", display(spec)))?;
    let store = store_in(spec, &vars, Some(env.paths(a.config.as_deref()).0.data_dir()))?;
    let removed = store.remove().map_err(|e| CliError::Failed(e.to_string()))?;
    if removed.is_empty() {
        return write_out(
            out,
            &format!("! No local OAuth credentials found for {}\n", display(spec)),
        );
    }
    let mut text = format!("✓ Logged out from {}\n", display(spec));
    for p in removed {
        text.push_str(&format!("Removed: {}\n", p.display()));
    }
    write_out(out, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_matched_in_any_spelling_and_unknown_ones_list_the_supported() {
        assert_eq!(oauth_spec("github-copilot").unwrap().name, "github_copilot");
        assert_eq!(oauth_spec("githubCopilot").unwrap().name, "github_copilot");
        assert_eq!(oauth_spec("openai-codex").unwrap().name, "openai_codex");
        let err = oauth_spec("openai").unwrap_err().to_string();
        assert!(
            err.contains("github-copilot") && err.contains("openai-codex"),
            "{err}"
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_browser_is_started_only_on_a_terminal_with_somewhere_to_show_it() {
        let home = tempfile::tempdir().unwrap();
        let mut env = CliEnv::for_home(home.path(), EnvMap::from_iter([("BROWSER", "true")]));
        assert!(!try_browser(&env, "https://example.com/"), "no terminal");
        env.stdout_tty = true;
        assert!(try_browser(&env, "https://example.com/"));
        env.vars = EnvMap::new();
        assert!(!try_browser(&env, "https://example.com/"), "no graphical session");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn logout_without_a_login_says_so_and_removes_the_files_when_there_is_one() {
        let home = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(home.path(), EnvMap::new());
        let args = ProviderLogoutArgs {
            provider: "github-copilot".into(),
            config: None,
        };
        let mut out = Vec::new();
        logout(&env, &args, &mut out).unwrap();
        assert!(
            String::from_utf8_lossy(&out).contains("No local OAuth credentials found for GitHub Copilot")
        );

        let dir = home.path().join(".local/share/nanobot/auth");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("github-copilot.json"), "{}").unwrap();
        let mut out = Vec::new();
        logout(&env, &args, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("✓ Logged out from GitHub Copilot"), "{text}");
        assert!(!dir.join("github-copilot.json").exists());
    }
}
