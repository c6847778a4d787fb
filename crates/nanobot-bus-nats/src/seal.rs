//! Sealed envelopes: with a [`DeploymentKey`] the replicas share, every message on the bus is encrypted and
//! authenticated (ChaCha20-Poly1305, a key derived from the deployment key with HKDF-SHA256), bound to its
//! subject, its message id and the time it was sealed. A client that can reach the NATS server but does not hold
//! the key reads nothing and can make nothing a replica accepts.
//!
//! # Replays
//! A sealed message captured on the wire and published again is refused twice over:
//! - its `Nats-Msg-Id` header must be the id sealed inside, so within the stream's duplicate window the server
//!   drops the copy as a duplicate;
//! - later, the time the server stored it and the time it was sealed differ by more than half that window, and
//!   the replica refuses it. A message that waits long in the stream is not affected: it was stored right after
//!   it was sealed. (Clocks of the replicas and the server must agree within half the window: a minute by
//!   default.)
//!
//! # Layout
//! `nbs1` · nonce (12 bytes, random) · ciphertext and tag of: sealed-at (milliseconds since the Unix epoch, 8
//! bytes big-endian) · id length (2 bytes big-endian) · id · body. The associated data is the subject.

use std::sync::Arc;
use std::time::Duration;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};

use crate::NatsBusError;

/// What a sealed payload starts with.
pub(crate) const MAGIC: &[u8; 4] = b"nbs1";
/// The shortest deployment key taken, in characters.
pub const MIN_KEY_CHARS: usize = 32;

/// The key the replicas of one deployment share. `Debug` shows nothing of it.
#[derive(Clone)]
pub struct DeploymentKey {
    aead: Arc<LessSafeKey>,
    rng: SystemRandom,
}

impl std::fmt::Debug for DeploymentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeploymentKey(…)")
    }
}

/// Why a payload was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Not sealed at all (a replica without the key, or a forgery).
    #[error("not sealed with the deployment key")]
    NotSealed,
    /// Sealed, but not with this key, or changed on the way, or moved to another subject.
    #[error("does not open with the deployment key (another key, changed, or moved to another subject)")]
    Forged,
    /// Its `Nats-Msg-Id` header is not the id sealed inside.
    #[error("its message id is not the one sealed inside")]
    WrongId,
    /// Stored by the server long after it was sealed: published again.
    #[error("stored {stored_after_ms} ms after it was sealed: a replay")]
    Replayed {
        /// How long after its sealing the server stored it (negative: before, by the clocks).
        stored_after_ms: i64,
    },
}

/// An opened envelope.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) id: String,
    pub(crate) sealed_at_ms: i64,
    pub(crate) body: Vec<u8>,
}

impl DeploymentKey {
    /// The key from its text (at least [`MIN_KEY_CHARS`] characters, surrounding spaces ignored; make one with
    /// `head -c 32 /dev/urandom | base64`). The error never shows the text.
    pub fn new(text: &str) -> Result<Self, NatsBusError> {
        let text = text.trim();
        if text.chars().count() < MIN_KEY_CHARS {
            return Err(NatsBusError::Config(format!(
                "key is {} characters; it must be at least {MIN_KEY_CHARS} (make one with `head -c 32 \
                 /dev/urandom | base64`)",
                text.chars().count()
            )));
        }
        let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"nanobot-bus-nats deployment key");
        let prk = salt.extract(text.as_bytes());
        let okm = prk
            .expand(&[b"envelope v1"], &CHACHA20_POLY1305)
            .map_err(|_| NatsBusError::Config("key: cannot derive the envelope key".into()))?;
        let unbound = UnboundKey::from(okm);
        Ok(Self {
            aead: Arc::new(LessSafeKey::new(unbound)),
            rng: SystemRandom::new(),
        })
    }

    /// A fresh random message id (hex), for messages that have none of their own.
    pub(crate) fn fresh_id(&self) -> String {
        let mut bytes = [0u8; 16];
        // The system's generator does not fail on Linux; the id is then merely less unique, never secret.
        let _ = self.rng.fill(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Seals `body` for `subject` under message id `id`, now.
    pub(crate) fn seal(&self, subject: &str, id: &str, body: &[u8]) -> Result<Vec<u8>, NatsBusError> {
        self.seal_at(subject, id, body, now_ms())
    }

    fn seal_at(&self, subject: &str, id: &str, body: &[u8], at_ms: i64) -> Result<Vec<u8>, NatsBusError> {
        let id_len = u16::try_from(id.len())
            .map_err(|_| NatsBusError::Config("a message id longer than 65535 bytes".into()))?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| NatsBusError::Config("the system's random generator failed".into()))?;
        let mut data = Vec::with_capacity(8 + 2 + id.len() + body.len() + 16);
        data.extend_from_slice(&at_ms.to_be_bytes());
        data.extend_from_slice(&id_len.to_be_bytes());
        data.extend_from_slice(id.as_bytes());
        data.extend_from_slice(body);
        self.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(subject.as_bytes()),
                &mut data,
            )
            .map_err(|_| NatsBusError::Config("cannot seal a message".into()))?;
        let mut out = Vec::with_capacity(MAGIC.len() + NONCE_LEN + data.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        Ok(out)
    }

    /// Opens `payload` published on `subject`.
    pub(crate) fn open(&self, subject: &str, payload: &[u8]) -> Result<Opened, SealError> {
        let rest = payload
            .strip_prefix(MAGIC.as_slice())
            .ok_or(SealError::NotSealed)?;
        if rest.len() < NONCE_LEN {
            return Err(SealError::Forged);
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Forged)?;
        let mut data = sealed.to_vec();
        let plain = self
            .aead
            .open_in_place(nonce, Aad::from(subject.as_bytes()), &mut data)
            .map_err(|_| SealError::Forged)?;
        let (at, rest) = plain.split_at_checked(8).ok_or(SealError::Forged)?;
        let (len, rest) = rest.split_at_checked(2).ok_or(SealError::Forged)?;
        let sealed_at_ms = i64::from_be_bytes(at.try_into().map_err(|_| SealError::Forged)?);
        let len = usize::from(u16::from_be_bytes(len.try_into().map_err(|_| SealError::Forged)?));
        let (id, body) = rest.split_at_checked(len).ok_or(SealError::Forged)?;
        let id = String::from_utf8(id.to_vec()).map_err(|_| SealError::Forged)?;
        Ok(Opened {
            id,
            sealed_at_ms,
            body: body.to_vec(),
        })
    }

    /// Seals `body` for `subject`, bound to `binding`: what its reader must find it as (for a shared file of
    /// `nanobot-store-nats`, its operation and the sequence it follows), so that it cannot be replayed elsewhere.
    /// For stores beside the bus on the same server.
    pub fn seal_bound(&self, subject: &str, binding: &str, body: &[u8]) -> Result<Vec<u8>, NatsBusError> {
        self.seal(subject, binding, body)
    }

    /// Opens what [`DeploymentKey::seal_bound`] sealed for `subject`: its binding and its body.
    pub fn open_bound(&self, subject: &str, payload: &[u8]) -> Result<(String, Vec<u8>), SealError> {
        let opened = self.open(subject, payload)?;
        Ok((opened.id, opened.body))
    }

    /// Opens a message the stream stored at `stored_ms` under the `Nats-Msg-Id` `header_id`, refusing a copy
    /// published again (see the module docs): `window` is the stream's duplicate window.
    pub(crate) fn open_stored(
        &self,
        subject: &str,
        payload: &[u8],
        header_id: Option<&str>,
        stored_ms: i64,
        window: Duration,
    ) -> Result<Vec<u8>, SealError> {
        let opened = self.open(subject, payload)?;
        if header_id != Some(opened.id.as_str()) {
            return Err(SealError::WrongId);
        }
        let stored_after_ms = stored_ms.saturating_sub(opened.sealed_at_ms);
        let half = i64::try_from(window.as_millis() / 2).unwrap_or(i64::MAX);
        if stored_after_ms.abs() >= half {
            return Err(SealError::Replayed { stored_after_ms });
        }
        Ok(opened.body)
    }
}

