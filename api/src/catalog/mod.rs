//! File-based catalogs (FBC), as `opm` reads and checks them, and OLM v0's choice of what to
//! install from one.
//!
//! aloft's CatalogSources serve file-based catalogs written for OLM, so a catalog must mean the
//! same thing here as on an OpenShift cluster: one `opm validate` refuses is refused here, with
//! opm's words (every problem at once, each naming its package, channel or bundle), and a
//! Subscription on a given channel moves to the bundle OLM v0 would move it to (the channel
//! head on install, then the entry nearest the head that replaces, skips or skipRange-covers
//! the installed bundle). Ranges follow blang/semver, which both opm and OLM use, quirks
//! included. This module is pure: the coordinator fetches and decodes the YAML or JSON streams
//! and hands over the blobs; nothing here does I/O.

mod cel_check;
mod constraint;
mod dependencies;
mod model;
mod range;
mod upgrade;
mod validate;

pub use constraint::{Constraint, Rule};
pub use dependencies::{Dependency, Provider};
pub use model::*;
pub use range::{parse_version, parse_version_tolerant, Range, RangeError};
pub use upgrade::{ChannelSummary, PackageSummary, ResolveError};
pub use validate::HeadError;

/// A bundle blob for tests: `<package>.v<version>` with its `olm.package` property, then `more`.
#[cfg(test)]
pub(crate) fn test_bundle(package: &str, version: &str, more: serde_json::Value) -> serde_json::Value {
    let mut properties =
        vec![serde_json::json!({"type": "olm.package", "value": {"packageName": package, "version": version}})];
    properties.extend(more.as_array().cloned().unwrap_or_default());
    serde_json::json!({"schema": "olm.bundle", "name": format!("{package}.v{version}"), "package": package,
           "image": format!("example.com/{package}:{version}"), "properties": properties})
}

/// One problem with a catalog, in opm's words. The three kinds follow opm's three stages, so a
/// message can be found in opm's output and its code: reading a blob, building the model from
/// the blobs, and checking the model's graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// A blob that cannot be read as its schema says; `blob` is where it came from (`file#n`).
    #[error("{blob}: {message}")]
    Blob { blob: String, message: String },
    /// What opm finds while it puts blobs together (unknown or duplicate packages, channels,
    /// entries and bundles, the `olm.package` property, images, versions, deprecations). The
    /// message is opm's whole line and names what it is about.
    #[error("{message}")]
    Model { package: String, channel: Option<String>, bundle: Option<String>, message: String },
    /// What opm's model validation finds, under its package, channel and bundle; shown on one
    /// line as opm's error tree would nest it.
    #[error("{}", invalid_line(package, channel.as_deref(), bundle.as_deref(), message))]
    Invalid { package: String, channel: Option<String>, bundle: Option<String>, message: String },
}

fn invalid_line(package: &str, channel: Option<&str>, bundle: Option<&str>, message: &str) -> String {
    let mut line = format!("invalid package {}: ", range::go_quote(package));
    if let Some(c) = channel {
        line.push_str(&format!("invalid channel {}: ", range::go_quote(c)));
    }
    if let Some(b) = bundle {
        line.push_str(&format!("invalid bundle {}: ", range::go_quote(b)));
    }
    line.push_str(message);
    line
}

impl CatalogError {
    /// opm's own message, without the package/channel/bundle this crate puts before it.
    pub fn message(&self) -> &str {
        match self {
            CatalogError::Blob { message, .. }
            | CatalogError::Model { message, .. }
            | CatalogError::Invalid { message, .. } => message,
        }
    }
}

/// Every problem found, one per line when shown: a CatalogSource's status lists them all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", lines(.0))]
pub struct CatalogErrors(pub Vec<CatalogError>);

fn lines(errors: &[CatalogError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests;
