//! Which config's files the disk holds while an undo takes it back to the current config.
//!
//! When a rebootless action of an update fails, or its OS deployment cannot be staged after its
//! files are written, the update is undone: the config before is saved current (again) and its
//! files and units are written back (`Agent::undo_update`). Should that
//! write fail (its journal then rolls it back), the disk holds the update's files while the
//! config before is saved current: the next update would be planned from a config the disk does
//! not hold, and a revert reported Done over the update's files. The apply journal says so only
//! until the next apply starts (an apply clears the last record before it plans, and a plan that
//! fails leaves none), so the undo says it in a file of its own: written before the undo's apply,
//! removed once the disk holds the current config again (the undo finished, or the update undone
//! applied after all and reported Done).

use crate::host::Root;
use aloft_api::MachineConfigSpec;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// The file beneath the state directory; it holds a config's files' contents, secrets included,
/// so it is the root's alone to read, as the current config is.
const FILE: &str = "undoing.json";

fn path(root: &Root) -> PathBuf {
    root.state_dir().join(FILE)
}

/// Says, durably, that an undo is about to take the disk from `from` (a normalized spec) back to
/// the current config. Written before the undo's apply: a crash in that apply leaves the disk on
/// either config, and [`pending`] then has the agent write the current config again either way.
pub fn begin(root: &Root, from: &MachineConfigSpec) -> Result<()> {
    let bytes = serde_json::to_vec(from)?;
    crate::durable::replace_private(&path(root), &bytes)
        .with_context(|| format!("recording the undo in {}", path(root).display()))
}

/// The disk holds the current config again: forget the undo (durably; nothing when there was none).
pub fn done(root: &Root) -> Result<()> {
    let p = path(root);
    match std::fs::remove_file(&p) {
        Ok(()) => std::fs::File::open(root.state_dir())
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {} after removing {FILE}", root.state_dir().display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", p.display())),
    }
}

/// The config whose files an undo that has not finished left on disk, when it is not `current`
/// (the config saved current; compared normalized, as every apply's specs are). `None` when no
/// undo is recorded, or when the disk holds the current config after all (the update undone was
/// tried again and applied). An unreadable record is an error naming the file: judged either way
/// it could report Done over another config's files or write a config over the right ones.
pub fn pending(root: &Root, current: Option<&MachineConfigSpec>) -> Result<Option<MachineConfigSpec>> {
    let p = path(root);
    let text = match std::fs::read(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    let from: MachineConfigSpec = serde_json::from_slice(&text).with_context(|| {
        format!("{} is corrupt (it names the config whose files an undo left on disk)", p.display())
    })?;
    let current = current.map(|c| crate::engine::normalize(c).unwrap_or_else(|_| c.clone()));
    Ok((current.as_ref() != Some(&from)).then_some(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> MachineConfigSpec {
        let raw = MachineConfigSpec {
            os_image_url: url.into(),
            config: serde_json::json!({"ignition": {"version": "3.4.0"}}),
            ..Default::default()
        };
        crate::engine::normalize(&raw).unwrap()
    }

    /// The record outlives anything the journal does, says which config the disk may hold until
    /// the undo is done, and is private.
    #[test]
    fn an_undo_is_pending_until_done_or_the_disk_holds_the_current_config() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let (before, undone) = (spec("a"), spec("b"));
        assert_eq!(pending(&root, Some(&before)).unwrap(), None, "nothing recorded");
        begin(&root, &undone).unwrap();
        let mode = std::fs::metadata(path(&root)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(pending(&root, Some(&before)).unwrap(), Some(undone.clone()));
        assert_eq!(pending(&root, None).unwrap(), Some(undone.clone()), "no config current");
        // The update undone, tried again and applied: the disk holds the current config.
        assert_eq!(pending(&root, Some(&undone)).unwrap(), None);
        done(&root).unwrap();
        assert_eq!(pending(&root, Some(&before)).unwrap(), None);
        done(&root).unwrap();
        std::fs::write(path(&root), "{nope").unwrap();
        let err = format!("{:#}", pending(&root, Some(&before)).unwrap_err());
        assert!(err.contains("undoing.json is corrupt"), "{err}");
    }
}
