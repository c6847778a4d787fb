//! Media as WeCom sends it: the AES-256-CBC decryption of downloaded files, image extensions, and the media types
//! of uploads.

use aes::cipher::block_padding::NoPadding;
use aes::cipher::{BlockDecryptMut, KeyIvInit};
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// The largest WeCom PKCS#7 padding: to a multiple of 32 bytes (not the cipher's 16-byte block).
const MAX_PAD: usize = 32;

/// Base64 with or without its `=` padding (WeCom's `aeskey` comes without).
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a downloaded file could not be decrypted (never quoting the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecryptError {
    /// The `aeskey` is not base64 of 32 bytes.
    #[error("the aeskey is not base64 of a 32-byte key")]
    Key,
    /// The data is empty or not whole 16-byte blocks.
    #[error("the file is {0} bytes, not whole AES blocks")]
    Length(usize),
    /// The padding after decryption is not PKCS#7 to at most 32 bytes (a wrong key, or a damaged file).
    #[error("the decrypted file has no valid padding (a wrong aeskey or a damaged file)")]
    Padding,
}

/// `data` decrypted as WeCom encrypts media: AES-256-CBC with the base64 `aeskey` (its padding may be missing),
/// the IV its first 16 bytes, PKCS#7 padding to a multiple of 32 bytes.
pub(crate) fn decrypt(mut data: Vec<u8>, aeskey: &str) -> Result<Vec<u8>, DecryptError> {
    let key = KEY_BASE64
        .decode(aeskey.trim())
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .ok_or(DecryptError::Key)?;
    if data.is_empty() || !data.len().is_multiple_of(16) {
        return Err(DecryptError::Length(data.len()));
    }
    let iv: [u8; 16] = std::array::from_fn(|i| key[i]);
    let sealed_len = data.len();
    let len = cbc::Decryptor::<aes::Aes256>::new(&key.into(), &iv.into())
        .decrypt_padded_mut::<NoPadding>(&mut data)
        .map_err(|_| DecryptError::Length(sealed_len))?
        .len();
    data.truncate(len);
    let keep = unpadded_len(&data).ok_or(DecryptError::Padding)?;
    data.truncate(keep);
    Ok(data)
}

/// The length of `plain` without its PKCS#7 padding of 1 to 32 bytes, or `None` when the padding is not valid
/// (its length out of range, or its bytes not all equal to it).
pub(crate) fn unpadded_len(plain: &[u8]) -> Option<usize> {
    let pad = usize::from(*plain.last()?);
    if pad == 0 || pad > MAX_PAD || pad > plain.len() {
        return None;
    }
    let keep = plain.len() - pad;
    plain[keep..]
        .iter()
        .all(|b| usize::from(*b) == pad)
        .then_some(keep)
}

/// The extension of an image from its first bytes (or its `Content-Type`): `.png`, `.jpg`, `.gif`, `.webp`,
/// `.bmp`, or `""` when neither tells.
pub(crate) fn image_extension(data: &[u8], content_type: Option<&str>) -> &'static str {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        ".png"
    } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        ".jpg"
    } else if data.starts_with(b"GIF8") {
        ".gif"
    } else if data.len() >= 12 && data.starts_with(b"RIFF") && &data[8..12] == b"WEBP" {
        ".webp"
    } else if data.starts_with(b"BM") {
        ".bmp"
    } else {
        match content_type.map(str::to_ascii_lowercase).as_deref() {
            Some("image/png") => ".png",
            Some("image/jpeg" | "image/jpg") => ".jpg",
            Some("image/gif") => ".gif",
            Some("image/webp") => ".webp",
            _ => "",
        }
    }
}

