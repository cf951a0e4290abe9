//! A bundle's dependencies, and the bundle of a catalog that OLM v0 would install to meet one.
//!
//! OLM's resolver adds a bundle's dependencies (`olm.package.required`, `olm.gvk.required`,
//! `olm.constraint`) to
//! the plan and gives each its own Subscription. aloft does the same in two steps: this module
//! says what is needed and which catalog bundle meets it, the coordinator creates the
//! Subscriptions and holds the dependent bundle back until they are installed. Among the
//! bundles that meet a dependency, OLM prefers (after the subscription's own catalog, the
//! caller's part) the package's default channel, then its other channels by name, and within
//! a channel the entry nearest the head: the same order a fresh install reads channels in.

use super::constraint::{of_package_in_range, Constraint};
use super::model::{Bundle, Catalog, Channel, Gvk, PROPERTY_CONSTRAINT};
use super::range::Range;

/// One dependency of a bundle, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Dependency {
    /// `olm.package.required`: that package, at a version in the range.
    Package { name: String, range: Range },
    /// `olm.gvk.required`: some installed bundle providing that API.
    Api(Gvk),
    /// An `olm.package.required` whose range does not read: nothing can meet it.
    Unreadable { name: String, range: String, error: String },
    /// `olm.constraint`: some bundle satisfying the rule.
    Constraint(Constraint),
    /// An `olm.constraint` that does not read (OLM fails the resolution on it): nothing can
    /// meet it.
    UnreadableConstraint { error: String },
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dependency::Package { name, range } => {
                write!(f, "package {name:?} in range {:?} (olm.package.required)", range.as_str())
            }
            Dependency::Api(g) => write!(f, "API {}/{} {} (olm.gvk.required)", g.group, g.version, g.kind),
            Dependency::Unreadable { name, range, error } => write!(
                f,
                "package {name:?} in range {range:?} (olm.package.required): the range does not read: {error}"
            ),
            Dependency::Constraint(c) => write!(f, "{c} ({PROPERTY_CONSTRAINT})"),
            Dependency::UnreadableConstraint { error } => {
                write!(f, "{PROPERTY_CONSTRAINT} that does not read: {error}")
            }
        }
    }
}

impl Dependency {
    /// Whether finding what meets it runs a CEL rule on each bundle looked at: the costly kind
    /// of dependency, which a resolver bounds.
    pub fn uses_cel(&self) -> bool {
        match self {
            Dependency::Constraint(c) => c.uses_cel(),
            _ => false,
        }
    }

    /// Whether `bundle` meets this dependency.
    pub fn met_by(&self, bundle: &Bundle) -> bool {
        match self {
            Dependency::Package { name, range } => of_package_in_range(bundle, name, range),
            Dependency::Api(gvk) => bundle.provided_gvks().contains(gvk),
            Dependency::Constraint(c) => c.met_by(bundle),
            Dependency::Unreadable { .. } | Dependency::UnreadableConstraint { .. } => false,
        }
    }

    /// Whether each of `bundles` meets this dependency, in their order: a constraint's CEL rules
    /// run once over them all ([`Constraint::met_by_each`]).
    pub fn met_by_each(&self, bundles: &[&Bundle]) -> Vec<bool> {
        match self {
            Dependency::Constraint(c) => c.met_by_each(bundles),
            _ => bundles.iter().map(|b| self.met_by(b)).collect(),
        }
    }

    /// The package a bundle meeting it must be of, when the dependency names one.
    pub fn package(&self) -> Option<&str> {
        match self {
            Dependency::Package { name, .. } | Dependency::Unreadable { name, .. } => Some(name),
            Dependency::Constraint(c) => c.rule.package(),
            Dependency::Api(_) | Dependency::UnreadableConstraint { .. } => None,
        }
    }
}

impl Bundle {
    /// The bundle's dependencies: its required packages (in property order), then its required
    /// APIs that it does not provide itself (a bundle meets its own `olm.gvk.required`), then
    /// its `olm.constraint`s that it does not satisfy itself (as OLM's solver, where the
    /// bundle is among the candidates of its own constraint).
    pub fn dependencies(&self) -> Vec<Dependency> {
        let mut out: Vec<Dependency> = self
            .required_packages()
            .into_iter()
            .map(|r| match Range::parse(&r.version_range) {
                Ok(range) => Dependency::Package { name: r.package_name, range },
                Err(e) => Dependency::Unreadable { name: r.package_name, range: r.version_range, error: e.to_string() },
            })
            .collect();
        let own = self.provided_gvks();
        out.extend(self.required_gvks().into_iter().filter(|g| !own.contains(g)).map(Dependency::Api));
        for p in self.properties_of(PROPERTY_CONSTRAINT) {
            match Constraint::parse(p.value.as_ref().unwrap_or(&serde_json::Value::Null)) {
                Ok(c) if c.met_by(self) => {}
                Ok(c) => out.push(Dependency::Constraint(c)),
                Err(error) => out.push(Dependency::UnreadableConstraint { error }),
            }
        }
        out
    }
}

