//! Ignition configs as MachineConfigs carry them, normalised to spec 3.5.0 so that everything
//! after admission (merging, diffing, applying) deals with one version and one schema.
//!
//! The schema is CoreOS's own (the `ignition-config` crate's generated structs), so a config is
//! checked exactly against the spec of the version it declares: 3.0–3.4 are decoded with their own
//! structs and then lifted to 3.5 (later 3.x versions only add fields), and 2.x is converted the way
//! MCO converts it (root filesystem only, files overwritten, `enable` read as `enabled`). Anything
//! else is refused with the field at fault and the versions that are accepted, so the API server
//! can answer 422 with a cause a user can act on.

use ignition_config::{v3_0, v3_1, v3_2, v3_3, v3_4, v3_5};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The Ignition config type aloft works with: spec 3.5, CoreOS's schema.
pub type Config = v3_5::Config;

/// The spec version every config is normalised to: the newest stable one, a superset of all the
/// others, so nothing a user wrote is lost by normalising.
pub const TARGET_VERSION: &str = "3.5.0";

/// Every `ignition.version` a MachineConfig may declare. MCO accepts 2.2 and 3.0–3.5, and 2.0
/// and 2.1 through its 2.2 parser (strict subsets of 2.2, so they convert the same way); 2.3 and
/// 2.4 are supersets of 2.2 that MCO refuses ("unknown version").
pub const ACCEPTED_VERSIONS: &[&str] =
    &["2.0.0", "2.1.0", "2.2.0", "3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"];

/// Where the version lives, as the API server reports it.
pub const VERSION_FIELD: &str = "spec.config.ignition.version";

const ROOT: &str = "spec.config";

/// A config that cannot be used. `field()` is a dotted path from the MachineConfig root so the API
/// server can return it as a 422 cause, and the agent as the field of its refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IgnitionError {
    field: String,
    message: String,
}

impl IgnitionError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        IgnitionError { field: field.into(), message: message.into() }
    }

    /// Dotted path from the MachineConfig root, e.g. `spec.config.storage.files[3].path`.
    pub fn field(&self) -> String {
        self.field.clone()
    }

    /// The reason alone, without the field, for callers that report the field separately.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A parsed config and the fields the schema did not know. Ignition (and so MCO) ignores unknown
/// fields with a warning rather than failing; keeping them lets the API server pass the warning on
/// (a typo such as `contens` would otherwise vanish silently).
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub config: Config,
    /// `<field>: unknown field, ignored`, one per unknown key.
    pub warnings: Vec<String>,
}

/// Validate `raw` (a MachineConfig's `spec.config`) and return it as typed 3.5. Null or `{}` is an
/// empty config: MCO allows MachineConfigs that only set kernel arguments, extensions and the like.
pub fn parse_typed(raw: &Value) -> Result<Config, IgnitionError> {
    parse_with_warnings(raw).map(|p| p.config)
}

/// Validate `raw` and return it as 3.5.0 JSON ([`to_value`] of [`parse_typed`]): the form stored
/// in rendered configs and compared by the agent. Kept as JSON because `MachineConfigSpec.config`
/// is JSON, so callers can put the result straight back into a spec.
pub fn parse_config(raw: &Value) -> Result<Value, IgnitionError> {
    parse_typed(raw).map(|c| to_value(&c))
}

/// [`parse_typed`], also returning the unknown fields that were dropped.
pub fn parse_with_warnings(raw: &Value) -> Result<Parsed, IgnitionError> {
    let obj = match raw {
        Value::Null => return Ok(Parsed { config: Config::default(), warnings: Vec::new() }),
        Value::Object(m) if m.is_empty() => return Ok(Parsed { config: Config::default(), warnings: Vec::new() }),
        Value::Object(m) => m,
        other => {
            return Err(IgnitionError::new(ROOT, format!("must be an Ignition config object, got {}", kind(other))));
        }
    };
    let version = version_of(obj)?;
    let mut warnings = Vec::new();
    let config = match version {
        "3.0.0" => upgrade(decode::<v3_0::Config>(raw, &mut warnings)?)?,
        "3.1.0" => upgrade(decode::<v3_1::Config>(raw, &mut warnings)?)?,
        "3.2.0" => upgrade(decode::<v3_2::Config>(raw, &mut warnings)?)?,
        "3.3.0" => upgrade(decode::<v3_3::Config>(raw, &mut warnings)?)?,
        "3.4.0" => upgrade(decode::<v3_4::Config>(raw, &mut warnings)?)?,
        "3.5.0" => decode::<Config>(raw, &mut warnings)?,
        "2.0.0" | "2.1.0" | "2.2.0" => decode::<Config>(&convert_v2(&without_v2_duplicates(obj))?, &mut warnings)?,
        "" => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("Ignition version is empty: set one of {}", ACCEPTED_VERSIONS.join(", ")),
            ));
        }
        v => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("unsupported Ignition version {v:?}: accepted versions are {}", ACCEPTED_VERSIONS.join(", ")),
            ));
        }
    };
    validate(&config)?;
    Ok(Parsed { config, warnings })
}

/// The 3.x versions a config can be written in for a host, newest first ([`to_version`]).
pub const SERVED_VERSIONS: &[&str] = &["3.5.0", "3.4.0", "3.3.0", "3.2.0", "3.1.0", "3.0.0"];

/// `cfg` written as Ignition `version` (one of [`SERVED_VERSIONS`]) wants it, for a host whose
/// Ignition reads only that version (an older boot image): every field is checked against that
/// version's own schema, and a field it does not have is an error naming it, not dropped (a
/// host booted without a file or unit its pool's config holds would be a host of another
/// config).
pub fn to_version(cfg: &Config, version: &str) -> Result<Value, IgnitionError> {
    let mut v = to_value(cfg);
    if let Some(Value::Object(ign)) = v.get_mut("ignition") {
        ign.insert("version".into(), version.into());
    }
    let mut unknown = Vec::new();
    let mut out = match version {
        "3.0.0" => serde_json::to_value(decode::<v3_0::Config>(&v, &mut unknown)?),
        "3.1.0" => serde_json::to_value(decode::<v3_1::Config>(&v, &mut unknown)?),
        "3.2.0" => serde_json::to_value(decode::<v3_2::Config>(&v, &mut unknown)?),
        "3.3.0" => serde_json::to_value(decode::<v3_3::Config>(&v, &mut unknown)?),
        "3.4.0" => serde_json::to_value(decode::<v3_4::Config>(&v, &mut unknown)?),
        "3.5.0" => Ok(v.clone()),
        other => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("cannot write a config as Ignition {other}: one of {} is needed", SERVED_VERSIONS.join(", ")),
            ))
        }
    }
    .map_err(|e| IgnitionError::new(ROOT, e.to_string()))?;
    if let Some(first) = unknown.first() {
        let field = first.strip_suffix(": unknown field, ignored").unwrap_or(first);
        return Err(IgnitionError::new(field, format!("Ignition {version} has no such field")));
    }
    strip_nulls(&mut out);
    Ok(out)
}

