//! File contents from an Ignition `contents` object: a `data:` URL (percent-encoded or base64),
//! optionally gzip-compressed, optionally verified by a hash. Nothing is ever fetched: a node
//! that downloads what a config points at can be made to download anything, so MCO, and aloft,
//! accept inline `data:` URLs only.
//!
//! Decoding is bounded: the decoded (and decompressed) contents of one file may not exceed
//! [`MAX_FILE_SIZE`], so a small gzip bomb cannot exhaust the node's memory.

use sha2::{Digest, Sha256, Sha512};
use std::io::Read;

/// Largest decoded file the agent writes: 10 MiB.
pub const MAX_FILE_SIZE: u64 = 10 * 1024 * 1024;
/// Largest total of decoded file contents in one config: a config of many small gzip bombs
/// each just under [`MAX_FILE_SIZE`] must not exhaust memory either.
pub const MAX_TOTAL_SIZE: u64 = 64 * 1024 * 1024;

/// Why contents could not be decoded. Each names the sub-field it is about, relative to the
/// `contents` object, so the caller can build a full field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("only inline data: URLs are supported (no remote fetch), got a {scheme:?} source")]
    NotDataUrl { scheme: String },
    #[error("malformed data URL: {0}")]
    BadUrl(String),
    #[error("invalid base64 in data URL")]
    BadBase64,
    #[error("unsupported compression {0:?} (only \"\" and \"gzip\")")]
    BadCompression(String),
    #[error("invalid gzip data: {0}")]
    BadGzip(String),
    #[error("decoded contents exceed {MAX_FILE_SIZE} bytes")]
    TooLarge,
    #[error("verification hash {0:?} is not sha256-<hex> or sha512-<hex>")]
    BadHashSpec(String),
    #[error("contents do not match the verification hash {0:?}")]
    HashMismatch(String),
}

impl DecodeError {
    /// The sub-field of `contents` the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            DecodeError::BadCompression(_) | DecodeError::BadGzip(_) => "compression",
            DecodeError::BadHashSpec(_) | DecodeError::HashMismatch(_) => "verification.hash",
            _ => "source",
        }
    }
}

/// Decodes `source` (a data URL), then decompresses per `compression` and checks `hash`
/// (Ignition's `sha512-<hex>`/`sha256-<hex>`, computed over the data before decompression).
pub fn decode(source: &str, compression: Option<&str>, hash: Option<&str>) -> Result<Vec<u8>, DecodeError> {
    let scheme = source.split_once(':').map(|(s, _)| s).unwrap_or("");
    if !scheme.eq_ignore_ascii_case("data") {
        return Err(DecodeError::NotDataUrl { scheme: scheme.to_string() });
    }
    let url = data_url::DataUrl::process(source).map_err(|e| DecodeError::BadUrl(format!("{e:?}")))?;
    let (raw, _) = url.decode_to_vec().map_err(|_| DecodeError::BadBase64)?;
    if let Some(h) = hash {
        verify_hash(&raw, h)?;
    }
    match compression.unwrap_or("") {
        "" => {
            if raw.len() as u64 > MAX_FILE_SIZE {
                return Err(DecodeError::TooLarge);
            }
            Ok(raw)
        }
        "gzip" => gunzip(&raw),
        other => Err(DecodeError::BadCompression(other.to_string())),
    }
}

fn gunzip(raw: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::BadGzip(e.to_string()))?;
    if out.len() as u64 > MAX_FILE_SIZE {
        return Err(DecodeError::TooLarge);
    }
    Ok(out)
}

fn verify_hash(raw: &[u8], spec: &str) -> Result<(), DecodeError> {
    let bad = || DecodeError::BadHashSpec(spec.to_string());
    let (algo, want) = spec.split_once('-').ok_or_else(bad)?;
    let want = hex::decode(want).map_err(|_| bad())?;
    let got: Vec<u8> = match algo {
        "sha256" => Sha256::digest(raw).to_vec(),
        "sha512" => Sha512::digest(raw).to_vec(),
        _ => return Err(bad()),
    };
    if got != want {
        return Err(DecodeError::HashMismatch(spec.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn decodes_percent_base64_and_gzip() {
        assert_eq!(decode("data:,GROUP%3Dstable%0A", None, None).unwrap(), b"GROUP=stable\n");
        assert_eq!(decode("data:text/plain;charset=utf-8;base64,aGk=", Some(""), None).unwrap(), b"hi");
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(gz(b"zipped"));
        assert_eq!(decode(&format!("data:;base64,{b64}"), Some("gzip"), None).unwrap(), b"zipped");
        let h = format!("sha256-{}", hex::encode(Sha256::digest(b"hi")));
        assert_eq!(decode("data:,hi", None, Some(&h)).unwrap(), b"hi");
    }

    #[test]
    fn refuses_remote_bad_and_huge() {
        assert!(matches!(decode("https://example.com/x", None, None), Err(DecodeError::NotDataUrl { .. })));
        assert!(matches!(decode("s3://bucket/x", None, None), Err(DecodeError::NotDataUrl { .. })));
        assert_eq!(decode("data:;base64,!!!!", None, None), Err(DecodeError::BadBase64));
        assert!(matches!(decode("data:,x", Some("bzip2"), None), Err(DecodeError::BadCompression(_))));
        assert!(matches!(decode("data:,notgzip", Some("gzip"), None), Err(DecodeError::BadGzip(_))));
        use base64::Engine;
        let bomb = gz(&vec![0u8; (MAX_FILE_SIZE + 1) as usize]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(bomb);
        assert_eq!(decode(&format!("data:;base64,{b64}"), Some("gzip"), None), Err(DecodeError::TooLarge));
        assert!(matches!(decode("data:,hi", None, Some("md5-00")), Err(DecodeError::BadHashSpec(_))));
        assert!(matches!(
            decode("data:,hi", None, Some(&format!("sha256-{}", "0".repeat(64)))),
            Err(DecodeError::HashMismatch(_))
        ));
    }
}
