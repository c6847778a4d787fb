//! AES-128-ECB with PKCS#7 padding, as the iLink CDN keeps media (0.3.5's `_encrypt_aes_ecb` /
//! `_decrypt_aes_ecb`, openclaw-weixin's `aes-ecb.ts`), and the two encodings of a media key.
//!
//! ECB has no chaining: each 16-byte block is enciphered on its own with RustCrypto's `aes`.
//!
//! ```
//! use nanobot_weixin::crypto;
//!
//! let key = [7u8; 16];
//! let sealed = crypto::encrypt(&key, b"hello");
//! assert_eq!(sealed.len() as u64, crypto::padded_size(5));
//! assert_eq!(crypto::decrypt(&key, &sealed).unwrap(), b"hello");
//! ```

use aes::Aes128;
use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Why ciphertext could not be deciphered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// Its length is not a multiple of the block size (16).
    #[error("{0} bytes is not a whole number of AES blocks")]
    NotBlocks(usize),
    /// A media key that is neither 16 bytes nor 32 hex digits (each base64-encoded).
    #[error("the media key is neither 16 bytes nor 32 hex digits")]
    BadKey,
}

/// The ciphertext size of `n` plaintext bytes: `(n / 16 + 1) * 16` (PKCS#7 always adds 1 to 16 bytes).
pub fn padded_size(n: u64) -> u64 {
    (n / 16 + 1) * 16
}

/// `data` padded with PKCS#7 and enciphered block by block under `key`.
pub fn encrypt(key: &[u8; 16], data: &[u8]) -> Vec<u8> {
    let cipher = Aes128::new(GenericArray::from_slice(key));
    let pad = 16 - data.len() % 16;
    let mut out = Vec::with_capacity(data.len() + pad);
    out.extend_from_slice(data);
    out.extend(std::iter::repeat_n(pad as u8, pad));
    for block in out.chunks_exact_mut(16) {
        cipher.encrypt_block(GenericArray::from_mut_slice(block));
    }
    out
}

/// `data` deciphered block by block under `key`, its PKCS#7 padding removed when the padding is valid (0.3.5
/// keeps the bytes as they are otherwise). Empty data stays empty.
pub fn decrypt(key: &[u8; 16], data: &[u8]) -> Result<Vec<u8>, CryptoError> {
    if !data.len().is_multiple_of(16) {
        return Err(CryptoError::NotBlocks(data.len()));
    }
    let cipher = Aes128::new(GenericArray::from_slice(key));
    let mut out = data.to_vec();
    for block in out.chunks_exact_mut(16) {
        cipher.decrypt_block(GenericArray::from_mut_slice(block));
    }
    if let Some(&last) = out.last() {
        let pad = usize::from(last);
        if (1..=16).contains(&pad) && out[out.len() - pad..].iter().all(|b| *b == last) {
            out.truncate(out.len() - pad);
        }
    }
    Ok(out)
}

/// A media key as messages carry it (`media.aes_key`): base64 of the 16 key bytes (images) or of their 32 hex
/// digits (files, voices, videos; what 0.3.5 sends).
pub fn parse_aes_key(encoded: &str) -> Result<[u8; 16], CryptoError> {
    let decoded = STANDARD.decode(encoded.trim()).map_err(|_| CryptoError::BadKey)?;
    match decoded.len() {
        16 => decoded.try_into().map_err(|_| CryptoError::BadKey),
        32 => std::str::from_utf8(&decoded)
            .ok()
            .and_then(parse_hex_key)
            .ok_or(CryptoError::BadKey),
        _ => Err(CryptoError::BadKey),
    }
}

/// A key written as 32 hex digits (`image_item.aeskey`, `getuploadurl`'s `aeskey`).
pub fn parse_hex_key(hex: &str) -> Option<[u8; 16]> {
    let hex = hex.trim();
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

/// `bytes` as lowercase hex digits.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The `media.aes_key` sent with an uploaded file, as 0.3.5 and openclaw-weixin write it: base64 of the key's 32
/// hex digits.
pub fn media_key(key: &[u8; 16]) -> String {
    STANDARD.encode(to_hex(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS-197's AES-128 example, and the padding: 1 to 16 bytes, a whole block for aligned input.
    #[test]
    fn ecb_is_aes_128_with_pkcs7() {
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let plain: Vec<u8> = (0..16u8).map(|i| i * 0x11).collect();
        let sealed = encrypt(&key, &plain);
        assert_eq!(sealed.len(), 32, "a whole block of padding");
        assert_eq!(to_hex(&sealed[..16]), "69c4e0d86a7b0430d8cdb78070b4c55a");
        assert_eq!(decrypt(&key, &sealed).unwrap(), plain);
        for n in [0usize, 1, 15, 16, 17, 1000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let sealed = encrypt(&key, &data);
            assert_eq!(sealed.len() as u64, padded_size(n as u64), "{n}");
            assert_eq!(decrypt(&key, &sealed).unwrap(), data, "{n}");
        }
        assert_eq!(padded_size(5), 16);
        assert_eq!(padded_size(16), 32);
    }

    #[test]
    fn invalid_padding_is_kept_and_partial_blocks_are_refused() {
        let key = [3u8; 16];
        let cipher = Aes128::new(GenericArray::from_slice(&key));
        // A block whose plaintext ends in 0x00 (no valid padding): 0.3.5 keeps it as it is.
        let mut block = *b"no padding here\0";
        cipher.encrypt_block(GenericArray::from_mut_slice(&mut block));
        assert_eq!(decrypt(&key, &block).unwrap(), b"no padding here\0");
        assert_eq!(decrypt(&key, &block[..15]), Err(CryptoError::NotBlocks(15)));
        assert_eq!(decrypt(&key, &[]).unwrap(), Vec::<u8>::new());
        let wrong = decrypt(&[4u8; 16], &encrypt(&key, b"secret")).unwrap();
        assert_ne!(wrong, b"secret", "another key gives other bytes");
    }

    #[test]
    fn keys_decode_from_raw_or_hex_base64() {
        let key: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(parse_aes_key(&STANDARD.encode(key)), Ok(key));
        assert_eq!(parse_aes_key(&media_key(&key)), Ok(key));
        assert_eq!(
            String::from_utf8(STANDARD.decode(media_key(&key)).unwrap()).unwrap(),
            to_hex(&key)
        );
        assert_eq!(
            parse_aes_key(&STANDARD.encode([1u8; 20])),
            Err(CryptoError::BadKey)
        );
        assert_eq!(
            parse_aes_key(&STANDARD.encode("z".repeat(32))),
            Err(CryptoError::BadKey)
        );
        assert_eq!(parse_aes_key("not base64!"), Err(CryptoError::BadKey));
        assert_eq!(parse_hex_key(&to_hex(&key)), Some(key));
        assert_eq!(parse_hex_key(&to_hex(&key).to_uppercase()), Some(key));
        assert_eq!(parse_hex_key("abc"), None);
    }
}
