//! A TCP relay on loopback in front of the homeserver that a test can cut (every connection dropped, new ones
//! closed at once) and restore: the server "going away and coming back" without stopping the shared synapse.

use std::sync::Arc;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The relay; dropped, it stops.
pub(crate) struct Relay {
    port: u16,
    up: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Relays `127.0.0.1:<new port>` to `target` (`host:port`).
    pub(crate) async fn start(target: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let up = Arc::new(watch::Sender::new(true));
        let state = up.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !*state.borrow() {
                    drop(client);
                    continue;
                }
                let mut down = state.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Ok(Self { port, up, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Drops every relayed connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Relays again.
    pub(crate) fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
