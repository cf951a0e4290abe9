//! The garbage collector: deletes the objects whose owners are all gone, as Kubernetes' garbage
//! collector does with background propagation (the default of `kubectl delete`). The render
//! controller writes each rendered MachineConfig with an ownerReference to its pool, so deleting
//! a pool takes its rendered configs with it, instead of leaving them behind for good.
//!
//! Kubernetes' rules: an object without ownerReferences is never touched; one with at least one
//! owner that still exists stays. An owner is found by kind and name (in the dependent's
//! namespace for a namespaced kind), and must carry the reference's `uid` when the reference has
//! one: a pool deleted and created again under the same name is another owner. An owner of a
//! kind aloft does not serve, or a namespaced owner of a cluster-scoped dependent, cannot be
//! looked up: such a dependent is kept, as Kubernetes keeps it.
//!
//! A reference without a `uid` never makes its object garbage: Kubernetes refuses such a
//! reference at admission, and aloft stores what it is given. Without the uid, an owner not
//! created yet (a manifest applied dependents first) reads as one that is gone, and the
//! collector would delete what the user just applied. The render controller's references carry
//! the pool's uid.
//!
//! One exception, MCO's: a MachineConfig a node is on, is moving to or fetches ahead, or that a
//! pool names, is never deleted, owner or not (a node whose config vanished could not be
//! updated or checked any more). It is kept with a `DeleteDeferred` Event and tried again on
//! every pass until nothing uses it. "In use" is [`crate::config_use::users`], the same answer
//! `aloftctl adm prune renderedmachineconfigs` gives.
//!
//! `kubectl delete --cascade=orphan` (propagationPolicy Orphan) is the API server's part: it
//! removes the owner's references from the dependents before deleting the owner ([`orphan`]).
//! Foreground propagation is served as Background: aloft has no `foregroundDeletion` finalizer
//! processing to hold the owner until its dependents are gone, so the owner goes first and its
//! dependents right after.
//!
//! A dependent with finalizers of its own is deleted as the API deletes it
//! ([`crate::server::finalizers`]): marked with a `deletionTimestamp`, it stays until whoever
//! put its finalizers there removes them. An owner being deleted that way still exists, so its
//! dependents stay until it is gone, as in Kubernetes.

