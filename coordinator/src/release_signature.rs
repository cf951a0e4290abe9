//! Release verification: the Cluster Version Operator checks a release payload's signatures
//! before it takes the release, so that a compromised or mistaken update graph cannot start a
//! rollout of something nobody signed. An aloft release is an OS commit, signed the way ostree
//! signs commits: OpenPGP detached signatures over the commit object, kept in the commit's
//! detached metadata (`objects/XX/YYYY.commitmeta`, a GVariant `a{sv}` whose `ostree.gpgsigs` is
//! an `aay` of signature packets). This reads the same two files an agent's pull reads, over
//! HTTP, and checks them against a keyring of trusted OpenPGP keys (the one the nodes trust), so
//! the coordinator refuses a commit no agent would deploy (unsigned, or signed only by other
//! keys, or bound to another ref) before a single node is drained. The expiry of keys is left
//! to the agents' libostree.
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
/// How long each of the two reads may take: the check runs in the ClusterVersion controller's
/// pass, which an unreachable repository must not hold for long.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
    #[error("commit {checksum} is signed only by expired keys or signatures: {why}")]
    Expired { checksum: String, why: String },
    #[error("commit {checksum} is bound to ref {bound}, not {named}, the ref the release names")]
    OtherRef { checksum: String, named: String, bound: String },
    #[error("the commit object {checksum} does not read: {why}")]
    BadCommit { checksum: String, why: String },
}

/// The trusted keys, read once at start: each primary key of the keyring (the keyring is the
/// root of trust, as a remote's keyring is to libostree), and those of its subkeys that are
/// bound to it, may sign and are not revoked (as GnuPG picks them).
#[derive(Debug)]
pub struct Keyring {
    path: String,
    keys: Vec<SignedPublicKey>,
}

impl Keyring {
    /// Read `path`: OpenPGP public keys, binary (as `gpg --export` writes them, and as
    /// `/usr/share/ostree/trusted.gpg.d/*.gpg` holds them) or ASCII-armored (one block or
    /// several, one after another). Certifications by other keys do not matter; a key revoked
    /// by itself is left out.
    pub fn load(path: &Path) -> Result<Keyring, VerifyError> {
        let shown = path.display().to_string();
        let bad = |why: String| VerifyError::Keyring { path: shown.clone(), why };
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let mut parsed = Vec::new();
        if bytes.trim_ascii_start().starts_with(b"-----BEGIN PGP") {
            // Every armored block: `cat a.asc b.asc` is a keyring of two.
            const BEGIN: &[u8] = b"-----BEGIN PGP";
            let starts: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i..].starts_with(BEGIN)).collect();
            for (n, &at) in starts.iter().enumerate() {
                let block = &bytes[at..starts.get(n + 1).copied().unwrap_or(bytes.len())];
                let (keys, _) = SignedPublicKey::from_armor_many(std::io::Cursor::new(block))
                    .map_err(|e| bad(format!("armored block {}: {e}", n + 1)))?;
                parsed.extend(keys);
            }
        } else {
            parsed.extend(
                SignedPublicKey::from_bytes_many(std::io::Cursor::new(&bytes)).map_err(|e| bad(e.to_string()))?,
            );
        }
        let mut keys = Vec::new();
        for key in parsed {
            let key = key.map_err(|e| bad(e.to_string()))?;
            let revoked = key.details.revocation_signatures.iter().any(|sig| sig.verify_key(&key.primary_key).is_ok());
            if revoked {
                tracing::warn!(path = %shown, key = %format!("{:X}", key.fingerprint()), "a key of the release keyring is revoked: left out");
                continue;
            }
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

    /// The fingerprint of the key (primary or signing subkey) that made one of `signatures`
    /// over `data`, if any did, at `now` (unix seconds). Only signatures as ostree makes them
    /// count: over binary data, with SHA-256 or stronger, by a key that has not expired, and
    /// not expired themselves (libostree's pull refuses both: "Key expired", "Signature
    /// expired"). Err: why each good signature did not count (empty: none was good).
    fn signer_of(&self, data: &[u8], signatures: &[DetachedSignature], now: u64) -> Result<String, Vec<String>> {
        use pgp::crypto::hash::HashAlgorithm as H;
        use pgp::packet::SignatureType;
        let mut expired = Vec::new();
        for sig in signatures {
            let strong =
                matches!(sig.signature.hash_alg(), Some(H::Sha256 | H::Sha384 | H::Sha512 | H::Sha3_256 | H::Sha3_512));
            if sig.signature.typ() != Some(SignatureType::Binary) || !strong {
                continue;
            }
            for key in &self.keys {
                let primary_until = expiry(key.primary_key.created_at(), newest_self_signature(key));
                let mut candidates: Vec<(String, Option<u64>)> = Vec::new();
                if sig.verify(key, data).is_ok() {
                    candidates.push((format!("{:X}", key.fingerprint()), primary_until));
                }
                for sub in key.public_subkeys.iter().filter(|sub| signing_subkey(&key.primary_key, sub)) {
                    if sig.verify(sub, data).is_ok() {
                        let binding = sub
                            .signatures
                            .iter()
                            .filter(|s| s.typ() == Some(SignatureType::SubkeyBinding))
                            .max_by_key(|s| s.created().map(|t| t.as_secs()));
                        // A subkey is no longer valid than its primary key.
                        let until = [expiry(sub.key.created_at(), binding), primary_until].into_iter().flatten().min();
                        candidates.push((format!("{:X}", sub.key.fingerprint()), until));
                    }
                }
                for (fingerprint, until) in candidates {
                    if let Some(t) = until.filter(|&t| t <= now) {
                        expired.push(format!("key {fingerprint} expired {}", when(t)));
                        continue;
                    }
                    let made = sig.signature.created().map(|t| u64::from(t.as_secs()));
                    let lasts =
                        sig.signature.signature_expiration_time().map(|d| u64::from(d.as_secs())).filter(|&d| d > 0);
                    if let (Some(made), Some(lasts)) = (made, lasts) {
                        if made + lasts <= now {
                            expired.push(format!("the signature by {fingerprint} expired {}", when(made + lasts)));
                            continue;
                        }
                    }
                    return Ok(fingerprint);
                }
            }
        }
        Err(expired)
    }
}

