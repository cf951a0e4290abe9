//! The agent's status on D-Bus: `org.aloft.Agent1` at `/org/aloft/Agent1`.
//!
//! Why D-Bus and not only the status file: it is how other host software (cockpit, a
//! desktop-less admin running `busctl`, monitoring) already watches system daemons, it carries
//! change notifications (PropertiesChanged) so nobody polls, and the bus's policy decides who may
//! read it. Properties `State`, `CurrentConfig`, `DesiredConfig`, `LastError`, `Progress`,
//! `Version` (all strings) and a `Status()` method returning the whole [`AgentStatus`] as JSON.
//!
//! In production the name is owned on the system bus, which needs a bus policy file allowing
//! root to own `org.aloft.Agent1` (dbus-1/system.d); tests serve it on a private bus.
//!
//! ```text
//! busctl get-property org.aloft.Agent1 /org/aloft/Agent1 org.aloft.Agent1 State
//! busctl call org.aloft.Agent1 /org/aloft/Agent1 org.aloft.Agent1 Status
//! ```

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use zbus::{interface, proxy, Connection};

/// The well-known name the agent owns.
pub const AGENT_BUS_NAME: &str = "org.aloft.Agent1";
/// The object path of the status object.
pub const AGENT_PATH: &str = "/org/aloft/Agent1";

/// What the agent is doing, shared by the daemon (writer) and the D-Bus object (reader).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// MCO's node state: `Done`, `Working`, `Degraded`, `Unreconcilable` (or the agent's phase).
    pub state: String,
    pub current_config: String,
    pub desired_config: String,
    /// The last error (MCO's `reason`), empty when none.
    pub reason: String,
    /// What the agent is doing right now, for people: `writing files and units`.
    pub progress: String,
    /// RFC 3339 time of the last change.
    pub updated_at: String,
    /// OS deployments (booted, staged, rollback) once the OS backend reports them; `null` until
    /// then.
    #[serde(default)]
    pub os: serde_json::Value,
    /// The running agent's build (`0.1.0 (commit 1a2b3c4d5e6f, clean tree, ...)`): after a
    /// package upgrade the binary on disk is not the one running until the agent restarts.
    /// Empty from an agent older than this field.
    #[serde(default)]
    pub version: String,
}

impl AgentStatus {
    /// Set `updated_at` to now.
    pub fn touch(&mut self) {
        self.updated_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    }
}

/// Errors serving or reading the status. Each message quotes its cause, which is not also the
/// error's source: formatted with its chain (`{:#}`) it would be said twice.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("D-Bus: {0}")]
    Bus(zbus::Error),
    #[error("status JSON: {0}")]
    Json(serde_json::Error),
}

impl From<zbus::Error> for StatusError {
    fn from(e: zbus::Error) -> Self {
        StatusError::Bus(e)
    }
}

impl From<serde_json::Error> for StatusError {
    fn from(e: serde_json::Error) -> Self {
        StatusError::Json(e)
    }
}

/// The served object.
struct Agent1 {
    status: AgentStatus,
}

#[interface(name = "org.aloft.Agent1")]
impl Agent1 {
    /// The whole status as JSON ([`AgentStatus`], camelCase keys).
    fn status(&self) -> zbus::fdo::Result<String> {
        serde_json::to_string(&self.status).map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }

    #[zbus(property)]
    fn state(&self) -> String {
        self.status.state.clone()
    }

    #[zbus(property)]
    fn current_config(&self) -> String {
        self.status.current_config.clone()
    }

    #[zbus(property)]
    fn desired_config(&self) -> String {
        self.status.desired_config.clone()
    }

    #[zbus(property)]
    fn last_error(&self) -> String {
        self.status.reason.clone()
    }

    #[zbus(property)]
    fn progress(&self) -> String {
        self.status.progress.clone()
    }

    #[zbus(property)]
    fn version(&self) -> String {
        self.status.version.clone()
    }
}

/// A client of `org.aloft.Agent1` (for `busctl`-like tools and tests).
#[proxy(interface = "org.aloft.Agent1", default_service = "org.aloft.Agent1", default_path = "/org/aloft/Agent1")]
pub trait Agent1Client {
    /// The whole status as JSON.
    fn status(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn current_config(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn desired_config(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn last_error(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn progress(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// The served status object; keeps serving while the connection lives.
#[derive(Clone, Debug)]
pub struct StatusService {
    conn: Connection,
}

impl StatusService {
    /// Serve on the system bus as `org.aloft.Agent1` (production).
    pub async fn serve_system(initial: AgentStatus) -> Result<Self, StatusError> {
        Self::serve_on(Connection::system().await?, initial).await
    }

    /// Serve on the bus at `address` (tests: a private bus).
    pub async fn serve_at_address(address: &str, initial: AgentStatus) -> Result<Self, StatusError> {
        let conn = zbus::connection::Builder::address(address).build().await?;
        Self::serve_on(conn, initial).await
    }

    /// Serve on an existing connection: registers the object, then takes the name (so nobody
    /// sees the name without the object).
    pub async fn serve_on(conn: Connection, initial: AgentStatus) -> Result<Self, StatusError> {
        conn.object_server().at(AGENT_PATH, Agent1 { status: initial }).await?;
        conn.request_name(AGENT_BUS_NAME).await?;
        Ok(StatusService { conn })
    }

    /// The connection the object is served on.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The status as currently served.
    pub async fn current(&self) -> Result<AgentStatus, StatusError> {
        let iface = self.conn.object_server().interface::<_, Agent1>(AGENT_PATH).await?;
        let status = iface.get().await.status.clone();
        Ok(status)
    }

    /// Replace the status and emit PropertiesChanged for each property that changed.
    pub async fn update(&self, status: AgentStatus) -> Result<(), StatusError> {
        let iface = self.conn.object_server().interface::<_, Agent1>(AGENT_PATH).await?;
        let mut obj = iface.get_mut().await;
        let old = std::mem::replace(&mut obj.status, status);
        let new = &obj.status;
        let emitter = iface.signal_emitter();
        if old.state != new.state {
            obj.state_changed(emitter).await?;
        }
        if old.current_config != new.current_config {
            obj.current_config_changed(emitter).await?;
        }
        if old.desired_config != new.desired_config {
            obj.desired_config_changed(emitter).await?;
        }
        if old.reason != new.reason {
            obj.last_error_changed(emitter).await?;
        }
        if old.progress != new.progress {
            obj.progress_changed(emitter).await?;
        }
        Ok(())
    }

    /// Follow a watch channel the daemon writes to: every new value is served. Ends when the
    /// sender is dropped. Errors are logged, not fatal: status reporting must not stop updates.
    pub fn follow(self, mut rx: watch::Receiver<AgentStatus>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let status = rx.borrow_and_update().clone();
                if let Err(e) = self.update(status).await {
                    tracing::warn!(error = %e, "cannot publish status on D-Bus");
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}

/// Read the agent's status over D-Bus: the system bus, or the bus at `address`.
pub async fn fetch(address: Option<&str>) -> Result<AgentStatus, StatusError> {
    let conn = match address {
        Some(a) => zbus::connection::Builder::address(a).build().await?,
        None => Connection::system().await?,
    };
    let proxy = Agent1ClientProxy::new(&conn).await?;
    Ok(serde_json::from_str(&proxy.status().await?)?)
}