use super::events::{reasons, EventType, Involved, Recorder};
use crate::resources::{self, ResourceType, EVENT, MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use crate::server::finalizers::{self, Deleted};
use crate::store::{revision_of, Key, Store, StoreError};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Dependents named in one Event before it gives only the count.
const NAMED: usize = 5;

/// Watches every kind but Nodes and Events, whose writes (a fleet's reports, the controllers'
/// Events) would wake it for nothing: an owner deleted there is noticed at the next resync.
/// A pass runs after a deletion, and after a write of an object with ownerReferences (a
/// dependent created for an owner that is already gone).
pub async fn run(store: Arc<dyn Store>, events: Recorder, passes: super::passes::Passes) {
    let watched: Vec<String> =
        resources::ALL.iter().filter(|r| *r != &NODE && *r != &EVENT).map(ResourceType::store_key).collect();
    let relevant = || -> Box<dyn FnMut(&crate::store::Event) -> bool + Send> {
        Box::new(|ev| {
            matches!(ev.kind, crate::store::EventType::Deleted)
                || ev.object.pointer("/metadata/ownerReferences").is_some()
        })
    };
    super::run_loop("gc", store, &watched, relevant, passes, move |s| {
        let events = events.clone();
        async move { collect(&s, &events).await.map(|_| ()) }
    })
    .await
}

/// An object with ownerReferences.
struct Dependent {
    rt: &'static ResourceType,
    obj: Value,
}

impl Dependent {
    fn key(&self) -> Key {
        Key::new(&self.rt.store_key(), namespace_of(&self.obj), name_of(&self.obj))
    }
    fn refs(&self) -> &[Value] {
        self.obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn name_of(v: &Value) -> &str {
    text(v, "/metadata/name")
}

fn namespace_of(v: &Value) -> &str {
    text(v, "/metadata/namespace")
}

/// The served kind an ownerReference names: by apiVersion and kind, else by kind alone (a
/// reference written with another version of the same kind).
fn owner_kind(r: &Value) -> Option<&'static ResourceType> {
    let kind = text(r, "/kind");
    resources::by_kind(text(r, "/apiVersion"), kind).or_else(|| resources::ALL.iter().find(|t| t.kind == kind))
}

/// Where the owner an ownerReference names would be stored, or None when it cannot be looked
/// up (a kind aloft does not serve, no name, or a namespaced owner of a cluster-scoped object).
fn owner_key(dependent: &Dependent, r: &Value) -> Option<Key> {
    let rt = owner_kind(r)?;
    let name = text(r, "/name");
    if name.is_empty() || (rt.namespaced && !dependent.rt.namespaced) {
        return None;
    }
    let ns = if rt.namespaced { namespace_of(&dependent.obj) } else { "" };
    Some(Key::new(&rt.store_key(), ns, name))
}

/// Whether `owner` (stored) is the object `r` names: its `uid` must match when both have one.
fn is_owner(r: &Value, owner: &Value) -> bool {
    let want = text(r, "/uid");
    let have = text(owner, "/metadata/uid");
    want.is_empty() || have.is_empty() || want == have
}

/// Whether `r` names `owner` (stored as `owner_rt`): the reference [`orphan`] removes.
pub fn refers_to(r: &Value, owner_rt: &ResourceType, owner: &Value) -> bool {
    owner_kind(r).is_some_and(|rt| rt == owner_rt) && text(r, "/name") == name_of(owner) && is_owner(r, owner)
}

/// What one pass did, for its log line and the tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// The keys deleted: removed, or marked as being deleted (those with finalizers).
    pub deleted: Vec<Key>,
    /// The keys kept although their owners are gone (in use).
    pub deferred: Vec<Key>,
}

/// One pass: every object whose owners are all gone is deleted, unless it is a MachineConfig in
/// use. Each deletion is conditional on the revision read: a dependent changed since (given a
/// new owner, say) is judged again at the next pass.
pub async fn collect(store: &Arc<dyn Store>, events: &Recorder) -> Result<Collected, StoreError> {
    let mut owners = Owners::default();
    let mut orphans = Vec::new();
    for d in dependents(store).await? {
        if let Some(gone) = owners.all_gone(store, &d).await? {
            orphans.push((d, gone));
        }
    }
    if orphans.is_empty() {
        return Ok(Collected::default());
    }
    let users = ConfigUsers::load(store, &orphans).await?;
    let mut out = Collected::default();
    let mut by_owner: BTreeMap<GoneOwner, Vec<String>> = BTreeMap::new();
    for (d, gone) in orphans {
        let key = d.key();
        if let Some(why) = users.keeps(&d) {
            let about = Involved {
                api_version: d.rt.api_version().into(),
                kind: d.rt.kind.into(),
                name: key.name.clone(),
                uid: None,
            };
            let message = format!(
                "not deleted although its owner {} is gone: {why} uses it (a config in use is never removed); trying again later",
                describe(&gone)
            );
            tracing::info!(object = %key.name, kind = d.rt.kind, used_by = %why, "garbage collection deferred: in use");
            events.emit(&about, EventType::Normal, reasons::DELETE_DEFERRED, &message);
            out.deferred.push(key);
            continue;
        }
        // The Event says which dependents are only marked: "Deleted" alone sent nobody to look
        // for the ones that stay.
        let mut named = format!("{} {}", d.rt.kind, key.name);
        match finalizers::delete(store, &key, crate::store::Stored::new(d.obj)).await {
            Ok(Deleted::Removed(_)) => {
                tracing::info!(object = %key.name, kind = d.rt.kind, owner = %describe(&gone), "garbage collected: owner gone");
            }
            Ok(Deleted::Marked(_)) => {
                tracing::info!(object = %key.name, kind = d.rt.kind, owner = %describe(&gone), "garbage collected: owner gone; it stays, being deleted, until its finalizers are removed");
                named.push_str(" (being deleted: it stays until its finalizers are removed)");
            }
            // Deleted already (an earlier pass): nothing new to do or report.
            Ok(Deleted::AlreadyTerminating(_)) => continue,
            // Changed since the list (judged again next pass), or deleted by someone else.
            Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        }
        by_owner.entry(gone).or_default().push(named);
        out.deleted.push(key);
    }
    for (owner, deleted) in by_owner {
        let message = deleted_message(&owner, &deleted);
        // The gone owner's uid, not the uid of whatever has its name now: `kubectl describe`
        // (which selects Events by uid) does not show this on a newer object of that name.
        let about = Involved {
            api_version: owner.api_version.into(),
            kind: owner.kind.into(),
            name: owner.name,
            uid: Some(owner.uid).filter(|u| !u.is_empty()),
        };
        events.emit(&about, EventType::Normal, reasons::SUCCESSFUL_DELETE, &message);
    }
    Ok(out)
}

/// The first of a dependent's gone owners, as the Events name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GoneOwner {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    /// Another object of that kind and name exists now (the owner was deleted and created
    /// again): the owner is "an earlier" one, named with its uid.
    replaced: bool,
}

