//! The egress bridge as a program of its own, for the egress tests (`cargo test` builds it; the tests find it next
//! to their own binary): what the `nanobot` programs do when started as `<program> __nanobot-egress-bridge …`.

fn main() {
    nanobot_tools::egress::run_bridge_if_asked();
    eprintln!(
        "usage: egress_bridge {} <socket> <port> -- <command>…",
        nanobot_tools::egress::BRIDGE_ARG
    );
    std::process::exit(2);
}
