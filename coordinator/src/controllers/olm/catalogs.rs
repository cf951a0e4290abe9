//! CatalogSources: read each catalog when due, keep the last good read, say how it went.
//!
//! A read is checked as `opm validate` checks a catalog: a catalog with any error is not used
//! (its last good read is kept and resolution goes on from it), and the errors are shown in the
//! CatalogSource's `status.message`, so the catalog's author sees every problem at once.

use super::{involved, key_of, note, warn, write_if_changed};
use crate::controllers::events::Recorder;
use crate::fbc;
use crate::resources::{CATALOG_SOURCE, PACKAGE_MANIFEST};
use crate::server::objects;
use crate::store::{Key, Store, StoreError};
use aloft_api::catalog::Catalog;
use aloft_api::olm::{self, CatalogSource, CatalogSourceStatus, ConnectionState};
use aloft_api::packages;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How soon a failed read is tried again.
const RETRY: Duration = Duration::from_secs(30);
/// How long one read may take (a large catalog with inline bundle objects is hundreds of MB).
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest catalog read.
const MAX_CATALOG_BYTES: usize = 512 << 20;
/// How much of a failed read's errors the status shows.
const MESSAGE_AT_MOST: usize = 4000;

/// A catalog's last read, by `(namespace, name)`.
#[derive(Default)]
pub struct Cache {
    entries: HashMap<(String, String), Entry>,
}

struct Entry {
    /// What was read: a change of address reads again at once.
    address: String,
    read_at: Instant,
    /// The last good read, and a digest of its bytes (a read of the same bytes changes nothing).
    catalog: Option<Arc<Catalog>>,
    digest: String,
    /// Why the last read failed.
    failure: Option<String>,
    /// What the PackageManifests were last written from (see [`manifests_key`]); None: not
    /// written yet, or to write again.
    manifests: Option<String>,
    /// The CatalogSource's `spec.priority`, as of this pass.
    priority: i64,
    /// Its registry poll interval, as of this pass.
    poll: Duration,
}

impl Cache {
    /// When the next read falls due (a good read's poll interval after it, a failed one's
    /// retry): the OLM controller wakes then, so that a catalog's new bundles are resolved
    /// within its poll interval, not at the next resync.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.read_at + if e.failure.is_some() { RETRY } else { e.poll }).min()
    }
}

/// What resolution sees of a catalog.
#[derive(Clone)]
pub struct View {
    pub catalog: Option<Arc<Catalog>>,
    /// The last read succeeded.
    pub healthy: bool,
    pub failure: Option<String>,
    /// The CatalogSource's `spec.priority`: among catalogs that offer the same thing, the
    /// higher is preferred (OLM's rule).
    pub priority: i64,
}

/// The catalogs as this pass saw them.
pub type Snapshot = HashMap<(String, String), View>;

pub fn snapshot(cache: &Mutex<Cache>) -> Snapshot {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entries
        .iter()
        .map(|(k, e)| {
            let view = View {
                catalog: e.catalog.clone(),
                healthy: e.failure.is_none(),
                failure: e.failure.clone(),
                priority: e.priority,
            };
            (k.clone(), view)
        })
        .collect()
}

pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    crate::client::install_crypto();
    reqwest::Client::builder().timeout(FETCH_TIMEOUT).build()
}

