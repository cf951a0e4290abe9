//! Whether a MachineConfig is in use, and by whom: the one answer `aloftctl adm prune
//! renderedmachineconfigs` ([`crate::ctl::prune`]) and the garbage collector
//! ([`crate::controllers::gc`]) both act on, so neither deletes a config the other would keep.
//!
//! In use means named by a pool (`spec.configuration` or `status.configuration`) or by a node
//! (`currentConfig`, `desiredConfig`, or aloft's pre-staging annotations).

use aloft_api::annotations as ann;
use serde_json::Value;

/// One rendered config and what uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub name: String,
    /// The pool it was rendered for (its controller owner, else the name's `rendered-<pool>-`).
    pub pool: String,
    pub created: String,
    /// The pools that name it, with where: ("worker", "spec").
    pub pools: Vec<(String, &'static str)>,
    /// The nodes that name it (any of their config annotations), sorted.
    pub nodes: Vec<String>,
}

/// Node names a reason lists before it gives only the count (a fleet's target is named by
/// every node).
const NODES_NAMED: usize = 3;

impl Rendered {
    pub fn in_use(&self) -> bool {
        !self.pools.is_empty() || !self.nodes.is_empty()
    }

    /// Who uses it, in a line: "pool worker (spec, status), 2 nodes: a, b".
    pub fn used_by(&self) -> String {
        // Each pool once, with every place it names the config.
        let mut by_pool: Vec<(&str, Vec<&str>)> = Vec::new();
        for (pool, place) in &self.pools {
            match by_pool.iter_mut().find(|(p, _)| p == pool) {
                Some((_, places)) => places.push(place),
                None => by_pool.push((pool, vec![place])),
            }
        }
        let mut parts: Vec<String> =
            by_pool.iter().map(|(pool, places)| format!("pool {pool} ({})", places.join(", "))).collect();
        match self.nodes.as_slice() {
            [] => {}
            [one] => parts.push(format!("node {one}")),
            many => {
                let mut names = many.iter().take(NODES_NAMED).cloned().collect::<Vec<_>>().join(", ");
                if many.len() > NODES_NAMED {
                    names.push_str(", …");
                }
                parts.push(format!("{} nodes: {names}", many.len()));
            }
        }
        parts.join(", ")
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A config the render controller made, and its pool: owned by a pool, or named `rendered-…`
/// with a render controller's version annotation (one orphaned by its pool's deletion). The
/// same rule as the render's ([`aloft_api::render::is_generated`]): a user's own config named
/// `rendered-…` is a pool input, and `adm prune` deleted it as a rendered one.
pub fn owner_pool(mc: &Value) -> Option<String> {
    let owners = mc.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    if let Some(o) = owners.into_iter().flatten().find(|o| text(o, "/kind") == "MachineConfigPool") {
        return Some(text(o, "/name").to_string());
    }
    let generated = mc.pointer("/metadata/annotations").and_then(|a| a.get(ann::GENERATED_BY)).is_some();
    let rest = text(mc, "/metadata/name").strip_prefix("rendered-").filter(|_| generated)?;
    Some(rest.rsplit_once('-').map_or(rest, |(pool, _hash)| pool).to_string())
}

/// The node annotations that name a rendered config the node is on, is moving to, or fetches
/// ahead of its update: a config any of them names is in use.
pub const NODE_CONFIG_ANNOTATIONS: [&str; 4] =
    [ann::CURRENT_CONFIG, ann::DESIRED_CONFIG, ann::PRESTAGE_CONFIG, ann::PRESTAGED_CONFIG];

/// Who uses the config `name`: the pools that name it (with where), and the nodes, sorted. One
/// answer for `adm prune` and the garbage collector ([`crate::controllers::gc`]), so neither
/// deletes a config the other would keep.
pub fn users(name: &str, pools: &[Value], nodes: &[Value]) -> (Vec<(String, &'static str)>, Vec<String>) {
    let mut using_pools = Vec::new();
    for p in pools {
        let pname = text(p, "/metadata/name");
        for (part, ptr) in [("spec", "/spec/configuration/name"), ("status", "/status/configuration/name")] {
            if text(p, ptr) == name {
                using_pools.push((pname.to_string(), part));
            }
        }
    }
    let mut using_nodes: Vec<String> = nodes
        .iter()
        .filter(|n| {
            let annotations = n.pointer("/metadata/annotations");
            NODE_CONFIG_ANNOTATIONS
                .iter()
                .any(|k| annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some(name))
        })
        .map(|n| text(n, "/metadata/name").to_string())
        .collect();
    using_nodes.sort();
    (using_pools, using_nodes)
}

/// `mc` with what uses it, when it is a rendered config (see [`owner_pool`]).
pub fn rendered(mc: &Value, pools: &[Value], nodes: &[Value]) -> Option<Rendered> {
    let pool = owner_pool(mc)?;
    let name = text(mc, "/metadata/name").to_string();
    let (pools, nodes) = users(&name, pools, nodes);
    let created = text(mc, "/metadata/creationTimestamp").to_string();
    Some(Rendered { name, pool, created, pools, nodes })
}