/// "Deleted 2 dependents of MachineConfigPool infra, which is gone: MachineConfig a, MachineConfig b";
/// "Deleted 1 dependent of an earlier MachineConfigPool worker (uid 1f…), which is gone: …" when
/// a pool of that name exists now.
fn deleted_message(owner: &GoneOwner, deleted: &[String]) -> String {
    let mut named = deleted.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if deleted.len() > NAMED {
        named.push_str(", …");
    }
    let n = deleted.len();
    let noun = if n == 1 { "dependent" } else { "dependents" };
    format!("Deleted {n} {noun} of {}, which is gone: {named}", describe(owner))
}

fn describe(gone: &GoneOwner) -> String {
    if gone.replaced {
        format!("an earlier {} {} (uid {})", gone.kind, gone.name, gone.uid)
    } else {
        format!("{} {}", gone.kind, gone.name)
    }
}

/// Every stored object with ownerReferences, Events aside (they expire by `--event-ttl`, and a
/// store holds tens of thousands after a few large rollouts, read from the file, not memory).
/// Only the objects whose JSON mentions the field are parsed: a fleet's Nodes are read too.
async fn dependents(store: &Arc<dyn Store>) -> Result<Vec<Dependent>, StoreError> {
    let mut out = Vec::new();
    for rt in resources::ALL.iter().filter(|r| **r != EVENT) {
        let listing = store.list_json(&rt.store_key(), None).await?;
        for json in listing.items.iter().filter(|j| j.contains("\"ownerReferences\"")) {
            let Ok(obj) = serde_json::from_str::<Value>(json) else { continue };
            let d = Dependent { rt, obj };
            if !d.refs().is_empty() {
                out.push(d);
            }
        }
    }
    Ok(out)
}

/// The owners looked up in one pass (a pool's rendered configs all name the same one).
#[derive(Default)]
struct Owners {
    found: HashMap<Key, Option<Value>>,
}

