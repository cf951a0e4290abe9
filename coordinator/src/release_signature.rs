//! Release verification: the Cluster Version Operator checks a release payload's signatures
//! before it takes the release, so that a compromised or mistaken update graph cannot start a
//! rollout of something nobody signed. An aloft release is an OS commit, signed the way ostree
//! signs commits: OpenPGP detached signatures over the commit object, kept in the commit's
//! detached metadata (`objects/XX/YYYY.commitmeta`, a GVariant `a{sv}` whose `ostree.gpgsigs` is
//! an `aay` of signature packets). This reads the same two files an agent's pull reads, over
//! HTTP, and checks them against a keyring of trusted OpenPGP keys (the one the nodes trust), so
//! the coordinator refuses a commit no agent would deploy (unsigned, or signed only by other
//! keys) before a single node is drained. Key expiry and revocation are left to the agents'
//! libostree (a signature's mathematics is what is checked here).
//!
//! The commit object is checked against its checksum (SHA-256 of its bytes, ostree's content
//! address) before its signatures are: a signature over other bytes proves nothing about the
//! commit the release names.

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;
use sha2::{Digest, Sha256};
use std::path::Path;
use thiserror::Error;

/// The largest commit object or detached metadata read (a commit is a few KB; its metadata a
/// signature or two).
const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Why a release is not verified. The messages finish the CVO's "The update cannot be
/// verified: ...".
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error("the keyring {path} cannot be read: {why}")]
    Keyring { path: String, why: String },
    #[error("the keyring {0} holds no OpenPGP public key")]
    EmptyKeyring(String),
    #[error("{image:?} is not an OS commit pinned by checksum ({why}); only such a release can be verified")]
    NotPinned { image: String, why: String },
    #[error("fetching {url}: {why}")]
    Fetch { url: String, why: String },
    #[error("the commit object at {url} does not have checksum {want} (its SHA-256 is {got})")]
    WrongChecksum { url: String, want: String, got: String },
    #[error("commit {0} has no signatures (no detached metadata, or no ostree.gpgsigs in it)")]
    Unsigned(String),
    #[error("the detached metadata of commit {checksum} does not read: {why}")]
    BadMetadata { checksum: String, why: String },
    #[error("commit {checksum} has {count} signature(s), none by a key of {keyring}{issuers}")]
    NoTrustedSignature { checksum: String, count: usize, keyring: String, issuers: String },
}

/// The trusted keys, read once at start.
#[derive(Debug)]
pub struct Keyring {
    path: String,
    keys: Vec<SignedPublicKey>,
}

impl Keyring {
    /// Read `path`: OpenPGP public keys, binary (as `gpg --export` writes them, and as
    /// `/usr/share/ostree/trusted.gpg.d/*.gpg` holds them) or ASCII-armored. Keys whose
    /// self-signatures or subkey bindings do not verify are refused with the file.
    pub fn load(path: &Path) -> Result<Keyring, VerifyError> {
        let shown = path.display().to_string();
        let bad = |why: String| VerifyError::Keyring { path: shown.clone(), why };
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let armored = bytes.trim_ascii_start().starts_with(b"-----BEGIN PGP");
        let parsed: Vec<_> = if armored {
            SignedPublicKey::from_armor_many(std::io::Cursor::new(&bytes)).map_err(|e| bad(e.to_string()))?.0.collect()
        } else {
            SignedPublicKey::from_bytes_many(std::io::Cursor::new(&bytes)).map_err(|e| bad(e.to_string()))?.collect()
        };
        let mut keys = Vec::new();
        for key in parsed {
            let key = key.map_err(|e| bad(e.to_string()))?;
            key.verify_bindings()
                .map_err(|e| bad(format!("key {:X}: its signatures do not verify: {e}", key.fingerprint())))?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(VerifyError::EmptyKeyring(shown));
        }
        Ok(Keyring { path: shown, keys })
    }

    /// The file the keys came from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The fingerprint of the key (primary or subkey) that made one of `signatures` over
    /// `data`, if any did.
    fn signer_of(&self, data: &[u8], signatures: &[DetachedSignature]) -> Option<String> {
        for sig in signatures {
            for key in &self.keys {
                if sig.verify(key, data).is_ok() {
                    return Some(format!("{:X}", key.fingerprint()));
                }
                for sub in &key.public_subkeys {
                    if sig.verify(sub, data).is_ok() {
                        return Some(format!("{:X}", sub.key.fingerprint()));
                    }
                }
            }
        }
        None
    }
}

