//! The OS seam's vocabulary, shared by the agent and the privileged OS helper: what a deployment
//! looks like, what to stage, what can go wrong, the [`OsBackend`] operations, and the wire
//! protocol between the two processes ([`wire`]).
//!
//! Why here and not in the agent: the libostree backend runs in its own process
//! (`aloft-os-helper`, crate `aloft-osd`) so that the agent neither links libostree (62 shared
//! libraries, +11 MiB RSS) nor needs the privileges an ostree deploy needs. Both processes must
//! agree on these types byte for byte, and neither may depend on the other (the agent must not
//! pick up libostree through a dependency), so they live in the crate both already share. Pure:
//! no I/O.
//!
//! Module map: `kargs` (MCO's kernel-argument arithmetic and after-boot checks), `wire` (the
//! versioned JSON-lines protocol on the helper's Unix socket), `cancel` (stopping a download
//! from another thread).

pub mod cancel;
pub mod grubenv;
pub mod kargs;
pub mod wire;

pub use cancel::Cancel;

use crate::osimage::OstreeImage;
use serde::{Deserialize, Serialize};

/// One deployment, as `bootc status --json` and `ostree admin status` describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentInfo {
    /// The stateroot (osname), e.g. `aloft`.
    pub stateroot: String,
    /// The commit checksum.
    pub checksum: String,
    pub deploy_serial: i32,
    /// Position in the boot order: 0 boots next (unless a staged deployment is finalized).
    pub index: i32,
    /// The refspec of the origin (`aloft:aloft/stable/x86_64`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The kernel arguments of its boot entry.
    pub kernel_arguments: Vec<String>,
    pub booted: bool,
    pub staged: bool,
    pub pinned: bool,
}

/// The host's deployments, shaped like bootc's `status` (`booted` / `staged` / `rollback`), plus
/// the whole ordered list (on a directory sysroot nothing is booted, and tests check the order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OsStatus {
    pub booted: Option<DeploymentInfo>,
    pub staged: Option<DeploymentInfo>,
    /// What a rollback would boot: the first deployment that is neither booted nor staged.
    pub rollback: Option<DeploymentInfo>,
    /// The rollback deployment is the default: the next boot goes back to it.
    pub rollback_queued: bool,
    /// Every deployment, in boot order.
    pub deployments: Vec<DeploymentInfo>,
    /// The download the helper is running now, if any (an update's or a pre-stage's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download: Option<Download>,
    /// The bootloader's boot counting, when the host has it (a GRUB environment block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_counting: Option<BootCounting>,
}

/// The boot counting greenboot keeps in GRUB's environment block ([`grubenv`]), as read: what
/// `aloft-agent status` shows, and what tells the agent that the bootloader fell back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootCounting {
    /// The environment block's path on the host.
    pub grubenv: String,
    /// `boot_counter`: boots left for the entry booted after an update; `-1` once the bootloader
    /// fell back to the previous entry; absent when nothing is counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_counter: Option<String>,
    /// `boot_success`: `1` once the running boot was found healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_success: Option<String>,
}

impl BootCounting {
    /// The bootloader ran out of attempts for the new entry and booted the previous one.
    pub fn fell_back(&self) -> bool {
        self.boot_counter.as_deref() == Some("-1")
    }
}

/// A change to the boot counting ([`OsBackend::boot_counter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootCount {
    /// Before the reboot into a staged deployment: this many boots for it.
    Arm(u32),
    /// The boot is healthy, or the update will not boot: nothing is counted any more.
    Disarm,
}

/// The most boot attempts the helper arms (greenboot's default is 3).
pub const MAX_BOOT_ATTEMPTS: u32 = 99;

/// How far a pull has come, as libostree counts it (its `OstreeAsyncProgress`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullProgress {
    /// Bytes downloaded so far.
    pub bytes: u64,
    /// Objects downloaded so far, and found to be needed so far (it grows as the commit's
    /// metadata arrives).
    pub fetched: u32,
    pub requested: u32,
}

/// A download under way, in the helper's status: a download may take minutes, and without it
/// `aloft-agent status` and `systemctl status aloft-agent` could only say "downloading" (as
/// `rpm-ostree status` shows its transaction's progress).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Download {
    pub checksum: String,
    #[serde(flatten)]
    pub progress: PullProgress,
    /// Since the download started.
    pub elapsed_seconds: u64,
}

impl std::fmt::Display for Download {
    /// `3 of 120 objects, 1.2 MB in 14 s`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.progress;
        write!(f, "{} of {} objects, {} in {} s", p.fetched, p.requested, size(p.bytes), self.elapsed_seconds)
    }
}

/// Bytes in SI units with one decimal, as GLib's `g_format_size` (and so ostree) writes them.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1000.0;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

impl OsStatus {
    /// The deployment the next boot starts: the staged one, else the first in order.
    pub fn next_boot(&self) -> Option<&DeploymentInfo> {
        self.staged.as_ref().or_else(|| self.deployments.first())
    }
}

/// What to stage: a commit and the kernel arguments of the old and new rendered configs (the
/// backend deletes the old config's arguments from the current boot entry and appends the new
/// ones, keeping machine-local ones, as MCO does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRequest {
    /// The commit to deploy; `None` keeps the commit of the merge deployment (a kargs-only change).
    pub image: Option<OstreeImage>,
    pub old_kargs: Vec<String>,
    pub new_kargs: Vec<String>,
}

