//! Everything the agent checks before it touches the host, and the typed view of a config the
//! rest of the apply engine works from.
//!
//! A config is refused — with the field it is about and nothing written — when it breaks MCO's
//! reconcilability rules ([`RefusalKind::Unreconcilable`]: the node can never apply it), or when
//! it is invalid or hostile ([`RefusalKind::Degraded`]): paths that are not absolute and clean,
//! or that lead out of the root through a symlink on the host; modes above 0777; contents that
//! are not inline `data:` URLs, or bad base64/gzip, or over 10 MiB; owners that do not exist;
//! users other than `core`; duplicate or overlapping paths; unit and drop-in names that are not
//! names. Escapes are detected by resolving paths with cap-std beneath the root ([`HostFs`]),
//! never by looking at strings alone.

use crate::fsroot::{self, Entry, HostFs};
use crate::units;
use aloft_api::content as dataurl;
use aloft_api::reconcile::{self, ConfigDiff};
use aloft_api::MachineConfigSpec;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// Which annotation state a refusal leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RefusalKind {
    /// MCO's reconcilability rules: this change can never be applied to a running node.
    Unreconcilable,
    /// Invalid or unsafe input: the node stays as it is and reports why.
    Degraded,
}

/// A config the agent will not apply, and why. Nothing on the node has changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// The offending field, e.g. `spec.config.storage.files[2].path`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl Refusal {
    /// Invalid or unsafe input at `field`.
    pub fn degraded(field: impl Into<String>, message: impl Into<String>) -> Self {
        Refusal { kind: RefusalKind::Degraded, field: field.into(), message: message.into() }
    }

    /// A change MCO's rules forbid on a running node, at `field`.
    pub fn unreconcilable(field: impl Into<String>, message: impl Into<String>) -> Self {
        Refusal { kind: RefusalKind::Unreconcilable, field: field.into(), message: message.into() }
    }
}

pub use aloft_api::node_limits::RESERVED_PREFIXES;

/// A file or unit owner as the config names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OwnerRef {
    /// Not given: root.
    Default,
    Id(u32),
    Name(String),
}

impl fmt::Display for OwnerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerRef::Default => f.write_str("root"),
            OwnerRef::Id(id) => write!(f, "{id}"),
            OwnerRef::Name(n) => write!(f, "{n:?}"),
        }
    }
}

/// One `storage.files[]` entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// `spec.config.storage.files[i]`.
    pub field: String,
    pub path: String,
    pub contents: Vec<u8>,
    pub mode: u32,
    pub user: OwnerRef,
    pub group: OwnerRef,
}

/// One `systemd.units[]` entry; empty contents are `None` (MCO writes only non-empty ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    pub field: String,
    pub name: String,
    pub contents: Option<String>,
    pub enabled: Option<bool>,
    pub mask: bool,
    pub dropins: Vec<DropinSpec>,
}

impl UnitSpec {
    /// Equal apart from where in the config the entry sits.
    pub fn same_as(&self, o: &UnitSpec) -> bool {
        self.name == o.name
            && self.contents == o.contents
            && self.enabled == o.enabled
            && self.mask == o.mask
            && self.dropins.len() == o.dropins.len()
            && self.dropins.iter().zip(&o.dropins).all(|(a, b)| a.name == b.name && a.contents == b.contents)
    }
}

/// One drop-in; `None` contents mean "remove it".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropinSpec {
    pub field: String,
    pub name: String,
    pub contents: Option<String>,
}

/// The `core` user's day-2 fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreUser {
    pub ssh_keys: Vec<String>,
    pub password_hash: Option<String>,
}

/// The parts of a config the agent applies, decoded and checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    pub files: Vec<FileSpec>,
    pub units: Vec<UnitSpec>,
    pub core: CoreUser,
    /// `spec.config.passwd.users[i]` of core, for messages.
    pub core_field: Option<String>,
}