/// Read what is due, drop what was deleted, write each CatalogSource's status.
pub async fn reconcile(
    store: &Arc<dyn Store>,
    http: &reqwest::Client,
    cache: &Mutex<Cache>,
    events: &Recorder,
) -> Result<(), StoreError> {
    let listed = store.list(&CATALOG_SOURCE.store_key(), None).await?.items;
    let mut seen = Vec::new();
    let mut listed_sources = Vec::new();
    for raw in listed {
        let Ok(source) = serde_json::from_value::<CatalogSource>(raw.clone()) else { continue };
        listed_sources.push(source.clone());
        let id = (source.metadata.namespace.clone().unwrap_or_default(), source.metadata.name.clone());
        seen.push(id.clone());
        if let Some(e) = cache.lock().unwrap_or_else(|e| e.into_inner()).entries.get_mut(&id) {
            e.priority = source.spec.priority;
            e.poll = poll_interval(&source);
        }
        if source.spec.source_type != olm::SOURCE_TYPE_HTTP || source.spec.address.is_empty() {
            continue;
        }
        let due = {
            let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            match cache.entries.get(&id) {
                None => true,
                Some(e) if e.address != source.spec.address => true,
                Some(e) => {
                    let wait = if e.failure.is_some() { RETRY } else { poll_interval(&source) };
                    e.read_at.elapsed() >= wait
                }
            }
        };
        if !due {
            continue;
        }
        let about = involved("CatalogSource", &id.0, &id.1);
        let read = read_catalog(http, &source.spec.address).await;
        let now = objects::now();
        let (state, message, reason) = {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            let entry = cache.entries.entry(id.clone()).or_insert_with(|| Entry {
                address: source.spec.address.clone(),
                read_at: Instant::now(),
                catalog: None,
                digest: String::new(),
                failure: None,
                manifests: None,
                priority: source.spec.priority,
                poll: poll_interval(&source),
            });
            if entry.address != source.spec.address {
                // Another catalog now: the old one's packages are not this one's.
                entry.catalog = None;
                entry.digest.clear();
                entry.address = source.spec.address.clone();
            }
            entry.read_at = Instant::now();
            match read {
                Ok((catalog, digest)) => {
                    let changed = entry.catalog.is_none() || entry.digest != digest;
                    if changed {
                        entry.catalog = Some(Arc::new(catalog));
                        entry.digest = digest;
                    }
                    entry.failure = None;
                    (olm::READY, String::new(), if changed { "Read" } else { "" })
                }
                Err(e) => {
                    entry.failure = Some(e.clone());
                    (olm::TRANSIENT_FAILURE, e, "ReadFailed")
                }
            }
        };
        if reason == "ReadFailed" {
            warn(events, &about, "CatalogReadFailed", &message);
        } else if reason == "Read" {
            let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = cache.entries.get(&id).and_then(|e| e.catalog.clone()) {
                note(
                    events,
                    &about,
                    "CatalogRead",
                    &format!(
                        "read {} packages, {} bundles from {}",
                        c.packages.len(),
                        c.bundles.len(),
                        source.spec.address
                    ),
                );
            }
        }
        write_status(store, &raw, cache, &id, state, &message, &now).await?;
    }
    let sources = {
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        let before = cache.entries.len();
        cache.entries.retain(|k, _| seen.contains(k));
        if cache.entries.len() != before {
            // A catalog went, and its PackageManifests with it (they are its dependents): a
            // package another catalog of its namespace also has is written from that one now.
            for e in cache.entries.values_mut() {
                e.manifests = None;
            }
        }
        cache
            .entries
            .iter()
            .filter_map(|(id, e)| e.catalog.clone().map(|c| (id.clone(), c, e.digest.clone(), e.manifests.clone())))
            .collect::<Vec<_>>()
    };
    for (id, catalog, digest, written) in sources {
        let Some(source) = listed_sources
            .iter()
            .find(|s| s.metadata.namespace.as_deref().unwrap_or_default() == id.0 && s.metadata.name == id.1)
        else {
            continue;
        };
        let key = manifests_key(source, &digest);
        if written.as_deref() == Some(key.as_str()) && all_listed(store, catalog.as_ref(), &id.0).await? {
            continue;
        }
        write_manifests(store, source, &catalog, &listed_sources).await?;
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = cache.entries.get_mut(&id) {
            e.manifests = Some(key);
        }
    }
    Ok(())
}

/// What a catalog's PackageManifests are made from besides the catalog's bytes: the
/// CatalogSource's identity, names for people and labels (not its status, written every read).
fn manifests_key(source: &CatalogSource, digest: &str) -> String {
    format!(
        "{digest}|{}|{}|{}|{:?}",
        source.metadata.uid.as_deref().unwrap_or_default(),
        source.spec.display_name,
        source.spec.publisher,
        source.metadata.labels
    )
}

