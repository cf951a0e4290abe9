//! The Machine Config Server's part: `GET /config/<pool>` answers a new host's first boot with
//! its pool's rendered config as an Ignition config, as MCO's machine-config-server answers
//! `https://api-int:22623/config/worker`. Why: a host provisioned with a pointer Ignition config
//! (the URL, the CA, a bootstrap token) comes up with its pool's files, units and SSH keys
//! written by Ignition before anything runs, and with the agent's enrollment settings, so the
//! agent's first update finds the disk already at that config and takes it without a reboot.
//! The config goes with it ([`FIRST_BOOT_CONFIG`]), so that when the pool's target is another
//! one by the time the agent enrolls, the first update goes from what the first boot wrote (a
//! node credential cannot read that config from the API).
//!
//! As MCO's server: the config served is the pool's target once one node of the pool runs it
//! (`status.updatedMachineCount > 0`), else the pool's last complete one
//! (`status.configuration`), so new hosts do not join on a config no node has taken yet; the
//! Ignition spec version is the newest the host's Ignition accepts (its `Accept` header), the
//! config written in it with that version's own schema (a field it lacks is a 406 naming it, not
//! dropped). Unlike MCO's, which answers anyone who reaches its port, the request needs a token:
//! a bootstrap token reads only the config of the pool its nodes join (the pool a node with the
//! token's labels belongs to), and gets the agent's enrollment files with it; an admin's or a
//! viewer's reads any pool's, without them.

use super::error::ApiError;
use super::Ctx;
use crate::auth::{Identity, Role, WORKER_ROLE_LABEL};
use crate::controllers::pools::Membership;
use crate::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL};
use crate::store::Key;
use aloft_api::ignition::{self, SERVED_VERSIONS};
use aloft_api::{MachineConfigPool, Node};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The agent's settings file a served config writes (its unit reads it: `EnvironmentFile=` and
/// `--config`), and the files it names.
pub const AGENT_ENV: &str = "/etc/aloft/agent.env";
pub const AGENT_CA: &str = "/etc/aloft/ca.crt";
pub const AGENT_TOKEN: &str = "/etc/aloft/bootstrap-token";

/// MCO's path for the node annotations a first boot starts with.
pub const NODE_ANNOTATIONS: &str = "/etc/machine-config-daemon/node-annotations.json";

/// The served rendered config itself, as a MachineConfig holding its Ignition config: the
/// agent's first update goes from it (the agent's `first_boot` module says why). Compressed:
/// it holds every file of the config a second time.
pub const FIRST_BOOT_CONFIG: &str = "/etc/aloft/first-boot-config.json";

/// A file the served config writes besides the pool's: its path, mode, and contents as the
/// data URL to write in the config, gzip-compressed or not (Ignition's `compression: gzip`).
struct Extra {
    path: String,
    mode: u32,
    source: String,
    gzip: bool,
}

impl Extra {
    fn text(path: &str, mode: u32, contents: String) -> Self {
        let data = base64::engine::general_purpose::STANDARD.encode(contents.as_bytes());
        Extra {
            path: path.to_string(),
            mode,
            source: format!("data:text/plain;charset=utf-8;base64,{data}"),
            gzip: false,
        }
    }
}

/// How many rendered configs' [`FIRST_BOOT_CONFIG`] contents are kept.
const FIRST_BOOT_CACHED: usize = 8;

/// The [`FIRST_BOOT_CONFIG`] contents of the rendered configs served lately, by name and
/// `resourceVersion`. Why: compressing a config is most of a fetch's work (17.6 ms against
/// 3.8 ms for a 420 KB config uncached), and the hosts of a scale-up ask for the same one; a
/// rendered config does not change (its name is its contents' hash), and an edit of one
/// changes its `resourceVersion`.
#[derive(Default)]
pub struct FirstBootCache(std::sync::Mutex<std::collections::VecDeque<(String, String, std::sync::Arc<str>)>>);

impl FirstBootCache {
    fn source(&self, name: &str, version: &str, config: Option<&Value>) -> Result<std::sync::Arc<str>, ApiError> {
        let found = |c: &std::collections::VecDeque<(String, String, std::sync::Arc<str>)>| {
            c.iter().find(|(n, v, _)| n == name && v == version).map(|(_, _, s)| s.clone())
        };
        let lock = || self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(hit) = found(&lock()) {
            return Ok(hit);
        }
        // Made outside the lock: another request's compression does not wait for this one.
        let made: std::sync::Arc<str> = first_boot_source(name, config)?.into();
        let mut c = lock();
        if found(&c).is_none() {
            if c.len() >= FIRST_BOOT_CACHED {
                c.pop_front();
            }
            c.push_back((name.to_string(), version.to_string(), made.clone()));
        }
        Ok(made)
    }
}

