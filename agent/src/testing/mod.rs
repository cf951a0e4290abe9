//! Test support (feature `test-support`): a private D-Bus daemon ([`TestBus`]) and a test
//! implementation of systemd and logind served on it ([`FakeSystemd`]).
//!
//! The bus is real: `dbus-daemon` routes the same messages it routes on a node, and the agent's
//! [`SystemdDbus`](crate::systemd::SystemdDbus) talks to it exactly as it talks to the system bus.
//! Only systemd/logind themselves are stood in for, because PID 1 and a real reboot are the one
//! boundary a test process cannot run.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use aloft_agent::host::ServiceManager;
//! use aloft_agent::systemd::SystemdDbus;
//! use aloft_agent::testing::{FakeSystemd, TestBus};
//!
//! let root = std::env::temp_dir().join("host-root");
//! let bus = TestBus::start()?;
//! let fake = FakeSystemd::serve(&bus, &root).await?;
//! let services = SystemdDbus::connect(bus.address()).await?;
//! services.restart_unit("crio.service").await?;
//! assert_eq!(fake.calls()[0].to_string(), "RestartUnit(crio.service, replace)");
//! # Ok(()) }
//! ```

mod bus;
mod fake_systemd;
mod unit_files;

pub use bus::{TestBus, TestBusError};
pub use fake_systemd::{Arg, Call, FakeError, FakeSystemd};
