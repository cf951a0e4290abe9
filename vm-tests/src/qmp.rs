//! QEMU's lifecycle events over QMP (the `qapi` crate: greeting, `qmp_capabilities`, then the
//! event stream). The harness needs them to tell a guest reboot from a power-off: under
//! `-no-reboot` both end the QEMU process, and only the `SHUTDOWN` event's `reason`
//! (`guest-reset` vs `guest-shutdown`) says which.

use anyhow::{Context, Result};
use futures::StreamExt;
use qapi::futures::QmpStreamTokio;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One event as QEMU sent it.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    /// Which QEMU start of the VM (1 = first boot) sent it.
    pub boot: u32,
    /// `SHUTDOWN`, `RESET`, `STOP`, ...
    pub name: String,
    pub data: Value,
}

impl Event {
    /// `SHUTDOWN`'s `reason` (`guest-reset`, `guest-shutdown`, `host-signal`, ...).
    pub fn shutdown_reason(&self) -> Option<&str> {
        (self.name == "SHUTDOWN").then(|| self.data["reason"].as_str()).flatten()
    }
}

/// Events of every boot of one VM, in order.
pub type EventLog = Arc<Mutex<Vec<Event>>>;

/// Connect to QEMU's QMP socket (retrying until it exists), negotiate, and record every event
/// into `log` until QEMU closes the connection. The returned task ends at that point.
pub async fn follow(path: &Path, boot: u32, log: EventLog, timeout: Duration) -> Result<tokio::task::JoinHandle<()>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let negotiation = loop {
        match QmpStreamTokio::open_uds(path).await {
            Ok(n) => break n,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("connecting to QMP at {}", path.display()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let stream = tokio::time::timeout_at(deadline, negotiation.negotiate())
        .await
        .context("QMP negotiation timed out")?
        .context("QMP negotiation (qmp_capabilities)")?;
    let (service, mut events) = stream.into_parts();
    Ok(tokio::spawn(async move {
        // Keep the command side open as long as events are read.
        let _service = service;
        while let Some(ev) = events.next().await {
            match ev {
                Ok(ev) => {
                    let v = serde_json::to_value(&ev).unwrap_or(Value::Null);
                    let name = v["event"].as_str().unwrap_or("?").to_string();
                    tracing::debug!(boot, event = %name, data = %v["data"], "QMP event");
                    log.lock().expect("event log").push(Event {
                        at: Instant::now(),
                        boot,
                        name,
                        data: v.get("data").cloned().unwrap_or(Value::Null),
                    });
                }
                Err(e) => tracing::debug!(boot, error = %e, "QMP: unreadable message ignored"),
            }
        }
    }))
}