impl Owners {
    /// The first of the dependent's owners when every one is gone; None when one still exists or
    /// cannot be looked up (then nothing says it is gone).
    async fn all_gone(&mut self, store: &Arc<dyn Store>, d: &Dependent) -> Result<Option<GoneOwner>, StoreError> {
        let mut first = None;
        for r in d.refs() {
            if text(r, "/uid").is_empty() {
                tracing::debug!(object = %name_of(&d.obj), owner = %r, "owner reference without a uid; kept");
                return Ok(None);
            }
            let Some(key) = owner_key(d, r) else {
                tracing::debug!(object = %name_of(&d.obj), owner = %r, "owner cannot be looked up; kept");
                return Ok(None);
            };
            let owner = self.get(store, key).await?;
            if owner.is_some_and(|o| is_owner(r, o)) {
                return Ok(None);
            }
            first.get_or_insert_with(|| GoneOwner {
                api_version: text(r, "/apiVersion").to_string(),
                kind: text(r, "/kind").to_string(),
                name: text(r, "/name").to_string(),
                uid: text(r, "/uid").to_string(),
                replaced: owner.is_some(),
            });
        }
        Ok(first)
    }

    async fn get(&mut self, store: &Arc<dyn Store>, key: Key) -> Result<Option<&Value>, StoreError> {
        if !self.found.contains_key(&key) {
            let owner = store.get(&key).await?.map(crate::store::Stored::into_value);
            self.found.insert(key.clone(), owner);
        }
        Ok(self.found.get(&key).and_then(Option::as_ref))
    }
}

/// The pools, and the nodes that name one of the orphaned MachineConfigs: what decides whether
/// a config is in use.
struct ConfigUsers {
    pools: Vec<Value>,
    nodes: Vec<Value>,
}

impl ConfigUsers {
    /// Reads only what is needed: nothing without an orphaned MachineConfig, and of a fleet's
    /// Nodes only the ones whose JSON mentions one of their names.
    async fn load(store: &Arc<dyn Store>, orphans: &[(Dependent, GoneOwner)]) -> Result<Self, StoreError> {
        let configs: Vec<&str> =
            orphans.iter().filter(|(d, _)| *d.rt == MACHINE_CONFIG).map(|(d, _)| name_of(&d.obj)).collect();
        if configs.is_empty() {
            return Ok(ConfigUsers { pools: Vec::new(), nodes: Vec::new() });
        }
        let pools = store.list(&MACHINE_CONFIG_POOL.store_key(), None).await?.items;
        let listing = store.list_json(&NODE.store_key(), None).await?;
        let nodes = listing
            .items
            .iter()
            .filter(|j| configs.iter().any(|c| j.contains(*c)))
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect();
        Ok(ConfigUsers { pools, nodes })
    }

    /// Who uses `d`, when it is a MachineConfig something uses.
    fn keeps(&self, d: &Dependent) -> Option<String> {
        if *d.rt != MACHINE_CONFIG {
            return None;
        }
        let (pools, nodes) = crate::config_use::users(name_of(&d.obj), &self.pools, &self.nodes);
        let usage = crate::config_use::Rendered {
            name: name_of(&d.obj).to_string(),
            pool: String::new(),
            created: String::new(),
            pools,
            nodes,
        };
        usage.in_use().then(|| usage.used_by())
    }
}

/// How many times [`orphan`] tries a dependent that keeps changing under it.
const ORPHAN_TRIES: usize = 8;

/// `propagationPolicy: Orphan`: remove the references to `owner` (stored as `owner_rt`) from
/// every object that has one, so that deleting the owner leaves them. Called before the owner is
/// deleted: the garbage collector never sees them ownerless with their owner gone. Returns the
/// keys changed.
pub async fn orphan(store: &Arc<dyn Store>, owner_rt: &ResourceType, owner: &Value) -> Result<Vec<Key>, StoreError> {
    let mut changed = Vec::new();
    for d in dependents(store).await? {
        if owner_rt.namespaced && namespace_of(&d.obj) != namespace_of(owner) {
            continue;
        }
        if !d.refs().iter().any(|r| refers_to(r, owner_rt, owner)) {
            continue;
        }
        let key = d.key();
        if strip_refs(store, &key, d.obj, owner_rt, owner).await? {
            changed.push(key);
        }
    }
    Ok(changed)
}

