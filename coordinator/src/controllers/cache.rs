//! An informer-style cache of one resource for a controller: loaded by one list, then kept
//! current by the watch's events and by the controller's own writes (put as soon as the store
//! returns them, so the next decision never works from a version older than what it wrote: a
//! pick not yet seen back through the watch must still count).

use crate::server::objects;
use crate::store::{revision_of, Store, StoreError};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What a controller reads of every object on every pass, worked out once when the object
/// changes instead (a pass over a 1,000-node fleet otherwise spends its time re-reading the
/// same annotations).
pub(crate) trait Derive: Sized + serde::de::DeserializeOwned {
    type Derived;
    /// A compact copy of what every decision pass reads of every object, kept in a vector of
    /// its own (see [`super::pools::NodeHot`]).
    type Hot: Copy;
    fn hot(derived: &Self::Derived) -> Self::Hot;
    /// The typed object from a stored one. By default all of it; a type whose full form is
    /// costly (every level of `Node` keeps unknown fields, which makes serde buffer each field
    /// twice) reads only what the controllers use.
    fn parse(v: &Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(v)
    }
    fn derive(&self) -> Self::Derived;
    /// Whether a rollout decision reads the same from the new version as from the old one, so
    /// an event that changed only other fields needs no new pass (a node's drain handshake
    /// writes change nothing the node controller decides on). Conservative by default.
    fn same_for_decisions(_old: (&Self, &Self::Derived), _new: (&Self, &Self::Derived)) -> bool {
        false
    }
    /// Whether pool membership and candidate order read the same from both versions (see
    /// [`super::pick::Layout`]). Conservative by default.
    fn same_layout(_old: &Self, _new: &Self) -> bool {
        false
    }
}

/// A string map (labels, annotations); absent or null is empty.
fn string_map(v: Option<&Value>) -> Result<std::collections::BTreeMap<String, String>, serde_json::Error> {
    match v {
        None | Some(Value::Null) => Ok(Default::default()),
        Some(v) => std::collections::BTreeMap::<String, String>::deserialize(v),
    }
}

fn field<'a>(m: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    m.and_then(|m| m.get(k))
}

fn opt_string(v: Option<&Value>) -> Result<Option<String>, serde_json::Error> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => String::deserialize(v).map(Some),
    }
}

impl Derive for aloft_api::Node {
    type Derived = super::pools::NodeFacts;
    type Hot = super::pools::NodeHot;
    fn hot(facts: &Self::Derived) -> Self::Hot {
        super::pools::NodeHot::of(facts)
    }
    /// What the node and drain controllers read: name, creation time, labels, annotations,
    /// `spec.unschedulable` and the conditions' type, status, reason, message. A full
    /// deserialization (with every level's unknown fields) of every Node event, in both
    /// controllers, was a tenth of the coordinator's CPU in a rollout.
    fn parse(v: &Value) -> Result<Self, serde_json::Error> {
        use serde::de::Error;
        let meta = v.get("metadata");
        let mut n = aloft_api::Node::default();
        n.metadata.name = opt_string(field(meta, "name"))?.unwrap_or_default();
        n.metadata.creation_timestamp = opt_string(field(meta, "creationTimestamp"))?;
        n.metadata.resource_version = opt_string(field(meta, "resourceVersion"))?;
        n.metadata.labels = string_map(field(meta, "labels"))?;
        n.metadata.annotations = string_map(field(meta, "annotations"))?;
        n.spec.unschedulable = match field(v.get("spec"), "unschedulable") {
            None | Some(Value::Null) => false,
            Some(u) => bool::deserialize(u)?,
        };
        if let Some(conds) = field(v.get("status"), "conditions").filter(|c| !c.is_null()) {
            let conds = conds.as_array().ok_or_else(|| serde_json::Error::custom("status.conditions: not a list"))?;
            for c in conds {
                n.status.conditions.push(aloft_api::Condition {
                    type_: opt_string(c.get("type"))?.unwrap_or_default(),
                    status: opt_string(c.get("status"))?.unwrap_or_default(),
                    last_transition_time: opt_string(c.get("lastTransitionTime"))?,
                    reason: opt_string(c.get("reason"))?.unwrap_or_default(),
                    message: opt_string(c.get("message"))?.unwrap_or_default(),
                    ..Default::default()
                });
            }
        }
        Ok(n)
    }
    fn derive(&self) -> Self::Derived {
        super::pools::NodeFacts::of(self)
    }
    /// The node controller reads a node's facts, labels (pool membership, zone), name and
    /// creation time (candidate order); the last two never change.
    fn same_for_decisions(old: (&Self, &Self::Derived), new: (&Self, &Self::Derived)) -> bool {
        old.0.metadata.labels == new.0.metadata.labels && old.1.same_for_rollout(new.1)
    }
    /// Membership reads labels; candidate order labels, creation time and name.
    fn same_layout(old: &Self, new: &Self) -> bool {
        old.metadata.labels == new.metadata.labels
            && old.metadata.creation_timestamp == new.metadata.creation_timestamp
            && old.metadata.name == new.metadata.name
    }
}

