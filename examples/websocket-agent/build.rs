//! A link setting worth copying into a program that embeds nanobot: on Linux with glibc, a release build links
//! with packed relative relocations (`-z pack-relative-relocs`, DT_RELR), as nanobot's own programs do
//! (bins/link_settings.rs). A position-independent Rust program has about 10^5 relocations; packed, they take
//! about 20 KB instead of 1.2 MB, and the loader reads them from a bitmap. The program then needs glibc 2.36 or newer
//! at run time and GNU ld 2.38 or lld 15 to link; `NANOBOT_NO_RELR=1` builds without.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NANOBOT_NO_RELR");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("NANOBOT_NO_RELR").is_empty()
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
