//! TempHome.

use nanobot_testkit::TempHome;
use serde_json::json;

#[test]
fn layout_config_and_files() {
    let home = TempHome::new();
    assert!(home.home().is_dir());
    assert!(home.home().starts_with(home.root()));
    assert_eq!(home.nanobot_dir(), home.home().join(".nanobot"));
    assert!(home.workspace().is_dir());
    let path = home.write_config(&json!({"agents": {"defaults": {"model": "m"}}}));
    let back: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(back["agents"]["defaults"]["model"], "m");
    home.write_config_str("{ not json");
    assert_eq!(std::fs::read_to_string(home.config_path()).unwrap(), "{ not json");
    let f = home.write_workspace_file("memory/MEMORY.md", "# mem");
    assert_eq!(f, home.workspace().join("memory/MEMORY.md"));
    assert_eq!(std::fs::read_to_string(f).unwrap(), "# mem");
    let g = home.write_home_file(".config/x", b"y");
    assert!(g.is_file());
    let env = home.env();
    assert_eq!(env.get("HOME"), home.home().to_str());
    assert_ne!(
        std::env::var("HOME").ok().as_deref(),
        Some(home.home().to_str().unwrap())
    );
}

#[test]
fn removed_on_drop_and_independent() {
    let a = TempHome::new();
    let b = TempHome::new();
    assert_ne!(a.home(), b.home());
    let root = a.root().to_path_buf();
    drop(a);
    assert!(!root.exists());
    assert!(b.home().exists());
}