impl Derive for aloft_api::MachineConfigPool {
    type Derived = ();
    type Hot = ();
    fn hot(_: &()) {}
    fn derive(&self) {}
    /// Membership reads the name (master and worker rank apart) and the node selector; a pool's
    /// status writes (every pass) change neither.
    fn same_layout(old: &Self, new: &Self) -> bool {
        old.metadata.name == new.metadata.name && old.spec.node_selector == new.spec.node_selector
    }
}

impl Derive for aloft_api::NodeDisruptionBudget {
    type Derived = ();
    type Hot = ();
    fn hot(_: &()) {}
    fn derive(&self) {}
    /// Metadata and spec only: decisions never read the status (the node controller compares
    /// its own against the stored JSON), and a status that does not parse must not make the
    /// budget look absent, which would let its nodes be disrupted.
    fn parse(v: &Value) -> Result<Self, serde_json::Error> {
        let part = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Ok(aloft_api::NodeDisruptionBudget {
            api_version: text("apiVersion"),
            kind: text("kind"),
            metadata: Option::deserialize(part("metadata"))?.unwrap_or_default(),
            spec: Option::deserialize(part("spec"))?.unwrap_or_default(),
            ..Default::default()
        })
    }
    /// A budget's status (the node controller writes it, at most once a second in a rollout)
    /// changes no decision; a pass for each such write read the whole fleet for nothing.
    fn same_for_decisions(old: (&Self, &()), new: (&Self, &())) -> bool {
        old.0.metadata.name == new.0.metadata.name && old.0.spec == new.0.spec
    }
}

/// Objects of one resource by name, kept raw (to write back exactly), typed, and derived, in
/// vectors so that a decision borrows them as slices.
pub(crate) struct Cache<T: Derive> {
    index: HashMap<String, usize>,
    /// Shared with the watch events they came from (a fleet's worth of Node events is a lot
    /// of copying otherwise).
    pub(crate) raw: Vec<Arc<Value>>,
    pub(crate) typed: Vec<T>,
    pub(crate) derived: Vec<T::Derived>,
    /// `T::hot` of each `derived`.
    pub(crate) hot: Vec<T::Hot>,
    /// The revision of each object, read once (not out of its metadata on every event).
    revisions: Vec<u64>,
    /// Objects whose `typed` and `derived` forms are older than `raw` (see
    /// [`Cache::apply_lazily`]), and how many.
    stale: Vec<bool>,
    stale_count: usize,
    /// Bumped whenever an object is added or removed, or changes in what
    /// [`Derive::same_layout`] compares: a [`super::pick::Layout`] built at one value holds
    /// until it moves (indexes included: they shift only on add and remove).
    pub(crate) layout_version: u64,
}

impl<T: Derive> Cache<T> {
    pub(crate) async fn load(store: &Arc<dyn Store>, resource: &str) -> Result<Self, StoreError> {
        let mut c = Self::empty();
        for v in store.list(resource, None).await?.items {
            c.put(v);
        }
        Ok(c)
    }

    pub(crate) fn empty() -> Self {
        Cache {
            index: HashMap::new(),
            raw: Vec::new(),
            typed: Vec::new(),
            derived: Vec::new(),
            hot: Vec::new(),
            revisions: Vec::new(),
            stale: Vec::new(),
            stale_count: 0,
            layout_version: 0,
        }
    }

    /// The position of object `name` in the vectors (it moves only when an object is added or
    /// removed, which moves `layout_version` too).
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub(crate) fn put(&mut self, v: impl Into<Arc<Value>>) {
        self.replace(v.into());
    }