/// Both configs, parsed and checked against the host, and what the reconcilability check
/// found to differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    pub old: Desired,
    pub new: Desired,
    /// uid/gid for every owner name the new config uses, looked up in the root's
    /// /etc/passwd and /etc/group.
    pub owners: Owners,
    /// MCO's diff booleans (os update, kargs, files, units, ...), for the disruption policy.
    pub diff: ConfigDiff,
}

const CONFIG: &str = "spec.config";

/// Normalises a spec's Ignition config to 3.5 (2.2 converted the way MCO converts it), with
/// aloft-api's parser so the coordinator and the agent read configs identically.
pub fn normalise(spec: &MachineConfigSpec) -> Result<MachineConfigSpec, Refusal> {
    let config = aloft_api::ignition::parse_config(&spec.config)
        .map_err(|e| Refusal::degraded(e.field(), e.message().to_string()))?;
    Ok(MachineConfigSpec { config, ..spec.clone() })
}

/// Parses and checks one config without looking at the host: pure, so recovery and on-disk
/// verification decode exactly what validation accepted.
pub fn parse(spec: &MachineConfigSpec) -> Result<Desired, Refusal> {
    parse_normalised(&normalise(spec)?)
}

/// [`parse`] of a spec [`normalise`] returned: decoding an Ignition config is most of the cost
/// of validation, so [`validate`] does it once per config.
fn parse_normalised(spec: &MachineConfigSpec) -> Result<Desired, Refusal> {
    let cfg = match &spec.config {
        Value::Object(m) => m,
        _ => return Err(Refusal::degraded(CONFIG, "the config must be an Ignition JSON object")),
    };
    if let Some(ign) = obj(cfg, "ignition", CONFIG)? {
        obj(ign, "config", "spec.config.ignition")?;
    }
    if let Some(key) = aloft_api::node_limits::fetched_configs(&spec.config).first() {
        return Err(Refusal::degraded(
            format!("spec.config.ignition.config.{key}"),
            aloft_api::node_limits::FETCH_REFUSED,
        ));
    }
    let mut d = Desired::default();
    if let Some(storage) = obj(cfg, "storage", CONFIG)? {
        let mut total = 0u64;
        for (i, f) in arr(storage, "files", "spec.config.storage")?.iter().enumerate() {
            let file = parse_file(f, &format!("spec.config.storage.files[{i}]"))?;
            total += file.contents.len() as u64;
            if total > dataurl::MAX_TOTAL_SIZE {
                return Err(Refusal::degraded(
                    format!("{}.contents.source", file.field),
                    format!("the decoded contents of all files exceed {} bytes", dataurl::MAX_TOTAL_SIZE),
                ));
            }
            d.files.push(file);
        }
    }
    if let Some(systemd) = obj(cfg, "systemd", CONFIG)? {
        for (i, u) in arr(systemd, "units", "spec.config.systemd")?.iter().enumerate() {
            let unit = parse_unit(u, &format!("spec.config.systemd.units[{i}]"))?;
            if let Some(first) = d.units.iter().find(|o| o.name == unit.name) {
                return Err(Refusal::degraded(
                    format!("{}.name", unit.field),
                    format!("duplicate unit {:?} (also {})", unit.name, first.field),
                ));
            }
            d.units.push(unit);
        }
    }
    if let Some(passwd) = obj(cfg, "passwd", CONFIG)? {
        for (i, u) in arr(passwd, "users", "spec.config.passwd")?.iter().enumerate() {
            let field = format!("spec.config.passwd.users[{i}]");
            if d.core_field.is_some() {
                return Err(Refusal::degraded(format!("{field}.name"), "user core is listed twice"));
            }
            d.core = parse_user(u, &field)?;
            d.core_field = Some(field);
        }
    }
    check_unique_paths(&d)?;
    Ok(d)
}

fn obj<'a>(m: &'a Map<String, Value>, key: &str, at: &str) -> Result<Option<&'a Map<String, Value>>, Refusal> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(Refusal::degraded(format!("{at}.{key}"), "must be an object")),
    }
}

fn arr<'a>(m: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a [Value], Refusal> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(Refusal::degraded(format!("{at}.{key}"), "must be a list")),
    }
}

fn as_obj<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, Refusal> {
    v.as_object().ok_or_else(|| Refusal::degraded(field, "must be an object"))
}