/// The self-signature whose key expiration time holds for `key`, as GnuPG reads it (its
/// `merge_selfsigs_main`): the newest direct-key self-signature, when it sets an expiration,
/// whatever the user IDs say; otherwise, of the user IDs whose newest own signature is a
/// certification (not the key's revocation of it) that sets an expiration, the newest such
/// certification. None: the key never expires. Another key's certifications or revocations do
/// not count.
fn newest_self_signature(key: &SignedPublicKey) -> Option<&pgp::packet::Signature> {
    use pgp::packet::SignatureType as T;
    use pgp::types::Tag;
    let created = |s: &&pgp::packet::Signature| s.created().map(|t| t.as_secs());
    let sets_expiry = |s: &pgp::packet::Signature| s.key_expiration_time().is_some_and(|d| d.as_secs() > 0);
    let direct = key
        .details
        .direct_signatures
        .iter()
        .filter(|s| s.typ() == Some(T::Key) && s.verify_key(&key.primary_key).is_ok())
        .max_by_key(created);
    if let Some(d) = direct.filter(|d| sets_expiry(d)) {
        return Some(d);
    }
    let mut newest: Option<&pgp::packet::Signature> = None;
    for u in &key.details.users {
        let own = |s: &&pgp::packet::Signature| s.verify_certification(&key.primary_key, Tag::UserId, &u.id).is_ok();
        let certification = |s: &&pgp::packet::Signature| {
            matches!(s.typ(), Some(T::CertGeneric | T::CertPersona | T::CertCasual | T::CertPositive))
        };
        // The user ID's newest own signature, certification or revocation (a later one wins a
        // tie, as in GnuPG): a revocation leaves the user ID out, a certification renewed after
        // one brings it back.
        let latest =
            u.signatures.iter().filter(|s| certification(s) || s.typ() == Some(T::CertRevocation)).filter(own).fold(
                None,
                |best: Option<&pgp::packet::Signature>, s| match best {
                    Some(b) if created(&b) > created(&s) => Some(b),
                    _ => Some(s),
                },
            );
        let Some(cert) = latest.filter(|s| certification(s) && sets_expiry(s)) else { continue };
        if newest.is_none_or(|n| created(&cert) > created(&n)) {
            newest = Some(cert);
        }
    }
    newest
}