/// What went wrong in the OS backend. Messages name the commit and the repository so a Degraded
/// reason says what to look at. Serializable because the backend runs in the OS helper: the
/// variant travels over the socket, so the agent decides on it (an untrusted commit is
/// Unreconcilable, anything else Degraded) exactly as if libostree ran in its own process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "camelCase")]
pub enum OsError {
    /// The commit's signature is missing or not from a trusted key: refused, nothing deployed.
    #[error("refusing OS commit {checksum} from {url}: {reason}")]
    Untrusted { checksum: String, url: String, reason: String },
    /// The download failed (network, server, a checksum the repository lacks, corruption).
    #[error("pulling OS commit {checksum} from {url}: {message}")]
    Pull { checksum: String, url: String, message: String },
    /// libostree failed at `operation`.
    #[error("{operation}: {message}")]
    Ostree { operation: String, message: String },
    /// The request cannot be carried out as asked (no previous deployment, commit not pulled,
    /// hostile input refused by the helper).
    #[error("{0}")]
    Invalid(String),
    /// The OS helper could not be asked: not running, no answer in time, or it speaks another
    /// protocol. Nothing was changed by this call (or its outcome is unknown, for a timeout).
    #[error("OS helper at {socket} {message}")]
    Helper { socket: String, message: String },
    /// The call was cancelled before it finished ([`Cancel`]): by the agent, for an update that
    /// needed the helper more than a pre-stage download did, or because its client went away.
    /// Nothing was deployed.
    #[error("{operation}: cancelled")]
    Cancelled { operation: String },
}

impl OsError {
    /// A libostree failure during `operation`.
    pub fn ostree(operation: impl Into<String>, e: impl std::fmt::Display) -> Self {
        OsError::Ostree { operation: operation.into(), message: e.to_string() }
    }
}

/// What a pull did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullReport {
    /// The commit was already in the repository (and verified): no download.
    pub already_present: bool,
}

/// The OS operations the daemon needs. Synchronous, because both implementations block: the
/// libostree backend (GObjects are not `Send`) inside the helper, and the agent's socket client
/// to it. The agent calls them on a blocking thread.
pub trait OsBackend: Send + Sync {
    /// Booted / staged / rollback deployments.
    fn status(&self) -> Result<OsStatus, OsError>;
    /// Whether `checksum` is complete in the repository and signed by a trusted key.
    fn has_verified_commit(&self, image: &OstreeImage) -> Result<bool, OsError>;
    /// Configure the remote for `image`'s repository (gpg-verify=true, the trusted keyring) and
    /// pull exactly `image.checksum`; refuses a commit without a valid trusted signature.
    fn pull(&self, image: &OstreeImage) -> Result<PullReport, OsError> {
        self.pull_cancellable(image, &Cancel::new())
    }
    /// [`Self::pull`], stopped with [`OsError::Cancelled`] once `cancel` is cancelled: a download
    /// can take an hour, and nothing else that writes may run beside it.
    fn pull_cancellable(&self, image: &OstreeImage, cancel: &Cancel) -> Result<PullReport, OsError>;
    /// Deploy (stage, on a booted host) the request's commit with its kernel arguments.
    fn stage(&self, req: &StageRequest) -> Result<DeploymentInfo, OsError>;
    /// Make the previous deployment the default (drops a staged one); returns the new default.
    fn rollback(&self) -> Result<DeploymentInfo, OsError>;
    /// Remove a staged deployment, if there is one; returns it. A staged deployment boots at the
    /// next reboot, whatever the reboot is for: one the agent no longer means to boot (its update
    /// failed or was taken back after the stage) must not wait there for the next reboot of
    /// another config or of an admin. Waits for a stage in progress (the sysroot's lock).
    fn drop_staged(&self) -> Result<Option<DeploymentInfo>, OsError>;
    /// The kernel command line of the running boot (`/proc/cmdline`), for the after-boot check.
    fn booted_cmdline(&self) -> Result<String, OsError>;
    /// Arm or disarm the bootloader's boot counting; the counting as it is now, or `None` when
    /// the host has none (no environment block: nothing was changed).
    fn boot_counter(&self, change: BootCount) -> Result<Option<BootCounting>, OsError>;
    /// Make the booted deployment the default (after the bootloader fell back to it, so that the
    /// deployment it gave up on does not boot again); returns it.
    fn keep_booted(&self) -> Result<DeploymentInfo, OsError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `systemctl status aloft-agent` shows of a download, and that the status a helper
    /// of before (no `download`) still reads.
    #[test]
    fn a_download_reads_as_ostree_counts_it() {
        let d = |bytes| Download {
            checksum: "c".into(),
            progress: PullProgress { bytes, fetched: 3, requested: 120 },
            elapsed_seconds: 14,
        };
        assert_eq!(d(0).to_string(), "3 of 120 objects, 0 bytes in 14 s");
        assert_eq!(d(999).to_string(), "3 of 120 objects, 999 bytes in 14 s");
        assert_eq!(d(1_234_567).to_string(), "3 of 120 objects, 1.2 MB in 14 s");
        assert_eq!(d(5_000_000_000_000_000).to_string(), "3 of 120 objects, 5000.0 TB in 14 s");
        let json = serde_json::to_value(d(1000)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"checksum": "c", "bytes": 1000, "fetched": 3, "requested": 120, "elapsedSeconds": 14})
        );
        let old: OsStatus = serde_json::from_value(serde_json::json!({
            "booted": null, "staged": null, "rollback": null, "rollbackQueued": false, "deployments": []
        }))
        .unwrap();
        assert_eq!(old.download, None);
        assert!(serde_json::to_value(&old).unwrap().get("download").is_none(), "no download, no key");
    }
}
