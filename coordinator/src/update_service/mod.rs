//! aloft's update service: the graph OpenShift's update service (OSUS, Cincinnati) serves, built
//! from a graph-data directory in OpenShift's own schema and aloft's release files, so a fleet's
//! ClusterVersion (or an OpenShift cluster's) can follow channels of releases you publish
//! without writing graph JSON by hand.
//!
//! [`graph_data`] reads the inputs (all or nothing), [`build`] computes every channel's graph,
//! [`http`] serves them and reloads them while it runs, [`metrics`] says how that goes.

pub mod build;
pub mod graph_data;
pub mod http;
pub mod metrics;

pub use build::{Built, Summary};
pub use graph_data::LoadError;

use std::path::Path;

/// Read and build the graphs of `graph_data` with the release files under `releases`.
pub fn load(graph_data: &Path, releases: &Path) -> Result<Built, LoadError> {
    let data = graph_data::load(graph_data, releases)?;
    build::build(&data, &graph_data.join("raw/metadata.json"))
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let releases = if self.releases.is_empty() {
            "no release".to_string()
        } else {
            let total: usize = self.releases.values().sum();
            let per: Vec<String> = self.releases.iter().map(|(a, n)| format!("{a} {n}")).collect();
            format!("{total} release(s) ({})", per.join(", "))
        };
        write!(
            f,
            "{releases}, {} channel(s), {} blocked-edges file(s); {} update(s) declared, {} blocked, {} conditional",
            self.channels, self.blocked_edge_files, self.edges, self.dropped, self.conditional
        )?;
        if self.unmatched_channel_entries > 0 {
            write!(f, "; {} channel entries name no release", self.unmatched_channel_entries)?;
        }
        Ok(())
    }
}
