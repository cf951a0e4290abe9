//! CatalogSources: read each catalog when due, keep the last good read, say how it went.
//!
//! A read is checked as `opm validate` checks a catalog: a catalog with any error is not used
//! (its last good read is kept and resolution goes on from it), and the errors are shown in the
//! CatalogSource's `status.message`, so the catalog's author sees every problem at once.

use super::{involved, key_of, note, warn, write_if_changed};
use crate::controllers::events::Recorder;
use crate::fbc;
use crate::resources::CATALOG_SOURCE;
use crate::server::objects;
use crate::store::{Store, StoreError};
use aloft_api::catalog::Catalog;
use aloft_api::olm::{self, CatalogSource, CatalogSourceStatus, ConnectionState};
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
}

/// What resolution sees of a catalog.
#[derive(Clone)]
pub struct View {
    pub catalog: Option<Arc<Catalog>>,
    /// The last read succeeded.
    pub healthy: bool,
    pub failure: Option<String>,
}

/// The catalogs as this pass saw them.
pub type Snapshot = HashMap<(String, String), View>;

pub fn snapshot(cache: &Mutex<Cache>) -> Snapshot {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entries
        .iter()
        .map(|(k, e)| {
            (k.clone(), View { catalog: e.catalog.clone(), healthy: e.failure.is_none(), failure: e.failure.clone() })
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
    for raw in listed {
        let Ok(source) = serde_json::from_value::<CatalogSource>(raw.clone()) else { continue };
        let id = (source.metadata.namespace.clone().unwrap_or_default(), source.metadata.name.clone());
        seen.push(id.clone());
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
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache.entries.retain(|k, _| seen.contains(k));
    Ok(())
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
