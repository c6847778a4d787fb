//! The spot for the long-running modes.
//!
//! `nanobot gateway` and `nanobot serve` live in `nanobot-gateway` (`run_gateway(opts)` / `run_serve(opts)`).
//! To add them: depend on `nanobot-gateway`, add `Gateway(..)`/`Serve(..)` variants to [`crate::Command`]
//! (next to the comment there), and dispatch them in [`crate::run_with`] through a function here that builds
//! the options from a [`crate::CliEnv`] and the loaded config (`crate::setup::load`) and runs them on
//! the runtime from `crate::runtime()`. Errors map to [`crate::CliError`] like the other commands.
