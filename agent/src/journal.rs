//! The apply transaction journal: the single source of an apply's progress.
//!
//! Before the first change to the host, the agent writes (atomically, fsynced) one record with
//! both configs, the complete list of forward steps, the complete list of rollback steps, and
//! every byte those steps need: the new contents and the pre-apply state of every path the apply
//! may touch. Small contents (almost all of a config: up to [`INLINE_MAX`] each, [`INLINE_BUDGET`]
//! in all) sit in the record itself, so making them durable costs the record's one fsync; larger
//! ones go to a blob store beside it, fsynced together before the record names them. Every step is idempotent, so after a crash at any point
//! recovery simply runs the list of the recorded phase again from the start: forward (roll
//! forward to the new config) or rollback (back to the old one, with a reason). Nothing about
//! progress lives in memory or in closures.
//!
//! Layout: `<root>/var/lib/aloft/journal/record.json` and `.../journal/blobs/<sha256>`.

use crate::apply::ApplyReport;
use crate::files::{BackupAction, Kind, RemoveAction};
use crate::host::Root;
use aloft_api::MachineConfigSpec;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Journal failures: the journal is the only record of progress, so these stop the apply. Each
/// message quotes its cause, which is not also the error's source (a reason formatted with its
/// chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("journal record {path} is corrupt: {error}")]
    Corrupt { path: PathBuf, error: serde_json::Error },
    #[error(
        "journal record {path} has version {found}, this agent understands {OLDEST_RECORD_VERSION} to {RECORD_VERSION}"
    )]
    Version { path: PathBuf, found: u32 },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |error| JournalError::Io { path: path.to_path_buf(), error }
}

/// Version of the record format this agent writes. Version 2 added [`Content::Inline`].
pub const RECORD_VERSION: u32 = 2;

/// The oldest record version this agent still reads. Version 1 records are version 2 records
/// without inline contents, so an agent upgraded in the middle of an apply (rare, but a crash
/// loop can make it happen) still finishes or rolls back the apply the old agent started. An
/// older agent reading a version 2 record stops with [`JournalError::Version`] instead of
/// misreading it.
pub const OLDEST_RECORD_VERSION: u32 = 1;

/// Contents up to this size are kept in the record ([`Content::Inline`]); larger ones are blobs.
/// Config files are small, so one fsync of the record replaces one per file; a large file (a
/// CA bundle, a binary) is still streamed to a blob instead of bloating every save of the record.
pub const INLINE_MAX: usize = 64 * 1024;

/// At most this many bytes of contents inline in one record, forward and rollback together:
/// the record is rewritten at every phase change, so past this the rest go to blobs.
pub const INLINE_BUDGET: usize = 1024 * 1024;

/// Bytes at a path: the target of a write, or the pre-apply state a rollback restores.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Content {
    Absent,
    /// A regular file whose bytes are the blob `blob` (sha256, hex).
    File {
        blob: String,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// A regular file whose bytes are kept in the record (base64 in the JSON): durable with the
    /// record, no blob of its own. Since record version 2.
    Inline {
        #[serde(with = "b64")]
        data: Vec<u8>,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Symlink {
        target: String,
    },
    Dir {
        mode: u32,
        uid: u32,
        gid: u32,
    },
}

/// A batch call to the service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ServiceOp {
    Enable,
    Disable,
    Preset,
}

/// One idempotent step of an apply or of its rollback. Paths are absolute config paths,
/// resolved beneath the root when run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Step {
    /// MCO's backup before the first write of `path`; skipped when a backup exists.
    Backup {
        path: String,
        action: BackupAction,
    },
    /// Make `path` hold `content` (parents created 0755).
    Write {
        path: String,
        kind: Kind,
        content: Content,
    },
    /// `path` left the config: restore the original or delete.
    Remove {
        path: String,
        action: RemoveAction,
    },
    /// Rollback: put back the pre-apply state of `path`.
    Restore {
        path: String,
        content: Content,
    },
    /// Rollback: remove a directory the apply created, if it is empty.
    RemoveDir {
        path: String,
    },
    /// Remove the temp file a crashed write may have left for `path`.
    CleanTemp {
        path: String,
    },
    /// enable/disable/preset `units` in one call; with `only_present`, only those whose file
    /// exists in /etc/systemd/system when the step runs (a re-run after the file was deleted).
    Service {
        op: ServiceOp,
        units: Vec<String>,
        only_present: bool,
    },
    DaemonReload,
}