/// When a key made at `created` expires by `sig`'s key expiration time (unix seconds); None:
/// never (no such time, or zero).
fn expiry(created: pgp::types::Timestamp, sig: Option<&pgp::packet::Signature>) -> Option<u64> {
    let lasts = u64::from(sig?.key_expiration_time()?.as_secs());
    (lasts > 0).then(|| u64::from(created.as_secs()) + lasts)
}

/// A time for a message: `on 2024-12-31T00:00:00Z`.
fn when(unix: u64) -> String {
    match chrono::DateTime::from_timestamp(i64::try_from(unix).unwrap_or(i64::MAX), 0) {
        Some(t) => format!("on {}", t.format("%Y-%m-%dT%H:%M:%SZ")),
        None => format!("at {unix}"),
    }
}

/// Whether `sub` may sign for `primary`: bound to it (a signing subkey's binding carries its
/// back-signature), flagged for signing, and not revoked.
fn signing_subkey(primary: &pgp::packet::PublicKey, sub: &pgp::composed::SignedPublicSubKey) -> bool {
    use pgp::packet::SignatureType;
    sub.verify_bindings(primary).is_ok()
        && sub.signatures.iter().any(|s| s.typ() == Some(SignatureType::SubkeyBinding) && s.key_flags().sign())
        && !sub.signatures.iter().any(|s| s.typ() == Some(SignatureType::SubkeyRevocation))
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
    // A signed commit of another ref (another architecture's, an older stream's) named by a
    // graph under this ref: the agents' pulls refuse it, so it is no release of this ref.
    let bound = ref_bindings(&commit).map_err(|why| VerifyError::BadCommit { checksum: got.clone(), why })?;
    if !bound.is_empty() && !bound.contains(&parsed.ref_name) {
        return Err(VerifyError::OtherRef { checksum: got, named: parsed.ref_name, bound: bound.join(", ") });
    }
    let meta = fetch(http, &format!("{base}.commitmeta"))
        .await?
        .ok_or_else(|| VerifyError::Unsigned(parsed.checksum.clone()))?;
    let Signatures { read: signatures, unreadable } =
        signatures_of(&meta).map_err(|why| VerifyError::BadMetadata { checksum: parsed.checksum.clone(), why })?;
    if signatures.is_empty() && unreadable.is_empty() {
        return Err(VerifyError::Unsigned(parsed.checksum));
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    keyring.signer_of(&commit, &signatures, now).map_err(|expired| {
        if !expired.is_empty() {
            return VerifyError::Expired { checksum: parsed.checksum.clone(), why: expired.join("; ") };
        }
        // Each signature's issuer: its fingerprint, else its key ID.
        let issuers: Vec<String> = signatures
            .iter()
            .filter_map(|s| {
                let fingerprint = s.signature.issuer_fingerprint().first().map(|f| format!("{f:X}"));
                fingerprint.or_else(|| s.signature.issuer_key_id().first().map(|k| hex::encode_upper(k.as_ref())))
            })
            .collect();
        let mut issuers = if issuers.is_empty() { String::new() } else { format!(" (made by {})", issuers.join(", ")) };
        if !unreadable.is_empty() {
            issuers.push_str(&format!("; unreadable: {}", unreadable.join("; ")));
        }
        VerifyError::NoTrustedSignature {
            checksum: parsed.checksum,
            count: signatures.len() + unreadable.len(),
            keyring: keyring.path.clone(),
            issuers,
        }
    })
}

/// The signatures of a commit's detached metadata: those that read as OpenPGP signatures, and
/// a word on each that did not (a co-signature in a form this reader does not know must not
/// hide a good one, as libostree skips what it cannot check).
#[derive(Debug, Default)]
pub struct Signatures {
    pub read: Vec<DetachedSignature>,
    pub unreadable: Vec<String>,
}

/// The OpenPGP signatures in a commit's detached metadata (`ostree.gpgsigs`); none when it has
/// no such key. Metadata that is not an `a{sv}`, or an `ostree.gpgsigs` of another type, is an
/// error.
pub fn signatures_of(meta: &[u8]) -> Result<Signatures, String> {
    use gvariant::{gv, Marker, Structure};
    let dict = gv!("a{sv}").deserialize(std::io::Cursor::new(meta)).map_err(|e| e.to_string())?;
    let mut out = Signatures::default();
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
            let parsed = DetachedSignature::from_bytes_many(std::io::Cursor::new(bytes))
                .map_err(|e| e.to_string())
                .and_then(|many| many.collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string()));
            match parsed {
                Ok(many) if !many.is_empty() => out.read.extend(many),
                Ok(_) => out.unreadable.push(format!("signature {} of ostree.gpgsigs holds none", i + 1)),
                Err(e) => out.unreadable.push(format!("signature {} of ostree.gpgsigs: {e}", i + 1)),
            }
        }
    }
    Ok(out)
}

