//! The WhatsApp channel for nanobot: a personal WhatsApp account, linked as a device by scanning a QR code.
//!
//! No Rust implementation of the WhatsApp Web multi-device protocol is mature yet (`whatsapp-rust` is young; see
//! `docs/channels.md`), so this crate runs a small Node.js bridge (`bridge/bridge.cjs`, shipped inside the crate) on the maintained npm package
//! `@whiskeysockets/baileys`. [`WhatsAppChannel`] (a [`nanobot_channels::Channel`]) starts the bridge and
//! supervises it: the bridge listens on 127.0.0.1 only, accepts only the client that presents the random token
//! it was given on stdin, and exits when its stdin closes, so it never outlives nanobot. A bridge that exits is
//! restarted with backoff (1 s doubling to 60 s); a device that WhatsApp logged out stops the channel with an
//! error that says to link it again ([`WhatsAppError::LoggedOut`]).
//!
//! Received messages (text, images, voice notes, documents, videos, stickers) go through the channel's access
//! control: `allowFrom` by phone number (or group JID), pairing codes for denied direct messages, and
//! `groupPolicy` (`open`, or `mention`: only messages that mention the linked account or reply to it). Files are
//! saved under `<media>/whatsapp/`; voice notes are transcribed when a [`nanobot_channels::Transcribe`] is
//! given. Replies are text, and files sent as images, videos, audio or documents by their type.
//!
//! [`login`] links a device (`nanobot channels login whatsapp`), printing QR codes rendered by
//! [`render_qr`]; the credentials stay in `databasePath` (default `<data dir>/whatsapp-auth/baileys`).
//!
//! It knows the bus, the channel toolkit and its own config block, never the agent; nothing here reads the
//! process environment (the bridge starts with an empty environment plus what [`BridgeSettings::env`] gives it).
//!
//! ```
//! use nanobot_whatsapp::{WhatsAppConfig, WhatsAppSettings};
//!
//! let block = serde_json::json!({"enabled": true, "allowFrom": ["+49 170 1234567"], "groupPolicy": "always"});
//! let config = WhatsAppConfig::from_block(&block).unwrap();
//! let err = WhatsAppSettings::from_config(&config, "/data".as_ref(), "/data/media".as_ref()).unwrap_err();
//! assert!(err.to_string().contains("channels.whatsapp.groupPolicy"));
//! ```

mod bridge;
mod channel;
mod descriptor;
mod error;
mod login;
mod proto;
mod settings;

pub use bridge::{BRIDGE_PACKAGE_JSON, BRIDGE_SCRIPT};
pub use channel::{LinkState, WhatsAppChannel};
pub use descriptor::DESCRIPTOR;
pub use error::WhatsAppError;
pub use login::{Linked, bridge_installed, credentials_present, install_bridge, login, render_qr};
pub use settings::{
    BRIDGE_INHERITED_VARS, BridgeSettings, DEFAULT_MAX_MEDIA_BYTES, NODE_MODULES_VAR, NODE_VAR,
    SOCKET_MODULE_VAR, TEST_CONTROL_VAR, WhatsAppConfig, WhatsAppSettings, auth_dir, python_login,
};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "whatsapp";

#[doc(hidden)]
pub mod testing {
    //! Seams for the crate's own integration tests.

    /// Connects to a bridge on `127.0.0.1:port` with `token` (or none), returning the handshake's error text.
    pub async fn try_connect(port: u16, token: Option<&str>) -> Result<(), String> {
        crate::bridge::connect(port, token)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