/// Write one PackageManifest per package of `catalog` in the CatalogSource's namespace (owned by
/// it, so they go with it), update the ones that changed and delete the ones of packages it no
/// longer has. A package two catalogs of a namespace have is the higher priority one's (then the
/// one whose name sorts first): object names are unique per namespace, where OLM's package server
/// lists both.
async fn write_manifests(
    store: &Arc<dyn Store>,
    source: &CatalogSource,
    catalog: &Catalog,
    sources: &[CatalogSource],
) -> Result<(), StoreError> {
    let ns = source.metadata.namespace.clone().unwrap_or_default();
    let rank = |name: &str| {
        let priority = sources
            .iter()
            .find(|s| s.metadata.namespace.as_deref() == Some(ns.as_str()) && s.metadata.name == name)
            .map_or(i64::MIN, |s| s.spec.priority);
        (std::cmp::Reverse(priority), name.to_string())
    };
    let stored = store.list(&PACKAGE_MANIFEST.store_key(), Some(&ns)).await?.items;
    let catalog_of = |v: &Value| {
        v.pointer(&format!("/metadata/labels/{}", packages::CATALOG_LABEL)).and_then(Value::as_str).map(str::to_string)
    };
    let mut names = std::collections::HashSet::new();
    for p in &catalog.packages {
        if names.contains(p.name.as_str()) {
            continue;
        }
        let Some(mut want) = packages::package_manifest(source, catalog, &p.name) else { continue };
        names.insert(p.name.as_str());
        let key = Key::new(&PACKAGE_MANIFEST.store_key(), &ns, &p.name);
        match stored.iter().find(|v| objects::name_of(v) == p.name) {
            Some(have) => {
                let owner = catalog_of(have).unwrap_or_default();
                if owner != source.metadata.name && rank(&owner) < rank(&source.metadata.name) {
                    continue;
                }
                let mut next = have.clone();
                next["metadata"]["labels"] = want["metadata"]["labels"].take();
                next["metadata"]["ownerReferences"] = owner_reference(source);
                next["status"] = want["status"].take();
                write_if_changed(store, &key, have, next).await?;
            }
            None => {
                want["metadata"]["ownerReferences"] = owner_reference(source);
                objects::prepare_create(&mut want, &ns);
                match store.create(&key, want).await {
                    Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    for gone in stored.iter().filter(|v| {
        catalog_of(v).as_deref() == Some(source.metadata.name.as_str()) && !names.contains(objects::name_of(v))
    }) {
        let key = Key::new(&PACKAGE_MANIFEST.store_key(), &ns, objects::name_of(gone));
        match store.delete(&key, crate::store::revision_of(gone)).await {
            Ok(_) | Err(StoreError::NotFound(_)) | Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether every package of `catalog` has a PackageManifest in `namespace` (this catalog's or
/// another's): one deleted since it was written (the garbage collector taking a removed
/// catalog's while another catalog took the package over) is written again.
async fn all_listed(store: &Arc<dyn Store>, catalog: &Catalog, namespace: &str) -> Result<bool, StoreError> {
    let stored = store.list(&PACKAGE_MANIFEST.store_key(), Some(namespace)).await?.items;
    let have: std::collections::HashSet<&str> = stored.iter().map(objects::name_of).collect();
    Ok(catalog.packages.iter().all(|p| have.contains(p.name.as_str())))
}

/// A PackageManifest's reference to the CatalogSource it was read from: deleting the
/// CatalogSource deletes its PackageManifests (the garbage collector's part).
fn owner_reference(source: &CatalogSource) -> Value {
    serde_json::json!([{
        "apiVersion": olm::API_VERSION,
        "kind": "CatalogSource",
        "name": source.metadata.name,
        "uid": source.metadata.uid.clone().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": false,
    }])
}

async fn write_status(
    store: &Arc<dyn Store>,
    raw: &Value,
    cache: &Mutex<Cache>,
    id: &(String, String),
    state: &str,
    message: &str,
    now: &str,
) -> Result<(), StoreError> {
    let source: CatalogSource = serde_json::from_value(raw.clone()).unwrap_or_default();
    let mut status = source.status.clone().unwrap_or_default();
    let good = {
        let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.entries.get(id).and_then(|e| e.catalog.clone())
    };
    status.connection_state = Some(ConnectionState {
        address: source.spec.address.clone(),
        last_observed_state: state.to_string(),
        last_connect: Some(now.to_string()),
        extra: Default::default(),
    });
    if state == olm::READY {
        status.latest_image_registry_poll = Some(now.to_string());
        status.message = String::new();
        status.reason = String::new();
    } else {
        status.message = cut(message, MESSAGE_AT_MOST);
        status.reason = "ReadFailed".to_string();
    }
    status.packages = good.as_ref().map(|c| c.packages.len() as u64);
    status.bundles = good.as_ref().map(|c| c.bundles.len() as u64);
    let mut next = raw.clone();
    next["status"] = serde_json::to_value(&CatalogSourceStatus { ..status }).unwrap_or(Value::Null);
    write_if_changed(store, &key_of(&CATALOG_SOURCE, raw), raw, next).await.map(|_| ())
}

/// The registry poll interval, or OLM's 15 minutes when it is missing or unreadable.
fn poll_interval(source: &CatalogSource) -> Duration {
    source
        .spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.registry_poll.as_ref())
        .and_then(|p| olm::parse_go_duration(&p.interval))
        .unwrap_or(Duration::from_secs(olm::DEFAULT_POLL_SECS))
}

/// Fetch, decode and check a catalog; the error says what failed, in words for the status.
async fn read_catalog(http: &reqwest::Client, address: &str) -> Result<(Catalog, String), String> {
    let chain = |e: &dyn std::error::Error| crate::controllers::error_chain(e);
    let resp = http
        .get(address)
        .header(reqwest::header::ACCEPT, "application/jsonl, application/json, application/yaml, */*")
        .send()
        .await
        .map_err(|e| format!("reading {address}: {}", chain(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("reading {address}: the server answered {status}"));
    }
    if resp.content_length().is_some_and(|n| n > MAX_CATALOG_BYTES as u64) {
        return Err(format!("reading {address}: larger than {} MiB", MAX_CATALOG_BYTES >> 20));
    }
    let mut body = Vec::new();
    let mut resp = resp;
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("reading {address}: {}", chain(&e)))? {
        if body.len() + chunk.len() > MAX_CATALOG_BYTES {
            return Err(format!("reading {address}: larger than {} MiB", MAX_CATALOG_BYTES >> 20));
        }
        body.extend_from_slice(&chunk);
    }
    let name = address.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("catalog").to_string();
    // Decoding and checking a large catalog is CPU work: off the API server's threads.
    tokio::task::spawn_blocking(move || {
        use sha2::Digest as _;
        let digest = hex::encode(sha2::Sha256::digest(&body));
        let text = String::from_utf8(body).map_err(|_| format!("{name}: not UTF-8 text"))?;
        let blobs = fbc::blobs_of_stream(&text, &name).map_err(|e| e.to_string())?;
        let catalog = Catalog::from_blobs(blobs).map_err(|e| format!("invalid catalog: {e}"))?;
        Ok((catalog, digest))
    })
    .await
    .map_err(|e| format!("reading {address}: {e}"))?
}

fn cut(text: &str, at_most: usize) -> String {
    if text.len() <= at_most {
        return text.to_string();
    }
    let mut end = at_most;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(read_at: Instant, poll: Duration, failure: Option<&str>) -> Entry {
        Entry {
            address: "http://127.0.0.1/c.json".into(),
            read_at,
            catalog: None,
            digest: String::new(),
            failure: failure.map(str::to_string),
            manifests: None,
            priority: 0,
            poll,
        }
    }

    /// The next read falls due at the soonest of the catalogs' polls; a failed read is retried
    /// after [`RETRY`] whatever its poll; no catalog, no due time.
    #[test]
    fn the_next_read_is_due_at_the_soonest_poll() {
        let t = Instant::now();
        let mut cache = Cache::default();
        assert_eq!(cache.next_due(), None);
        cache.entries.insert(("olm".into(), "slow".into()), entry(t, Duration::from_secs(900), None));
        assert_eq!(cache.next_due(), Some(t + Duration::from_secs(900)));
        cache.entries.insert(("olm".into(), "failing".into()), entry(t, Duration::from_secs(900), Some("404")));
        assert_eq!(cache.next_due(), Some(t + RETRY));
        cache.entries.insert(("olm".into(), "fast".into()), entry(t, Duration::from_secs(1), None));
        assert_eq!(cache.next_due(), Some(t + Duration::from_secs(1)));
    }
}
