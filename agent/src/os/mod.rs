//! The OS seam: the image-based OS the node boots, behind [`OsBackend`].
//!
//! Why a trait: the daemon's state machine decides *when* to pull, stage, verify and roll back;
//! the backend knows *how* on one OS technology. Production and tests use the same libostree
//! backend ([`ostree::OstreeBackend`]) — on the real `/sysroot` of a node, on a temp directory
//! sysroot in tests — so the trait is not there for mocks but to keep libostree's blocking,
//! non-`Send` GObject world out of the async daemon: every method is synchronous and the daemon
//! calls it on a blocking thread ([`OsHandle`]).
//!
//! Module map: `ostree` (libostree: remote, pull with GPG, stage with kernel arguments, rollback,
//! status), `kargs` (MCO's kernel-argument arithmetic and after-boot checks, pure), `health`
//! (health checks after an OS-update boot), `denylist` (commits that failed their health checks,
//! not retried until the desired config changes), `prestage` (download ahead of the node's turn).

pub mod denylist;
pub mod health;
pub mod kargs;
pub mod ostree;
pub mod prestage;
#[cfg(feature = "test-support")]
pub mod testkit;

use aloft_api::osimage::OstreeImage;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
/// reason says what to look at.
#[derive(Debug, thiserror::Error)]
pub enum OsError {
    /// The commit's signature is missing or not from a trusted key: refused, nothing deployed.
    #[error("refusing OS commit {checksum} from {url}: {reason}")]
    Untrusted { checksum: String, url: String, reason: String },
    #[error("pulling OS commit {checksum} from {url}: {message}")]
    Pull { checksum: String, url: String, message: String },
    #[error("{operation}: {message}")]
    Ostree { operation: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl OsError {
    pub(crate) fn ostree(operation: impl Into<String>, e: impl std::fmt::Display) -> Self {
        OsError::Ostree { operation: operation.into(), message: e.to_string() }
    }
}

/// What a pull did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullReport {
    /// The commit was already in the repository (and verified): no download.
    pub already_present: bool,
}

/// The OS operations the daemon needs. Synchronous: call through [`OsHandle`] from async code.
pub trait OsBackend: Send + Sync {
    /// Booted / staged / rollback deployments.
    fn status(&self) -> Result<OsStatus, OsError>;
    /// Whether `checksum` is complete in the repository and signed by a trusted key.
    fn has_verified_commit(&self, image: &OstreeImage) -> Result<bool, OsError>;
    /// Configure the remote for `image`'s repository (gpg-verify=true, the trusted keyring) and
    /// pull exactly `image.checksum`; refuses a commit without a valid trusted signature.
    fn pull(&self, image: &OstreeImage) -> Result<PullReport, OsError>;
    /// Deploy (stage, on a booted host) the request's commit with its kernel arguments.
    fn stage(&self, req: &StageRequest) -> Result<DeploymentInfo, OsError>;
    /// Make the previous deployment the default (drops a staged one); returns the new default.
    fn rollback(&self) -> Result<DeploymentInfo, OsError>;
    /// The kernel command line of the running boot (`/proc/cmdline`), for the after-boot check.
    fn booted_cmdline(&self) -> Result<String, OsError>;
}

/// The daemon's handle on the backend: runs each call on a blocking thread, one at a time (a
/// background pre-stage pull and an update must not race inside one repository).
#[derive(Clone)]
pub struct OsHandle {
    backend: Arc<dyn OsBackend>,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl OsHandle {
    pub fn new(backend: Arc<dyn OsBackend>) -> Self {
        OsHandle { backend, lock: Arc::new(tokio::sync::Mutex::new(())) }
    }

    /// Run `f` with the backend on a blocking thread, after any other OS call has finished.
    pub async fn run<T, F>(&self, f: F) -> Result<T, OsError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn OsBackend) -> Result<T, OsError> + Send + 'static,
    {
        let _guard = self.lock.lock().await;
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .map_err(|e| OsError::ostree("OS backend task", e))?
    }

    /// The status for `aloft-agent status` (synchronous: a sysroot load is a few milliseconds).
    pub fn status_now(&self) -> Result<OsStatus, OsError> {
        self.backend.status()
    }

    /// The running boot's kernel command line.
    pub fn cmdline_now(&self) -> Result<String, OsError> {
        self.backend.booted_cmdline()
    }
}
