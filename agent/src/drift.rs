//! Drift watch: while the node is idle, inotify on the directories holding the current config's
//! files and units. Any change there triggers MCO's on-disk validation again, so someone editing
//! a managed file by hand shows up as Degraded (`content mismatch for file ...`) within moments,
//! not at the next update.

use crate::host::Root;
use aloft_api::MachineConfig;
use notify::{RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::path::PathBuf;
use tokio::sync::mpsc;

/// A live watch; dropping it stops watching.
pub struct DriftWatch {
    _watcher: notify::RecommendedWatcher,
    pub events: mpsc::Receiver<()>,
}

/// The directories to watch for `mc` beneath `root`: each file's parent, the unit directory and
/// each unit's drop-in directory, the SSH keys directory, and (when a unit's `enabled` is set)
/// every `*.wants` / `*.requires` directory of the unit directory, where `systemctl enable` and
/// `disable` add and remove the links the on-disk check reads. Only existing ones can be
/// watched; a link directory created later shows as a change of the unit directory itself.
pub fn directories(root: &Root, mc: &MachineConfig) -> BTreeSet<PathBuf> {
    let mut dirs = BTreeSet::new();
    let cfg = &mc.spec.config;
    let under = |p: &str| root.path().join(p.trim_start_matches('/'));
    for f in cfg.pointer("/storage/files").and_then(|v| v.as_array()).into_iter().flatten() {
        if let Some(p) = f.get("path").and_then(|v| v.as_str()) {
            if let Some(parent) = under(p).parent() {
                dirs.insert(parent.to_path_buf());
            }
        }
    }
    let units = under("/etc/systemd/system");
    let mut enablement = false;
    for u in cfg.pointer("/systemd/units").and_then(|v| v.as_array()).into_iter().flatten() {
        dirs.insert(units.clone());
        if let Some(name) = u.get("name").and_then(|v| v.as_str()) {
            dirs.insert(units.join(format!("{name}.d")));
        }
        enablement |= u.get("enabled").is_some_and(|e| e.is_boolean());
    }
    if enablement {
        // The same directories `ondisk::enablement_links` reads.
        for entry in std::fs::read_dir(&units).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".wants") || name.ends_with(".requires") {
                dirs.insert(entry.path());
            }
        }
    }
    dirs.into_iter().filter(|d| d.is_dir()).collect()
}

/// Start watching; `None` when nothing can be watched (or inotify is unavailable, logged).
pub fn watch(root: &Root, mc: &MachineConfig) -> Option<DriftWatch> {
    let dirs = directories(root, mc);
    if dirs.is_empty() {
        return None;
    }
    // Capacity 1: a burst of changes is one re-validation.
    let (tx, rx) = mpsc::channel(1);
    let mut watcher = match notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.is_ok_and(|e| !e.kind.is_access()) {
            let _ = tx.try_send(());
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "drift watch unavailable; drift is checked at start and before updates only");
            return None;
        }
    };
    for d in &dirs {
        if let Err(e) = watcher.watch(d, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %d.display(), error = %e, "cannot watch for drift");
        }
    }
    tracing::debug!(dirs = dirs.len(), "watching for drift");
    Some(DriftWatch { _watcher: watcher, events: rx })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[tokio::test]
    async fn edits_in_watched_directories_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(dir.path().join("etc/app")).unwrap();
        std::fs::create_dir_all(dir.path().join("etc/systemd/system")).unwrap();
        let mc: MachineConfig = serde_json::from_value(json!({"metadata": {"name": "r1"}, "spec": {"config": {
            "ignition": {"version": "3.5.0"},
            "storage": {"files": [{"path": "/etc/app/a.conf"}, {"path": "/etc/missing/b.conf"}]},
            "systemd": {"units": [{"name": "x.service"}]}}}}))
        .unwrap();
        let dirs = directories(&root, &mc);
        assert!(dirs.contains(&dir.path().join("etc/app")));
        assert!(dirs.contains(&dir.path().join("etc/systemd/system")));
        assert!(!dirs.iter().any(|d| d.ends_with("missing")), "only existing directories");
        let mut w = watch(&root, &mc).unwrap();
        std::fs::write(dir.path().join("etc/app/a.conf"), "edited by hand").unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), w.events.recv()).await.unwrap().unwrap();
    }

    /// `systemctl disable` removes a link from a `*.wants` directory and changes nothing else:
    /// that directory is watched when the config sets a unit's enablement (it was not, so a
    /// disable showed only at the 10-minute check).
    #[tokio::test]
    async fn a_disable_in_a_wants_directory_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let wants = dir.path().join("etc/systemd/system/multi-user.target.wants");
        std::fs::create_dir_all(&wants).unwrap();
        std::fs::create_dir_all(dir.path().join("etc/systemd/system/other.target.requires")).unwrap();
        std::os::unix::fs::symlink("/etc/systemd/system/a.service", wants.join("a.service")).unwrap();
        let unit = |enabled: Value| {
            serde_json::from_value::<MachineConfig>(json!({"metadata": {"name": "r1"}, "spec": {"config": {
                "ignition": {"version": "3.5.0"},
                "systemd": {"units": [{"name": "a.service", "enabled": enabled}]}}}}))
            .unwrap()
        };
        let dirs = directories(&root, &unit(json!(true)));
        assert!(dirs.contains(&wants), "{dirs:?}");
        assert!(dirs.contains(&dir.path().join("etc/systemd/system/other.target.requires")), "{dirs:?}");
        // No enablement in the config: nothing there to compare, nothing to watch.
        assert!(!directories(&root, &unit(Value::Null)).contains(&wants));
        let mut w = watch(&root, &unit(json!(true))).unwrap();
        std::fs::remove_file(wants.join("a.service")).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), w.events.recv()).await.unwrap().unwrap();
    }
}