/// Ignition's media type; its `version` parameter names the spec version.
const IGNITION_MEDIA: &str = "application/vnd.coreos.ignition+json";

/// What the request carried that the answer depends on.
pub struct ConfigRequest<'a> {
    pub pool: &'a str,
    pub who: &'a Identity,
    /// The bearer token the request carried (for a bootstrap token, written for the agent).
    pub token: Option<&'a str>,
    /// The coordinator's URL as the host reached it (scheme and authority).
    pub server: String,
    pub accept: Option<&'a str>,
    pub head: bool,
}

/// Answer `GET`/`HEAD /config/<pool>`.
pub async fn serve(ctx: &Ctx, req: ConfigRequest<'_>) -> Result<Response, ApiError> {
    if req.server.ends_with("://") {
        return Err(ApiError::bad_request(
            "the request names no host (no Host header): the config could not say where the coordinator is",
        ));
    }
    let listed = ctx
        .store
        .list(&MACHINE_CONFIG_POOL.store_key(), None)
        .await
        .map_err(|e| ApiError::from_store(e, "machineconfigpools", req.pool))?;
    let pools: Vec<MachineConfigPool> =
        listed.items.iter().filter_map(|p| serde_json::from_value(p.clone()).ok()).collect();
    // A bootstrap token is judged before the pool is looked up: it learns nothing of pools
    // other than its own.
    let enroll_labels = match &req.who.role {
        Role::Bootstrap(scope) => {
            let labels =
                scope.0.clone().unwrap_or_else(|| BTreeMap::from([(WORKER_ROLE_LABEL.to_string(), String::new())]));
            match pool_of_labels(&pools, &labels) {
                Ok(Some(joins)) if joins == req.pool => Some(labels),
                Ok(Some(joins)) => {
                    return Err(ApiError::forbidden_because(format!(
                        "bootstrap token {:?} (labels {}) enrolls nodes into pool {joins:?}, so it may read /config/{joins} \
                         only; for pool {:?} make a token with that pool's labels \
                         (aloft-coordinator token create --role bootstrap --labels ...)",
                        req.who.name,
                        env_labels(&labels),
                        req.pool
                    )));
                }
                // No pool selects its nodes yet (the pools are still being made): the host's
                // Ignition asks again.
                Ok(None) => {
                    return Err(not_yet(format!(
                        "no pool selects nodes with bootstrap token {:?}'s labels ({}) yet",
                        req.who.name,
                        env_labels(&labels)
                    )));
                }
                // Pools to mend (as their status says); the host asks again meanwhile.
                Err(custom) => {
                    return Err(not_yet(format!(
                        "nodes with bootstrap token {:?}'s labels ({}) belong to {} custom pools ({}); each must \
                         belong to at most one: mend the pools' nodeSelectors",
                        req.who.name,
                        env_labels(&labels),
                        custom.len(),
                        custom.join(", ")
                    )));
                }
            }
        }
        Role::Admin | Role::Viewer => None,
        Role::Node(_) => return Err(ApiError::forbidden(req.who, "get", &format!("/config/{}", req.pool), None, None)),
    };
    let Some(pool) = pools.iter().find(|p| p.metadata.name == req.pool) else {
        return Err(ApiError::not_found("machineconfigpools.machineconfiguration.openshift.io", req.pool));
    };
    // Not rendered yet, or its rendered config being replaced: temporary, so 503 (Ignition
    // asks again after a 5xx; a 4xx would end the host's first boot).
    let name = served_config(pool).ok_or_else(|| {
        not_yet(format!(
            "pool {:?} has no rendered config yet: its MachineConfigs have not been rendered (see `aloftctl get mcp {}`)",
            req.pool, req.pool
        ))
    })?;
    let rendered = ctx
        .store
        .get(&Key::cluster(&MACHINE_CONFIG.store_key(), &name))
        .await
        .map_err(|e| ApiError::from_store(e, "machineconfigs", &name))?
        .ok_or_else(|| not_yet(format!("the rendered config {name} of pool {:?} is not there", req.pool)))?;
    let config = ignition::parse_typed(rendered.pointer("/spec/config").unwrap_or(&Value::Null))
        .map_err(|e| internal(format!("the rendered config {name} does not read: {}: {}", e.field(), e.message())))?;
    let version = rendered.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
    let source = ctx.first_boot.source(&name, version, rendered.pointer("/spec/config"))?;
    let first_boot = Extra { path: FIRST_BOOT_CONFIG.to_string(), mode: 0o600, source: source.to_string(), gzip: true };
    let mut files = vec![node_annotations(&name), first_boot];
    if let Some(labels) = &enroll_labels {
        files.extend(agent_files(&req.server, ctx.ca_pem.as_deref(), req.token.unwrap_or_default(), labels));
    }
    let config = with_files(config, files).map_err(|e| internal(format!("adding the first boot's files: {e}")))?;
    let (version, body) = negotiate(&config, req.accept).map_err(ApiError::not_acceptable)?;
    tracing::info!(pool = req.pool, config = %name, version, by = %req.who.name, "Ignition config served");
    let text = body.to_string();
    let ctype = format!("{IGNITION_MEDIA};version={version}");
    let mut response = if req.head {
        (StatusCode::OK, [(header::CONTENT_TYPE, ctype), (header::CONTENT_LENGTH, text.len().to_string())])
            .into_response()
    } else {
        (StatusCode::OK, [(header::CONTENT_TYPE, ctype)], text).into_response()
    };
    if let Ok(v) = header::HeaderValue::from_str(&name) {
        response.headers_mut().insert("x-aloft-rendered-config", v);
    }
    Ok(response)
}

