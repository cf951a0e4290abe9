//! The coordinator's own PKI: a CA generated on first start, and a serving certificate signed by
//! it. Clients (aloftctl, kubectl, agents) pin the CA, so no public PKI is involved and the serving
//! certificate can be reissued (new names) without touching the clients.

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Paths of the PKI files in the data directory.
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn in_dir(dir: &Path) -> Self {
        Pki {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            cert: dir.join("serving.crt"),
            key: dir.join("serving.key"),
        }
    }
}

/// Say which names a certificate issued again gains and loses: a name dropped (a `--tls-san` left
/// out of a restart) makes every agent reaching the coordinator by it refuse the new certificate,
/// and the start gave no sign of it.
fn announce_names(before: &str, names: &[String]) {
    if before.is_empty() {
        return;
    }
    let old: Vec<&str> = before.split(',').filter(|n| !n.is_empty()).collect();
    let dropped: Vec<&str> = old.iter().copied().filter(|o| !names.iter().any(|n| n == o)).collect();
    let added: Vec<&str> = names.iter().map(String::as_str).filter(|n| !old.contains(n)).collect();
    if !dropped.is_empty() {
        tracing::warn!(
            dropped = %dropped.join(","),
            added = %added.join(","),
            "the serving certificate was issued again without names it had (a --tls-san left out, or an address \
             this host no longer has): clients reaching the coordinator by them will refuse it; give each one \
             clients use with --tls-san"
        );
    } else if !added.is_empty() {
        tracing::info!(added = %added.join(","), "the serving certificate was issued again with new names");
    }
}

/// Make sure the CA and a serving certificate valid for `names` exist; keep what is there.
/// Returns true when a serving certificate was (re)issued.
pub fn ensure(pki: &Pki, names: &[String]) -> Result<bool> {
    if !pki.ca_cert.exists() || !pki.ca_key.exists() {
        let key = KeyPair::generate().context("generating CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
        params.distinguished_name.push(DnType::CommonName, "aloft coordinator CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.self_signed(&key).context("self-signing the CA")?;
        crate::fsutil::write_private(&pki.ca_key, key.serialize_pem().as_bytes())?;
        crate::fsutil::write_public(&pki.ca_cert, cert.pem().as_bytes())?;
        let _ = std::fs::remove_file(&pki.cert);
    }
    let names_file = pki.cert.with_extension("names");
    let ca_pem = std::fs::read_to_string(&pki.ca_cert).with_context(|| format!("reading {}", pki.ca_cert.display()))?;
    // The names, and the CA that signed the certificate: a CA replaced by hand (or restored from
    // another backup) left a serving certificate no client of the new CA accepts, served
    // without a word.
    let ca_sum = hex::encode(Sha256::digest(ca_pem.as_bytes()));
    let wanted = format!("{}\nca-sha256:{ca_sum}", names.join(","));
    let current = std::fs::read_to_string(&names_file).unwrap_or_default();
    if pki.cert.exists() && pki.key.exists() && current == wanted {
        return Ok(false);
    }
    let ca_key_pem =
        std::fs::read_to_string(&pki.ca_key).with_context(|| format!("reading {}", pki.ca_key.display()))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).context("parsing the CA key")?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).context("loading the CA certificate")?;
    let mut params = CertificateParams::new(Vec::<String>::new()).context("serving certificate parameters")?;
    params.distinguished_name.push(DnType::CommonName, "aloft-coordinator");
    for n in names {
        params.subject_alt_names.push(match n.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(n.clone().try_into().with_context(|| format!("{n:?} is not a valid DNS name"))?),
        });
    }
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let key = KeyPair::generate().context("generating the serving key")?;
    let cert = params.signed_by(&key, &issuer).context("signing the serving certificate")?;
    crate::fsutil::write_private(&pki.key, key.serialize_pem().as_bytes())?;
    crate::fsutil::write_public(&pki.cert, cert.pem().as_bytes())?;
    crate::fsutil::write_public(&names_file, wanted.as_bytes())?;
    announce_names(current.lines().next().unwrap_or(""), names);
    Ok(true)
}
