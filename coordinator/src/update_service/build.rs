//! From graph-data to the graphs served, one per channel and architecture, the way OpenShift's
//! update service builds them: base edges from each release's `previous`/`next`, edge and
//! release edits from `io.openshift.upgrades.graph.*` metadata (`raw/metadata.json` and the
//! release files' own), blocked edges dropped or turned into conditional updates with their
//! risks, channel membership in `io.openshift.upgrades.graph.release.channels`, then the
//! channel and architecture filters. The graphs are serialized once per load: a query is a
//! lookup, as Cincinnati serves a pre-serialized graph.
//!
//! Checked against the real thing: with releases whose base edges are those of the graphs
//! OpenShift's service served (shared/testdata/cincinnati-graphs), the real graph-data yields
//! the same edges, the same conditional updates with the same risks and the same channel lists.

use super::graph_data::{GraphData, LoadError, Release, Risk};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The metadata key every graph edit lives under (Cincinnati's default prefix).
pub const KEY_PREFIX: &str = "io.openshift.upgrades.graph";
/// Where a node lists its channels, as clients (the CVO's `status.desired.channels`) read them.
pub const CHANNELS_KEY: &str = "io.openshift.upgrades.graph.release.channels";

/// What a load produced: every (channel, architecture) graph, serialized, and counts to report.
#[derive(Debug, Default)]
pub struct Built {
    graphs: HashMap<(String, String), Arc<str>>,
    /// Channels per architecture, for the channel list.
    channels: BTreeMap<String, BTreeSet<String>>,
    /// What each (channel, architecture) graph holds, for `--check`.
    stats: BTreeMap<(String, String), GraphStats>,
    pub summary: Summary,
}

/// What a load found, for the log line and `update-service --check`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Releases served, by architecture (after `release.remove`).
    pub releases: BTreeMap<String, usize>,
    pub channels: usize,
    pub blocked_edge_files: usize,
    /// Update edges in the whole graph, over all architectures (before the channel filter).
    pub edges: usize,
    /// Edges removed (by blocked edges without a risk or by metadata removals) and not at risk.
    pub dropped: usize,
    /// Edges kept only as conditional updates.
    pub conditional: usize,
    /// Channel entries naming no release: a release not published yet, or a misspelt one.
    pub unmatched_channel_entries: usize,
}

/// What one served graph holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GraphStats {
    pub releases: usize,
    pub updates: usize,
    pub conditional: usize,
    pub newest: String,
}

/// The graph of a channel nothing is in: what Cincinnati answers for a channel it does not know.
pub const EMPTY_GRAPH: &str = r#"{"version":1,"nodes":[],"edges":[],"conditionalEdges":[]}"#;

impl Built {
    /// The serialized graph of `channel` for `arch` (the empty graph when none of its releases
    /// is in that channel).
    pub fn graph(&self, channel: &str, arch: &str) -> Arc<str> {
        self.graphs.get(&(channel.to_string(), arch.to_string())).cloned().unwrap_or_else(|| Arc::from(EMPTY_GRAPH))
    }

    /// A digest of every graph served, so a reload can tell whether anything changed.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut keys: Vec<_> = self.graphs.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (k, g) in keys {
            k.hash(&mut h);
            g.hash(&mut h);
        }
        h.finish()
    }

    /// What `update-service --check` prints: the totals, then a line per channel and
    /// architecture.
    pub fn report(&self) -> String {
        let mut out = format!("{}\n", self.summary);
        if self.stats.is_empty() {
            out.push_str("no channel offers a release: check that channels' versions name releases\n");
        }
        for ((channel, arch), s) in &self.stats {
            out.push_str(&format!(
                "{channel} ({arch}): {} release(s), newest {}; {} update(s), {} conditional\n",
                s.releases, s.newest, s.updates, s.conditional
            ));
        }
        out
    }

    /// The channels offering at least one release for `arch`, sorted.
    pub fn channels(&self, arch: &str) -> Vec<String> {
        self.channels.get(arch).map(|c| c.iter().cloned().collect()).unwrap_or_default()
    }
}

/// An edge between two releases of one architecture, by their index in that architecture's list.
type Edge = (usize, usize);

/// A release of one architecture with its metadata after `raw/metadata.json`.
struct Node<'a> {
    release: &'a Release,
    metadata: BTreeMap<String, String>,
}

fn key(suffix: &str) -> String {
    format!("{KEY_PREFIX}.{suffix}")
}