fn opt_str<'a>(m: &'a Map<String, Value>, key: &str, field: &str) -> Result<Option<&'a str>, Refusal> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Refusal::degraded(format!("{field}.{key}"), "must be a string")),
    }
}

fn opt_bool(m: &Map<String, Value>, key: &str, field: &str) -> Result<Option<bool>, Refusal> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(Refusal::degraded(format!("{field}.{key}"), "must be true or false")),
    }
}

/// Checks a config path (aloft-api's [`aloft_api::node_limits::path_error`], which admission
/// runs too): absolute, clean, a file name, sane lengths, not in a reserved tree.
pub fn check_path(path: &str) -> Result<(), String> {
    aloft_api::node_limits::path_error(path).map_or(Ok(()), Err)
}

fn parse_owner(m: &Map<String, Value>, key: &str, field: &str) -> Result<OwnerRef, Refusal> {
    let Some(o) = obj(m, key, field)? else { return Ok(OwnerRef::Default) };
    let field = format!("{field}.{key}");
    if let Some((under, message)) = aloft_api::node_limits::owner_error(o) {
        let at = if under.is_empty() { field } else { format!("{field}.{under}") };
        return Err(Refusal::degraded(at, message));
    }
    let id = o.get("id").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
    let name = opt_str(o, "name", &field)?.filter(|n| !n.is_empty());
    match (id, name) {
        (Some(id), _) => Ok(OwnerRef::Id(id)),
        (None, Some(n)) => Ok(OwnerRef::Name(n.to_string())),
        (None, None) => Ok(OwnerRef::Default),
    }
}

fn parse_file(v: &Value, field: &str) -> Result<FileSpec, Refusal> {
    let m = as_obj(v, field)?;
    let path = opt_str(m, "path", field)?.ok_or_else(|| Refusal::degraded(format!("{field}.path"), "missing"))?;
    check_path(path).map_err(|e| Refusal::degraded(format!("{field}.path"), e))?;
    if !arr(m, "append", field)?.is_empty() {
        return Err(Refusal::unreconcilable(
            format!("{field}.append"),
            "ignition file section contains append: not supported on a running node",
        ));
    }
    let mode = match m.get("mode") {
        None | Some(Value::Null) => 0o644,
        Some(v) => match v.as_u64() {
            Some(n) if n <= 0o777 => n as u32,
            _ => {
                return Err(Refusal::degraded(
                    format!("{field}.mode"),
                    format!("mode {v} is not a permission from 0 to 0777 (no setuid, setgid or sticky bits)"),
                ))
            }
        },
    };
    let contents = match obj(m, "contents", field)? {
        None => Vec::new(),
        Some(c) => {
            let cf = format!("{field}.contents");
            let compression = opt_str(c, "compression", &cf)?;
            let hash = match obj(c, "verification", &cf)? {
                Some(ver) => opt_str(ver, "hash", &format!("{cf}.verification"))?,
                None => None,
            };
            match opt_str(c, "source", &cf)? {
                None if compression.is_some_and(|c| !c.is_empty()) => {
                    return Err(Refusal::degraded(
                        format!("{cf}.compression"),
                        aloft_api::node_limits::COMPRESSION_WITHOUT_SOURCE,
                    ))
                }
                None => Vec::new(),
                Some(src) => dataurl::decode(src, compression, hash)
                    .map_err(|e| Refusal::degraded(format!("{cf}.{}", e.field()), e.to_string()))?,
            }
        }
    };
    Ok(FileSpec {
        field: field.to_string(),
        path: path.to_string(),
        contents,
        mode,
        user: parse_owner(m, "user", field)?,
        group: parse_owner(m, "group", field)?,
    })
}

fn text_contents(m: &Map<String, Value>, field: &str) -> Result<Option<String>, Refusal> {
    let c = opt_str(m, "contents", field)?.filter(|c| !c.is_empty());
    if c.is_some_and(|c| c.len() as u64 > dataurl::MAX_FILE_SIZE) {
        return Err(Refusal::degraded(format!("{field}.contents"), "contents exceed 10 MiB"));
    }
    Ok(c.map(str::to_string))
}

