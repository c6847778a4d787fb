//! How stdio servers are confined: the kernel confinement `exec` gets (`nanobot_tools::confine`), shaped for a
//! program that lives as long as nanobot and that the model drives with arguments it chooses.
//!
//! A confined server sees the file system read-only, without nanobot's data directory and the other hidden paths;
//! it may write only the directories its own config names (its `cwd`, the existing directories among its `args`,
//! `writablePaths`) and a directory of its own (`<state dir>/<server>`, where its caches and temporary files go);
//! with bubblewrap its processes live in a PID namespace that ends with it, so nothing it starts outlives it, and
//! nanobot is not visible to it. `trusted: true` opts a server out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nanobot_tools::ExecSandbox;
use nanobot_tools::confine::{Backend, ExecLimits, FsView};

use crate::{ServerSpec, TransportSpec};

/// How stdio servers are confined ([`crate::McpOptions::confinement`]).
#[derive(Debug, Clone)]
pub struct StdioConfinement {
    /// The sandbox (`tools.exec.sandbox`): bubblewrap where it works, else Landlock, else none (`Auto`); `None`
    /// runs every server unconfined.
    pub sandbox: ExecSandbox,
    /// Paths no confined server sees (nanobot's data directory, `tools.exec.hidePaths`); a directory a server's
    /// config names inside one is shown again.
    pub hidden: Vec<PathBuf>,
    /// Where each server's own writable directory is kept, as `<state_dir>/<server>` (its caches and temporary
    /// files, kept between starts); `None` gives each start a temporary directory, removed when it ends.
    pub state_dir: Option<PathBuf>,
    /// The resource limits of each process of a server. By default those of `exec` without the CPU-time limit
    /// (a server runs for as long as nanobot does).
    pub limits: ExecLimits,
    /// Whether confined servers may use the network.
    pub network: bool,
    /// `tools.network.allowedDomains`: a confined server has no network of its own and reaches only these
    /// domains through nanobot's proxy (with bubblewrap; under Landlock, no network at all). Overrides `network`.
    pub egress: Option<nanobot_tools::egress::EgressSettings>,
}

impl Default for StdioConfinement {
    fn default() -> Self {
        Self {
            sandbox: ExecSandbox::Auto,
            hidden: Vec::new(),
            state_dir: None,
            limits: ExecLimits {
                cpu_seconds: 0,
                ..ExecLimits::default()
            },
            network: true,
            egress: None,
        }
    }
}

/// What a stdio server gets on this machine, in words for `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfinementOutcome {
    /// Confined as documented: the line says by what and where it may write.
    Confined(String),
    /// `trusted: true`: unconfined by the user's choice.
    Trusted(String),
    /// Weaker than the default (no kernel confinement here, or turned off): the line says why.
    Weaker(String),
}

impl StdioConfinement {
    /// The backend a confined server gets here; `Err` when the setting requires bubblewrap and it cannot run.
    pub fn backend(&self) -> Result<Backend, String> {
        nanobot_tools::confine::choose_backend(self.sandbox)
    }

