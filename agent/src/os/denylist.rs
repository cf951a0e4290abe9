//! Commits that failed their health checks on this node, as Zincati denylists releases it left.
//!
//! Why: after a rollback the desired config still names the bad commit; without a memory of the
//! failure the agent would pull, stage and reboot into it again, in a loop. The list is keyed to
//! the desired config it was recorded under and cleared when the coordinator asks for another
//! one (a new rendered config is a new decision by a person or a controller). Persisted under the
//! agent's state directory so a restart or a reboot does not forget it.

use crate::host::Root;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;

/// One refused commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub checksum: String,
    /// The deployment of `checksum` that failed (ostree's deploy serial), when known: an update
    /// that changes only kernel arguments fails on a new deployment of the commit the node ran
    /// before, and the commit alone cannot tell the failed deployment from the one rolled back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_serial: Option<i32>,
    /// The failing check and its output.
    pub reason: String,
    /// RFC 3339.
    pub at: String,
}

/// The persisted list (`<root>/var/lib/aloft/os-denylist.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Denylist {
    /// The desired config under which the entries were recorded.
    pub desired_config: String,
    pub entries: Vec<Entry>,
}

fn path(root: &Root) -> PathBuf {
    root.state_dir().join("os-denylist.json")
}

impl Denylist {
    /// The list on disk; empty when there is none. A corrupt file is an error (never silently
    /// forget a bad commit).
    pub fn load(root: &Root) -> std::io::Result<Denylist> {
        match std::fs::read(path(root)) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} is corrupt: {e}", path(root).display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Denylist::default()),
            Err(e) => Err(std::io::Error::new(e.kind(), format!("reading {}: {e}", path(root).display()))),
        }
    }

    /// Write atomically (temp, fsync, rename, fsync dir). The error names the file: it becomes a
    /// Node's reason.
    pub fn save(&self, root: &Root) -> std::io::Result<()> {
        self.write(root).map_err(|e| std::io::Error::new(e.kind(), format!("writing {}: {e}", path(root).display())))
    }

    fn write(&self, root: &Root) -> std::io::Result<()> {
        let dir = root.state_dir();
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join(".os-denylist.json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path(root))?;
        std::fs::File::open(&dir)?.sync_all()
    }

    /// The entry for `checksum`, if it is refused.
    pub fn find(&self, checksum: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.checksum == checksum)
    }

    /// Record `checksum` (its deployment `deploy_serial`, when known) as failed under `desired`.
    pub fn deny(&mut self, desired: &str, checksum: &str, deploy_serial: Option<i32>, reason: &str) {
        if self.desired_config != desired {
            self.desired_config = desired.to_string();
            self.entries.clear();
        }
        self.entries.retain(|e| e.checksum != checksum);
        self.entries.push(Entry {
            checksum: checksum.to_string(),
            deploy_serial,
            reason: reason.to_string(),
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
    }

    /// Forget everything when the desired config is no longer the one the entries were recorded
    /// under; returns whether anything was forgotten.
    pub fn clear_unless(&mut self, desired: &str) -> bool {
        if self.entries.is_empty() || self.desired_config == desired {
            return false;
        }
        *self = Denylist::default();
        true
    }
}

/// Load, clear when `desired` changed, and save if that forgot something.
pub fn refresh(root: &Root, desired: &str) -> std::io::Result<Denylist> {
    let mut list = Denylist::load(root)?;
    if !desired.is_empty() && list.clear_unless(desired) {
        tracing::info!(desired, "desired config changed: OS commit denylist cleared");
        list.save(root)?;
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_and_clears_when_desired_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert_eq!(Denylist::load(&root).unwrap(), Denylist::default());
        let mut l = Denylist::default();
        l.deny("rendered-worker-2", "aa", Some(1), "health check 10-fail failed");
        l.save(&root).unwrap();
        assert_eq!(Denylist::load(&root).unwrap().find("aa").and_then(|e| e.deploy_serial), Some(1));
        // A list saved by an agent from before the serial still loads.
        let old =
            r#"{"desiredConfig": "rendered-worker-2", "entries": [{"checksum": "aa", "reason": "r", "at": "x"}]}"#;
        std::fs::write(root.state_dir().join("os-denylist.json"), old).unwrap();
        assert_eq!(Denylist::load(&root).unwrap().find("aa").map(|e| e.deploy_serial), Some(None));
        let l = refresh(&root, "rendered-worker-2").unwrap();
        assert!(l.find("aa").is_some(), "kept while desired is the same");
        assert!(l.find("bb").is_none());
        let l = refresh(&root, "rendered-worker-3").unwrap();
        assert!(l.find("aa").is_none(), "cleared when desired changes");
        assert!(Denylist::load(&root).unwrap().entries.is_empty(), "and the clearing is persisted");
        std::fs::write(root.state_dir().join("os-denylist.json"), "{nope").unwrap();
        assert!(Denylist::load(&root).is_err(), "corrupt is an error, not an empty list");
    }

    /// Its errors become a Node's reason: each names the file.
    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let file = root.state_dir().join("os-denylist.json");
        std::fs::create_dir_all(&file).unwrap();
        let read = Denylist::load(&root).unwrap_err().to_string();
        assert!(read.starts_with(&format!("reading {}: ", file.display())), "{read}");
        // The state directory a file: nothing can be written under it.
        std::fs::remove_dir_all(root.state_dir()).unwrap();
        std::fs::write(root.state_dir(), "").unwrap();
        let write = Denylist::default().save(&root).unwrap_err().to_string();
        assert!(write.starts_with(&format!("writing {}: ", file.display())), "{write}");
    }
}
