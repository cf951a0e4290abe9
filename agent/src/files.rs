//! Files a config writes (its `storage.files`, unit files, drop-ins, masks) and MCO's backup
//! semantics for them, so that a path leaving the config gets back what the OS had there.
//!
//! Before the first write of a path that the current config does not manage yet: if something is
//! there, copy it to `/etc/machine-config-daemon/orig/<path>.mcdorig`, else write the stamp
//! `/etc/machine-config-daemon/noorig/<path>.mcdnoorig`. When the path leaves the config: restore
//! the original, or delete the file (a noorig stamp, or no backup at all: the content was the
//! config's). Each operation here is idempotent so a crashed apply can simply run again.

use crate::fsroot::{self, Entry, FsError, HostFs};
use crate::units::{self, UnitFile};
use crate::validate::{Desired, Owners};
use std::io::{self, Read};
use std::path::Path;

/// MCO's directory of originals.
pub const ORIG_DIR: &str = "/etc/machine-config-daemon/orig";
/// MCO's directory of "there was nothing here" stamps.
pub const NOORIG_DIR: &str = "/etc/machine-config-daemon/noorig";

/// Default mode of written files and of created parent directories (MCO's).
pub const DEFAULT_FILE_MODE: u32 = 0o644;
pub const DEFAULT_DIR_MODE: u32 = 0o755;

/// `(orig, noorig)` backup locations of an absolute path.
pub fn backup_paths(path: &str) -> (String, String) {
    (format!("{ORIG_DIR}{path}.mcdorig"), format!("{NOORIG_DIR}{path}.mcdnoorig"))
}

/// What a config wants at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    File {
        contents: Vec<u8>,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Symlink {
        target: String,
    },
    /// Nothing (a drop-in with empty contents).
    Absent,
}

/// What kind of config entry a path comes from: decides the failpoint names and whether a
/// change needs daemon-reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    File,
    Unit,
    Dropin,
    Ssh,
    Shadow,
}

/// One path under the config's management.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Managed {
    pub path: String,
    pub kind: Kind,
    pub want: Want,
}

/// Every path a config manages with backup semantics: its files, unit files (contents or mask)
/// and drop-ins. Owner names must resolve (validation checked that); unknown ones fall back to 0.
pub fn managed(d: &Desired, owners: &Owners) -> Vec<Managed> {
    let mut out: Vec<Managed> = d
        .files
        .iter()
        .map(|f| Managed {
            path: f.path.clone(),
            kind: Kind::File,
            want: Want::File {
                contents: f.contents.clone(),
                mode: f.mode,
                uid: owners.uid(&f.user).unwrap_or(0),
                gid: owners.gid(&f.group).unwrap_or(0),
            },
        })
        .collect();
    for u in &d.units {
        let want = match units::unit_file(u) {
            UnitFile::Masked => Some(Want::Symlink { target: "/dev/null".into() }),
            UnitFile::Contents(c) => {
                Some(Want::File { contents: c.into_bytes(), mode: DEFAULT_FILE_MODE, uid: 0, gid: 0 })
            }
            UnitFile::None => None,
        };
        if let Some(want) = want {
            out.push(Managed { path: units::unit_path(&u.name), kind: Kind::Unit, want });
        }
        for dr in &u.dropins {
            let want = match &dr.contents {
                Some(c) => Want::File { contents: c.clone().into_bytes(), mode: DEFAULT_FILE_MODE, uid: 0, gid: 0 },
                None => Want::Absent,
            };
            out.push(Managed { path: units::dropin_path(&u.name, &dr.name), kind: Kind::Dropin, want });
        }
    }
    out
}

/// The backup to take before the first write of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BackupAction {
    /// Something is there: copy it to orig/.
    Orig,
    /// Nothing is there: write a noorig stamp.
    NoOrig,
}

/// What to do when a path leaves the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RemoveAction {
    /// An original was saved: put it back.
    Restore,
    /// A noorig stamp (or no backup): delete the file and the stamp.
    Delete,
}

