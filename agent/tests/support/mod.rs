//! Shared by the apply engine's integration tests (hostile_input, crash, apply): a recording
//! service manager, temp host roots seeded like an RHCOS node, whole-tree snapshots, MCO-shaped
//! configs, and a small YAML reader for the corpus and the MCO fixtures.
#![allow(dead_code)]

use aloft_agent::host::{Root, ServiceError, ServiceManager};
use aloft_api::{MachineConfig, MachineConfigSpec};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One call the agent made to the service manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: &'static str,
    pub units: Vec<String>,
}

/// Stands in for systemd at the boundary that cannot run here (no PID 1 systemd in a test
/// process; the D-Bus test implementation by the systemd helper serves the workspace's
/// integration tests). It records every call and, when given a root, does what
/// `systemctl enable/disable/preset` does to the files: `enable` links
/// `<target>.wants/<unit>` for each `WantedBy=` of the unit file in /etc/systemd/system,
/// `disable` removes those links (and `.wants` dirs it empties), `preset` behaves like RHCOS's
/// default `disable *` policy. `fail_enable_of` makes `enable` fail when it is asked for that
/// unit, to drive the rollback path.
pub struct RecordingServices {
    root: Option<PathBuf>,
    pub calls: Mutex<Vec<Call>>,
    pub fail_enable_of: Option<String>,
    /// Run as the injected enable failure happens: what the host does meanwhile.
    pub on_failure: Option<Box<dyn Fn() + Send + Sync>>,
}

impl RecordingServices {
    pub fn new() -> Self {
        RecordingServices { root: None, calls: Mutex::new(Vec::new()), fail_enable_of: None, on_failure: None }
    }

    /// Also emulate the enablement symlinks beneath `root`.
    pub fn on(root: &Path) -> Self {
        RecordingServices { root: Some(root.to_path_buf()), ..Self::new() }
    }

    pub fn failing_enable_of(mut self, unit: &str) -> Self {
        self.fail_enable_of = Some(unit.to_string());
        self
    }

    /// Also runs `f` when the injected failure happens (e.g. a file made immutable meanwhile).
    pub fn and_then(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_failure = Some(Box::new(f));
        self
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, op: &'static str, units: &[String]) {
        self.calls.lock().unwrap().push(Call { op, units: units.to_vec() });
    }

    fn unit_dir(&self) -> Option<PathBuf> {
        self.root.as_ref().map(|r| r.join("etc/systemd/system"))
    }

    fn wanted_by(&self, unit: &str) -> Vec<String> {
        let (Some(dir), Some(root)) = (self.unit_dir(), self.root.as_ref()) else { return vec![] };
        let text = std::fs::read_to_string(dir.join(unit))
            .or_else(|_| std::fs::read_to_string(root.join("usr/lib/systemd/system").join(unit)));
        let Ok(text) = text else { return vec![] };
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("WantedBy="))
            .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    fn link(&self, unit: &str) {
        let Some(dir) = self.unit_dir() else { return };
        for target in self.wanted_by(unit) {
            let wants = dir.join(format!("{target}.wants"));
            std::fs::create_dir_all(&wants).unwrap();
            let link = wants.join(unit);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(format!("/etc/systemd/system/{unit}"), &link).unwrap();
            }
        }
    }

    fn unlink(&self, unit: &str) {
        let Some(dir) = self.unit_dir() else { return };
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !(name.ends_with(".wants") || name.ends_with(".requires")) {
                continue;
            }
            let _ = std::fs::remove_file(e.path().join(unit));
            let _ = std::fs::remove_dir(e.path()); // only when empty
        }
    }
}

