//! Drift watch: while the node is idle, inotify on the directories holding the current config's
//! files and units. Any change there triggers MCO's on-disk validation again, so someone editing
//! a managed file by hand shows up as Degraded (`content mismatch for file ...`) within moments,
//! not at the next update.
//!
//! An inotify watch belongs to a directory's inode: a directory removed and made again (`rm -rf`
//! and a restore) is not watched any more. So a watch knows the identity (device, inode) of every
//! directory it holds, a directory that does not exist is watched through its nearest existing
//! ancestor (whose change says it is back), and the caller asks [`DriftWatch::is_current`] after
//! each change and arms a new watch when the answer is no (MCO's drift monitor is likewise
//! started afresh after a repair).

use crate::host::Root;
use aloft_api::MachineConfig;
use notify::{RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// A live watch; dropping it stops watching.
pub struct DriftWatch {
    _watcher: notify::RecommendedWatcher,
    pub events: mpsc::Receiver<()>,
    /// What was watched, as [`identities`] saw it when the watch was armed.
    watched: Vec<(PathBuf, Option<(u64, u64)>)>,
}

impl DriftWatch {
    /// Whether the watch still covers what [`directories`] asks for now, by the same
    /// directories (not others made since under the same names, nor ones that appeared where
    /// an ancestor was watched).
    pub fn is_current(&self, root: &Root, mc: &MachineConfig, force_file: bool) -> bool {
        self.watched == identities(&directories(root, mc, force_file))
    }
}

/// The directories to watch for `mc` beneath `root`: each file's parent, the unit directory and
/// each unit's drop-in directory, the SSH keys directory, and (when a unit's `enabled` is set)
/// every `*.wants` / `*.requires` directory of the unit directory, where `systemctl enable` and
/// `disable` add and remove the links the on-disk check reads; with `force_file`, the directory
/// of MCO's force file too. A directory that does not exist is replaced by its nearest existing
/// ancestor beneath `root`, where its creation shows; a link directory created later shows as a
/// change of the unit directory itself.
pub fn directories(root: &Root, mc: &MachineConfig, force_file: bool) -> BTreeSet<PathBuf> {
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
            if crate::ondisk::ENABLEMENT_DIRS.iter().any(|suffix| name.ends_with(suffix)) {
                dirs.insert(entry.path());
            }
        }
    }
    if force_file {
        if let Some(parent) = root.path().join(crate::daemon::FORCE_FILE).parent() {
            dirs.insert(parent.to_path_buf());
        }
    }
    dirs.into_iter().filter_map(|d| existing(root.path(), &d)).collect()
}

/// `dir`, or its nearest existing ancestor not above `root`; `None` when not even `root` is a
/// directory (or `dir` is not beneath it).
fn existing(root: &Path, dir: &Path) -> Option<PathBuf> {
    dir.ancestors().take_while(|a| a.starts_with(root)).find(|a| a.is_dir()).map(Path::to_path_buf)
}

/// Each directory with its (device, inode) now, `None` when it is gone.
fn identities(dirs: &BTreeSet<PathBuf>) -> Vec<(PathBuf, Option<(u64, u64)>)> {
    dirs.iter().map(|d| (d.clone(), std::fs::metadata(d).ok().map(|m| (m.dev(), m.ino())))).collect()
}

/// Start watching (with `force_file`, for MCO's force file too); `None` when nothing can be
/// watched (or inotify is unavailable, logged).
pub fn watch(root: &Root, mc: &MachineConfig, force_file: bool) -> Option<DriftWatch> {
    let dirs = directories(root, mc, force_file);
    if dirs.is_empty() {
        return None;
    }
    // Taken before the watches are added: a directory replaced in between reads as a change,
    // and the caller arms again.
    let watched = identities(&dirs);
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
    Some(DriftWatch { _watcher: watcher, events: rx, watched })
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
        let dirs = directories(&root, &mc, false);
        assert!(dirs.contains(&dir.path().join("etc/app")));
        assert!(dirs.contains(&dir.path().join("etc/systemd/system")));
        assert!(!dirs.iter().any(|d| d.ends_with("missing")), "only existing directories");
        assert!(dirs.contains(&dir.path().join("etc")), "a missing one through its nearest ancestor: {dirs:?}");
        let mut w = watch(&root, &mc, false).unwrap();
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
        let dirs = directories(&root, &unit(json!(true)), false);
        assert!(dirs.contains(&wants), "{dirs:?}");
        assert!(dirs.contains(&dir.path().join("etc/systemd/system/other.target.requires")), "{dirs:?}");
        // No enablement in the config: nothing there to compare, nothing to watch.
        assert!(!directories(&root, &unit(Value::Null), false).contains(&wants));
        let mut w = watch(&root, &unit(json!(true)), false).unwrap();
        std::fs::remove_file(wants.join("a.service")).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), w.events.recv()).await.unwrap().unwrap();
    }

    /// A directory removed and made again is not the one watched any more: the watch says so,
    /// the missing directory is watched through its ancestor (where its creation shows), and a
    /// watch armed again sees edits in the new directory. The force file's directory is watched
    /// only when asked for.
    #[tokio::test]
    async fn a_directory_made_again_is_watched_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let app = dir.path().join("etc/app");
        std::fs::create_dir_all(&app).unwrap();
        let mc: MachineConfig = serde_json::from_value(json!({"metadata": {"name": "r1"}, "spec": {"config": {
            "ignition": {"version": "3.5.0"}, "storage": {"files": [{"path": "/etc/app/a.conf"}]}}}}))
        .unwrap();
        async fn next(w: &mut DriftWatch) {
            tokio::time::timeout(std::time::Duration::from_secs(5), w.events.recv()).await.unwrap().unwrap()
        }
        let mut w = watch(&root, &mc, false).unwrap();
        assert!(w.is_current(&root, &mc, false));
        assert!(!w.is_current(&root, &mc, true), "the force file's directory is not watched");
        assert!(directories(&root, &mc, true).contains(dir.path()), "no run/ here: its ancestor, the root");

        std::fs::remove_dir_all(&app).unwrap();
        next(&mut w).await;
        assert!(!w.is_current(&root, &mc, false), "the removed directory is still taken for watched");
        let mut w = watch(&root, &mc, false).unwrap();
        assert_eq!(directories(&root, &mc, false), BTreeSet::from([dir.path().join("etc")]));
        std::fs::create_dir_all(&app).unwrap();
        next(&mut w).await;
        assert!(!w.is_current(&root, &mc, false), "the directory made again is still taken for its ancestor");
        let mut w = watch(&root, &mc, false).unwrap();
        std::fs::write(app.join("a.conf"), "edited by hand").unwrap();
        next(&mut w).await;
        assert!(w.is_current(&root, &mc, false));
    }
}