    /// What `spec`'s server gets here; `None` for a server reached over HTTP (no process of nanobot's).
    pub fn describe(&self, spec: &ServerSpec) -> Option<ConfinementOutcome> {
        let TransportSpec::Stdio {
            args,
            cwd,
            trusted,
            writable_paths,
            ..
        } = &spec.transport
        else {
            return None;
        };
        if *trusted {
            return Some(ConfinementOutcome::Trusted(format!(
                "trusted: runs unconfined with nanobot's own rights (tools.mcpServers.{}.trusted)",
                spec.name
            )));
        }
        let backend = match self.backend() {
            Ok(Backend::None) if self.sandbox == ExecSandbox::None => {
                return Some(ConfinementOutcome::Weaker(
                    "runs unconfined: tools.exec.sandbox is \"none\"".to_owned(),
                ));
            }
            Ok(Backend::None) => {
                return Some(ConfinementOutcome::Weaker(
                    "runs unconfined: neither bubblewrap nor Landlock works on this machine (install \
                     bubblewrap)"
                        .to_owned(),
                ));
            }
            Ok(b) => b,
            Err(e) => return Some(ConfinementOutcome::Weaker(format!("does not start: {e}"))),
        };
        let mut writes: Vec<String> = writable(args, cwd.as_deref(), writable_paths)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        writes.push(match &self.state_dir {
            Some(d) => own_dir(d, &spec.name).display().to_string(),
            None => "a temporary directory of its own".to_owned(),
        });
        let hidden = if self.hidden.is_empty() {
            String::new()
        } else {
            format!(
                "; hidden: {}",
                self.hidden
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let network = match (&self.egress, self.network) {
            (None, true) => String::new(),
            (None, false) => "; no network".to_owned(),
            (Some(e), _) => match e.describe(&backend) {
                Ok(route) => format!("; network: {route}"),
                Err(why) => format!("; {why}"),
            },
        };
        Some(ConfinementOutcome::Confined(format!(
            "confined ({}): writes only {}{hidden}{network}",
            backend.name(),
            writes.join(", ")
        )))
    }
}

/// The directory of its own a server gets under `state_dir`, named after it (characters outside
/// `[A-Za-z0-9._-]` become `_`, so no name leads elsewhere).
pub fn own_dir(state_dir: &Path, server: &str) -> PathBuf {
    let safe: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = match safe.as_str() {
        "" | "." | ".." => format!("_{safe}"),
        _ => safe,
    };
    state_dir.join(safe)
}

/// The directories a server's config names for writing, real and existing: `writablePaths`, its `cwd`, and the
/// existing directories among its `args` (`/data` or `--root=/data`). Files are not made writable (a server's own
/// script is named there).
pub fn writable(args: &[String], cwd: Option<&Path>, writable_paths: &[PathBuf]) -> Vec<PathBuf> {
    let named = args.iter().filter_map(|a| {
        let value = match a.split_once('=') {
            Some((k, v)) if k.starts_with('-') => v,
            _ => a.as_str(),
        };
        let p = Path::new(value);
        (p.is_absolute() && p.is_dir()).then(|| p.to_path_buf())
    });
    let mut out: Vec<PathBuf> = writable_paths
        .iter()
        .cloned()
        .chain(cwd.map(Path::to_path_buf))
        .chain(named)
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What a confined start needs: the program and arguments to run, the environment to add, the working
/// directory, and what must live as long as the server.
pub(crate) struct Confined {
    pub(crate) argv: Vec<std::ffi::OsString>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: PathBuf,
    pub(crate) landlock: Option<nanobot_tools::confine::LandlockRules>,
    pub(crate) own: OwnDir,
    /// The server's egress proxy, for as long as it runs.
    pub(crate) egress: Option<nanobot_tools::egress::EgressProxy>,
}

/// The server's own directory: kept under the state directory, or a temporary one removed with the server.
#[derive(Debug)]
pub(crate) enum OwnDir {
    Kept(PathBuf),
    Temporary(nanobot_tools::confine::PrivateDir),
}

impl OwnDir {
    fn path(&self) -> &Path {
        match self {
            OwnDir::Kept(p) => p,
            OwnDir::Temporary(t) => t.path(),
        }
    }
}

impl StdioConfinement {
    /// Prepares a confined start of `program args` for the server `server` (`cwd`: its configured working
    /// directory; `writable_paths`: its `writablePaths`; `temp_base`: where a temporary directory of its own goes
    /// when there is no state directory). `Ok(None)`: no confinement on this machine (or turned off), start it as
    /// it is.
    pub(crate) fn prepare(
        &self,
        server: &str,
        temp_base: &Path,
        program: &Path,
        args: &[String],
        cwd: Option<&Path>,
        writable_paths: &[PathBuf],
    ) -> std::io::Result<Option<Confined>> {
        let backend = self.backend().map_err(std::io::Error::other)?;
        if backend == Backend::None {
            return Ok(None);
        }
        let own = match &self.state_dir {
            Some(d) => {
                let dir = own_dir(d, server);
                std::fs::create_dir_all(&dir)?;
                OwnDir::Kept(dir)
            }
            None => OwnDir::Temporary(nanobot_tools::confine::PrivateDir::new_in(
                temp_base,
                "nanobot-mcp-",
            )?),
        };
        let own_real = std::fs::canonicalize(own.path())?;
        let tmp = own_real.join("tmp");
        let cache = own_real.join("cache");
        for d in [&tmp, &cache] {
            std::fs::create_dir_all(d)?;
        }
        let mut hidden: Vec<PathBuf> = self
            .hidden
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        hidden.sort();
        hidden.dedup();
        // The program and the files its arguments name (its script) stay visible, read-only, where a hidden
        // directory would cover them: at the path it is started by (a link stays a name the program may act on).
        // Elsewhere they are visible as they are.
        let covered =
            |p: &Path| std::fs::canonicalize(p).is_ok_and(|real| hidden.iter().any(|h| real.starts_with(h)));
        let read_only: Vec<PathBuf> = std::iter::once(program)
            .chain(args.iter().map(Path::new))
            .filter(|p| p.is_absolute() && p.is_file() && covered(p))
            .map(Path::to_path_buf)
            .collect();
        let mut view = FsView {
            workspace: own_real.clone(),
            private_tmp: tmp.clone(),
            // A server may be installed under /tmp (a checkout, a venv): it stays visible there.
            shared_tmp: true,
            restrict: false,
            read_only,
            read_write: writable(args, cwd, writable_paths),
            hidden,
            network: self.network,
        };
        // With an allow-list: no network of its own; under bubblewrap a proxy of its own is the one way out (its
        // socket in the server's `tmp/`, at the same path inside).
        let egress = match &self.egress {
            Some(e) => {
                let socket = tmp.join("egress.sock");
                e.route(&backend, &mut view, &socket, &socket)?
            }
            None => None,
        };
        let cwd = match cwd {
            Some(c) => std::fs::canonicalize(c)?,
            None => std::env::current_dir()
                .ok()
                .filter(|d| d.is_dir())
                .unwrap_or_else(|| own_real.clone()),
        };
        let (mut argv, landlock) =
            nanobot_tools::confine::launcher(&backend, &view, &cwd, egress.as_ref(), &self.limits);
        let mut env = BTreeMap::new();
        if let Some(route) = &egress {
            env.extend(route.env());
        }
        // Its own `tmp/`, at the same path inside (`/tmp` stays shared and read-only).
        env.insert("TMPDIR".to_owned(), tmp.display().to_string());
        argv.push(program.into());
        argv.extend(args.iter().map(Into::into));
        // Caches in the server's own directory: `npx` and `uvx` fetch the server there.
        env.insert("XDG_CACHE_HOME".to_owned(), cache.display().to_string());
        env.insert(
            "npm_config_cache".to_owned(),
            cache.join("npm").display().to_string(),
        );
        Ok(Some(Confined {
            argv,
            env,
            cwd,
            landlock,
            own,
            egress: egress.map(nanobot_tools::egress::Route::into_proxy),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_name_never_leads_out_of_the_state_dir() {
        let d = Path::new("/s");
        assert_eq!(own_dir(d, "github"), Path::new("/s/github"));
        assert_eq!(own_dir(d, "../x"), Path::new("/s/.._x"));
        assert_eq!(own_dir(d, ".."), Path::new("/s/_.."));
        assert_eq!(own_dir(d, "a/b c"), Path::new("/s/a_b_c"));
        assert_eq!(own_dir(d, ""), Path::new("/s/_"));
    }

    #[test]
    fn writable_takes_named_directories_not_files() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::create_dir_all(root.join("root")).unwrap();
        std::fs::create_dir_all(root.join("extra")).unwrap();
        std::fs::create_dir_all(root.join("cwd")).unwrap();
        std::fs::write(root.join("server.js"), "").unwrap();
        let arg = |p: &str| root.join(p).display().to_string();
        let args = vec![
            arg("server.js"),
            arg("data"),
            format!("--root={}", arg("root")),
            "relative/dir".to_owned(),
            arg("missing"),
        ];
        let w = writable(&args, Some(&root.join("cwd")), &[root.join("extra")]);
        let mut want = vec![
            root.join("cwd"),
            root.join("data"),
            root.join("extra"),
            root.join("root"),
        ];
        want.sort();
        assert_eq!(w, want);
    }
}
