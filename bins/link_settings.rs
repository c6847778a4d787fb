// Link settings shared by the programs' build scripts (`include!`d by bins/*/build.rs). Set here rather than as
// `rustflags` in `.cargo/config.toml` because flags there change the fingerprint of every crate in every profile
// (a full rebuild of all dependencies, in test builds too), while these change only the final link. What each
// gave is measured in docs/benchmarks.md ("Lean and fast").
//
// * Release builds for Linux with glibc link with packed relative relocations (`-z pack-relative-relocs`,
//   DT_RELR): the loader applies the executable's ~10^5 PIE relocations from a bitmap instead of 24-byte
//   records. Needs glibc 2.36 or newer at run time; `NANOBOT_NO_RELR=1` builds without.
// * `NANOBOT_SYMBOL_ORDER=<file>` (release, Linux): links with the toolchain's own lld and lays out the functions
//   named in `<file>` (one mangled symbol per line, as `scripts/symbol-order` writes it) first and together, so
//   the code a start and a turn run sits in few pages instead of being spread over the whole program (the kernel
//   maps 64 KiB around each page a process touches). Names not in the program are ignored.
// * `NANOBOT_NO_PIE=1` (release, Linux): a position-dependent executable. The loader then relocates nothing and
//   the 2.5 MB of relocated read-only data stays clean and shared, but the program's own code loses address
//   randomisation (ASLR). Off by default for that reason.

fn link_settings() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../link_settings.rs");
    for var in ["NANOBOT_NO_RELR", "NANOBOT_SYMBOL_ORDER", "NANOBOT_NO_PIE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let release_linux = var("PROFILE") == "release" && var("CARGO_CFG_TARGET_OS") == "linux";
    if release_linux && var("CARGO_CFG_TARGET_ENV") == "gnu" && var("NANOBOT_NO_RELR").is_empty() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    let order = var("NANOBOT_SYMBOL_ORDER");
    if release_linux && !order.is_empty() {
        let order = std::path::Path::new(&order);
        if !order.is_file() {
            panic!("NANOBOT_SYMBOL_ORDER names {}, which is not a file", order.display());
        }
        println!("cargo:rerun-if-changed={}", order.display());
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let sysroot = std::process::Command::new(&rustc)
            .args(["--print", "sysroot"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| panic!("NANOBOT_SYMBOL_ORDER: `{rustc} --print sysroot` failed"));
        // The toolchain ships lld as `gcc-ld/ld.lld` for the C compiler driver (`-fuse-ld=lld` finds it by `-B`).
        let gcc_ld = std::path::Path::new(&sysroot).join(format!("lib/rustlib/{}/bin/gcc-ld", var("HOST")));
        if !gcc_ld.join("ld.lld").is_file() {
            panic!("NANOBOT_SYMBOL_ORDER: the toolchain has no lld at {}", gcc_ld.display());
        }
        println!("cargo:rustc-link-arg-bins=-B{}", gcc_ld.display());
        println!("cargo:rustc-link-arg-bins=-fuse-ld=lld");
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    if release_linux && !var("NANOBOT_NO_PIE").is_empty() {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
