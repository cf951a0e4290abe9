//! Reading an update service's inputs: a directory in the layout of OpenShift's
//! cincinnati-graph-data (`version`, `channels/`, `blocked-edges/`, `raw/metadata.json`) and the
//! releases it places (aloft's release files).
//!
//! OpenShift's update service learns releases and their base edges from the release images in a
//! registry; aloft's releases are OS commits, so each one is a small file saying what a release
//! image's `release-metadata` says (version, `previous`, `next`, metadata) plus its payload and
//! architecture. Everything else is read in the graph-data schema as it is published, so a
//! graph-data repository written for OpenShift reads unchanged.
//!
//! A load is all or nothing: one file that does not read fails it, naming the file and the
//! field, and the caller keeps serving what it had (the graph-data "changes nothing" rule).

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The graph-data schema this service understands (cincinnati-graph-data's `version` file): a
/// repository of the same major and an equal or lower minor reads as written.
pub const SCHEMA: semver::Version = semver::Version::new(1, 1, 0);

/// What Cincinnati's channel filter and the CVO accept as a channel name.
pub const CHANNEL_CHARS: &str = r"^[0-9a-z\-\.]+$";

/// Largest input file read, so that a stray file (a disk image dropped in the directory) fails
/// the load with a message instead of taking the service's memory.
const MAX_FILE: u64 = 8 << 20;

/// Why the inputs did not load: the file, and what in it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

fn fail(path: &Path, message: impl Into<String>) -> LoadError {
    LoadError { path: path.to_path_buf(), message: message.into() }
}

/// One release: what the graph serves as a node, and the base edges it declares.
#[derive(Debug, Clone)]
pub struct Release {
    pub version: semver::Version,
    /// Go's name (`amd64`, `arm64`, ...), as the CVO asks for it; Cincinnati's `+arch` suffix.
    pub arch: String,
    pub payload: String,
    pub previous: Vec<semver::Version>,
    pub next: Vec<semver::Version>,
    pub metadata: BTreeMap<String, String>,
    pub source: PathBuf,
}

/// A channel: which releases it offers (its `feeder` and `tombstones` steer promotion tooling,
/// not the graph, and are not read).
#[derive(Debug, Clone)]
pub struct Channel {
    pub name: String,
    /// An entry with build metadata (`4.2.14+amd64`) names that architecture's release only.
    pub versions: Vec<semver::Version>,
    pub source: PathBuf,
}

/// A risk as the graph serves it in `conditionalEdges[].risks[]`. Matching rules are kept as
/// written: the service passes them on, the clients evaluate them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Risk {
    pub url: String,
    pub name: String,
    pub message: String,
    pub matching_rules: Vec<Value>,
}

/// A `blocked-edges/` file: the updates into `to` from the releases `from` matches are dropped,
/// or, with a risk, served only as conditional updates.
#[derive(Debug, Clone)]
pub struct BlockedEdge {
    /// With build metadata (`4.10.3+amd64`), that architecture's release only.
    pub to: semver::Version,
    /// Searched (not anchored, as graph-data documents it) in `<version>+<arch>` of the source.
    pub from: regex::Regex,
    pub risk: Option<Risk>,
    pub source: PathBuf,
}

/// Everything one load read.
#[derive(Debug, Clone)]
pub struct GraphData {
    /// The repository's `version` file.
    pub schema: semver::Version,
    pub releases: Vec<Release>,
    pub channels: Vec<Channel>,
    pub blocked_edges: Vec<BlockedEdge>,
    /// `raw/metadata.json`: metadata added to releases by version (edge additions and removals
    /// for old releases, in the `io.openshift.upgrades.graph.*` keys).
    pub raw_metadata: BTreeMap<semver::Version, BTreeMap<String, String>>,
}

