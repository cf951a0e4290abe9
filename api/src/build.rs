//! Which build of aloft a binary is: its version and the source it was built from.
//!
//! A fleet half-way through an upgrade of aloft itself runs two builds at once; an operator
//! auditing it needs each coordinator and each node to say which one it runs, as Kubernetes
//! components do (`kubectl version`, a Node's `status.nodeInfo.kubeletVersion`, which
//! `kubectl get nodes` shows as VERSION). The source is what the build's environment says:
//! `ALOFT_GIT_COMMIT`, `ALOFT_GIT_TREE_STATE` (`clean` or `dirty`) and `ALOFT_BUILD_DATE`
//! (RFC 3339, the commit's date, so that a rebuild of one commit is the same binary), exported
//! by `scripts/build-env.sh` as Kubernetes' `hack/lib/version.sh` sets its `-ldflags`. A build
//! without them (a plain `cargo build`) says so rather than guessing.
//!
//! [`build_info!`](crate::build_info) reads them in the calling crate: only the binaries that
//! expand it are compiled again when a commit changes them, not every crate that depends on this
//! one.

use serde::Serialize;

/// A binary's build identity. Fields follow Kubernetes' `version.Info` where it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    /// The package version (Cargo's), without a leading `v`.
    pub version: &'static str,
    /// The full commit ID, or empty when the build's environment did not say.
    pub git_commit: &'static str,
    /// `clean` or `dirty` (uncommitted changes in the tree), empty when unknown.
    pub git_tree_state: &'static str,
    /// When the commit was made (RFC 3339), empty when unknown.
    pub build_date: &'static str,
}

/// How many characters of the commit ID the short forms show (as `git describe` does by default
/// in a large repository).
const SHORT_COMMIT: usize = 12;

impl BuildInfo {
    /// From the values the build's environment gave (`None` or empty: not given). A tree state
    /// other than `clean` and `dirty` is kept as given: it is the packager's word.
    pub fn new(
        version: &'static str,
        git_commit: Option<&'static str>,
        git_tree_state: Option<&'static str>,
        build_date: Option<&'static str>,
    ) -> Self {
        let given = |v: Option<&'static str>| v.map(str::trim).unwrap_or("");
        BuildInfo {
            version,
            git_commit: given(git_commit),
            git_tree_state: given(git_tree_state),
            build_date: given(build_date),
        }
    }

    /// The commit's first characters, or empty.
    pub fn short_commit(&self) -> &'static str {
        short(self.git_commit)
    }

    /// The long form `--version` prints after the program's name, e.g.
    /// `0.1.0 (commit 1a2b3c4d5e6f, clean tree, 2026-11-30T19:00:00Z)`.
    pub fn long_version(&self) -> String {
        describe(self.version, self.git_commit, self.git_tree_state, self.build_date)
    }

    /// The one-word form for a Node's `kubeletVersion` (`kubectl get nodes` VERSION): semver
    /// with the commit as build metadata, `v0.1.0+1a2b3c4d5e6f`, `.dirty` after it for a tree
    /// with uncommitted changes; `v0.1.0` when the commit is unknown.
    pub fn node_version(&self) -> String {
        match (self.short_commit(), self.git_tree_state) {
            ("", _) => format!("v{}", self.version),
            (c, "dirty") => format!("v{}+{c}.dirty", self.version),
            (c, _) => format!("v{}+{c}", self.version),
        }
    }

    /// The labels of a `*_build_info` series (value 1) on `/metrics`, named as
    /// `kubernetes_build_info` names them: a dashboard counts the builds a fleet runs by them.
    pub fn metric_labels(&self) -> [(&'static str, &'static str); 4] {
        [
            ("version", self.version),
            ("git_commit", self.git_commit),
            ("git_tree_state", self.git_tree_state),
            ("build_date", self.build_date),
        ]
    }
}