/// 503 with `Retry-After`: what is asked for will be there.
fn not_yet(message: String) -> ApiError {
    ApiError::unavailable(message, 10)
}

/// MCO's `node-annotations.json`: the rendered config the first boot writes, which the agent's
/// first update goes from (with [`FIRST_BOOT_CONFIG`], once the disk is found to hold it).
fn node_annotations(config: &str) -> Extra {
    let v = json!({
        aloft_api::annotations::CURRENT_CONFIG: config,
        aloft_api::annotations::DESIRED_CONFIG: config,
        aloft_api::annotations::STATE: "Done",
    });
    Extra::text(NODE_ANNOTATIONS, 0o644, format!("{v}\n"))
}

/// [`FIRST_BOOT_CONFIG`]'s contents as a gzip data URL: the rendered config `name` with its
/// Ignition config only (what Ignition writes; its OS image and kernel arguments are the
/// agent's first update's to apply). Written root's alone to read (the config holds the
/// pool's secrets).
fn first_boot_source(name: &str, config: Option<&Value>) -> Result<String, ApiError> {
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": name}, "spec": {"config": config.cloned().unwrap_or(Value::Null)}});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let compressed = std::io::Write::write_all(&mut gz, mc.to_string().as_bytes()).and_then(|()| gz.finish());
    let contents = compressed.map_err(|e| internal(format!("compressing the first boot's config file: {e}")))?;
    Ok(format!("data:;base64,{}", base64::engine::general_purpose::STANDARD.encode(contents)))
}

fn internal(message: String) -> ApiError {
    tracing::warn!("{message}");
    ApiError::internal(message)
}

/// The pool a node carrying exactly `labels` joins (MCO's membership rules), if any; Err with
/// the custom pools it would be in when there are several (it would then be in none).
fn pool_of_labels(
    pools: &[MachineConfigPool],
    labels: &BTreeMap<String, String>,
) -> Result<Option<String>, Vec<String>> {
    let Ok(node) = serde_json::from_value::<Node>(json!({"metadata": {"name": "new-host", "labels": labels}})) else {
        return Ok(None);
    };
    match Membership::new(pools).pool_of(&node) {
        Ok(p) => Ok(p.map(|p| pools[p].metadata.name.clone())),
        Err(custom) => Err(custom.into_iter().map(|p| pools[p].metadata.name.clone()).collect()),
    }
}

/// MCO's choice: the pool's target once one of its nodes runs it, else its last complete config
/// (a fresh pool has only its target).
fn served_config(pool: &MachineConfigPool) -> Option<String> {
    let target = pool.spec.configuration.as_ref().map(|c| c.name.as_str());
    let status = pool.status.as_ref();
    let complete = status.and_then(|s| s.configuration.as_ref()).map(|c| c.name.as_str());
    let taken = status.is_some_and(|s| s.updated_machine_count > 0);
    crate::controllers::pools::served_to_new_machines(target, complete, taken).map(str::to_string)
}