/// Read `graph_data` and the release files under `releases` (all of them, in subdirectories
/// too, as `nodes/<major>.<minor>/<version>.json` in graph-data's old layout).
pub fn load(graph_data: &Path, releases: &Path) -> Result<GraphData, LoadError> {
    let schema = read_schema(&graph_data.join("version"))?;
    let mut release_files = Vec::new();
    collect(releases, true, &["json", "yaml", "yml"], &mut release_files)?;
    let releases = release_files.iter().map(|p| read_release(p)).collect::<Result<Vec<_>, _>>()?;
    check_unique_releases(&releases)?;

    let mut channel_files = Vec::new();
    collect(&graph_data.join("channels"), false, &["yaml", "yml"], &mut channel_files)?;
    let channels = channel_files.iter().map(|p| read_channel(p)).collect::<Result<Vec<_>, _>>()?;
    let mut names: BTreeMap<&str, &Path> = BTreeMap::new();
    for c in &channels {
        if let Some(first) = names.insert(&c.name, &c.source) {
            return Err(fail(&c.source, format!("name: channel {} is also declared in {}", c.name, first.display())));
        }
    }

    let mut blocked_files = Vec::new();
    let blocked_dir = graph_data.join("blocked-edges");
    if blocked_dir.exists() {
        collect(&blocked_dir, false, &["yaml", "yml"], &mut blocked_files)?;
    }
    let blocked_edges = blocked_files.iter().map(|p| read_blocked_edge(p)).collect::<Result<Vec<_>, _>>()?;

    let raw_path = graph_data.join("raw/metadata.json");
    let raw_metadata = if raw_path.exists() { read_raw_metadata(&raw_path)? } else { BTreeMap::new() };
    Ok(GraphData { schema, releases, channels, blocked_edges, raw_metadata })
}

fn read_schema(path: &Path) -> Result<semver::Version, LoadError> {
    let text = read_text(path)?;
    let v = semver::Version::parse(text.trim())
        .map_err(|e| fail(path, format!("{:?} is not a semantic version: {e}", text.trim())))?;
    if v.major != SCHEMA.major {
        return Err(fail(
            path,
            format!("graph-data schema {v} is not supported (this service reads {}.x)", SCHEMA.major),
        ));
    }
    if v.minor > SCHEMA.minor {
        // As OSUS reads a newer minor: what it knows of the schema, with a word that the rest
        // is not read.
        tracing::warn!(schema = %v, "graph-data schema {v} may use features this service does not read (it knows {SCHEMA})");
    }
    Ok(v)
}

/// The files with one of `exts` in `dir` (and below it when `deep`), sorted by path so a load
/// reads the same way every time; dot files and directories (`.git`) are left out.
fn collect(dir: &Path, deep: bool, exts: &[&str], out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    collect_at(dir, deep, exts, out, 0)
}

/// How deep release directories may nest: a symbolic link to a parent would otherwise recurse
/// until the stack ran out.
const MAX_DEPTH: usize = 16;

fn collect_at(dir: &Path, deep: bool, exts: &[&str], out: &mut Vec<PathBuf>, depth: usize) -> Result<(), LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| fail(dir, format!("cannot read the directory: {e}")))?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| fail(dir, format!("cannot read the directory: {e}")))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        paths.push(entry.path());
    }
    paths.sort();
    for path in paths {
        if path.is_dir() {
            if deep {
                if depth >= MAX_DEPTH {
                    return Err(fail(&path, format!("more than {MAX_DEPTH} directories deep (a symbolic link loop?)")));
                }
                collect_at(&path, deep, exts, out, depth + 1)?;
            }
        } else if path.extension().and_then(|e| e.to_str()).is_some_and(|e| exts.contains(&e)) {
            out.push(path);
        }
    }
    Ok(())
}

fn read_text(path: &Path) -> Result<String, LoadError> {
    let meta = std::fs::metadata(path).map_err(|e| fail(path, format!("cannot read: {e}")))?;
    if meta.len() > MAX_FILE {
        return Err(fail(path, format!("{} bytes is more than the {MAX_FILE} a graph-data file may have", meta.len())));
    }
    std::fs::read_to_string(path).map_err(|e| fail(path, format!("cannot read: {e}")))
}

