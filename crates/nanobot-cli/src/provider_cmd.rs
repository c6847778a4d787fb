//! `nanobot provider login|logout NAME`: signing in to the OAuth providers (0.3.5's `cli/provider.py`). The
//! logins are kept where 0.3.5 keeps them, so either program finds the other's.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use nanobot_providers::copilot;
use nanobot_providers::oauth::{OAuthError, TokenStore};
use nanobot_providers::registry::{PROVIDERS, ProviderSpec, find_spec};
use nanobot_util::EnvMap;

use crate::setup::{self, CliEnv};
use crate::{CliError, ConfigArgs, write_out};

/// `nanobot provider …`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum ProviderAction {
    /// Sign in to an OAuth provider (github-copilot).
    Login(ProviderLoginArgs),
    /// Remove the stored sign-in of an OAuth provider.
    Logout(ProviderLogoutArgs),
}

/// `nanobot provider login NAME`.
#[derive(Debug, Clone, Args)]
pub struct ProviderLoginArgs {
    /// The OAuth provider (`github-copilot`).
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
    /// The OAuth provider (`github-copilot`).
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
        "github_copilot" => "github-copilot/gpt-4.1",
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

fn store_for(spec: &ProviderSpec, vars: &EnvMap) -> Result<TokenStore, CliError> {
    let store = match spec.name {
        "github_copilot" => copilot::token_store(vars),
        other => Err(OAuthError::Flow(format!(
            "no login for `{other}` in this version"
        ))),
    };
    store.map_err(|e| CliError::Failed(e.to_string()))
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
        "github_copilot" => login_copilot(&vars, out)?,
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

fn login_copilot(vars: &EnvMap, out: &mut dyn Write) -> Result<Option<String>, CliError> {
    let failed = |e: OAuthError| CliError::Failed(format!("Authentication error: {e}"));
    let store = store_for(find_spec("github_copilot").ok_or_else(no_spec)?, vars)?;
    write_out(out, "Starting GitHub Copilot device flow...\n\n")?;
    let flow = copilot::GithubDeviceLogin::new(copilot::CopilotUrls::from_env(vars)).map_err(failed)?;
    let rt = crate::runtime()?;
    let token = rt.block_on(async {
        let code = flow.start().await.map_err(failed)?;
        write_out(
            out,
            &format!("Open: {}\nCode: {}\n", code.verification_uri, code.user_code),
        )?;
        flow.finish(&code).await.map_err(failed)
    })?;
    store.save(&token).map_err(failed)?;
    Ok(token.account_id)
}

fn no_spec() -> CliError {
    CliError::Failed("the provider registry lost an entry".into())
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
    let store = store_for(spec, &vars)?;
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
        let err = oauth_spec("openai").unwrap_err().to_string();
        assert!(err.contains("github-copilot"), "{err}");
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
