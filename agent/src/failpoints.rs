//! Arming the agent's named crash points from its environment, so the VM tests can stop a real
//! agent at an exact moment of an OS update (and cut the power there) instead of at whatever
//! moment a poll happens to catch.
//!
//! The points exist only in builds with the `failpoints` feature (`images/build
//! --with-failpoints`, which the VM tests use); release builds for nodes have none, and there
//! `ALOFT_FAILPOINTS` is refused rather than ignored, so nobody believes a point is armed when it
//! is not.
//!
//! `ALOFT_FAILPOINTS` is `name=action` pairs separated by `;`, the actions of the `fail` crate:
//! `pause` (block there until the process dies), `panic`, `sleep(ms)`, `off`, with an optional
//! count or percentage (`1*panic`), e.g. `os-after-current-saved=pause`.

use thiserror::Error;

/// The environment variable that arms failpoints.
pub const ENV: &str = "ALOFT_FAILPOINTS";

/// Why `ALOFT_FAILPOINTS` was refused (the agent does not start: a test that armed a point must
/// not run on without it).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FailpointError {
    #[error("{ENV}: entry {0:?} is not name=action")]
    Syntax(String),
    #[error("{ENV}: {name}: {reason}")]
    Action { name: String, reason: String },
    #[error("{ENV}: {0:?} is not a failpoint of this agent (see aloft_agent::failpoints::names)")]
    Unknown(String),
    #[error("{ENV} is set but this aloft-agent was built without failpoints (cargo feature `failpoints`)")]
    NotBuiltIn,
}

/// Every failpoint name of the agent: the apply engine's and the OS update's.
pub fn names() -> impl Iterator<Item = &'static str> {
    crate::apply::FAILPOINTS.iter().chain(crate::daemon::OS_FAILPOINTS).copied()
}

/// Parse `spec` (the value of [`ENV`]) into (name, action) pairs, checking the names.
pub fn parse(spec: &str) -> Result<Vec<(String, String)>, FailpointError> {
    let mut out = Vec::new();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, action)) = entry.split_once('=') else {
            return Err(FailpointError::Syntax(entry.to_string()));
        };
        let (name, action) = (name.trim(), action.trim());
        if name.is_empty() || action.is_empty() {
            return Err(FailpointError::Syntax(entry.to_string()));
        }
        if !names().any(|n| n == name) {
            return Err(FailpointError::Unknown(name.to_string()));
        }
        out.push((name.to_string(), action.to_string()));
    }
    Ok(out)
}

/// Arm the points `spec` names. Returns the armed names; nothing is armed when any entry is bad.
pub fn arm(spec: &str) -> Result<Vec<String>, FailpointError> {
    let entries = parse(spec)?;
    arm_parsed(entries)
}

#[cfg(feature = "failpoints")]
fn arm_parsed(entries: Vec<(String, String)>) -> Result<Vec<String>, FailpointError> {
    // Check every action before arming any (the fail crate checks an action only by arming it).
    for (name, action) in &entries {
        if let Err(reason) = check_action(action) {
            return Err(FailpointError::Action { name: name.clone(), reason });
        }
    }
    let mut armed = Vec::new();
    for (name, action) in entries {
        fail::cfg(name.clone(), &action).map_err(|reason| FailpointError::Action { name: name.clone(), reason })?;
        armed.push(name);
    }
    Ok(armed)
}

/// Whether the fail crate takes `action`, tried on a point no code evaluates.
#[cfg(feature = "failpoints")]
fn check_action(action: &str) -> Result<(), String> {
    const PROBE: &str = "aloft-failpoint-syntax-probe";
    let r = fail::cfg(PROBE, action);
    fail::remove(PROBE);
    r
}

#[cfg(not(feature = "failpoints"))]
fn arm_parsed(entries: Vec<(String, String)>) -> Result<Vec<String>, FailpointError> {
    if entries.is_empty() {
        Ok(Vec::new())
    } else {
        Err(FailpointError::NotBuiltIn)
    }
}

/// Evaluate failpoint `name`, saying so in the log first when it is armed: a test waiting for the
/// moment reads the log line, then cuts the power while the point holds the agent (`pause`).
pub fn hit(name: &'static str) {
    #[cfg(feature = "failpoints")]
    {
        if fail::list().iter().any(|(n, _)| n == name) {
            tracing::warn!(failpoint = name, "failpoint {name} reached");
        }
        fail::fail_point!(name);
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_name_action_pairs_of_known_points() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(
            parse(" os-after-current-saved=pause ; journal-after-commit = 1*panic ;").unwrap(),
            vec![
                ("os-after-current-saved".to_string(), "pause".to_string()),
                ("journal-after-commit".to_string(), "1*panic".to_string())
            ]
        );
        assert_eq!(parse("os-after-current-saved"), Err(FailpointError::Syntax("os-after-current-saved".into())));
        assert_eq!(parse("=pause"), Err(FailpointError::Syntax("=pause".into())));
        assert_eq!(parse("os-after-stage="), Err(FailpointError::Syntax("os-after-stage=".into())));
        assert_eq!(parse("os-after-lunch=pause"), Err(FailpointError::Unknown("os-after-lunch".into())));
    }

    #[test]
    fn a_bad_action_arms_nothing_and_names_the_point() {
        let e = arm("os-after-denylist=off;os-after-rollback=explode(3)").unwrap_err();
        assert!(matches!(&e, FailpointError::Action { name, .. } if name == "os-after-rollback"), "{e}");
        assert!(!fail::list().iter().any(|(n, _)| n == "os-after-denylist"), "armed despite the error");
    }

    #[test]
    fn every_name_is_unique() {
        let all: Vec<&str> = names().collect();
        let set: std::collections::BTreeSet<&str> = all.iter().copied().collect();
        assert_eq!(all.len(), set.len(), "{all:?}");
    }
}
