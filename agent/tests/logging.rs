//! Logging falls back to stderr without a journal, and installs once. Its own test binary: it
//! sets the process-wide subscriber.

use aloft_agent::logging::{init, LogTarget, LoggingError};

#[test]
fn falls_back_to_stderr_and_installs_once() {
    let target = init().expect("first init");
    if !std::path::Path::new("/run/systemd/journal/socket").exists() {
        assert_eq!(target, LogTarget::Stderr);
    }
    tracing::info!(unit = "crio.service", "logging works");
    assert!(matches!(init(), Err(LoggingError::AlreadySet(_))));
}
