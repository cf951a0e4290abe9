//! Watches over HTTP: newline-delimited JSON `{"type": ..., "object": ...}` events, as client-go
//! reads them. Without a resourceVersion (or with "0") the watch starts with an ADDED event for
//! every current object; with one, it replays every event after it from the store's log, so a
//! client reconnecting with its last version misses nothing, or gets 410 Gone when the log no
//! longer reaches back that far.
//!
//! With a selector a write can change the answer of (labels, fields other than the name), an
//! object that leaves the selection is sent as DELETED and one that enters it as ADDED
//! ([`Membership`]), as Kubernetes does; a resourceVersion the store has not reached is refused
//! ([`reached`]).
//!
//! `allowWatchBookmarks=true` adds BOOKMARKs ([`BOOKMARK_EVERY`], and 2 s before the watch's
//! timeout) at the store's revision once every event before it is sent
//! ([`crate::store::Store::watch_with_progress`]).
//!
//! `skipOwnWrites=true` (an aloft extension; the agent's watch of its own Node asks for it)
//! leaves out the live events of the caller's own writes: it has those objects from its
//! writes' answers already, and they were half of what a fleet's watches carried during a
//! rollout. Replayed events are sent whoever made them.
//!
//! `includeUpdateInputs=true` (an aloft extension, for watches of Nodes; the agent asks for it)
//! sends, before a Node event whose `desiredConfig` is new on this stream and not the node's
//! `currentConfig`, one `UPDATE_INPUTS` event: `{"machineConfig": <that rendered config>,
//! "machineConfiguration": <MachineConfiguration/cluster, or null when there is none>}`, the two
//! objects an agent reads before it plans an update, each only when the caller may read it. An
//! agent that has them reads neither on its update's critical path (MCO's daemon reads both from
//! its informers' caches for the same reason). Rendered configs never change under their name;
//! the policy is the one stored when the event is sent.
//!
//! A watch ends once its credential no longer stands for the caller it was opened by (revoked,
//! expired, replaced: checked every [`CREDENTIAL_RECHECK`]), and a node agent's watch ends
//! with the DELETED event of its own Node (deleting a Node revokes its agent's credential).
//! Open until their timeout, a decommissioned host's watch went on, and a Node enrolled again
//! under its name (a new host, other labels) streamed to the old host, update inputs included.

use super::error::ApiError;
use super::global_packages::{GlobalPackages, Seen};
use super::handlers::Filters;
use super::request::ResourcePath;
use super::{table, Ctx};
use crate::auth::{self, Identity, Verb};
use crate::store::{EventType, Key, ProgressSchedule, WatchFilter, WatchItem};
use aloft_api::annotations as ann;
use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

enum Item {
    /// The kind, the object, and the object's JSON when the store has it at hand.
    Event(EventType, Arc<Value>, Option<Arc<str>>),
    /// The BOOKMARK that ends the initial events (`sendInitialEvents=true`), at this revision.
    InitialEventsEnd(u64),
    /// A BOOKMARK (`allowWatchBookmarks=true`): every event of the watch up to this revision is
    /// sent.
    Bookmark(u64),
    Error(ApiError),
}

/// The `UPDATE_INPUTS` event's type, ahead of a Node event that names a new desiredConfig.
pub const UPDATE_INPUTS: &str = "UPDATE_INPUTS";

/// How often a watch that allows BOOKMARKs gets one, as kube-apiserver's watch cache sends them
/// (and one 2 s before the watch's timeout): a client's informer then resumes from a recent
/// resourceVersion after its watch ends, not from its last event's, which on a busy store may be
/// older than the kept history (410 Gone, and a full relist).
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

/// How often an open watch checks that its credential still stands: a token lookup, which the
/// stores answer from memory (SQLite's token cache) or in batches (etcd), so a fleet's watches
/// cost a few hundred lookups a second at 10,000 nodes.
pub const CREDENTIAL_RECHECK: Duration = Duration::from_secs(15);

/// The watches one node's credential may hold open at once ([`serve`]).
pub const MAX_NODE_WATCHES: usize = 16;