/// A YAML or JSON document (JSON is YAML) as a JSON value, read with the API's alias budget.
fn read_doc(path: &Path) -> Result<Value, LoadError> {
    let text = read_text(path)?;
    let doc = crate::yaml::from_str(&text).map_err(|e| fail(path, format!("does not read as YAML: {e}")))?;
    if !doc.is_object() {
        return Err(fail(path, format!("must be an object, got {}", aloft_api::json_words::kind_of(&doc))));
    }
    Ok(doc)
}

/// `doc` as `T`, an error naming the field.
fn typed<T: serde::de::DeserializeOwned>(path: &Path, doc: Value) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let at = e.path().to_string();
        let why = aloft_api::json_words::in_json_terms(&e.inner().to_string());
        fail(path, if at == "." { why } else { format!("{at}: {why}") })
    })
}

fn version(path: &Path, field: &str, s: &str) -> Result<semver::Version, LoadError> {
    semver::Version::parse(s).map_err(|e| fail(path, format!("{field}: {s:?} is not a semantic version: {e}")))
}

/// aloft's release file. Unknown fields are refused: a misspelt `previuos` would otherwise
/// quietly leave a release without its updates.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseFile {
    version: String,
    payload: String,
    #[serde(default)]
    architecture: Option<String>,
    #[serde(default)]
    previous: Vec<String>,
    #[serde(default)]
    next: Vec<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    /// CVO's release-metadata carries `kind: cincinnati-metadata-v0`; accepted and not needed.
    #[serde(default)]
    #[allow(dead_code)]
    kind: Option<String>,
}

/// The architecture a release is for when its file names none: Cincinnati's default.
pub const DEFAULT_ARCH: &str = "amd64";

fn read_release(path: &Path) -> Result<Release, LoadError> {
    let f: ReleaseFile = typed(path, read_doc(path)?)?;
    if let Some(kind) = &f.kind {
        if kind != "cincinnati-metadata-v0" {
            return Err(fail(path, format!("kind: {kind:?} is not cincinnati-metadata-v0")));
        }
    }
    let v = version(path, "version", &f.version)?;
    if !v.build.is_empty() {
        return Err(fail(
            path,
            format!("version: {} has build metadata; give the architecture in `architecture` instead", f.version),
        ));
    }
    let arch = f.architecture.unwrap_or_else(|| DEFAULT_ARCH.to_string());
    if !is_arch(&arch) {
        return Err(fail(
            path,
            format!("architecture: {arch:?} is not an architecture name (Go's: amd64, arm64, ...)"),
        ));
    }
    if f.payload.trim().is_empty() {
        return Err(fail(path, "payload: empty (the release's osImageURL, or a release image pullspec)"));
    }
    let edges = |field: &str, list: &[String]| -> Result<Vec<semver::Version>, LoadError> {
        list.iter()
            .enumerate()
            .map(|(i, s)| {
                let p = version(path, &format!("{field}[{i}]"), s)?;
                let older = p < v;
                if field == "previous" && !older || field == "next" && older || p == v {
                    let want = if field == "previous" { "older" } else { "newer" };
                    return Err(fail(
                        path,
                        format!(
                            "{field}[{i}]: {s} is not {want} than the release ({v}); an update graph only goes forward"
                        ),
                    ));
                }
                Ok(p)
            })
            .collect()
    };
    let previous = edges("previous", &f.previous)?;
    let next = edges("next", &f.next)?;
    Ok(Release {
        version: v,
        arch,
        payload: f.payload,
        previous,
        next,
        metadata: f.metadata,
        source: path.to_path_buf(),
    })
}

