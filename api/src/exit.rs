//! How aloft's daemons end on an error: one line on stderr and status 1.

/// The end of a daemon's `main`: its error on one line, the chain joined with `: ` (as aloftctl
/// and kubectl print theirs), not Rust's multi-line `Error: ... Caused by:`, which journald
/// stores as separate entries. `E` is `anyhow::Error` in practice, whose alternate form is the
/// chain.
pub fn report<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
