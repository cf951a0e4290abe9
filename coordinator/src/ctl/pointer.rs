//! `aloftctl adm pointer-ignition POOL`: the Ignition config a new host boots with, pointing at
//! the coordinator's `/config/<pool>` (what `openshift-install create ignition-configs` writes as
//! `worker.ign` for MCO's machine-config-server). Why a command: the config must carry the
//! coordinator's CA and a bootstrap token in the exact places Ignition reads them, and a token
//! that cannot read the pool's config would only show at the host's first boot.

use crate::client::{Client, ClientConfig};
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::Path;

/// The spec version of the pointer config: the first with `httpHeaders` (the `Authorization`
/// header), so every Ignition that can send it reads it (Ignition 2.6, RHCOS 4.6, and later).
pub const POINTER_VERSION: &str = "3.1.0";

/// The pointer config for `pool` at `server`, pinning `ca_pem` and sending `token`.
pub fn pointer_config(server: &str, pool: &str, ca_pem: Option<&[u8]>, token: &str) -> Value {
    let source = format!("{}/config/{pool}", server.trim_end_matches('/'));
    let mut ignition = json!({
        "version": POINTER_VERSION,
        "config": {"merge": [{"source": source,
            "httpHeaders": [{"name": "Authorization", "value": format!("Bearer {token}")}]}]},
    });
    if let Some(ca) = ca_pem {
        let data = base64::engine::general_purpose::STANDARD.encode(ca);
        ignition["security"] = json!({"tls": {"certificateAuthorities": [{"source": format!("data:text/plain;charset=utf-8;base64,{data}")}]}});
    }
    json!({"ignition": ignition})
}

/// Check that the coordinator (as `admin` reaches it) serves `pool`'s config to `token`, then
/// print the pointer config for hosts that reach it at `host_server` (default: the same URL).
pub async fn run(
    admin: &ClientConfig,
    pool: &str,
    token_file: &Path,
    host_server: Option<&str>,
    insecure_http: bool,
) -> Result<()> {
    let token = std::fs::read_to_string(token_file)
        .with_context(|| format!("--bootstrap-token-file: reading {}", token_file.display()))?
        .trim()
        .to_string();
    if token.is_empty() {
        bail!("--bootstrap-token-file: {} is empty", token_file.display());
    }
    let server = host_server.unwrap_or(&admin.server);
    if !server.starts_with("https://") && !server.starts_with("http://") {
        bail!("--host-server: {server:?} is not an http(s):// URL");
    }
    // Over plain HTTP the token and the pool's config (its secrets too) cross the network as
    // they are.
    if server.starts_with("http://") && !insecure_http {
        bail!("{server} is plain HTTP: the bootstrap token and the pool's config would travel unencrypted; pass --insecure-http to make it anyway");
    }
    // Asked as the host will ask: with that token. A config that is not there yet is answered
    // 503 with a wait, which the client follows: not waited out here (hosts keep asking).
    let as_host = Client::new(&ClientConfig { token: Some(token.clone()), ..admin.clone() })?;
    match tokio::time::timeout(std::time::Duration::from_secs(5), as_host.get(&format!("/config/{pool}"))).await {
        Ok(reply) => {
            if let Err(e) = reply?.into_result() {
                bail!("the coordinator does not serve pool {pool:?} to this token: {e:#}");
            }
        }
        Err(_) => eprintln!(
            "warning: the coordinator has not served pool {pool:?}'s config within 5 s (not rendered yet, or no pool \
             selects this token's nodes yet: it answers 503 and hosts keep asking); printing the pointer config anyway"
        ),
    }
    println!("{}", serde_json::to_string_pretty(&pointer_config(server, pool, admin.ca_pem.as_deref(), &token))?);
    eprintln!(
        "the pointer config above fetches {}/config/{pool} at first boot; it holds the bootstrap token: keep it as secret \
         as the token. A bootstrap token made without --ttl stops working 24 hours after it was made: for a pointer \
         config kept longer (an image, a machine template), make the token with --ttl 0 or a longer --ttl",
        server.trim_end_matches('/')
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pointer_is_an_ignition_3_2_config_with_the_ca_and_the_token() {
        let v = pointer_config("https://fleet.example:6443/", "worker", Some(b"PEM"), "abc.def");
        // What Ignition reads for spec 3.1, field for field (its own schema, nothing unknown).
        let mut unknown = Vec::new();
        let parsed: ignition_config::v3_1::Config =
            serde_ignored::deserialize(v.clone(), |p| unknown.push(p.to_string())).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        let merge = &parsed.ignition.config.unwrap().merge.unwrap()[0];
        assert_eq!(merge.source.as_deref(), Some("https://fleet.example:6443/config/worker"));
        let h = &merge.http_headers.as_ref().unwrap()[0];
        assert_eq!((h.name.as_str(), h.value.as_deref()), ("Authorization", Some("Bearer abc.def")));
        let ca = &parsed.ignition.security.unwrap().tls.unwrap().certificate_authorities.unwrap()[0];
        assert_eq!(ca.source.as_deref(), Some("data:text/plain;charset=utf-8;base64,UEVN"));
        assert_eq!(v["ignition"]["version"], POINTER_VERSION);
        // Over plain HTTP there is no CA to pin.
        assert!(pointer_config("http://h:6443", "worker", None, "t")["ignition"].get("security").is_none());
    }
}