/// Cincinnati's check of the `arch` parameter, also applied to release files.
pub fn is_arch(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

/// Cincinnati's (and the CVO's) check of a channel name.
pub fn is_channel(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-' || b == b'.')
}

fn check_unique_releases(releases: &[Release]) -> Result<(), LoadError> {
    let mut seen: BTreeMap<(&semver::Version, &str), &Path> = BTreeMap::new();
    for r in releases {
        if let Some(first) = seen.insert((&r.version, &r.arch), &r.source) {
            return Err(fail(
                &r.source,
                format!("version: release {} for {} is also in {}", r.version, r.arch, first.display()),
            ));
        }
    }
    Ok(())
}

/// A channel file: fields graph-data tooling adds (`feeder`, `tombstones`) are not the graph's
/// and are passed over.
#[derive(Deserialize)]
struct ChannelFile {
    name: String,
    #[serde(default)]
    versions: Vec<String>,
}

fn read_channel(path: &Path) -> Result<Channel, LoadError> {
    let f: ChannelFile = typed(path, read_doc(path)?)?;
    if !is_channel(&f.name) {
        return Err(fail(path, format!("name: {:?} does not match {CHANNEL_CHARS}", f.name)));
    }
    let versions = f
        .versions
        .iter()
        .enumerate()
        .map(|(i, s)| version(path, &format!("versions[{i}]"), s))
        .collect::<Result<_, _>>()?;
    Ok(Channel { name: f.name, versions, source: path.to_path_buf() })
}

/// A blocked-edges file. `fixedIn` and `autoExtend` feed graph-data's own checks, not the graph.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockedEdgeFile {
    to: String,
    from: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    matching_rules: Option<Vec<Value>>,
}

fn read_blocked_edge(path: &Path) -> Result<BlockedEdge, LoadError> {
    let f: BlockedEdgeFile = typed(path, read_doc(path)?)?;
    let to = version(path, "to", &f.to)?;
    let from = regex::RegexBuilder::new(&f.from)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| fail(path, format!("from: {:?} is not a regular expression: {e}", f.from)))?;
    let risk = match f.matching_rules {
        // A risk's words without its rules: a misspelt `matchingRules` would otherwise drop
        // the update outright instead of offering it with a warning.
        None if f.url.is_some() || f.name.is_some() || f.message.is_some() => {
            return Err(fail(
                path,
                "matchingRules: missing; a file with url, name or message declares a risk and needs its rules \
                 (leave all four out to drop the update)",
            ));
        }
        None => None,
        Some(rules) => {
            if rules.is_empty() {
                return Err(fail(
                    path,
                    "matchingRules: empty; leave it out to drop the update, or give at least one rule (type: Always)",
                ));
            }
            for (i, rule) in rules.iter().enumerate() {
                if !rule.get("type").is_some_and(Value::is_string) {
                    return Err(fail(
                        path,
                        format!("matchingRules[{i}].type: missing (a string: Always, PromQL, ...)"),
                    ));
                }
            }
            let need = |field: &str, v: Option<String>| {
                v.filter(|s| !s.trim().is_empty())
                    .ok_or_else(|| fail(path, format!("{field}: missing; a conditional update (one with matchingRules) needs url, name and message")))
            };
            Some(Risk {
                url: need("url", f.url)?,
                name: need("name", f.name)?,
                message: need("message", f.message)?,
                matching_rules: rules,
            })
        }
    };
    Ok(BlockedEdge { to, from, risk, source: path.to_path_buf() })
}

