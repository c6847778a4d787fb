//! `nanobot gateway install-service` / `uninstall-service` with 0.3.5's flags (`-p`, `-v`, `--name`,
//! `--manager`, `--enable/--no-enable`, `--start/--no-start`), against a recording `systemctl` put first on
//! `PATH`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use nanobot_testkit::TempHome;

use crate::support::{nanobot, stderr, stdout};

/// A `systemctl` that appends its arguments to `<dir>/systemctl.log` and fails for `enable` when
/// `FAKE_SYSTEMCTL_FAIL_ENABLE` is set.
fn fake_systemctl(home: &TempHome) -> PathBuf {
    let bin = home.home().join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("systemctl");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         echo \"$*\" >> \"$FAKE_SYSTEMCTL_LOG\"\n\
         if [ -n \"$FAKE_SYSTEMCTL_FAIL_ENABLE\" ] && [ \"$2\" = enable ]; then exit 3; fi\n\
         exit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn log_path(home: &TempHome) -> PathBuf {
    home.home().join("systemctl.log")
}

/// What the fake `systemctl` was asked, one call per line.
fn calls(home: &TempHome) -> Vec<String> {
    std::fs::read_to_string(log_path(home))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn run_with_systemctl(home: &TempHome, args: &[&str], fail_enable: bool) -> Output {
    let bin = fake_systemctl(home);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = nanobot(home.home());
    cmd.env("PATH", path)
        .env("FAKE_SYSTEMCTL_LOG", log_path(home))
        .args(args);
    if fail_enable {
        cmd.env("FAKE_SYSTEMCTL_FAIL_ENABLE", "1");
    }
    cmd.output().unwrap()
}

fn unit_file(home: &Path, name: &str) -> PathBuf {
    home.join(".config/systemd/user").join(name)
}

fn exec_start(unit: &str) -> &str {
    unit.lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line")
}

#[test]
fn install_service_writes_the_named_unit_then_reloads_enables_and_starts_it() {
    let home = TempHome::new();
    let o = run_with_systemctl(
        &home,
        &[
            "gateway",
            "install-service",
            "--name",
            "My Bot!",
            "-p",
            "18999",
            "-v",
        ],
        false,
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    // 0.3.5's name rule: lower case, other characters become `-`, trailing ones dropped.
    let unit = std::fs::read_to_string(unit_file(home.home(), "my-bot.service")).unwrap();
    let exec = exec_start(&unit);
    let config = home.config_path();
    assert!(
        exec.ends_with(&format!(" gateway -c {} -p 18999 -v", config.display())),
        "the unit runs the gateway with the given port and debug logging: {exec}"
    );
    assert!(
        !unit_file(home.home(), "nanobot-gateway.service").exists(),
        "only the named unit is written"
    );
    assert_eq!(
        calls(&home),
        [
            "--user daemon-reload",
            "--user enable my-bot.service",
            "--user restart my-bot.service"
        ]
    );
    assert!(
        stdout(&o).contains("Gateway service installed."),
        "{}",
        stdout(&o)
    );
}

#[test]
fn no_enable_and_no_start_only_reload() {
    let home = TempHome::new();
    let o = run_with_systemctl(
        &home,
        &[
            "gateway",
            "install-service",
            "--enable",
            "--no-enable",
            "--no-start",
        ],
        false,
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(unit_file(home.home(), "nanobot-gateway.service").is_file());
    assert_eq!(calls(&home), ["--user daemon-reload"]);

    // The last of a pair wins.
    let home = TempHome::new();
    let o = run_with_systemctl(
        &home,
        &[
            "gateway",
            "install-service",
            "--no-start",
            "--start",
            "--no-enable",
        ],
        false,
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert_eq!(
        calls(&home),
        ["--user daemon-reload", "--user restart nanobot-gateway.service"]
    );
}

#[test]
fn a_failing_systemctl_is_an_error_naming_the_command() {
    let home = TempHome::new();
    let o = run_with_systemctl(&home, &["gateway", "install-service"], true);
    assert_eq!(o.status.code(), Some(1), "stdout: {}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("systemctl --user enable nanobot-gateway.service") && err.contains("failed"),
        "{err}"
    );
    assert!(
        unit_file(home.home(), "nanobot-gateway.service").is_file(),
        "the unit stays written"
    );
    assert_eq!(
        calls(&home),
        ["--user daemon-reload", "--user enable nanobot-gateway.service"],
        "nothing runs after the failure"
    );
}

#[test]
fn dry_run_prints_the_unit_and_the_commands_and_does_nothing() {
    let home = TempHome::new();
    let o = run_with_systemctl(
        &home,
        &[
            "gateway",
            "install-service",
            "--dry-run",
            "--name",
            "bot",
            "--no-enable",
        ],
        false,
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let text = stdout(&o);
    assert!(exec_start(&text).contains(" gateway -c "), "{text}");
    assert!(
        text.ends_with(
            "# then: systemctl --user daemon-reload\n# then: systemctl --user restart bot.service\n"
        ),
        "{text}"
    );
    assert!(calls(&home).is_empty());
    assert!(!home.home().join(".config").exists());
}

#[test]
fn launchd_is_refused_and_nothing_is_written() {
    let home = TempHome::new();
    for args in [
        &["gateway", "install-service", "--manager", "launchd"][..],
        &["gateway", "uninstall-service", "--manager", "launchd"],
    ] {
        let o = run_with_systemctl(&home, args, false);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("launchd"), "{}", stderr(&o));
    }
    assert!(calls(&home).is_empty());
    assert!(!home.home().join(".config").exists());
    // `systemd` is accepted by name.
    let o = run_with_systemctl(
        &home,
        &["gateway", "install-service", "--manager", "systemd", "--dry-run"],
        false,
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
}

#[test]
fn uninstall_service_removes_the_named_unit_only() {
    let home = TempHome::new();
    let dir = home.home().join(".config/systemd/user");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("my-bot.service"), "[Unit]\n").unwrap();
    std::fs::write(dir.join("nanobot-gateway.service"), "[Unit]\n").unwrap();
    let o = run_with_systemctl(
        &home,
        &["gateway", "uninstall-service", "--name", "My Bot"],
        false,
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(!dir.join("my-bot.service").exists());
    assert!(dir.join("nanobot-gateway.service").exists());
    assert_eq!(
        calls(&home),
        ["--user disable --now my-bot.service", "--user daemon-reload"]
    );
}
