//! `install-service`: a systemd user unit that runs the gateway (`~/.config/systemd/user/nanobot-gateway.service`).

use std::path::{Path, PathBuf};

use crate::error::GatewayError;

/// The unit's file name.
pub const UNIT_NAME: &str = "nanobot-gateway.service";

/// What goes into the unit.
#[derive(Debug, Clone)]
pub struct ServiceUnit {
    /// The program to run (the `nanobot` or `nanobot-gateway` executable, absolute).
    pub program: PathBuf,
    /// Its arguments (`["gateway", "-c", "/home/me/.nanobot/config.json"]`).
    pub args: Vec<String>,
    /// Seconds systemd waits after SIGTERM before killing (the graceful-shutdown deadline plus margin).
    pub stop_timeout_secs: u64,
}

/// Quotes one word for a systemd `ExecStart=` line.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@+,".contains(c))
    {
        return word.to_owned();
    }
    let escaped = word.replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%");
    format!("\"{escaped}\"")
}

impl ServiceUnit {
    /// The unit file's text.
    pub fn render(&self) -> String {
        let mut exec = quote(&self.program.to_string_lossy());
        for a in &self.args {
            exec.push(' ');
            exec.push_str(&quote(a));
        }
        format!(
            "[Unit]\n\
             Description=nanobot gateway (personal AI assistant)\n\
             After=network-online.target\n\
             Wants=network-online.target\n\
             \n\
             [Service]\n\
             Type=simple\n\
             ExecStart={exec}\n\
             Restart=on-failure\n\
             RestartSec=5\n\
             KillSignal=SIGTERM\n\
             TimeoutStopSec={}\n\
             \n\
             [Install]\n\
             WantedBy=default.target\n",
            self.stop_timeout_secs
        )
    }

    /// Where the unit goes for the user whose home is `home` (`$XDG_CONFIG_HOME` when given).
    pub fn path(home: &Path, xdg_config_home: Option<&Path>) -> PathBuf {
        xdg_config_home
            .map_or_else(|| home.join(".config"), Path::to_path_buf)
            .join("systemd")
            .join("user")
            .join(UNIT_NAME)
    }

    /// Writes the unit to `path` (creating its directory) and returns the path.
    pub fn install(&self, path: &Path) -> Result<PathBuf, GatewayError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| GatewayError::io("create", dir, e))?;
        }
        std::fs::write(path, self.render()).map_err(|e| GatewayError::io("write", path, e))?;
        Ok(path.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_user_unit_with_quoted_arguments() {
        let unit = ServiceUnit {
            program: "/usr/local/bin/nanobot".into(),
            args: vec!["gateway".into(), "-c".into(), "/home/me/my config.json".into()],
            stop_timeout_secs: 45,
        };
        let text = unit.render();
        assert!(text.contains("ExecStart=/usr/local/bin/nanobot gateway -c \"/home/me/my config.json\"\n"));
        assert!(text.contains("TimeoutStopSec=45\n"));
        assert!(text.contains("WantedBy=default.target"));
        let home = Path::new("/home/me");
        assert_eq!(
            ServiceUnit::path(home, None),
            Path::new("/home/me/.config/systemd/user/nanobot-gateway.service")
        );
        let dir = tempfile::tempdir().unwrap();
        let p = unit.install(&ServiceUnit::path(dir.path(), None)).unwrap();
        assert_eq!(std::fs::read_to_string(p).unwrap(), text);
    }
}
