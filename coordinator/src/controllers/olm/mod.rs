//! The Operator Lifecycle Manager, for a fleet: catalogs, subscriptions, install plans with
//! approval, and ClusterServiceVersions whose install is a rollout.
//!
//! One pass does what OLM's catalog operator and OLM operator do, in order:
//! 1. [`catalogs`]: read each CatalogSource's file-based catalog over HTTP(S) when due, check it
//!    as `opm validate` does, keep the last good read (a failed read never drops it);
//! 2. [`subscriptions`]: resolve each Subscription against its catalog (the channel head on a
//!    fresh install, the next bundle of the upgrade graph after that), subscribe to the
//!    operators that bundle depends on ([`dependencies`]) and, once they are installed, create
//!    the InstallPlan, approved at once when `installPlanApproval` is Automatic;
//! 3. [`plans`]: install each approved plan (unless its namespace has several [`groups`]): the CSV, and the bundle's MachineConfigs (labelled
//!    with their CSV), replacing those of the CSV it replaces in the same write so a pool rolls
//!    out one change, not two;
//! 4. [`csvs`]: follow each CSV's MachineConfigs through the pools (Installing until every pool
//!    that selects them runs them, then Succeeded), retire the CSVs it replaced (the whole
//!    `replaces` chain behind it), and remove the MachineConfigs of a CSV that was deleted
//!    (the uninstall).
//!
//! It runs on the API server's runtime, as the ClusterVersion controller does: a slow catalog
//! must never delay a rollout's pick.

pub mod catalogs;
pub mod closure;
pub mod csvs;
pub mod dependencies;
pub mod groups;
pub mod plans;
pub mod subscriptions;

use super::events::{EventType, Involved, Recorder};
use crate::resources::{
    CATALOG_SOURCE, CLUSTER_SERVICE_VERSION, INSTALL_PLAN, MACHINE_CONFIG, MACHINE_CONFIG_POOL, OPERATOR_GROUP,
    SUBSCRIPTION,
};
use crate::store::{revision_of, Key, Store, StoreError};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The component named in OLM Events.
pub const COMPONENT: &str = "aloft-olm";

/// OLM's own global catalog namespace (its install manifests'; OpenShift's is
/// `openshift-marketplace`): the default of `--olm-global-namespace`.
pub const DEFAULT_GLOBAL_NAMESPACE: &str = "olm";

/// Read `--olm-global-namespace`: a namespace name, or none when empty. A name no namespace
/// could have is refused with the reason rather than matching nothing for good.
pub fn global_namespace(value: &str) -> Result<Option<String>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    if !aloft_api::selector::is_dns_label(value) {
        return Err(format!(
            "{value:?} is not a namespace name (a lowercase RFC 1123 label of at most 63 characters: a-z, 0-9 and \
             '-', starting and ending with a letter or digit); an empty value turns the global catalog namespace off"
        ));
    }
    Ok(Some(value.to_string()))
}

/// Run forever: a pass after each change of an OLM object (and of a pool or MachineConfig while
/// a CSV is installing), when a catalog's poll falls due, and at least every [`super::RESYNC`].
/// `global` is the global catalog namespace (`--olm-global-namespace`): its catalogs serve the
/// Subscriptions of every namespace.
pub async fn run(store: Arc<dyn Store>, events: Recorder, passes: super::passes::Passes, global: Option<String>) {
    let http = match catalogs::http_client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the catalogs' HTTP client");
            return;
        }
    };
    let cache = Arc::new(Mutex::new(catalogs::Cache::default()));
    let watched = [
        CATALOG_SOURCE.store_key(),
        SUBSCRIPTION.store_key(),
        INSTALL_PLAN.store_key(),
        CLUSTER_SERVICE_VERSION.store_key(),
        OPERATOR_GROUP.store_key(),
        MACHINE_CONFIG_POOL.store_key(),
    ];
    // Pools wake it only while a CSV is installing.
    let following = Arc::new(AtomicBool::new(false));
    let relevant = super::pools_wake_while(following.clone());
    let wake = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(wake_for_polls(Arc::downgrade(&cache), wake.clone()));
    super::run_loop_woken("olm", store, &watched, relevant, passes, Some(wake), move |s| {
        let (http, cache, events, following) = (http.clone(), cache.clone(), events.clone(), following.clone());
        let global = global.clone();
        async move {
            let installing = reconcile(&s, &http, &cache, &events, global.as_deref()).await?;
            following.store(installing, Ordering::Relaxed);
            Ok(())
        }
    })
    .await
}

