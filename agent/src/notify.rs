//! sd_notify: tell systemd the agent is ready, what it is doing, and that it is alive.
//!
//! The unit is `Type=notify` with `WatchdogSec=`: systemd considers the agent started only after
//! READY=1 (so units ordered after it wait for enrollment and recovery), shows STATUS= in
//! `systemctl status`, and restarts the agent if WATCHDOG=1 stops arriving (a hung agent would
//! otherwise hold a node half-updated forever). Everything here is a no-op without
//! NOTIFY_SOCKET, i.e. when not run by systemd (tests, a shell).

use sd_notify::NotifyState;
use std::time::Duration;

/// Log a failed notification instead of failing the caller: a lost READY or STATUS must not
/// stop the agent from doing its work (systemd's own timeouts catch a real problem).
fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

/// READY=1, with a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// STATUS=<text>: one line shown by `systemctl status aloft-agent`.
pub fn status(text: &str) {
    // A newline would end the STATUS= field and start a bogus one.
    let line = text.replace('\n', " ");
    send(&[NotifyState::Status(&line)]);
}

/// EXTEND_TIMEOUT_USEC=: the start (before READY=1) is still going, and may take `by` more
/// before systemd's start timeout counts it failed. Ignored once the agent is ready.
pub fn extend_start(by: Duration) {
    let usec = u32::try_from(by.as_micros()).unwrap_or(u32::MAX);
    send(&[NotifyState::ExtendTimeoutUsec(usec)]);
}

/// STOPPING=1.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// WATCHDOG=1 once.
pub fn watchdog_ping() {
    send(&[NotifyState::Watchdog]);
}

/// How often to ping: half of WATCHDOG_USEC (systemd's advice), or None when the watchdog is
/// off (or meant for another process, per WATCHDOG_PID).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero()).map(|d| d / 2)
}

/// Ping the watchdog every half WATCHDOG_USEC from a task of its own, for as long as the
/// runtime runs. Returns None (and spawns nothing) when the watchdog is off.
///
/// The ping proves the runtime still schedules tasks; the state machine's own progress is
/// reported through STATUS= and the coordinator, not through the watchdog.
pub fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let every = watchdog_interval()?;
    tracing::info!(interval_ms = every.as_millis() as u64, "systemd watchdog enabled");
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            watchdog_ping();
        }
    }))
}
