//! The OS seam: the image-based OS the node boots, behind [`OsBackend`].
//!
//! Why a trait: the daemon's state machine decides *when* to pull, stage, verify and roll back;
//! the backend knows *how* on one OS technology. The agent's backend is [`client::HelperClient`],
//! which asks the privileged OS helper (`aloft-os-helper`, crate `aloft-osd`) over a Unix socket;
//! the helper runs libostree — on the real `/sysroot` of a node, on a temp directory sysroot in
//! tests. The agent itself never links libostree (see `client` for why). The types, the trait
//! and the wire protocol are shared with the helper through [`aloft_api::os`].
//!
//! Module map: `client` (the helper's socket client), `kargs` (MCO's kernel-argument arithmetic
//! and after-boot checks, pure, from aloft-api), `health` (health checks after an OS-update
//! boot), `denylist` (commits that failed their health checks, not retried until the desired
//! config changes), `prestage` (download ahead of the node's turn), `rolled_back` (the kernel
//! arguments on the deployment a rollback went back to).

pub mod client;
pub mod denylist;
pub mod health;
pub mod prestage;
pub mod rolled_back;

pub use aloft_api::os::{kargs, DeploymentInfo, OsBackend, OsError, OsStatus, PullReport, StageRequest};
use std::sync::Arc;

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

    /// Run a read-only call (status, command line) on a blocking thread without waiting for a
    /// running pull or stage: the helper answers reads beside writes, and the daemon's idle loop
    /// must not stall behind an hour-long background download.
    pub async fn run_read<T, F>(&self, f: F) -> Result<T, OsError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn OsBackend) -> Result<T, OsError> + Send + 'static,
    {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .map_err(|e| OsError::ostree("OS backend task", e))?
    }
}