/// The refs a commit object is bound to (`ostree.ref-binding` in its metadata); none when it
/// names none (commits made before ostree bound them).
pub fn ref_bindings(commit: &[u8]) -> Result<Vec<String>, String> {
    use gvariant::{gv, Marker, Structure};
    let commit = gv!("(a{sv}aya(say)sstayay)").deserialize(std::io::Cursor::new(commit)).map_err(|e| e.to_string())?;
    let (meta, ..) = commit.to_tuple();
    for entry in meta.iter() {
        let (key, value) = entry.to_tuple();
        if key.to_str() != "ostree.ref-binding" {
            continue;
        }
        let refs = value.get(gv!("as")).ok_or_else(|| {
            format!("ostree.ref-binding is of type {:?}, not as", String::from_utf8_lossy(value.split().0))
        })?;
        return Ok(refs.iter().map(|r| r.to_str().to_string()).collect());
    }
    Ok(Vec::new())
}

/// GET `url`: Some(body), None on 404, an error otherwise or past [`MAX_OBJECT_BYTES`].
async fn fetch(http: &reqwest::Client, url: &str) -> Result<Option<Vec<u8>>, VerifyError> {
    let fail = |why: String| VerifyError::Fetch { url: url.to_string(), why };
    let mut response =
        http.get(url).timeout(FETCH_TIMEOUT).send().await.map_err(|e| fail(crate::controllers::error_chain(&e)))?;
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
        let none = |s: Signatures| s.read.is_empty() && s.unreadable.is_empty();
        assert!(none(signatures_of(&[]).expect("an empty dictionary")));
        let other = dict_of_one("version", "s", b"1.0\0");
        assert!(none(signatures_of(&other).expect("another key only")));
        let wrong = dict_of_one("ostree.gpgsigs", "s", b"nope\0");
        let why = signatures_of(&wrong).expect_err("not aay");
        assert!(why.contains("ostree.gpgsigs is of type \"s\", not aay"), "{why}");
        // One "signature" that is no OpenPGP packet: counted as unreadable, naming which (a
        // good one beside it would still count).
        // (An `aay` of one element: its bytes, then its end as a one-byte framing offset.)
        let bad = dict_of_one("ostree.gpgsigs", "aay", &[1, 2, 3, 4, 4]);
        let sigs = signatures_of(&bad).expect("read");
        assert!(sigs.read.is_empty() && sigs.unreadable.len() == 1, "{sigs:?}");
        assert!(sigs.unreadable[0].starts_with("signature 1 of ostree.gpgsigs"), "{sigs:?}");
    }

    proptest::proptest! {
        /// A repository is not trusted to serve well-formed metadata: any bytes read as
        /// signatures or are refused with a message, never a panic.
        #[test]
        fn any_metadata_reads_or_is_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = signatures_of(&bytes);
            let _ = ref_bindings(&bytes);
        }

        /// Bytes in the right place: whatever a repository puts where a signature goes.
        #[test]
        fn any_signature_bytes_read_or_are_refused(sig in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = signatures_of(&dict_of_one("ostree.gpgsigs", "aay", &sig));
        }
    }
}

/// GnuPG's readings of a key's expiry, on keys whose signatures are made here with the times
/// each case needs (gpg makes them only with the current time): which self-signature holds
/// decides whether a release signed by the key is taken.
#[cfg(test)]
mod expiry_readings {
    use super::*;
    use pgp::composed::{KeyType, SecretKeyParamsBuilder, SignedKeyDetails, SignedSecretKey};
    use pgp::crypto::hash::HashAlgorithm;
    use pgp::packet::{Signature, SignatureConfig, SignatureType, Subpacket, SubpacketData, UserId};
    use pgp::types::{Duration, KeyDetails, PacketHeaderVersion, Password, SignedUser, Tag, Timestamp};

    /// 2024-01-01T00:00:00Z, when every key here was made.
    const T0: u32 = 1_704_067_200;
    const DAY: u32 = 86_400;
    /// When the checks run: a year after the keys were made.
    const NOW: u64 = T0 as u64 + 365 * DAY as u64;
    const DATA: &[u8] = b"a commit";

