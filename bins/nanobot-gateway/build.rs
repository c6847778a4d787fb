//! The programs' link settings: see bins/link_settings.rs (for release builds on Linux: packed relative
//! relocations, the start-up layout of bins/symbol-order.txt, stripping by the linker; opt-in `NANOBOT_NO_PIE`).

include!("../link_settings.rs");

fn main() {
    link_settings();
}