/// WeCom's media type for an upload, by the file's extension (as the SDK decides): `image`, `video`, `voice` or
/// `file`.
pub(crate) fn upload_type(name: &str) -> &'static str {
    let ext = std::path::Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jpg" | "jpeg" | "png" | "gif" | "webp" | "bmp" => "image",
        "mp4" | "avi" | "mov" => "video",
        "amr" | "mp3" | "wav" | "ogg" => "voice",
        _ => "file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::BlockEncryptMut;

    /// Encrypts as WeCom does (the testkit's fake does the same, independently).
    fn encrypt(key: &[u8; 32], data: &[u8]) -> Vec<u8> {
        let pad = MAX_PAD - data.len() % MAX_PAD;
        let mut plain = data.to_vec();
        plain.extend(std::iter::repeat_n(u8::try_from(pad).unwrap(), pad));
        let len = plain.len();
        let iv: [u8; 16] = std::array::from_fn(|i| key[i]);
        cbc::Encryptor::<aes::Aes256>::new(key.into(), &iv.into())
            .encrypt_padded_mut::<NoPadding>(&mut plain, len)
            .unwrap()
            .to_vec()
    }

    #[test]
    fn unpadding_takes_1_to_32_equal_bytes_only() {
        assert_eq!(unpadded_len(&[7, 7, 1]), Some(2));
        let mut full = vec![9u8; 3];
        full.extend([32u8; 32]);
        assert_eq!(unpadded_len(&full), Some(3), "a whole 32-byte block of padding");
        assert_eq!(unpadded_len(&[32u8; 32]), Some(0));
        assert_eq!(unpadded_len(&[5, 16, 16]), None, "claims more than there is");
        assert_eq!(unpadded_len(&[1, 2, 3, 0]), None, "zero is no padding");
        assert_eq!(unpadded_len(&[33u8; 40]), None, "over 32");
        assert_eq!(unpadded_len(&[1, 3, 2, 3]), None, "bytes differ");
        assert_eq!(unpadded_len(&[]), None);
    }

    #[test]
    fn files_decrypt_with_the_key_with_or_without_base64_padding() {
        let key: [u8; 32] = std::array::from_fn(|i| u8::try_from(i * 11 % 256).unwrap());
        for data in [
            b"hello".to_vec(),
            vec![0u8; 32],
            (0..1000u32).map(|i| (i % 251) as u8).collect(),
        ] {
            let sealed = encrypt(&key, &data);
            assert_eq!(sealed.len() % 32, 0);
            let unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(key);
            let padded = base64::engine::general_purpose::STANDARD.encode(key);
            assert_ne!(unpadded, padded);
            assert_eq!(decrypt(sealed.clone(), &unpadded).unwrap(), data);
            assert_eq!(decrypt(sealed, &padded).unwrap(), data);
        }
        let other: [u8; 32] = [1; 32];
        let sealed = encrypt(&key, b"secret text that is long enough");
        let wrong = base64::engine::general_purpose::STANDARD.encode(other);
        assert!(matches!(
            decrypt(sealed.clone(), &wrong),
            Err(DecryptError::Padding)
        ));
        assert_eq!(decrypt(sealed.clone(), "not base64!"), Err(DecryptError::Key));
        assert_eq!(
            decrypt(
                sealed,
                &base64::engine::general_purpose::STANDARD.encode([1u8; 16])
            ),
            Err(DecryptError::Key),
            "a 16-byte key"
        );
        let key64 = base64::engine::general_purpose::STANDARD.encode(key);
        assert_eq!(decrypt(vec![1; 17], &key64), Err(DecryptError::Length(17)));
        assert_eq!(decrypt(Vec::new(), &key64), Err(DecryptError::Length(0)));
    }

    #[test]
    fn extensions_and_types() {
        assert_eq!(image_extension(b"\x89PNG\r\n\x1a\nrest", None), ".png");
        assert_eq!(image_extension(&[0xFF, 0xD8, 0xFF, 0xE0], None), ".jpg");
        assert_eq!(image_extension(b"RIFF....WEBPVP8 ", None), ".webp");
        assert_eq!(image_extension(b"????", Some("image/gif")), ".gif");
        assert_eq!(image_extension(b"????", None), "");
        assert_eq!(upload_type("a.PNG"), "image");
        assert_eq!(upload_type("clip.mov"), "video");
        assert_eq!(upload_type("note.amr"), "voice");
        assert_eq!(upload_type("report.pdf"), "file");
        assert_eq!(upload_type("README"), "file");
    }
}
