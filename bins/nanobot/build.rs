//! Release builds for Linux with glibc link with packed relative relocations (`-z pack-relative-relocs`, DT_RELR):
//! the loader then applies the executable's ~10^5 PIE relocations from a bitmap instead of 24-byte records,
//! which is most of a `--version` run (see docs/benchmarks.md). The result needs glibc 2.36 or newer; set
//! `NANOBOT_NO_RELR=1` when building for older systems. Done here rather than as `rustflags` in
//! `.cargo/config.toml` because flags there change the fingerprint of every crate in every profile (a full
//! rebuild of all dependencies, in test builds too), while this changes only the final link.

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
