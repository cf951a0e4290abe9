//! The update graph an OpenShift update service (Cincinnati / OSUS) serves, and what the Cluster
//! Version Operator makes of it.
//!
//! aloft follows channels on a real update service, so a fleet must see the updates an OpenShift
//! cluster at the same version would see: the same `availableUpdates`, the same
//! `conditionalUpdates` with the same risks, and the same `RetrievedUpdates` reasons when the
//! answer is unusable. This module is that computation and nothing else (no fetching, no clock),
//! so it can be checked against graphs the service really served.

use crate::json_words::{kind_of, shown};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// One release in a graph (Cincinnati "node"), also the shape of ClusterVersion's
/// `status.availableUpdates[]` entries' source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub version: String,
    pub payload: String,
    /// Kept whole: channels and the release's architecture live here, and the ClusterVersion
    /// status shows them.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// Why an update is conditional: the CVO shows each risk by name and message, and decides from
/// its rules whether the cluster is exposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Risk {
    #[serde(default)]
    pub url: String,
    pub name: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub matching_rules: Vec<MatchingRule>,
}

/// serde: `{"type":"Always"}` | `{"type":"PromQL","promql":{"promql":"..."}}`; an unknown type
/// must still parse (kept as `Other(type_string)`) because the CVO skips rule types it does not
/// know instead of rejecting the graph. A `PromQL` rule without a query is kept as
/// `Other("PromQL")` for the same reason: the CVO cannot evaluate it either and moves on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RuleRepr", into = "RuleRepr")]
pub enum MatchingRule {
    Always,
    PromQl { promql: String },
    Other(String),
}

/// The wire shape of a matching rule.
#[derive(Serialize, Deserialize)]
struct RuleRepr {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    promql: Option<PromQlRepr>,
}

#[derive(Serialize, Deserialize)]
struct PromQlRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    promql: Option<String>,
}

impl From<RuleRepr> for MatchingRule {
    fn from(r: RuleRepr) -> Self {
        match r.kind.as_str() {
            "Always" => MatchingRule::Always,
            "PromQL" => match r.promql.and_then(|p| p.promql) {
                Some(promql) => MatchingRule::PromQl { promql },
                None => MatchingRule::Other(r.kind),
            },
            _ => MatchingRule::Other(r.kind),
        }
    }
}

impl From<MatchingRule> for RuleRepr {
    fn from(r: MatchingRule) -> Self {
        match r {
            MatchingRule::Always => RuleRepr { kind: "Always".into(), promql: None },
            MatchingRule::PromQl { promql } => {
                RuleRepr { kind: "PromQL".into(), promql: Some(PromQlRepr { promql: Some(promql) }) }
            }
            MatchingRule::Other(kind) => RuleRepr { kind, promql: None },
        }
    }
}

/// A parsed, checked graph. Edges are node indices as served, so a graph read here can be
/// compared with (or served as) what the update service sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: Vec<Release>,
    pub edges: Vec<(usize, usize)>,
    pub conditional_edges: Vec<ConditionalEdges>,
}

/// Edges the service keeps only with a warning attached: every edge of a group shares its risks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionalEdges {
    pub edges: Vec<EdgeRef>,
    pub risks: Vec<Risk>,
}

/// Conditional edges name releases by version, not by node index, because the service computes
/// them apart from the node list (blocked edges in cincinnati-graph-data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRef {
    pub from: String,
    pub to: String,
}

/// ClusterVersion's `status.conditionalUpdates[]` entry before the CVO adds its Recommended
/// condition (see [`evaluate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionalUpdate {
    pub release: Release,
    pub risks: Vec<Risk>,
}

/// What a fleet at one version may move to, split as ClusterVersion's status splits it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Updates {
    /// Highest version first, as `oc adm upgrade` lists them.
    pub available: Vec<Release>,
    /// Highest version first; none of these is also in `available`.
    pub conditional: Vec<ConditionalUpdate>,
}

/// What a set of risks means for one conditional update, as the CVO's Recommended condition
/// says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recommendation {
    Recommended,
    NotRecommended { reason: String, message: String },
    Unknown { reason: String, message: String },
}

/// Why a graph gave no updates, in the terms of the CVO's `RetrievedUpdates` condition.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    #[error("invalid update graph: {reason}")]
    Invalid { reason: String },
    #[error("version {version} is not in the update graph")]
    VersionNotFound { version: String },
}

impl GraphError {
    /// The `RetrievedUpdates=False` reason, so clients written for the CVO understand it.
    pub fn reason(&self) -> &'static str {
        match self {
            GraphError::Invalid { .. } => "ResponseInvalid",
            GraphError::VersionNotFound { .. } => "VersionNotFound",
        }
    }
}

fn invalid(reason: String) -> GraphError {
    GraphError::Invalid { reason }
}

