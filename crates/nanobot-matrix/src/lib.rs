//! The Matrix channel for nanobot, as the Python nanobot 0.3.5's `matrix` channel: the bot is a Matrix account
//! that syncs with its homeserver through the client-server API and answers in rooms and direct chats.
//!
//! [`MatrixChannel`] implements [`nanobot_channels::Channel`]:
//!
//! - **Login** as 0.3.5 does it: with `password`, the session 0.3.5 saved in
//!   `<data dir>/matrix-store/session.json` is reused (and written after a new login, in 0.3.5's format); with
//!   `accessToken` + `deviceId`, the token is used as given. The token is checked once (`whoami`) and must be
//!   `userId`'s. Refused credentials stop the channel with one clear error; a saved session the server logged out
//!   is replaced by a new password login.
//! - **Sync**: long polls (`/sync`, 30 s), members loaded lazily so the server counts them. A lost server ends
//!   [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager connects
//!   again with its backoff, from the last sync position (a gap the server leaves in a room's timeline is fetched
//!   back), so nothing sent meanwhile is missed. Events older than the channel's start are history and never
//!   answered; an event is remembered as handled once it reached the bus.
//! - **Who gets through**: the sender must be on `allowFrom` (or paired). A room with at most two members is a
//!   direct chat; other rooms follow `groupPolicy` (`open`, `mention` through `m.mentions`, or `allowlist` of
//!   `groupAllowFrom` room ids). Invites are joined when the inviter is allowed. Unlike 0.3.5, a stranger writing
//!   in a direct chat gets a pairing code, and a stranger's invite to a direct chat is joined so they can ask
//!   (at most ten an hour; one with more than two members is left at once).
//! - **Messages in**: text and media (`m.image`, `m.audio`, `m.video`, `m.file`), downloaded within
//!   min(`maxMediaBytes`, the server's upload limit), the messages of a sync made ready
//!   `maxConcurrentMediaDownloads` at once and published in order, into `<media>/matrix/`. A message in a thread gets the session `matrix:<room>:thread:<root>`.
//! - **Answers**: Markdown goes as Matrix HTML ([`render_html`]: only the tags 0.3.5 allows, written by
//!   construction), split at [`MAX_MESSAGE_CHARS`]; files are uploaded first; threads are answered in the
//!   thread; "typing…" shows until the answer is sent; with `streaming`, the answer grows in one message, edited
//!   at most every two seconds.
//! - **No end-to-end encryption.** 0.3.5 encrypts with matrix-nio and vodozemac; nanobot-rs does not. Encrypted
//!   messages are not read (an allowed sender is told so, once per room) and nothing is sent into an encrypted
//!   room in the clear. `doctor` and the log say so while `e2eeEnabled` is on (0.3.5's default).
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment.
//!
//! ```
//! use nanobot_matrix::MatrixSettings;
//!
//! let err = MatrixSettings::from_block(&serde_json::json!({"userId": "@bot:example.org"})).unwrap_err();
//! assert!(err.to_string().contains("channels.matrix has no login"));
//! ```

mod channel;
mod descriptor;
mod html;
mod settings;

pub use channel::{
    MAX_MESSAGE_CHARS, META_ATTACHMENTS, META_EVENT_ID, META_ROOM, META_THREAD_REPLY_TO, META_THREAD_ROOT,
    MatrixChannel,
};
pub use descriptor::DESCRIPTOR;
pub use html::{MATRIX_HTML_FORMAT, render_html};
pub use settings::{
    DEFAULT_HOMESERVER, DEFAULT_MAX_MEDIA_BYTES, Login, MAX_CONCURRENT_DOWNLOADS, MatrixSettings, RoomPolicy,
};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "matrix";
