//! systemd units of a config: what MCO writes for them and which enable/disable/preset calls
//! follow. Units live in `/etc/systemd/system/<name>`, drop-ins in `<name>.d/<dropin>`;
//! `mask: true` is a symlink to `/dev/null`; contents are written only when non-empty; a drop-in
//! with empty contents means "remove it". Enablement is collected into batches so systemd is
//! called once per kind, after a single daemon-reload.

use crate::validate::{Desired, UnitSpec};
use std::collections::BTreeSet;

/// Where unit files are written (MCO's choice: the admin's directory, above /usr/lib).
pub const UNIT_DIR: &str = aloft_api::node_limits::UNIT_DIR;

/// The names a config may give units and drop-ins: one check, shared with the coordinator's
/// admission, so what the API accepts is what an agent writes.
pub use aloft_api::content::{check_dropin_name, check_unit_name};

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
    fn unit_paths_are_under_the_unit_dir() {
        assert!(is_unit_path("/etc/systemd/system/a.service.d/x.conf"));
        assert!(!is_unit_path("/etc/systemd/systemx/a"));
    }
}