fn parse_unit(v: &Value, field: &str) -> Result<UnitSpec, Refusal> {
    let m = as_obj(v, field)?;
    let name = opt_str(m, "name", field)?.unwrap_or("");
    units::check_unit_name(name).map_err(|e| Refusal::degraded(format!("{field}.name"), e))?;
    let mut dropins = Vec::new();
    for (k, dv) in arr(m, "dropins", field)?.iter().enumerate() {
        let df = format!("{field}.dropins[{k}]");
        let dm = as_obj(dv, &df)?;
        let dname = opt_str(dm, "name", &df)?.unwrap_or("");
        units::check_dropin_name(dname).map_err(|e| Refusal::degraded(format!("{df}.name"), e))?;
        if dropins.iter().any(|d: &DropinSpec| d.name == dname) {
            return Err(Refusal::degraded(format!("{df}.name"), format!("duplicate drop-in {dname:?}")));
        }
        dropins.push(DropinSpec { contents: text_contents(dm, &df)?, field: df, name: dname.to_string() });
    }
    Ok(UnitSpec {
        field: field.to_string(),
        name: name.to_string(),
        contents: text_contents(m, field)?,
        enabled: opt_bool(m, "enabled", field)?,
        mask: opt_bool(m, "mask", field)?.unwrap_or(false),
        dropins,
    })
}

fn parse_user(v: &Value, field: &str) -> Result<CoreUser, Refusal> {
    let m = as_obj(v, field)?;
    let name = opt_str(m, "name", field)?.unwrap_or("");
    if name != "core" {
        return Err(Refusal::unreconcilable(
            format!("{field}.name"),
            format!("ignition passwd user section contains unsupported changes: user {name:?} (only core)"),
        ));
    }
    if let Some(k) = m.keys().find(|k| !matches!(k.as_str(), "name" | "sshAuthorizedKeys" | "passwordHash")) {
        return Err(Refusal::unreconcilable(
            format!("{field}.{k}"),
            format!("ignition passwd user section contains unsupported changes: {k} of user core"),
        ));
    }
    let mut user = CoreUser::default();
    for (i, key) in arr(m, "sshAuthorizedKeys", field)?.iter().enumerate() {
        let kf = format!("{field}.sshAuthorizedKeys[{i}]");
        let key = key.as_str().ok_or_else(|| Refusal::degraded(&kf, "must be a string"))?;
        if let Some(m) = aloft_api::node_limits::ssh_key_error(key) {
            return Err(Refusal::degraded(kf, m));
        }
        if !key.trim().is_empty() {
            user.ssh_keys.push(key.to_string());
        }
    }
    if let Some(h) = opt_str(m, "passwordHash", field)? {
        if let Some(m) = aloft_api::node_limits::password_hash_error(h) {
            return Err(Refusal::degraded(format!("{field}.passwordHash"), m));
        }
        user.password_hash = Some(h.to_string()).filter(|h| !h.is_empty());
    }
    Ok(user)
}

/// Every path a config writes or removes (files, unit files, drop-ins, core's keys file and
/// /etc/shadow), with the field that asks for it.
pub fn written_paths(d: &Desired) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        d.files.iter().map(|f| (f.path.clone(), format!("{}.path", f.field))).collect();
    for u in &d.units {
        if u.mask || u.contents.is_some() {
            out.push((units::unit_path(&u.name), format!("{}.name", u.field)));
        }
        for dr in &u.dropins {
            out.push((units::dropin_path(&u.name, &dr.name), format!("{}.name", dr.field)));
        }
    }
    let f = d.core_field.clone().unwrap_or_default();
    if !d.core.ssh_keys.is_empty() {
        out.push((crate::ssh::KEYS_FILE.to_string(), format!("{f}.sshAuthorizedKeys")));
    }
    if d.core.password_hash.is_some() {
        out.push((crate::ssh::SHADOW.to_string(), format!("{f}.passwordHash")));
    }
    out
}

