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
//! config changes), `node_progress` (a long download's progress on the Node), `prestage`
//! (download ahead of the node's turn), `rolled_back` (the kernel
//! arguments on the deployment a rollback went back to).

pub mod client;
pub mod denylist;
pub mod health;
pub mod node_progress;
pub mod prestage;
pub mod rolled_back;

pub use aloft_api::os::{kargs, Cancel, DeploymentInfo, OsBackend, OsError, OsStatus, PullReport, StageRequest};
use std::sync::{Arc, Mutex, PoisonError};

/// The daemon's handle on the backend: runs each call on a blocking thread, one at a time (a
/// background pre-stage pull and an update must not race inside one repository).
///
/// A background call (a pre-stage download, [`Self::run_background`]) gives way: any other
/// write cancels it rather than wait up to an hour behind a head start nobody needs now. The one
/// exception is a pull of the commit the background call is downloading, which waits for it
/// ([`Self::run_pull`]). Which background call was cancelled is kept for the daemon to start it
/// again later ([`Self::take_cancelled`]).
#[derive(Clone)]
pub struct OsHandle {
    backend: Arc<dyn OsBackend>,
    lock: Arc<tokio::sync::Mutex<()>>,
    background: Arc<Mutex<Background>>,
}

/// The background call, if one is queued or running, and the last one cancelled.
#[derive(Default)]
struct Background {
    running: Option<Running>,
    cancelled: Option<String>,
}

struct Running {
    /// What the daemon calls it (the config being pre-staged).
    key: String,
    /// The commit it downloads.
    checksum: String,
    cancel: Cancel,
}

impl OsHandle {
    pub fn new(backend: Arc<dyn OsBackend>) -> Self {
        OsHandle {
            backend,
            lock: Arc::new(tokio::sync::Mutex::new(())),
            background: Arc::new(Mutex::new(Background::default())),
        }
    }

    /// Run `f` with the backend on a blocking thread, after any other OS call has finished; a
    /// background call is cancelled first.
    pub async fn run<T, F>(&self, f: F) -> Result<T, OsError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn OsBackend) -> Result<T, OsError> + Send + 'static,
    {
        self.cancel_background_unless(None);
        self.run_locked(f).await
    }

    /// [`Self::run`] for a pull of `checksum`: a background call downloading that commit is
    /// waited for instead of cancelled (this pull then finds it there).
    pub async fn run_pull<T, F>(&self, checksum: &str, f: F) -> Result<T, OsError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn OsBackend) -> Result<T, OsError> + Send + 'static,
    {
        self.cancel_background_unless(Some(checksum));
        self.run_locked(f).await
    }

    /// Run `f` in the background as `key`, downloading `checksum`: after any other OS call, and
    /// cancelled by any later one but a pull of the same commit. Returns
    /// [`OsError::Cancelled`] when cancelled, whether it had started or not.
    pub async fn run_background<T, F>(&self, key: &str, checksum: &str, f: F) -> Result<T, OsError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn OsBackend, &Cancel) -> Result<T, OsError> + Send + 'static,
    {
        let cancel = Cancel::new();
        let previous = {
            let mut bg = self.background.lock().unwrap_or_else(PoisonError::into_inner);
            bg.running.replace(Running { key: key.to_string(), checksum: checksum.to_string(), cancel: cancel.clone() })
        };
        // One background call at a time: a newer one replaces it.
        if let Some(old) = previous {
            self.note_cancelled(old);
        }
        let mine = cancel.clone();
        let result = self
            .run_locked(move |b| {
                if mine.is_cancelled() {
                    return Err(OsError::Cancelled { operation: "a background OS call".into() });
                }
                f(b, &mine)
            })
            .await;
        let mut bg = self.background.lock().unwrap_or_else(PoisonError::into_inner);
        if bg.running.as_ref().is_some_and(|r| r.cancel.same(&cancel)) {
            bg.running = None;
        }
        result
    }

    /// The key of the last background call that was cancelled, once.
    pub fn take_cancelled(&self) -> Option<String> {
        self.background.lock().unwrap_or_else(PoisonError::into_inner).cancelled.take()
    }

    fn cancel_background_unless(&self, pulling: Option<&str>) {
        let running = {
            let mut bg = self.background.lock().unwrap_or_else(PoisonError::into_inner);
            match &bg.running {
                Some(r) if Some(r.checksum.as_str()) != pulling => bg.running.take(),
                _ => None,
            }
        };
        if let Some(r) = running {
            self.note_cancelled(r);
        }
    }

    fn note_cancelled(&self, r: Running) {
        tracing::info!(config = %r.key, checksum = %r.checksum, "cancelling the background download: another OS call needs the helper");
        r.cancel.cancel();
        self.background.lock().unwrap_or_else(PoisonError::into_inner).cancelled = Some(r.key);
    }

    async fn run_locked<T, F>(&self, f: F) -> Result<T, OsError>
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
