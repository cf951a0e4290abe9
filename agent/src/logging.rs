//! Logging: to the journal when there is one, else to stderr.
//!
//! On a node the agent logs to journald directly (structured fields stay fields: `unit=`,
//! `target=`, searchable with `journalctl -u aloft-agent UNIT=crio.service`). In a container or
//! a test there is no journal socket; tracing-journald's `layer()` then errors and the agent
//! falls back to plain stderr rather than losing its logs. The filter comes from `ALOFT_LOG`:
//! comma-separated `target=level` directives and a bare default level, e.g.
//! `info,aloft_agent::systemd=debug`; default `info`.
//!
//! The filter is tracing-subscriber's `Targets`, not `EnvFilter`: the agent only ever needs
//! per-target levels, and `EnvFilter`'s span and field-value directives pull a regex engine into
//! the binary (about 0.4 MB of text, which on a node is resident memory: the agent's idle RSS
//! is mostly its own text).

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable holding the log filter.
pub const LOG_ENV: &str = "ALOFT_LOG";
/// The filter when `ALOFT_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info";

/// Where logs went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    Journald,
    Stderr,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("invalid {LOG_ENV} filter {spec:?}: {message}")]
    Filter { spec: String, message: String },
    #[error("a global tracing subscriber is already set: {0}")]
    AlreadySet(String),
}

/// Parse a filter spec (the value of `ALOFT_LOG`) by the words every aloft daemon reads
/// ([`aloft_api::log_spec`]): empty means [`DEFAULT_FILTER`], `warning` is `warn`, and a lone
/// word must be a level.
pub fn filter(spec: &str) -> Result<Targets, LoggingError> {
    let bad = |message: String| LoggingError::Filter { spec: spec.to_string(), message };
    let words =
        if spec.trim().is_empty() { DEFAULT_FILTER } else { aloft_api::log_spec::normalized(spec).map_err(bad)? };
    words.parse().map_err(|e: tracing_subscriber::filter::ParseError| bad(e.to_string()))
}

/// Install the global subscriber: journald if its socket answers, else stderr. Call once, early.
pub fn init() -> Result<LogTarget, LoggingError> {
    let spec = std::env::var(LOG_ENV).unwrap_or_default();
    // A filter that does not parse is said once logging works, and `info` used: failing here left
    // the agent with no log at all, errors included.
    let (filter, refused) = match filter(&spec) {
        Ok(f) => (f, None),
        Err(e) => (Targets::new().with_default(tracing::Level::INFO), Some(e)),
    };
    let target = install(filter)?;
    if let Some(e) = refused {
        tracing::warn!("{e}; logging at info");
    }
    Ok(target)
}

fn install(filter: Targets) -> Result<LogTarget, LoggingError> {
    let already = |e: tracing_subscriber::util::TryInitError| LoggingError::AlreadySet(e.to_string());
    match tracing_journald::layer() {
        Ok(journald) => {
            tracing_subscriber::registry()
                .with(filter)
                .with(journald.with_syslog_identifier("aloft-agent".to_string()))
                .try_init()
                .map_err(already)?;
            Ok(LogTarget::Journald)
        }
        Err(e) => {
            tracing_subscriber::registry()
                .with(filter)
                // Colors only for a terminal: a log file or a service's captured stderr gets plain text.
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                        .with_writer(std::io::stderr),
                )
                .try_init()
                .map_err(already)?;
            tracing::debug!(error = %e, "no journald socket; logging to stderr");
            Ok(LogTarget::Stderr)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        use tracing::Level;
        let default = filter("").unwrap();
        assert_eq!(default.default_level(), Some(Level::INFO.into()));
        assert!(!default.would_enable("aloft_agent::apply", &Level::DEBUG));
        let f = filter("info,aloft_agent::systemd=debug").unwrap();
        assert!(f.would_enable("aloft_agent::systemd", &Level::DEBUG));
        assert!(!f.would_enable("aloft_agent::apply", &Level::DEBUG));
        assert!(f.would_enable("zbus", &Level::INFO));
        let err = filter("aloft_agent=loud").unwrap_err().to_string();
        assert!(err.contains("ALOFT_LOG") && err.contains("loud"), "{err}");
        // The words every daemon reads alike: `warning` is warn, a lone non-level is refused.
        let warning = filter("warning").unwrap();
        assert_eq!(warning.default_level(), Some(Level::WARN.into()));
        let err = filter("debg").unwrap_err().to_string();
        assert!(err.contains("\"debg\"") && err.contains("a lone word must be a level"), "{err}");
    }
}