/// The 3.5.0 JSON of `cfg`, without the `null`s the generated structs write for unset fields, so
/// that "unset" has one spelling (absent) and equal configs serialise equally.
pub fn to_value(cfg: &Config) -> Value {
    // Serialising these plain structs (string keys, no custom serialisers) cannot fail.
    let mut v = serde_json::to_value(cfg).unwrap_or(Value::Null);
    strip_nulls(&mut v);
    v
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

use crate::json_words::kind_of as kind;

fn version_of(obj: &Map<String, Value>) -> Result<&str, IgnitionError> {
    let accepted = ACCEPTED_VERSIONS.join(", ");
    let ign = match obj.get("ignition") {
        None | Some(Value::Null) => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("Ignition version is missing: a non-empty config needs ignition.version, one of {accepted}"),
            ));
        }
        Some(Value::Object(i)) => i,
        Some(other) => {
            return Err(IgnitionError::new(
                "spec.config.ignition",
                format!("must be an object holding the version, got {}", kind(other)),
            ));
        }
    };
    match ign.get("version") {
        Some(Value::String(s)) => Ok(s.as_str()),
        None | Some(Value::Null) => {
            Err(IgnitionError::new(VERSION_FIELD, format!("Ignition version is missing: set one of {accepted}")))
        }
        Some(other) => Err(IgnitionError::new(
            VERSION_FIELD,
            format!("Ignition version must be a string such as \"3.5.0\", got {other} (accepted: {accepted})"),
        )),
    }
}

/// `spec.config` + a path relative to the config.
fn field_path(rel: &str) -> String {
    if rel.is_empty() || rel == "." {
        ROOT.to_string()
    } else {
        format!("{ROOT}.{rel}")
    }
}

fn ignored_path(p: &serde_ignored::Path) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => match ignored_path(parent) {
            parent if parent.is_empty() => key.clone(),
            parent => format!("{parent}.{key}"),
        },
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// Decode with the schema of one spec version, naming the failing field and collecting unknown ones.
fn decode<T: DeserializeOwned>(v: &Value, warnings: &mut Vec<String>) -> Result<T, IgnitionError> {
    let mut on_unknown =
        |p: serde_ignored::Path| warnings.push(format!("{}: unknown field, ignored", field_path(&ignored_path(&p))));
    let de = serde_ignored::Deserializer::new(v, &mut on_unknown);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // The field says where; the cause in JSON's words.
        IgnitionError::new(field_path(&e.path().to_string()), crate::json_words::in_json_terms(&e.inner().to_string()))
    })
}

/// Lift an older 3.x config to 3.5. Every 3.x spec is a superset of the one before, so the JSON of
/// an older config is a valid 3.5 config once its version says so.
fn upgrade<T: Serialize>(old: T) -> Result<Config, IgnitionError> {
    let mut v = serde_json::to_value(old).map_err(|e| IgnitionError::new(ROOT, e.to_string()))?;
    strip_nulls(&mut v);
    if let Some(Value::Object(ign)) = v.get_mut("ignition") {
        ign.insert("version".into(), TARGET_VERSION.into());
    }
    decode(&v, &mut Vec::new())
}

/// Ignition's own validation, the parts a schema cannot express and that would make Ignition (and
/// so a first boot from this config) fail: clean absolute paths, one entry per path across files,
/// directories and links, one unit/drop-in/user/group per name, known compression, valid modes.
fn validate(cfg: &Config) -> Result<(), IgnitionError> {
    if let Some(st) = &cfg.storage {
        let mut seen: HashMap<&str, String> = HashMap::new();
        let files = st.files.iter().flatten().enumerate().map(|(i, f)| ("files", i, &f.path, f.mode));
        let dirs = st.directories.iter().flatten().enumerate().map(|(i, d)| ("directories", i, &d.path, d.mode));
        let links = st.links.iter().flatten().enumerate().map(|(i, l)| ("links", i, &l.path, None));
        for (list, i, path, mode) in files.chain(dirs).chain(links) {
            let field = format!("{ROOT}.storage.{list}[{i}]");
            if !path.starts_with('/') {
                return Err(IgnitionError::new(format!("{field}.path"), format!("path {path:?} is not absolute")));
            }
            if path.contains('\0') {
                return Err(IgnitionError::new(format!("{field}.path"), format!("path {path:?} contains a NUL byte")));
            }
            if !is_clean_absolute(path) {
                return Err(IgnitionError::new(
                    format!("{field}.path"),
                    format!("path {path:?} is not clean: no empty, \".\" or \"..\" parts and no trailing /"),
                ));
            }
            if let Err(m) = check_path_lengths(path) {
                return Err(IgnitionError::new(format!("{field}.path"), m));
            }
            if let Some(first) = seen.insert(path.as_str(), field.clone()) {
                return Err(IgnitionError::new(
                    format!("{field}.path"),
                    format!("duplicate path {path:?}: already defined by {first}"),
                ));
            }
            if let Some(m) = mode {
                if !(0..=0o7777).contains(&m) {
                    return Err(IgnitionError::new(
                        format!("{field}.mode"),
                        format!("{m} is not a file mode (0 to 4095, i.e. 07777 octal; write it in decimal, e.g. 420 for 0644)"),
                    ));
                }
            }
        }
        let files: HashMap<&str, String> = st
            .files
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, f)| (f.path.as_str(), format!("{ROOT}.storage.files[{i}].path")))
            .collect();
        let in_files = st.files.iter().flatten().map(|f| ("files", &f.path));
        let dirs = st.directories.iter().flatten().map(|d| ("directories", &d.path));
        let links = st.links.iter().flatten().map(|l| ("links", &l.path));
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (list, path) in in_files.chain(dirs).chain(links) {
            let i = index.entry(list).or_default();
            let field = format!("{ROOT}.storage.{list}[{i}].path");
            *i += 1;
            if let Some((parent, parent_field)) = file_ancestor(path, &files) {
                return Err(IgnitionError::new(field, inside_a_file(path, parent, parent_field)));
            }
        }
        for (i, f) in st.files.iter().flatten().enumerate() {
            let resources = f.contents.iter().map(|c| ("contents".to_string(), c));
            let appends = f.append.iter().flatten().enumerate().map(|(j, c)| (format!("append[{j}]"), c));
            for (at, r) in resources.chain(appends) {
                if let Some(c) = r.compression.as_deref() {
                    if !c.is_empty() && c != "gzip" {
                        return Err(IgnitionError::new(
                            format!("{ROOT}.storage.files[{i}].{at}.compression"),
                            format!("unsupported compression {c:?}: use \"gzip\" or leave it unset"),
                        ));
                    }
                }
            }
        }
    }
    if let Some(units) = cfg.systemd.as_ref().and_then(|s| s.units.as_ref()) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, u) in units.iter().enumerate() {
            let field = format!("{ROOT}.systemd.units[{i}]");
            if u.name.is_empty() {
                return Err(IgnitionError::new(format!("{field}.name"), "a unit needs a name"));
            }
            if let Some(first) = seen.insert(u.name.as_str(), i) {
                return Err(IgnitionError::new(
                    format!("{field}.name"),
                    format!("duplicate unit {:?}: already defined by {ROOT}.systemd.units[{first}]", u.name),
                ));
            }
            let mut dropins: HashMap<&str, usize> = HashMap::new();
            for (j, d) in u.dropins.iter().flatten().enumerate() {
                if d.name.is_empty() {
                    return Err(IgnitionError::new(format!("{field}.dropins[{j}].name"), "a drop-in needs a name"));
                }
                if let Some(first) = dropins.insert(d.name.as_str(), j) {
                    return Err(IgnitionError::new(
                        format!("{field}.dropins[{j}].name"),
                        format!("duplicate drop-in {:?}: already defined by {field}.dropins[{first}]", d.name),
                    ));
                }
            }
        }
    }
    if let Some(passwd) = &cfg.passwd {
        let users = passwd.users.iter().flatten().enumerate().map(|(i, u)| ("users", i, &u.name));
        let groups = passwd.groups.iter().flatten().enumerate().map(|(i, g)| ("groups", i, &g.name));
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        for (list, i, name) in users.chain(groups) {
            let field = format!("{ROOT}.passwd.{list}[{i}].name");
            if name.is_empty() {
                return Err(IgnitionError::new(field, "a name is required"));
            }
            if let Some(first) = seen.insert((list, name.as_str()), i) {
                return Err(IgnitionError::new(
                    field,
                    format!("duplicate {name:?}: already defined by {ROOT}.passwd.{list}[{first}]"),
                ));
            }
        }
    }
    Ok(())
}