/// Where an apply is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum Phase {
    /// Going to the new config; recovery re-runs `forward`.
    Forward,
    /// The new config is fully applied.
    Committed,
    /// Going back to the old config because of `reason`; recovery re-runs `rollback`.
    RollingBack { reason: String },
    /// Back on the old config; the node is Degraded with `reason`.
    RolledBack { reason: String },
}

impl Phase {
    /// Where the apply stands, in words (for a reason a user reads; not the record's format).
    pub fn describe(&self) -> String {
        match self {
            Phase::Forward => "it was writing the new config".into(),
            Phase::Committed => "it wrote the new config".into(),
            Phase::RollingBack { reason } => format!("it was rolling back after: {reason}"),
            Phase::RolledBack { reason } => format!("it rolled back after: {reason}"),
        }
    }

    /// Terminal phases need no recovery.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Phase::Committed | Phase::RolledBack { .. })
    }
}

/// The journal record of one apply.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub version: u32,
    /// sha256 of the new spec (hex, 16 chars): which apply this is.
    pub id: String,
    pub phase: Phase,
    pub old: MachineConfigSpec,
    pub new: MachineConfigSpec,
    pub forward: Vec<Step>,
    pub rollback: Vec<Step>,
    /// What the apply changes, for the disruption policy (also after a recovery).
    pub report: ApplyReport,
}

impl Record {
    /// Blobs the record refers to.
    pub fn blobs(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for s in self.forward.iter().chain(&self.rollback) {
            if let Step::Write { content: Content::File { blob, .. }, .. }
            | Step::Restore { content: Content::File { blob, .. }, .. } = s
            {
                out.insert(blob.clone());
            }
        }
        out
    }
}

/// The journal directory of a root.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

const RECORD: &str = "record.json";
const BLOBS: &str = "blobs";

impl Journal {
    /// `<root>/var/lib/aloft/journal`.
    pub fn new(root: &Root) -> Self {
        Journal { dir: root.state_dir().join("journal") }
    }

