//! The programs' link settings: see bins/link_settings.rs (packed relative relocations for release builds on
//! Linux/glibc, and the opt-in `NANOBOT_SYMBOL_ORDER` and `NANOBOT_NO_PIE`).

include!("../link_settings.rs");

fn main() {
    link_settings();
}