/// Decides, before anything is touched, which backup the first write of `path` needs; `None`
/// when a backup from an earlier config already exists (it is the real original).
pub fn decide_backup(fs: &HostFs, path: &str) -> Result<Option<BackupAction>, FsError> {
    let (orig, noorig) = backup_paths(path);
    if fs.entry(&fsroot::rel(&orig))? != Entry::Absent || fs.entry(&fsroot::rel(&noorig))? != Entry::Absent {
        return Ok(None);
    }
    Ok(Some(match fs.entry(&fsroot::rel(path))? {
        Entry::Absent => BackupAction::NoOrig,
        _ => BackupAction::Orig,
    }))
}

/// Decides, before anything is touched, what removing `path` from the config means.
pub fn decide_remove(fs: &HostFs, path: &str) -> Result<RemoveAction, FsError> {
    let (orig, _) = backup_paths(path);
    Ok(match fs.entry(&fsroot::rel(&orig))? {
        Entry::Absent => RemoveAction::Delete,
        _ => RemoveAction::Restore,
    })
}

/// Copies what is at `from` to `to` (a regular file with its mode and owner, or a symlink),
/// atomically, creating `to`'s parents.
pub fn copy_entry(fs: &HostFs, from: &Path, to: &Path) -> Result<bool, FsError> {
    match fs.entry(from)? {
        Entry::File { mode, uid, gid, .. } => {
            fs.ensure_parent(to)?;
            let mut f = fs.open_read(from)?;
            fs.write_atomic(to, &mut f, mode, uid, gid)?;
            Ok(true)
        }
        Entry::Symlink { target } => {
            fs.ensure_parent(to)?;
            fs.symlink_atomic(to, &target)?;
            Ok(true)
        }
        Entry::Absent => Ok(false),
        Entry::Dir { .. } | Entry::Other { .. } => Err(FsError::new(
            "copy",
            from,
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file or symlink"),
        )),
    }
}

/// Takes the backup of `path` (idempotent: an existing backup is kept, it was taken first).
pub fn backup(fs: &HostFs, path: &str, action: BackupAction) -> Result<(), FsError> {
    let (orig, noorig) = backup_paths(path);
    match action {
        BackupAction::Orig => {
            let orig = fsroot::rel(&orig);
            if fs.entry(&orig)? == Entry::Absent && !copy_entry(fs, &fsroot::rel(path), &orig)? {
                tracing::warn!(path, "the file to back up disappeared before its first write");
            }
        }
        BackupAction::NoOrig => {
            let noorig = fsroot::rel(&noorig);
            if fs.entry(&noorig)? == Entry::Absent {
                fs.ensure_parent(&noorig)?;
                fs.write_atomic(&noorig, &mut io::empty(), DEFAULT_FILE_MODE, 0, 0)?;
            }
        }
    }
    Ok(())
}

/// Puts `path` back the way it was before the config managed it (idempotent).
pub fn remove(fs: &HostFs, path: &str, action: RemoveAction) -> Result<(), FsError> {
    let (orig, noorig) = backup_paths(path);
    let (rel, orig, noorig) = (fsroot::rel(path), fsroot::rel(&orig), fsroot::rel(&noorig));
    match action {
        RemoveAction::Restore => {
            if fs.entry(&orig)? != Entry::Absent {
                fs.ensure_parent(&rel)?;
                match fs.rename(&orig, &rel) {
                    Ok(()) => {}
                    // /var may be its own filesystem: copy, then drop the backup.
                    Err(e) if e.error.kind() == io::ErrorKind::CrossesDevices => {
                        copy_entry(fs, &orig, &rel)?;
                        fs.remove(&orig)?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        RemoveAction::Delete => {
            fs.remove(&rel)?;
        }
    }
    fs.remove(&noorig)?;
    Ok(())
}

/// Writes `data` at `path` with mode and owner, atomically, creating parents 0755.
pub fn write_file(fs: &HostFs, path: &Path, data: &mut dyn Read, mode: u32, uid: u32, gid: u32) -> Result<(), FsError> {
    fs.ensure_parent(path)?;
    fs.write_atomic(path, data, mode, uid, gid)
}