pub async fn serve(
    ctx: &Ctx,
    path: ResourcePath,
    params: &HashMap<String, String>,
    filters: Filters,
    table: Option<table::TableVersion>,
    who: &Identity,
    credential: Option<String>,
) -> Result<Response, ApiError> {
    // A watch by a node's agent counts as the agent being there while it is open (the body is
    // dropped when the watch ends): see `controllers::presence`. A node's credential holds a
    // few at once: its agent keeps one of its own Node (two for a moment when it reopens it).
    // Unbounded, a host taken over could open them by the thousand, each holding memory and a
    // share of every event's fan-out, where kube-apiserver's only bound is the whole server's.
    let held = match &who.role {
        crate::auth::Role::Node(node) => Some(ctx.presence.open(node, MAX_NODE_WATCHES).ok_or_else(|| {
            ApiError::too_many_requests(format!(
                "node {node} has {MAX_NODE_WATCHES} watches open already, the most a node's credential may hold; \
                 close one first"
            ))
        })?),
        _ => None,
    };
    let skip_own = match params.get("skipOwnWrites").map(String::as_str) {
        None | Some("false") => None,
        Some("true") => Some(Arc::<str>::from(who.name.as_str())),
        Some(other) => return Err(ApiError::bad_request(format!("skipOwnWrites {other:?} is not true or false"))),
    };
    let as_table = table.is_some();
    let with_inputs = match params.get("includeUpdateInputs").map(String::as_str) {
        None | Some("false") => false,
        Some("true") if path.rt.kind == crate::resources::NODE.kind && !as_table => true,
        Some("true") => {
            return Err(ApiError::bad_request(format!(
                "includeUpdateInputs is for watches of Nodes as JSON, not of {}{}",
                path.rt.qualified(),
                if as_table { " as a Table" } else { "" }
            )))
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!("includeUpdateInputs {other:?} is not true or false")))
        }
    };
    let include = if as_table { table::IncludeObject::from_params(params)? } else { Default::default() };
    let rt = path.rt;
    let view = GlobalPackages::of(ctx, &path);
    let resource = rt.store_key();
    let rv = params.get("resourceVersion").map(String::as_str).unwrap_or("");
    // 0 is the server's default, as in kube-apiserver: taken as no time at all, the watch ended
    // after its first initial event.
    let timeout = match params.get("timeoutSeconds") {
        Some(s) => match s.parse() {
            Ok(0) => ctx.limits.watch_timeout,
            Ok(n) => Duration::from_secs(n),
            Err(_) => return Err(ApiError::bad_request(format!("timeoutSeconds {s:?} is not a number"))),
        },
        None => ctx.limits.watch_timeout,
    };
    let send_initial = send_initial_events(params)?;
    let bookmarks = match params.get("allowWatchBookmarks").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!("allowWatchBookmarks {other:?} is not true or false")))
        }
    };
    let resumed = !(rv.is_empty() || rv == "0");
    let (initial, from) = if !resumed || send_initial {
        if resumed {
            let at_least = rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion {rv:?} is not a resourceVersion this server issued"))
            })?;
            reached(ctx, at_least).await?;
        }
        let listing = current(ctx, view.as_ref(), &path, filters.fields.name()).await?;
        (listing.items, listing.revision)
    } else {
        let from = rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("resourceVersion {rv:?} is not a resourceVersion this server issued"))
        })?;
        reached(ctx, from).await?;
        (Vec::new(), from)
    };
    // A watch resumed with a selector an object can move out of starts from the objects that
    // match now, as the ones the client has; the events replayed up to now fill in what the
    // client may have had besides (see [`Tracked`]).
    let mut membership = match filters.can_change() {
        false => Membership::Unchanging,
        true if resumed && !send_initial => {
            let listing = current(ctx, view.as_ref(), &path, filters.fields.name()).await?;
            Membership::Tracked(Tracked {
                present: listing.items.iter().filter(|o| filters.matches(o)).map(member_key).collect(),
                replayed_until: listing.revision,
                told_gone: HashSet::new(),
            })
        }
        true => Membership::Tracked(Tracked::default()),
    };
    let filter = WatchFilter {
        resource: Some(resource),
        // A view with the global namespace's PackageManifests follows every namespace's, and
        // keeps its two below.
        // A cluster-scoped kind's objects have no namespace: saying so lets a store watch one
        // key for one object (etcd) instead of the whole kind.
        namespace: match (&view, &path.namespace) {
            (Some(_), _) => None,
            (None, None) if !rt.namespaced => Some(String::new()),
            (None, ns) => ns.clone(),
        },
        name: filters.fields.name().map(str::to_string),
        skip_origin: skip_own,
    };
    let store_error = |e| ApiError::from_store(e, &rt.qualified(), "");
    // The caller's own writes (skipOwnWrites) are left out by the store, where they are published.
    let live = if bookmarks {
        let schedule =
            ProgressSchedule { every: BOOKMARK_EVERY, deadline: tokio::time::Instant::now().checked_add(timeout) };
        ctx.store.watch_with_progress(filter, from, schedule).await.map_err(store_error)?
    } else {
        ctx.store.watch(filter, from).await.map_err(store_error)?.map(|r| r.map(WatchItem::Event)).boxed()
    };
    let live = live.filter_map(move |r| {
        futures::future::ready(match r {
            Ok(WatchItem::Event(ev)) => match view.as_ref().map(|v| v.see(&ev.object)) {
                None | Some(Seen::Own) => Some(Item::Event(ev.kind, ev.object, Some(ev.json))),
                Some(Seen::Global(moved)) => Some(Item::Event(ev.kind, Arc::new(moved), None)),
                Some(Seen::Out) => None,
            },
            Ok(WatchItem::Progress(rev)) => Some(Item::Bookmark(rev)),
            Err(e) => Some(Item::Error(ApiError::from_store(e, &rt.qualified(), ""))),
        })
    });
    let initial = futures::stream::iter(
        initial
            .into_iter()
            .map(|o| Item::Event(EventType::Added, Arc::new(o), None))
            .chain(send_initial.then_some(Item::InitialEventsEnd(from))),
    );
    let mut first = true;
    // The desiredConfig whose inputs went out last, per Node of the stream (one for an agent).
    let mut sent: HashMap<String, String> = HashMap::new();
    // An agent's watch ends with its own Node's deletion, which revokes its credential.
    let own_node = match &who.role {
        crate::auth::Role::Node(node) if rt.kind == crate::resources::NODE.kind => Some(node.clone()),
        _ => None,
    };
    let lapsed = credential_lapses(ctx.token_store.clone(), credential, who.clone());
    let ends = async move {
        tokio::select! {
            () = tokio::time::sleep(timeout) => {}
            () = lapsed => {}
        }
    };
    let (store, who) = (ctx.store.clone(), Arc::new(who.clone()));
    let body = initial
        .chain(live)
        // End the stream with an error event, or with the deletion of the caller's own Node (the
        // store's deletion, before the selector's judgement: a Node that only stopped matching
        // a selector is still there): at once, not when the next event comes (none may: the
        // Node is gone).
        .flat_map(move |item| {
            let last = match &item {
                Item::Error(_) => true,
                Item::Event(EventType::Deleted, o, _) => {
                    own_node.as_deref().is_some_and(|n| crate::server::objects::name_of(o) == n)
                }
                _ => false,
            };
            futures::stream::iter(std::iter::once(Some(item)).chain(last.then_some(None)))
        })
        .take_while(|item| futures::future::ready(item.is_some()))
        .filter_map(futures::future::ready)
        .filter_map(move |item| {
            let item = match item {
                Item::Event(kind, o, json) => membership.judge(kind, &o, &filters).map(|k| Item::Event(k, o, json)),
                other => Some(other),
            };
            futures::future::ready(item)
        })
        .then(move |item| {
            let due = match &item {
                Item::Event(EventType::Added | EventType::Modified, obj, _) if with_inputs => {
                    inputs_due(obj, &mut sent)
                }
                _ => None,
            };
            // Only a due event looks anything up (and holds the store and identity for it). Boxed:
            // the stream keeps room for this stage's future inline, in each of a fleet's watches.
            let lookup = due.map(|(target, node)| {
                let (store, who) = (store.clone(), who.clone());
                Box::pin(async move { update_inputs(&*store, &who, &node, &target).await })
            });
            async move {
                let inputs = match lookup {
                    Some(l) => l.await,
                    None => None,
                };
                (inputs, item)
            }
        })
        .map(move |(inputs, item)| {
            let _counted = &held;
            let event = match item {
                Item::Event(kind, obj, json) if !as_table => event_line(kind, &obj, json.as_deref()),
                Item::Event(kind, obj, _) => {
                    let rev = crate::store::revision_of(&obj);
                    let version = table.unwrap_or(table::TableVersion::V1);
                    let t = table::table(rt, version, &[&obj], rev, first, include);
                    first = false;
                    event_line(kind, &t, None)
                }
                Item::InitialEventsEnd(rev) => bookmark_line(rt, rev, true),
                Item::Bookmark(rev) => bookmark_line(rt, rev, false),
                Item::Error(e) => {
                    let mut line =
                        serde_json::to_vec(&json!({"type": "ERROR", "object": e.status})).unwrap_or_default();
                    line.push(b'\n');
                    line
                }
            };
            // The event's own line is moved, not copied, when nothing goes ahead of it.
            let line = match inputs {
                Some(mut ahead) => {
                    ahead.extend_from_slice(&event);
                    ahead
                }
                None => event,
            };
            Ok::<_, std::convert::Infallible>(Bytes::from(line))
        })
        .take_until(ends);
    Response::builder()
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(Body::from_stream(body))
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Resolves once the credential `hash` no longer stands for `who`: revoked, expired, or
/// replaced by another (never without one). A lookup that fails (the store away a moment) keeps
/// the watch: its own events then fail it if the store stays away.
async fn credential_lapses(tokens: Arc<dyn crate::store::Tokens>, hash: Option<String>, who: Identity) {
    let Some(hash) = hash else { return std::future::pending().await };
    loop {
        tokio::time::sleep(CREDENTIAL_RECHECK).await;
        match tokens.find_token(hash.clone()).await {
            Ok(Some((name, role))) if name == who.name && role.parse().ok().as_ref() == Some(&who.role) => {}
            Ok(_) => {
                tracing::info!(caller = %who.name, "the credential of an open watch was revoked; ending the watch");
                return;
            }
            Err(e) => tracing::debug!(error = %e, "cannot check an open watch's credential; checked again later"),
        }
    }
}