/// A catalog bundle that meets a dependency, and the channel it was found in (what the
/// dependency's Subscription follows).
#[derive(Debug, Clone, Copy)]
pub struct Provider<'a> {
    pub channel: &'a Channel,
    pub bundle: &'a Bundle,
}

impl Catalog {
    /// Every bundle of this catalog that meets `dependency`, in the order OLM prefers them: in
    /// the required package (for an API: in each package, by name), the default channel first
    /// and then the others by name, within a channel the entry nearest its head first; a bundle
    /// in several channels comes once, in the first. Why all of them: when the preferred bundle
    /// has a dependency of its own that cannot be met, OLM's solver takes the next one. The
    /// dependency is evaluated on every bundle of the package (for an API, of the catalog) at
    /// once, so a CEL rule runs as one job. Channels that cannot be ordered (no single head, a
    /// cycle) are passed over: a validated catalog has none.
    pub fn providers_of<'c>(&'c self, dependency: &Dependency) -> impl Iterator<Item = Provider<'c>> + use<'c> {
        let packages: Vec<&str> = match dependency.package() {
            Some(p) => vec![p],
            None => {
                let mut names: Vec<&str> = self.packages.iter().map(|p| p.name.as_str()).collect();
                names.sort_unstable();
                names.dedup();
                names
            }
        };
        let mut seen = std::collections::HashSet::new();
        let mut ordered: Vec<Provider<'c>> = Vec::new();
        for package in packages {
            let Ok(channels) = self.selected_channels(package, None) else { continue };
            for channel in channels {
                let Ok(order) = channel.order() else { continue };
                for entry in order {
                    if let Some(bundle) = self.bundle(package, &entry.name) {
                        if seen.insert((bundle.package.as_str(), bundle.name.as_str())) {
                            ordered.push(Provider { channel, bundle });
                        }
                    }
                }
            }
        }
        let bundles: Vec<&Bundle> = ordered.iter().map(|p| p.bundle).collect();
        let met = dependency.met_by_each(&bundles);
        ordered.into_iter().zip(met).filter_map(|(p, met)| met.then_some(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    use crate::catalog::test_bundle as bundle;

    fn gvk(kind: &str) -> Value {
        json!({"group": "tuning.example.com", "version": "v1", "kind": kind})
    }

    fn catalog(blobs: Vec<Value>) -> Catalog {
        Catalog::from_blobs(blobs.into_iter().map(|b| ("catalog.json".to_string(), b))).expect("a valid catalog")
    }

    /// Two packages: base (stable: 1.1.0 -> 1.3.0 -> 2.0.0; fast, named after stable: 2.1.0;
    /// old: 1.1.0), whose 1.x provides Profile; and alt, which provides Profile too.
    fn two_packages() -> Catalog {
        let profile = json!([{"type": "olm.gvk", "value": gvk("Profile")}]);
        catalog(vec![
            json!({"schema": "olm.package", "name": "base", "defaultChannel": "stable"}),
            json!({"schema": "olm.channel", "package": "base", "name": "stable", "entries": [
                {"name": "base.v1.1.0"}, {"name": "base.v1.3.0", "replaces": "base.v1.1.0"},
                {"name": "base.v2.0.0", "replaces": "base.v1.3.0"}]}),
            json!({"schema": "olm.channel", "package": "base", "name": "a-fast", "entries": [{"name": "base.v2.1.0"}]}),
            json!({"schema": "olm.channel", "package": "base", "name": "old", "entries": [{"name": "base.v1.1.0"}]}),
            bundle("base", "1.1.0", profile.clone()),
            bundle("base", "1.3.0", profile.clone()),
            bundle("base", "2.0.0", json!([])),
            bundle("base", "2.1.0", json!([])),
            json!({"schema": "olm.package", "name": "alt", "defaultChannel": "stable"}),
            json!({"schema": "olm.channel", "package": "alt", "name": "stable", "entries": [{"name": "alt.v0.1.0"}]}),
            bundle("alt", "0.1.0", profile),
        ])
    }

    #[test]
    fn a_bundles_dependencies_read_as_it_declares_them() {
        let b: Bundle = serde_json::from_value(bundle(
            "a",
            "1.0.0",
            json!([
                {"type": "olm.package.required", "value": {"packageName": "base", "versionRange": ">=1.2.0 <2.0.0"}},
                {"type": "olm.package.required", "value": {"packageName": "other", "versionRange": "||"}},
                {"type": "olm.gvk.required", "value": gvk("Profile")},
                {"type": "olm.gvk.required", "value": gvk("Own")},
                {"type": "olm.gvk", "value": gvk("Own")},
            ]),
        ))
        .unwrap();
        let texts: Vec<String> = b.dependencies().iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 3, "its own API is no dependency: {texts:?}");
        assert_eq!(texts[0], r#"package "base" in range ">=1.2.0 <2.0.0" (olm.package.required)"#);
        assert!(
            texts[1].starts_with(r#"package "other" in range "||" (olm.package.required): the range does not read"#)
        );
        assert_eq!(texts[2], "API tuning.example.com/v1 Profile (olm.gvk.required)");
        let unreadable = &b.dependencies()[1];
        assert!(two_packages().bundles.iter().all(|x| !unreadable.met_by(x)), "an unreadable range meets nothing");
    }

    #[test]
    fn the_provider_is_the_entry_nearest_the_head_of_the_default_channel_first() {
        let c = two_packages();
        let package = |range: &str| Dependency::Package { name: "base".into(), range: Range::parse(range).unwrap() };
        let found = c.providers_of(&package(">=1.2.0 <2.0.0")).next().expect("1.3.0 is in range");
        assert_eq!((found.channel.name.as_str(), found.bundle.name.as_str()), ("stable", "base.v1.3.0"));
        // The head of the default channel beats a higher version in another channel.
        let found = c.providers_of(&package(">=2.0.0")).next().expect("2.x is in range");
        assert_eq!((found.channel.name.as_str(), found.bundle.name.as_str()), ("stable", "base.v2.0.0"));
        // Only another channel has it.
        let found = c.providers_of(&package(">=2.1.0")).next().expect("2.1.0 is in range");
        assert_eq!((found.channel.name.as_str(), found.bundle.name.as_str()), ("a-fast", "base.v2.1.0"));
        assert!(c.providers_of(&package(">=3.0.0")).next().is_none(), "nothing in range");
        let missing = Dependency::Package { name: "nope".into(), range: Range::parse(">=0.0.0").unwrap() };
        assert!(c.providers_of(&missing).next().is_none(), "no such package");
    }

    #[test]
    fn every_provider_comes_once_in_the_order_olm_prefers() {
        let c = two_packages();
        let package = Dependency::Package { name: "base".into(), range: Range::parse(">=1.0.0").unwrap() };
        let found: Vec<(&str, &str)> =
            c.providers_of(&package).map(|p| (p.channel.name.as_str(), p.bundle.name.as_str())).collect();
        // The default channel from its head down, then the others by name; 1.1.0, also in
        // "old", comes once.
        assert_eq!(
            found,
            [
                ("stable", "base.v2.0.0"),
                ("stable", "base.v1.3.0"),
                ("stable", "base.v1.1.0"),
                ("a-fast", "base.v2.1.0")
            ]
        );
        let api = Dependency::Api(serde_json::from_value(gvk("Profile")).unwrap());
        let found: Vec<&str> = c.providers_of(&api).map(|p| p.bundle.name.as_str()).collect();
        assert_eq!(found, ["alt.v0.1.0", "base.v1.3.0", "base.v1.1.0"], "packages by name, each as above");
    }

    #[test]
    fn an_api_is_provided_by_the_first_package_by_name_that_has_it() {
        let c = two_packages();
        let found = c.providers_of(&Dependency::Api(serde_json::from_value(gvk("Profile")).unwrap())).next().unwrap();
        assert_eq!(found.bundle.name, "alt.v0.1.0", "alt before base");
        assert!(c.providers_of(&Dependency::Api(serde_json::from_value(gvk("Nobody")).unwrap())).next().is_none());
    }

    #[test]
    fn constraints_are_dependencies_and_find_their_bundle() {
        let b: Bundle = serde_json::from_value(bundle(
            "a",
            "1.0.0",
            json!([
                {"type": "olm.constraint", "value": {"failureMessage": "a needs base 1.x with Profile",
                    "all": {"constraints": [
                        {"package": {"packageName": "base", "versionRange": ">=1.0.0"}},
                        {"gvk": gvk("Profile")}]}}},
                {"type": "olm.constraint", "value": {"cel": {"rule": "properties.exists(p, p.type == 'olm.package' && p.value.packageName == 'a')"}}},
                {"type": "olm.constraint", "value": {"any": {"constraints": [{"gvk": gvk("Profile")}]}}},
                {"type": "olm.constraint", "value": {"gvk": gvk("Profile"), "extra": 1}},
            ]),
        ))
        .unwrap();
        let deps = b.dependencies();
        let texts: Vec<String> = deps.iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 3, "the CEL rule a meets itself is no dependency: {texts:?}");
        assert_eq!(
            texts[0],
            r#""a needs base 1.x with Profile" (all of [package "base" in range ">=1.0.0", API tuning.example.com/v1 Profile]) (olm.constraint)"#
        );
        assert_eq!(texts[1], "any of [API tuning.example.com/v1 Profile] (olm.constraint)");
        assert!(texts[2].starts_with(r#"olm.constraint that does not read: the constraint: unknown field "extra""#));
        let c = two_packages();
        // base's head (2.0.0) provides no Profile: the entry nearest it that does, of base only.
        let found = c.providers_of(&deps[0]).next().expect("base 1.3.0 has both");
        assert_eq!((found.channel.name.as_str(), found.bundle.name.as_str()), ("stable", "base.v1.3.0"));
        // No package named: every package, by name.
        assert_eq!(c.providers_of(&deps[1]).next().map(|p| p.bundle.name.as_str()), Some("alt.v0.1.0"));
        assert!(c.providers_of(&deps[2]).next().is_none(), "an unreadable constraint is met by nothing");
        assert!(c.bundles.iter().all(|x| !deps[2].met_by(x)));
    }
}