    /// Puts `v` if its object is cached at an older revision: a write's result that arrives
    /// after the watch brought a newer version (or the object's deletion) must not undo it.
    pub(crate) fn put_if_newer(&mut self, v: Arc<Value>) {
        let newer =
            self.index_of(objects::name_of(&v)).is_some_and(|i| self.revisions[i] < revision_of(&v).unwrap_or(0));
        if newer {
            self.replace(v);
        }
    }

    /// Puts `v`; returns whether a decision could read anything different now
    /// ([`Derive::same_for_decisions`]).
    fn replace(&mut self, v: Arc<Value>) -> bool {
        let name = objects::name_of(&v);
        match T::parse(&v) {
            Ok(t) => {
                let d = t.derive();
                let revision = revision_of(&v).unwrap_or(0);
                match self.index.get(name) {
                    Some(&i) => {
                        let same = T::same_for_decisions((&self.typed[i], &self.derived[i]), (&t, &d));
                        if !T::same_layout(&self.typed[i], &t) {
                            self.layout_version += 1;
                        }
                        self.raw[i] = v;
                        self.typed[i] = t;
                        self.hot[i] = T::hot(&d);
                        self.derived[i] = d;
                        self.revisions[i] = revision;
                        self.set_stale(i, false);
                        !same
                    }
                    None => {
                        self.layout_version += 1;
                        self.index.insert(name.to_string(), self.raw.len());
                        self.raw.push(v);
                        self.typed.push(t);
                        self.hot.push(T::hot(&d));
                        self.derived.push(d);
                        self.revisions.push(revision);
                        self.stale.push(false);
                        true
                    }
                }
            }
            Err(e) => {
                tracing::warn!(%name, error = %e, "ignoring an object that does not parse");
                self.remove(name);
                true
            }
        }
    }

    fn set_stale(&mut self, i: usize, stale: bool) {
        if self.stale[i] != stale {
            self.stale[i] = stale;
            if stale {
                self.stale_count += 1;
            } else {
                self.stale_count -= 1;
            }
        }
    }

    fn remove(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else { return };
        self.layout_version += 1;
        self.set_stale(i, false);
        self.raw.swap_remove(i);
        self.typed.swap_remove(i);
        self.derived.swap_remove(i);
        self.hot.swap_remove(i);
        self.revisions.swap_remove(i);
        self.stale.swap_remove(i);
        if i < self.raw.len() {
            let moved = objects::name_of(&self.raw[i]).to_string();
            self.index.insert(moved, i);
        }
    }

    /// Applies a watch event; returns whether a decision could read anything different now
    /// (false for stale events and for changes [`Derive::same_for_decisions`] calls irrelevant).
    pub(crate) fn apply(&mut self, ev: &crate::store::Event) -> bool {
        match ev.kind {
            crate::store::EventType::Deleted => {
                let known = self.index.contains_key(&ev.key.name);
                self.remove(&ev.key.name);
                known
            }
            _ => {
                // Replayed events (and the events of our own writes, already put) can be older
                // than what the cache holds.
                let cached = self.index.get(&ev.key.name).map(|&i| self.revisions[i]);
                cached.is_none_or(|c| c < ev.revision) && self.replace(ev.object.clone())
            }
        }
    }

    /// [`Cache::apply`] for a controller that reads most objects' typed and derived forms only
    /// now and then: a changed object is parsed only if `parse_now(new raw, old derived)` says
    /// so; otherwise its new raw form is kept and marked stale until [`Cache::refresh`]. (The
    /// drain controller reads only the nodes asking it something on most passes; parsing every
    /// Node event of a rollout for it was a fifth of the controllers' time.) Returns whether the
    /// object changed.
    pub(crate) fn apply_lazily(
        &mut self,
        ev: &crate::store::Event,
        parse_now: impl Fn(&Value, &T::Derived) -> bool,
    ) -> bool {
        let Some(i) = self.index.get(&ev.key.name).copied() else { return self.apply(ev) };
        if ev.kind == crate::store::EventType::Deleted || parse_now(&ev.object, &self.derived[i]) {
            return self.apply(ev);
        }
        if self.revisions[i] >= ev.revision {
            return false;
        }
        self.raw[i] = ev.object.clone();
        self.revisions[i] = ev.revision;
        self.set_stale(i, true);
        true
    }

