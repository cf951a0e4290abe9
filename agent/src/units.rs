//! systemd units of a config: what MCO writes for them and which enable/disable/preset calls
//! follow. Units live in `/etc/systemd/system/<name>`, drop-ins in `<name>.d/<dropin>`;
//! `mask: true` is a symlink to `/dev/null`; contents are written only when non-empty; a drop-in
//! with empty contents means "remove it". Enablement is collected into batches so systemd is
//! called once per kind, after a single daemon-reload.

use crate::validate::{Desired, UnitSpec};
use std::collections::BTreeSet;

/// Where unit files are written (MCO's choice: the admin's directory, above /usr/lib).
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// The suffixes systemd knows (systemd.unit(5)); Ignition refuses any other extension.
const UNIT_TYPES: &[&str] =
    &["service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"];

/// systemd's own limit on unit names (UNIT_NAME_MAX - 1).
const MAX_UNIT_NAME: usize = 255;

/// Checks a unit name the way systemd's `unit_name_is_valid` does: `prefix[@instance].type`
/// with only `[A-Za-z0-9:_.\-]` in prefix and instance. A name with `/` would be a path, and a
/// path is how a config escapes `/etc/systemd/system`.
pub fn check_unit_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("unit name is empty".into());
    }
    if name.len() > MAX_UNIT_NAME {
        return Err(format!("unit name is longer than {MAX_UNIT_NAME} bytes"));
    }
    if name.contains('/') {
        return Err(format!("unit name {name:?} contains '/'"));
    }
    let (stem, ty) = name.rsplit_once('.').ok_or_else(|| format!("unit name {name:?} has no type suffix"))?;
    if !UNIT_TYPES.contains(&ty) {
        return Err(format!("unit name {name:?} has an unknown type {ty:?} (one of {})", UNIT_TYPES.join(", ")));
    }
    let valid = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || ":_.\\-".contains(c));
    let (prefix, instance) = match stem.split_once('@') {
        Some((p, i)) => (p, Some(i)),
        None => (stem, None),
    };
    if prefix.is_empty() || !valid(prefix) || instance.is_some_and(|i| !valid(i)) {
        return Err(format!("{name:?} is not a valid systemd unit name"));
    }
    Ok(())
}

/// Checks a drop-in name: a plain `*.conf` file name (Ignition's rule), never a path.
pub fn check_dropin_name(name: &str) -> Result<(), String> {
    if name.contains('/') {
        return Err(format!("drop-in name {name:?} contains '/'"));
    }
    if name.contains('\0') || name.len() > MAX_UNIT_NAME {
        return Err(format!("drop-in name {name:?} is not a valid file name"));
    }
    if !name.ends_with(".conf") || name == ".conf" {
        return Err(format!("drop-in name {name:?} must be <name>.conf"));
    }
    Ok(())
}

/// `/etc/systemd/system/<name>`.
pub fn unit_path(name: &str) -> String {
    format!("{UNIT_DIR}/{name}")
}

/// `/etc/systemd/system/<unit>.d/<dropin>`.
pub fn dropin_path(unit: &str, dropin: &str) -> String {
    format!("{UNIT_DIR}/{unit}.d/{dropin}")
}

/// Whether an absolute path is in systemd's unit directory (a change there needs daemon-reload).
pub fn is_unit_path(path: &str) -> bool {
    path.strip_prefix(UNIT_DIR).is_some_and(|rest| rest.starts_with('/'))
}

/// What a unit entry wants at its unit path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitFile {
    /// `mask: true`: a symlink to /dev/null.
    Masked,
    /// Non-empty contents.
    Contents(String),
    /// Nothing written: the unit comes from the OS (e.g. only `enabled` is set).
    None,
}

/// The unit file state a config asks for.
pub fn unit_file(u: &UnitSpec) -> UnitFile {
    if u.mask {
        UnitFile::Masked
    } else if let Some(c) = &u.contents {
        UnitFile::Contents(c.clone())
    } else {
        UnitFile::None
    }
}

/// The enable/disable/preset batches a config asks for (MCO: `enabled` true/false, unset ->
/// preset; masked units are left alone, enabling them would fail).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Enablement {
    pub enable: Vec<String>,
    pub disable: Vec<String>,
    pub preset: Vec<String>,
}

/// Collects the enablement batches of a config.
pub fn enablement(d: &Desired) -> Enablement {
    let mut e = Enablement::default();
    for u in d.units.iter().filter(|u| !u.mask) {
        match u.enabled {
            Some(true) => e.enable.push(u.name.clone()),
            Some(false) => e.disable.push(u.name.clone()),
            None => e.preset.push(u.name.clone()),
        }
    }
    e
}

/// Names of units in `old` that `new` no longer has.
pub fn removed_units(old: &Desired, new: &Desired) -> Vec<String> {
    let keep: BTreeSet<&str> = new.units.iter().map(|u| u.name.as_str()).collect();
    old.units.iter().filter(|u| !keep.contains(u.name.as_str())).map(|u| u.name.clone()).collect()
}

/// Names of units whose entry (contents, drop-ins, enablement, mask) differs, or that were
/// added or removed: what the disruption policy matches by name.
pub fn changed_units(old: &Desired, new: &Desired) -> Vec<String> {
    let mut out = BTreeSet::new();
    for u in &new.units {
        match old.units.iter().find(|o| o.name == u.name) {
            Some(o) if o.same_as(u) => {}
            _ => {
                out.insert(u.name.clone());
            }
        }
    }
    out.extend(removed_units(old, new));
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names_follow_systemd() {
        for ok in ["kubelet.service", "foo@.service", "getty@tty1.service", "a:b-c_d.e.timer", "x\\x2d.mount"] {
            assert_eq!(check_unit_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "foo", "foo.exe", "../x.service", "a/b.service", "@.service", "foo bar.service", "é.service"] {
            assert!(check_unit_name(bad).is_err(), "{bad}");
        }
        assert!(check_unit_name(&format!("{}.service", "a".repeat(250))).is_err());
        assert!(check_dropin_name("10-x.conf").is_ok());
        for bad in ["../x.conf", "x", ".conf", "a/b.conf"] {
            assert!(check_dropin_name(bad).is_err(), "{bad}");
        }
        assert!(is_unit_path("/etc/systemd/system/a.service.d/x.conf"));
        assert!(!is_unit_path("/etc/systemd/systemx/a"));
    }
}