fn read_raw_metadata(path: &Path) -> Result<BTreeMap<semver::Version, BTreeMap<String, String>>, LoadError> {
    let text = read_text(path)?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| fail(path, format!("does not read as JSON: {e}")))?;
    let raw: BTreeMap<String, BTreeMap<String, String>> = typed(path, doc)?;
    let mut out: BTreeMap<semver::Version, BTreeMap<String, String>> = BTreeMap::new();
    for (v, keys) in raw {
        let parsed = version(path, &v, &v)?;
        out.entry(parsed).or_default().extend(keys);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A graph-data directory with one channel and two releases, each file replaceable.
    struct Dir(tempfile::TempDir);

    impl Dir {
        fn new() -> Dir {
            let d = Dir(tempfile::tempdir().unwrap());
            d.write("version", "1.1.0\n");
            d.write(
                "channels/stable-1.yaml",
                "name: stable-1\nfeeder: {name: candidate-1, delay: PT48H}\nversions:\n- 1.0.0\n- 1.1.0\n",
            );
            d.write("releases/1.0/1.0.0.yaml", "version: 1.0.0\npayload: ostree+http://repo/os#r@aa\n");
            d.write(
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": "ostree+http://repo/os#r@bb", "previous": ["1.0.0"]}"#,
            );
            d
        }

        fn write(&self, rel: &str, text: &str) {
            let p = self.0.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }

        fn load(&self) -> Result<GraphData, LoadError> {
            load(self.0.path(), &self.0.path().join("releases"))
        }

        /// The error of a load that must fail: (the file, relative, and the message).
        fn refused(&self) -> (String, String) {
            let e = self.load().unwrap_err();
            let rel = e.path.strip_prefix(self.0.path()).unwrap_or(&e.path).display().to_string();
            (rel, e.message)
        }
    }

    #[test]
    fn a_graph_data_directory_reads_with_the_fields_tooling_adds() {
        let d = Dir::new();
        d.write("blocked-edges/1.1.0.yaml", "to: 1.1.0\nfrom: .*\nfixedIn: 1.1.1\nautoExtend: https://x\n# why\n");
        d.write("blocked-edges/README.md", "not read");
        d.write(".git/config", "not read");
        // A newer minor of the schema reads, as OSUS reads it (with a warning in the log).
        d.write("version", "1.2.0\n");
        let g = d.load().unwrap();
        assert_eq!(g.schema, semver::Version::new(1, 2, 0));
        assert_eq!(g.releases.len(), 2);
        assert_eq!(g.releases[1].previous, [semver::Version::new(1, 0, 0)]);
        assert_eq!(g.releases[0].arch, "amd64");
        assert_eq!(g.channels[0].versions.len(), 2);
        assert_eq!(g.blocked_edges.len(), 1);
        assert!(g.blocked_edges[0].risk.is_none());
        assert!(g.raw_metadata.is_empty());
    }

    #[test]
    fn inputs_that_do_not_read_are_refused_naming_the_file_and_field() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("version", "2.0.0", "version", "graph-data schema 2.0.0 is not supported"),
            (
                "blocked-edges/x.yaml",
                "to: 1.1.0\nfrom: .*\nurl: https://x\nname: N\nmessage: m\nmatchingrules: [{type: Always}]\n",
                "blocked-edges/x.yaml",
                "matchingRules: missing; a file with url, name or message declares a risk",
            ),
            ("version", "one", "version", "\"one\" is not a semantic version"),
            (
                "channels/stable-1.yaml",
                "name: stable-1\nversions: [1.0.0, 1.1]\n",
                "channels/stable-1.yaml",
                "versions[1]: invalid type: number 1.1, expected a string",
            ),
            (
                "channels/stable-1.yaml",
                "name: stable-1\nversions: ['1.0']\n",
                "channels/stable-1.yaml",
                "versions[0]: \"1.0\" is not a semantic version",
            ),
            (
                "channels/stable-1.yaml",
                "name: Stable_1\nversions: []\n",
                "channels/stable-1.yaml",
                "name: \"Stable_1\" does not match",
            ),
            ("channels/stable-1.yaml", "name: [stable-1\n", "channels/stable-1.yaml", "does not read as YAML"),
            ("channels/stable-1.yaml", "- 1.0.0\n", "channels/stable-1.yaml", "must be an object, got a list"),
            (
                "channels/other.yaml",
                "name: stable-1\n",
                "channels/stable-1.yaml",
                "name: channel stable-1 is also declared in",
            ),
            (
                "blocked-edges/x.yaml",
                "to: 1.1.0\nfrom: '('\n",
                "blocked-edges/x.yaml",
                "from: \"(\" is not a regular expression",
            ),
            ("blocked-edges/x.yaml", "from: .*\n", "blocked-edges/x.yaml", "missing field `to`"),
            (
                "blocked-edges/x.yaml",
                "to: 1.1.0\nfrom: .*\nurl: https://x\nmessage: m\nmatchingRules: [{type: Always}]\n",
                "blocked-edges/x.yaml",
                "name: missing; a conditional update (one with matchingRules) needs url, name and message",
            ),
            (
                "blocked-edges/x.yaml",
                "to: 1.1.0\nfrom: .*\nmatchingRules: []\n",
                "blocked-edges/x.yaml",
                "matchingRules: empty",
            ),
            (
                "blocked-edges/x.yaml",
                "to: 1.1.0\nfrom: .*\nurl: u\nname: N\nmessage: m\nmatchingRules: [{promql: {promql: up}}]\n",
                "blocked-edges/x.yaml",
                "matchingRules[0].type: missing",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": "p", "previuos": ["1.0.0"]}"#,
                "releases/1.1/1.1.0.json",
                "unknown field `previuos`",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0+amd64", "payload": "p"}"#,
                "releases/1.1/1.1.0.json",
                "version: 1.1.0+amd64 has build metadata",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": " "}"#,
                "releases/1.1/1.1.0.json",
                "payload: empty",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": "p", "architecture": "x86_64"}"#,
                "releases/1.1/1.1.0.json",
                "architecture: \"x86_64\" is not an architecture name",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": "p", "previous": ["1.2.0"]}"#,
                "releases/1.1/1.1.0.json",
                "previous[0]: 1.2.0 is not older than the release (1.1.0)",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": "p", "next": ["1.0.0"]}"#,
                "releases/1.1/1.1.0.json",
                "next[0]: 1.0.0 is not newer than the release (1.1.0)",
            ),
            (
                "releases/1.1/1.1.0.json",
                r#"{"version": "1.1.0", "payload": "p", "kind": "other"}"#,
                "releases/1.1/1.1.0.json",
                "kind: \"other\" is not cincinnati-metadata-v0",
            ),
            (
                "releases/again.yaml",
                "version: 1.1.0\npayload: p\n",
                "releases/again.yaml",
                "version: release 1.1.0 for amd64 is also in",
            ),
            (
                "raw/metadata.json",
                r#"{"1.0.0": {"k": 1}}"#,
                "raw/metadata.json",
                "1.0.0.k: invalid type: integer `1`, expected a string",
            ),
            ("raw/metadata.json", r#"{"1.x": {}}"#, "raw/metadata.json", "1.x: \"1.x\" is not a semantic version"),
        ];
        for (file, text, at, message) in cases {
            let d = Dir::new();
            d.write(file, text);
            let (path, got) = d.refused();
            assert_eq!(&path, at, "{file}: {text}: {got}");
            assert!(got.contains(message), "{file}: {text}: {got:?} should say {message:?}");
        }
        // A symbolic link loop under the releases: refused, not followed until the stack ends.
        let d = Dir::new();
        std::os::unix::fs::symlink(d.0.path().join("releases"), d.0.path().join("releases/1.0/loop")).unwrap();
        let (path, message) = d.refused();
        assert!(path.contains("loop") && message.contains("directories deep"), "{path}: {message}");
        // No channels directory at all, or no releases directory.
        let d = Dir::new();
        std::fs::remove_dir_all(d.0.path().join("channels")).unwrap();
        assert!(d.refused().1.contains("cannot read the directory"));
        let d = Dir::new();
        std::fs::remove_dir_all(d.0.path().join("releases")).unwrap();
        assert_eq!(d.refused().0, "releases");
    }
}