    /// Parse every object [`Cache::apply_lazily`] left stale.
    pub(crate) fn refresh(&mut self) {
        if self.stale_count == 0 {
            return;
        }
        let stale: Vec<Arc<Value>> =
            (0..self.raw.len()).filter(|&i| self.stale[i]).map(|i| self.raw[i].clone()).collect();
        for v in stale {
            self.replace(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Event, EventType, Key};
    use aloft_api::{MachineConfigPool, Node};
    use serde_json::json;

    fn event(resource: &str, revision: u64, object: Value) -> Event {
        let name = objects::name_of(&object).to_string();
        let mut object = object;
        object["metadata"]["resourceVersion"] = revision.to_string().into();
        Event::new(revision, Key::cluster(resource, &name), EventType::Modified, object)
    }

    fn empty<T: Derive>() -> Cache<T> {
        Cache::empty()
    }

    /// The packed facts stay beside the facts they come from through changes and removals
    /// (a removal moves the last object into the freed place).
    #[test]
    fn packed_facts_follow_their_objects() {
        let mut c: Cache<Node> = empty();
        let node = |name: &str, desired: &str| {
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                "annotations": {"machineconfiguration.openshift.io/desiredConfig": desired}}})
        };
        for (k, name) in ["a", "b", "c", "d"].iter().enumerate() {
            assert!(c.apply(&event("/nodes", k as u64 + 1, node(name, "r1"))));
        }
        assert!(c.apply(&event("/nodes", 5, node("b", "r2"))));
        assert!(c.apply(&Event::new(6, Key::cluster("/nodes", "a"), EventType::Deleted, node("a", "r1"))));
        assert_eq!(c.hot.len(), 3);
        for i in 0..c.raw.len() {
            assert_eq!(c.hot[i], crate::controllers::pools::NodeHot::of(&c.derived[i]), "object {i}");
        }
        let b = c.index_of("b").unwrap();
        assert!(c.hot[b].desires(&crate::controllers::config_name::ConfigName::new("r2")));
    }

    #[test]
    fn a_lean_node_reads_what_the_full_one_does() {
        let v = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "7",
                "labels": {"topology.kubernetes.io/zone": "z1"}, "annotations": {"machineconfiguration.openshift.io/state": "Done"},
                "uid": "u"},
            "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
                "nodeInfo": {"osImage": "x"}}});
        let lean = <Node as Derive>::parse(&v).unwrap();
        let full = Node::deserialize(&v).unwrap();
        assert_eq!(lean.metadata.name, full.metadata.name);
        assert_eq!(lean.metadata.creation_timestamp, full.metadata.creation_timestamp);
        assert_eq!(lean.metadata.labels, full.metadata.labels);
        assert_eq!(lean.metadata.annotations, full.metadata.annotations);
        assert_eq!(lean.spec.unschedulable, full.spec.unschedulable);
        assert!(lean.is_ready() && full.is_ready());
        assert_eq!(lean.derive(), full.derive(), "the controllers' facts are the same");
        let bad = json!({"metadata": {"name": "b", "labels": {"x": 1}}});
        assert!(<Node as Derive>::parse(&bad).is_err(), "a non-string label is refused, as by the full form");
        assert!(<Node as Derive>::parse(&json!({"metadata": {"name": "c"}, "status": {"conditions": 3}})).is_err());
    }

    #[test]
    fn a_lazy_cache_parses_what_it_is_asked_to_and_the_rest_on_refresh() {
        let mut nodes: Cache<Node> = empty();
        let node = |name: &str, rev, state: &str| {
            event(
                "/nodes",
                rev,
                json!({"metadata": {"name": name, "annotations": {"machineconfiguration.openshift.io/state": state}}}),
            )
        };
        // As the drain controller's: what asks now, or asked before.
        let asks = |raw: &Value, old: &crate::controllers::pools::NodeFacts| {
            old.state == "Working"
                || raw.pointer("/metadata/annotations/machineconfiguration.openshift.io~1state")
                    == Some(&json!("Working"))
        };
        assert!(nodes.apply_lazily(&node("a", 1, "Done"), asks), "a new node is parsed at once");
        assert!(nodes.apply_lazily(&node("b", 2, "Done"), asks));
        assert_eq!(nodes.derived[0].state, "Done");
        assert!(nodes.apply_lazily(&node("a", 3, "Degraded"), asks), "a change is reported");
        assert_eq!(nodes.derived[0].state, "Done", "but not parsed: nothing asks for it");
        assert_eq!(revision_of(&nodes.raw[0]), Some(3), "the raw form is the newest");
        assert!(!nodes.apply_lazily(&node("a", 3, "Degraded"), asks), "a replayed event is no news");
        assert!(nodes.apply_lazily(&node("b", 4, "Working"), asks));
        assert_eq!(nodes.derived[1].state, "Working", "what the filter asks for is parsed at once");
        nodes.refresh();
        assert_eq!(nodes.derived[0].state, "Degraded", "refresh parses the rest");
        assert_eq!(nodes.stale_count, 0);
        // A stale entry removed, and one moved into its place, keep their marks straight.
        nodes.apply_lazily(&node("a", 5, "Done"), asks);
        nodes.apply_lazily(&node("b", 6, "Done"), asks);
        assert_eq!(nodes.stale_count, 1, "a is stale; b was parsed (it was Working)");
        let gone = Event { kind: EventType::Deleted, ..node("a", 7, "Done") };
        assert!(nodes.apply_lazily(&gone, asks));
        assert_eq!((nodes.raw.len(), nodes.stale_count), (1, 0));
        assert_eq!(nodes.typed[0].metadata.name, "b");
    }

    #[test]
    fn the_layout_version_moves_with_labels_and_selectors_only() {
        let mut nodes: Cache<Node> = empty();
        let node = |rev, zone: &str, state: &str| {
            event(
                "/nodes",
                rev,
                json!({"metadata": {"name": "a", "labels": {"topology.kubernetes.io/zone": zone},
                "annotations": {"machineconfiguration.openshift.io/state": state}}}),
            )
        };
        assert!(nodes.apply(&node(1, "z1", "Done")));
        let added = nodes.layout_version;
        assert!(added > 0, "an added node moves it");
        assert!(nodes.apply(&node(2, "z1", "Working")), "a state change is a decision change");
        assert_eq!(nodes.layout_version, added, "but not a layout change");
        nodes.apply(&node(3, "z2", "Working"));
        assert!(nodes.layout_version > added, "a zone label change reorders candidates");

        let mut pools: Cache<MachineConfigPool> = empty();
        let pool = |rev, role: &str, count: i64| {
            event(
                "/pools",
                rev,
                json!({"metadata": {"name": "worker"},
                "spec": {"nodeSelector": {"matchLabels": {role: ""}}}, "status": {"machineCount": count}}),
            )
        };
        pools.apply(&pool(1, "worker", 1));
        let v = pools.layout_version;
        pools.apply(&pool(2, "worker", 2));
        assert_eq!(pools.layout_version, v, "a status write keeps the layout");
        pools.apply(&pool(3, "infra", 2));
        assert!(pools.layout_version > v, "a new node selector changes membership");
    }

    /// A budget's status write asks for no pass; a change of its spec does.
    #[test]
    fn only_a_budgets_spec_is_news() {
        let ev = |rev: u64, max: i64, allowed: i64| {
            let budget = json!({"metadata": {"name": "db", "resourceVersion": rev.to_string()},
                "spec": {"maxUnavailable": max}, "status": {"disruptionsAllowed": allowed}});
            Event::new(rev, Key::cluster("/nodedisruptionbudgets", "db"), EventType::Modified, budget)
        };
        let mut budgets: Cache<aloft_api::NodeDisruptionBudget> = empty();
        assert!(budgets.apply(&ev(1, 1, 1)), "a new budget");
        assert!(!budgets.apply(&ev(2, 1, 0)), "its status only");
        assert!(budgets.apply(&ev(3, 2, 0)), "its spec");
    }

    /// A budget whose status does not parse still holds back its nodes.
    #[test]
    fn a_budgets_status_never_hides_its_spec() {
        let v = json!({"metadata": {"name": "db"}, "spec": {"maxUnavailable": 1},
            "status": {"expectedNodes": "many", "conditions": 3}});
        let b = <aloft_api::NodeDisruptionBudget as Derive>::parse(&v).unwrap();
        assert_eq!(b.metadata.name, "db");
        assert_eq!(b.spec.max_unavailable, Some(aloft_api::IntOrString::Int(1)));
        assert!(<aloft_api::NodeDisruptionBudget as Derive>::parse(&json!({"spec": {"groupBy": 1}})).is_err());
    }
}