/// Longest path and path component Linux accepts (PATH_MAX - 1, NAME_MAX).
pub const MAX_PATH: usize = 4095;
pub const MAX_PATH_COMPONENT: usize = 255;

/// Paths the kernel would refuse to create (ENAMETOOLONG): refused here so that no node is
/// sent a config it can never apply.
pub fn check_path_lengths(path: &str) -> Result<(), String> {
    if path.len() > MAX_PATH {
        return Err(format!("path is {} bytes long, over the {MAX_PATH} bytes Linux allows", path.len()));
    }
    if let Some(c) = path.split('/').find(|c| c.len() > MAX_PATH_COMPONENT) {
        return Err(format!(
            "path component {:?}... is {} bytes long, over the {MAX_PATH_COMPONENT} bytes Linux allows in a file name",
            c.chars().take(16).collect::<String>(),
            c.len()
        ));
    }
    Ok(())
}

/// The nearest ancestor of `path` that `files` (path -> what names it) writes as a regular file:
/// nothing can be created under it, so a node would refuse the config.
pub fn file_ancestor<'a, V>(path: &str, files: &'a HashMap<&str, V>) -> Option<(&'a str, &'a V)> {
    let mut p = path;
    while let Some((parent, _)) = p.rsplit_once('/') {
        if parent.is_empty() {
            return None;
        }
        if let Some((k, v)) = files.get_key_value(parent) {
            return Some((k, v));
        }
        p = parent;
    }
    None
}

/// The message for a path under a file, `by` naming what writes the file.
pub fn inside_a_file(path: &str, parent: &str, by: impl std::fmt::Display) -> String {
    format!(
        "path {path:?} is inside {parent:?}, which {by} writes as a file: a path cannot be both a file and a directory"
    )
}

/// Absolute and already in `path.Clean` form, as Ignition requires.
fn is_clean_absolute(p: &str) -> bool {
    match p.strip_prefix('/') {
        None => false,
        Some("") => true,
        Some(rest) => rest.split('/').all(|part| !part.is_empty() && part != "." && part != ".."),
    }
}

fn non_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        _ => true,
    }
}

/// A 2.x config with its repeated entries folded as MCO folds them before converting (3.x refuses
/// them; 2.x-era MachineConfigs had them): of files repeated by path and units repeated by name
/// the last is kept, in its place, and a repeated unit's drop-ins the kept one lacks (by name)
/// are added to it; repeated `core` users become the last one, the others' SSH keys appended.
/// Nothing changes for a config without repeats (its rendered name stays the same).
fn without_v2_duplicates(src: &Map<String, Value>) -> Map<String, Value> {
    let mut out = src.clone();
    let keyed = |item: &Value, key: &str| item.get(key).and_then(Value::as_str).map(str::to_string);
    // Of each key, the last entry; the entries before it are handed to `fold` into it.
    let fold_last = |items: &mut Vec<Value>, key: &str, fold: &dyn Fn(&mut Value, &Value)| {
        let mut last: HashMap<String, usize> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(k) = keyed(item, key) {
                last.insert(k, i);
            }
        }
        if last.len() == items.iter().filter(|i| keyed(i, key).is_some()).count() {
            return;
        }
        let original = items.clone();
        for i in (0..original.len()).rev() {
            let Some(k) = keyed(&original[i], key) else { continue };
            let kept = last[&k];
            if kept != i {
                fold(&mut items[kept], &original[i]);
            }
        }
        let mut i = 0;
        items.retain(|item| {
            let keep = keyed(item, key).is_none_or(|k| last[&k] == i);
            i += 1;
            keep
        });
    };
    if let Some(files) = out.get_mut("storage").and_then(|s| s.get_mut("files")).and_then(Value::as_array_mut) {
        // A file to append to is refused whole (no 3.x form), not dropped by the fold, and
        // neither is the rest: the errors name the entries as written.
        if !files.iter().any(|f| f.get("append").is_some_and(|a| a != &Value::Bool(false))) {
            fold_last(files, "path", &|_, _| {});
        }
    }
    if let Some(units) = out.get_mut("systemd").and_then(|s| s.get_mut("units")).and_then(Value::as_array_mut) {
        fold_last(units, "name", &|kept, earlier| {
            let Some(theirs) = earlier.get("dropins").and_then(Value::as_array) else { return };
            let Some(unit) = kept.as_object_mut() else { return };
            let ours = unit.entry("dropins").or_insert_with(|| Value::Array(Vec::new()));
            let Some(ours) = ours.as_array_mut() else { return };
            for d in theirs {
                let name = d.get("name");
                if !ours.iter().any(|o| o.get("name") == name) {
                    ours.push(d.clone());
                }
            }
        });
    }
    if let Some(users) = out.get_mut("passwd").and_then(|p| p.get_mut("users")).and_then(Value::as_array_mut) {
        let core = users.iter().all(|u| u.get("name").and_then(Value::as_str) == Some("core"));
        if users.len() > 1 && core {
            let mut kept = users[users.len() - 1].clone();
            let mut keys: Vec<Value> =
                kept.get("sshAuthorizedKeys").and_then(Value::as_array).cloned().unwrap_or_default();
            for earlier in users[..users.len() - 1].iter().rev() {
                keys.extend(earlier.get("sshAuthorizedKeys").and_then(Value::as_array).into_iter().flatten().cloned());
            }
            if let Some(u) = kept.as_object_mut() {
                u.insert("sshAuthorizedKeys".into(), Value::Array(keys));
            }
            *users = vec![kept];
        }
    }
    out
}

