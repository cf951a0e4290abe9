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
}
