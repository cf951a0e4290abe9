//! systemd integration of `serve`: READY=1 once the API accepts connections, STATUS= with what
//! `/readyz` would say, and WATCHDOG=1 only while the coordinator is alive.
//!
//! Why: the unit is `Type=notify` with `WatchdogSec=`, so units ordered after the coordinator
//! start once it serves, `systemctl status aloft-coordinator` shows whether a controller is
//! waiting to be started again, and systemd restarts a coordinator whose controllers' thread or
//! store is stuck: a hang the in-process supervisor cannot see, since nothing panics. All of it
//! is a no-op without NOTIFY_SOCKET (tests, a shell).

use crate::health::{self, Check, Health};
use crate::store::Store;
use sd_notify::NotifyState;
use std::sync::Arc;
use std::time::Duration;

/// How often STATUS= is refreshed when no watchdog sets the pace.
const STATUS_EVERY: Duration = Duration::from_secs(10);

fn send(states: &[NotifyState<'_>]) {
    // A lost notification must not stop the coordinator; systemd's timeouts catch a real one.
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

/// One line for STATUS=: `serving` and the failing checks, if any.
fn status_line(listening: &str, checks: &[Check]) -> String {
    let failing: Vec<String> =
        checks.iter().filter_map(|c| c.failure.as_ref().map(|why| format!("{}: {why}", c.name))).collect();
    let line = match failing.is_empty() {
        true => format!("serving on {listening}; store and controllers ok"),
        false => format!("serving on {listening}; not ready: {}", failing.join("; ")),
    };
    // A newline would end the STATUS= field and start a bogus one.
    line.replace('\n', " ")
}

/// READY=1 now, then STATUS= and the watchdog's pings from a task of its own, for as long as
/// the runtime runs. A ping is sent only when [`health::alive`] passes, so a stuck coordinator
/// is restarted by systemd after `WatchdogSec`. One round of checks a tick serves both.
pub async fn serving(listening: String, health: Arc<Health>, store: Arc<dyn Store>) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let status = status_line(&listening, &health::checks(&health, store.as_ref()).await);
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
    // Half of WATCHDOG_USEC, as systemd advises; None when off or meant for another process.
    let watchdog = sd_notify::watchdog_enabled().filter(|d| !d.is_zero()).map(|d| d / 2);
    if let Some(every) = watchdog {
        tracing::info!(interval_ms = every.as_millis() as u64, "systemd watchdog enabled");
    }
    tokio::spawn(async move {
        let every = watchdog.unwrap_or(STATUS_EVERY).min(STATUS_EVERY);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = status;
        loop {
            tick.tick().await;
            let checks = health::checks(&health, store.as_ref()).await;
            let now = status_line(&listening, &checks);
            if now != last {
                send(&[NotifyState::Status(&now)]);
                last = now;
            }
            if watchdog.is_none() {
                continue;
            }
            match health::alive(&checks) {
                Ok(()) => send(&[NotifyState::Watchdog]),
                Err(why) => tracing::error!(%why, "not pinging systemd's watchdog: the coordinator is stuck"),
            }
        }
    });
}

/// STOPPING=1, with why in STATUS=: `systemctl status` shows a coordinator shutting down, not
/// one that stopped answering.
pub fn stopping(why: &str) {
    if std::env::var_os("NOTIFY_SOCKET").is_some() {
        let status = format!("stopping: {why}");
        send(&[NotifyState::Stopping, NotifyState::Status(&status)]);
    }
}

/// READY=1 with a STATUS= saying this coordinator is a standby, and the watchdog's pings while
/// it waits (a standby may wait for days): `systemctl status` shows it waiting, and units
/// ordered after it are not held up. The task ends when the handle is aborted (it became the
/// active one, and [`serving`] takes over).
pub fn standby(etcd: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return;
        }
        let status = format!("standby: another coordinator is active on etcd at {etcd}; waiting for it to stop");
        send(&[NotifyState::Ready, NotifyState::Status(&status)]);
        let Some(every) = sd_notify::watchdog_enabled().filter(|d| !d.is_zero()).map(|d| d / 2) else { return };
        loop {
            tokio::time::sleep(every).await;
            send(&[NotifyState::Watchdog]);
        }
    })
}
