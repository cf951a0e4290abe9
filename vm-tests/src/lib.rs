//! aloft's VM test harness: the whole system on real VMs.
//!
//! The coordinator runs on the host (the real binary, [`aloft_tests::Coordinator`]); each node is a
//! QEMU VM booted from the OS images of `images/` ([`images`]), on its own copy-on-write overlay
//! of the built disk. The harness
//!
//! - plays the bootloader: the images have no bootloader, so QEMU boots the kernel, initrd and
//!   options of a BLS entry directly; on a guest reboot (`-no-reboot` makes QEMU exit, QMP says
//!   `guest-reset`) it reads `/boot/loader/entries` from the VM's disk again and starts QEMU with
//!   the highest-priority entry, as a BLS bootloader would ([`vm`]);
//! - talks to each guest over the virtio-serial command channel `org.aloft.cmd` ([`channel`]) and
//!   follows QEMU's lifecycle events over QMP ([`qmp`]);
//! - lets a guest reach only what a test chooses: QEMU user networking with `restrict=on` and
//!   `guestfwd` to loopback ports — the coordinator and a static HTTP server for the image's
//!   ostree repo ([`repo_server`]);
//! - kills every QEMU by its own PID (on a timeout, a power cut, and on drop) and keeps the serial
//!   logs and the agent's journal under `target/vm-tests/<test>/` when a test fails ([`fleet`]).
//!
//! Tests skip (loudly) when QEMU or mmdebstrap are missing, unless `ALOFT_REQUIRE_VM` is set
//! ([`env::prerequisites`]).

pub mod channel;
pub mod cluster;
pub mod env;
pub mod fleet;
pub mod images;
pub mod qmp;
pub mod repo_server;
pub mod vm;

pub use fleet::{Fleet, FleetOptions};
pub use vm::{Phase, Status, Vm};
