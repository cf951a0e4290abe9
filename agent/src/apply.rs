//! Applying a rendered config to the host (files, units, SSH keys, password hash), crash-safely.
//!
//! `apply` validates (refusing with nothing written), plans every step and the matching rollback
//! steps, stores the plan and all bytes it needs in the [`Journal`], then runs the forward steps.
//! On failure it runs the rollback steps and reports the reason (the node goes Degraded on its
//! old config). After a crash, `recover` runs whatever list the journal's phase names, from the
//! start: every step is idempotent, so the node ends fully on the new config, or fully on the
//! old one with a reason, never in between.

use crate::files::{self, Kind, Managed, Want};
use crate::fsroot::{self, Entry, FsError, HostFs};
use crate::host::{Root, ServiceError, ServiceManager};
use crate::journal::{
    Content, Journal, JournalError, Phase, Record, ServiceOp, Step, INLINE_BUDGET, INLINE_MAX, RECORD_VERSION,
};
use crate::ssh;
use crate::units;
use crate::validate::{self, Desired, Refusal, Validated};
use aloft_api::reconcile::ConfigDiff;
use aloft_api::MachineConfigSpec;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Failpoint names (the `fail` crate, feature `failpoints`): one at every step boundary, so the
/// crash tests can kill the agent at each of them. Stable: tests and runbooks refer to them.
pub mod points {
    pub const JOURNAL_AFTER_BLOB: &str = "journal-after-blob";
    pub const JOURNAL_BEFORE_PREPARE: &str = "journal-before-prepare";
    pub const JOURNAL_AFTER_PREPARE: &str = "journal-after-prepare";
    pub const JOURNAL_BEFORE_COMMIT: &str = "journal-before-commit";
    pub const JOURNAL_AFTER_COMMIT: &str = "journal-after-commit";
    pub const JOURNAL_BEFORE_ROLLBACK: &str = "journal-before-rollback";
    pub const JOURNAL_AFTER_ROLLBACK: &str = "journal-after-rollback";
    pub const JOURNAL_BEFORE_ROLLED_BACK: &str = "journal-before-rolled-back";
    pub const JOURNAL_AFTER_ROLLED_BACK: &str = "journal-after-rolled-back";
    pub const FS_AFTER_TEMP: &str = "fs-after-temp";
    pub const FS_AFTER_RENAME: &str = "fs-after-rename";
    pub const BACKUP_BEFORE: &str = "backup-before";
    pub const BACKUP_AFTER: &str = "backup-after";
    pub const FILE_BEFORE_WRITE: &str = "file-before-write";
    pub const FILE_AFTER_WRITE: &str = "file-after-write";
    pub const UNIT_BEFORE_WRITE: &str = "unit-before-write";
    pub const UNIT_AFTER_WRITE: &str = "unit-after-write";
    pub const DROPIN_BEFORE_WRITE: &str = "dropin-before-write";
    pub const DROPIN_AFTER_WRITE: &str = "dropin-after-write";
    pub const SSH_BEFORE_WRITE: &str = "ssh-before-write";
    pub const SSH_AFTER_WRITE: &str = "ssh-after-write";
    pub const SHADOW_BEFORE_WRITE: &str = "shadow-before-write";
    pub const SHADOW_AFTER_WRITE: &str = "shadow-after-write";
    pub const REMOVE_BEFORE: &str = "remove-before";
    pub const REMOVE_AFTER: &str = "remove-after";
    pub const RESTORE_BEFORE: &str = "restore-before";
    pub const RESTORE_AFTER: &str = "restore-after";
    pub const RMDIR_BEFORE: &str = "rmdir-before";
    pub const RMDIR_AFTER: &str = "rmdir-after";
    pub const DAEMON_RELOAD_BEFORE: &str = "daemon-reload-before";
    pub const DAEMON_RELOAD_AFTER: &str = "daemon-reload-after";
    pub const ENABLE_BEFORE: &str = "enable-before";
    pub const ENABLE_AFTER: &str = "enable-after";
    pub const DISABLE_BEFORE: &str = "disable-before";
    pub const DISABLE_AFTER: &str = "disable-after";
    pub const PRESET_BEFORE: &str = "preset-before";
    pub const PRESET_AFTER: &str = "preset-after";
}

/// Every failpoint, for the crash tests to walk.
pub const FAILPOINTS: &[&str] = &[
    points::JOURNAL_AFTER_BLOB,
    points::JOURNAL_BEFORE_PREPARE,
    points::JOURNAL_AFTER_PREPARE,
    points::JOURNAL_BEFORE_COMMIT,
    points::JOURNAL_AFTER_COMMIT,
    points::JOURNAL_BEFORE_ROLLBACK,
    points::JOURNAL_AFTER_ROLLBACK,
    points::JOURNAL_BEFORE_ROLLED_BACK,
    points::JOURNAL_AFTER_ROLLED_BACK,
    points::FS_AFTER_TEMP,
    points::FS_AFTER_RENAME,
    points::BACKUP_BEFORE,
    points::BACKUP_AFTER,
    points::FILE_BEFORE_WRITE,
    points::FILE_AFTER_WRITE,
    points::UNIT_BEFORE_WRITE,
    points::UNIT_AFTER_WRITE,
    points::DROPIN_BEFORE_WRITE,
    points::DROPIN_AFTER_WRITE,
    points::SSH_BEFORE_WRITE,
    points::SSH_AFTER_WRITE,
    points::SHADOW_BEFORE_WRITE,
    points::SHADOW_AFTER_WRITE,
    points::REMOVE_BEFORE,
    points::REMOVE_AFTER,
    points::RESTORE_BEFORE,
    points::RESTORE_AFTER,
    points::RMDIR_BEFORE,
    points::RMDIR_AFTER,
    points::DAEMON_RELOAD_BEFORE,
    points::DAEMON_RELOAD_AFTER,
    points::ENABLE_BEFORE,
    points::ENABLE_AFTER,
    points::DISABLE_BEFORE,
    points::DISABLE_AFTER,
    points::PRESET_BEFORE,
    points::PRESET_AFTER,
];