    fn key() -> SignedSecretKey {
        SecretKeyParamsBuilder::default()
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .can_sign(true)
            .created_at(Timestamp::from_secs(T0))
            .primary_user_id("release <release@example.org>".into())
            .build()
            .expect("key parameters")
            .generate(rand08::thread_rng())
            .expect("a key")
    }

    /// A signature's settings by `by`, made `at`, saying the key expires `lasts` after it was
    /// made (None: says nothing of it).
    fn config(typ: SignatureType, by: &SignedSecretKey, at: u32, lasts: Option<u32>) -> SignatureConfig {
        let mut c = SignatureConfig::v4(typ, by.primary_key.algorithm(), HashAlgorithm::Sha256);
        c.hashed_subpackets = vec![
            Subpacket::regular(SubpacketData::SignatureCreationTime(Timestamp::from_secs(at))).expect("subpacket"),
            Subpacket::regular(SubpacketData::IssuerFingerprint(by.primary_key.fingerprint())).expect("subpacket"),
        ];
        if let Some(d) = lasts {
            c.hashed_subpackets
                .push(Subpacket::regular(SubpacketData::KeyExpirationTime(Duration::from_secs(d))).expect("subpacket"));
        }
        c
    }

    fn uid(name: &str) -> UserId {
        UserId::from_str(PacketHeaderVersion::New, name).expect("user ID")
    }

    /// `by`'s certification (or, with CertRevocation, revocation) of `id` on `key`.
    fn on_uid(
        typ: SignatureType,
        by: &SignedSecretKey,
        key: &SignedSecretKey,
        id: &UserId,
        at: u32,
        lasts: Option<u32>,
    ) -> Signature {
        config(typ, by, at, lasts)
            .sign_certification_third_party(
                &by.primary_key,
                &Password::empty(),
                key.primary_key.public_key(),
                Tag::UserId,
                id,
            )
            .expect("certification")
    }

    /// A direct-key self-signature on `key`.
    fn direct(key: &SignedSecretKey, at: u32, lasts: Option<u32>) -> Signature {
        config(SignatureType::Key, key, at, lasts)
            .sign_key(&key.primary_key, &Password::empty(), key.primary_key.public_key())
            .expect("direct-key signature")
    }

    fn keyring(key: &SignedSecretKey, users: Vec<SignedUser>, direct_signatures: Vec<Signature>) -> Keyring {
        let public = SignedPublicKey {
            primary_key: key.primary_key.public_key().clone(),
            details: SignedKeyDetails {
                revocation_signatures: Vec::new(),
                direct_signatures,
                users,
                user_attributes: Vec::new(),
            },
            public_subkeys: Vec::new(),
        };
        Keyring { path: "test".into(), keys: vec![public] }
    }

    /// What checking a signature over DATA, made by `key` ten days after T0, says at NOW.
    fn check(key: &SignedSecretKey, ring: &Keyring) -> Result<String, Vec<String>> {
        let sig = config(SignatureType::Binary, key, T0 + 10 * DAY, None)
            .sign(&key.primary_key, &Password::empty(), DATA)
            .expect("signature");
        ring.signer_of(DATA, &[DetachedSignature::new(sig)], NOW)
    }

    fn expired_after(days: u32) -> String {
        format!("expired {}", when(u64::from(T0 + days * DAY)))
    }

