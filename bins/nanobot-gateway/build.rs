//! The same link settings as the `nanobot` binary: see bins/nanobot/build.rs (packed relative relocations for
//! release builds on Linux/glibc; `NANOBOT_NO_RELR=1` turns them off).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NANOBOT_NO_RELR");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let wanted = var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("NANOBOT_NO_RELR").is_empty();
    if wanted {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