/// No path may be written twice, and none may be written both as a file and as a directory
/// holding another written path.
fn check_unique_paths(d: &Desired) -> Result<(), Refusal> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (path, field) in written_paths(d) {
        if let Some(first) = seen.get(&path) {
            return Err(Refusal::degraded(field, format!("duplicate path {path:?} (also written by {first})")));
        }
        seen.insert(path, field);
    }
    let paths: Vec<(&String, &String)> = seen.iter().collect();
    for (path, field) in &paths {
        let mut anc = Path::new(path.as_str()).parent();
        while let Some(a) = anc {
            if let Some(other) = seen.get(a.to_string_lossy().as_ref()) {
                return Err(Refusal::degraded(
                    (*field).clone(),
                    format!("path {path:?} is inside {a:?}, which {other} writes as a file"),
                ));
            }
            anc = a.parent();
        }
    }
    Ok(())
}

/// uid/gid of owner names, from the root's /etc/passwd and /etc/group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    pub users: BTreeMap<String, (u32, u32)>,
    pub groups: BTreeMap<String, u32>,
}

impl Owners {
    /// Reads /etc/passwd and /etc/group beneath the root (missing files: no names).
    pub fn load(fs: &HostFs) -> Result<Self, fsroot::FsError> {
        let read = |p: &str| -> Result<String, fsroot::FsError> {
            match fs.read_following(Path::new(p), 16 << 20) {
                Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
                Err(e) if e.error.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(e),
            }
        };
        let mut o = Owners::default();
        for line in read("etc/passwd")?.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(name), Some(uid), Some(gid)) = (f.first(), f.get(2), f.get(3)) {
                if let (Ok(uid), Ok(gid)) = (uid.parse(), gid.parse()) {
                    o.users.entry(name.to_string()).or_insert((uid, gid));
                }
            }
        }
        for line in read("etc/group")?.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(name), Some(gid)) = (f.first(), f.get(2)) {
                if let Ok(gid) = gid.parse() {
                    o.groups.entry(name.to_string()).or_insert(gid);
                }
            }
        }
        Ok(o)
    }

    /// uid of a user reference (root when not given).
    pub fn uid(&self, r: &OwnerRef) -> Option<u32> {
        match r {
            OwnerRef::Default => Some(0),
            OwnerRef::Id(id) => Some(*id),
            OwnerRef::Name(n) => self.users.get(n).map(|(u, _)| *u),
        }
    }

    /// gid of a group reference (root when not given).
    pub fn gid(&self, r: &OwnerRef) -> Option<u32> {
        match r {
            OwnerRef::Default => Some(0),
            OwnerRef::Id(id) => Some(*id),
            OwnerRef::Name(n) => self.groups.get(n).copied(),
        }
    }
}