/// Verify the release whose payload is `image` (`ostree+http(s)://...#REF@CHECKSUM`): its
/// commit object is fetched and checked against the checksum, its detached signatures fetched
/// and one must be by a key of `keyring`. Ok(the signing key's fingerprint).
pub async fn verify(http: &reqwest::Client, keyring: &Keyring, image: &str) -> Result<String, VerifyError> {
    let parsed = match aloft_api::osimage::parse(image) {
        Ok(Some(p)) => p,
        Ok(None) => return Err(VerifyError::NotPinned { image: image.into(), why: "it is empty".into() }),
        Err(e) => return Err(VerifyError::NotPinned { image: image.into(), why: e.to_string() }),
    };
    let (dir, rest) = parsed.checksum.split_at(2);
    let base = format!("{}/objects/{dir}/{rest}", parsed.repo_url().trim_end_matches('/'));
    let commit_url = format!("{base}.commit");
    let commit = fetch(http, &commit_url)
        .await?
        .ok_or_else(|| VerifyError::Fetch { url: commit_url.clone(), why: "HTTP 404: no such commit".into() })?;
    let got = hex::encode(Sha256::digest(&commit));
    if got != parsed.checksum {
        return Err(VerifyError::WrongChecksum { url: commit_url, want: parsed.checksum, got });
    }
    let meta = fetch(http, &format!("{base}.commitmeta"))
        .await?
        .ok_or_else(|| VerifyError::Unsigned(parsed.checksum.clone()))?;
    let signatures =
        signatures_of(&meta).map_err(|why| VerifyError::BadMetadata { checksum: parsed.checksum.clone(), why })?;
    if signatures.is_empty() {
        return Err(VerifyError::Unsigned(parsed.checksum));
    }
    keyring.signer_of(&commit, &signatures).ok_or_else(|| {
        let issuers: Vec<String> = signatures
            .iter()
            .flat_map(|s| {
                let fingerprints = s.signature.issuer_fingerprint().into_iter().map(|f| format!("{f:X}"));
                let ids = s.signature.issuer_key_id().into_iter().map(|k| hex::encode_upper(k.as_ref()));
                fingerprints.chain(ids).collect::<Vec<_>>()
            })
            .collect();
        VerifyError::NoTrustedSignature {
            checksum: parsed.checksum,
            count: signatures.len(),
            keyring: keyring.path.clone(),
            issuers: if issuers.is_empty() { String::new() } else { format!(" (made by {})", issuers.join(", ")) },
        }
    })
}

/// The OpenPGP signatures in a commit's detached metadata (`ostree.gpgsigs`); none when it has
/// no such key. An entry of another type, or a signature that does not parse, is an error.
pub fn signatures_of(meta: &[u8]) -> Result<Vec<DetachedSignature>, String> {
    use gvariant::{gv, Marker, Structure};
    let dict = gv!("a{sv}").deserialize(std::io::Cursor::new(meta)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for entry in dict.iter() {
        let (key, value) = entry.to_tuple();
        if key.to_str() != "ostree.gpgsigs" {
            continue;
        }
        let sigs = value.get(gv!("aay")).ok_or_else(|| {
            format!("ostree.gpgsigs is of type {:?}, not aay", String::from_utf8_lossy(value.split().0))
        })?;
        for (i, bytes) in sigs.iter().enumerate() {
            let bytes: &[u8] = bytes;
            let sig = DetachedSignature::from_bytes(std::io::Cursor::new(bytes))
                .map_err(|e| format!("signature {} of ostree.gpgsigs: {e}", i + 1))?;
            out.push(sig);
        }
    }
    Ok(out)
}

/// GET `url`: Some(body), None on 404, an error otherwise or past [`MAX_OBJECT_BYTES`].
async fn fetch(http: &reqwest::Client, url: &str) -> Result<Option<Vec<u8>>, VerifyError> {
    let fail = |why: String| VerifyError::Fetch { url: url.to_string(), why };
    let mut response = http.get(url).send().await.map_err(|e| fail(crate::controllers::error_chain(&e)))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !response.status().is_success() {
        return Err(fail(format!("HTTP {}", response.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| fail(crate::controllers::error_chain(&e)))? {
        if body.len() + chunk.len() > MAX_OBJECT_BYTES {
            return Err(fail(format!("larger than {} MiB", MAX_OBJECT_BYTES >> 20)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a{sv}` with one entry, `key` holding a variant of type `ty` with `data`, serialized as
    /// GLib does (the data, a nul, the type; the entry's key offset framing it; the array's
    /// one-byte framing offset for its only element).
    fn dict_of_one(key: &str, ty: &str, data: &[u8]) -> Vec<u8> {
        let mut entry = key.as_bytes().to_vec();
        entry.push(0);
        let key_end = entry.len();
        while !entry.len().is_multiple_of(8) {
            entry.push(0);
        }
        entry.extend_from_slice(data);
        entry.push(0);
        entry.extend_from_slice(ty.as_bytes());
        entry.push(key_end as u8);
        let mut out = entry.clone();
        out.push(entry.len() as u8);
        out
    }

    #[test]
    fn metadata_without_signatures_has_none_and_a_wrong_type_is_named() {
        assert!(signatures_of(&[]).expect("an empty dictionary").is_empty());
        let other = dict_of_one("version", "s", b"1.0\0");
        assert!(signatures_of(&other).expect("another key only").is_empty());
        let wrong = dict_of_one("ostree.gpgsigs", "s", b"nope\0");
        let why = signatures_of(&wrong).expect_err("not aay");
        assert!(why.contains("ostree.gpgsigs is of type \"s\", not aay"), "{why}");
        // One "signature" that is no OpenPGP packet: refused, naming which.
        // (An `aay` of one element: its bytes, then its end as a one-byte framing offset.)
        let bad = dict_of_one("ostree.gpgsigs", "aay", &[1, 2, 3, 4, 4]);
        let why = signatures_of(&bad).expect_err("not a signature");
        assert!(why.starts_with("signature 1 of ostree.gpgsigs"), "{why}");
    }

    proptest::proptest! {
        /// A repository is not trusted to serve well-formed metadata: any bytes read as
        /// signatures or are refused with a message, never a panic.
        #[test]
        fn any_metadata_reads_or_is_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = signatures_of(&bytes);
        }

        /// Bytes in the right place: whatever a repository puts where a signature goes.
        #[test]
        fn any_signature_bytes_read_or_are_refused(sig in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = signatures_of(&dict_of_one("ostree.gpgsigs", "aay", &sig));
        }
    }
}