/// What the watched collection holds now: the stored objects of the path's namespace (or of all),
/// or the namespace's view with the global catalog namespace's PackageManifests; for a field
/// selector that pins one name (an agent's watch of its Node), that one object.
async fn current(
    ctx: &Ctx,
    view: Option<&GlobalPackages>,
    path: &ResourcePath,
    name: Option<&str>,
) -> Result<crate::store::Listing, ApiError> {
    if let (None, Some(key)) = (view, super::handlers::pinned_key(path, name)) {
        let (item, revision) = super::handlers::one_object(&*ctx.store, &key)
            .await
            .map_err(|e| ApiError::from_store(e, &path.rt.qualified(), ""))?;
        return Ok(crate::store::Listing { items: item.map(|s| (*s.object).clone()).into_iter().collect(), revision });
    }
    match view {
        Some(v) => v.list(&*ctx.store).await,
        None => ctx.store.list(&path.rt.store_key(), path.namespace.as_deref()).await,
    }
    .map_err(|e| ApiError::from_store(e, &path.rt.qualified(), ""))
}

/// A BOOKMARK event: an object of the watched kind with only its resourceVersion (and, ending
/// the initial events, kube's annotation saying so).
fn bookmark_line(rt: &crate::resources::ResourceType, rev: u64, initial_events_end: bool) -> Vec<u8> {
    let mut metadata = json!({"resourceVersion": rev.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let bookmark = json!({"type": "BOOKMARK", "object": {
        "kind": rt.kind,
        "apiVersion": rt.api_version(),
        "metadata": metadata,
    }});
    let mut line = serde_json::to_vec(&bookmark).unwrap_or_default();
    line.push(b'\n');
    line
}

/// `sendInitialEvents` (client-go's WatchList): with `true`, the watch starts with the current
/// state (at least as new as a given resourceVersion) as ADDED events and then a BOOKMARK
/// annotated `k8s.io/initial-events-end: "true"`, which the reflector waits for. As
/// kube-apiserver, it needs `resourceVersionMatch=NotOlderThan` and `allowWatchBookmarks=true`.
fn send_initial_events(params: &HashMap<String, String>) -> Result<bool, ApiError> {
    let invalid = |field: &str, message: &str| {
        ApiError::invalid("ListOptions.meta.k8s.io", "", vec![super::error::cause(field, "FieldValueInvalid", message)])
    };
    match params.get("sendInitialEvents").map(String::as_str) {
        None | Some("") | Some("false") => {
            // Only a WatchList may say how the resourceVersion matches, as kube-apiserver checks.
            if params.get("resourceVersionMatch").is_some_and(|m| !m.is_empty()) {
                return Err(invalid("resourceVersionMatch", "resourceVersionMatch is forbidden for watch"));
            }
            Ok(false)
        }
        Some("true") => {
            if params.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
                return Err(invalid(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if params.get("allowWatchBookmarks").map(String::as_str) != Some("true") {
                return Err(invalid("allowWatchBookmarks", "sendInitialEvents requires allowWatchBookmarks=true"));
            }
            Ok(true)
        }
        Some(other) => Err(ApiError::bad_request(format!("sendInitialEvents {other:?} is not true or false"))),
    }
}

/// Which objects a watch with a selector has sent as present, so that a write that moves one out
/// of the selection is sent as DELETED (with the new object) and one that moves it in as ADDED,
/// as kube-apiserver's watch cache does (`cache_watcher.go convertToWatchEvent`): client-go's
/// informers and `kubectl get -l ... -w` drop an object only on DELETED.
enum Membership {
    /// No selector a write can change the answer of (none, or only the name): events as they are.
    Unchanging,
    Tracked(Tracked),
}

/// What a watch with a selector has told its client is present.
#[derive(Default)]
struct Tracked {
    /// The keys (namespace/name) sent as present (for a resumed watch: those matching when it
    /// was opened, at `replayed_until`).
    present: HashSet<String>,
    /// A resumed watch replays the writes after the client's resourceVersion up to this revision,
    /// where `present` was read. The client may have had objects that are not in `present`:
    /// deleted, or moved out of the selection, during the gap. The watch does not look up the
    /// versions from before the replay to say which, so a replayed event that leaves an object
    /// out of the selection is sent as DELETED, once per object (kube-apiserver's watch cache
    /// sends one only when the earlier version matched; client-go's informers ignore a DELETED
    /// for an object they do not have, `kubectl get -w` prints it). Before, such an object stayed
    /// in the client's cache for good.
    replayed_until: u64,
    /// Keys told DELETED during the replay while not in `present`.
    told_gone: HashSet<String>,
}

impl Membership {
    /// The event to send for a `kind` event of `obj`, if any.
    fn judge(&mut self, kind: EventType, obj: &Value, filters: &Filters) -> Option<EventType> {
        let t = match self {
            Membership::Unchanging => return filters.matches(obj).then_some(kind),
            Membership::Tracked(t) => t,
        };
        let key = member_key(obj);
        let replayed = crate::store::revision_of(obj).is_some_and(|r| r <= t.replayed_until);
        if kind == EventType::Deleted {
            if t.present.remove(&key) {
                return Some(EventType::Deleted);
            }
            // Its last state matched: the client may have had it since before the gap.
            return (replayed && filters.matches(obj) && t.told_gone.insert(key)).then_some(EventType::Deleted);
        }
        match (t.present.contains(&key), filters.matches(obj)) {
            (true, true) => Some(kind),
            (false, true) => {
                t.told_gone.remove(&key);
                t.present.insert(key);
                Some(EventType::Added)
            }
            (true, false) => {
                t.present.remove(&key);
                if replayed {
                    t.told_gone.insert(key);
                }
                Some(EventType::Deleted)
            }
            (false, false) => (replayed && t.told_gone.insert(key)).then_some(EventType::Deleted),
        }
    }
}

/// `namespace/name` of an object.
fn member_key(obj: &Value) -> String {
    use super::objects::{at, name_of};
    let ns = at(obj, &["metadata", "namespace"]).and_then(Value::as_str).unwrap_or("");
    format!("{ns}/{}", name_of(obj))
}

/// How long a list or watch from a resourceVersion the store has not reached waits for it before
/// it is refused (kube-apiserver's watch cache waits 3 s for the same).
const FUTURE_WAIT: Duration = Duration::from_secs(3);

/// Waits (up to [`FUTURE_WAIT`]) until the store has reached revision `rv`, and returns its
/// revision; 504 "Too large resource version" when it does not. A store never hands out a
/// revision before it has it, so a larger one comes from before the data directory was restored
/// from an older backup: answered with a watch that waits, the client (an agent) would wait for
/// events that never come, where the error makes it read afresh.
pub(super) async fn reached(ctx: &Ctx, rv: u64) -> Result<u64, ApiError> {
    let deadline = tokio::time::Instant::now() + FUTURE_WAIT;
    loop {
        let head = ctx.store.revision().await.map_err(|e| ApiError::from_store(e, "", ""))?;
        if head >= rv {
            return Ok(head);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::future_resource_version(rv, head));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The desiredConfig `obj` asks for, with `obj`, when the node does not run it and its inputs have
/// not gone out on this stream since the node last had nothing to update to; remembered as sent.
fn inputs_due(obj: &Arc<Value>, sent: &mut HashMap<String, String>) -> Option<(String, Arc<Value>)> {
    use super::objects::{at, name_of};
    let annotation = |k: &str| at(obj, &["metadata", "annotations", k]).and_then(Value::as_str).unwrap_or("");
    let target = annotation(ann::DESIRED_CONFIG);
    let name = name_of(obj);
    if target.is_empty() || target == annotation(ann::CURRENT_CONFIG) {
        // Nothing to update to: a later move to any config is new again.
        sent.remove(name);
        return None;
    }
    if sent.get(name).is_some_and(|t| t == target) {
        return None;
    }
    sent.insert(name.to_string(), target.to_string());
    Some((target.to_string(), obj.clone()))
}

/// The `UPDATE_INPUTS` line for `target` on `node`, or nothing when the caller may not read both
/// objects or the config is not stored (the agent then reads them itself, and gets the error).
async fn update_inputs(store: &dyn crate::store::Store, who: &Identity, node: &Value, target: &str) -> Option<Vec<u8>> {
    let mc = crate::resources::MACHINE_CONFIG.store_key();
    let policy = crate::resources::MACHINE_CONFIGURATION.store_key();
    let may = |resource: &str, name: &str| {
        let req = auth::Request { verb: Verb::Get, resource, name: Some(name), subresource: None, field_name: None };
        auth::decide(who, &req, auth::Facts { own_node: Some(node) }) != auth::Decision::Deny
    };
    if !may(&mc, target) || !may(&policy, "cluster") {
        return None;
    }
    let read = |resource: String, name: &str| {
        let key = Key::cluster(&resource, name);
        async move { store.get_json(&key).await }
    };
    let (config, cluster) = futures::join!(read(mc, target), read(policy, "cluster"));
    let (Ok(Some(config)), Ok(cluster)) = (config, cluster) else {
        return None;
    };
    Some(inputs_line(&config, cluster.as_deref()))
}

/// `{"type":"UPDATE_INPUTS","object":{"machineConfig":<config>,"machineConfiguration":<policy|null>}}`
/// and a newline, from the stored JSON.
fn inputs_line(config: &str, policy: Option<&str>) -> Vec<u8> {
    let policy = policy.map(str::as_bytes).unwrap_or(b"null");
    let mut line = Vec::with_capacity(config.len() + policy.len() + 96);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(UPDATE_INPUTS.as_bytes());
    line.extend_from_slice(b"\",\"object\":{\"machineConfig\":");
    line.extend_from_slice(config.as_bytes());
    line.extend_from_slice(b",\"machineConfiguration\":");
    line.extend_from_slice(policy);
    line.extend_from_slice(b"}}\n");
    line
}

/// `{"type":"<kind>","object":<object>}` and a newline, with the object's JSON as the store
/// wrote it when given (the same bytes serializing it again would give).
fn event_line(kind: EventType, obj: &Value, json: Option<&str>) -> Vec<u8> {
    let object = match json {
        Some(j) => std::borrow::Cow::Borrowed(j.as_bytes()),
        None => std::borrow::Cow::Owned(serde_json::to_vec(obj).unwrap_or_default()),
    };
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_str().as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(&object);
    line.extend_from_slice(b"}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object moving out of a selection is DELETED for the watch, moving in is ADDED: by label
    /// and by field, and from a watch's own initial list as from objects that matched when it
    /// was resumed.
    #[test]
    fn objects_leaving_or_entering_a_selection_are_deleted_or_added() {
        use EventType::{Added, Deleted, Modified};
        let filters = |q: &[(&str, &str)]| {
            let params = q.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Filters::from_params(&crate::resources::NODE, &params).unwrap()
        };
        let node = |name: &str, grp: &str, unschedulable: bool| json!({"metadata": {"name": name, "labels": {"grp": grp}}, "spec": {"unschedulable": unschedulable}});
        let by_label = filters(&[("labelSelector", "grp=a")]);
        assert!(by_label.can_change());
        let mut m = Membership::Tracked(Tracked::default());
        let run = |m: &mut Membership, f: &Filters, steps: &[(EventType, Value)]| {
            steps.iter().map(|(k, o)| m.judge(*k, o, f)).collect::<Vec<_>>()
        };
        let steps = [
            (Added, node("s1", "a", false)),
            (Modified, node("s1", "a", false)),
            (Modified, node("s1", "b", false)),
            (Modified, node("s1", "b", false)),
            (Modified, node("s1", "a", false)),
            (Modified, node("s2", "b", false)),
            (Deleted, node("s2", "b", false)),
            (Deleted, node("s1", "a", false)),
        ];
        assert_eq!(
            run(&mut m, &by_label, &steps),
            [Some(Added), Some(Modified), Some(Deleted), None, Some(Added), None, None, Some(Deleted)]
        );

        let by_field = filters(&[("fieldSelector", "spec.unschedulable=false")]);
        assert!(by_field.can_change());
        // Resumed: s1 matched when the watch opened.
        let resumed = |present: &[&str], until: u64| {
            Membership::Tracked(Tracked {
                present: present.iter().map(|n| format!("/{n}")).collect(),
                replayed_until: until,
                told_gone: HashSet::new(),
            })
        };
        let mut m = resumed(&["s1"], 0);
        let steps = [(Modified, node("s1", "a", true)), (Modified, node("s1", "a", false))];
        assert_eq!(run(&mut m, &by_field, &steps), [Some(Deleted), Some(Added)]);

        // Resumed after a gap in which s3 was deleted and s4 moved out of the selection (neither
        // matches now, so neither is in the list the watch starts from): both are DELETED, once;
        // s5, which never matched, too (the replay cannot tell), once. After the replay, an
        // object that never matched is nobody's business again.
        let at = |mut v: Value, rev: u64| {
            v["metadata"]["resourceVersion"] = rev.to_string().into();
            v
        };
        let mut m = resumed(&["s6"], 20);
        let steps = [
            (Deleted, at(node("s3", "a", false), 11)),
            (Modified, at(node("s4", "b", false), 12)),
            (Modified, at(node("s4", "b", false), 13)),
            (Modified, at(node("s5", "b", false), 14)),
            (Deleted, at(node("s4", "b", false), 15)),
            (Modified, at(node("s6", "a", false), 16)),
            (Modified, at(node("s7", "b", false), 21)),
            (Deleted, at(node("s8", "a", false), 22)),
        ];
        assert_eq!(
            run(&mut m, &by_label, &steps),
            [Some(Deleted), Some(Deleted), None, Some(Deleted), None, Some(Modified), None, None]
        );

        // Selecting by name only: nothing can move, events pass as they are.
        let by_name = filters(&[("fieldSelector", "metadata.name=s1")]);
        assert!(!by_name.can_change());
        let mut m = Membership::Unchanging;
        let steps = [(Modified, node("s1", "a", false)), (Modified, node("s2", "a", false))];
        assert_eq!(run(&mut m, &by_name, &steps), [Some(Modified), None]);
    }

    #[test]
    fn an_event_line_from_stored_json_is_the_serialized_event() {
        let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "resourceVersion": "7",
            "annotations": {"x": "a \"quoted\" value"}}});
        // Kubernetes' wire order: the type, then the object.
        let serialized = format!("{{\"type\":\"MODIFIED\",\"object\":{}}}\n", serde_json::to_string(&obj).unwrap());
        let stored = serde_json::to_string(&obj).unwrap();
        assert_eq!(String::from_utf8(event_line(EventType::Modified, &obj, Some(&stored))).unwrap(), serialized);
        assert_eq!(String::from_utf8(event_line(EventType::Modified, &obj, None)).unwrap(), serialized);
        let parsed: Value = serde_json::from_str(&serialized).unwrap();
        assert_eq!(parsed, json!({"type": "MODIFIED", "object": obj}));
        // Objects list their keys sorted, whatever order they were built in (ARCHITECTURE.md).
        assert!(
            serialized
                .contains(r#""metadata":{"annotations":{"x":"a \"quoted\" value"},"name":"a","resourceVersion":"7"}"#),
            "{serialized}"
        );
        let back: Value = serde_json::from_slice(&event_line(EventType::Deleted, &obj, None)).unwrap();
        assert_eq!((back["type"].as_str(), &back["object"]), (Some("DELETED"), &obj));
    }

    #[test]
    fn inputs_are_due_once_per_new_desired_config_the_node_does_not_run() {
        let node = |desired: &str, current: &str| {
            Arc::new(json!({"metadata": {"name": "n", "annotations": {
                ann::DESIRED_CONFIG: desired, ann::CURRENT_CONFIG: current}}}))
        };
        let mut sent = HashMap::new();
        assert_eq!(inputs_due(&node("r1", "r1"), &mut sent), None, "runs it already");
        assert!(inputs_due(&node("r2", "r1"), &mut sent).is_some());
        assert_eq!(inputs_due(&node("r2", "r2"), &mut sent), None, "updated");
        assert!(inputs_due(&node("r2", "r1"), &mut sent).is_some(), "back to r1 and on to r2 again: new");
        sent.clear();
        assert_eq!(inputs_due(&node("", "r1"), &mut sent), None, "no target");
        assert_eq!(inputs_due(&node("r2", "r1"), &mut sent).map(|(t, _)| t).as_deref(), Some("r2"));
        assert_eq!(inputs_due(&node("r2", "r1"), &mut sent), None, "sent on this stream already");
        assert_eq!(inputs_due(&node("r3", "r1"), &mut sent).map(|(t, _)| t).as_deref(), Some("r3"));
        // Back to r2 after r3: new again on this stream.
        assert!(inputs_due(&node("r2", "r1"), &mut sent).is_some());
        assert_eq!(inputs_due(&Arc::new(json!({"kind": "Node"})), &mut sent), None, "no metadata");
    }

    #[test]
    fn an_inputs_line_is_the_stored_objects_in_one_event() {
        let stored = |v: &Value| serde_json::to_string(v).unwrap();
        let mc = json!({"kind": "MachineConfig", "metadata": {"name": "r2"}, "spec": {"config": {"x": "\"q\""}}});
        let policy = json!({"kind": "MachineConfiguration", "metadata": {"name": "cluster"}});
        let line = inputs_line(&stored(&mc), Some(&stored(&policy)));
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v, json!({"type": UPDATE_INPUTS, "object": {"machineConfig": mc, "machineConfiguration": policy}}));
        let v: Value = serde_json::from_slice(&inputs_line(&stored(&mc), None)).unwrap();
        assert_eq!(v["object"]["machineConfiguration"], Value::Null);
        assert_eq!(v["object"]["machineConfig"], mc);
    }
}