    #[test]
    fn a_user_id_the_key_revoked_no_longer_says_when_it_expires() {
        let key = key();
        let (a, b) = (uid("a <a@example.org>"), uid("b <b@example.org>"));
        let cert = |id: &UserId, at, lasts| on_uid(SignatureType::CertPositive, &key, &key, id, at, lasts);
        let revoke = |id: &UserId, at| on_uid(SignatureType::CertRevocation, &key, &key, id, at, None);
        // a: 30 days; b, newer: 10 years, then revoked by the key: the key expired after 30 days.
        let users = vec![
            SignedUser::new(a.clone(), vec![cert(&a, T0 + DAY, Some(30 * DAY))]),
            SignedUser::new(b.clone(), vec![cert(&b, T0 + 2 * DAY, Some(3650 * DAY)), revoke(&b, T0 + 3 * DAY)]),
        ];
        let why = check(&key, &keyring(&key, users, Vec::new())).expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");

        // b certified again after its revocation: its newest certification holds again.
        let users = vec![
            SignedUser::new(a.clone(), vec![cert(&a, T0 + DAY, Some(30 * DAY))]),
            SignedUser::new(
                b.clone(),
                vec![
                    cert(&b, T0 + 2 * DAY, Some(3650 * DAY)),
                    revoke(&b, T0 + 3 * DAY),
                    cert(&b, T0 + 4 * DAY, Some(3650 * DAY)),
                ],
            ),
        ];
        assert_eq!(check(&key, &keyring(&key, users, Vec::new())), Ok(format!("{:X}", key.primary_key.fingerprint())));

        // Of the user IDs, the newest that sets an expiry: b's newer certification without one
        // does not make the key last (GnuPG's reading).
        let users = vec![
            SignedUser::new(a.clone(), vec![cert(&a, T0 + DAY, Some(30 * DAY))]),
            SignedUser::new(b.clone(), vec![cert(&b, T0 + 2 * DAY, None)]),
        ];
        let why = check(&key, &keyring(&key, users, Vec::new())).expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");
    }

    #[test]
    fn only_the_keys_own_signatures_on_a_user_id_count() {
        let key = key();
        let other = self::key();
        let a = uid("a <a@example.org>");
        // The key's own certification says 30 days; another key's newer certification (10
        // years) and its revocation of the user ID change nothing.
        let users = vec![SignedUser::new(
            a.clone(),
            vec![
                on_uid(SignatureType::CertPositive, &key, &key, &a, T0 + DAY, Some(30 * DAY)),
                on_uid(SignatureType::CertPositive, &other, &key, &a, T0 + 2 * DAY, Some(3650 * DAY)),
                on_uid(SignatureType::CertRevocation, &other, &key, &a, T0 + 3 * DAY, None),
            ],
        )];
        let why = check(&key, &keyring(&key, users, Vec::new())).expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");
        // Unexpired by its own certification: another key's revocation does not unmake it.
        let users = vec![SignedUser::new(
            a.clone(),
            vec![
                on_uid(SignatureType::CertPositive, &key, &key, &a, T0 + DAY, None),
                on_uid(SignatureType::CertRevocation, &other, &key, &a, T0 + 3 * DAY, None),
            ],
        )];
        assert!(check(&key, &keyring(&key, users, Vec::new())).is_ok());
    }

    #[test]
    fn a_direct_key_signature_sets_the_expiry_only_when_it_says_one_and_is_newer() {
        let key = key();
        let a = uid("a <a@example.org>");
        let never = vec![SignedUser::new(
            a.clone(),
            vec![on_uid(SignatureType::CertPositive, &key, &key, &a, T0 + 2 * DAY, None)],
        )];
        // Newer, with an expiry of 30 days: it holds.
        let why = check(&key, &keyring(&key, never.clone(), vec![direct(&key, T0 + 3 * DAY, Some(30 * DAY))]))
            .expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");
        // Older than the certification: it holds all the same (GnuPG reads the newest direct-key
        // signature before any user ID).
        let why = check(&key, &keyring(&key, never.clone(), vec![direct(&key, T0 + DAY, Some(30 * DAY))]))
            .expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");
        // The newest direct-key signature counts: an older one with an expiry, then a newer one
        // without, and the user ID (never) holds.
        let both = vec![direct(&key, T0 + DAY, Some(30 * DAY)), direct(&key, T0 + 3 * DAY, None)];
        assert!(check(&key, &keyring(&key, never.clone(), both)).is_ok());
        // Newer but saying nothing of expiry: the certification holds, never expiring here,
        // expiring after 30 days there.
        assert!(check(&key, &keyring(&key, never, vec![direct(&key, T0 + 3 * DAY, None)])).is_ok());
        let month = vec![SignedUser::new(
            a.clone(),
            vec![on_uid(SignatureType::CertPositive, &key, &key, &a, T0 + 2 * DAY, Some(30 * DAY))],
        )];
        let why = check(&key, &keyring(&key, month, vec![direct(&key, T0 + 3 * DAY, None)])).expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");
        // A key with no user ID certification at all: its direct-key signature alone.
        let why =
            check(&key, &keyring(&key, Vec::new(), vec![direct(&key, T0 + DAY, Some(30 * DAY))])).expect_err("expired");
        assert!(why.len() == 1 && why[0].ends_with(&expired_after(30)), "{why:?}");
    }
}