/// Build every graph `data` describes.
pub fn build(data: &GraphData, raw_path: &Path) -> Result<Built, LoadError> {
    let mut built = Built::default();
    built.summary.channels = data.channels.len();
    built.summary.blocked_edge_files = data.blocked_edges.len();
    let arches: BTreeSet<&str> = data.releases.iter().map(|r| r.arch.as_str()).collect();
    let mut matched_entries: BTreeSet<(usize, usize)> = BTreeSet::new();
    for arch in arches {
        build_arch(data, raw_path, arch, &mut built, &mut matched_entries)?;
    }
    built.summary.unmatched_channel_entries =
        data.channels.iter().map(|c| c.versions.len()).sum::<usize>() - matched_entries.len();
    Ok(built)
}

/// Whether a graph-data version (maybe with `+arch`) names `release` of `arch`.
fn names(entry: &semver::Version, release: &semver::Version, arch: &str) -> bool {
    entry.major == release.major
        && entry.minor == release.minor
        && entry.patch == release.patch
        && entry.pre == release.pre
        && (entry.build.is_empty() || entry.build.as_str() == arch)
}

/// Whether a blocked edge's `to` names `release` of `arch`: as a channel entry does, except
/// that `X-s390x` (how s390x releases were named before build metadata) names only the s390x
/// release of that name, as OSUS reads it (`X-s390x+s390x`).
fn names_target(to: &semver::Version, release: &semver::Version, arch: &str) -> bool {
    if to.build.is_empty() && to.pre.as_str() == "s390x" && arch != "s390x" {
        return false;
    }
    names(to, release, arch)
}

/// A comma-separated list of versions in a metadata key.
fn version_list(value: &str, source: &Path, k: &str) -> Result<Vec<semver::Version>, LoadError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            semver::Version::parse(s).map_err(|e| LoadError {
                path: source.to_path_buf(),
                message: format!("metadata {k}: {s:?} is not a semantic version: {e}"),
            })
        })
        .collect()
}