/// Milliseconds since the Unix epoch by this machine's clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "a deployment key of at least thirty-two characters";

    #[test]
    fn a_sealed_message_opens_only_with_its_key_on_its_subject_and_its_id() {
        let key = DeploymentKey::new(KEY).unwrap();
        let sealed = key
            .seal("nanobot.in.3", "tg-42", b"{\"content\":\"secret plans\"}")
            .unwrap();
        assert!(!sealed.windows(12).any(|w| w == b"secret plans"), "encrypted");
        let opened = key.open("nanobot.in.3", &sealed).unwrap();
        assert_eq!(
            (opened.id.as_str(), opened.body.as_slice()),
            ("tg-42", &b"{\"content\":\"secret plans\"}"[..])
        );

        assert_eq!(
            key.open("nanobot.in.4", &sealed).unwrap_err(),
            SealError::Forged,
            "moved"
        );
        let other = DeploymentKey::new("another deployment key, thirty-two characters").unwrap();
        assert_eq!(
            other.open("nanobot.in.3", &sealed).unwrap_err(),
            SealError::Forged
        );
        let mut changed = sealed.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        assert_eq!(key.open("nanobot.in.3", &changed).unwrap_err(), SealError::Forged);
        assert_eq!(
            key.open("nanobot.in.3", b"{\"content\":\"hi\"}").unwrap_err(),
            SealError::NotSealed
        );
        assert_eq!(
            key.open("nanobot.in.3", b"nbs1short").unwrap_err(),
            SealError::Forged
        );
    }

    #[test]
    fn a_copy_stored_late_or_under_another_id_is_refused() {
        let key = DeploymentKey::new(KEY).unwrap();
        let window = Duration::from_secs(120);
        let at = 1_800_000_000_000;
        let sealed = key.seal_at("nanobot.out.telegram", "id-1", b"body", at).unwrap();
        let open = |id: Option<&str>, stored: i64| {
            key.open_stored("nanobot.out.telegram", &sealed, id, stored, window)
        };
        assert_eq!(open(Some("id-1"), at + 150).unwrap(), b"body");
        assert_eq!(open(Some("id-2"), at + 150).unwrap_err(), SealError::WrongId);
        assert_eq!(open(None, at + 150).unwrap_err(), SealError::WrongId);
        assert!(matches!(
            open(Some("id-1"), at + 60_000),
            Err(SealError::Replayed { .. })
        ));
        assert!(matches!(
            open(Some("id-1"), at - 60_000),
            Err(SealError::Replayed { .. })
        ));
    }

    #[test]
    fn a_short_key_is_refused_without_showing_it() {
        let e = DeploymentKey::new("  hunter2  ").unwrap_err().to_string();
        assert!(e.contains("key is 7 characters") && !e.contains("hunter2"), "{e}");
        assert!(!format!("{:?}", DeploymentKey::new(KEY).unwrap()).contains("thirty"));
    }
}
