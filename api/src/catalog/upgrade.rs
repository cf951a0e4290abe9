//! What OLM v0 installs from a catalog, and what it moves an installed bundle to.
//!
//! A Subscription in aloft must land where it would land on OpenShift, so this follows OLM v0's
//! resolver rather than a reading of the docs: a channel is ordered from its head along
//! `replaces` (entries some entry skips are left out of that order); a fresh install takes the
//! first entry of that order (or `startingCSV`); an upgrade takes, in that order, the first
//! entry that replaces or skips the installed bundle or whose skipRange holds its version. With
//! only `replaces` that is one hop at a time; a head that skips or skipRange-covers the
//! installed bundle is reached in one. No channel given means every channel, the default one
//! first and the others by name, as OLM's resolver sorts them. Dependencies are
//! [`super::dependencies`]'s.

use super::model::*;
use super::range::Range;
use super::validate::{head_of, HeadError};
use crate::json_words::shown;
use semver::Version;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Why nothing could be chosen, in the words of OLM's resolver (which adds "referenced by
/// subscription X"; the caller knows the subscription).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no operators found in package {package} in the catalog")]
    NoPackage { package: String },
    #[error("no operators found in channel {channel} of package {package} in the catalog")]
    NoChannel { package: String, channel: String },
    #[error("no operators found with name {name} in channel {channel} of package {package} in the catalog")]
    NoStartingCsv { package: String, channel: String, name: String },
    #[error(
        "no channel heads (entries not replaced by another entry) found in channel {channel:?} of package {package:?}"
    )]
    NoChannelHead { package: String, channel: String },
    #[error("a cycle exists in the chain of replacement beginning with {head:?} in channel {channel:?} of package {package:?}")]
    Cycle { package: String, channel: String, head: String },
    #[error(
        "a unique replacement chain within a channel is required to determine the relative order between channel \
         entries, but {} replacement chains were found in channel {channel:?} of package {package:?}: {}",
        chains.len(),
        chains.join(", ")
    )]
    ManyChains { package: String, channel: String, chains: Vec<String> },
}

impl Channel {
    /// The channel's entries by name (the first of a name, should the channel repeat one).
    fn entry_map(&self) -> BTreeMap<&str, &ChannelEntry> {
        let mut map = BTreeMap::new();
        for e in &self.entries {
            map.entry(e.name.as_str()).or_insert(e);
        }
        map
    }

    pub fn entry(&self, name: &str) -> Option<&ChannelEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// opm's channel head (what PackageManifests show as the channel's current CSV): the one
    /// entry that no other entry replaces or skips.
    pub fn head(&self) -> Result<&ChannelEntry, HeadError> {
        head_of(&self.entry_map())
    }

    /// The channel as OLM's resolver orders it, head first: from each entry nothing replaces or
    /// skips, follow `replaces` within the channel, leaving out entries that some entry skips
    /// (they are never candidates). More than one such chain, or a cycle, is an error, as OLM
    /// cannot rank the entries then.
    pub fn order(&self) -> Result<Vec<&ChannelEntry>, ResolveError> {
        let by_name = self.entry_map();
        let entries: Vec<&ChannelEntry> = {
            let mut seen = HashSet::new();
            self.entries.iter().filter(|e| seen.insert(e.name.as_str())).collect()
        };
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut replaced: HashSet<&str> = HashSet::new();
        let mut replaces: HashMap<&str, &ChannelEntry> = HashMap::new();
        let mut skipped: HashSet<&str> = HashSet::new();
        for e in &entries {
            if let Some(r) = by_name.get(e.replaces.as_str()).filter(|_| !e.replaces.is_empty()) {
                replaced.insert(&r.name);
                replaces.insert(&e.name, r);
            }
            for s in &e.skips {
                if by_name.contains_key(s.as_str()) {
                    replaced.insert(s);
                    skipped.insert(s);
                }
            }
        }
        let heads: Vec<&ChannelEntry> =
            entries.iter().copied().filter(|e| !replaced.contains(e.name.as_str())).collect();
        let (package, channel) = (shown(&self.package), shown(&self.name));
        if heads.is_empty() {
            return Err(ResolveError::NoChannelHead { package, channel });
        }
        let mut chains = Vec::with_capacity(heads.len());
        for head in &heads {
            let mut chain = Vec::new();
            let mut visited = HashSet::new();
            let mut cur = *head;
            loop {
                visited.insert(cur.name.as_str());
                if !skipped.contains(cur.name.as_str()) {
                    chain.push(cur);
                }
                let Some(next) = replaces.get(cur.name.as_str()) else { break };
                if visited.contains(next.name.as_str()) {
                    return Err(ResolveError::Cycle { package, channel, head: shown(&head.name) });
                }
                cur = next;
            }
            chains.push(chain);
        }
        if chains.len() > 1 {
            let chains = chains
                .iter()
                .map(|c| match &c[..] {
                    [] => "[]".to_string(),
                    [one] => shown(&one.name),
                    [first, .., last] => format!("{}...{}", shown(&first.name), shown(&last.name)),
                })
                .collect();
            return Err(ResolveError::ManyChains { package, channel, chains });
        }
        Ok(chains.swap_remove(0))
    }
}