/// Ignition 2.x -> 3.5 JSON, for what a MachineConfig can carry (files, links and directories on
/// the root filesystem, units, users and groups). What has no faithful 3.x form is an error naming
/// the field; fields the converter does not know are passed on so the schema reports them.
fn convert_v2(src: &Map<String, Value>) -> Result<Value, IgnitionError> {
    let f = |p: &str| format!("{ROOT}.{p}");
    let mut out = Map::new();
    for (key, value) in src {
        match key.as_str() {
            "ignition" => {
                let mut ign = Map::new();
                if let Value::Object(i) = value {
                    for (k, v) in i {
                        match k.as_str() {
                            "version" => {}
                            // 2.x `append` became 3.x `merge`.
                            "config" => {
                                let mut c = Map::new();
                                if let Value::Object(cfg) = v {
                                    for (ck, cv) in cfg {
                                        let name = if ck == "append" { "merge" } else { ck.as_str() };
                                        c.insert(name.to_string(), cv.clone());
                                    }
                                }
                                ign.insert("config".into(), Value::Object(c));
                            }
                            _ => {
                                ign.insert(k.clone(), v.clone());
                            }
                        }
                    }
                }
                ign.insert("version".into(), TARGET_VERSION.into());
                out.insert("ignition".into(), Value::Object(ign));
            }
            // Ignition 3 dropped networkd; an empty section (as generators write) is harmless.
            "networkd" => {
                if let Some((k, _)) = value.as_object().into_iter().flatten().find(|(_, v)| non_empty(Some(v))) {
                    return Err(IgnitionError::new(
                        f(&format!("networkd.{k}")),
                        "networkd has no Ignition 3 form: write the .network files under storage.files instead",
                    ));
                }
                if !value.is_object() && !value.is_null() {
                    return Err(IgnitionError::new(f("networkd"), "networkd has no Ignition 3 form"));
                }
            }
            "storage" => {
                if let Value::Object(st) = value {
                    out.insert("storage".into(), convert_v2_storage(st)?);
                } else {
                    out.insert(key.clone(), value.clone());
                }
            }
            "systemd" => {
                if let Value::Object(sd) = value {
                    out.insert("systemd".into(), convert_v2_systemd(sd)?);
                } else {
                    out.insert(key.clone(), value.clone());
                }
            }
            "passwd" => {
                if let Some(Value::Array(users)) = value.get("users") {
                    for (i, u) in users.iter().enumerate() {
                        if u.get("create").is_some() {
                            return Err(IgnitionError::new(
                                f(&format!("passwd.users[{i}].create")),
                                "the 2.x `create` block has no Ignition 3 form: set the user's fields directly",
                            ));
                        }
                    }
                }
                out.insert(key.clone(), value.clone());
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(Value::Object(out))
}

fn convert_v2_storage(st: &Map<String, Value>) -> Result<Value, IgnitionError> {
    let mut s = Map::new();
    for (key, value) in st {
        match key.as_str() {
            "disks" | "raid" | "filesystems" => {
                if non_empty(Some(value)) {
                    return Err(IgnitionError::new(
                        format!("{ROOT}.storage.{key}"),
                        format!(
                            "converting Ignition 2.x storage.{key} is not supported: write the config as Ignition 3"
                        ),
                    ));
                }
            }
            "files" | "directories" | "links" => {
                let Value::Array(items) = value else {
                    s.insert(key.clone(), value.clone());
                    continue;
                };
                let mut conv = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    conv.push(convert_v2_node(key, i, item)?);
                }
                s.insert(key.clone(), Value::Array(conv));
            }
            _ => {
                s.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(Value::Object(s))
}

fn convert_v2_node(list: &str, i: usize, item: &Value) -> Result<Value, IgnitionError> {
    let field = format!("{ROOT}.storage.{list}[{i}]");
    let Value::Object(m) = item else { return Ok(item.clone()) };
    match m.get("filesystem") {
        None | Some(Value::Null) => {}
        Some(Value::String(fs)) if fs == "root" => {}
        Some(other) => {
            return Err(IgnitionError::new(
                format!("{field}.filesystem"),
                format!("only the \"root\" filesystem can be converted from Ignition 2.x, got {other}"),
            ));
        }
    }
    let mut c = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "filesystem" => {}
            "append" => match v {
                Value::Bool(false) | Value::Null => {}
                _ => {
                    return Err(IgnitionError::new(
                        format!("{field}.append"),
                        "appending to files is not supported: write the whole file",
                    ));
                }
            },
            "contents" => {
                let mut contents = v.clone();
                if let Value::Object(cm) = &mut contents {
                    let empty = match cm.get("verification") {
                        Some(Value::Object(vm)) => vm.get("hash").is_none_or(Value::is_null),
                        Some(Value::Null) => true,
                        _ => false,
                    };
                    if empty {
                        cm.remove("verification");
                    }
                }
                c.insert(k.clone(), contents);
            }
            _ => {
                c.insert(k.clone(), v.clone());
            }
        }
    }
    // 2.x replaced existing files unless told otherwise (3.x defaults to refusing); MCO keeps the
    // 2.x meaning, and a day-2 file must replace what the OS shipped.
    // Not for a file without a source: Ignition 3.x refuses `overwrite: true` there, and an
    // empty file is written either way.
    let sourced = c.get("contents").and_then(|v| v.get("source")).is_some_and(|v| !v.is_null());
    if list == "files" && sourced && c.get("overwrite").is_none_or(Value::is_null) {
        c.insert("overwrite".into(), true.into());
    }
    Ok(Value::Object(c))
}

fn convert_v2_systemd(sd: &Map<String, Value>) -> Result<Value, IgnitionError> {
    let mut out = sd.clone();
    if let Some(Value::Array(units)) = sd.get("units") {
        let conv: Vec<Value> = units
            .iter()
            .map(|u| match u {
                Value::Object(m) => {
                    let mut c = m.clone();
                    // `enable` is 2.x's deprecated spelling of `enabled`; `enabled` wins when both
                    // are set. As MCO's converter reads 2.x's plain (not optional) fields, a false
                    // `enable` or `mask` and an empty `contents` say nothing: they are left unset,
                    // so a config merged before keeps what it set.
                    if let Some(e) = c.remove("enable") {
                        if c.get("enabled").is_none_or(Value::is_null) && e == Value::Bool(true) {
                            c.insert("enabled".into(), e);
                        }
                    }
                    if c.get("mask") == Some(&Value::Bool(false)) {
                        c.remove("mask");
                    }
                    if c.get("contents").and_then(Value::as_str) == Some("") {
                        c.remove("contents");
                    }
                    Value::Object(c)
                }
                other => other.clone(),
            })
            .collect();
        out.insert("units".into(), Value::Array(conv));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_config_is_written_in_an_older_version_only_with_that_versions_fields() {
        let plain = super::parse_typed(&serde_json::json!({"ignition": {"version": "3.4.0"},
            "storage": {"files": [{"path": "/etc/a", "mode": 420, "contents": {"source": "data:,a"}}]},
            "systemd": {"units": [{"name": "a.service", "enabled": true, "contents": "[Service]\n"}]}}))
        .unwrap();
        for v in super::SERVED_VERSIONS {
            let out = super::to_version(&plain, v).unwrap();
            assert_eq!(out["ignition"]["version"], *v);
            assert_eq!(out["storage"]["files"][0]["path"], "/etc/a");
            assert_eq!(out["storage"]["files"][0]["contents"]["source"], "data:,a");
            assert_eq!(out["systemd"]["units"][0]["name"], "a.service");
            // What it wrote reads back as the same config.
            assert_eq!(super::parse_typed(&out).unwrap(), plain, "{v}");
        }
        // Kernel arguments are Ignition's since 3.3.0: not in 3.2.0, named.
        let kargs = super::parse_typed(&serde_json::json!({"ignition": {"version": "3.3.0"},
            "kernelArguments": {"shouldExist": ["quiet"]}}))
        .unwrap();
        assert!(super::to_version(&kargs, "3.3.0").is_ok());
        let e = super::to_version(&kargs, "3.2.0").unwrap_err();
        assert_eq!(
            (e.field().as_str(), e.message()),
            ("spec.config.kernelArguments", "Ignition 3.2.0 has no such field")
        );
        assert!(super::to_version(&plain, "2.2.0").unwrap_err().message().contains("3.5.0, 3.4.0"));
    }

    use super::*;
    use crate::testutil::{template, template_objects, testdata, yaml};
    use serde_json::json;

    fn no_nulls(v: &Value) -> bool {
        match v {
            Value::Null => false,
            Value::Array(a) => a.iter().all(no_nulls),
            Value::Object(m) => m.values().all(no_nulls),
            _ => true,
        }
    }

    fn err(cfg: Value) -> IgnitionError {
        parse_config(&cfg).unwrap_err()
    }

    #[test]
    fn every_3x_version_is_accepted_and_lifted_to_3_5() {
        for v in ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"] {
            let cfg = json!({"ignition": {"version": v},
                "storage": {"files": [{"path": "/etc/x", "mode": 420, "contents": {"source": "data:,x"}}]},
                "systemd": {"units": [{"name": "a.service", "enabled": true}]}});
            let out = parse_config(&cfg).unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(out["ignition"]["version"], TARGET_VERSION, "{v}");
            assert_eq!(
                out["storage"]["files"][0],
                json!({"path": "/etc/x", "mode": 420, "contents": {"source": "data:,x"}})
            );
            assert_eq!(out["systemd"]["units"][0], json!({"name": "a.service", "enabled": true}));
        }
    }

    #[test]
    fn fields_newer_than_the_declared_version_are_dropped_with_a_warning() {
        // kernelArguments arrived in 3.3: a 3.2 config cannot carry it, a 3.3 one can.
        let cfg = json!({"ignition": {"version": "3.2.0"}, "kernelArguments": {"shouldExist": ["a"]}});
        let p = parse_with_warnings(&cfg).unwrap();
        assert!(p.config.kernel_arguments.is_none());
        assert_eq!(p.warnings, vec!["spec.config.kernelArguments: unknown field, ignored"]);
        let cfg = json!({"ignition": {"version": "3.3.0"}, "kernelArguments": {"shouldExist": ["a"]}});
        let p = parse_with_warnings(&cfg).unwrap();
        assert_eq!(to_value(&p.config)["kernelArguments"]["shouldExist"], json!(["a"]));
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn null_and_empty_mean_an_empty_3_5_config() {
        assert_eq!(parse_typed(&Value::Null).unwrap(), Config::default());
        assert_eq!(parse_config(&Value::Null).unwrap(), json!({"ignition": {"version": "3.5.0"}}));
        assert_eq!(parse_config(&json!({})).unwrap(), json!({"ignition": {"version": "3.5.0"}}));
    }

    #[test]
    fn bootstrap_fixtures_3_2() {
        for (file, name) in [
            ("bootstrap/99_openshift-machineconfig_worker.yaml", "99-worker-ssh"),
            ("bootstrap/99_openshift-machineconfig_master.yaml", "99-master-ssh"),
        ] {
            let mc = yaml(file);
            assert_eq!(mc["metadata"]["name"], name);
            assert_eq!(mc["spec"]["config"]["ignition"]["version"], "3.2.0");
            let p = parse_with_warnings(&mc["spec"]["config"]).unwrap();
            assert!(p.warnings.is_empty(), "{:?}", p.warnings);
            let users = p.config.passwd.as_ref().unwrap().users.as_ref().unwrap();
            assert_eq!(users[0].name, "core");
            assert_eq!(users[0].ssh_authorized_keys.as_deref().unwrap(), ["ssh-rsa SSH-AUTHORIZED-KEY"]);
            let out = to_value(&p.config);
            assert_eq!(out["ignition"]["version"], "3.5.0");
            assert!(no_nulls(&out), "{out}");
        }
    }

    #[test]
    fn ignition_fixtures_plain_gzip_and_base64_gzip_parse_the_same() {
        use std::io::Read;
        let plain: Value =
            serde_json::from_slice(&std::fs::read(testdata("ignition-fixtures/ign_config.json")).unwrap()).unwrap();
        let gunzip = |bytes: &[u8]| {
            let mut s = String::new();
            flate2::read::GzDecoder::new(bytes).read_to_string(&mut s).unwrap();
            serde_json::from_str::<Value>(&s).unwrap()
        };
        let gz = gunzip(&std::fs::read(testdata("ignition-fixtures/compressed_ign_config.json.gz")).unwrap());
        let b64 =
            std::fs::read_to_string(testdata("ignition-fixtures/compressed_and_encoded_ign_config.json.gz")).unwrap();
        let b64 = gunzip(&base64_decode(b64.trim()));
        let want = parse_config(&plain).unwrap();
        assert_eq!(want["storage"]["files"][0]["path"], "/etc/hello-worker");
        assert_eq!(want["storage"]["files"][0]["user"], json!({"name": "root"}));
        assert_eq!(want["storage"]["files"][0]["contents"]["source"], "data:,hello%20world%0A");
        assert_eq!(parse_config(&gz).unwrap(), want);
        assert_eq!(parse_config(&b64).unwrap(), want);
    }

    /// Standard base64, enough for the fixture (the crate is not a dependency of aloft-api).
    fn base64_decode(s: &str) -> Vec<u8> {
        let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in s.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()) {
            let v = table.iter().position(|t| *t == c).unwrap() as u32;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
                acc &= (1 << bits) - 1;
            }
        }
        out
    }

    #[test]
    fn spec_2_2_fixture_converts_like_mco() {
        let mc = yaml("server/machine-configs/test-config.yaml");
        let out = parse_config(&mc["spec"]["config"]).unwrap();
        assert_eq!(out["ignition"], json!({"version": "3.5.0"}));
        let file = &out["storage"]["files"][0];
        assert_eq!(
            file,
            &json!({"path": "/etc/coreos/update.conf", "mode": 420, "overwrite": true,
                "contents": {"source": "data:,GROUP%3Dstable%0ASERVER%3Dhttp%3A%2F%2Flocalhost%3A32003%2Fv1%2Fupdate%0A"}})
        );
        let units = out["systemd"]["units"].as_array().unwrap();
        let names: Vec<&str> = units.iter().map(|u| u["name"].as_str().unwrap()).collect();
        assert_eq!(names[0], "docker.service");
        assert_eq!(units.len(), mc["spec"]["config"]["systemd"]["units"].as_array().unwrap().len());
        assert_eq!(units[0]["enabled"], true);
        assert_eq!(units[0]["dropins"][0]["name"], "10-dockeropts.conf");
        assert!(units[0]["dropins"][0]["contents"].as_str().unwrap().starts_with("[Service]\nEnvironment="));
        let masked: Vec<&str> =
            units.iter().filter(|u| u["mask"] == true).map(|u| u["name"].as_str().unwrap()).collect();
        assert_eq!(masked, vec!["locksmith.service"]);
        assert!(no_nulls(&out));
        // The result is a fixed point: parsing the normalised config again changes nothing.
        assert_eq!(parse_config(&out).unwrap(), out);
    }

    #[test]
    fn v2_units_enable_is_read_as_enabled() {
        let cfg = json!({"ignition": {"version": "2.2.0"}, "systemd": {"units": [
            {"name": "a.service", "enable": true},
            {"name": "b.service", "enable": true, "enabled": false},
            {"name": "c.service", "mask": true}]}});
        let out = parse_config(&cfg).unwrap();
        let u = &out["systemd"]["units"];
        assert_eq!(u[0], json!({"name": "a.service", "enabled": true}));
        assert_eq!(u[1], json!({"name": "b.service", "enabled": false}), "enabled wins over the deprecated alias");
        assert_eq!(u[2], json!({"name": "c.service", "mask": true}));
    }

    /// A 2.x unit's false `enable` or `mask` and empty `contents` are unset, as MCO's converter
    /// reads them: a 3.x config before it that enables the unit keeps it enabled in the render.
    #[test]
    fn v2_false_and_empty_unit_fields_say_nothing() {
        let cfg = json!({"ignition": {"version": "2.2.0"}, "systemd": {"units": [
            {"name": "a.service", "enable": false, "mask": false, "contents": "",
             "dropins": [{"name": "d.conf", "contents": "[Service]\n"}]},
            {"name": "b.service", "enabled": false}]}});
        let out = parse_config(&cfg).unwrap();
        let u = &out["systemd"]["units"];
        assert_eq!(u[0], json!({"name": "a.service", "dropins": [{"name": "d.conf", "contents": "[Service]\n"}]}));
        assert_eq!(u[1], json!({"name": "b.service", "enabled": false}), "2.2's optional enabled says false");
    }

    #[test]
    fn v2_files_links_users_and_config_append() {
        let cfg = json!({"ignition": {"version": "2.2.0", "config": {"append": [{"source": "data:,{}"}]}},
            "storage": {
                "files": [
                    {"filesystem": "root", "path": "/etc/a", "mode": 384, "user": {"id": 0}, "group": {"name": "wheel"},
                     "contents": {"source": "data:,a", "verification": {"hash": "sha512-00"}}},
                    {"filesystem": "root", "path": "/etc/b", "overwrite": false, "append": false, "contents": {"source": "data:,b"}}],
                "links": [{"filesystem": "root", "path": "/etc/l", "target": "/etc/a"}],
                "directories": [{"filesystem": "root", "path": "/etc/d", "mode": 493}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2"], "passwordHash": "$6$x"}]},
            "networkd": {}});
        let out = parse_config(&cfg).unwrap();
        assert_eq!(out["ignition"]["config"]["merge"], json!([{"source": "data:,{}"}]));
        let files = &out["storage"]["files"];
        assert_eq!(
            files[0],
            json!({"path": "/etc/a", "mode": 384, "overwrite": true, "user": {"id": 0}, "group": {"name": "wheel"},
                   "contents": {"source": "data:,a", "verification": {"hash": "sha512-00"}}})
        );
        assert_eq!(files[1]["overwrite"], false, "an explicit overwrite is kept");
        assert!(files[1].get("append").is_none());
        assert_eq!(out["storage"]["links"][0], json!({"path": "/etc/l", "target": "/etc/a"}));
        assert_eq!(out["storage"]["directories"][0], json!({"path": "/etc/d", "mode": 493}));
        assert_eq!(
            out["passwd"]["users"][0],
            json!({"name": "core", "sshAuthorizedKeys": ["k1", "k2"], "passwordHash": "$6$x"})
        );
        assert!(out.get("networkd").is_none());
        for v in ["2.0.0", "2.1.0"] {
            let mut c = cfg.clone();
            c["ignition"]["version"] = v.into();
            assert_eq!(parse_config(&c).unwrap(), out, "{v}");
        }
        // 2.3 and 2.4 add to 2.2: MCO's parser says "unknown version", and so does aloft.
        for v in ["2.3.0", "2.4.0"] {
            let mut c = cfg.clone();
            c["ignition"]["version"] = v.into();
            let e = parse_config(&c).unwrap_err().to_string();
            assert!(e.contains("unsupported Ignition version") && !e.contains("2.3.0,"), "{v}: {e}");
        }
    }

    /// As MCO folds a 2.x config's repeats before converting it (3.x refuses them): the last file
    /// and unit of each name, in its place; a repeated unit's other drop-ins added; the core
    /// user's keys gathered. A 3.x config with the same repeats is still refused.
    #[test]
    fn v2_repeated_files_units_and_core_users_fold_as_mco_folds_them() {
        let file = |path: &str, data: &str| json!({"filesystem": "root", "path": path, "contents": {"source": format!("data:,{data}")}});
        let cfg = json!({"ignition": {"version": "2.2.0"},
            "storage": {"files": [file("/etc/dup", "old"), file("/etc/other", "o"), file("/etc/dup", "new")]},
            "systemd": {"units": [
                {"name": "bar.service", "dropins": [{"name": "a.conf", "contents": "[Service]\n"}, {"name": "c.conf", "contents": "[Unit]\n"}]},
                {"name": "baz.service", "enable": true},
                {"name": "bar.service", "contents": "[Service]\nExecStart=/bin/true\n",
                 "dropins": [{"name": "b.conf", "contents": "[Install]\n"}, {"name": "c.conf", "contents": "[Service]\n"}]}]},
            "passwd": {"users": [
                {"name": "core", "sshAuthorizedKeys": ["d"]},
                {"name": "core", "sshAuthorizedKeys": ["e"]}]}});
        let out = parse_config(&cfg).unwrap();
        let files = out["storage"]["files"].as_array().unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["/etc/other", "/etc/dup"], "the last of each, in its place");
        assert_eq!(files[1]["contents"]["source"], "data:,new");
        let units = out["systemd"]["units"].as_array().unwrap();
        let names: Vec<&str> = units.iter().map(|u| u["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["baz.service", "bar.service"]);
        let dropins: Vec<(&str, &str)> = units[1]["dropins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["name"].as_str().unwrap(), d["contents"].as_str().unwrap()))
            .collect();
        assert_eq!(dropins, [("b.conf", "[Install]\n"), ("c.conf", "[Service]\n"), ("a.conf", "[Service]\n")]);
        assert_eq!(units[1]["contents"], "[Service]\nExecStart=/bin/true\n");
        assert_eq!(out["passwd"]["users"], json!([{"name": "core", "sshAuthorizedKeys": ["e", "d"]}]));

        // Without repeats nothing moves (the rendered name of an existing 2.x config stays).
        let plain = json!({"ignition": {"version": "2.2.0"},
            "storage": {"files": [file("/etc/b", "b"), file("/etc/a", "a")]}});
        let paths: Vec<String> = parse_config(&plain).unwrap()["storage"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(paths, ["/etc/b", "/etc/a"]);
        // A repeated file that appends is not folded away: it is refused, naming it.
        let mut appending = cfg.clone();
        appending["storage"]["files"][0]["append"] = json!(true);
        let e = parse_config(&appending).unwrap_err();
        assert!(e.field().ends_with("storage.files[0].append"), "{}: {e}", e.field());
        // 3.x: still a duplicate.
        let v3 = json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [
            {"path": "/etc/dup", "contents": {"source": "data:,a"}}, {"path": "/etc/dup", "contents": {"source": "data:,b"}}]}});
        assert!(parse_config(&v3).unwrap_err().to_string().contains("duplicate path \"/etc/dup\""));
    }

    #[test]
    fn v2_constructs_without_a_3x_form_are_refused_by_field() {
        let v2 = |rest: Value| {
            let mut c = json!({"ignition": {"version": "2.2.0"}});
            c.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
            c
        };
        let cases = [
            (
                json!({"storage": {"files": [{"path": "/a"}, {"path": "/b", "filesystem": "var"}]}}),
                "spec.config.storage.files[1].filesystem",
                "root",
            ),
            (
                json!({"storage": {"links": [{"path": "/a", "target": "/b", "filesystem": "oem"}]}}),
                "spec.config.storage.links[0].filesystem",
                "root",
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "append": true}]}}),
                "spec.config.storage.files[0].append",
                "appending",
            ),
            (json!({"networkd": {"units": [{"name": "a.network"}]}}), "spec.config.networkd.units", "networkd"),
            (json!({"networkd": {"units": [], "other": {"x": 1}}}), "spec.config.networkd.other", "networkd"),
            (json!({"networkd": "yes"}), "spec.config.networkd", "networkd"),
            (json!({"storage": {"disks": [{"device": "/dev/vdb"}]}}), "spec.config.storage.disks", "not supported"),
            (json!({"storage": {"raid": [{"name": "md0"}]}}), "spec.config.storage.raid", "not supported"),
            (
                json!({"storage": {"filesystems": [{"name": "var"}]}}),
                "spec.config.storage.filesystems",
                "not supported",
            ),
            (
                json!({"passwd": {"users": [{"name": "core", "create": {}}]}}),
                "spec.config.passwd.users[0].create",
                "create",
            ),
        ];
        for (cfg, field, msg) in cases {
            let e = err(v2(cfg.clone()));
            assert_eq!(e.field(), field, "{cfg}");
            assert!(e.message().contains(msg), "{cfg}: {e}");
        }
    }

    #[test]
    fn unknown_versions_name_the_field_and_the_accepted_versions() {
        for bad in ["4.0.0", "3.9.0", "abc", "3.6.0-experimental", "1.0.0", "3.2", "2.4.0"] {
            let e = err(json!({"ignition": {"version": bad}}));
            assert_eq!(e.field(), VERSION_FIELD, "{bad}");
            let want = format!("unsupported Ignition version {bad:?}: accepted versions are ");
            assert!(e.message().starts_with(&want), "{bad}: {e}");
            assert!(e.message().contains("2.2.0") && e.message().contains("3.5.0"), "{e}");
        }
        let e = err(json!({"ignition": {"version": ""}}));
        assert_eq!((e.field().as_str(), e.message().contains("empty")), (VERSION_FIELD, true), "{e}");
        for missing in [json!({"ignition": {}}), json!({"storage": {}}), json!({"ignition": {"version": null}})] {
            let e = err(missing.clone());
            assert_eq!(e.field(), VERSION_FIELD);
            assert!(e.message().contains("missing"), "{missing}: {e}");
        }
        let e = err(json!({"ignition": {"version": 3}}));
        assert_eq!(e.field(), VERSION_FIELD);
        assert!(e.message().contains("must be a string"), "{e}");
        let e = err(json!({"ignition": "3.2.0"}));
        assert_eq!(e.field(), "spec.config.ignition");
        let e = err(json!(["not", "a", "config"]));
        assert_eq!(e.field(), "spec.config");
        assert!(e.message().contains("got a list"), "{e}");
    }

    #[test]
    fn wrong_types_report_the_path_and_serde_message() {
        let cases = [
            (
                json!({"storage": {"files": "nope"}}),
                "spec.config.storage.files",
                "invalid type: string \"nope\", expected a list",
            ),
            (
                json!({"storage": {"files": [{"path": "/a"}, {"path": "/b", "mode": "0644"}]}}),
                "spec.config.storage.files[1].mode",
                "invalid type: string \"0644\"",
            ),
            (
                json!({"storage": {"files": [{"path": "/a"}, {"mode": 420}]}}),
                "spec.config.storage.files[1]",
                "missing field `path`",
            ),
            (
                json!({"systemd": {"units": [{"name": "a.service", "enabled": "yes"}]}}),
                "spec.config.systemd.units[0].enabled",
                "expected a boolean",
            ),
            (
                json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": "ssh-rsa k"}]}}),
                "spec.config.passwd.users[0].sshAuthorizedKeys",
                "invalid type",
            ),
        ];
        for version in ["3.2.0", "3.5.0"] {
            for (rest, field, msg) in &cases {
                let mut cfg = rest.clone();
                cfg["ignition"] = json!({"version": version});
                let e = err(cfg);
                assert_eq!(e.field(), *field, "{version} {rest}");
                assert!(e.message().contains(msg), "{version} {rest}: {e}");
            }
        }
        // 2.x converted configs report the field of the original document.
        let e = err(
            json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"path": "/a", "filesystem": "root", "mode": "0644"}]}}),
        );
        assert_eq!(e.field(), "spec.config.storage.files[0].mode");
    }

    #[test]
    fn ignition_validation_rules() {
        let cfg = |rest: Value| {
            let mut c = rest;
            c["ignition"] = json!({"version": "3.4.0"});
            c
        };
        let cases = [
            (json!({"storage": {"files": [{"path": "etc/a"}]}}), "spec.config.storage.files[0].path", "not absolute"),
            (json!({"storage": {"files": [{"path": "/etc/../a"}]}}), "spec.config.storage.files[0].path", "not clean"),
            (json!({"storage": {"files": [{"path": "/etc//a"}]}}), "spec.config.storage.files[0].path", "not clean"),
            (json!({"storage": {"files": [{"path": "/etc/a\u{0}/../b"}]}}), "spec.config.storage.files[0].path", "NUL"),
            (
                json!({"storage": {"links": [{"path": "/etc/./l", "target": "/a"}]}}),
                "spec.config.storage.links[0].path",
                "not clean",
            ),
            (
                json!({"storage": {"directories": [{"path": "/etc/d/"}]}}),
                "spec.config.storage.directories[0].path",
                "clean",
            ),
            (
                json!({"storage": {"files": [{"path": "/a"}, {"path": "/a"}]}}),
                "spec.config.storage.files[1].path",
                "already defined by spec.config.storage.files[0]",
            ),
            (
                json!({"storage": {"files": [{"path": "/a"}], "links": [{"path": "/a", "target": "/b"}]}}),
                "spec.config.storage.links[0].path",
                "duplicate path",
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "mode": 4096}]}}),
                "spec.config.storage.files[0].mode",
                "not a file mode",
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "mode": -1}]}}),
                "spec.config.storage.files[0].mode",
                "not a file mode",
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x", "compression": "xz"}}]}}),
                "spec.config.storage.files[0].contents.compression",
                "xz",
            ),
            (
                json!({"systemd": {"units": [{"name": "a.service"}, {"name": "a.service"}]}}),
                "spec.config.systemd.units[1].name",
                "duplicate unit",
            ),
            (
                json!({"systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.conf"}, {"name": "x.conf"}]}]}}),
                "spec.config.systemd.units[0].dropins[1].name",
                "duplicate drop-in",
            ),
            (
                json!({"passwd": {"users": [{"name": "core"}, {"name": "core"}]}}),
                "spec.config.passwd.users[1].name",
                "duplicate",
            ),
            (json!({"systemd": {"units": [{"name": ""}]}}), "spec.config.systemd.units[0].name", "name"),
            (
                json!({"storage": {"files": [{"path": "/etc/a"}, {"path": format!("/etc/{}", "a".repeat(256))}]}}),
                "spec.config.storage.files[1].path",
                "256 bytes long, over the 255 bytes",
            ),
            (
                json!({"storage": {"directories": [{"path": format!("/etc/{}", vec!["d".repeat(200); 21].join("/"))}]}}),
                "spec.config.storage.directories[0].path",
                "4225 bytes long, over the 4095 bytes",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/pol"}], "links": [{"path": "/etc/pol/a/l", "target": "/x"}]}}),
                "spec.config.storage.links[0].path",
                "inside \"/etc/pol\", which spec.config.storage.files[0].path writes as a file",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/pol/sub"}, {"path": "/etc/pol"}]}}),
                "spec.config.storage.files[0].path",
                "inside \"/etc/pol\"",
            ),
        ];
        for (rest, field, msg) in cases {
            let e = err(cfg(rest.clone()));
            assert_eq!(e.field(), field, "{rest}");
            assert!(e.message().contains(msg), "{rest}: {e}");
        }
        // Exactly at the limits is fine, and so is a file under a directory entry.
        let at_limits = format!("{}/{}", format!("/{}", "d".repeat(255)).repeat(15), "e".repeat(254));
        assert_eq!(at_limits.len(), 4095);
        let ok = cfg(
            json!({"storage": {"files": [{"path": at_limits}, {"path": "/etc/d/f"}], "directories": [{"path": "/etc/d"}]}}),
        );
        assert!(parse_config(&ok).is_ok(), "{:?}", parse_config(&ok));
        // The same names in different lists are fine, and so are gzip and mode 0o7777.
        let ok = cfg(
            json!({"storage": {"files": [{"path": "/a", "mode": 4095, "contents": {"source": "data:;base64,H4sI", "compression": "gzip"}}]},
            "passwd": {"users": [{"name": "core"}], "groups": [{"name": "core"}]}}),
        );
        assert!(parse_config(&ok).is_ok());
    }

    #[test]
    fn unknown_fields_are_warnings_not_errors() {
        let p = parse_with_warnings(&json!({"ignition": {"version": "3.5.0"},
            "storage": {"files": [{"path": "/a", "contens": {"source": "data:,x"}}]}, "networkd": {}}))
        .unwrap();
        assert_eq!(
            p.warnings,
            vec![
                "spec.config.networkd: unknown field, ignored",
                "spec.config.storage.files[0].contens: unknown field, ignored"
            ]
        );
        assert_eq!(to_value(&p.config)["storage"]["files"][0], json!({"path": "/a"}));
    }

    #[test]
    fn e2e_template_ignition_version_empty_is_refused() {
        let mc = template(
            "e2e-templates/change-worker-ign-version.yaml",
            &[("NAME", "change-ign"), ("POOL", "worker"), ("IGNITION_VERSION", "")],
        );
        assert_eq!(mc["metadata"]["labels"]["machineconfiguration.openshift.io/role"], "worker");
        let e = err(mc["spec"]["config"].clone());
        assert_eq!(e.field(), VERSION_FIELD);
        assert!(e.message().contains("empty"), "{e}");
        let mc = template(
            "e2e-templates/change-worker-ign-version.yaml",
            &[("NAME", "change-ign"), ("POOL", "worker"), ("IGNITION_VERSION", "3.1.0")],
        );
        assert_eq!(parse_config(&mc["spec"]["config"]).unwrap(), json!({"ignition": {"version": "3.5.0"}}));
    }

    #[test]
    fn e2e_generic_template_with_files_units_and_users() {
        let files = r#"[{"path": "/etc/test-file", "mode": 420, "contents": {"source": "data:,hello"}}]"#;
        let units = r#"[{"name": "test.service", "enabled": true, "contents": "[Unit]\nDescription=t\n"}]"#;
        let users = r#"[{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}]"#;
        let mc = template(
            "e2e-templates/generic-machine-config-template.yml",
            &[("NAME", "generic"), ("POOL", "worker"), ("FILES", files), ("UNITS", units), ("PWDUSERS", users)],
        );
        assert_eq!(mc["spec"]["config"]["ignition"]["version"], "3.5.0", "the template's default version");
        let out = parse_config(&mc["spec"]["config"]).unwrap();
        assert_eq!(out["storage"]["files"][0]["path"], "/etc/test-file");
        assert_eq!(out["systemd"]["units"][0]["enabled"], true);
        assert_eq!(out["passwd"]["users"][0]["sshAuthorizedKeys"][0], "ssh-ed25519 AAAA");
        // The template's empty defaults are a valid, empty config.
        let empty = template("e2e-templates/generic-machine-config-template.yml", &[("NAME", "g"), ("POOL", "worker")]);
        assert!(parse_config(&empty["spec"]["config"]).is_ok());
        // A relative path in the FILES parameter is caught with its index.
        let bad = template(
            "e2e-templates/generic-machine-config-template.yml",
            &[("NAME", "g"), ("POOL", "worker"), ("FILES", r#"[{"path": "/ok"}, {"path": "rel"}]"#)],
        );
        assert_eq!(err(bad["spec"]["config"].clone()).field(), "spec.config.storage.files[1].path");
    }

    #[test]
    fn e2e_templates_disks_and_ignition_kargs_parse() {
        let mc = template(
            "e2e-templates/extra-disks.yaml",
            &[("NAME", "d"), ("POOL", "worker"), ("DEVICE1", "/dev/vdb"), ("DEVICE2", "/dev/vdc")],
        );
        let out = parse_config(&mc["spec"]["config"]).unwrap();
        assert_eq!(out["storage"]["disks"][1]["device"], "/dev/vdc");
        assert_eq!(out["storage"]["raid"][0]["level"], "stripe");
        assert_eq!(out["storage"]["filesystems"][0]["path"], "/var/lib/data");
        let mc = template("e2e-templates/add-ignition-kernel-arguments.yaml", &[("NAME", "k"), ("POOL", "worker")]);
        let out = parse_config(&mc["spec"]["config"]).unwrap();
        assert_eq!(out["kernelArguments"], json!({"shouldExist": ["enforcing=0"]}));
        // bz1866117 writes `networkd: {}` into a 3.2 config: a warning, not an error.
        let mc = template("e2e-templates/bz1866117-add-dummy-files.yaml", &[("NAME", "b"), ("POOL", "worker")]);
        let p = parse_with_warnings(&mc["spec"]["config"]).unwrap();
        assert!(p.warnings.iter().any(|w| w.starts_with("spec.config.networkd")), "{:?}", p.warnings);
        assert!(p.config.storage.unwrap().files.unwrap().len() > 1);
    }

    /// Every MachineConfig in MCO's e2e templates is valid here too (parameters filled in as an
    /// e2e run would), so nothing OpenShift users write is refused by aloft's stricter checks.
    #[test]
    fn every_mco_e2e_machine_config_is_accepted() {
        let params = [
            ("POOL", "worker"),
            ("DEVICE1", "/dev/vdb"),
            ("DEVICE2", "/dev/vdc"),
            ("FILE_PATH", "/etc/aloft-test-file"),
            ("FILE_CONTENT", "hello"),
            ("CONFIGURATION", "aGVsbG8K"),
            ("FIPS", "false"),
            ("IGNITION_VERSION", "3.2.0"),
            ("OSIMAGESTREAM", "rhel-9"),
            ("NAME", "tpl"),
        ];
        /// `mode: 0644` is octal in the YAML 1.1 that `oc process` reads.
        fn octal_modes(v: &mut Value) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m.iter_mut() {
                        match x.as_str() {
                            Some(s) if k == "mode" && s.starts_with('0') => {
                                *x = i64::from_str_radix(s, 8).unwrap().into()
                            }
                            _ => octal_modes(x),
                        }
                    }
                }
                Value::Array(a) => a.iter_mut().for_each(octal_modes),
                _ => {}
            }
        }
        let mut dirs = vec![testdata("e2e-templates"), testdata("e2e-templates/machineconfigs")];
        let mut checked = 0;
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                    continue;
                }
                let rel = path.strip_prefix(testdata("")).unwrap().to_string_lossy().to_string();
                let Ok(doc) = yaml_serde::from_str::<Value>(&std::fs::read_to_string(&path).unwrap()) else { continue };
                let has_mc = doc["objects"].as_array().is_some_and(|o| o.iter().any(|x| x["kind"] == "MachineConfig"));
                if doc["kind"] != "Template" || !has_mc {
                    continue;
                }
                for mut obj in template_objects(&rel, &params).into_iter().filter(|o| o["kind"] == "MachineConfig") {
                    octal_modes(&mut obj);
                    let mc: crate::MachineConfig = serde_json::from_value(obj).unwrap_or_else(|e| panic!("{rel}: {e}"));
                    let out = parse_config(&mc.spec.config).unwrap_or_else(|e| panic!("{rel}: {}: {e}", e.field()));
                    assert_eq!(out["ignition"]["version"], "3.5.0");
                    crate::reconcile::validate_for_day2(&mc.spec).unwrap_or_else(|e| panic!("{rel}: {e:?}"));
                    let refused = crate::content::spec_errors(&mc.spec);
                    assert!(refused.is_empty(), "{rel}: {refused:?}");
                    checked += 1;
                }
            }
        }
        assert!(checked >= 24, "checked {checked} MachineConfigs");
    }

    #[test]
    fn to_value_has_no_nulls_and_round_trips() {
        let cfg = json!({"ignition": {"version": "3.5.0", "timeouts": {}},
            "storage": {"files": [{"path": "/a", "contents": {"source": null, "compression": null}, "mode": null}]}});
        let out = parse_config(&cfg).unwrap();
        assert!(no_nulls(&out), "{out}");
        assert_eq!(out["storage"]["files"][0], json!({"path": "/a", "contents": {}}));
        assert_eq!(parse_typed(&out).unwrap(), parse_typed(&cfg).unwrap());
    }
}