impl Default for RecordingServices {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl ServiceManager for RecordingServices {
    async fn daemon_reload(&self) -> Result<(), ServiceError> {
        self.record("daemon-reload", &[]);
        Ok(())
    }
    async fn enable_units(&self, units: &[String]) -> Result<(), ServiceError> {
        self.record("enable", units);
        if let Some(bad) = &self.fail_enable_of {
            if units.contains(bad) {
                if let Some(f) = &self.on_failure {
                    f();
                }
                return Err(ServiceError::Call {
                    operation: "EnableUnitFiles".into(),
                    message: format!("{bad}: injected failure"),
                });
            }
        }
        units.iter().for_each(|u| self.link(u));
        Ok(())
    }
    async fn disable_units(&self, units: &[String]) -> Result<(), ServiceError> {
        self.record("disable", units);
        units.iter().for_each(|u| self.unlink(u));
        Ok(())
    }
    async fn mask_units(&self, units: &[String]) -> Result<(), ServiceError> {
        self.record("mask", units);
        Ok(())
    }
    async fn unmask_units(&self, units: &[String]) -> Result<(), ServiceError> {
        self.record("unmask", units);
        Ok(())
    }
    async fn preset_units(&self, units: &[String]) -> Result<(), ServiceError> {
        self.record("preset", units);
        units.iter().for_each(|u| self.unlink(u));
        Ok(())
    }
    async fn reload_unit(&self, unit: &str) -> Result<(), ServiceError> {
        self.record("reload", &[unit.to_string()]);
        Ok(())
    }
    async fn restart_unit(&self, unit: &str) -> Result<(), ServiceError> {
        self.record("restart", &[unit.to_string()]);
        Ok(())
    }
    async fn start_unit(&self, unit: &str) -> Result<(), ServiceError> {
        self.record("start", &[unit.to_string()]);
        Ok(())
    }
    async fn stop_unit(&self, unit: &str) -> Result<(), ServiceError> {
        self.record("stop", &[unit.to_string()]);
        Ok(())
    }
    async fn wants(&self, _: &str) -> Result<Vec<String>, ServiceError> {
        Ok(Vec::new())
    }
    async fn reboot(&self, reason: &str) -> Result<(), ServiceError> {
        self.record("reboot", &[reason.to_string()]);
        Ok(())
    }
}

/// Runs a future to completion on a fresh current-thread runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

pub const CORE_UID: u32 = 1000;

fn write(root: &Path, rel: &str, data: &str, mode: u32) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, data).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A host root that looks like a fresh RHCOS node: users root and core, /etc/shadow, core's
/// home, an OS-shipped /etc/hosts and chrony.conf, an admin drop-in, a unit directory.
pub fn seed_node(root: &Path) {
    write(
        root,
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS Admin:/var/home/core:/bin/bash\n",
        0o644,
    );
    write(root, "etc/group", "root:x:0:\nwheel:x:10:core\ncore:x:1000:\n", 0o644);
    write(root, "etc/shadow", "root:!locked::0:99999:7:::\ncore:*:19000:0:99999:7:::\n", 0o000);
    write(root, "etc/hosts", "127.0.0.1 localhost\n", 0o644);
    write(root, "etc/chrony.conf", "pool 2.rhel.pool.ntp.org iburst\n", 0o644);
    write(root, "etc/systemd/system/common.service.d/40-empty.conf", "[Service]\nNice=5\n", 0o644);
    write(
        root,
        "usr/lib/systemd/system/os-unit.service",
        "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
        0o644,
    );
    std::fs::create_dir_all(root.join("var/home/core")).unwrap();
    std::os::unix::fs::chown(root.join("var/home/core"), Some(CORE_UID), Some(CORE_UID)).unwrap();
    std::fs::set_permissions(root.join("var/home/core"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    symlink("../var/home/core", root.join("home/core")).unwrap();
    std::fs::create_dir_all(root.join("var/lib")).unwrap();
}

/// A fresh temp root seeded with [`seed_node`].
pub fn node() -> (tempfile::TempDir, Root) {
    let dir = tempfile::tempdir().unwrap();
    seed_node(dir.path());
    let root = Root::new(dir.path());
    (dir, root)
}

/// Every entry beneath `root` (except paths starting with one of `skip`): type, mode, owner,
/// and a hash of the bytes or the link target. Two equal snapshots mean byte-identical trees.
pub fn snapshot(root: &Path, skip: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(root, root, skip, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if skip.iter().any(|s| rel == *s || rel.starts_with(&format!("{s}/"))) {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        let desc = if m.file_type().is_symlink() {
            format!("link -> {}", std::fs::read_link(&p).unwrap().display())
        } else if m.is_dir() {
            format!("dir {:o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid())
        } else {
            let bytes = std::fs::read(&p).unwrap();
            format!("file {:o} {}:{} {}", m.mode() & 0o7777, m.uid(), m.gid(), hex::encode(Sha256::digest(&bytes)))
        };
        out.insert(rel, desc);
        if m.is_dir() {
            walk(root, &p, skip, out);
        }
    }
}

/// Directories with nothing in them, dropped from a snapshot (MCO never removes directories it
/// created for a file; a config going away leaves them).
pub fn without_empty_dirs(mut snap: BTreeMap<String, String>) -> BTreeMap<String, String> {
    loop {
        let empty: Vec<String> = snap
            .iter()
            .filter(|(k, v)| v.starts_with("dir ") && !snap.keys().any(|o| o.starts_with(&format!("{k}/"))))
            .map(|(k, _)| k.clone())
            .collect();
        if empty.is_empty() {
            return snap;
        }
        for k in empty {
            snap.remove(&k);
        }
    }
}

/// Prints the differences of two snapshots (for assertion messages).
pub fn diff(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in a {
        match b.get(k) {
            None => out.push_str(&format!("- {k}: {v}\n")),
            Some(w) if w != v => out.push_str(&format!("~ {k}: {v} => {w}\n")),
            _ => {}
        }
    }
    for (k, v) in b {
        if !a.contains_key(k) {
            out.push_str(&format!("+ {k}: {v}\n"));
        }
    }
    out
}

/// A `data:` URL of `bytes` (base64).
pub fn data_url(bytes: &[u8]) -> String {
    use base64::Engine;
    format!("data:text/plain;charset=utf-8;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A gzip + base64 `data:` URL.
pub fn gzip_url(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    data_url(&e.finish().unwrap())
}

/// A spec whose config is the given Ignition 3.2 sections.
pub fn spec(config: Value) -> MachineConfigSpec {
    let mut c = config;
    c.as_object_mut().unwrap().insert("ignition".into(), json!({"version": "3.2.0"}));
    MachineConfigSpec { config: c, ..Default::default() }
}

pub const UNIT_NEW: &str =
    "[Unit]\nDescription=new\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";

/// The config the node is on before the tests' update: files, units with drop-ins, a key.
pub fn old_config() -> MachineConfigSpec {
    spec(json!({
        "storage": {"files": [
            {"path": "/etc/aloft-test/keep.conf", "mode": 420, "contents": {"source": "data:,keep%0A"}},
            {"path": "/etc/aloft-test/change.conf", "mode": 420, "contents": {"source": "data:,before%0A"}},
            {"path": "/etc/aloft-test/gone.conf", "mode": 384, "contents": {"source": "data:,gone%0A"}},
            {"path": "/etc/chrony.conf", "mode": 420, "contents": {"source": "data:,server%20time.example.com%0A"}}
        ]},
        "systemd": {"units": [
            {"name": "old-only.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"},
            {"name": "common.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/old\n[Install]\nWantedBy=multi-user.target\n",
             "dropins": [{"name": "10-a.conf", "contents": "[Service]\nEnvironment=A=1\n"},
                         {"name": "20-b.conf", "contents": "[Service]\nEnvironment=B=1\n"}]},
            {"name": "os-unit.service", "enabled": false},
            {"name": "masked-later.service", "contents": "[Service]\nExecStart=/bin/true\n"}
        ]},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAold old@example"]}]}
    }))
}

/// The config the tests update to: changed, added (gzip, deep dirs, owned by core), removed
/// files; changed/added/removed units, drop-ins (one emptied), a mask; more keys; a password.
pub fn new_config() -> MachineConfigSpec {
    spec(json!({
        "storage": {"files": [
            {"path": "/etc/aloft-test/keep.conf", "mode": 420, "contents": {"source": "data:,keep%0A"}},
            {"path": "/etc/aloft-test/change.conf", "mode": 384, "contents": {"source": "data:,after%0A"},
             "user": {"name": "core"}, "group": {"name": "core"}},
            {"path": "/etc/aloft-test/new/deep/added.conf", "contents": {"source": data_url(b"added\n")}},
            {"path": "/etc/hosts", "mode": 420, "contents": {"source": "data:,127.0.0.1%20localhost%20node1%0A"}},
            {"path": "/etc/aloft-test/gz.conf", "mode": 416, "contents": {"source": gzip_url(b"compressed\n"), "compression": "gzip"},
             "user": {"id": 1000}, "group": {"id": 10}}
        ]},
        "systemd": {"units": [
            {"name": "common.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/new\n[Install]\nWantedBy=multi-user.target\n",
             "dropins": [{"name": "10-a.conf", "contents": "[Service]\nEnvironment=A=2\n"},
                         {"name": "30-c.conf", "contents": "[Service]\nEnvironment=C=1\n"},
                         {"name": "40-empty.conf", "contents": ""}]},
            {"name": "new.service", "enabled": true, "contents": UNIT_NEW},
            {"name": "os-unit.service", "enabled": true},
            {"name": "masked-later.service", "mask": true},
            {"name": "preset-me.service", "contents": "[Service]\nExecStart=/bin/true\n"}
        ]},
        "passwd": {"users": [{"name": "core", "passwordHash": "$6$salt$hash",
                              "sshAuthorizedKeys": ["ssh-ed25519 AAAAold old@example", "ssh-rsa AAAAnew new@example"]}]}
    }))
}

/// Parses a MachineConfig from YAML text.
pub fn machine_config(yaml: &str) -> MachineConfig {
    serde_json::from_value(yaml_to_json(yaml)).unwrap()
}

/// Reads the block-style YAML subset Kubernetes manifests use (mappings, sequences, `|`
/// literals, quoted and plain scalars, `{}`/`[]`, comments). The agent has no YAML dependency:
/// this keeps the corpus and the MCO fixtures in their native format without adding one.
pub fn yaml_to_json(text: &str) -> Value {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    let mut i = 0;
    yaml_node(&mut lines, &mut i, 0)
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

fn skip_blank(lines: &[String], i: &mut usize) {
    while *i < lines.len() {
        let t = lines[*i].trim_start();
        if t.is_empty() || t.starts_with('#') || t == "---" {
            *i += 1;
        } else {
            break;
        }
    }
}

fn yaml_node(lines: &mut Vec<String>, i: &mut usize, min: usize) -> Value {
    skip_blank(lines, i);
    if *i >= lines.len() || indent(&lines[*i]) < min {
        return Value::Null;
    }
    let n = indent(&lines[*i]);
    let t = lines[*i].trim_start();
    if t == "-" || t.starts_with("- ") {
        seq(lines, i, n)
    } else if key_split(t).is_some() {
        map(lines, i, n)
    } else {
        *i += 1;
        scalar(t)
    }
}

fn seq(lines: &mut Vec<String>, i: &mut usize, n: usize) -> Value {
    let mut out = Vec::new();
    loop {
        skip_blank(lines, i);
        if *i >= lines.len() || indent(&lines[*i]) != n {
            break;
        }
        let t = lines[*i].trim_start().to_string();
        if t == "-" {
            *i += 1;
            out.push(yaml_node(lines, i, n + 1));
        } else if let Some(rest) = t.strip_prefix("- ") {
            let rest = rest.trim_start();
            if key_split(rest).is_some() || rest.starts_with("- ") {
                lines[*i] = format!("{}{}", " ".repeat(n + 2), rest);
                out.push(yaml_node(lines, i, n + 2));
            } else {
                *i += 1;
                out.push(scalar(rest));
            }
        } else {
            break;
        }
    }
    Value::Array(out)
}

fn key_split(t: &str) -> Option<(String, String)> {
    if t.starts_with('"') || t.starts_with('\'') || t.starts_with('{') || t.starts_with('[') {
        return None;
    }
    let idx = t.find(": ").or_else(|| t.ends_with(':').then(|| t.len() - 1))?;
    Some((t[..idx].to_string(), t[idx + 1..].trim().to_string()))
}

fn map(lines: &mut Vec<String>, i: &mut usize, n: usize) -> Value {
    let mut out = Map::new();
    loop {
        skip_blank(lines, i);
        if *i >= lines.len() || indent(&lines[*i]) != n {
            break;
        }
        let t = lines[*i].trim_start().to_string();
        let Some((k, v)) = key_split(&t) else { break };
        *i += 1;
        let value = if v.is_empty() {
            skip_blank(lines, i);
            match lines.get(*i) {
                Some(l) if indent(l) > n => yaml_node(lines, i, n + 1),
                Some(l) if indent(l) == n && (l.trim_start().starts_with("- ") || l.trim() == "-") => seq(lines, i, n),
                _ => Value::Null,
            }
        } else if v.starts_with('|') || v.starts_with('>') {
            block(lines, i, n, &v)
        } else {
            scalar(strip_comment(&v))
        };
        out.insert(k, value);
    }
    Value::Object(out)
}

fn block(lines: &[String], i: &mut usize, n: usize, header: &str) -> Value {
    let mut body: Vec<&str> = Vec::new();
    let mut bi = None;
    while *i < lines.len() {
        let l = &lines[*i];
        if !l.trim().is_empty() && indent(l) <= n {
            break;
        }
        if bi.is_none() && !l.trim().is_empty() {
            bi = Some(indent(l));
        }
        body.push(l);
        *i += 1;
    }
    let bi = bi.unwrap_or(n + 2);
    while body.last().is_some_and(|l| l.trim().is_empty()) {
        body.pop();
    }
    let text: Vec<String> =
        body.iter().map(|l| if l.len() >= bi { l[bi..].to_string() } else { String::new() }).collect();
    let mut s = if header.starts_with('>') { text.join(" ") } else { text.join("\n") };
    if !header.contains('-') {
        s.push('\n');
    }
    Value::String(s)
}

fn strip_comment(v: &str) -> &str {
    if v.starts_with('"') || v.starts_with('\'') {
        return v;
    }
    match v.find(" #") {
        Some(idx) => v[..idx].trim_end(),
        None => v,
    }
}

fn scalar(s: &str) -> Value {
    let s = s.trim();
    if s.starts_with('"') {
        return serde_json::from_str(s).unwrap_or_else(|e| panic!("bad double-quoted scalar {s}: {e}"));
    }
    if let Some(inner) = s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        return Value::String(inner.replace("''", "'"));
    }
    if s.starts_with('{') || s.starts_with('[') {
        if let Ok(v) = serde_json::from_str(s) {
            return v;
        }
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return Value::Array(inner.split(',').map(str::trim).filter(|x| !x.is_empty()).map(scalar).collect());
        }
    }
    match s {
        "null" | "~" | "" => Value::Null,
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => {
            if let Ok(n) = s.parse::<i64>() {
                return json!(n);
            }
            if s.chars().any(|c| c.is_ascii_digit()) && !s.contains(|c: char| c.is_alphabetic() && c != 'e') {
                if let Ok(f) = s.parse::<f64>() {
                    if s.matches('.').count() <= 1 {
                        return json!(f);
                    }
                }
            }
            Value::String(s.to_string())
        }
    }
}

/// An MCO fixture from the shared test data (`ALOFT_MCO_TESTDATA`, default
/// `<workspace>/../shared/testdata/mco`). A missing fixture fails the test: a skip here passed
/// silently wherever the data was not checked out beside the workspace.
pub fn mco_fixture(rel: &str) -> String {
    let base = std::env::var_os("ALOFT_MCO_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/mco"));
    std::fs::read_to_string(base.join(rel)).unwrap_or_else(|e| {
        panic!(
            "MCO fixture {rel} not found under {} ({e}): check out shared/ beside the workspace or set ALOFT_MCO_TESTDATA",
            base.display()
        )
    })
}