/// Wake the controller when a catalog's read falls due ([`catalogs::Cache::next_due`]), so a
/// catalog with new bundles is read, and its subscriptions resolved, within its poll interval
/// rather than at the next resync. Checks every [`POLL_CHECK_AT_LEAST`] to
/// [`POLL_CHECK_AT_MOST`] (a pass may have read the catalog meanwhile, or added one), and ends
/// with the controller (its cache gone).
async fn wake_for_polls(cache: std::sync::Weak<Mutex<catalogs::Cache>>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let Some(cache) = cache.upgrade() else { return };
        let next = cache.lock().unwrap_or_else(|e| e.into_inner()).next_due();
        drop(cache);
        let now = tokio::time::Instant::now();
        match next {
            Some(due) if due <= now => {
                wake.notify_one();
                tokio::time::sleep(POLL_CHECK_AT_LEAST).await;
            }
            // A pass may add a catalog that falls due sooner: checked again within the most.
            Some(due) => tokio::time::sleep((due - now).clamp(POLL_CHECK_AT_LEAST, POLL_CHECK_AT_MOST)).await,
            None => tokio::time::sleep(POLL_CHECK_AT_MOST).await,
        }
    }
}

/// The shortest wait between two checks of [`wake_for_polls`]: a catalog polled every second
/// costs a pass a second at most, not a loop.
const POLL_CHECK_AT_LEAST: std::time::Duration = std::time::Duration::from_millis(500);
/// The longest: how late a catalog's read can be past its due time (a lock and a minimum over
/// the catalogs each time).
const POLL_CHECK_AT_MOST: std::time::Duration = std::time::Duration::from_secs(2);

/// One pass; whether a CSV is installing when it is done.
async fn reconcile(
    store: &Arc<dyn Store>,
    http: &reqwest::Client,
    cache: &Mutex<catalogs::Cache>,
    events: &Recorder,
    global: Option<&str>,
) -> Result<bool, StoreError> {
    catalogs::reconcile(store, http, cache, events).await?;
    groups::reconcile(store).await?;
    let snapshot = catalogs::snapshot(cache);
    subscriptions::reconcile(store, &snapshot, global, events).await?;
    plans::reconcile(store, events).await?;
    csvs::reconcile(store, events).await
}

/// The Events' subject for a namespaced OLM object.
pub(crate) fn involved(kind: &'static str, namespace: &str, name: &str) -> Involved {
    Involved {
        api_version: aloft_api::olm::API_VERSION.into(),
        kind: kind.into(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: None,
    }
}

/// Write `next` over `raw` if anything changed; a conflict or a deletion in between is left for
/// the next pass (which reads the object again).
pub(crate) async fn write_if_changed(
    store: &Arc<dyn Store>,
    key: &Key,
    raw: &Value,
    next: Value,
) -> Result<bool, StoreError> {
    if next == *raw {
        return Ok(false);
    }
    match store.update(key, next, revision_of(raw)).await {
        Ok(_) => Ok(true),
        Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The key of a namespaced object as listed.
pub(crate) fn key_of(resource: &crate::resources::ResourceType, obj: &Value) -> Key {
    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    Key::new(&resource.store_key(), ns, name)
}

/// The MachineConfigs a CSV installed (by their labels), with their stored objects.
pub(crate) async fn configs_of(store: &Arc<dyn Store>, namespace: &str, csv: &str) -> Result<Vec<Value>, StoreError> {
    Ok(store
        .list(&MACHINE_CONFIG.store_key(), None)
        .await?
        .items
        .into_iter()
        .filter(|mc| config_owner(mc) == (Some(namespace), Some(csv)))
        .collect())
}

/// The owner a stored MachineConfig's labels name: (namespace, CSV).
pub(crate) fn config_owner(mc: &Value) -> (Option<&str>, Option<&str>) {
    use aloft_api::olm::{OWNER_CSV_LABEL, OWNER_NAMESPACE_LABEL};
    let label = |k: &str| mc.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
    (label(OWNER_NAMESPACE_LABEL), label(OWNER_CSV_LABEL))
}

/// Emit a Normal Event.
pub(crate) fn note(events: &Recorder, about: &Involved, reason: &'static str, message: &str) {
    events.emit(about, EventType::Normal, reason, message);
}

/// Emit a Warning Event.
pub(crate) fn warn(events: &Recorder, about: &Involved, reason: &'static str, message: &str) {
    events.emit(about, EventType::Warning, reason, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_global_namespace_is_a_namespace_name_or_none() {
        assert_eq!(global_namespace("olm"), Ok(Some("olm".to_string())));
        assert_eq!(global_namespace("openshift-marketplace"), Ok(Some("openshift-marketplace".to_string())));
        assert_eq!(global_namespace(""), Ok(None));
        for bad in ["OLM", "-olm", "olm-", "olm/x", "a.b", " olm", &"a".repeat(64)] {
            let e = global_namespace(bad).expect_err(bad);
            assert!(e.contains("is not a namespace name") && e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