/// The wire shape of the graph, checked further by [`parse`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawGraph {
    nodes: Vec<Release>,
    edges: Vec<(u64, u64)>,
    /// Older services do not send it; `null` is read as Go reads it, as none.
    #[serde(default)]
    conditional_edges: Option<Vec<ConditionalEdges>>,
}

/// Read a graph as the update service serves it (`application/json`, format version 1). Every
/// error is a [`GraphError::Invalid`] naming the field (and index) at fault, because the message
/// becomes the `RetrievedUpdates` condition an operator reads to find what the service got wrong.
pub fn parse(bytes: &[u8]) -> Result<Graph, GraphError> {
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("not JSON: {}", shown(&e.to_string()))))?;
    let Value::Object(top) = &doc else {
        return Err(invalid(format!("the graph must be a JSON object, got {}", kind_of(&doc))));
    };
    match top.get("version") {
        None => return Err(invalid("version: missing (want 1)".into())),
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return Err(invalid(format!("version: {} is not supported (want 1)", shown(&v.to_string())))),
    }
    let raw: RawGraph = serde_path_to_error::deserialize(&doc).map_err(|e| {
        let at = e.path().to_string();
        let why = shown(&crate::json_words::in_json_terms(&e.inner().to_string()));
        invalid(if at == "." { why } else { format!("{at}: {why}") })
    })?;

    let mut seen: HashMap<semver::Version, usize> = HashMap::with_capacity(raw.nodes.len());
    for (i, node) in raw.nodes.iter().enumerate() {
        let v = semver::Version::parse(&node.version).map_err(|e| {
            invalid(format!("nodes[{i}].version: {:?} is not a semantic version: {e}", shown(&node.version)))
        })?;
        if let Some(first) = seen.insert(v, i) {
            return Err(invalid(format!(
                "nodes[{i}].version: {:?} is already the version of nodes[{first}]",
                shown(&node.version)
            )));
        }
    }
    let count = raw.nodes.len();
    let mut edges = Vec::with_capacity(raw.edges.len());
    for (i, &(from, to)) in raw.edges.iter().enumerate() {
        for end in [from, to] {
            if end >= count as u64 {
                return Err(invalid(format!("edges[{i}]: node index {end} is out of range ({count} nodes)")));
            }
        }
        edges.push((from as usize, to as usize));
    }
    Ok(Graph { nodes: raw.nodes, edges, conditional_edges: raw.conditional_edges.unwrap_or_default() })
}

impl Graph {
    /// The release a fleet at `version` runs, matched as [`Graph::updates_from`] matches the
    /// current version (equal parsed semantic versions, build metadata included), so the two
    /// never disagree on whether a fleet's release is in the graph.
    pub fn find(&self, version: &str) -> Option<&Release> {
        let wanted = semver::Version::parse(version).ok()?;
        self.nodes.iter().find(|n| semver::Version::parse(&n.version).ok().as_ref() == Some(&wanted))
    }

    /// The CVO's `availableUpdates` and `conditionalUpdates` for a fleet at `current`. A
    /// `current` that is not a node (or not a version at all) is [`GraphError::VersionNotFound`]:
    /// the service does not know the fleet's release, so it has nothing to offer it.
    pub fn updates_from(&self, current: &str) -> Result<Updates, GraphError> {
        let not_found = || GraphError::VersionNotFound { version: shown(current) };
        let cur = semver::Version::parse(current).map_err(|_| not_found())?;
        let versions: Vec<Option<semver::Version>> =
            self.nodes.iter().map(|n| semver::Version::parse(&n.version).ok()).collect();
        let is_current = |i: usize| versions.get(i).and_then(Option::as_ref) == Some(&cur);
        if !(0..self.nodes.len()).any(is_current) {
            return Err(not_found());
        }

        // Target node index -> its risks, in the order the groups name them.
        let mut conditional: Vec<(usize, Vec<Risk>)> = Vec::new();
        for group in &self.conditional_edges {
            for edge in &group.edges {
                let from_current =
                    edge.from == current || semver::Version::parse(&edge.from).ok().as_ref() == Some(&cur);
                if !from_current {
                    continue;
                }
                // A target the graph has no node for is dropped, as the CVO drops it: there is no
                // payload to offer.
                let Some(to) = self.index_of(&edge.to, &versions) else { continue };
                let risks = match conditional.iter().position(|(i, _)| *i == to) {
                    Some(p) => &mut conditional[p].1,
                    None => {
                        conditional.push((to, Vec::new()));
                        &mut conditional.last_mut().expect("just pushed").1
                    }
                };
                for risk in &group.risks {
                    if !risks.iter().any(|r| r.name == risk.name) {
                        risks.push(risk.clone());
                    }
                }
            }
        }

        let available: BTreeSet<usize> = self
            .edges
            .iter()
            .filter(|&&(from, to)| is_current(from) && to < self.nodes.len())
            .map(|&(_, to)| to)
            .filter(|to| !conditional.iter().any(|(i, _)| i == to))
            .collect();

        let mut available: Vec<usize> = available.into_iter().collect();
        available.sort_by(|a, b| versions[*b].cmp(&versions[*a]));
        conditional.sort_by(|(a, _), (b, _)| versions[*b].cmp(&versions[*a]));
        Ok(Updates {
            available: available.into_iter().map(|i| self.nodes[i].clone()).collect(),
            conditional: conditional
                .into_iter()
                .map(|(i, risks)| ConditionalUpdate { release: self.nodes[i].clone(), risks })
                .collect(),
        })
    }

