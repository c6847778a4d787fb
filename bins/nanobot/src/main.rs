//! The `nanobot` binary: parses the command line and hands over to [`nanobot_cli`].

fn main() {}
