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
//!
//! The two finalizers Kubernetes' collector processes are processed here, on an object being
//! deleted:
//! - `foregroundDeletion` (`kubectl delete --cascade=foreground`; the API's DELETE puts it on the
//!   owner): the owner stays, being deleted, while the collector deletes its dependents; it goes
//!   once no dependent whose reference says `blockOwnerDeletion: true` is left (the render
//!   controller's references say so, as MCO's do). A dependent that another owner still holds
//!   loses its reference to this one instead, so that the owner can go. A rendered config in use
//!   is not deleted (below), so its pool waits for it.
//! - `orphan` (put there by hand): the dependents lose their references to the owner, then the
//!   finalizer is removed.
//!
//! Nodes and Events are not watched (see [`run`]), so the API's DELETE serves Foreground for them
//! as Background, and an `orphan` or `foregroundDeletion` finalizer set by hand on one of them is
//! left to whoever set it: a Node removed here would keep its agent's credential, which the API's
//! removal of a Node revokes.
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

/// The finalizer that holds an owner until its blocking dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that has an owner's dependents orphaned before it goes.
pub const ORPHAN: &str = "orphan";

/// Whether the collector watches `rt`: every kind but Nodes and Events, whose writes (a fleet's
/// reports, the controllers' Events) would wake it for nothing. An owner deleted there is
/// noticed at the next resync.
pub fn watches(rt: &ResourceType) -> bool {
    *rt != NODE && *rt != EVENT
}