/// What an apply changed: the disruption policy picks None/Reload/Restart/DaemonReload/Reboot
/// from it (files by path, units by name, SSH keys -> None).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    pub files_added: Vec<String>,
    pub files_changed: Vec<String>,
    pub files_removed: Vec<String>,
    /// Units added, removed, or with different contents, drop-ins, enablement or mask.
    pub units_changed: Vec<String>,
    pub ssh_changed: bool,
    /// SSH keys or password hash of core changed (MCO's `passwd` diff).
    pub passwd_changed: bool,
    /// Unit files changed, so systemd was reloaded.
    pub daemon_reload: bool,
    /// Things the operator should know that did not stop the apply.
    pub warnings: Vec<String>,
}

impl ApplyReport {
    /// Every changed file path (added, changed, removed), sorted.
    pub fn changed_paths(&self) -> Vec<String> {
        let mut all: Vec<String> =
            self.files_added.iter().chain(&self.files_changed).chain(&self.files_removed).cloned().collect();
        all.sort();
        all
    }
}

/// Why an apply did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Validation refused the config; nothing on the node changed.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// A journal from an earlier apply is not finished: call [`recover`] first.
    #[error("the last apply is unfinished ({phase}); it is recovered before any other")]
    Unfinished { phase: String },
    /// Failed while reading the host to plan; nothing on the node changed.
    #[error("failed to prepare the apply (nothing changed): {0}")]
    Prepare(StepError),
    /// A step failed; the node is back on the old config. Degraded with this reason.
    #[error("{reason} (rolled back to the previous config)")]
    RolledBack { reason: String },
    /// A step failed and so did the rollback; the journal keeps the rollback for [`recover`].
    #[error("{reason}; rolling back failed too: {rollback}")]
    RollbackFailed { reason: String, rollback: String },
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// A failed step.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// What [`recover`] found and did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recovery {
    /// No apply was in progress (any crash happened before the journal was written, so the
    /// node is untouched on its old config).
    Nothing,
    /// The node is fully on the journal's new config.
    Applied { new: Box<MachineConfigSpec>, report: ApplyReport },
    /// The node is fully back on the journal's old config; it is Degraded with `reason`.
    RolledBack { old: Box<MachineConfigSpec>, reason: String },
}

/// Applies `new` over `old` (the config the node is on). See the module doc.
pub async fn apply(
    root: &Root,
    journal: &Journal,
    old: &MachineConfigSpec,
    new: &MachineConfigSpec,
    services: &dyn ServiceManager,
) -> Result<ApplyReport, ApplyError> {
    ensure_finished(journal)?;
    let fs = HostFs::open(root).map_err(|e| ApplyError::Prepare(e.into()))?;
    let v = validate::validate(&fs, old, new).map_err(ApplyError::Refused)?;
    apply_validated(&fs, journal, old, new, &v, services).await
}

/// [`apply`] of what [`check`] validated a moment ago, without validating again: for a caller
/// that checked and then went straight on (no drain, nothing waited for), so the host had no
/// time to change in between, any more than it has between validation and the first write.
/// Writes stay confined to the root whatever happened meanwhile (cap-std resolves every path).
pub async fn apply_checked(
    root: &Root,
    journal: &Journal,
    checked: &Checked,
    services: &dyn ServiceManager,
) -> Result<ApplyReport, ApplyError> {
    ensure_finished(journal)?;
    let fs = HostFs::open(root).map_err(|e| ApplyError::Prepare(e.into()))?;
    apply_validated(&fs, journal, &checked.old, &checked.new, &checked.validated, services).await
}

/// Refuses to start over an unfinished apply.
fn ensure_finished(journal: &Journal) -> Result<(), ApplyError> {
    match journal.phase()? {
        Some(phase) if !phase.is_terminal() => Err(ApplyError::Unfinished { phase: phase.describe() }),
        _ => Ok(()),
    }
}

async fn apply_validated(
    fs: &HostFs,
    journal: &Journal,
    old: &MachineConfigSpec,
    new: &MachineConfigSpec,
    v: &Validated,
    services: &dyn ServiceManager,
) -> Result<ApplyReport, ApplyError> {
    // The finished record of the previous apply goes first, so that a crash before this apply's
    // record exists reads as "nothing in progress", never as that old outcome.
    journal.clear()?;
    // A plan that fails (a full disk while it backs the originals up) leaves no record: the
    // blobs it wrote go with it, or they kept the space it ran out of.
    let planned = plan(fs, journal, v).map_err(|e| {
        if let Err(gc) = journal.gc(&BTreeSet::new()) {
            tracing::warn!(error = %gc, "cannot remove the backups of a plan that failed");
        }
        ApplyError::Prepare(e)
    })?;
    let (forward, rollback, report) = (planned.forward, planned.rollback, planned.report);
    // Inline contents are made durable by the record's own fsync; blobs (large files only)
    // before the record names them.
    if planned.blobs {
        journal.sync_blobs()?;
    }
    let mut record = Record {
        version: RECORD_VERSION,
        id: spec_id(new),
        phase: Phase::Forward,
        old: old.clone(),
        new: new.clone(),
        forward,
        rollback,
        report,
    };
    fail::fail_point!(points::JOURNAL_BEFORE_PREPARE);
    journal.save(&record)?;
    fail::fail_point!(points::JOURNAL_AFTER_PREPARE);
    tracing::info!(id = %record.id, steps = record.forward.len(), "applying config");
    run_forward(fs, journal, services, &mut record).await
}

/// What [`check`] found: MCO's diff booleans and the report the apply will produce, and what
/// [`apply_checked`] needs to go on without validating again.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub diff: ConfigDiff,
    pub report: ApplyReport,
    old: MachineConfigSpec,
    new: MachineConfigSpec,
    validated: Validated,
}

