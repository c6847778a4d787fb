//! Example (work in progress).
fn main() {}