/// A pass runs after a deletion, after a write of an object with ownerReferences (a dependent
/// created for an owner that is already gone), and after an object is marked for deletion with
/// a finalizer of the collector's.
pub async fn run(store: Arc<dyn Store>, events: Recorder, passes: super::passes::Passes) {
    let watched: Vec<String> = resources::ALL.iter().filter(|r| watches(r)).map(ResourceType::store_key).collect();
    let relevant = || -> Box<dyn FnMut(&crate::store::Event) -> bool + Send> {
        Box::new(|ev| {
            matches!(ev.kind, crate::store::EventType::Deleted)
                || ev.object.pointer("/metadata/ownerReferences").is_some()
                || propagation_of(&ev.object).is_some()
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

/// Whether `d` has a reference to `owner` (stored as `owner_rt`), in its namespace when the
/// owner's kind is namespaced.
fn depends_on(d: &Dependent, owner_rt: &ResourceType, owner: &Value) -> bool {
    (!owner_rt.namespaced || namespace_of(&d.obj) == namespace_of(owner))
        && d.refs().iter().any(|r| refers_to(r, owner_rt, owner))
}

/// How an object being deleted propagates its deletion: by the collector's finalizer it
/// carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Propagation {
    Foreground,
    Orphan,
}

/// The collector's finalizer on `obj`, when `obj` is being deleted (foreground first: the API
/// refuses both on one object).
fn propagation_of(obj: &Value) -> Option<Propagation> {
    if !finalizers::is_terminating(obj) {
        return None;
    }
    let names = obj.pointer("/metadata/finalizers").and_then(Value::as_array)?;
    if names.iter().any(|n| n == FOREGROUND) {
        Some(Propagation::Foreground)
    } else if names.iter().any(|n| n == ORPHAN) {
        Some(Propagation::Orphan)
    } else {
        None
    }
}

/// What one pass did, for its log line and the tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// The keys deleted: removed, or marked as being deleted (those with finalizers).
    pub deleted: Vec<Key>,
    /// The keys kept although their owners are gone (in use).
    pub deferred: Vec<Key>,
    /// The owners whose `foregroundDeletion` or `orphan` finalizer this pass removed.
    pub finished: Vec<Key>,
}

/// One pass: every object whose owners are all gone (or being deleted in the foreground) is
/// deleted, unless it is a MachineConfig in use; then every owner being deleted with one of the
/// collector's finalizers is moved on. Each write is conditional on the revision read: an object
/// changed since (given a new owner, say) is judged again at the next pass.
pub async fn collect(store: &Arc<dyn Store>, events: &Recorder) -> Result<Collected, StoreError> {
    let scanned = scan(store).await?;
    let mut owners = Owners::default();
    let mut doomed = Vec::new();
    // Dependents that keep an owner, and lose their references to the ones deleting in the
    // foreground.
    let mut released = Vec::new();
    for d in &scanned.dependents {
        match owners.judge(store, d).await? {
            Verdict::Keep { waiting } if waiting.is_empty() => {}
            Verdict::Keep { waiting } => released.push((d, waiting)),
            Verdict::Delete { owner, foreground } => doomed.push((d, owner, foreground)),
        }
    }
    let mut out = Collected::default();
    // Keys no longer there to block an owner: removed, or no longer referring to it.
    let mut unblocked: Vec<(Key, Option<Key>)> = Vec::new();
    for (d, waiting) in released {
        for (owner_rt, owner) in waiting {
            if strip_refs(store, &d.key(), d.obj.clone(), owner_rt, &owner).await? {
                tracing::info!(object = %name_of(&d.obj), kind = d.rt.kind, owner = %name_of(&owner), "reference to an owner deleted in the foreground removed: another owner keeps the object");
                unblocked.push((d.key(), Some(owner_key_of(owner_rt, &owner))));
            }
        }
    }
    if !doomed.is_empty() {
        let users = ConfigUsers::load(store, doomed.iter().map(|(d, _, _)| *d)).await?;
        let mut by_owner: BTreeMap<GoneOwner, Vec<String>> = BTreeMap::new();
        for (d, gone, foreground) in doomed {
            let key = d.key();
            if let Some(why) = users.keeps(d) {
                let about = Involved {
                    api_version: d.rt.api_version().into(),
                    kind: d.rt.kind.into(),
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    uid: None,
                };
                let message = format!(
                    "not deleted although its owner {} {}: in use by {why} (a config in use is never removed); trying again later",
                    describe(&gone),
                    gone.state.phrase()
                );
                tracing::info!(object = %key.name, kind = d.rt.kind, used_by = %why, "garbage collection deferred: in use");
                events.emit(&about, EventType::Normal, reasons::DELETE_DEFERRED, &message);
                out.deferred.push(key);
                continue;
            }
            // A dependent deleted for an owner in the foreground is deleted in the foreground
            // too when it has dependents of its own, as Kubernetes' collector does.
            let cascade = foreground && scanned.dependents.iter().any(|o| depends_on(o, d.rt, &d.obj));
            let stored = crate::store::Stored::new(d.obj.clone());
            let result = if cascade {
                finalizers::delete_adding(store, &key, stored, FOREGROUND).await
            } else {
                finalizers::delete(store, &key, stored).await
            };
            // The Event says which dependents are only marked: "Deleted" alone sent nobody to
            // look for the ones that stay.
            let mut named = format!("{} {}", d.rt.kind, key.name);
            match result {
                Ok(Deleted::Removed(_)) => {
                    tracing::info!(object = %key.name, kind = d.rt.kind, owner = %describe(&gone), "garbage collected: owner {}", gone.state.phrase());
                    unblocked.push((key.clone(), None));
                }
                Ok(Deleted::Marked(_)) => {
                    tracing::info!(object = %key.name, kind = d.rt.kind, owner = %describe(&gone), "garbage collected: owner {}; it stays, being deleted, until its finalizers are removed", gone.state.phrase());
                    named.push_str(" (being deleted: it stays until its finalizers are removed)");
                }
                // Deleted already (an earlier pass): nothing new to do or report.
                Ok(Deleted::AlreadyTerminating(_)) => continue,
                Err(StoreError::NotFound(_)) => {
                    unblocked.push((key, None));
                    continue;
                }
                // Changed since the list: judged again next pass.
                Err(StoreError::Conflict { .. }) => continue,
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
                namespace: String::new(),
                name: owner.name,
                uid: Some(owner.uid).filter(|u| !u.is_empty()),
            };
            events.emit(&about, EventType::Normal, reasons::SUCCESSFUL_DELETE, &message);
        }
    }
    for p in &scanned.propagating {
        let key = Key::new(&p.rt.store_key(), namespace_of(&p.obj), name_of(&p.obj));
        let finalizer = match p.how {
            Propagation::Foreground => {
                // Waits for the dependents whose references block it, as read at the start of
                // this pass, less the ones this pass removed or released.
                let blocking = scanned.dependents.iter().any(|d| {
                    let freed =
                        unblocked.iter().any(|(k, owner)| *k == d.key() && owner.as_ref().is_none_or(|o| *o == key));
                    !freed
                        && (!p.rt.namespaced || namespace_of(&d.obj) == namespace_of(&p.obj))
                        && d.refs().iter().any(|r| {
                            refers_to(r, p.rt, &p.obj) && r.get("blockOwnerDeletion") == Some(&Value::Bool(true))
                        })
                });
                if blocking {
                    continue;
                }
                FOREGROUND
            }
            Propagation::Orphan => {
                let n = orphan(store, p.rt, &p.obj).await?;
                tracing::info!(owner = %key.name, kind = p.rt.kind, dependents = n.len(), "dependents orphaned (orphan finalizer)");
                ORPHAN
            }
        };
        match finalizers::remove_finalizer(store, &key, crate::store::Stored::new(p.obj.clone()), finalizer).await {
            Ok(gone) => {
                tracing::info!(object = %key.name, kind = p.rt.kind, finalizer, removed = gone, "finalizer {finalizer} done");
                out.finished.push(key);
            }
            // Changed since the list (its next write runs a pass), or gone.
            Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn owner_key_of(rt: &ResourceType, owner: &Value) -> Key {
    Key::new(&rt.store_key(), namespace_of(owner), name_of(owner))
}

/// The first of a dependent's owners that let it go, as the Events name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GoneOwner {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    state: OwnerState,
}

/// Why an owner no longer keeps its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum OwnerState {
    Gone,
    /// Gone, and another object of that kind and name exists now (the owner was deleted and
    /// created again): the owner is "an earlier" one, named with its uid.
    Replaced,
    /// Being deleted in the foreground: it waits for its dependents.
    DeletingInForeground,
}

impl OwnerState {
    fn phrase(self) -> &'static str {
        match self {
            OwnerState::Gone | OwnerState::Replaced => "is gone",
            OwnerState::DeletingInForeground => "is being deleted in the foreground",
        }
    }
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
    format!("Deleted {n} {noun} of {}, which {}: {named}", describe(owner), owner.state.phrase())
}

fn describe(gone: &GoneOwner) -> String {
    if gone.state == OwnerState::Replaced {
        format!("an earlier {} {} (uid {})", gone.kind, gone.name, gone.uid)
    } else {
        format!("{} {}", gone.kind, gone.name)
    }
}

/// An object being deleted with one of the collector's finalizers.
struct Propagating {
    rt: &'static ResourceType,
    obj: Value,
    how: Propagation,
}

/// What one read of the store holds for the collector.
struct Scanned {
    dependents: Vec<Dependent>,
    propagating: Vec<Propagating>,
}

/// Every stored object with ownerReferences, and every one being deleted with a finalizer of the
/// collector's, of the kinds it watches (Events expire by `--event-ttl`, and a store holds tens
/// of thousands after a few large rollouts, read from the file, not memory). Only the objects
/// whose JSON mentions one of those fields is parsed: a fleet's Nodes are read too, for their
/// ownerReferences.
async fn scan(store: &Arc<dyn Store>) -> Result<Scanned, StoreError> {
    let mut out = Scanned { dependents: Vec::new(), propagating: Vec::new() };
    let (foreground, orphan) = (format!("\"{FOREGROUND}\""), format!("\"{ORPHAN}\""));
    for rt in resources::ALL.iter().filter(|r| **r != EVENT) {
        let listing = store.list_json(&rt.store_key(), None).await?;
        let mentions = |j: &&Arc<str>| {
            j.contains("\"ownerReferences\"") || (watches(rt) && (j.contains(&foreground) || j.contains(&orphan)))
        };
        for json in listing.items.iter().filter(mentions) {
            let Ok(obj) = serde_json::from_str::<Value>(json) else { continue };
            if let Some(how) = propagation_of(&obj).filter(|_| watches(rt)) {
                out.propagating.push(Propagating { rt, obj: obj.clone(), how });
            }
            let d = Dependent { rt, obj };
            if !d.refs().is_empty() {
                out.dependents.push(d);
            }
        }
    }
    Ok(out)
}

/// Every stored object with ownerReferences (Events aside).
async fn dependents(store: &Arc<dyn Store>) -> Result<Vec<Dependent>, StoreError> {
    Ok(scan(store).await?.dependents)
}

/// What a dependent's owners say of it.
enum Verdict {
    /// An owner still holds it (or one cannot be looked up, or a reference has no uid): it
    /// stays. `waiting`: the owners being deleted in the foreground it refers to, whose
    /// references it loses so that they can go.
    Keep { waiting: Vec<(&'static ResourceType, Value)> },
    /// Every owner is gone or being deleted in the foreground: it is deleted. `owner`: the first
    /// of them, for the Event; `foreground`: one of them waits for it.
    Delete { owner: GoneOwner, foreground: bool },
}

/// The owners looked up in one pass (a pool's rendered configs all name the same one).
#[derive(Default)]
struct Owners {
    found: HashMap<Key, Option<Value>>,
}

impl Owners {
    async fn judge(&mut self, store: &Arc<dyn Store>, d: &Dependent) -> Result<Verdict, StoreError> {
        let mut first = None;
        let mut waiting = Vec::new();
        let mut held = false;
        for r in d.refs() {
            if text(r, "/uid").is_empty() {
                tracing::debug!(object = %name_of(&d.obj), owner = %r, "owner reference without a uid; kept");
                held = true;
                continue;
            }
            let (Some(key), Some(rt)) = (owner_key(d, r), owner_kind(r)) else {
                tracing::debug!(object = %name_of(&d.obj), owner = %r, "owner cannot be looked up; kept");
                held = true;
                continue;
            };
            let owner = self.get(store, key).await?;
            let state = match owner {
                Some(o) if is_owner(r, o) => {
                    if propagation_of(o) != Some(Propagation::Foreground) {
                        held = true;
                        continue;
                    }
                    waiting.push((rt, o.clone()));
                    OwnerState::DeletingInForeground
                }
                Some(_) => OwnerState::Replaced,
                None => OwnerState::Gone,
            };
            first.get_or_insert_with(|| GoneOwner {
                api_version: text(r, "/apiVersion").to_string(),
                kind: text(r, "/kind").to_string(),
                name: text(r, "/name").to_string(),
                uid: text(r, "/uid").to_string(),
                state,
            });
        }
        Ok(match first {
            Some(owner) if !held => Verdict::Delete { owner, foreground: !waiting.is_empty() },
            _ => Verdict::Keep { waiting },
        })
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
    async fn load<'a>(store: &Arc<dyn Store>, doomed: impl Iterator<Item = &'a Dependent>) -> Result<Self, StoreError> {
        let configs: Vec<&str> = doomed.filter(|d| *d.rt == MACHINE_CONFIG).map(|d| name_of(&d.obj)).collect();
        if configs.is_empty() {
            return Ok(ConfigUsers { pools: Vec::new(), nodes: Vec::new() });
        }
        // A pool deleted in the foreground waits for its rendered configs: its own target is no
        // use that keeps one (the pool would wait for it forever).
        let mut pools = store.list(&MACHINE_CONFIG_POOL.store_key(), None).await?.items;
        pools.retain(|p| propagation_of(p) != Some(Propagation::Foreground));
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
        if !depends_on(&d, owner_rt, owner) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::objects;
    use crate::store::SqliteStore;
    use serde_json::json;

    /// A store on a temp file (kept while the directory lives) and a recorder writing to it.
    fn test_store() -> (tempfile::TempDir, Arc<dyn Store>, Recorder) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let events = Recorder::new("test", store.clone(), std::time::Duration::ZERO);
        (dir, store, events)
    }

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
        let (_dir, store, events) = test_store();
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
        let (_dir, store, events) = test_store();
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

    /// Marks `name` (a pool) as being deleted with `finalizer`, as the API's DELETE does.
    async fn delete_with(store: &Arc<dyn Store>, name: &str, finalizer: &str) -> Value {
        let key = Key::cluster(&MACHINE_CONFIG_POOL.store_key(), name);
        let stored = store.get(&key).await.unwrap().unwrap();
        finalizers::delete_adding(store, &key, stored, finalizer).await.unwrap().object().into_value()
    }

    fn blocking(mut v: Value) -> Value {
        if let Some(refs) = v.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
            for r in refs {
                r["blockOwnerDeletion"] = true.into();
            }
        }
        v
    }

    async fn pool_exists(store: &Arc<dyn Store>, name: &str) -> bool {
        store.get(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), name)).await.unwrap().is_some()
    }

    /// `foregroundDeletion`: the owner's dependents go first (one that another owner keeps loses
    /// its reference instead), and the owner with them once none that blocks it is left; one in
    /// use holds it, and a non-blocking one does not. A pool with other finalizers stays until
    /// they are gone.
    #[tokio::test]
    async fn a_foreground_deletion_takes_the_dependents_first() {
        let (_dir, store, events) = test_store();
        // Its target is one of the configs it waits for.
        let mut infra = pool("infra");
        infra["spec"]["configuration"] = json!({"name": "rendered-infra-a"});
        let infra = put(&store, &MACHINE_CONFIG_POOL, infra).await;
        let worker = put(&store, &MACHINE_CONFIG_POOL, pool("worker")).await;
        put(&store, &MACHINE_CONFIG, blocking(mc("rendered-infra-a", &[&infra]))).await;
        put(&store, &MACHINE_CONFIG, blocking(mc("rendered-infra-used", &[&infra]))).await;
        put(&store, &MACHINE_CONFIG, mc("not-blocking", &[&infra])).await;
        put(&store, &MACHINE_CONFIG, blocking(mc("shared", &[&infra, &worker]))).await;
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1",
            "annotations": {aloft_api::annotations::CURRENT_CONFIG: "rendered-infra-used"}}});
        put(&store, &NODE, node).await;
        // Nothing happens to an owner until it is deleted.
        assert_eq!(collect(&store, &events).await.unwrap(), Collected::default());
        let marked = delete_with(&store, "infra", FOREGROUND).await;
        assert!(finalizers::is_terminating(&marked) && marked["metadata"]["finalizers"] == json!([FOREGROUND]));

        let out = collect(&store, &events).await.unwrap();
        let keys = |v: &[Key]| v.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&out.deleted), ["not-blocking", "rendered-infra-a"]);
        assert_eq!(keys(&out.deferred), ["rendered-infra-used"]);
        assert!(out.finished.is_empty(), "held by the config in use: {out:?}");
        assert!(pool_exists(&store, "infra").await);
        let shared = store.get(&Key::cluster(&MACHINE_CONFIG.store_key(), "shared")).await.unwrap().unwrap();
        assert_eq!(shared["metadata"]["ownerReferences"].as_array().map(Vec::len), Some(1), "{}", *shared);
        assert_eq!(shared["metadata"]["ownerReferences"][0]["name"], "worker");
        let ev = successful_delete_event(&store).await;
        assert!(
            ev["message"]
                .as_str()
                .unwrap()
                .contains("of MachineConfigPool infra, which is being deleted in the foreground"),
            "{ev}"
        );

        // The node moves on: the config goes, and the pool with it.
        let node_key = Key::cluster(&NODE.store_key(), "n1");
        let mut n = store.get(&node_key).await.unwrap().unwrap().into_value();
        n["metadata"]["annotations"] = json!({});
        let rev = revision_of(&n);
        store.update(&node_key, n, rev).await.unwrap();
        let out = collect(&store, &events).await.unwrap();
        assert_eq!(keys(&out.deleted), ["rendered-infra-used"]);
        assert_eq!(keys(&out.finished), ["infra"]);
        assert!(!pool_exists(&store, "infra").await);
        assert_eq!(names(&store).await, ["shared"]);

        // Other finalizers: only the collector's goes, and the pool stays until they do.
        let mut held = pool("held");
        held["metadata"]["finalizers"] = json!(["example.com/keep"]);
        put(&store, &MACHINE_CONFIG_POOL, held).await;
        delete_with(&store, "held", FOREGROUND).await;
        let out = collect(&store, &events).await.unwrap();
        assert_eq!(keys(&out.finished), ["held"]);
        let left = store.get(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "held")).await.unwrap().unwrap();
        assert_eq!(left["metadata"]["finalizers"], json!(["example.com/keep"]));
        assert!(finalizers::is_terminating(&left));
    }

    /// `orphan` (set by hand before a DELETE): the dependents lose their references and stay,
    /// then the finalizer goes, and the owner with it.
    #[tokio::test]
    async fn an_orphan_finalizer_orphans_the_dependents() {
        let (_dir, store, events) = test_store();
        let mut infra = pool("infra");
        infra["metadata"]["finalizers"] = json!([ORPHAN]);
        let infra = put(&store, &MACHINE_CONFIG_POOL, infra).await;
        put(&store, &MACHINE_CONFIG, blocking(mc("rendered-infra-a", &[&infra]))).await;
        // Not deleted yet: nothing happens.
        assert_eq!(collect(&store, &events).await.unwrap(), Collected::default());
        let key = Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "infra");
        let stored = store.get(&key).await.unwrap().unwrap();
        finalizers::delete(&store, &key, stored).await.unwrap();

        let out = collect(&store, &events).await.unwrap();
        assert!(out.deleted.is_empty(), "{out:?}");
        assert_eq!(out.finished.len(), 1, "{out:?}");
        assert!(!pool_exists(&store, "infra").await);
        let mc = store.get(&Key::cluster(&MACHINE_CONFIG.store_key(), "rendered-infra-a")).await.unwrap().unwrap();
        assert!(mc.pointer("/metadata/ownerReferences").is_none(), "{}", *mc);
    }

    /// Adding one propagation finalizer drops the other (kube-apiserver refuses both).
    #[test]
    fn the_propagation_finalizers_exclude_each_other() {
        let obj = json!({"metadata": {"finalizers": ["orphan", "example.com/keep"]}});
        assert_eq!(
            finalizers::with_finalizer(&obj, FOREGROUND)["metadata"]["finalizers"],
            json!(["example.com/keep", FOREGROUND])
        );
        let none = json!({"metadata": {}});
        assert_eq!(finalizers::with_finalizer(&none, ORPHAN)["metadata"]["finalizers"], json!([ORPHAN]));
    }

    #[test]
    fn a_batch_names_its_first_dependents() {
        let many: Vec<String> = (0..7).map(|i| format!("MachineConfig c{i}")).collect();
        let mut infra = GoneOwner {
            api_version: aloft_api::MCO_API_VERSION.into(),
            kind: "MachineConfigPool".into(),
            name: "infra".into(),
            uid: "u1".into(),
            state: OwnerState::Gone,
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
        infra.state = OwnerState::Replaced;
        assert_eq!(
            deleted_message(&infra, &many[..1]),
            "Deleted 1 dependent of an earlier MachineConfigPool infra (uid u1), which is gone: MachineConfig c0"
        );
        infra.state = OwnerState::DeletingInForeground;
        assert_eq!(
            deleted_message(&infra, &many[..1]),
            "Deleted 1 dependent of MachineConfigPool infra, which is being deleted in the foreground: MachineConfig c0"
        );
    }

    /// A dependent of an earlier pool of a live pool's name: the Event says so, and carries the
    /// gone pool's uid, so `kubectl describe` does not show it on the live pool.
    #[tokio::test]
    async fn a_dependent_of_an_earlier_pool_is_reported_on_that_pool() {
        let (_dir, store, events) = test_store();
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
