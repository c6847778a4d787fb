//! `nanobot gateway` and `nanobot serve`: the long-running modes of `nanobot-gateway`, started with the config
//! this command line loads (`-c`, `-w`, the environment).

use crate::args::{GatewayArgs, ServeArgs};
use crate::error::CliError;
use crate::setup::{self, CliEnv};

fn finish(
    rt: tokio::runtime::Runtime,
    result: Result<nanobot_gateway::ShutdownReport, nanobot_gateway::GatewayError>,
) -> Result<(), CliError> {
    match result {
        Ok(report) => {
            if !report.drained {
                eprintln!("some turns did not finish before the shutdown deadline and were cancelled");
            }
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
            Ok(())
        }
        Err(nanobot_gateway::GatewayError::Interrupted) => {
            // Second signal: leave at once.
            rt.shutdown_background();
            Err(CliError::Interrupted)
        }
        Err(e) => {
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
            Err(CliError::Gateway(e))
        }
    }
}

/// `nanobot gateway`.
pub(crate) fn gateway(env: &CliEnv, a: &GatewayArgs) -> Result<(), CliError> {
    let s = setup::load(env, &a.config, true)?;
    crate::onboard::write_templates(&s.workspace)?;
    let mut opts = nanobot_gateway::GatewayOptions::gateway(s.loaded.config, env.core_env(&s.paths));
    opts.port = a.port;
    opts.api = (opts.api || a.api) && !a.no_api;
    let rt = crate::runtime()?;
    let result = rt.block_on(nanobot_gateway::run_gateway(opts));
    finish(rt, result)
}

/// `nanobot serve`.
pub(crate) fn serve(env: &CliEnv, a: &ServeArgs) -> Result<(), CliError> {
    let mut s = setup::load(env, &a.config, true)?;
    crate::onboard::write_templates(&s.workspace)?;
    if let Some(p) = a.port {
        s.loaded.config.api.port = p;
    }
    if let Some(h) = &a.host {
        s.loaded.config.api.host = h.clone();
    }
    let opts = nanobot_gateway::GatewayOptions::serve(s.loaded.config, env.core_env(&s.paths));
    let rt = crate::runtime()?;
    let result = rt.block_on(nanobot_gateway::run_serve(opts));
    finish(rt, result)
}
