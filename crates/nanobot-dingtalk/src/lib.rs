//! The DingTalk channel for nanobot, over Stream mode (no public URL needed).
//!
//! [`DingTalkChannel`] implements [`nanobot_channels::Channel`]. It opens a Stream connection with the app's
//! `clientId`/`clientSecret` (`POST /v1.0/gateway/connections/open`, subscribing to robot messages), connects the
//! WebSocket with the ticket it got, and acknowledges every frame: system pings (echoing their data), robot
//! message callbacks, events. A `disconnect` system frame, a dropped or silent connection ends
//! [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager connects again
//! with its backoff; messages redelivered by id are handled once.
//!
//! Robot messages (text, rich text, pictures and files, which are downloaded to `<media_dir>/dingtalk/`) go
//! through the channel's access control (`allowFrom`, pairing codes for denied direct messages); a group message
//! marked `isInAtList: false` (the bot was not @mentioned) is ignored. `disablePrivateChat` answers direct
//! messages with a notice only; `groupUserIsolation` gives each user of a group a session of their own. Group chats
//! are addressed as `group:<openConversationId>`, users by staff id.
//!
//! Replies are Markdown robot messages (`sampleMarkdown`) sent with the access token (cached, renewed before it
//! expires and when the API answers 401): `groupMessages/send` to groups (headed with the sender's name),
//! `oToMessages/batchSend` to users, split at 4000 characters.
//!
//! Files out, as nanobot 0.3.5 sends them: after the text, each entry of the message's `media` that is a local
//! path or a `file://` URL is read (a regular file within DingTalk's limit of its upload type: image, video and
//! file 20 MiB, voice 2 MiB), uploaded through the legacy API (`POST {oapi}/media/upload?access_token=…&type=…`,
//! [`DEFAULT_OAPI_URL`], the same access token, renewed once when refused as bad or expired), and sent to the same
//! user or group: an image as `sampleImageMsg` with the `media_id` (as `sampleFile` if that is refused), anything
//! else as `sampleFile`. The upload type comes from the extension (images, audio as `voice`, video, else
//! `file`); HTML, which DingTalk refuses, is uploaded as `<stem>.zip` holding the page. An `http(s)://` URL of an
//! image is sent as `sampleImageMsg` with the URL (DingTalk fetches it); other remote files are fetched behind the
//! SSRF guard ([`DingTalkChannel::with_ssrf_guard`]) with the redirect rules of `allowRemoteMediaRedirects` and
//! `remoteMediaRedirectAllowedHosts`, then uploaded.
//! A file that cannot go leaves a Markdown note `[Attachment send failed: <name>]` and a warning; the next files
//! still go. The token, which the legacy API takes in the URL, never reaches an error or a log line.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. `baseUrl` points the Open API and the legacy API at another server (a fake in tests).
//!
//! ```
//! use nanobot_dingtalk::DingTalkSettings;
//!
//! let err = DingTalkSettings::from_config(&nanobot_config::DingTalkConfig::default()).unwrap_err();
//! assert!(err.to_string().contains("channels.dingtalk.clientId is empty"));
//! ```

mod api;
mod channel;
mod descriptor;
mod outbound;
mod settings;

pub use channel::{DingTalkChannel, GROUP_PREFIX, META_SENDER_NAME};
pub use descriptor::DESCRIPTOR;
pub use settings::{DEFAULT_API_URL, DEFAULT_MAX_FILE_BYTES, DEFAULT_OAPI_URL, DingTalkSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "dingtalk";
