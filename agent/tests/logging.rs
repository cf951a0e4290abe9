//! Logging goes to the journal where there is one, falls back to stderr without, and installs once. Its own test binary: it
//! sets the process-wide subscriber.

use aloft_agent::logging::{init, LogTarget, LoggingError};

#[test]
fn falls_back_to_stderr_and_installs_once() {
    let target = init().expect("first init");
    // Whichever this machine has: the journal where its socket answers (probed as the journald
    // layer probes it: an empty datagram), stderr where it does not.
    let journal =
        std::os::unix::net::UnixDatagram::unbound().and_then(|s| s.send_to(&[], "/run/systemd/journal/socket")).is_ok();
    assert_eq!(target, if journal { LogTarget::Journald } else { LogTarget::Stderr });
    tracing::info!(unit = "crio.service", "logging works");
    assert!(matches!(init(), Err(LoggingError::AlreadySet(_))));
}