impl Checked {
    /// The originals of both configs' paths on a host whose first boot wrote a config
    /// (Ignition, from the coordinator's `/config/<pool>`), decided as MCO decides them there:
    /// what is on disk may be that config's content, not the OS's, so the original of an
    /// `/etc` path is the OS's pristine copy in `/usr/etc` when it has one (a removal of the
    /// path from the config, now or later, puts it back), and otherwise there is none (a
    /// removal deletes the path). Taken here, before the apply, they are what its backups and
    /// removals find. A path with a backup already keeps it.
    pub fn take_first_boot_originals(&self, root: &Root) -> Result<(), FsError> {
        let fs = HostFs::open(root)?;
        let old = files::managed(&self.validated.old, &self.validated.owners);
        for m in old.into_iter().chain(files::managed(&self.validated.new, &self.validated.owners)) {
            if files::decide_backup(&fs, &m.path)?.is_none() {
                continue;
            }
            let pristine = m.path.strip_prefix("/etc/").map(|rest| format!("/usr/etc/{rest}"));
            let (orig, _) = files::backup_paths(&m.path);
            let copied = match pristine {
                Some(p) => files::copy_entry(&fs, &fsroot::rel(&p), &fsroot::rel(&orig))?,
                None => false,
            };
            if !copied {
                files::backup(&fs, &m.path, files::BackupAction::NoOrig)?;
            }
        }
        Ok(())
    }
}

/// Validates old -> new against the host without changing anything: call it before draining,
/// so an unreconcilable or hostile config is refused while the node still runs its workloads,
/// and so the disruption policy can be chosen from the report before the first byte is written.
pub fn check(root: &Root, old: &MachineConfigSpec, new: &MachineConfigSpec) -> Result<Checked, Refusal> {
    let fs = HostFs::open(root).map_err(|e| Refusal::degraded("spec", format!("cannot open the host root: {e}")))?;
    let v = validate::validate(&fs, old, new)?;
    let mut report = report(&v.old, &v.new);
    report.daemon_reload = unit_files_differ(&v);
    Ok(Checked { diff: v.diff.clone(), report, old: old.clone(), new: new.clone(), validated: v })
}

/// Finishes whatever apply the journal holds after a restart: re-runs the forward steps (or
/// the rollback steps) from the start. Terminal records are reported again, unchanged.
pub async fn recover(root: &Root, journal: &Journal, services: &dyn ServiceManager) -> Result<Recovery, ApplyError> {
    let Some(mut record) = journal.load()? else {
        journal.gc(&BTreeSet::new())?;
        return Ok(Recovery::Nothing);
    };
    let fs = HostFs::open(root).map_err(|e| ApplyError::Prepare(e.into()))?;
    match record.phase.clone() {
        Phase::Committed => {
            journal.gc(&BTreeSet::new())?;
            Ok(Recovery::Applied { new: Box::new(record.new), report: record.report })
        }
        Phase::RolledBack { reason } => {
            journal.gc(&BTreeSet::new())?;
            Ok(Recovery::RolledBack { old: Box::new(record.old), reason })
        }
        Phase::Forward => {
            tracing::warn!(id = %record.id, "resuming an interrupted apply (roll forward)");
            match run_forward(&fs, journal, services, &mut record).await {
                Ok(report) => Ok(Recovery::Applied { new: Box::new(record.new), report }),
                Err(ApplyError::RolledBack { reason }) => {
                    Ok(Recovery::RolledBack { old: Box::new(record.old), reason })
                }
                Err(e) => Err(e),
            }
        }
        Phase::RollingBack { reason } => {
            tracing::warn!(id = %record.id, %reason, "resuming an interrupted rollback");
            rollback(&fs, journal, services, &mut record, reason.clone()).await?;
            Ok(Recovery::RolledBack { old: Box::new(record.old), reason })
        }
    }
}

fn spec_id(spec: &MachineConfigSpec) -> String {
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}

async fn run_forward(
    fs: &HostFs,
    journal: &Journal,
    services: &dyn ServiceManager,
    record: &mut Record,
) -> Result<ApplyReport, ApplyError> {
    match run(fs, journal, services, &record.forward).await {
        Ok(()) => {
            fail::fail_point!(points::JOURNAL_BEFORE_COMMIT);
            record.phase = Phase::Committed;
            journal.save(record)?;
            fail::fail_point!(points::JOURNAL_AFTER_COMMIT);
            journal.gc(&BTreeSet::new())?;
            tracing::info!(id = %record.id, "config applied");
            Ok(record.report.clone())
        }
        Err(e) => {
            let reason = format!("failed to apply config: {e}");
            tracing::error!(id = %record.id, %reason, "rolling back");
            rollback(fs, journal, services, record, reason.clone()).await?;
            Err(ApplyError::RolledBack { reason })
        }
    }
}

async fn rollback(
    fs: &HostFs,
    journal: &Journal,
    services: &dyn ServiceManager,
    record: &mut Record,
    reason: String,
) -> Result<(), ApplyError> {
    fail::fail_point!(points::JOURNAL_BEFORE_ROLLBACK);
    record.phase = Phase::RollingBack { reason: reason.clone() };
    journal.save(record)?;
    fail::fail_point!(points::JOURNAL_AFTER_ROLLBACK);
    if let Err(e) = run_rollback(fs, journal, services, &record.rollback).await {
        tracing::error!(id = %record.id, error = %e, "rollback failed; recovery will retry it");
        return Err(ApplyError::RollbackFailed { reason, rollback: e.to_string() });
    }
    fail::fail_point!(points::JOURNAL_BEFORE_ROLLED_BACK);
    record.phase = Phase::RolledBack { reason };
    journal.save(record)?;
    fail::fail_point!(points::JOURNAL_AFTER_ROLLED_BACK);
    journal.gc(&BTreeSet::new())?;
    tracing::warn!(id = %record.id, "rolled back to the previous config");
    Ok(())
}

