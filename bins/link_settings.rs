// Link settings shared by the programs' build scripts (`include!`d by bins/*/build.rs). Set here rather than as
// `rustflags` in `.cargo/config.toml` because flags there change the fingerprint of every crate in every profile
// (a full rebuild of all dependencies, in test builds too), while these change only the final link. What each
// gave is measured in docs/benchmarks.md ("Lean and fast").
//
// * Release builds for Linux with glibc link with packed relative relocations (`-z pack-relative-relocs`,
//   DT_RELR): the loader applies the executable's ~10^5 PIE relocations from a bitmap instead of 24-byte
//   records. Needs glibc 2.36 or newer at run time; `NANOBOT_NO_RELR=1` builds without.
// * Release builds for Linux lay out the functions a start and a turn run first and together, so that code sits
//   in few pages instead of being spread over the whole program (the kernel maps 64 KiB around each page a
//   process touches): the toolchain's own lld links with `--symbol-ordering-file=bins/symbol-order.txt` (one
//   mangled name per line, recorded by `scripts/release-build`). The names carry each crate's build hash, which
//   depends on the toolchain (pinned in rust-toolchain.toml), the crate's version, features, dependencies and the
//   release profile, not on the code: the file recorded once stays good until one of those changes (CI checks
//   that with `scripts/layout-fingerprint --check`), and a name no longer in the program is ignored (the layout
//   then helps less, never harms). `NANOBOT_SYMBOL_ORDER=<file>` uses
//   another file, `NANOBOT_SYMBOL_ORDER=none` none; a toolchain without lld links without, with a warning.
// * Release builds for Linux are stripped by the linker (`--strip-all`), not by the profile's `strip`, which
//   would change every crate's build hash and so every name in the order file. `NANOBOT_KEEP_SYMBOLS=1` keeps
//   the symbol table (`scripts/symbol-order` reads it).
// * `NANOBOT_NO_PIE=1` (release, Linux): a position-dependent executable. The loader then relocates nothing and
//   the 2.5 MB of relocated read-only data stays clean and shared, but the program's own code loses address
//   randomisation (ASLR). Off by default for that reason.

fn link_settings() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../link_settings.rs");
    for var in [
        "NANOBOT_NO_RELR",
        "NANOBOT_SYMBOL_ORDER",
        "NANOBOT_NO_PIE",
        "NANOBOT_KEEP_SYMBOLS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let release_linux = var("PROFILE") == "release" && var("CARGO_CFG_TARGET_OS") == "linux";
    if !release_linux {
        return;
    }
    if var("CARGO_CFG_TARGET_ENV") == "gnu" && var("NANOBOT_NO_RELR").is_empty() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if var("NANOBOT_KEEP_SYMBOLS").is_empty() {
        println!("cargo:rustc-link-arg-bins=-Wl,--strip-all");
    }
    let committed = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join("../symbol-order.txt");
    println!("cargo:rerun-if-changed={}", committed.display());
    let order = match var("NANOBOT_SYMBOL_ORDER").as_str() {
        "none" => None,
        "" => committed.is_file().then_some(committed),
        file => {
            let file = std::path::PathBuf::from(file);
            if !file.is_file() {
                panic!("NANOBOT_SYMBOL_ORDER names {}, which is not a file", file.display());
            }
            println!("cargo:rerun-if-changed={}", file.display());
            Some(file)
        }
    };
    if let Some(order) = order {
        match toolchain_lld() {
            Some(gcc_ld) => {
                println!("cargo:rustc-link-arg-bins=-B{}", gcc_ld.display());
                println!("cargo:rustc-link-arg-bins=-fuse-ld=lld");
                println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
                println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
            }
            None => println!(
                "cargo:warning=the toolchain has no lld (rustlib/<host>/bin/gcc-ld/ld.lld): linked without the \
                 start-up layout of {} (the program works; a start maps more memory)",
                order.display()
            ),
        }
    }
    if !var("NANOBOT_NO_PIE").is_empty() {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}

/// The directory holding the toolchain's lld as `ld.lld` for the C compiler driver (`-fuse-ld=lld` finds it by
/// `-B`), when the toolchain ships one (rustup's do).
fn toolchain_lld() -> Option<std::path::PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let host = std::env::var("HOST").unwrap_or_default();
    let gcc_ld = std::path::Path::new(&sysroot).join(format!("lib/rustlib/{host}/bin/gcc-ld"));
    gcc_ld.join("ld.lld").is_file().then_some(gcc_ld)
}
