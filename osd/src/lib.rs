//! aloft-osd: the privileged OS helper (`aloft-os-helper`). It owns the ostree sysroot and serves
//! the [`aloft_api::os::OsBackend`] operations — status, pull with GPG verification, stage with
//! kernel arguments, rollback — to `aloft-agent` over a Unix socket.
//!
//! Why a process of its own: libostree (62 shared libraries) stays out of the always-running
//! agent, whose idle RSS it nearly doubled; and an ostree deploy on a booted host needs
//! privileges the hardened agent unit does not have (the host's mount namespace, writable
//! /sysroot and /boot, CAP_SYS_ADMIN). In production systemd starts the helper on the first
//! connection to `/run/aloft/os-helper.sock` and it exits after a minute without requests, so
//! between updates it costs nothing. MCO's daemon hands the same job to rpm-ostreed, bootc and
//! Zincati to their system daemons.
//!
//! Module map: `ostree` (the libostree backend), `bootcount` (GRUB's boot counting), `server` (socket, peer credentials, one
//! request per connection, idle exit, pulls in a worker process cancelled by a hangup), `testkit` (feature `test-support`: signed commits, an
//! HTTP server, directory sysroots, the helper as a child process).

pub mod bootcount;
pub mod ostree;
pub mod server;
#[cfg(feature = "test-support")]
pub mod testkit;