/// `key=value,key2=` as the agent's `ALOFT_LABELS` takes them.
fn env_labels(labels: &BTreeMap<String, String>) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The agent's enrollment files: where the coordinator is, the CA to pin, the bootstrap token
/// and the labels it gives (path, mode, contents).
fn agent_files(server: &str, ca_pem: Option<&str>, token: &str, labels: &BTreeMap<String, String>) -> Vec<Extra> {
    let mut env = format!("# Written at first boot from {server}/config (aloft's machine config server).\n");
    env.push_str(&format!("ALOFT_COORDINATOR={server}\n"));
    env.push_str(&format!("ALOFT_BOOTSTRAP_TOKEN_FILE={AGENT_TOKEN}\n"));
    env.push_str(&format!("ALOFT_LABELS={}\n", env_labels(labels)));
    let mut files = Vec::new();
    if let Some(ca) = ca_pem {
        env.push_str(&format!("ALOFT_CA={AGENT_CA}\n"));
        files.push(Extra::text(AGENT_CA, 0o644, ca.to_string()));
    }
    files.push(Extra::text(AGENT_TOKEN, 0o600, format!("{token}\n")));
    files.push(Extra::text(AGENT_ENV, 0o600, env));
    files
}

/// `config` with `files` added (a path the config writes already is left as the config has it).
fn with_files(config: ignition::Config, files: Vec<Extra>) -> Result<ignition::Config, String> {
    let mut v = ignition::to_value(&config);
    if v.get("ignition").is_none() {
        v["ignition"] = json!({"version": ignition::TARGET_VERSION});
    }
    let mut list =
        v.pointer_mut("/storage/files").and_then(Value::as_array_mut).map(std::mem::take).unwrap_or_default();
    for Extra { path, mode, source, gzip } in files {
        if list.iter().any(|f| f["path"] == path.as_str()) {
            tracing::warn!(path, "the pool's config writes this file itself: left as it has it");
            continue;
        }
        let contents = if gzip { json!({"source": source, "compression": "gzip"}) } else { json!({"source": source}) };
        list.push(json!({"path": path, "mode": mode, "overwrite": true, "contents": contents}));
    }
    v["storage"]["files"] = Value::Array(list);
    ignition::parse_typed(&v).map_err(|e| format!("{}: {}", e.field(), e.message()))
}

/// The spec version to write `config` in, and its JSON: the newest served version the host's
/// Ignition reads. Ignition names in `Accept` the newest spec it reads (and reads every older
/// one of that major version), so a `version=3.4.0` takes 3.4.0 down to 3.0.0, newest first, as
/// MCO's server reads it; `*/*` counts only when no Ignition media type is named (a spec-2
/// Ignition sends `version=2.2.0` with `*/*;q=0.1` and must be refused, not sent 3.x). No
/// `Accept`, or one taking any JSON: 3.5.0 down.
fn negotiate(config: &ignition::Config, accept: Option<&str>) -> Result<(&'static str, Value), String> {
    let asked = asked_versions(accept);
    let mut refused = Vec::new();
    let mut tried = Vec::new();
    for v in &asked {
        let candidates = served_up_to(v);
        if candidates.is_empty() {
            refused.push(format!("{v}: not served (aloft serves {})", SERVED_VERSIONS.join(", ")));
        }
        for version in candidates {
            if tried.contains(&version) {
                continue;
            }
            tried.push(version);
            match ignition::to_version(config, version) {
                Ok(body) => return Ok((version, body)),
                Err(e) => refused.push(format!("{version}: {} ({})", e.message(), e.field())),
            }
        }
    }
    if asked.is_empty() {
        return Err(format!(
            "the Accept header asks for no Ignition config: send {IGNITION_MEDIA};version=3.x.0 (aloft serves {})",
            SERVED_VERSIONS.join(", ")
        ));
    }
    Err(format!("no Ignition spec version the client reads can hold this config: {}", refused.join("; ")))
}

/// The served versions a host reading at most `newest` reads, newest first.
fn served_up_to(newest: &semver::Version) -> Vec<&'static str> {
    SERVED_VERSIONS
        .iter()
        .copied()
        .filter(|s| semver::Version::parse(s).is_ok_and(|v| v.major == newest.major && v <= *newest))
        .collect()
}

