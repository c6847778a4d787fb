//! The WhatsApp channel against the REAL bridge process (`bridge/bridge.cjs` under Node.js, with the pinned `ws`
//! package from `scripts/install-peers.sh`), whose WhatsApp connection is replaced by `tests/scripted-socket.cjs`.
//! Everything between nanobot and the bridge is real: the process, the token on stdin, the loopback WebSocket,
//! the frames, the exit codes. The scripted socket is driven over a TCP control port owned by each test.

mod bridge;
mod channel;
mod login;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use nanobot_bus::{Bus, InProcessBus, InboundMessage};
use nanobot_channels::{Channel, ChannelError, PairingStore};
use nanobot_whatsapp::{WhatsAppChannel, WhatsAppConfig, WhatsAppSettings};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Bound of every wait in these tests (generous for a loaded CI machine; nothing waits on it when things work).
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// The account the scripted WhatsApp connection is "linked" to.
pub(crate) const ME: &str = "4915550000001:7@s.whatsapp.net";
pub(crate) const ME_LID: &str = "88800000001:7@lid";
/// An allowed user and a stranger.
pub(crate) const ALICE: &str = "4915550000002@s.whatsapp.net";
pub(crate) const STRANGER: &str = "4915550000666@s.whatsapp.net";
pub(crate) const GROUP: &str = "120363000000000001@g.us";

/// `node` and the bridge's `node_modules` (with `ws`), or `None` (then the test is skipped, or fails under CI).
pub(crate) fn peers() -> Option<(PathBuf, PathBuf)> {
    let node = nanobot_testkit::peers::require("node", nanobot_testkit::peers::node())?;
    let modules = nanobot_testkit::peers::peers_dir().map(|d| d.join("whatsapp-bridge").join("node_modules"));
    let modules = nanobot_testkit::peers::require(
        "ws for the WhatsApp bridge (.ci/.peers/whatsapp-bridge)",
        modules.filter(|m| m.join("ws").join("package.json").is_file()),
    )?;
    Some((node, modules))
}

pub(crate) fn scripted_socket() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripted-socket.cjs")
}

/// Settings for a test: `block` is `channels.whatsapp`; the bridge runs the scripted socket that dials `control`.
#[expect(clippy::expect_used, reason = "test helper: a bad block is a bug in the test")]
pub(crate) fn settings(block: Value, home: &Path, control: &str) -> Option<WhatsAppSettings> {
    let (node, modules) = peers()?;
    let config = WhatsAppConfig::from_block(&block).expect("config");
    let mut s = WhatsAppSettings::from_config(&config, home, &home.join("media")).expect("settings");
    s.bridge.node = node;
    s.bridge.node_modules = Some(modules);
    s.bridge.socket_module = Some(scripted_socket());
    s.bridge.env = vec![("NANOBOT_WA_TEST_CONTROL".into(), control.into())];
    Some(s)
}

/// The test's end of the scripted WhatsApp connection: one per bridge process.
pub(crate) struct Control {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    /// The `hello` the scripted socket sent (mode, authDir, pid).
    pub(crate) hello: Value,
}

impl Control {
    /// Waits (bounded) for the next bridge to connect.
    pub(crate) async fn accept(listener: &TcpListener) -> Result<Self> {
        let (stream, _) = tokio::time::timeout(WAIT, listener.accept())
            .await
            .context("no bridge connected to the control port")??;
        Self::from_stream(stream).await
    }

    async fn from_stream(stream: TcpStream) -> Result<Self> {
        let (read, write) = stream.into_split();
        let mut c = Self {
            lines: BufReader::new(read).lines(),
            write,
            hello: Value::Null,
        };
        let first = c.next().await?;
        c.hello = first
            .get("hello")
            .cloned()
            .ok_or_else(|| anyhow!("expected hello, got {first}"))?;
        Ok(c)
    }

    /// Sends one command to the scripted socket.
    pub(crate) async fn cmd(&mut self, v: Value) -> Result<()> {
        self.write.write_all(format!("{v}\n").as_bytes()).await?;
        Ok(())
    }