/// A build in [`BuildInfo::long_version`]'s words, from its parts (also another binary's, as
/// its `/version` gives them).
pub fn describe(version: &str, git_commit: &str, git_tree_state: &str, build_date: &str) -> String {
    if git_commit.is_empty() {
        return format!("{version} (source commit not recorded: built without scripts/build-env.sh)");
    }
    let mut parts = vec![format!("commit {}", short(git_commit))];
    if !git_tree_state.is_empty() {
        parts.push(format!("{git_tree_state} tree"));
    }
    if !build_date.is_empty() {
        parts.push(build_date.to_string());
    }
    format!("{version} ({})", parts.join(", "))
}

/// The first [`SHORT_COMMIT`] characters of a commit ID.
fn short(commit: &str) -> &str {
    commit.char_indices().nth(SHORT_COMMIT).map_or(commit, |(i, _)| &commit[..i])
}

/// The calling crate's [`BuildInfo`]: its Cargo version, and `ALOFT_GIT_COMMIT`,
/// `ALOFT_GIT_TREE_STATE` and `ALOFT_BUILD_DATE` as they were when it was compiled.
#[macro_export]
macro_rules! build_info {
    () => {
        $crate::build::BuildInfo::new(
            env!("CARGO_PKG_VERSION"),
            option_env!("ALOFT_GIT_COMMIT"),
            option_env!("ALOFT_GIT_TREE_STATE"),
            option_env!("ALOFT_BUILD_DATE"),
        )
    };
}

/// [`BuildInfo::long_version`] of the calling crate as a `&'static str`, for clap's
/// `#[command(version = aloft_api::long_version!())]`.
#[macro_export]
macro_rules! long_version {
    () => {{
        static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        V.get_or_init(|| $crate::build_info!().long_version()).as_str()
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b";

    #[test]
    fn a_recorded_commit_shows_in_every_form() {
        let b = BuildInfo::new("0.1.0", Some(COMMIT), Some("clean"), Some("2026-11-30T19:00:00Z"));
        assert_eq!(b.short_commit(), "1a2b3c4d5e6f");
        assert_eq!(b.long_version(), "0.1.0 (commit 1a2b3c4d5e6f, clean tree, 2026-11-30T19:00:00Z)");
        assert_eq!(b.node_version(), "v0.1.0+1a2b3c4d5e6f");
        let json = serde_json::to_value(&b).expect("json");
        assert_eq!(json["gitCommit"], COMMIT);
        assert_eq!(json["gitTreeState"], "clean");
        assert_eq!(json["buildDate"], "2026-11-30T19:00:00Z");
    }

    #[test]
    fn a_dirty_tree_is_said() {
        let b = BuildInfo::new("0.1.0", Some(COMMIT), Some("dirty"), None);
        assert_eq!(b.node_version(), "v0.1.0+1a2b3c4d5e6f.dirty");
        assert_eq!(b.long_version(), "0.1.0 (commit 1a2b3c4d5e6f, dirty tree)");
    }

    #[test]
    fn an_unrecorded_commit_is_said_not_guessed() {
        for commit in [None, Some(""), Some("  ")] {
            let b = BuildInfo::new("0.1.0", commit, Some("clean"), None);
            assert_eq!(b.git_commit, "");
            assert_eq!(b.short_commit(), "");
            assert_eq!(b.node_version(), "v0.1.0");
            assert!(b.long_version().starts_with("0.1.0 (source commit not recorded"), "{}", b.long_version());
        }
        let short = BuildInfo::new("0.1.0", Some("abc"), None, None);
        assert_eq!(short.short_commit(), "abc");
        assert_eq!(short.node_version(), "v0.1.0+abc");
    }

    #[test]
    fn the_macro_reads_the_compiling_environment() {
        let b = crate::build_info!();
        assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(b.git_commit, option_env!("ALOFT_GIT_COMMIT").unwrap_or("").trim());
    }
}