/// What a PackageManifest shows of a package: its default channel and each channel's head.
#[derive(Debug, Clone, PartialEq)]
pub struct PackageSummary {
    pub name: String,
    pub default_channel: String,
    /// By name; a channel without a single head (only in a catalog that fails validation) is
    /// left out.
    pub channels: Vec<ChannelSummary>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChannelSummary {
    pub name: String,
    /// The head's bundle name (PackageManifest's `currentCSV`).
    pub head: String,
    pub version: Option<Version>,
    /// From the head's `olm.csv.metadata`, else from its inline CSV.
    pub display_name: Option<String>,
    pub description: Option<String>,
    /// The head's `olm.csv.metadata`, whole, for the rest of `currentCSVDesc`.
    pub csv_metadata: Option<Value>,
}

impl Catalog {
    /// The bundle a new Subscription installs: with `starting_csv`, that entry (searched in the
    /// channels OLM would search); else the head of the channel (of the default channel when
    /// `channel` is `None`). The first of [`Catalog::install_candidates`].
    pub fn install_target(
        &self,
        package: &str,
        channel: Option<&str>,
        starting_csv: Option<&str>,
    ) -> Result<&Bundle, ResolveError> {
        let candidates = self.install_candidates(package, channel, starting_csv)?;
        candidates.into_iter().next().ok_or_else(|| ResolveError::NoChannel {
            package: shown(package),
            channel: shown(channel.unwrap_or_default()),
        })
    }

    /// Every bundle a new Subscription can install, the preferred first, as OLM's resolver
    /// lists them for its solver: with `starting_csv`, that entry alone; else each selected
    /// channel's entries in its order (head first, entries some entry skips left out), the
    /// default channel first when `channel` is `None`, each bundle once. OLM's solver takes the
    /// first whose dependencies can be met, so a head that needs what no catalog has leaves the
    /// Subscription on the newest entry that can be installed.
    pub fn install_candidates(
        &self,
        package: &str,
        channel: Option<&str>,
        starting_csv: Option<&str>,
    ) -> Result<Vec<&Bundle>, ResolveError> {
        let channels = self.selected_channels(package, channel)?;
        if let Some(name) = starting_csv {
            for c in &channels {
                if c.entry(name).is_some() {
                    if let Some(b) = self.bundle(package, name) {
                        return Ok(vec![b]);
                    }
                }
            }
            return Err(ResolveError::NoStartingCsv {
                package: shown(package),
                channel: shown(channel.unwrap_or_default()),
                name: shown(name),
            });
        }
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for order in orders(&channels)? {
            for e in order {
                if seen.insert(e.name.as_str()) {
                    found.extend(self.bundle(package, &e.name));
                }
            }
        }
        if found.is_empty() {
            return Err(ResolveError::NoChannel {
                package: shown(package),
                channel: shown(channel.unwrap_or_default()),
            });
        }
        Ok(found)
    }