/// Remove the references to `owner` from the object at `key` (read as `obj`), again from a
/// fresh read after a conflict. False when it is gone or no longer refers to the owner.
async fn strip_refs(
    store: &Arc<dyn Store>,
    key: &Key,
    mut obj: Value,
    owner_rt: &ResourceType,
    owner: &Value,
) -> Result<bool, StoreError> {
    for _ in 0..ORPHAN_TRIES {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return Ok(false) };
        let refs = meta.get("ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default();
        let kept: Vec<Value> = refs.iter().filter(|r| !refers_to(r, owner_rt, owner)).cloned().collect();
        if kept.len() == refs.len() {
            return Ok(false);
        }
        if kept.is_empty() {
            meta.remove("ownerReferences");
        } else {
            meta.insert("ownerReferences".into(), Value::Array(kept));
        }
        let rev = revision_of(&obj);
        match store.update(key, obj, rev).await {
            Ok(_) => return Ok(true),
            Err(StoreError::Conflict { .. }) => {}
            Err(StoreError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
        match store.get(key).await? {
            Some(fresh) => obj = fresh.into_value(),
            None => return Ok(false),
        }
    }
    Err(StoreError::Backend(format!("{} kept changing while its ownerReferences were removed", key.name)))
}

/// The kinds a propagation policy may name, as kube-apiserver lists them.
pub const PROPAGATION_POLICIES: [&str; 3] = ["Foreground", "Background", "Orphan"];

/// Whether a DELETE with `policy` (already checked against [`PROPAGATION_POLICIES`]) orphans.
pub fn orphans(policy: Option<&str>) -> bool {
    policy == Some("Orphan")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::objects;
    use crate::store::SqliteStore;
    use serde_json::json;

    async fn put(store: &Arc<dyn Store>, rt: &ResourceType, mut obj: Value) -> Value {
        objects::prepare_create(&mut obj, "");
        let key = Key::cluster(&rt.store_key(), name_of(&obj));
        store.create(&key, obj).await.unwrap().into_value()
    }

    fn mc(name: &str, owners: &[&Value]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|o| {
                json!({"apiVersion": aloft_api::MCO_API_VERSION, "kind": "MachineConfigPool",
                    "name": name_of(o), "uid": text(o, "/metadata/uid"), "controller": true})
            })
            .collect();
        let mut v = json!({"apiVersion": aloft_api::MCO_API_VERSION, "kind": "MachineConfig",
            "metadata": {"name": name}, "spec": {}});
        if !refs.is_empty() {
            v["metadata"]["ownerReferences"] = Value::Array(refs);
        }
        v
    }

    fn pool(name: &str) -> Value {
        json!({"apiVersion": aloft_api::MCO_API_VERSION, "kind": "MachineConfigPool", "metadata": {"name": name}, "spec": {}})
    }

    async fn names(store: &Arc<dyn Store>) -> Vec<String> {
        let list = store.list(&MACHINE_CONFIG.store_key(), None).await.unwrap();
        list.items.iter().map(|v| name_of(v).to_string()).collect()
    }

    /// Owner gone: deleted; a live owner of two: kept; no owners: never touched; the uid tells a
    /// pool created again under the same name from the one that owned the config; a config a
    /// node is on: kept; an owner of a kind aloft does not serve: kept.
    #[tokio::test]
    async fn only_objects_whose_owners_are_all_gone_are_collected() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let events = Recorder::new("test", store.clone(), std::time::Duration::ZERO);
        let gone = put(&store, &MACHINE_CONFIG_POOL, pool("infra")).await;
        let alive = put(&store, &MACHINE_CONFIG_POOL, pool("worker")).await;
        put(&store, &MACHINE_CONFIG, mc("rendered-infra-a", &[&gone])).await;
        put(&store, &MACHINE_CONFIG, mc("rendered-infra-used", &[&gone])).await;
        put(&store, &MACHINE_CONFIG, mc("shared", &[&gone, &alive])).await;
        put(&store, &MACHINE_CONFIG, mc("rendered-worker-a", &[&alive])).await;
        put(&store, &MACHINE_CONFIG, mc("99-user", &[])).await;
        let mut foreign = mc("foreign", &[]);
        foreign["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "u"}]);
        put(&store, &MACHINE_CONFIG, foreign).await;
        // No uid: its owner may be about to be created (Kubernetes would refuse the reference).
        let mut unsure = mc("no-uid", &[]);
        unsure["metadata"]["ownerReferences"] =
            json!([{"apiVersion": aloft_api::MCO_API_VERSION, "kind": "MachineConfigPool", "name": "later"}]);
        put(&store, &MACHINE_CONFIG, unsure).await;
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1",
            "annotations": {aloft_api::annotations::CURRENT_CONFIG: "rendered-infra-used"}}});
        put(&store, &NODE, node).await;
        // A pool of the same name, created again: another uid, so not the owner.
        store.delete(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "infra"), None).await.unwrap();
        put(&store, &MACHINE_CONFIG_POOL, pool("infra")).await;

        let out = collect(&store, &events).await.unwrap();
        let keys = |v: &[Key]| v.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&out.deleted), ["rendered-infra-a"]);
        assert_eq!(keys(&out.deferred), ["rendered-infra-used"]);
        assert_eq!(
            names(&store).await,
            ["99-user", "foreign", "no-uid", "rendered-infra-used", "rendered-worker-a", "shared"]
        );

        // The node moves on: the config goes at the next pass.
        let node_key = Key::cluster(&NODE.store_key(), "n1");
        let mut n = store.get(&node_key).await.unwrap().unwrap().into_value();
        n["metadata"]["annotations"] = json!({});
        let rev = revision_of(&n);
        store.update(&node_key, n, rev).await.unwrap();
        let out = collect(&store, &events).await.unwrap();
        assert_eq!(keys(&out.deleted), ["rendered-infra-used"]);
        assert!(collect(&store, &events).await.unwrap().deleted.is_empty(), "nothing left to collect");
    }

    /// A dependent with finalizers is deleted as the API deletes it: marked with a
    /// deletionTimestamp, kept until its finalizers are gone, and not deleted again.
    #[tokio::test]
    async fn a_dependent_with_finalizers_stays_being_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let events = Recorder::new("test", store.clone(), std::time::Duration::ZERO);
        let owner = put(&store, &MACHINE_CONFIG_POOL, pool("infra")).await;
        let mut held = mc("rendered-infra-held", &[&owner]);
        held["metadata"]["finalizers"] = json!(["example.com/keep"]);
        put(&store, &MACHINE_CONFIG, held).await;
        store.delete(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "infra"), None).await.unwrap();

        let out = collect(&store, &events).await.unwrap();
        assert_eq!(out.deleted.len(), 1, "{out:?}");
        let key = Key::cluster(&MACHINE_CONFIG.store_key(), "rendered-infra-held");
        let kept = store.get(&key).await.unwrap().expect("kept until its finalizers are gone");
        assert!(finalizers::is_terminating(&kept), "{}", *kept);
        assert_eq!(kept["metadata"]["deletionGracePeriodSeconds"], 0);
        assert!(collect(&store, &events).await.unwrap().deleted.is_empty(), "deleted once, not again");
        assert_eq!(store.get(&key).await.unwrap().map(|s| revision_of(&s)), Some(revision_of(&kept)));
        // The Event says it stays: "Deleted" alone sent nobody looking for it.
        let ev = successful_delete_event(&store).await;
        assert_eq!(
            ev["message"],
            "Deleted 1 dependent of MachineConfigPool infra, which is gone: MachineConfig rendered-infra-held \
             (being deleted: it stays until its finalizers are removed)"
        );
    }

    /// Orphaning removes only the references to the owner, and the whole field when none is left.
    #[tokio::test]
    async fn orphaning_strips_only_the_owners_references() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let infra = put(&store, &MACHINE_CONFIG_POOL, pool("infra")).await;
        let worker = put(&store, &MACHINE_CONFIG_POOL, pool("worker")).await;
        put(&store, &MACHINE_CONFIG, mc("only-infra", &[&infra])).await;
        put(&store, &MACHINE_CONFIG, mc("both", &[&infra, &worker])).await;
        put(&store, &MACHINE_CONFIG, mc("only-worker", &[&worker])).await;
        let changed = orphan(&store, &MACHINE_CONFIG_POOL, &infra).await.unwrap();
        assert_eq!(changed.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["both", "only-infra"]);
        let get = |n: &str| {
            let store = store.clone();
            let key = Key::cluster(&MACHINE_CONFIG.store_key(), n);
            async move { store.get(&key).await.unwrap().unwrap().into_value() }
        };
        assert!(get("only-infra").await.pointer("/metadata/ownerReferences").is_none());
        let both = get("both").await;
        let refs = both["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["name"], "worker");
        assert_eq!(get("only-worker").await["metadata"]["ownerReferences"][0]["name"], "worker");
    }

    #[test]
    fn a_batch_names_its_first_dependents() {
        let many: Vec<String> = (0..7).map(|i| format!("MachineConfig c{i}")).collect();
        let mut infra = GoneOwner {
            api_version: aloft_api::MCO_API_VERSION.into(),
            kind: "MachineConfigPool".into(),
            name: "infra".into(),
            uid: "u1".into(),
            replaced: false,
        };
        assert_eq!(
            deleted_message(&infra, &many),
            "Deleted 7 dependents of MachineConfigPool infra, which is gone: MachineConfig c0, MachineConfig c1, \
             MachineConfig c2, MachineConfig c3, MachineConfig c4, …"
        );
        assert_eq!(
            deleted_message(&infra, &many[..1]),
            "Deleted 1 dependent of MachineConfigPool infra, which is gone: MachineConfig c0"
        );
        infra.replaced = true;
        assert_eq!(
            deleted_message(&infra, &many[..1]),
            "Deleted 1 dependent of an earlier MachineConfigPool infra (uid u1), which is gone: MachineConfig c0"
        );
    }

    /// A dependent of an earlier pool of a live pool's name: the Event says so, and carries the
    /// gone pool's uid, so `kubectl describe` does not show it on the live pool.
    #[tokio::test]
    async fn a_dependent_of_an_earlier_pool_is_reported_on_that_pool() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let events = Recorder::new("test", store.clone(), std::time::Duration::ZERO);
        let earlier = put(&store, &MACHINE_CONFIG_POOL, pool("worker")).await;
        put(&store, &MACHINE_CONFIG, mc("rendered-worker-old", &[&earlier])).await;
        store.delete(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "worker"), None).await.unwrap();
        let live = put(&store, &MACHINE_CONFIG_POOL, pool("worker")).await;
        let (old_uid, live_uid) = (text(&earlier, "/metadata/uid"), text(&live, "/metadata/uid"));
        assert_ne!(old_uid, live_uid);
        let out = collect(&store, &events).await.unwrap();
        assert_eq!(out.deleted.len(), 1);
        let ev = successful_delete_event(&store).await;
        assert_eq!(
            ev["message"],
            format!(
                "Deleted 1 dependent of an earlier MachineConfigPool worker (uid {old_uid}), which is gone: \
                 MachineConfig rendered-worker-old"
            )
        );
        assert_eq!(ev["involvedObject"]["uid"], old_uid, "the gone pool's uid, not the live one's");
        assert_eq!(ev["involvedObject"]["name"], "worker");
    }

    /// The SuccessfulDelete Event, once the recorder has written it (it writes in the background).
    async fn successful_delete_event(store: &Arc<dyn Store>) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let evs = store.list(&EVENT.store_key(), None).await.unwrap().items;
            if let Some(e) = evs.into_iter().find(|e| e["reason"] == reasons::SUCCESSFUL_DELETE) {
                return e;
            }
            assert!(std::time::Instant::now() < deadline, "no SuccessfulDelete Event");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