    fn index_of(&self, version: &str, versions: &[Option<semver::Version>]) -> Option<usize> {
        let parsed = semver::Version::parse(version).ok();
        self.nodes.iter().zip(versions).position(|(n, v)| n.version == version || (parsed.is_some() && *v == parsed))
    }
}

/// One risk's exposure as aloft can judge it.
enum Exposure<'a> {
    Applies,
    /// No rule aloft can evaluate; the first PromQL query, if any, says what would be needed.
    Unknown(Option<&'a str>),
}

fn exposure(risk: &Risk) -> Exposure<'_> {
    let mut first_promql = None;
    for rule in &risk.matching_rules {
        match rule {
            MatchingRule::Always => return Exposure::Applies,
            // aloft has no cluster monitoring to ask: not evaluable, so the next rule decides.
            MatchingRule::PromQl { promql } => {
                first_promql.get_or_insert(promql.as_str());
            }
            MatchingRule::Other(_) => {}
        }
    }
    Exposure::Unknown(first_promql)
}

/// The Recommended condition for a conditional update with these risks. A risk the fleet is
/// exposed to outweighs one aloft cannot judge, because the answer is "no" either way and the
/// known risk is the one to read; a risk aloft cannot judge makes the answer Unknown rather
/// than a silent "yes", as in the CVO when a rule fails to evaluate.
pub fn evaluate(risks: &[Risk]) -> Recommendation {
    let mut applying: Vec<&Risk> = Vec::new();
    let mut unknown = String::new();
    for risk in risks {
        match exposure(risk) {
            Exposure::Applies => applying.push(risk),
            Exposure::Unknown(promql) => {
                if !unknown.is_empty() {
                    unknown.push('\n');
                }
                let _ = write!(unknown, "could not evaluate exposure to {}: ", risk.name);
                match promql {
                    // One line per risk: the query's own line breaks would split it.
                    Some(q) => {
                        let q = q.split_whitespace().collect::<Vec<_>>().join(" ");
                        let _ = write!(unknown, "aloft does not evaluate PromQL rules ({})", shown(&q));
                    }
                    None => unknown.push_str("it has no matching rules aloft can evaluate"),
                }
                // What the risk is, so the reader can judge it where aloft cannot.
                let about = [risk.message.as_str(), risk.url.as_str()]
                    .iter()
                    .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                if !about.is_empty() {
                    let _ = write!(unknown, "; {}: {about}", risk.name);
                }
            }
        }
    }
    if !applying.is_empty() {
        let reason = match applying.as_slice() {
            [one] => one.name.clone(),
            _ => "MultipleReasons".to_string(),
        };
        let message = applying
            .iter()
            .map(|r| match (r.message.is_empty(), r.url.is_empty()) {
                (_, true) => r.message.clone(),
                (true, false) => r.url.clone(),
                (false, false) => format!("{} {}", r.message, r.url),
            })
            .collect::<Vec<_>>()
            .join("\n\n");
        return Recommendation::NotRecommended { reason, message };
    }
    if !unknown.is_empty() {
        return Recommendation::Unknown { reason: "EvaluationFailed".into(), message: unknown };
    }
    Recommendation::Recommended
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GRAPHS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/testdata/cincinnati-graphs/");
    const FILES: [&str; 7] = [
        "candidate-4.12_multi_v1.json",
        "stable-4.7_amd64_v1.json",
        "stable-4.7_s390x_v1.json",
        "stable-4.8_amd64_v1.json",
        "stable-4.8_s390x_v1.json",
        "stable-4.9_amd64_v1.json",
        "stable-4.9_s390x_v1.json",
    ];

    fn bytes(name: &str) -> Vec<u8> {
        std::fs::read(format!("{GRAPHS}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn load(name: &str) -> (Graph, Value) {
        let b = bytes(name);
        let g = parse(&b).unwrap_or_else(|e| panic!("{name}: {e}"));
        (g, serde_json::from_slice(&b).unwrap())
    }

    fn versions(rs: &[Release]) -> Vec<&str> {
        rs.iter().map(|r| r.version.as_str()).collect()
    }

    fn invalid_reason(input: &Value) -> String {
        match parse(input.to_string().as_bytes()) {
            Err(GraphError::Invalid { reason }) => reason,
            other => panic!("expected Invalid for {input}, got {other:?}"),
        }
    }

    fn risk(name: &str, rules: Vec<MatchingRule>) -> Risk {
        Risk {
            url: format!("https://example.com/{name}"),
            name: name.into(),
            message: format!("{name} breaks things."),
            matching_rules: rules,
        }
    }

    fn promql(q: &str) -> MatchingRule {
        MatchingRule::PromQl { promql: q.into() }
    }

    /// Expected updates computed straight from the JSON, without this module's types: available
    /// versions and conditional version -> risk names (first seen first).
    fn expected_from_json(doc: &Value, current: &str) -> (BTreeSet<String>, BTreeMap<String, Vec<String>>) {
        let nodes: Vec<&str> =
            doc["nodes"].as_array().unwrap().iter().map(|n| n["version"].as_str().unwrap()).collect();
        let mut conditional: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for group in doc["conditionalEdges"].as_array().into_iter().flatten() {
            for e in group["edges"].as_array().unwrap() {
                let (from, to) = (e["from"].as_str().unwrap(), e["to"].as_str().unwrap());
                if from != current || !nodes.contains(&to) {
                    continue;
                }
                let names = conditional.entry(to.to_string()).or_default();
                for r in group["risks"].as_array().unwrap() {
                    let n = r["name"].as_str().unwrap().to_string();
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
        }
        let available = doc["edges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| nodes[e[0].as_u64().unwrap() as usize] == current)
            .map(|e| nodes[e[1].as_u64().unwrap() as usize].to_string())
            .filter(|v| !conditional.contains_key(v))
            .collect();
        (available, conditional)
    }

    fn assert_descending(vs: &[&str]) {
        for w in vs.windows(2) {
            let (a, b) = (semver::Version::parse(w[0]).unwrap(), semver::Version::parse(w[1]).unwrap());
            assert!(a > b, "not in descending order: {} then {}", w[0], w[1]);
        }
    }

    #[test]
    fn update_graph_every_served_graph_parses_with_its_counts() {
        let on_disk = std::fs::read_dir(GRAPHS)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json"))
            .count();
        assert_eq!(on_disk, FILES.len());
        let counts = [
            ("candidate-4.12_multi_v1.json", 5, 10, 0),
            ("stable-4.7_amd64_v1.json", 102, 3244, 2),
            ("stable-4.7_s390x_v1.json", 102, 3244, 2),
            ("stable-4.8_amd64_v1.json", 101, 3168, 1),
            ("stable-4.8_s390x_v1.json", 101, 3168, 1),
            ("stable-4.9_amd64_v1.json", 90, 2544, 0),
            ("stable-4.9_s390x_v1.json", 90, 2544, 0),
        ];
        for (name, nodes, edges, groups) in counts {
            let (g, doc) = load(name);
            assert_eq!((g.nodes.len(), g.edges.len(), g.conditional_edges.len()), (nodes, edges, groups), "{name}");
            // Nodes and conditional edges serialize back to exactly what was served.
            assert_eq!(serde_json::to_value(&g.nodes).unwrap(), doc["nodes"], "{name}");
            assert_eq!(serde_json::to_value(&g.conditional_edges).unwrap(), doc["conditionalEdges"], "{name}");
            assert_eq!(json!(g.edges), doc["edges"], "{name}");
        }
    }

    #[test]
    fn update_graph_every_version_matches_an_independent_scan() {
        let mut conditional_seen = 0;
        for name in FILES {
            let (g, doc) = load(name);
            for node in &g.nodes {
                let u = g.updates_from(&node.version).unwrap();
                let (available, conditional) = expected_from_json(&doc, &node.version);
                let got_available = versions(&u.available);
                assert_eq!(got_available.len(), available.len(), "{name} {}: duplicates", node.version);
                assert_eq!(
                    got_available.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>(),
                    available,
                    "{name} {}",
                    node.version
                );
                assert_descending(&got_available);
                let got_conditional: BTreeMap<String, Vec<String>> = u
                    .conditional
                    .iter()
                    .map(|c| (c.release.version.clone(), c.risks.iter().map(|r| r.name.clone()).collect()))
                    .collect();
                assert_eq!(got_conditional.len(), u.conditional.len());
                assert_eq!(got_conditional, conditional, "{name} {}", node.version);
                let got_cond_versions: Vec<&str> = u.conditional.iter().map(|c| c.release.version.as_str()).collect();
                assert_descending(&got_cond_versions);
                for c in &u.conditional {
                    assert!(!got_available.contains(&c.release.version.as_str()));
                    assert_eq!(Some(&c.release), g.find(&c.release.version));
                }
                for r in &u.available {
                    assert_eq!(Some(r), g.find(&r.version));
                }
                conditional_seen += u.conditional.len();
            }
        }
        // 4.7.0-4.7.3 (and 4.6.15-4.6.23 in stable-4.7) to 4.7.4, twice per architecture.
        assert_eq!(conditional_seen, (4 + 9) * 2 + 4 * 2);
    }

    #[test]
    fn update_graph_candidate_4_12_by_hand() {
        let (g, _) = load("candidate-4.12_multi_v1.json");
        let u = g.updates_from("4.12.0-rc.0").unwrap();
        assert_eq!(versions(&u.available), ["4.12.0-rc.4", "4.12.0-rc.3", "4.12.0-rc.2", "4.12.0-rc.1"]);
        assert!(u.conditional.is_empty());
        let rc4 = &u.available[0];
        assert_eq!(
            rc4.payload,
            "quay.io/openshift-release-dev/ocp-release@sha256:f7f292ebe21e88c518fc51db62f915657efa8e71d483c431580a4d0e63b8c3c1"
        );
        assert_eq!(rc4.metadata["release.openshift.io/architecture"], "multi");
        assert_eq!(rc4.metadata["io.openshift.upgrades.graph.release.channels"], "candidate-4.12,candidate-4.13");
        assert_eq!(versions(&g.updates_from("4.12.0-rc.2").unwrap().available), ["4.12.0-rc.4", "4.12.0-rc.3"]);
        assert_eq!(g.updates_from("4.12.0-rc.4").unwrap(), Updates::default());
        // A released 4.12.0 is not in a graph of release candidates.
        assert_eq!(g.updates_from("4.12.0"), Err(GraphError::VersionNotFound { version: "4.12.0".into() }));
        assert_eq!(g.find("4.12.0-rc.3").unwrap().version, "4.12.0-rc.3");
        assert_eq!(g.find("4.12.0-rc.3+build.1"), None);
        assert_eq!(g.find("v4.12.0-rc.3"), None);
    }

    #[test]
    fn update_graph_stable_4_7_conditional_by_hand() {
        let (g, _) = load("stable-4.7_amd64_v1.json");
        let u = g.updates_from("4.7.2").unwrap();
        let mut expected: Vec<String> = [
            60, 59, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 34, 33, 32, 31,
        ]
        .iter()
        .chain(&[30, 23, 22, 21, 19, 18, 16, 13, 12, 11, 9, 8, 7, 6, 3])
        .map(|z| format!("4.7.{z}"))
        .collect();
        assert_eq!(versions(&u.available), expected.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(u.conditional.len(), 1);
        assert_eq!(u.conditional[0].release.version, "4.7.4");
        assert!(!versions(&u.available).contains(&"4.7.4"));
        assert_eq!(u.conditional[0].risks.len(), 1);
        let vsphere = &u.conditional[0].risks[0];
        assert_eq!(vsphere.name, "VSphereNodeNameChanges");
        assert_eq!(vsphere.url, "https://bugzilla.redhat.com/show_bug.cgi?id=1942207#c3");
        assert_eq!(
            vsphere.matching_rules,
            [promql(
                "cluster_infrastructure_provider{type=~\"VSphere|None\"}\nor\n0 * cluster_infrastructure_provider\n"
            )]
        );

        let u = g.updates_from("4.6.20").unwrap();
        assert_eq!(u.available.len(), 34);
        assert_eq!((u.available[0].version.as_str(), u.available[33].version.as_str()), ("4.6.62", "4.6.21"));
        assert!(u.available.iter().all(|r| r.version.starts_with("4.6.")));
        assert_eq!(versions(&u.conditional.iter().map(|c| c.release.clone()).collect::<Vec<_>>()), ["4.7.4"]);
        let names: Vec<&str> = u.conditional[0].risks.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["AuthOAuthProxyLeakedConnections", "VSphereHW14CrossNodeNetworkingError", "VSphereNodeNameChanges"]
        );

        // 4.7.4 itself is past the blocked edges.
        let u = g.updates_from("4.7.4").unwrap();
        assert!(u.conditional.is_empty());
        expected.pop(); // 4.7.3 is older than 4.7.4
        assert_eq!(versions(&u.available), expected.iter().map(String::as_str).collect::<Vec<_>>());

        // stable-4.8 keeps only the 4.7.x group.
        let (g8, _) = load("stable-4.8_amd64_v1.json");
        let u = g8.updates_from("4.7.2").unwrap();
        assert_eq!(u.conditional.len(), 1);
        assert_eq!(u.conditional[0].release.version, "4.7.4");
        assert_eq!(u.conditional[0].risks, std::slice::from_ref(vsphere));
    }

    #[test]
    fn update_graph_an_edge_both_plain_and_conditional_is_conditional_only() {
        let (_, mut doc) = load("stable-4.7_amd64_v1.json");
        let index =
            |doc: &Value, v: &str| doc["nodes"].as_array().unwrap().iter().position(|n| n["version"] == v).unwrap();
        let (from, to) = (index(&doc, "4.7.2"), index(&doc, "4.7.4"));
        doc["edges"].as_array_mut().unwrap().push(json!([from, to]));
        let g = parse(doc.to_string().as_bytes()).unwrap();
        assert_eq!(g.edges.len(), 3245);
        let u = g.updates_from("4.7.2").unwrap();
        assert_eq!(u.available.len(), 42);
        assert!(!versions(&u.available).contains(&"4.7.4"));
        assert_eq!(u.conditional.len(), 1);
        assert_eq!(u.conditional[0].release.version, "4.7.4");
    }

    #[test]
    fn update_graph_conditional_groups_merge_and_unknown_targets_drop() {
        let node = |v: &str| json!({"version": v, "payload": format!("example.com/os@{v}"), "metadata": {}});
        let r = |name: &str, msg: &str| json!({"name": name, "message": msg, "matchingRules": [{"type": "Always"}]});
        let doc = json!({
            "version": 1,
            "nodes": [node("1.0.0"), node("1.1.0"), node("1.2.0"), node("2.0.0")],
            "edges": [[0, 1], [0, 2], [0, 3], [0, 1]],
            "conditionalEdges": [
                {"edges": [{"from": "1.0.0", "to": "1.1.0"}, {"from": "1.0.0", "to": "9.9.9"}],
                 "risks": [r("A", "first A"), r("B", "")]},
                {"edges": [{"from": "1.0.0", "to": "1.1.0"}, {"from": "1.0.0", "to": "2.0.0"}, {"from": "1.1.0", "to": "1.2.0"}],
                 "risks": [r("A", "second A"), r("C", "")]},
            ],
            "somethingNew": true,
        });
        let g = parse(doc.to_string().as_bytes()).unwrap();
        let u = g.updates_from("1.0.0").unwrap();
        assert_eq!(versions(&u.available), ["1.2.0"]);
        let got: Vec<(&str, Vec<(&str, &str)>)> = u
            .conditional
            .iter()
            .map(|c| {
                (c.release.version.as_str(), c.risks.iter().map(|r| (r.name.as_str(), r.message.as_str())).collect())
            })
            .collect();
        assert_eq!(
            got,
            [("2.0.0", vec![("A", "second A"), ("C", "")]), ("1.1.0", vec![("A", "first A"), ("B", ""), ("C", "")])]
        );
        assert_eq!(u.conditional[1].release.payload, "example.com/os@1.1.0");
        let u = g.updates_from("1.1.0").unwrap();
        assert!(u.available.is_empty());
        assert_eq!(u.conditional.len(), 1);
        assert_eq!(u.conditional[0].release.version, "1.2.0");
        assert_eq!(g.updates_from("2.0.0").unwrap(), Updates::default());
        // conditionalEdges absent or null: none.
        let doc = json!({"version": 1, "nodes": [node("1.0.0"), node("1.1.0")], "edges": [[0, 1]]});
        assert_eq!(
            versions(&parse(doc.to_string().as_bytes()).unwrap().updates_from("1.0.0").unwrap().available),
            ["1.1.0"]
        );
        let doc = json!({"version": 1, "nodes": [node("1.0.0")], "edges": [], "conditionalEdges": null});
        assert!(parse(doc.to_string().as_bytes()).unwrap().conditional_edges.is_empty());
    }

    #[test]
    fn update_graph_current_version_not_found() {
        let (g, _) = load("stable-4.9_amd64_v1.json");
        for v in ["4.1.0", "not a version", "4.9", ""] {
            let e = g.updates_from(v).unwrap_err();
            assert_eq!(e, GraphError::VersionNotFound { version: v.into() });
            assert_eq!(e.reason(), "VersionNotFound");
        }
        let long = "9".repeat(500);
        match g.updates_from(&long) {
            Err(GraphError::VersionNotFound { version }) => assert_eq!(version, format!("{}...", "9".repeat(200))),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            GraphError::VersionNotFound { version: "4.1.0".into() }.to_string(),
            "version 4.1.0 is not in the update graph"
        );
    }

    #[test]
    fn update_graph_bad_input_names_the_field() {
        let node = |v: &str| json!({"version": v, "payload": "example.com/os", "metadata": {}});
        let reason = match parse(b"<html>502 Bad Gateway</html>") {
            Err(e) => {
                assert_eq!(e.reason(), "ResponseInvalid");
                e.to_string()
            }
            Ok(g) => panic!("{g:?}"),
        };
        assert!(reason.starts_with("invalid update graph: not JSON: expected value at line 1 column 1"), "{reason}");
        assert_eq!(invalid_reason(&json!([1])), "the graph must be a JSON object, got a list");
        assert_eq!(
            invalid_reason(&json!({"version": 2, "nodes": [], "edges": []})),
            "version: 2 is not supported (want 1)"
        );
        assert_eq!(
            invalid_reason(&json!({"version": "1", "nodes": [], "edges": []})),
            "version: \"1\" is not supported (want 1)"
        );
        assert_eq!(invalid_reason(&json!({"nodes": [], "edges": []})), "version: missing (want 1)");
        assert_eq!(invalid_reason(&json!({"version": 1, "edges": []})), "missing field `nodes`");
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0"), node("1.1.0")], "edges": [[0, 1], [1, 5]]})),
            "edges[1]: node index 5 is out of range (2 nodes)"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0"), node("1.1.0")], "edges": [[0, 1], [7, 0]]})),
            "edges[1]: node index 7 is out of range (2 nodes)"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0"), node("1.1.0")], "edges": [[0, -1]]})),
            "edges[0][1]: invalid value: integer `-1`, expected an integer from 0 to 18446744073709551615"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0")], "edges": [[0, "1"]]})),
            "edges[0][1]: invalid type: string \"1\", expected an integer"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0"), node("4.7")], "edges": []})),
            "nodes[1].version: \"4.7\" is not a semantic version: unexpected end of input while parsing minor version number"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0"), node("1.1.0"), node("1.0.0")], "edges": []})),
            "nodes[2].version: \"1.0.0\" is already the version of nodes[0]"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0"), {"version": "1.1.0"}], "edges": []})),
            "nodes[1]: missing field `payload`"
        );
        assert_eq!(
            invalid_reason(&json!({"version": 1, "nodes": [node("1.0.0")], "edges": [],
                "conditionalEdges": [{"edges": [], "risks": [{"name": "X", "matchingRules": [{"promql": {"promql": "up"}}]}]}]})),
            "conditionalEdges[0].risks[0].matchingRules[0]: missing field `type`"
        );
        let long = format!("1.0.0-{}", "x".repeat(300));
        let mut huge = node(&long);
        huge["version"] = json!(format!("{long} "));
        let r = invalid_reason(&json!({"version": 1, "nodes": [huge], "edges": []}));
        assert_eq!(
            r,
            format!(
                "nodes[0].version: \"{}...\" is not a semantic version: unexpected character ' ' after pre-release \
                 identifier",
                &long[..200]
            )
        );
    }

    #[test]
    fn update_graph_matching_rules_round_trip() {
        let rules = json!([
            {"type": "Always"},
            {"type": "PromQL", "promql": {"promql": "up == 1"}},
            {"type": "Hypothetical"},
        ]);
        let parsed: Vec<MatchingRule> = serde_json::from_value(rules.clone()).unwrap();
        assert_eq!(parsed, [MatchingRule::Always, promql("up == 1"), MatchingRule::Other("Hypothetical".into())]);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), rules);
        // Fields of rule types aloft does not know are dropped; a PromQL rule without its query
        // cannot be evaluated by anyone and is kept as an unknown rule.
        let odd: Vec<MatchingRule> = serde_json::from_value(
            json!([{"type": "Hypothetical", "when": 1}, {"type": "PromQL"}, {"type": "PromQL", "promql": {}}]),
        )
        .unwrap();
        assert_eq!(
            odd,
            vec![
                MatchingRule::Other("Hypothetical".into()),
                MatchingRule::Other("PromQL".into()),
                MatchingRule::Other("PromQL".into())
            ]
        );
        let r: Risk = serde_json::from_value(json!({"name": "N"})).unwrap();
        assert_eq!(r, Risk { url: String::new(), name: "N".into(), message: String::new(), matching_rules: vec![] });
    }

    #[test]
    fn update_graph_served_risks_are_promql_only_and_evaluate_unknown() {
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for name in FILES {
            let (_, doc) = load(name);
            for group in doc["conditionalEdges"].as_array().unwrap() {
                for r in group["risks"].as_array().unwrap() {
                    for rule in r["matchingRules"].as_array().unwrap() {
                        *kinds.entry(rule["type"].as_str().unwrap().to_string()).or_default() += 1;
                    }
                }
            }
        }
        assert_eq!(kinds, BTreeMap::from([("PromQL".to_string(), 10)]));

        let (g, _) = load("stable-4.7_amd64_v1.json");
        let u = g.updates_from("4.6.20").unwrap();
        let vsphere_q =
            "cluster_infrastructure_provider{type=~\"VSphere|None\"} or 0 * cluster_infrastructure_provider";
        let vsphere_names =
            "VSphereNodeNameChanges: vSphere clusters leveraging the vSphere cloud provider may lose node \
                             names which can have serious impacts on the stability of the control plane and workloads. \
                             https://bugzilla.redhat.com/show_bug.cgi?id=1942207#c3";
        let Recommendation::Unknown { reason, message } = evaluate(&u.conditional[0].risks) else {
            panic!("PromQL rules only: Unknown")
        };
        assert_eq!(reason, "EvaluationFailed");
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(lines.len(), 3, "a line a risk: {message}");
        assert!(
            lines[0].starts_with(
                "could not evaluate exposure to AuthOAuthProxyLeakedConnections: aloft does not evaluate PromQL rules \
                 (max(cluster_proxy_enabled{type=~\"https?\"})); AuthOAuthProxyLeakedConnections: "
            ),
            "{}",
            lines[0]
        );
        // Each risk's own message and URL come with it: what the reader needs to judge it.
        for (line, risk) in lines.iter().zip(&u.conditional[0].risks) {
            assert!(
                line.ends_with(&format!(
                    "{} {}",
                    risk.message.split_whitespace().collect::<Vec<_>>().join(" "),
                    risk.url
                )),
                "{line}"
            );
        }
        assert_eq!(
            lines[2],
            format!("could not evaluate exposure to VSphereNodeNameChanges: aloft does not evaluate PromQL rules ({vsphere_q}); {vsphere_names}")
        );
        let (g8, _) = load("stable-4.8_amd64_v1.json");
        let mut risks = g8.updates_from("4.7.0").unwrap().conditional.remove(0).risks;
        assert_eq!(
            evaluate(&risks),
            Recommendation::Unknown {
                reason: "EvaluationFailed".into(),
                message: format!(
                    "could not evaluate exposure to VSphereNodeNameChanges: aloft does not evaluate PromQL rules ({vsphere_q}); {vsphere_names}"
                ),
            }
        );
        // The same served risk with an Always rule after its PromQL one: the PromQL rule is
        // skipped, Always decides.
        risks[0].matching_rules.push(MatchingRule::Always);
        assert_eq!(
            evaluate(&risks),
            Recommendation::NotRecommended {
                reason: "VSphereNodeNameChanges".into(),
                message: "vSphere clusters leveraging the vSphere cloud provider may lose node names which can have \
                          serious impacts on the stability of the control plane and workloads. \
                          https://bugzilla.redhat.com/show_bug.cgi?id=1942207#c3"
                    .into(),
            }
        );
    }

    #[test]
    fn update_graph_evaluate_rules() {
        assert_eq!(evaluate(&[]), Recommendation::Recommended);
        let always = risk("Always1", vec![MatchingRule::Always]);
        assert_eq!(
            evaluate(std::slice::from_ref(&always)),
            Recommendation::NotRecommended {
                reason: "Always1".into(),
                message: "Always1 breaks things. https://example.com/Always1".into()
            }
        );
        // PromQL first, Always second: Always decides. Unknown types are skipped too.
        let mixed = risk("Mixed", vec![promql("up"), MatchingRule::Other("Future".into()), MatchingRule::Always]);
        let no_url = Risk { url: String::new(), ..risk("NoUrl", vec![MatchingRule::Always]) };
        let only_promql = risk("OnlyPromQL", vec![promql("a\n  or\tb"), promql("second")]);
        let no_rules = risk("NoRules", vec![]);
        let only_unknown = risk("OnlyUnknown", vec![MatchingRule::Other("Future".into())]);
        assert_eq!(
            evaluate(&[only_promql.clone(), mixed.clone(), no_rules.clone(), no_url.clone()]),
            Recommendation::NotRecommended {
                reason: "MultipleReasons".into(),
                message: "Mixed breaks things. https://example.com/Mixed\n\nNoUrl breaks things.".into(),
            }
        );
        assert_eq!(
            evaluate(&[only_promql.clone(), mixed]),
            Recommendation::NotRecommended {
                reason: "Mixed".into(),
                message: "Mixed breaks things. https://example.com/Mixed".into()
            }
        );
        assert_eq!(
            evaluate(&[only_promql, no_rules, only_unknown]),
            Recommendation::Unknown {
                reason: "EvaluationFailed".into(),
                message: "could not evaluate exposure to OnlyPromQL: aloft does not evaluate PromQL rules (a or b); \
                          OnlyPromQL: OnlyPromQL breaks things. https://example.com/OnlyPromQL\n\
                          could not evaluate exposure to NoRules: it has no matching rules aloft can evaluate; \
                          NoRules: NoRules breaks things. https://example.com/NoRules\n\
                          could not evaluate exposure to OnlyUnknown: it has no matching rules aloft can evaluate; \
                          OnlyUnknown: OnlyUnknown breaks things. https://example.com/OnlyUnknown"
                    .into(),
            }
        );
        let url_only = Risk { message: String::new(), ..risk("UrlOnly", vec![MatchingRule::Always]) };
        assert_eq!(
            evaluate(&[url_only]),
            Recommendation::NotRecommended { reason: "UrlOnly".into(), message: "https://example.com/UrlOnly".into() }
        );
    }
}