    /// The bundle an installed one moves to next; `Ok(None)` when nothing replaces, skips or
    /// skipRange-covers it (the Subscription is at the latest it knows). `installed_version`
    /// (the CSV's `spec.version`) is needed for skipRanges only.
    pub fn upgrade_target(
        &self,
        package: &str,
        channel: Option<&str>,
        installed_name: &str,
        installed_version: Option<&Version>,
    ) -> Result<Option<&Bundle>, ResolveError> {
        Ok(self.upgrade_candidates(package, channel, installed_name, installed_version)?.into_iter().next())
    }

    /// Every bundle an installed one can move to, the preferred first: the entries of the
    /// first channel (in OLM's order) that replace, skip or skipRange-cover it, nearest the
    /// head first, down to the installed entry itself. OLM's solver takes the first that the
    /// namespace's other operators allow; [`Catalog::upgrade_target`] is the first.
    pub fn upgrade_candidates(
        &self,
        package: &str,
        channel: Option<&str>,
        installed_name: &str,
        installed_version: Option<&Version>,
    ) -> Result<Vec<&Bundle>, ResolveError> {
        let channels = self.selected_channels(package, channel)?;
        for order in orders(&channels)? {
            let mut found = Vec::new();
            for e in order {
                let covers = e.replaces == installed_name
                    || e.skips.iter().any(|s| s == installed_name)
                    || installed_version.is_some_and(|v| {
                        !e.skip_range.is_empty() && Range::parse(&e.skip_range).is_ok_and(|r| r.contains(v))
                    });
                if !covers {
                    continue;
                }
                if e.name == installed_name {
                    return Ok(found);
                }
                found.extend(self.bundle(package, &e.name));
            }
            if !found.is_empty() {
                return Ok(found);
            }
        }
        Ok(Vec::new())
    }

    /// The deprecation messages that apply to a subscription on `channel` with `bundle`
    /// installed (or chosen), package level first, then channel, then bundle: OLM's
    /// PackageDeprecated, ChannelDeprecated and BundleDeprecated conditions. An empty `channel`
    /// or `bundle` matches nothing (OLM shows no channel deprecation for a subscription that
    /// names no channel).
    pub fn deprecation_of(&self, package: &str, channel: &str, bundle: &str) -> Vec<&DeprecationEntry> {
        let Some(d) = self.deprecations_of(package) else { return Vec::new() };
        let mut out = Vec::new();
        for (schema, name) in [(SCHEMA_PACKAGE, ""), (SCHEMA_CHANNEL, channel), (SCHEMA_BUNDLE, bundle)] {
            if schema != SCHEMA_PACKAGE && name.is_empty() {
                continue;
            }
            out.extend(d.entries.iter().filter(|e| e.reference.schema == schema && e.reference.name == name));
        }
        out
    }

    /// Each package (in catalog order) with its default channel and its channels' heads: what a
    /// PackageManifest list is built from.
    pub fn packages(&self) -> Vec<PackageSummary> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for p in self.packages.iter().filter(|p| seen.insert(p.name.as_str())) {
            let mut channels: BTreeMap<&str, &Channel> = BTreeMap::new();
            for c in self.channels_of(&p.name) {
                channels.entry(c.name.as_str()).or_insert(c);
            }
            let channels = channels
                .values()
                .filter_map(|c| {
                    let head = c.head().ok()?;
                    let bundle = self.bundle(&p.name, &head.name);
                    Some(ChannelSummary {
                        name: c.name.clone(),
                        head: head.name.clone(),
                        version: bundle.and_then(Bundle::version),
                        display_name: bundle.and_then(|b| b.csv_field("displayName")),
                        description: bundle.and_then(|b| b.csv_field("description")),
                        csv_metadata: bundle.and_then(Bundle::csv_metadata).cloned(),
                    })
                })
                .collect();
            out.push(PackageSummary { name: p.name.clone(), default_channel: p.default_channel.clone(), channels });
        }
        out
    }