/// Checks that a path can be written beneath the root: every existing ancestor resolves (through
/// symlinks, with cap-std) to a directory inside the root, and the path itself is not a
/// directory or a special file, nor kept from being replaced (an inode flag, a mount over it,
/// on the file or the directory it goes in).
fn check_host_path(
    fs: &HostFs,
    seen: &mut fsroot::Ancestors,
    dirs: &mut HashMap<PathBuf, (bool, Option<fsroot::Lock>)>,
    path: &str,
    field: &str,
) -> Result<(), Refusal> {
    let rel = fsroot::rel(path);
    let missing = fs.missing_ancestors_cached(&rel, seen).map_err(|e| {
        if e.is_escape() {
            Refusal::degraded(
                field,
                format!("path {path:?} leads outside the root through a symlink at /{}", e.path.display()),
            )
        } else {
            Refusal::degraded(field, format!("path {path:?} cannot be created: {e}"))
        }
    })?;
    // The deepest directory that exists: where the write (or the first directory made) lands.
    let existing = missing.first().unwrap_or(&rel).parent().map(Path::to_path_buf).unwrap_or_default();
    // What the directory allows, read once per directory: a read-only file system, or an inode
    // flag that takes no new entry (or no rename in it), fails the write after the drain.
    let (ro, dir_lock) = match dirs.get(&existing) {
        Some(d) => *d,
        None => {
            let ro = fs.read_only_dir(&existing).map_err(|e| Refusal::degraded(field, e.to_string()))?;
            let lock = fs
                .lock_on(&existing)
                .map_err(|e| Refusal::degraded(field, e.to_string()))?
                .filter(|l| *l != fsroot::Lock::MountPoint);
            dirs.insert(existing.clone(), (ro, lock));
            (ro, lock)
        }
    };
    if ro {
        return Err(Refusal::degraded(
            field,
            format!(
                "path {path:?} is on a read-only file system (/{}): an image-based host's /usr comes with its OS \
                 image (osImageURL); a config writes under /etc or /var",
                existing.display()
            ),
        ));
    }
    match dir_lock {
        // An ostree deployment's root is immutable on purpose: only its directories take files.
        Some(fsroot::Lock::Immutable) if existing.as_os_str().is_empty() => {
            return Err(Refusal::degraded(
                field,
                format!(
                    "path {path:?} cannot be written: the root directory is immutable (an image-based host's \
                     root comes with its OS image); a config writes under /etc or /var"
                ),
            ))
        }
        Some(l) => {
            return Err(Refusal::degraded(
                field,
                format!("path {path:?} cannot be written: directory /{} {}", existing.display(), l.describe()),
            ))
        }
        None => {}
    }
    // The I/O error names the operation and the path.
    match fs.entry(&rel).map_err(|e| Refusal::degraded(field, e.to_string()))? {
        Entry::Dir { .. } => Err(Refusal::degraded(field, format!("path {path:?} exists and is a directory"))),
        Entry::Other { .. } => Err(Refusal::degraded(field, format!("path {path:?} exists and is a special file"))),
        // The journal keeps a link's target as text, for the rollback.
        Entry::Symlink { target } if target.to_str().is_none() => Err(Refusal::degraded(
            field,
            format!("path {path:?} is a symlink whose target is not UTF-8: the apply could not keep it for a rollback"),
        )),
        Entry::File { .. } => match fs.lock_on(&rel).map_err(|e| Refusal::degraded(field, e.to_string()))? {
            Some(l) => Err(Refusal::degraded(field, format!("path {path:?} cannot be replaced: it {}", l.describe()))),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The checks made on the paths as written (reserved trees, MCO's force file, one writer per
/// path), made again on where each lands on this host: through a root-owned symlink (RHCOS'
/// `/var/run -> ../run`) a config could write the force file, or write core's SSH keys file
/// under a second name, which then never matches and leaves the node Degraded for good.
fn check_where_paths_land(fs: &HostFs, written: &[(String, String)]) -> Result<(), Refusal> {
    let force = format!("/{}", crate::daemon::FORCE_FILE);
    let mut seen: HashMap<PathBuf, (&str, &str)> = HashMap::new();
    for (path, field) in written.iter().map(|(p, f)| (p.as_str(), f.as_str())) {
        let real = fs.resolved(&fsroot::rel(path)).map_err(|e| Refusal::degraded(field, e.to_string()))?;
        let shown = format!("/{}", real.display());
        if shown != path {
            if shown == force {
                return Err(Refusal::degraded(
                    field,
                    format!("path {path:?} is {shown:?} on this host (through a symlink), MCO's force file: a config cannot write it"),
                ));
            }
            // The trees the agent reserves; not the length limits, which are for the backup
            // names, made from the path as written.
            let reserved = aloft_api::node_limits::RESERVED_PREFIXES
                .iter()
                .find(|r| shown == **r || shown.starts_with(&format!("{r}/")));
            if let Some(r) = reserved {
                return Err(Refusal::degraded(
                    field,
                    format!(
                        "path {path:?} is {shown:?} on this host (through a symlink), in {r}, which the agent reserves"
                    ),
                ));
            }
        }
        if let Some((first, first_field)) = seen.insert(real, (path, field)) {
            return Err(Refusal::degraded(
                field,
                format!("path {path:?} and {first:?} ({first_field}) are the same file on this host ({shown}, through a symlink)"),
            ));
        }
    }
    Ok(())
}

/// Host-side checks of a parsed config: every written path (and its MCO backup locations) is
/// safe to write, every owner name exists. Reads only.
/// core's `passwordHash` goes into core's line of /etc/shadow. Without one (or without the file)
/// the hash cannot be set, and a node must not report a config as applied whose password is not
/// in effect: MCO's `usermod -p` fails the update in that case too, so the update fails here,
/// before anything is drained or written.
fn check_core_shadow(fs: &HostFs, d: &Desired) -> Result<(), Refusal> {
    let Some(hash) = d.core.password_hash.as_deref() else { return Ok(()) };
    let field = format!("{}.passwordHash", d.core_field.clone().unwrap_or_default());
    let rel = fsroot::rel(crate::ssh::SHADOW);
    let shadow = match fs.entry(&rel).map_err(|e| Refusal::degraded(&field, e.to_string()))? {
        Entry::File { .. } => fs.read_limited(&rel, 16 << 20).map_err(|e| Refusal::degraded(&field, e.to_string()))?,
        _ => Vec::new(),
    };
    if crate::ssh::shadow_with_hash(&shadow, Some(hash)).is_none() {
        return Err(Refusal::degraded(
            field,
            format!(
                "user core has no entry in {}, so its password hash cannot be set; add core to {} on the host \
                 or remove passwordHash",
                crate::ssh::SHADOW,
                crate::ssh::SHADOW
            ),
        ));
    }
    Ok(())
}

pub fn check_host(fs: &HostFs, d: &Desired) -> Result<Owners, Refusal> {
    let mut seen = fsroot::Ancestors::default();
    let mut dirs = HashMap::new();
    let written = written_paths(d);
    for (path, field) in &written {
        check_host_path(fs, &mut seen, &mut dirs, path, field)?;
        let (orig, noorig) = crate::files::backup_paths(path);
        check_host_path(fs, &mut seen, &mut dirs, &orig, field)?;
        check_host_path(fs, &mut seen, &mut dirs, &noorig, field)?;
    }
    check_where_paths_land(fs, &written)?;
    check_core_shadow(fs, d)?;
    let owners = Owners::load(fs).map_err(|e| Refusal::degraded("spec.config.storage.files", e.to_string()))?;
    for f in &d.files {
        if owners.uid(&f.user).is_none() {
            return Err(Refusal::degraded(
                format!("{}.user.name", f.field),
                format!("no user {} in /etc/passwd", f.user),
            ));
        }
        if owners.gid(&f.group).is_none() {
            return Err(Refusal::degraded(
                format!("{}.group.name", f.field),
                format!("no group {} in /etc/group", f.group),
            ));
        }
    }
    Ok(owners)
}

/// Reconcilability of old -> new (both normalised): MCO's rules, from aloft-api so the render
/// controller and the agent refuse exactly the same changes; then the day-2 checks every
/// MachineConfig must pass.
pub fn check_reconcilable(old: &MachineConfigSpec, new: &MachineConfigSpec) -> Result<ConfigDiff, Refusal> {
    let diff = reconcile::reconcilable(old, new).map_err(|u| Refusal::unreconcilable(u.field, u.message))?;
    if let Err(errs) = reconcile::validate_for_day2(new) {
        if let Some(e) = errs.into_iter().next() {
            return Err(Refusal::degraded(e.field, e.message));
        }
    }
    Ok(diff)
}

/// Validates `new` (and parses `old`, the config the node is on) before anything is touched:
/// reconcilability, the config itself, then the host paths and owners it needs.
pub fn validate(fs: &HostFs, old: &MachineConfigSpec, new: &MachineConfigSpec) -> Result<Validated, Refusal> {
    let current = |r: Refusal| Refusal { message: format!("the current config is invalid: {}", r.message), ..r };
    let old = normalise(old).map_err(current)?;
    let old_d = parse_normalised(&old).map_err(current)?;
    let new = normalise(new)?;
    let diff = check_reconcilable(&old, &new)?;
    let new_d = parse_normalised(&new)?;
    let owners = check_host(fs, &new_d)?;
    Ok(Validated { old: old_d, new: new_d, owners, diff })
}