/// The newest spec versions an `Accept` header says its client reads, most wanted first.
fn asked_versions(accept: Option<&str>) -> Vec<semver::Version> {
    let newest = || semver::Version::parse(SERVED_VERSIONS[0]).ok().into_iter().collect();
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return newest() };
    let (mut named, mut any) = (Vec::new(), false);
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut version) = (1.0f32, None);
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim().to_ascii_lowercase().as_str() {
                    // RFC 9110: 0 to 1; anything else (NaN, inf) refuses.
                    "q" => q = v.trim().parse().ok().filter(|q: &f32| q.is_finite()).map_or(0.0, |q| q.min(1.0)),
                    "version" => version = Some(v.trim().trim_matches('"').to_string()),
                    _ => {}
                }
            }
        }
        if q <= 0.0 {
            continue;
        }
        match media.as_str() {
            IGNITION_MEDIA => {
                // `version=1` (spec-2 Ignition's fallback) reads as 1.0.0; no version, as the
                // newest served.
                let v = version.unwrap_or_else(|| SERVED_VERSIONS[0].to_string());
                let full = match v.matches('.').count() {
                    0 => format!("{v}.0.0"),
                    1 => format!("{v}.0"),
                    _ => v,
                };
                if let Ok(parsed) = semver::Version::parse(&full) {
                    named.push((q, parsed));
                }
            }
            "*/*" | "application/*" | "application/json" => any = true,
            _ => {}
        }
    }
    if named.is_empty() {
        return if any { newest() } else { Vec::new() };
    }
    named.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    let mut out: Vec<semver::Version> = Vec::new();
    for (_, v) in named {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    #[test]
    fn the_newest_version_the_host_reads_is_chosen() {
        // What spec-3 Ignition sends: the newest spec it reads, and anything else at q=0.1.
        let ign = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1";
        assert_eq!(asked_versions(Some(ign)), [v("3.4.0")]);
        assert_eq!(served_up_to(&v("3.4.0")), ["3.4.0", "3.3.0", "3.2.0", "3.1.0", "3.0.0"]);
        assert_eq!(served_up_to(&v("3.9.0")), SERVED_VERSIONS);
        // Spec-2 Ignition: its versions, and no 3.x.
        let old = "application/vnd.coreos.ignition+json;version=2.2.0, application/vnd.coreos.ignition+json;version=1;q=0.5, */*;q=0.1";
        assert_eq!(asked_versions(Some(old)), [v("2.2.0"), v("1.0.0")]);
        assert!(served_up_to(&v("2.2.0")).is_empty());
        assert_eq!(asked_versions(None), [v("3.5.0")]);
        assert_eq!(asked_versions(Some("application/json")), [v("3.5.0")]);
        assert!(asked_versions(Some("text/html")).is_empty());
        // By q, then newest; q=0 refuses.
        let same = "application/vnd.coreos.ignition+json; version=\"3.1.0\", application/vnd.coreos.ignition+json;version=3.2.0, application/vnd.coreos.ignition+json;version=3.3.0;q=0";
        assert_eq!(asked_versions(Some(same)), [v("3.2.0"), v("3.1.0")]);
    }

    #[test]
    fn a_version_that_cannot_hold_the_config_is_passed_over_and_said() {
        let kargs = ignition::parse_typed(
            &json!({"ignition": {"version": "3.3.0"}, "kernelArguments": {"shouldExist": ["quiet"]}}),
        )
        .unwrap();
        let (version, body) =
            negotiate(&kargs, Some("application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1")).unwrap();
        assert_eq!((version, &body["kernelArguments"]["shouldExist"][0]), ("3.4.0", &json!("quiet")));
        // A host reading at most 3.2.0 cannot take it: refused, naming the field, not sent 3.5.0
        // because of its */*.
        let e = negotiate(&kargs, Some("application/vnd.coreos.ignition+json;version=3.2.0, */*;q=0.1")).unwrap_err();
        assert!(e.contains("3.2.0: Ignition 3.2.0 has no such field (spec.config.kernelArguments)"), "{e}");
        assert!(e.contains("3.0.0: Ignition 3.0.0 has no such field"), "{e}");
        let old = "application/vnd.coreos.ignition+json;version=2.2.0, application/vnd.coreos.ignition+json;version=1;q=0.5, */*;q=0.1";
        let e = negotiate(&kargs, Some(old)).unwrap_err();
        assert!(e.contains("2.2.0: not served") && e.contains("1.0.0: not served"), "{e}");
        assert!(negotiate(&kargs, Some("text/html")).unwrap_err().contains("asks for no Ignition config"));
    }

    #[test]
    fn the_agents_files_are_added_unless_the_config_has_the_path() {
        let labels = BTreeMap::from([(WORKER_ROLE_LABEL.to_string(), String::new())]);
        let files = agent_files("https://fleet.example:6443", Some("PEM"), "abc.def", &labels);
        let config = ignition::parse_typed(&json!({"ignition": {"version": "3.2.0"},
            "storage": {"files": [{"path": AGENT_CA, "contents": {"source": "data:,mine"}}]}}))
        .unwrap();
        let v = ignition::to_value(&with_files(config, files).unwrap());
        let files = v["storage"]["files"].as_array().unwrap();
        let paths: Vec<&str> = files.iter().filter_map(|f| f["path"].as_str()).collect();
        assert_eq!(paths, [AGENT_CA, AGENT_TOKEN, AGENT_ENV]);
        assert_eq!(files[0]["contents"]["source"], "data:,mine");
        let env = aloft_api::content::decode(files[2]["contents"]["source"].as_str().unwrap(), None, None).unwrap();
        let env = String::from_utf8(env).unwrap();
        assert!(env.contains("ALOFT_COORDINATOR=https://fleet.example:6443\n"), "{env}");
        assert!(env.contains("ALOFT_LABELS=node-role.kubernetes.io/worker=\n"), "{env}");
        assert!(env.contains(&format!("ALOFT_CA={AGENT_CA}\n")), "{env}");
        assert_eq!((files[1]["mode"].as_u64(), files[2]["mode"].as_u64()), (Some(0o600), Some(0o600)));
    }

    #[test]
    fn the_first_boot_config_file_holds_the_served_config() {
        let config = json!({"ignition": {"version": "3.2.0"},
            "storage": {"files": [{"path": "/etc/a.conf", "contents": {"source": "data:,a"}}]}});
        let cache = FirstBootCache::default();
        let source = cache.source("rendered-worker-1", "7", Some(&config)).unwrap();
        assert!(std::sync::Arc::ptr_eq(&source, &cache.source("rendered-worker-1", "7", Some(&config)).unwrap()));
        let edited = cache.source("rendered-worker-1", "8", Some(&json!({"ignition": {"version": "3.2.0"}}))).unwrap();
        assert_ne!(source, edited, "an edited config is compressed again");
        let file = Extra { path: FIRST_BOOT_CONFIG.to_string(), mode: 0o600, source: source.to_string(), gzip: true };
        let v = ignition::to_value(&with_files(ignition::parse_typed(&config).unwrap(), vec![file]).unwrap());
        let entry = &v["storage"]["files"][1];
        assert_eq!((entry["path"].as_str(), entry["mode"].as_u64()), (Some(FIRST_BOOT_CONFIG), Some(0o600)));
        assert_eq!(entry["contents"]["compression"], "gzip");
        let source = entry["contents"]["source"].as_str().unwrap();
        let bytes = aloft_api::content::decode(source, Some("gzip"), None).unwrap();
        let mc: aloft_api::MachineConfig = serde_json::from_slice(&bytes).unwrap();
        assert_eq!((mc.metadata.name.as_str(), &mc.spec.config), ("rendered-worker-1", &config));
        assert!(mc.spec.os_image_url.is_empty() && mc.spec.kernel_arguments.is_empty(), "Ignition's part only");
    }

    #[test]
    fn the_target_is_served_once_a_node_runs_it() {
        let pool = |updated: i64, status: Option<&str>| -> MachineConfigPool {
            serde_json::from_value(json!({"metadata": {"name": "worker"},
                "spec": {"configuration": {"name": "rendered-worker-new"}},
                "status": {"updatedMachineCount": updated, "configuration": status.map(|s| json!({"name": s}))}}))
            .unwrap()
        };
        assert_eq!(served_config(&pool(0, Some("rendered-worker-old"))).as_deref(), Some("rendered-worker-old"));
        assert_eq!(served_config(&pool(1, Some("rendered-worker-old"))).as_deref(), Some("rendered-worker-new"));
        assert_eq!(served_config(&pool(0, None)).as_deref(), Some("rendered-worker-new"));
    }
}
