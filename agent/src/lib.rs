//! aloft-agent: the node daemon. It watches its own Node on the coordinator, and when the desired
//! rendered config differs from the current one it validates, drains, applies (files, units, SSH
//! keys), takes the rebootless action or reboots, and reports with MCO's annotations.
//!
//! Module map (one concern each): `host` (the seams to the host), the apply engine (validation,
//! files, units, journal, on-disk verification), the systemd/logind D-Bus client and the node
//! disruption policy, and the daemon (enrollment, state machine, coordinator protocol).

pub mod backoff;
pub mod changes;
pub mod coordinator;
pub mod daemon;
pub mod drift;
pub mod engine;
pub mod enroll;
pub mod failpoints;
pub mod first_boot;
pub mod host;
// The OS seam (through the OS helper): pull, stage, verify, health checks, rollback.
pub mod os;
pub mod state;

// The apply engine (validation, files, units, SSH, journal, on-disk verification).
pub mod apply;
pub mod durable;
pub mod files;
pub mod fsroot;
pub mod journal;
pub mod ondisk;
pub mod reclaim;
pub mod ssh;
pub mod undo;
pub mod units;
pub mod validate;

// systemd/logind over D-Bus, the node disruption policy, and the agent's own surfaces
// (D-Bus status, sd_notify, logging, metrics).
pub mod dbus_status;
pub mod disruption;
pub mod logging;
pub mod metrics;
pub mod node_info;
pub mod notify;
pub mod systemd;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod workloads;
