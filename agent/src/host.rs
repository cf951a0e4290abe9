//! The seams between the agent and the host, each real in production and real-but-sandboxed in
//! tests: files under a root directory ([`Root`]), and the service manager ([`ServiceManager`]:
//! systemd and logind over D-Bus; tests serve a test implementation of both on a private bus).

use async_trait::async_trait;
use std::path::{Path, PathBuf};

/// The host's filesystem root: `/` in production, a temp dir in tests. Every path the agent
/// touches is resolved beneath it, never by string concatenation alone.
#[derive(Debug, Clone)]
pub struct Root {
    path: PathBuf,
}

impl Root {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Root { path: path.into() }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The agent's own state directory: `<root>/var/lib/aloft`.
    pub fn state_dir(&self) -> PathBuf {
        self.path.join("var/lib/aloft")
    }
}

/// Errors of the service manager seam.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{operation} failed: {message}")]
    Call { operation: String, message: String },
}

impl ServiceError {
    /// What was asked, e.g. `restart crio.service`.
    pub fn operation(&self) -> &str {
        let ServiceError::Call { operation, .. } = self;
        operation
    }

    /// systemd's or logind's answer alone, for a reason that names the operation itself.
    pub fn message(&self) -> &str {
        let ServiceError::Call { message, .. } = self;
        message
    }
}

/// What the agent asks of systemd and logind. Each method is one D-Bus call (or a batch of one
/// kind) so the journal can record it and replay it after a crash; all are idempotent.
#[async_trait]
pub trait ServiceManager: Send + Sync {
    /// `systemctl daemon-reload`.
    async fn daemon_reload(&self) -> Result<(), ServiceError>;
    async fn enable_units(&self, units: &[String]) -> Result<(), ServiceError>;
    async fn disable_units(&self, units: &[String]) -> Result<(), ServiceError>;
    async fn mask_units(&self, units: &[String]) -> Result<(), ServiceError>;
    async fn unmask_units(&self, units: &[String]) -> Result<(), ServiceError>;
    /// `systemctl preset`: for units whose `enabled` is unset, as MCO does.
    async fn preset_units(&self, units: &[String]) -> Result<(), ServiceError>;
    async fn reload_unit(&self, unit: &str) -> Result<(), ServiceError>;
    async fn restart_unit(&self, unit: &str) -> Result<(), ServiceError>;
    async fn start_unit(&self, unit: &str) -> Result<(), ServiceError>;
    async fn stop_unit(&self, unit: &str) -> Result<(), ServiceError>;
    /// The units `unit` wants (systemd's `Wants` property).
    async fn wants(&self, unit: &str) -> Result<Vec<String>, ServiceError>;
    /// Reboot through logind (`org.freedesktop.login1.Manager.Reboot`).
    async fn reboot(&self, reason: &str) -> Result<(), ServiceError>;
    /// `systemctl is-active`: `active`, `failed`, ... (health checks of required units). Not
    /// every implementation can tell; the default says so.
    async fn active_state(&self, unit: &str) -> Result<String, ServiceError> {
        Err(ServiceError::Call { operation: format!("is-active {unit}"), message: "not supported".into() })
    }
    /// `systemd-run --wait`: run a program to its end as a transient service of the host's
    /// service manager, so that it sees the host as its own services do (every device, netlink,
    /// raw sockets, all capabilities), not through this agent's sandbox. `None`: this
    /// implementation cannot start services (tests without a service manager), and the caller
    /// runs the program itself.
    async fn run_transient(&self, run: &TransientRun) -> Result<Option<TransientEnd>, ServiceError> {
        let _ = run;
        Ok(None)
    }
}

/// A program to run to its end as a transient service ([`ServiceManager::run_transient`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransientRun {
    /// The unit's name, unique per run: systemd refuses a second transient unit of a loaded name.
    pub unit: String,
    /// What `systemctl status` shows for it.
    pub description: String,
    /// The program's absolute path first.
    pub argv: Vec<String>,
    /// `KEY=VALUE` each.
    pub env: Vec<String>,
    /// Standard output and error both go here, the file truncated first
    /// (`StandardOutput=truncate:`): where the caller reads the program's words back from, and
    /// an admin finds the last run's.
    pub output: PathBuf,
    /// systemd stops the program once it has run this long (`TimeoutStartSec=` of a oneshot).
    pub timeout: std::time::Duration,
}

/// How a transient run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransientEnd {
    /// Exit status 0.
    Succeeded,
    /// It failed: systemd's `Result` (`exit-code`, `signal`, `core-dump`, ...) and the main
    /// process's exit status or signal number, when systemd could say.
    Failed { result: String, status: Option<i32> },
    /// Still running at the timeout, and stopped.
    TimedOut,
}