    /// The journal directory (for status output and tests).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn record_path(&self) -> PathBuf {
        self.dir.join(RECORD)
    }

    fn blob_dir(&self) -> PathBuf {
        self.dir.join(BLOBS)
    }

    /// The current record, if any.
    pub fn load(&self) -> Result<Option<Record>, JournalError> {
        let path = self.record_path();
        let Some(bytes) = self.read_record()? else { return Ok(None) };
        self.check_version(&path, &bytes)?;
        serde_json::from_slice(&bytes).map(Some).map_err(|error| JournalError::Corrupt { path, error })
    }

    /// The current record's phase only, if there is a record: what an apply checks before it
    /// starts, without decoding the previous apply's configs and steps.
    pub fn phase(&self) -> Result<Option<Phase>, JournalError> {
        #[derive(serde::Deserialize)]
        struct PhaseOnly {
            phase: Phase,
        }
        let path = self.record_path();
        let Some(bytes) = self.read_record()? else { return Ok(None) };
        self.check_version(&path, &bytes)?;
        serde_json::from_slice::<PhaseOnly>(&bytes)
            .map(|p| Some(p.phase))
            .map_err(|error| JournalError::Corrupt { path, error })
    }

    fn read_record(&self) -> Result<Option<Vec<u8>>, JournalError> {
        let path = self.record_path();
        match fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Refuses a record of a version this agent does not understand before decoding it.
    fn check_version(&self, path: &Path, bytes: &[u8]) -> Result<(), JournalError> {
        #[derive(serde::Deserialize)]
        struct VersionOnly {
            #[serde(default)]
            version: u32,
        }
        let v: VersionOnly =
            serde_json::from_slice(bytes).map_err(|error| JournalError::Corrupt { path: path.to_path_buf(), error })?;
        if !(OLDEST_RECORD_VERSION..=RECORD_VERSION).contains(&v.version) {
            return Err(JournalError::Version { path: path.to_path_buf(), found: v.version });
        }
        Ok(())
    }

    /// Creates a private directory (0700): the journal holds pre-apply copies of files such as
    /// /etc/shadow, which must stay as private as the originals.
    fn private_dir(dir: &Path) -> Result<(), JournalError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))
    }

    /// A new private (0600) file, truncated.
    fn private_file(path: &Path) -> Result<fs::File, JournalError> {
        fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).map_err(io_err(path))
    }

    /// Writes the record atomically and durably (temp, fsync, rename, fsync of the directory).
    pub fn save(&self, record: &Record) -> Result<(), JournalError> {
        let path = self.record_path();
        Self::private_dir(&self.dir)?;
        let tmp = self.dir.join(".record.json.tmp");
        let bytes = serde_json::to_vec(record).map_err(|e| io_err(&path)(io::Error::other(e)))?;
        let mut f = Self::private_file(&tmp)?;
        f.write_all(&bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
        drop(f);
        crate::reclaim::hold_path(&path);
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        sync_dir(&self.dir)
    }

    /// Stores `data` as a blob (named by its sha256; idempotent) and returns its name. The blob
    /// is not fsynced by itself: [`Journal::sync_blobs`] flushes the data and the names before a record uses them.
    pub fn put_blob(&self, data: &mut dyn Read) -> Result<String, JournalError> {
        let dir = self.blob_dir();
        Self::private_dir(&self.dir)?;
        Self::private_dir(&dir)?;
        let tmp = dir.join(".incoming");
        let mut f = Self::private_file(&tmp)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let copied = (|| -> Result<(), JournalError> {
            loop {
                let n = data.read(&mut buf).map_err(io_err(&tmp))?;
                if n == 0 {
                    return Ok(());
                }
                hasher.update(&buf[..n]);
                f.write_all(&buf[..n]).map_err(io_err(&tmp))?;
            }
        })();
        if let Err(e) = copied {
            // A half-written blob (a full disk) would keep the space it took.
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // Not fsynced one by one: blobs only matter once a record names them, and
        // [`Journal::sync_blobs`] flushes them all together before any record does.
        drop(f);
        let name = hex::encode(hasher.finalize());
        fs::rename(&tmp, dir.join(&name)).map_err(io_err(&dir))?;
        fail::fail_point!(crate::apply::points::JOURNAL_AFTER_BLOB);
        Ok(name)
    }

    /// Makes the blob directory's entries durable.
    pub fn sync_blobs(&self) -> Result<(), JournalError> {
        let dir = self.blob_dir();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        // Every blob in the directory belongs to the apply being prepared (the previous apply's
        // were collected): fsync them concurrently, then their names.
        let mut paths = Vec::new();
        for ent in fs::read_dir(&dir).map_err(io_err(&dir))? {
            paths.push(ent.map_err(io_err(&dir))?.path());
        }
        let files = paths.iter().map(|p| fs::File::open(p).map_err(io_err(p))).collect::<Result<Vec<_>, _>>()?;
        crate::durable::fsync_all(&files).map_err(|(i, e)| io_err(&paths[i])(e))?;
        sync_dir(&dir)?;
        sync_dir(&self.dir)
    }

    /// Opens a blob for reading; the reader fails at its end when the bytes do not hash to the
    /// blob's name, so a damaged blob is never renamed into place.
    pub fn open_blob(&self, name: &str) -> Result<impl Read, JournalError> {
        let path = self.blob_dir().join(name);
        let f = fs::File::open(&path).map_err(io_err(&path))?;
        Ok(VerifyingReader { inner: f, hasher: Sha256::new(), want: name.to_string() })
    }

    /// Removes blobs no record refers to (left by a crash before a record was written, or by a
    /// finished apply).
    pub fn gc(&self, keep: &BTreeSet<String>) -> Result<(), JournalError> {
        let dir = self.blob_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        for ent in entries {
            let ent = ent.map_err(io_err(&dir))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) {
                fs::remove_file(ent.path()).map_err(io_err(&ent.path()))?;
            }
        }
        Ok(())
    }

    /// [`Journal::clear`] when the record is of a finished apply; an unfinished one (and its
    /// blobs) stays for recovery. Returns whether a record was removed.
    pub fn clear_finished(&self) -> Result<bool, JournalError> {
        match self.phase()? {
            Some(p) if p.is_terminal() => {
                self.clear()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Forgets the last apply: the caller has recorded its outcome elsewhere.
    pub fn clear(&self) -> Result<(), JournalError> {
        let path = self.record_path();
        crate::reclaim::hold_path(&path);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        self.gc(&BTreeSet::new())
    }
}

/// Serde for inline contents: base64 (standard alphabet, padded) in a JSON string.
mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(data))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

struct VerifyingReader {
    inner: fs::File,
    hasher: Sha256,
    want: String,
}

impl Read for VerifyingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            let got = hex::encode(self.hasher.clone().finalize());
            if got != self.want {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("journal blob {} is damaged (sha256 {got})", self.want),
                ));
            }
        }
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full disk while the apply backs the originals up, as a Node's reason quotes it (the
    /// daemon formats errors with their chain): the OS error once. It was said three times,
    /// each layer both quoting and chaining its cause.
    #[test]
    fn a_journal_error_in_a_reason_says_its_cause_once() {
        let full = JournalError::Io {
            path: "/var/lib/aloft/journal/blobs/ab".into(),
            error: io::Error::from_raw_os_error(28),
        };
        let e = crate::apply::ApplyError::Prepare(crate::apply::StepError::Journal(full));
        let reason = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(reason.matches("os error 28").count(), 1, "{reason}");
        assert!(reason
            .starts_with("failed to prepare the apply (nothing changed): journal /var/lib/aloft/journal/blobs/ab: "));
        let fs = crate::fsroot::FsError::new("write", "/etc/x", io::Error::from_raw_os_error(28));
        let e = crate::apply::ApplyError::Prepare(crate::apply::StepError::Fs(fs));
        let reason = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(reason.matches("os error 28").count(), 1, "{reason}");
        assert!(reason.contains(": write /etc/x: "), "one slash before a path given absolute: {reason}");
    }

    #[test]
    fn blobs_verify_and_gc() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&Root::new(dir.path()));
        assert!(j.load().unwrap().is_none());
        let a = j.put_blob(&mut &b"alpha"[..]).unwrap();
        let b = j.put_blob(&mut &b"beta"[..]).unwrap();
        j.sync_blobs().unwrap();
        let mut s = String::new();
        j.open_blob(&a).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "alpha");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fs::metadata(j.dir().join("blobs").join(&a)).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(j.dir()).unwrap().mode() & 0o777, 0o700);
        fs::write(j.dir().join("blobs").join(&b), b"tampered").unwrap();
        assert!(j.open_blob(&b).unwrap().read_to_string(&mut String::new()).is_err());
        j.gc(&[a.clone()].into_iter().collect()).unwrap();
        assert!(j.open_blob(&b).is_err());
        assert!(j.open_blob(&a).is_ok());
        // A blob whose copy fails half-way (a full disk) leaves nothing behind to hold space.
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::new(io::ErrorKind::StorageFull, "No space left on device"));
                }
                self.0 -= 1;
                let n = buf.len().min(4096);
                buf[..n].fill(b'x');
                Ok(n)
            }
        }
        assert!(j.put_blob(&mut Failing(3)).is_err());
        let left: Vec<_> = fs::read_dir(j.dir().join("blobs")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from(&a)], "no .incoming left");
        fs::create_dir_all(j.dir()).unwrap();
        fs::write(j.dir().join("record.json"), br#"{"version": 7}"#).unwrap();
        assert!(matches!(j.load(), Err(JournalError::Version { found: 7, .. })));
    }

    fn record(forward: Vec<Step>) -> Record {
        Record {
            version: RECORD_VERSION,
            id: "0123456789abcdef".into(),
            phase: Phase::Forward,
            old: MachineConfigSpec::default(),
            new: MachineConfigSpec::default(),
            forward,
            rollback: vec![Step::Restore { path: "/etc/a".into(), content: Content::Absent }],
            report: ApplyReport::default(),
        }
    }

    #[test]
    fn inline_contents_round_trip_through_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&Root::new(dir.path()));
        // Every byte value, and an empty file.
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let rec = record(vec![
            Step::Write {
                path: "/etc/a".into(),
                kind: Kind::File,
                content: Content::Inline { data: data.clone(), mode: 0o640, uid: 1000, gid: 10 },
            },
            Step::Write {
                path: "/etc/b".into(),
                kind: Kind::File,
                content: Content::Inline { data: Vec::new(), mode: 0o644, uid: 0, gid: 0 },
            },
        ]);
        j.save(&rec).unwrap();
        assert_eq!(j.load().unwrap().unwrap(), rec);
        assert_eq!(j.phase().unwrap(), Some(Phase::Forward));
        assert!(rec.blobs().is_empty(), "inline contents name no blob");
        let text = fs::read_to_string(j.dir().join("record.json")).unwrap();
        use base64::Engine;
        assert!(text.contains(&base64::engine::general_purpose::STANDARD.encode(&data)), "base64 in the JSON");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fs::metadata(j.dir().join("record.json")).unwrap().mode() & 0o777, 0o600, "as private as blobs");
        // Damaged base64 is a corrupt record, not a silently different file.
        fs::write(j.dir().join("record.json"), text.replacen("\"data\":\"", "\"data\":\"!", 1)).unwrap();
        assert!(matches!(j.load(), Err(JournalError::Corrupt { .. })));
    }

    #[test]
    fn only_finished_records_are_cleared_before_an_apply() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&Root::new(dir.path()));
        assert!(!j.clear_finished().unwrap(), "no record");
        let mut rec = record(Vec::new());
        j.save(&rec).unwrap();
        assert!(!j.clear_finished().unwrap());
        assert_eq!(j.load().unwrap(), Some(rec.clone()), "an unfinished apply stays for recovery");
        rec.phase = Phase::Committed;
        j.save(&rec).unwrap();
        assert!(j.clear_finished().unwrap());
        assert_eq!(j.load().unwrap(), None);
        // Rolled back is finished too: left, it refused every later apply as unfinished.
        rec.phase = Phase::RolledBack { reason: "a step failed".into() };
        j.save(&rec).unwrap();
        assert!(j.clear_finished().unwrap());
        assert_eq!(j.load().unwrap(), None);
        crate::reclaim::release();
    }

    #[test]
    fn version_1_records_still_load_and_newer_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&Root::new(dir.path()));
        // A record as the previous agent wrote it: version 1, every content a blob.
        let blob = j.put_blob(&mut &b"old agent"[..]).unwrap();
        j.sync_blobs().unwrap();
        let mut rec = record(vec![Step::Write {
            path: "/etc/a".into(),
            kind: Kind::File,
            content: Content::File { blob: blob.clone(), mode: 0o644, uid: 0, gid: 0 },
        }]);
        rec.version = 1;
        j.save(&rec).unwrap();
        assert_eq!(j.load().unwrap().unwrap(), rec);
        assert_eq!(rec.blobs(), [blob].into_iter().collect());
        fs::write(j.dir().join("record.json"), br#"{"version": 3, "phase": {"phase": "forward"}}"#).unwrap();
        assert!(matches!(j.load(), Err(JournalError::Version { found: 3, .. })));
        assert!(matches!(j.phase(), Err(JournalError::Version { found: 3, .. })));
        fs::write(j.dir().join("record.json"), br#"{"phase": {"phase": "forward"}}"#).unwrap();
        assert!(matches!(j.load(), Err(JournalError::Version { found: 0, .. })), "no version: not ours");
    }
}