fn build_arch(
    data: &GraphData,
    raw_path: &Path,
    arch: &str,
    built: &mut Built,
    matched_entries: &mut BTreeSet<(usize, usize)>,
) -> Result<(), LoadError> {
    // Releases of this architecture, with their metadata as raw/metadata.json extends it
    // (a key both have gets the raw value appended, comma-separated, as Cincinnati does).
    let mut nodes: Vec<Node> = Vec::new();
    for r in data.releases.iter().filter(|r| r.arch == arch) {
        let mut metadata = r.metadata.clone();
        if let Some(extra) = data.raw_metadata.get(&r.version) {
            for (k, v) in extra {
                metadata.entry(k.clone()).and_modify(|have| *have = format!("{have},{v}")).or_insert_with(|| v.clone());
            }
        }
        if metadata.get(&key("release.remove")).is_some_and(|v| v == "true") {
            continue;
        }
        nodes.push(Node { release: r, metadata });
    }
    nodes.sort_by(|a, b| a.release.version.cmp(&b.release.version));
    let index: HashMap<&semver::Version, usize> =
        nodes.iter().enumerate().map(|(i, n)| (&n.release.version, i)).collect();
    // The file an edit came from, for errors: the release file, or raw/metadata.json.
    let source_of = |n: &Node, k: &str| -> PathBuf {
        if n.release.metadata.contains_key(k) {
            n.release.source.clone()
        } else {
            raw_path.to_path_buf()
        }
    };
    let forward = |from: usize, to: usize, n: &Node, k: &str| -> Result<(), LoadError> {
        if from < to {
            Ok(())
        } else {
            Err(LoadError {
                path: source_of(n, k),
                message: format!(
                    "metadata {k} of {}: an update from {} to {} does not go forward",
                    n.release.version, nodes[from].release.version, nodes[to].release.version
                ),
            })
        }
    };

    // Base edges, then the metadata's additions.
    let mut edges: BTreeSet<Edge> = BTreeSet::new();
    for (i, n) in nodes.iter().enumerate() {
        edges.extend(n.release.previous.iter().filter_map(|p| index.get(p)).map(|&p| (p, i)));
        edges.extend(n.release.next.iter().filter_map(|x| index.get(x)).map(|&x| (i, x)));
        for (suffix, incoming) in [("previous.add", true), ("next.add", false)] {
            let k = key(suffix);
            let Some(list) = n.metadata.get(&k) else { continue };
            for v in version_list(list, &source_of(n, &k), &k)? {
                let Some(&other) = index.get(&v) else { continue };
                let edge = if incoming { (other, i) } else { (i, other) };
                forward(edge.0, edge.1, n, &k)?;
                edges.insert(edge);
            }
        }
    }
    // OSUS's order: the additions above, then the conditional updates (a risk's file matched
    // against the updates as added), then every removal (metadata removals and blocked edges
    // without a risk). An update both removed and at risk is therefore served as conditional,
    // as OSUS serves it: the risk says why, where a drop would only hide it.
    let mut incoming: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(p, t) in &edges {
        incoming.entry(t).or_default().push(p);
    }
    let mut dropped: BTreeSet<Edge> = BTreeSet::new();
    let mut risks: BTreeMap<Edge, Vec<&Risk>> = BTreeMap::new();
    for b in &data.blocked_edges {
        for (t, n) in nodes.iter().enumerate() {
            if !names_target(&b.to, &n.release.version, arch) {
                continue;
            }
            for &p in incoming.get(&t).into_iter().flatten() {
                if !b.from.is_match(&format!("{}+{arch}", nodes[p].release.version)) {
                    continue;
                }
                match &b.risk {
                    None => {
                        dropped.insert((p, t));
                    }
                    Some(risk) => {
                        let list = risks.entry((p, t)).or_default();
                        if !list.contains(&risk) {
                            list.push(risk);
                        }
                    }
                }
            }
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        for (suffix, is_incoming) in [("previous.remove", true), ("next.remove", false)] {
            let k = key(suffix);
            let Some(list) = n.metadata.get(&k) else { continue };
            // "*": every update into (or out of) the release.
            if list.trim() == "*" {
                dropped.extend(edges.iter().filter(|&&(p, t)| if is_incoming { t == i } else { p == i }));
                continue;
            }
            for v in version_list(list, &source_of(n, &k), &k)? {
                if let Some(&other) = index.get(&v) {
                    dropped.insert(if is_incoming { (other, i) } else { (i, other) });
                }
            }
        }
        let k = key("previous.remove_regex");
        if let Some(rx) = n.metadata.get(&k) {
            let re = regex::Regex::new(rx).map_err(|e| LoadError {
                path: source_of(n, &k),
                message: format!("metadata {k} of {}: {rx:?} is not a regular expression: {e}", n.release.version),
            })?;
            dropped.extend(
                incoming
                    .get(&i)
                    .into_iter()
                    .flatten()
                    .filter(|&&p| re.is_match(&format!("{}+{arch}", nodes[p].release.version)))
                    .map(|&p| (p, i)),
            );
        }
    }
    dropped.retain(|e| edges.contains(e));
    built.summary.edges += edges.len();
    edges.retain(|e| !dropped.contains(e) && !risks.contains_key(e));
    built.summary.dropped += dropped.iter().filter(|e| !risks.contains_key(e)).count();
    built.summary.conditional += risks.len();

    // Channel membership: each node's channels, sorted as the service lists them (by what
    // follows the channel's first "-" as text, then what precedes it: "eus-4.10,candidate-4.8,...").
    let mut member_of: Vec<Vec<&str>> = vec![Vec::new(); nodes.len()];
    for (ci, c) in data.channels.iter().enumerate() {
        for (ei, entry) in c.versions.iter().enumerate() {
            for (i, n) in nodes.iter().enumerate() {
                if names(entry, &n.release.version, arch) {
                    matched_entries.insert((ci, ei));
                    if !member_of[i].contains(&c.name.as_str()) {
                        member_of[i].push(&c.name);
                    }
                }
            }
        }
    }
    for list in &mut member_of {
        list.sort_by_key(|c| {
            let (prefix, suffix) = c.split_once('-').unwrap_or(("", c));
            (suffix.to_string(), prefix.to_string())
        });
    }

    // The nodes as served: metadata without the graph edits, with the channel list.
    let served: Vec<Value> = nodes
        .iter()
        .zip(&member_of)
        .map(|(n, channels)| {
            let mut metadata: BTreeMap<&str, &str> =
                n.metadata.iter().filter(|(k, _)| !is_edit(k)).map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let joined = channels.join(",");
            metadata.insert(CHANNELS_KEY, &joined);
            json!({"version": n.release.version.to_string(), "payload": n.release.payload, "metadata": metadata})
        })
        .collect();
    built.summary.releases.insert(arch.to_string(), nodes.len());

    let channel_names: BTreeSet<&str> = member_of.iter().flatten().copied().collect();
    for channel in channel_names {
        let members: Vec<usize> = (0..nodes.len()).filter(|&i| member_of[i].contains(&channel)).collect();
        let position: HashMap<usize, usize> = members.iter().enumerate().map(|(pos, &i)| (i, pos)).collect();
        let graph_edges: Vec<[usize; 2]> =
            edges.iter().filter_map(|(p, t)| Some([*position.get(p)?, *position.get(t)?])).collect();
        // Conditional updates grouped by their risks, as the service groups them.
        let mut groups: Vec<(Vec<&Risk>, Vec<Value>)> = Vec::new();
        for ((p, t), rs) in &risks {
            if !(position.contains_key(p) && position.contains_key(t)) {
                continue;
            }
            let edge =
                json!({"from": nodes[*p].release.version.to_string(), "to": nodes[*t].release.version.to_string()});
            match groups.iter_mut().find(|(g, _)| g == rs) {
                Some((_, list)) => list.push(edge),
                None => groups.push((rs.clone(), vec![edge])),
            }
        }
        let stats = GraphStats {
            releases: members.len(),
            updates: graph_edges.len(),
            conditional: groups.iter().map(|(_, e)| e.len()).sum(),
            newest: members.last().map(|&i| nodes[i].release.version.to_string()).unwrap_or_default(),
        };
        built.stats.insert((channel.to_string(), arch.to_string()), stats);
        let conditional: Vec<Value> =
            groups.into_iter().map(|(rs, edges)| json!({"edges": edges, "risks": rs})).collect();
        let graph = json!({
            "version": 1,
            "nodes": members.iter().map(|&i| served[i].clone()).collect::<Vec<_>>(),
            "edges": graph_edges,
            "conditionalEdges": conditional,
        });
        built.graphs.insert((channel.to_string(), arch.to_string()), Arc::from(graph.to_string()));
        built.channels.entry(arch.to_string()).or_default().insert(channel.to_string());
    }
    Ok(())
}

/// The metadata keys that edit the graph and are consumed by the build, not served.
fn is_edit(k: &str) -> bool {
    k.strip_prefix(KEY_PREFIX)
        .and_then(|s| s.strip_prefix('.'))
        .is_some_and(|s| s.starts_with("previous.") || s.starts_with("next.") || s == "release.remove")
}

#[cfg(test)]
mod tests {
    use super::super::graph_data::{self, GraphData};
    use super::*;
    use std::path::PathBuf;

    const GRAPH_DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/testdata/cincinnati-graph-data");
    const GRAPHS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/testdata/cincinnati-graphs/");

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    fn release(version: &str, arch: &str, previous: &[&str]) -> Release {
        Release {
            version: v(version),
            arch: arch.into(),
            payload: format!("ostree+http://repo.example/os#aloft/{arch}@{}", version.replace('.', "")),
            previous: previous.iter().map(|p| v(p)).collect(),
            next: vec![],
            metadata: BTreeMap::new(),
            source: PathBuf::from(format!("releases/{version}-{arch}.yaml")),
        }
    }

    fn channel(name: &str, versions: &[&str]) -> graph_data::Channel {
        graph_data::Channel {
            name: name.into(),
            versions: versions.iter().map(|s| v(s)).collect(),
            source: PathBuf::from(format!("channels/{name}.yaml")),
        }
    }

    fn block(to: &str, from: &str, risk: Option<&str>) -> graph_data::BlockedEdge {
        graph_data::BlockedEdge {
            to: v(to),
            from: regex::Regex::new(from).unwrap(),
            risk: risk.map(|name| Risk {
                url: format!("https://bugs.example/{name}"),
                name: name.into(),
                message: format!("{name} may happen."),
                matching_rules: vec![json!({"type": "Always"})],
            }),
            source: PathBuf::from(format!("blocked-edges/{to}-{}.yaml", risk.unwrap_or("drop"))),
        }
    }

    fn data(
        releases: Vec<Release>,
        channels: Vec<graph_data::Channel>,
        blocked: Vec<graph_data::BlockedEdge>,
    ) -> GraphData {
        GraphData {
            schema: graph_data::SCHEMA,
            releases,
            channels,
            blocked_edges: blocked,
            raw_metadata: BTreeMap::new(),
        }
    }

    fn served(b: &Built, channel: &str, arch: &str) -> Value {
        serde_json::from_str(&b.graph(channel, arch)).unwrap()
    }

    /// The graph's updates as (from, to) version pairs, and its conditional ones with the names
    /// of their risks.
    /// Updates by (from, to) version.
    type Plain = BTreeSet<(String, String)>;
    /// Conditional updates by (from, to) version, with the names of their risks.
    type Risky = BTreeMap<(String, String), Vec<String>>;

    fn updates(g: &Value) -> (Plain, Risky) {
        let nodes = g["nodes"].as_array().unwrap();
        let name = |i: &Value| nodes[i.as_u64().unwrap() as usize]["version"].as_str().unwrap().to_string();
        let plain = g["edges"].as_array().unwrap().iter().map(|e| (name(&e[0]), name(&e[1]))).collect();
        let mut cond: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for group in g["conditionalEdges"].as_array().into_iter().flatten() {
            for e in group["edges"].as_array().unwrap() {
                let key = (e["from"].as_str().unwrap().to_string(), e["to"].as_str().unwrap().to_string());
                let names = group["risks"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_string());
                cond.entry(key).or_default().extend(names);
            }
        }
        cond.values_mut().for_each(|l| l.sort());
        (plain, cond)
    }

    fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn blocked_edges_drop_updates_or_make_them_conditional_per_architecture() {
        let mut releases = Vec::new();
        for arch in ["amd64", "arm64"] {
            releases.push(release("1.0.0", arch, &[]));
            releases.push(release("1.0.1", arch, &["1.0.0"]));
            releases.push(release("1.1.0", arch, &["1.0.0", "1.0.1"]));
            releases.push(release("1.2.0", arch, &["1.0.0", "1.0.1", "1.1.0"]));
        }
        let d = data(
            releases,
            vec![channel("stable-1", &["1.0.0", "1.0.1", "1.1.0", "1.2.0"])],
            vec![
                // 1.0.0 -> 1.1.0 dropped on every architecture ("from" is searched in
                // "<version>+<arch>", not anchored).
                block("1.1.0", r"^1\.0\.0\+", None),
                // A risk for arm64 only (build metadata on "to").
                block("1.2.0+arm64", ".*", Some("ArmRisk")),
                // Two risks on 1.0.1 -> 1.2.0 on amd64 (the second by the "+amd64" suffix).
                block("1.2.0", r"1\.0\.1", Some("First")),
                block("1.2.0", r"1\.0\.1\+amd64$", Some("Second")),
                // A drop with no risk on amd64; on arm64 the update is also at risk
                // (ArmRisk), and a risk wins over a drop, as in OSUS.
                block("1.2.0", r"^1\.0\.0\+amd64", None),
                block("1.2.0+arm64", r"^1\.0\.0\+", None),
            ],
        );
        let b = build(&d, Path::new("raw/metadata.json")).unwrap();
        let (plain, cond) = updates(&served(&b, "stable-1", "amd64"));
        assert_eq!(plain, pairs(&[("1.0.0", "1.0.1"), ("1.0.1", "1.1.0"), ("1.1.0", "1.2.0")]));
        assert_eq!(cond.len(), 1, "{cond:?}");
        assert_eq!(cond[&("1.0.1".into(), "1.2.0".into())], ["First", "Second"]);

        let arm = served(&b, "stable-1", "arm64");
        let (plain, cond) = updates(&arm);
        assert_eq!(plain, pairs(&[("1.0.0", "1.0.1"), ("1.0.1", "1.1.0")]));
        let names: Vec<&Vec<String>> = cond.values().collect();
        assert_eq!(cond.len(), 3, "{cond:?}");
        assert!(cond.keys().all(|(_, to)| to == "1.2.0"));
        // 1.0.0 -> 1.2.0 and 1.1.0 -> 1.2.0 share their risks: one group; 1.0.1 -> 1.2.0 has
        // two more.
        assert_eq!(cond[&("1.0.1".into(), "1.2.0".into())], ["ArmRisk", "First"], "{names:?}");
        let groups = arm["conditionalEdges"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "{arm}");
        let risk = &groups.iter().find(|g| g["edges"].as_array().unwrap().len() == 2).unwrap()["risks"][0];
        assert_eq!(
            *risk,
            json!({"url": "https://bugs.example/ArmRisk", "name": "ArmRisk", "message": "ArmRisk may happen.",
                "matchingRules": [{"type": "Always"}]})
        );
        assert_eq!((b.summary.dropped, b.summary.conditional), (3, 4), "{:?}", b.summary);
    }

    #[test]
    fn an_old_s390x_target_names_only_the_s390x_release_of_that_name() {
        let releases = vec![
            release("4.2.10", "s390x", &[]),
            release("4.2.11-s390x", "s390x", &["4.2.10"]),
            release("4.2.11", "s390x", &["4.2.10"]),
            release("4.2.10", "amd64", &[]),
            release("4.2.11-s390x", "amd64", &["4.2.10"]),
        ];
        let d = data(
            releases,
            vec![channel("stable-4.2", &["4.2.10", "4.2.11", "4.2.11-s390x"])],
            vec![block("4.2.11-s390x", ".*", None)],
        );
        let b = build(&d, Path::new("raw/metadata.json")).unwrap();
        assert_eq!(updates(&served(&b, "stable-4.2", "s390x")).0, pairs(&[("4.2.10", "4.2.11")]));
        assert_eq!(updates(&served(&b, "stable-4.2", "amd64")).0, pairs(&[("4.2.10", "4.2.11-s390x")]));
    }

    #[test]
    fn channels_filter_nodes_and_list_themselves_on_each_node() {
        let d = data(
            vec![
                release("4.8.1", "amd64", &[]),
                release("4.9.0", "amd64", &["4.8.1"]),
                release("4.9.0", "s390x", &[]),
                release("4.10.0", "amd64", &["4.9.0"]),
            ],
            vec![
                channel("stable-4.9", &["4.8.1", "4.9.0+amd64"]),
                channel("eus-4.10", &["4.8.1", "4.9.0", "4.10.0"]),
                channel("candidate-4.9", &["4.8.1", "4.9.0", "5.0.0"]),
            ],
            vec![],
        );
        let b = build(&d, Path::new("raw/metadata.json")).unwrap();
        let g = served(&b, "stable-4.9", "amd64");
        let nodes = g["nodes"].as_array().unwrap();
        assert_eq!(nodes.iter().map(|n| n["version"].as_str().unwrap()).collect::<Vec<_>>(), ["4.8.1", "4.9.0"]);
        // Sorted by the channel's version as text, then by name: as the update service lists them.
        assert_eq!(nodes[0]["metadata"][CHANNELS_KEY], "eus-4.10,candidate-4.9,stable-4.9");
        assert_eq!(g["edges"], json!([[0, 1]]));
        // 4.9.0+amd64 in stable-4.9 is not the s390x release.
        assert_eq!(served(&b, "stable-4.9", "s390x")["nodes"], json!([]));
        assert_eq!(
            served(&b, "candidate-4.9", "s390x")["nodes"][0]["metadata"][CHANNELS_KEY],
            "eus-4.10,candidate-4.9"
        );
        // A channel nothing is in, or an architecture with no release: the empty graph.
        assert_eq!(&*b.graph("fast-4.9", "amd64"), EMPTY_GRAPH);
        assert_eq!(&*b.graph("stable-4.9", "arm64"), EMPTY_GRAPH);
        assert_eq!(b.channels("amd64"), ["candidate-4.9", "eus-4.10", "stable-4.9"]);
        assert_eq!(b.channels("s390x"), ["candidate-4.9", "eus-4.10"]);
        assert_eq!(b.summary.unmatched_channel_entries, 1, "5.0.0 names no release");
        assert!(
            b.report().contains("stable-4.9 (amd64): 2 release(s), newest 4.9.0; 1 update(s), 0 conditional\n"),
            "{}",
            b.report()
        );
    }

    #[test]
    fn metadata_adds_and_removes_updates_and_releases() {
        let mut r100 = release("1.0.0", "amd64", &[]);
        r100.metadata.insert("url".into(), "https://notes.example/1.0.0".into());
        let mut r110 = release("1.1.0", "amd64", &["1.0.0"]);
        r110.metadata.insert(format!("{KEY_PREFIX}.previous.remove"), "1.0.0".into());
        let r111 = release("1.1.1", "amd64", &[]);
        let r120 = release("1.2.0", "amd64", &["1.1.1"]);
        let mut d =
            data(vec![r100, r110, r111, r120], vec![channel("c", &["1.0.0", "1.1.0", "1.1.1", "1.2.0"])], vec![]);
        // raw/metadata.json: 1.1.1 gains 1.0.0 and 1.1.0 as sources (and its removal of 1.1.0
        // wins), 1.2.0 is taken out of the graph.
        d.raw_metadata.insert(
            v("1.1.1"),
            BTreeMap::from([
                (format!("{KEY_PREFIX}.previous.add"), "1.0.0, 1.1.0".to_string()),
                (format!("{KEY_PREFIX}.previous.remove"), "1.1.0".to_string()),
            ]),
        );
        d.raw_metadata
            .insert(v("1.2.0"), BTreeMap::from([(format!("{KEY_PREFIX}.release.remove"), "true".to_string())]));
        let b = build(&d, Path::new("raw/metadata.json")).unwrap();
        let g = served(&b, "c", "amd64");
        let (plain, _) = updates(&g);
        assert_eq!(plain, pairs(&[("1.0.0", "1.1.1")]));
        let nodes = g["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3, "{g}");
        // The edits are consumed, the rest of the metadata is served.
        assert_eq!(nodes[0]["metadata"], json!({"url": "https://notes.example/1.0.0", CHANNELS_KEY: "c"}));
        assert_eq!(nodes[2]["metadata"], json!({CHANNELS_KEY: "c"}));

        // An addition that goes backwards is refused, naming where it came from.
        d.raw_metadata
            .insert(v("1.0.0"), BTreeMap::from([(format!("{KEY_PREFIX}.previous.add"), "1.1.0".to_string())]));
        let e = build(&d, Path::new("raw/metadata.json")).unwrap_err();
        assert_eq!(e.path, PathBuf::from("raw/metadata.json"));
        assert!(e.message.contains("previous.add of 1.0.0: an update from 1.1.0 to 1.0.0 does not go forward"), "{e}");
        d.raw_metadata.insert(v("1.0.0"), BTreeMap::from([(format!("{KEY_PREFIX}.previous.add"), "1.x".to_string())]));
        let e = build(&d, Path::new("raw/metadata.json")).unwrap_err();
        assert!(e.message.contains("\"1.x\" is not a semantic version"), "{e}");
    }

    /// Releases standing for those of OpenShift's served graphs: each with the sources of its
    /// incoming updates (conditional ones too) as `previous`, its payload and metadata (less
    /// the graph's own keys), as release images carry them.
    fn releases_of_served_graphs() -> Vec<(Release, Value)> {
        let mut by_key: BTreeMap<(String, String), (Value, BTreeSet<String>)> = BTreeMap::new();
        for (file, arch) in [
            ("stable-4.7_amd64_v1.json", "amd64"),
            ("stable-4.8_amd64_v1.json", "amd64"),
            ("stable-4.9_amd64_v1.json", "amd64"),
            ("stable-4.7_s390x_v1.json", "s390x"),
            ("stable-4.8_s390x_v1.json", "s390x"),
            ("stable-4.9_s390x_v1.json", "s390x"),
        ] {
            let g: Value = serde_json::from_str(&std::fs::read_to_string(format!("{GRAPHS}{file}")).unwrap()).unwrap();
            let nodes = g["nodes"].as_array().unwrap();
            let name = |i: &Value| nodes[i.as_u64().unwrap() as usize]["version"].as_str().unwrap().to_string();
            for n in nodes {
                by_key
                    .entry((n["version"].as_str().unwrap().into(), arch.into()))
                    .or_insert_with(|| (n.clone(), BTreeSet::new()));
            }
            for e in g["edges"].as_array().unwrap() {
                by_key.get_mut(&(name(&e[1]), arch.into())).unwrap().1.insert(name(&e[0]));
            }
            for group in g["conditionalEdges"].as_array().into_iter().flatten() {
                for e in group["edges"].as_array().unwrap() {
                    let to = (e["to"].as_str().unwrap().to_string(), arch.to_string());
                    by_key.get_mut(&to).unwrap().1.insert(e["from"].as_str().unwrap().into());
                }
            }
        }
        by_key
            .into_iter()
            .map(|((version, arch), (node, previous))| {
                let metadata = node["metadata"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| !k.starts_with("io.openshift.upgrades.graph.") || k.ends_with(".manifestref"))
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let r = Release {
                    version: v(&version),
                    arch,
                    payload: node["payload"].as_str().unwrap().into(),
                    previous: previous.iter().map(|p| v(p)).collect(),
                    next: vec![],
                    metadata,
                    source: PathBuf::from(format!("releases/{version}.json")),
                };
                (r, node)
            })
            .collect()
    }

    /// OpenShift's real graph-data (all 76 channels, 1,717 blocked-edges files, raw/metadata.json)
    /// over the releases of the graphs OpenShift's service served: the same graphs come out.
    #[test]
    fn the_real_graph_data_builds_the_graphs_openshift_served() {
        let empty = tempfile::tempdir().unwrap();
        let mut d = graph_data::load(Path::new(GRAPH_DATA), empty.path()).unwrap();
        assert_eq!((d.channels.len(), d.blocked_edges.len()), (76, 1717));
        let with_nodes = releases_of_served_graphs();
        d.releases = with_nodes.iter().map(|(r, _)| r.clone()).collect();
        // The served graphs lack the updates graph-data dropped: put back, as release
        // metadata would declare them, every update a blocked-edges file without a risk
        // names between these releases, so the drops are held to the real files too.
        let mut put_back = 0;
        let all: Vec<(semver::Version, String)> =
            d.releases.iter().map(|r| (r.version.clone(), r.arch.clone())).collect();
        for r in &mut d.releases {
            for b in d.blocked_edges.iter().filter(|b| b.risk.is_none() && names_target(&b.to, &r.version, &r.arch)) {
                for (from, arch) in &all {
                    let older = *from < r.version;
                    if arch == &r.arch
                        && older
                        && !r.previous.contains(from)
                        && b.from.is_match(&format!("{from}+{arch}"))
                    {
                        r.previous.push(from.clone());
                        put_back += 1;
                    }
                }
            }
        }
        assert!(put_back > 1000, "the blocked updates put back: {put_back}");
        let b = build(&d, &Path::new(GRAPH_DATA).join("raw/metadata.json")).unwrap();

        for (file, channel, arch, conditional) in [
            ("stable-4.7_amd64_v1.json", "stable-4.7", "amd64", 13),
            ("stable-4.8_amd64_v1.json", "stable-4.8", "amd64", 4),
            ("stable-4.9_amd64_v1.json", "stable-4.9", "amd64", 0),
            ("stable-4.7_s390x_v1.json", "stable-4.7", "s390x", 13),
        ] {
            let want: Value =
                serde_json::from_str(&std::fs::read_to_string(format!("{GRAPHS}{file}")).unwrap()).unwrap();
            let got = served(&b, channel, arch);
            let versions = |g: &Value| -> BTreeSet<String> {
                g["nodes"].as_array().unwrap().iter().map(|n| n["version"].as_str().unwrap().to_string()).collect()
            };
            assert_eq!(versions(&got), versions(&want), "{file}: nodes");
            let (got_plain, got_cond) = updates(&got);
            let (want_plain, want_cond) = updates(&want);
            assert_eq!(got_plain.len(), want_plain.len(), "{file}: updates");
            assert_eq!(got_plain, want_plain, "{file}: updates");
            assert_eq!(got_cond, want_cond, "{file}: conditional updates");
            assert_eq!(got_cond.len(), conditional, "{file}");
            // The groups and their risks as served (name, URL, message; the PromQL of two risks
            // was reworded in graph-data after these graphs were taken).
            let groups = |g: &Value| -> BTreeSet<String> {
                g["conditionalEdges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        let mut edges: Vec<String> = c["edges"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|e| format!("{}>{}", e["from"], e["to"]))
                            .collect();
                        edges.sort();
                        let mut risks: Vec<String> = c["risks"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|r| format!("{} {} {}", r["name"], r["url"], r["message"]))
                            .collect();
                        risks.sort();
                        format!("{edges:?} {risks:?}")
                    })
                    .collect()
            };
            assert_eq!(groups(&got), groups(&want), "{file}: conditional groups");
            // Payloads, and every node's channels for the release line this graph was served
            // for (later releases were promoted to more channels since the graph was taken).
            if channel == "stable-4.7" {
                for n in want["nodes"].as_array().unwrap() {
                    let mine = got["nodes"].as_array().unwrap().iter().find(|m| m["version"] == n["version"]).unwrap();
                    assert_eq!(mine["payload"], n["payload"]);
                    assert_eq!(mine["metadata"][CHANNELS_KEY], n["metadata"][CHANNELS_KEY], "{file}: {}", n["version"]);
                    assert_eq!(mine["metadata"]["url"], n["metadata"]["url"]);
                }
            }
        }
    }
}