    /// The next report of the scripted socket (bounded).
    pub(crate) async fn next(&mut self) -> Result<Value> {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .context("no report from the scripted socket")??
            .ok_or_else(|| anyhow!("the scripted socket hung up"))?;
        Ok(serde_json::from_str(&line)?)
    }

    /// The next report of this kind (`sent`, `read`), skipping others.
    pub(crate) async fn next_of(&mut self, kind: &str) -> Result<Value> {
        loop {
            let v = self.next().await?;
            if let Some(x) = v.get(kind) {
                return Ok(x.clone());
            }
        }
    }

    /// Emits `open` (linked as [`ME`]).
    pub(crate) async fn open(&mut self) -> Result<()> {
        self.cmd(json!({"emit": "open", "me": ME, "lid": ME_LID})).await
    }

    /// Emits a received message with these fields.
    pub(crate) async fn message(&mut self, fields: Value) -> Result<()> {
        let mut m = json!({"emit": "message", "id": uuid(), "timestamp": 1_780_000_000});
        if let (Some(m), Some(f)) = (m.as_object_mut(), fields.as_object()) {
            m.extend(f.clone());
        }
        self.cmd(m).await
    }
}

pub(crate) fn uuid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    format!("3EB0{:016X}", N.fetch_add(1, Ordering::Relaxed))
}

/// A running channel with its bus, the control port and the first bridge's control connection.
pub(crate) struct Running {
    pub(crate) channel: Arc<WhatsAppChannel>,
    pub(crate) bus: Arc<InProcessBus>,
    pub(crate) cancel: CancellationToken,
    pub(crate) task: JoinHandle<Result<(), ChannelError>>,
    pub(crate) listener: TcpListener,
    pub(crate) control: Control,
    pub(crate) home: tempfile::TempDir,
}

impl Running {
    /// Starts the channel with `block` (+ pairing when asked), accepts the bridge and emits `open`.
    pub(crate) async fn start(block: Value, pairing: bool) -> Result<Option<Self>> {
        Self::start_with(block, pairing, |c| c).await
    }

    pub(crate) async fn start_with(
        block: Value,
        pairing: bool,
        adapt: impl FnOnce(WhatsAppChannel) -> WhatsAppChannel,
    ) -> Result<Option<Self>> {
        let home = tempfile::tempdir()?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let control = listener.local_addr()?.to_string();
        let Some(s) = settings(block, home.path(), &control) else {
            return Ok(None);
        };
        let mut channel = WhatsAppChannel::new(s);
        if pairing {
            channel = channel.with_pairing(Arc::new(PairingStore::in_config_dir(home.path())?));
        }
        let channel = Arc::new(adapt(channel));
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let task = {
            let (channel, bus, cancel) = (channel.clone(), bus.clone(), cancel.clone());
            tokio::spawn(async move { channel.run(bus, cancel).await })
        };
        let mut control = Control::accept(&listener).await?;
        control.open().await?;
        let mut state = channel.link_state();
        tokio::time::timeout(
            WAIT,
            state.wait_for(|s| matches!(s, nanobot_whatsapp::LinkState::Connected(_))),
        )
        .await
        .context("the channel never reported connected")??;
        Ok(Some(Self {
            channel,
            bus,
            cancel,
            task,
            listener,
            control,
            home,
        }))
    }

    /// The next message on the bus (bounded).
    pub(crate) async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(WAIT, self.bus.consume_inbound())
            .await
            .context("nothing reached the bus")?
            .ok_or_else(|| anyhow!("the bus closed"))
    }

    /// Stops the channel and returns how `run` ended.
    pub(crate) async fn stop(self) -> Result<Result<(), ChannelError>> {
        self.cancel.cancel();
        Ok(tokio::time::timeout(WAIT, self.task).await??)
    }
}

/// True while a process with this pid exists (and is not a zombie).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with('Z')
    })
}