async fn run(fs: &HostFs, journal: &Journal, services: &dyn ServiceManager, steps: &[Step]) -> Result<(), StepError> {
    let mut rest = steps;
    while !rest.is_empty() {
        let batch = rest.iter().take_while(|s| file_write(s).is_some()).count();
        if batch > 1 {
            write_batch(fs, journal, &rest[..batch])?;
            rest = &rest[batch..];
        } else {
            run_step(fs, journal, services, &rest[0]).await?;
            rest = &rest[1..];
        }
    }
    Ok(())
}

/// The steps of a rollback that failed, each with its error: every other step ran.
#[derive(Debug)]
struct RollbackErrors {
    failed: Vec<(String, StepError)>,
    steps: usize,
}

impl std::fmt::Display for RollbackErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 5;
        write!(f, "{} of {} steps failed (the others were made): ", self.failed.len(), self.steps)?;
        for (i, (what, e)) in self.failed.iter().take(SHOWN).enumerate() {
            write!(f, "{}{what}: {e}", if i == 0 { "" } else { "; " })?;
        }
        if self.failed.len() > SHOWN {
            write!(f, "; and {} more", self.failed.len() - SHOWN)?;
        }
        Ok(())
    }
}

/// Runs every step of a rollback, past the ones that fail, and skips a restore whose path holds
/// its pre-apply state already. Why: the path that failed the apply (an immutable file, a bind
/// mount, a full disk) was never changed, and writing it back failed the same way; stopping
/// there left the files before it new and the journal rolling back, which refuses every later
/// config, a revert included. Now the node gets back all it can, the error names each path that
/// could not be, and recovery retries only those (the others hold their state by then).
async fn run_rollback(
    fs: &HostFs,
    journal: &Journal,
    services: &dyn ServiceManager,
    steps: &[Step],
) -> Result<(), RollbackErrors> {
    let mut failed = Vec::new();
    // Each restore is compared when its turn comes, after the steps before it ran. One skipped
    // is made durable all the same: what it holds may be a rename or an unlink an interrupted
    // rollback made and never synced (the page cache shows it, a power cut would undo it).
    let synced = std::sync::Mutex::new(BTreeSet::new());
    let needed = |step: &Step| match step {
        Step::Restore { path, content } => match holds(fs, journal, path, content) {
            Ok(true) => {
                let rel = fsroot::rel(path);
                let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                if synced.lock().unwrap_or_else(|e| e.into_inner()).insert(parent) {
                    if let Err(e) = fs.sync_parent(&rel) {
                        tracing::debug!(%path, error = %e, "cannot sync the directory of a path already restored; restoring it");
                        return true;
                    }
                }
                false
            }
            Ok(false) => true,
            Err(e) => {
                tracing::debug!(%path, error = %e, "cannot compare with the pre-apply state; restoring");
                true
            }
        },
        _ => true,
    };
    let mut rest = steps;
    while !rest.is_empty() {
        let batch = rest.iter().take_while(|s| file_write(s).is_some()).count().max(1);
        let todo: Vec<&Step> = rest[..batch].iter().filter(|s| needed(s)).collect();
        rest = &rest[batch..];
        if todo.len() > 1 {
            let writes: Vec<Step> = todo.iter().map(|s| (*s).clone()).collect();
            if write_batch(fs, journal, &writes).is_ok() {
                continue;
            }
            // One by one, to find which paths fail and to put back all the others.
        }
        for step in todo {
            if let Err(e) = run_step(fs, journal, services, step).await {
                failed.push((describe(step), e));
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(RollbackErrors { failed, steps: steps.len() })
    }
}

/// A step as an error names it.
fn describe(step: &Step) -> String {
    match step {
        Step::Backup { path, .. } => format!("back up {path}"),
        Step::Write { path, .. } => format!("write {path}"),
        Step::Remove { path, .. } => format!("remove {path}"),
        Step::Restore { path, .. } => format!("restore {path}"),
        Step::RemoveDir { path } => format!("remove directory {path}"),
        Step::CleanTemp { path } => format!("clean the temp file of {path}"),
        Step::DaemonReload => "daemon-reload".to_string(),
        Step::Service { op, units, .. } => format!("{} {}", format!("{op:?}").to_lowercase(), units.join(" ")),
    }
}

/// Whether `path` holds `content` already: the same kind, mode, owner and bytes (or target).
fn holds(fs: &HostFs, journal: &Journal, path: &str, content: &Content) -> Result<bool, StepError> {
    let rel = fsroot::rel(path);
    let entry = fs.entry(&rel)?;
    let same_meta = |mode: u32, uid: u32, gid: u32, m: u32, u: u32, g: u32| (mode & 0o7777, uid, gid) == (m, u, g);
    Ok(match (content, entry) {
        (Content::Absent, Entry::Absent) => true,
        (Content::Symlink { target }, Entry::Symlink { target: t }) => t == Path::new(target),
        (Content::Dir { mode, uid, gid }, Entry::Dir { mode: m, uid: u, gid: g }) => {
            same_meta(*mode, *uid, *gid, m, u, g)
        }
        (Content::Inline { data, mode, uid, gid }, Entry::File { mode: m, uid: u, gid: g, len }) => {
            same_meta(*mode, *uid, *gid, m, u, g) && len == data.len() as u64 && fs.read_limited(&rel, len)? == *data
        }
        (Content::File { blob, mode, uid, gid }, Entry::File { mode: m, uid: u, gid: g, .. }) => {
            same_meta(*mode, *uid, *gid, m, u, g)
                && same_bytes(&mut journal.open_blob(blob)?, &mut fs.open_read(&rel)?)
                    .map_err(|e| FsError::new("read", &rel, e))?
        }
        _ => false,
    })
}

/// Whether two readers give the same bytes (a blob, up to any size, against the file).
fn same_bytes(a: &mut dyn std::io::Read, b: &mut dyn std::io::Read) -> std::io::Result<bool> {
    let (mut x, mut y) = (vec![0u8; 64 << 10], vec![0u8; 64 << 10]);
    loop {
        let n = read_full(a, &mut x)?;
        let m = read_full(b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the reader ends; the count read.
fn read_full(r: &mut dyn std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A step that puts a regular file's bytes at a path: (path, failpoints, content).
fn file_write(step: &Step) -> Option<(&str, (&'static str, &'static str), &Content)> {
    match step {
        Step::Write { path, kind, content: c @ (Content::File { .. } | Content::Inline { .. }) } => {
            Some((path, write_points(*kind), c))
        }
        Step::Restore { path, content: c @ (Content::File { .. } | Content::Inline { .. }) } => {
            Some((path, (points::RESTORE_BEFORE, points::RESTORE_AFTER), c))
        }
        _ => None,
    }
}

/// Temp files a batch keeps open at once (written, then fsynced together): enough for the
/// fsyncs' group commit, far below any limit of open files.
const TEMPS_OPEN_AT_ONCE: usize = 128;

/// Runs consecutive file writes together: every temp file first ([`TEMPS_OPEN_AT_ONCE`] open at
/// a time), their fsyncs concurrently,
/// every rename, then one fsync per directory. The same guarantee as writing them one by one
/// (each path holds its old or its new bytes at every instant, and re-running the batch after a
/// crash finishes it), at a few journal commits per batch instead of two per file.
fn write_batch(fs: &HostFs, journal: &Journal, steps: &[Step]) -> Result<(), StepError> {
    let writes: Vec<_> = steps.iter().filter_map(file_write).collect();
    let rels: Vec<std::path::PathBuf> = writes.iter().map(|(path, _, _)| fsroot::rel(path)).collect();
    let written = (|| -> Result<(), StepError> {
        // A chunk at a time, each fsynced and closed before the next: a config of thousands of
        // files held a descriptor per file and failed at the agent's limit of open files
        // (systemd's default soft limit is 1024), after the drain.
        let mut start = 0;
        for chunk in writes.chunks(TEMPS_OPEN_AT_ONCE) {
            let mut temps = Vec::with_capacity(chunk.len());
            let chunk_rels = &rels[start..start + chunk.len()];
            for ((path, (_before, _after), content), rel) in chunk.iter().zip(chunk_rels) {
                tracing::debug!(%path, "write (batched)");
                fail::fail_point!(_before);
                fs.ensure_parent(rel)?;
                let temp = match content {
                    Content::File { blob, mode, uid, gid } => {
                        fs.write_temp(rel, &mut journal.open_blob(blob)?, *mode, *uid, *gid)?
                    }
                    Content::Inline { data, mode, uid, gid } => {
                        fs.write_temp(rel, &mut &data[..], *mode, *uid, *gid)?
                    }
                    // file_write only lets regular files through.
                    _ => continue,
                };
                temps.push((temp, rel));
            }
            let files: Vec<&cap_std::fs::File> = temps.iter().map(|(f, _)| f).collect();
            crate::durable::fsync_all(&files)
                .map_err(|(i, e)| FsError::new("fsync", fsroot::temp_name(temps[i].1), e))?;
            start += chunk.len();
        }
        Ok(())
    })();
    if let Err(e) = written {
        // Nothing is renamed yet: the temp files go (on a full disk they kept the space the
        // host ran out of, the half-written one too).
        for rel in &rels {
            let _ = fs.remove(&fsroot::temp_name(rel));
        }
        return Err(e);
    }
    for ((_, (_before, _after), _), rel) in writes.iter().zip(&rels) {
        fs.commit_temp(rel)?;
        fail::fail_point!(_after);
    }
    fs.sync_parents(rels.iter().map(|r| r.as_path()))?;
    Ok(())
}

fn write_points(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::File => (points::FILE_BEFORE_WRITE, points::FILE_AFTER_WRITE),
        Kind::Unit => (points::UNIT_BEFORE_WRITE, points::UNIT_AFTER_WRITE),
        Kind::Dropin => (points::DROPIN_BEFORE_WRITE, points::DROPIN_AFTER_WRITE),
        Kind::Ssh => (points::SSH_BEFORE_WRITE, points::SSH_AFTER_WRITE),
        Kind::Shadow => (points::SHADOW_BEFORE_WRITE, points::SHADOW_AFTER_WRITE),
    }
}

fn service_points(op: ServiceOp) -> (&'static str, &'static str) {
    match op {
        ServiceOp::Enable => (points::ENABLE_BEFORE, points::ENABLE_AFTER),
        ServiceOp::Disable => (points::DISABLE_BEFORE, points::DISABLE_AFTER),
        ServiceOp::Preset => (points::PRESET_BEFORE, points::PRESET_AFTER),
    }
}

/// Makes `path` hold `content`; idempotent.
fn put(fs: &HostFs, journal: &Journal, path: &str, content: &Content) -> Result<(), StepError> {
    let rel = fsroot::rel(path);
    match content {
        Content::File { blob, mode, uid, gid } => {
            let mut r = journal.open_blob(blob)?;
            files::write_file(fs, &rel, &mut r, *mode, *uid, *gid)?;
        }
        Content::Inline { data, mode, uid, gid } => {
            files::write_file(fs, &rel, &mut &data[..], *mode, *uid, *gid)?;
        }
        Content::Symlink { target } => {
            fs.ensure_parent(&rel)?;
            fs.symlink_atomic(&rel, Path::new(target))?;
        }
        Content::Dir { mode, uid, gid } => {
            fs.ensure_parent(&rel)?;
            fs.mkdir(&rel, *mode, *uid, *gid)?;
        }
        Content::Absent => match fs.entry(&rel)? {
            Entry::Dir { .. } => {
                fs.remove_dir_if_empty(&rel)?;
            }
            Entry::Absent => {}
            _ => {
                fs.remove(&rel)?;
            }
        },
    }
    Ok(())
}

async fn run_step(fs: &HostFs, journal: &Journal, services: &dyn ServiceManager, step: &Step) -> Result<(), StepError> {
    tracing::debug!(?step, "step");
    match step {
        Step::Backup { path, action } => {
            fail::fail_point!(points::BACKUP_BEFORE);
            files::backup(fs, path, *action)?;
            fail::fail_point!(points::BACKUP_AFTER);
        }
        Step::Write { path, kind, content } => {
            // Only read when failpoints are compiled in.
            #[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
            let (before, after) = write_points(*kind);
            fail::fail_point!(before);
            put(fs, journal, path, content)?;
            fail::fail_point!(after);
        }
        Step::Remove { path, action } => {
            fail::fail_point!(points::REMOVE_BEFORE);
            files::remove(fs, path, *action)?;
            fail::fail_point!(points::REMOVE_AFTER);
        }
        Step::Restore { path, content } => {
            fail::fail_point!(points::RESTORE_BEFORE);
            put(fs, journal, path, content)?;
            fail::fail_point!(points::RESTORE_AFTER);
        }
        Step::RemoveDir { path } => {
            fail::fail_point!(points::RMDIR_BEFORE);
            fs.remove_dir_if_empty(&fsroot::rel(path))?;
            fail::fail_point!(points::RMDIR_AFTER);
        }
        Step::CleanTemp { path } => {
            // A temp name the kernel cannot hold, or one on a read-only file system, was never
            // made: nothing to clean, and a rollback must not stop on it (a journal left rolling
            // back refuses every update). Validation refuses both; this is the second guard.
            match fs.remove(&fsroot::temp_name(&fsroot::rel(path))) {
                Err(e)
                    if matches!(
                        e.error.kind(),
                        std::io::ErrorKind::InvalidFilename | std::io::ErrorKind::ReadOnlyFilesystem
                    ) => {}
                other => {
                    other?;
                }
            }
        }
        Step::DaemonReload => {
            fail::fail_point!(points::DAEMON_RELOAD_BEFORE);
            services.daemon_reload().await?;
            fail::fail_point!(points::DAEMON_RELOAD_AFTER);
        }
        Step::Service { op, units, only_present } => {
            let mut names = Vec::new();
            for u in units {
                let present = !*only_present || fs.entry(&fsroot::rel(&units::unit_path(u)))? != Entry::Absent;
                if present {
                    names.push(u.clone());
                }
            }
            if names.is_empty() {
                return Ok(());
            }
            // Only read when failpoints are compiled in.
            #[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
            let (before, after) = service_points(*op);
            fail::fail_point!(before);
            match op {
                ServiceOp::Enable => services.enable_units(&names).await?,
                ServiceOp::Disable => services.disable_units(&names).await?,
                ServiceOp::Preset => preset_each(services, &names).await,
            }
            fail::fail_point!(after);
        }
    }
    Ok(())
}

/// Resets each unit to its preset, one at a time, logging and skipping a unit systemd refuses.
///
/// Why: as MCO's `writeUnits` / `deleteStaleData` ("Could not reset unit preset for %s,
/// skipping"; "Did not restore preset for %s (may not exist)"), a preset never fails an update
/// or its rollback. A drop-in may name a unit the host does not ship (`NoSuchUnit`), and a unit
/// still masked cannot be preset (`UnitMasked`); in one batch either refusal failed every unit,
/// and as the first rollback step it left the node half rolled back.
async fn preset_each(services: &dyn ServiceManager, names: &[String]) {
    for name in names {
        if let Err(e) = services.preset_units(std::slice::from_ref(name)).await {
            tracing::warn!(unit = %name, error = %e, "could not reset the unit to its preset; skipping");
        }
    }
}

/// Builds the forward and rollback step lists (their bytes inline, or as journal blobs when
/// large) and the report. Reads the host, and writes nothing but blobs.
struct Planner<'a> {
    fs: &'a HostFs,
    journal: &'a Journal,
    forward: Vec<Step>,
    /// Every path a forward step may create, change or delete, in first-touch order.
    touched: Vec<String>,
    created_dirs: BTreeSet<String>,
    /// Ancestors resolved so far: planning only reads the host.
    seen: fsroot::Ancestors,
    /// Bytes of contents that may still go inline in the record ([`INLINE_BUDGET`]).
    inline_left: usize,
    /// Whether any blob was stored (they need [`Journal::sync_blobs`] before the record).
    blobs: bool,
}

/// What [`plan`] produced.
struct Planned {
    forward: Vec<Step>,
    rollback: Vec<Step>,
    report: ApplyReport,
    /// Some contents went to blobs.
    blobs: bool,
}

impl Planner<'_> {
    fn touch(&mut self, path: &str) -> Result<(), StepError> {
        if self.touched.iter().any(|p| p == path) {
            return Ok(());
        }
        self.touched.push(path.to_string());
        for d in self.fs.missing_ancestors_cached(&fsroot::rel(path), &mut self.seen)? {
            self.created_dirs.insert(format!("/{}", d.display()));
        }
        Ok(())
    }

    /// Whether `len` bytes may go inline, taking them from the budget if so.
    fn take_inline(&mut self, len: usize) -> bool {
        if len > INLINE_MAX || len > self.inline_left {
            return false;
        }
        self.inline_left -= len;
        true
    }

    /// A regular file's contents: inline when small, else a blob.
    fn file(&mut self, bytes: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Content, StepError> {
        if self.take_inline(bytes.len()) {
            return Ok(Content::Inline { data: bytes.to_vec(), mode, uid, gid });
        }
        self.blobs = true;
        Ok(Content::File { blob: self.journal.put_blob(&mut &bytes[..])?, mode, uid, gid })
    }

    fn content(&mut self, want: &Want) -> Result<Content, StepError> {
        Ok(match want {
            Want::File { contents, mode, uid, gid } => self.file(contents, *mode, *uid, *gid)?,
            Want::Symlink { target } => Content::Symlink { target: target.clone() },
            Want::Absent => Content::Absent,
        })
    }

    /// The pre-apply state of `path`: a small file's bytes inline, a large one's as a blob
    /// (streamed, never held whole in memory).
    fn pre_image(&mut self, path: &str) -> Result<Content, StepError> {
        let rel = fsroot::rel(path);
        Ok(match self.fs.entry(&rel)? {
            Entry::Absent => Content::Absent,
            Entry::File { mode, uid, gid, .. } => {
                use std::io::Read;
                let mut f = self.fs.open_read(&rel)?;
                // Read at most one byte past the inline limit: the length that counts is what
                // is read now, not what the stat above said.
                let mut head = Vec::new();
                (&mut f)
                    .take(INLINE_MAX as u64 + 1)
                    .read_to_end(&mut head)
                    .map_err(|e| StepError::Fs(FsError::new("read", &rel, e)))?;
                if self.take_inline(head.len()) {
                    Content::Inline { data: head, mode, uid, gid }
                } else {
                    self.blobs = true;
                    Content::File { blob: self.journal.put_blob(&mut head.as_slice().chain(f))?, mode, uid, gid }
                }
            }
            // Kept as text in the record: a target that is not UTF-8 would be put back as
            // another one by a rollback, so the apply stops here, before anything is written.
            Entry::Symlink { target } => match target.to_str() {
                Some(t) => Content::Symlink { target: t.to_string() },
                None => {
                    return Err(StepError::Fs(FsError::new(
                        "snapshot",
                        rel,
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "a symlink whose target is not UTF-8 cannot be kept for a rollback",
                        ),
                    )))
                }
            },
            Entry::Dir { mode, uid, gid } => Content::Dir { mode, uid, gid },
            Entry::Other { .. } => {
                return Err(StepError::Fs(FsError::new(
                    "snapshot",
                    rel,
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "a special file is in the way"),
                )))
            }
        })
    }
}

fn service_steps(out: &mut Vec<Step>, op: ServiceOp, units: Vec<String>, only_present: bool) {
    if !units.is_empty() {
        out.push(Step::Service { op, units, only_present });
    }
}

/// Units of `d` that have a file of their own in /etc/systemd/system (contents or mask).
fn has_unit_file(d: &Desired, name: &str) -> bool {
    d.units.iter().any(|u| u.name == name && (u.mask || u.contents.is_some()))
}

/// The enablement batches of `d`, without the units `d` gives no file for that the host lacks
/// (`ondisk::unit_installed`: skipped as MCO skips them), each named in `warnings` when given.
fn installed_enablement(fs: &HostFs, d: &Desired, mut warnings: Option<&mut Vec<String>>) -> units::Enablement {
    let mut en = units::enablement(d);
    for (batch, verb) in [(&mut en.enable, "enabling"), (&mut en.disable, "disabling")] {
        batch.retain(|n| {
            let keep = has_unit_file(d, n) || crate::ondisk::unit_installed(fs, n);
            if !keep {
                if let Some(w) = warnings.as_deref_mut() {
                    w.push(format!("unit {n:?} is not installed on this host: skipped {verb} it"));
                }
            }
            keep
        });
    }
    en
}

/// Splits units into (with a managed unit file in `d`, without).
fn split_by_file(d: &Desired, names: Vec<String>) -> (Vec<String>, Vec<String>) {
    names.into_iter().partition(|n| has_unit_file(d, n))
}

/// Splits units leaving the config into (masked by `d`, the rest). A masked unit cannot be
/// preset (systemd refuses: "Unit file ... is masked"), so it is preset after its mask link is
/// gone and systemd reloaded, as MCO unmasks before it presets a removed unit.
fn split_masked(d: &Desired, names: Vec<String>) -> (Vec<String>, Vec<String>) {
    names.into_iter().partition(|n| d.units.iter().any(|u| u.name == *n && u.mask))
}

fn plan(fs: &HostFs, journal: &Journal, v: &Validated) -> Result<Planned, StepError> {
    let (old, new) = (&v.old, &v.new);
    let mut report = report(old, new);
    let mut p = Planner {
        fs,
        journal,
        forward: Vec::new(),
        touched: Vec::new(),
        created_dirs: BTreeSet::new(),
        seen: fsroot::Ancestors::default(),
        inline_left: INLINE_BUDGET,
        blobs: false,
    };

    // Removed units go back to their preset while their files still exist; masked ones once
    // the mask is gone.
    let (unmasked, removed) = split_masked(old, units::removed_units(old, new));
    let (with_file, without) = split_by_file(old, removed);
    service_steps(&mut p.forward, ServiceOp::Preset, with_file, true);
    service_steps(&mut p.forward, ServiceOp::Preset, without, false);

    let new_managed = files::managed(new, &v.owners);
    let old_managed = files::managed(old, &v.owners);
    let old_paths: BTreeSet<&str> = old_managed.iter().map(|m| m.path.as_str()).collect();
    let new_paths: BTreeSet<&str> = new_managed.iter().map(|m| m.path.as_str()).collect();

    for m in new_managed.iter().filter(|m| !old_paths.contains(m.path.as_str())) {
        if let Some(action) = files::decide_backup(fs, &m.path)? {
            let (orig, noorig) = files::backup_paths(&m.path);
            p.touch(match action {
                files::BackupAction::Orig => &orig,
                files::BackupAction::NoOrig => &noorig,
            })?;
            p.forward.push(Step::Backup { path: m.path.clone(), action });
        }
    }
    for Managed { path, kind, want } in &new_managed {
        p.touch(path)?;
        let content = p.content(want)?;
        p.forward.push(Step::Write { path: path.clone(), kind: *kind, content });
    }
    for m in old_managed.iter().filter(|m| !new_paths.contains(m.path.as_str())) {
        let action = files::decide_remove(fs, &m.path)?;
        let (orig, noorig) = files::backup_paths(&m.path);
        for path in [&m.path, &orig, &noorig] {
            p.touch(path)?;
        }
        p.forward.push(Step::Remove { path: m.path.clone(), action });
    }
    plan_ssh(&mut p, v, &mut report)?;

    for path in p.touched.clone() {
        p.forward.push(Step::CleanTemp { path });
    }
    report.daemon_reload = unit_files_differ(v);
    if report.daemon_reload {
        p.forward.push(Step::DaemonReload);
    }
    service_steps(&mut p.forward, ServiceOp::Preset, unmasked, false);
    let en = installed_enablement(fs, new, Some(&mut report.warnings));
    service_steps(&mut p.forward, ServiceOp::Disable, en.disable, false);
    service_steps(&mut p.forward, ServiceOp::Enable, en.enable, false);
    service_steps(&mut p.forward, ServiceOp::Preset, en.preset, false);

    // Rollback: units only the new config has go back to their preset while their files exist;
    // every touched path gets its pre-apply state; created directories go; the old config's
    // enablement is applied again.
    let mut rollback = Vec::new();
    let old_names: BTreeSet<&str> = old.units.iter().map(|u| u.name.as_str()).collect();
    let added: Vec<String> =
        new.units.iter().filter(|u| !old_names.contains(u.name.as_str())).map(|u| u.name.clone()).collect();
    let (unmasked, added) = split_masked(new, added);
    let (with_file, without) = split_by_file(new, added);
    service_steps(&mut rollback, ServiceOp::Preset, with_file, true);
    service_steps(&mut rollback, ServiceOp::Preset, without, false);
    for path in p.touched.clone().iter().rev() {
        let content = p.pre_image(path)?;
        rollback.push(Step::Restore { path: path.clone(), content });
    }
    for path in &p.touched {
        rollback.push(Step::CleanTemp { path: path.clone() });
    }
    let mut dirs: Vec<&String> = p.created_dirs.iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    rollback.extend(dirs.into_iter().map(|d| Step::RemoveDir { path: d.clone() }));
    if report.daemon_reload {
        rollback.push(Step::DaemonReload);
    }
    service_steps(&mut rollback, ServiceOp::Preset, unmasked, false);
    let en = installed_enablement(fs, old, None);
    service_steps(&mut rollback, ServiceOp::Disable, en.disable, false);
    service_steps(&mut rollback, ServiceOp::Enable, en.enable, false);
    service_steps(&mut rollback, ServiceOp::Preset, en.preset, false);
    Ok(Planned { forward: p.forward, rollback, report, blobs: p.blobs })
}

/// Whether unit files, drop-ins or masks differ (so systemd must reload).
fn unit_files_differ(v: &Validated) -> bool {
    let unit_files = |d: &Desired| -> BTreeMap<String, Want> {
        files::managed(d, &v.owners)
            .into_iter()
            .filter(|m| units::is_unit_path(&m.path))
            .map(|m| (m.path, m.want))
            .collect()
    };
    unit_files(&v.old) != unit_files(&v.new)
}

/// core's SSH keys and password hash.
fn plan_ssh(p: &mut Planner, v: &Validated, report: &mut ApplyReport) -> Result<(), StepError> {
    let (old, new) = (&v.old.core, &v.new.core);
    if !new.ssh_keys.is_empty() {
        let (uid, gid) = ssh::core_ids(&v.owners, &mut report.warnings);
        let dir = Content::Dir { mode: ssh::DIR_MODE, uid, gid };
        if p.fs.entry(&fsroot::rel(ssh::HOME))? == Entry::Absent {
            p.touch(ssh::HOME)?;
            p.forward.push(Step::Write { path: ssh::HOME.into(), kind: Kind::Ssh, content: dir.clone() });
        }
        for d in ssh::SSH_DIRS {
            p.touch(d)?;
            p.forward.push(Step::Write { path: d.into(), kind: Kind::Ssh, content: dir.clone() });
        }
        p.touch(ssh::KEYS_FILE)?;
        let content = p.file(&ssh::keys_file(&new.ssh_keys), ssh::KEYS_MODE, uid, gid)?;
        p.forward.push(Step::Write { path: ssh::KEYS_FILE.into(), kind: Kind::Ssh, content });
    } else if !old.ssh_keys.is_empty() {
        p.touch(ssh::KEYS_FILE)?;
        p.forward.push(Step::Write { path: ssh::KEYS_FILE.into(), kind: Kind::Ssh, content: Content::Absent });
    }
    if old.password_hash != new.password_hash {
        let rel = fsroot::rel(ssh::SHADOW);
        let edited = match p.fs.entry(&rel)? {
            Entry::File { mode, uid, gid, .. } => {
                let current = p.fs.read_limited(&rel, 16 << 20)?;
                ssh::shadow_with_hash(&current, new.password_hash.as_deref()).map(|s| (s, mode, uid, gid))
            }
            _ => None,
        };
        match edited {
            Some((s, mode, uid, gid)) => {
                p.touch(ssh::SHADOW)?;
                let content = p.file(&s, mode, uid, gid)?;
                p.forward.push(Step::Write { path: ssh::SHADOW.into(), kind: Kind::Shadow, content });
            }
            None => report.warnings.push(format!("user core is not in {}: password hash not set", ssh::SHADOW)),
        }
    }
    Ok(())
}

/// The report of old -> new, from the configs alone.
fn report(old: &Desired, new: &Desired) -> ApplyReport {
    let mut r = ApplyReport::default();
    for f in &new.files {
        match old.files.iter().find(|o| o.path == f.path) {
            None => r.files_added.push(f.path.clone()),
            Some(o) if (&o.contents, o.mode, &o.user, &o.group) != (&f.contents, f.mode, &f.user, &f.group) => {
                r.files_changed.push(f.path.clone())
            }
            Some(_) => {}
        }
    }
    r.files_removed =
        old.files.iter().filter(|o| !new.files.iter().any(|f| f.path == o.path)).map(|o| o.path.clone()).collect();
    r.units_changed = units::changed_units(old, new);
    r.ssh_changed = ssh::keys_changed(&old.core, &new.core);
    r.passwd_changed = r.ssh_changed || old.core.password_hash != new.core.password_hash;
    r
}