    /// The channels a subscription looks in, in the order OLM's resolver ranks them; errors
    /// when the package or channel has no entries at all.
    pub(super) fn selected_channels(
        &self,
        package: &str,
        channel: Option<&str>,
    ) -> Result<Vec<&Channel>, ResolveError> {
        let has_entries = |c: &&Channel| c.entries.iter().any(|e| self.bundle(package, &e.name).is_some());
        let mut all: Vec<&Channel> = {
            let mut seen = HashSet::new();
            self.channels_of(package).filter(|c| seen.insert(c.name.as_str())).filter(has_entries).collect()
        };
        if all.is_empty() {
            return Err(ResolveError::NoPackage { package: shown(package) });
        }
        match channel {
            Some(name) => {
                all.retain(|c| c.name == name);
                if all.is_empty() {
                    return Err(ResolveError::NoChannel { package: shown(package), channel: shown(name) });
                }
            }
            None => {
                let default = self.default_channel(package).unwrap_or_default();
                all.sort_by(|a, b| (b.name == default).cmp(&(a.name == default)).then_with(|| a.name.cmp(&b.name)));
            }
        }
        Ok(all)
    }
}

/// Every channel's order, or the first channel that cannot be ordered (OLM sorts them all
/// before it picks).
fn orders<'a>(channels: &[&'a Channel]) -> Result<Vec<Vec<&'a ChannelEntry>>, ResolveError> {
    channels.iter().map(|c| c.order()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog(channels: Value) -> Catalog {
        let mut blobs = vec![json!({"schema": "olm.package", "name": "p", "defaultChannel": "stable"})];
        let mut names = std::collections::BTreeMap::new();
        for c in channels.as_array().unwrap() {
            let mut c = c.clone();
            c["schema"] = json!("olm.channel");
            c["package"] = json!("p");
            for e in c["entries"].as_array().unwrap() {
                let name = e["name"].as_str().unwrap().to_string();
                let version = name.trim_start_matches("p.v").to_string();
                names.insert(name, version);
            }
            blobs.push(c);
        }
        for (name, version) in names {
            blobs.push(json!({"schema": "olm.bundle", "package": "p", "name": name, "image": format!("example.com/p:{version}"),
                "properties": [{"type": "olm.package", "value": {"packageName": "p", "version": version}}]}));
        }
        Catalog::decode(blobs.into_iter().enumerate().map(|(i, b)| (format!("t#{i}"), b))).unwrap()
    }

    fn names(entries: &[&ChannelEntry]) -> Vec<String> {
        entries.iter().map(|e| e.name.clone()).collect()
    }

    fn up(c: &Catalog, channel: Option<&str>, installed: &str) -> Option<String> {
        let version = Version::parse(installed.trim_start_matches("p.v")).ok();
        c.upgrade_target("p", channel, installed, version.as_ref()).unwrap().map(|b| b.name.clone())
    }

    #[test]
    fn replaces_only_moves_one_hop_at_a_time() {
        let c = catalog(json!([{"name": "stable", "entries": [
            {"name": "p.v1.0.0"},
            {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
            {"name": "p.v1.2.0", "replaces": "p.v1.1.0"},
        ]}]));
        c.validate().unwrap();
        let ch = c.channel("p", "stable").unwrap();
        assert_eq!(ch.head().unwrap().name, "p.v1.2.0");
        assert_eq!(names(&ch.order().unwrap()), ["p.v1.2.0", "p.v1.1.0", "p.v1.0.0"]);
        assert_eq!(c.install_target("p", None, None).unwrap().name, "p.v1.2.0");
        assert_eq!(c.install_target("p", Some("stable"), Some("p.v1.0.0")).unwrap().name, "p.v1.0.0");
        assert_eq!(up(&c, Some("stable"), "p.v1.0.0").as_deref(), Some("p.v1.1.0"));
        assert_eq!(up(&c, Some("stable"), "p.v1.1.0").as_deref(), Some("p.v1.2.0"));
        assert_eq!(up(&c, Some("stable"), "p.v1.2.0"), None);
        assert_eq!(up(&c, None, "p.v0.9.0"), None);
    }

    #[test]
    fn a_head_that_skips_is_reached_at_once() {
        let c = catalog(json!([{"name": "stable", "entries": [
            {"name": "p.v1.0.0"},
            {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
            {"name": "p.v1.2.0", "replaces": "p.v1.0.0", "skips": ["p.v1.1.0"]},
            {"name": "p.v1.3.0", "replaces": "p.v1.2.0", "skipRange": ">=1.0.0 <1.3.0"},
        ]}]));
        c.validate().unwrap();
        // The skipped p.v1.1.0 is out of OLM's order: never a candidate, even for what it replaces.
        assert_eq!(names(&c.channel("p", "stable").unwrap().order().unwrap()), ["p.v1.3.0", "p.v1.2.0", "p.v1.0.0"]);
        let fresh: Vec<&str> = c.install_candidates("p", None, None).unwrap().iter().map(|b| b.name.as_str()).collect();
        assert_eq!(fresh, ["p.v1.3.0", "p.v1.2.0", "p.v1.0.0"], "nor for a new Subscription");
        for from in ["p.v1.0.0", "p.v1.1.0", "p.v1.2.0", "p.v1.0.5"] {
            assert_eq!(up(&c, None, from).as_deref(), Some("p.v1.3.0"), "{from}");
        }
        assert_eq!(up(&c, None, "p.v0.9.0"), None);
        // Without a version, a skipRange cannot hold it.
        assert_eq!(c.upgrade_target("p", None, "p.v1.0.5", None).unwrap(), None);
        // A pre-release of the head's version is below it, so the range holds it (blang).
        assert_eq!(up(&c, None, "p.v1.3.0-rc.1").as_deref(), Some("p.v1.3.0"));
        // Every bundle that can follow, the preferred first: the head, then what it replaces.
        let all = |from: &str| {
            let v = Version::parse(from.trim_start_matches("p.v")).ok();
            c.upgrade_candidates("p", None, from, v.as_ref())
                .unwrap()
                .iter()
                .map(|b| b.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("p.v1.0.0"), ["p.v1.3.0", "p.v1.2.0"]);
        assert_eq!(all("p.v1.2.0"), ["p.v1.3.0"]);
        assert_eq!(all("p.v1.3.0"), Vec::<String>::new());
    }

    #[test]
    fn channels_default_first_then_by_name() {
        let c = catalog(json!([
            {"name": "alpha", "entries": [{"name": "p.v1.0.0"}, {"name": "p.v2.0.0-alpha", "replaces": "p.v1.0.0"}]},
            {"name": "stable", "entries": [{"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"}]},
            {"name": "beta", "entries": [{"name": "p.v1.0.0"}, {"name": "p.v1.5.0", "replaces": "p.v1.0.0"}]},
        ]));
        c.validate().unwrap();
        assert_eq!(c.install_target("p", None, None).unwrap().name, "p.v1.1.0");
        assert_eq!(c.install_target("p", Some("alpha"), None).unwrap().name, "p.v2.0.0-alpha");
        assert_eq!(up(&c, None, "p.v1.0.0").as_deref(), Some("p.v1.1.0"));
        assert_eq!(up(&c, Some("beta"), "p.v1.0.0").as_deref(), Some("p.v1.5.0"));
        // A starting CSV only in another channel is found when no channel is named.
        assert_eq!(c.install_target("p", None, Some("p.v1.5.0")).unwrap().name, "p.v1.5.0");
        // What a new Subscription can install, the preferred first: the default channel's
        // entries, then the other channels' by name, each bundle once; a named channel's alone.
        let fresh = |channel: Option<&str>, starting: Option<&str>| -> Vec<String> {
            c.install_candidates("p", channel, starting).unwrap().iter().map(|b| b.name.clone()).collect()
        };
        assert_eq!(fresh(None, None), ["p.v1.1.0", "p.v1.0.0", "p.v2.0.0-alpha", "p.v1.5.0"]);
        assert_eq!(fresh(Some("beta"), None), ["p.v1.5.0", "p.v1.0.0"]);
        assert_eq!(fresh(Some("beta"), Some("p.v1.0.0")), ["p.v1.0.0"]);
        // Switching channel: only an entry of the new channel that replaces the installed one.
        assert_eq!(up(&c, Some("alpha"), "p.v1.1.0"), None);
        let summary = c.packages();
        assert_eq!(summary.len(), 1);
        assert_eq!(summary[0].default_channel, "stable");
        let heads: Vec<(&str, &str)> = summary[0].channels.iter().map(|c| (c.name.as_str(), c.head.as_str())).collect();
        assert_eq!(heads, [("alpha", "p.v2.0.0-alpha"), ("beta", "p.v1.5.0"), ("stable", "p.v1.1.0")]);
        assert_eq!(summary[0].channels[1].version, Some(Version::new(1, 5, 0)));
    }

    #[test]
    fn resolution_errors_in_olms_words() {
        let c = catalog(json!([{"name": "stable", "entries": [{"name": "p.v1.0.0"}]}]));
        let e = |r: Result<&Bundle, ResolveError>| r.unwrap_err().to_string();
        assert_eq!(e(c.install_target("q", None, None)), "no operators found in package q in the catalog");
        assert_eq!(
            e(c.install_target("p", Some("fast"), None)),
            "no operators found in channel fast of package p in the catalog"
        );
        assert_eq!(
            e(c.install_target("p", Some("stable"), Some("p.v0.1.0"))),
            "no operators found with name p.v0.1.0 in channel stable of package p in the catalog"
        );
        assert_eq!(
            c.upgrade_target("q", None, "x", None).unwrap_err(),
            ResolveError::NoPackage { package: "q".into() }
        );

        let two = catalog(json!([{"name": "stable", "entries": [
            {"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"}, {"name": "p.v2.0.0"}]}]));
        assert_eq!(
            two.channel("p", "stable").unwrap().head().unwrap_err().to_string(),
            "multiple channel heads found in graph: p.v1.1.0, p.v2.0.0"
        );
        assert_eq!(
            e(two.install_target("p", None, None)),
            "a unique replacement chain within a channel is required to determine the relative order between channel \
             entries, but 2 replacement chains were found in channel \"stable\" of package \"p\": \
             p.v1.1.0...p.v1.0.0, p.v2.0.0"
        );
        let ring = catalog(json!([{"name": "stable", "entries": [
            {"name": "p.v1.0.0", "replaces": "p.v1.1.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"}]}]));
        assert_eq!(ring.channel("p", "stable").unwrap().head().unwrap_err(), HeadError::NoHead);
        assert_eq!(
            e(ring.install_target("p", None, None)),
            "no channel heads (entries not replaced by another entry) found in channel \"stable\" of package \"p\""
        );
        let tail = catalog(json!([{"name": "stable", "entries": [
            {"name": "p.v1.2.0", "replaces": "p.v1.1.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
            {"name": "p.v1.0.0", "replaces": "p.v1.1.0"}]}]));
        assert_eq!(
            e(tail.install_target("p", None, None)),
            "a cycle exists in the chain of replacement beginning with \"p.v1.2.0\" in channel \"stable\" of package \"p\""
        );
    }

    #[test]
    fn deprecations_by_level() {
        let mut c = catalog(json!([{"name": "stable", "entries": [{"name": "p.v1.0.0"}]}]));
        let d = Catalog::decode([(
            "d#1".to_string(),
            json!({"schema": "olm.deprecations", "package": "p", "entries": [
                {"reference": {"schema": "olm.bundle", "name": "p.v1.0.0"}, "message": "bundle"},
                {"reference": {"schema": "olm.channel", "name": "stable"}, "message": "channel"},
                {"reference": {"schema": "olm.package"}, "message": "package"},
            ]}),
        )])
        .unwrap();
        c.deprecations = d.deprecations;
        c.validate().unwrap();
        let messages = |ch: &str, b: &str| -> Vec<String> {
            c.deprecation_of("p", ch, b).iter().map(|e| e.message.clone()).collect()
        };
        assert_eq!(messages("stable", "p.v1.0.0"), ["package", "channel", "bundle"]);
        assert_eq!(messages("", "p.v1.0.0"), ["package", "bundle"]);
        assert_eq!(messages("fast", ""), ["package"]);
        assert!(c.deprecation_of("q", "stable", "p.v1.0.0").is_empty());
    }
}
