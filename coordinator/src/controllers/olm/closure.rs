//! The bundles a bundle's dependencies pull in, all the way down, chosen as OLM's resolver
//! chooses them.
//!
//! Why not one level: a dependency's bundle may need operators of its own. OLM's solver
//! resolves the whole chain at once, so a chain that cannot be completed fails the dependent's
//! resolution with nothing installed, and where the preferred bundle of a dependency needs
//! something no catalog has, it takes the next bundle that meets the dependency and whose own
//! needs can be met. Looking one level down, aloft created the first dependency's Subscription,
//! that Subscription then failed, and the dependent waited on it for ever.
//!
//! When two bundles of a chain need one package in ranges the bundle chosen first for it does
//! not both meet, it looks again for one that meets both, as OLM's solver does
//! ([`Resolver::ways`]). A dependency cycle through the bundle being resolved (it needs a
//! bundle that needs it back) is planned: aloft installs a dependency before what needs it,
//! except where it needs that bundle back ([`Way::Root`], [`Planned::needs_root`]); a cycle
//! below it (two of its dependencies that need each other) is planned too ([`Way::Chain`]),
//! their Subscriptions then installing without waiting for each other. What aloft does not do
//! that OLM's solver does: choose between the candidates of several Subscriptions together. As
//! OLM's
//! solver, it takes no bundle that provides an API an operator of the namespace provides
//! already, or another bundle of the chain does: a namespace has one provider of an API.

use super::catalogs::Snapshot;
use aloft_api::catalog::{Bundle, Catalog, Dependency, Gvk, Provider};
use aloft_api::meta::find_condition;
use aloft_api::olm::{self, Subscription};
use std::collections::HashMap;

/// How deep a chain of dependencies may go (a bundle's dependency's dependency's ...): far
/// beyond any real catalog's, and a bound on what a hostile catalog can make one resolution do.
pub const MAX_DEPTH: usize = 16;

/// How many candidate bundles one resolution may try before it gives up: each try reads the
/// candidate's dependencies (and may run its CEL rules), so a catalog whose chains branch
/// everywhere cannot keep the OLM controller busy.
pub const MAX_TRIES: usize = 512;

/// One dependency's way to be met.
#[derive(Debug)]
pub enum Way {
    /// A Subscription of the namespace that still moves towards it.
    Subscribed { name: String, detail: String },
    /// A Subscription of the namespace that settled on a bundle that does not meet it.
    Stuck { name: String, package: String, detail: String },
    /// A bundle to subscribe to: an index into [`Resolver::planned`].
    New(usize),
    /// The bundle being resolved meets it: a bundle of the chain needs the one that needs it
    /// (a cycle through it). OLM installs a cycle's bundles in one plan; aloft installs the
    /// bundle being resolved without waiting for the ones of the cycle.
    Root,
    /// A bundle of the chain being planned, above this one, meets it: a cycle below the bundle
    /// being resolved. Their Subscriptions are created together; each installs without waiting
    /// for the other once it sees the other wait for it.
    Chain(String),
    /// Nothing in the catalogs searched provides it.
    Missing,
    /// Finding what provides it would take the resolution past [`MAX_CEL_EVALUATIONS`].
    TooCostly,
    /// Bundles provide it, but none of them can be installed: why the first (the one OLM
    /// prefers) cannot, and how many others were tried.
    Unmet { first: String, why: String, others: usize },
}

/// A Subscription to create for a bundle the chain needs.
#[derive(Debug)]
pub struct Planned<'a> {
    /// (namespace, name) of its CatalogSource.
    pub catalog: &'a (String, String),
    pub channel: &'a str,
    pub bundle: &'a Bundle,
    /// The name OLM gives its Subscription.
    pub name: String,
    /// The Subscription and bundle that need it (for its `aloft.dev/requiredBy` annotation and
    /// the Event): the dependent's, or another planned one's.
    pub needed_by: (String, String),
    /// What of `needed_by`'s bundle it meets, as the messages name dependencies.
    pub meets: Vec<String>,
    /// Whether it needs, itself or through what it needs, the bundle being resolved: a cycle,
    /// whose bundles must not wait for each other.
    pub needs_root: bool,
}

/// A bundle that meets a dependency, and the (namespace, name) of the CatalogSource it is in.
type Candidate<'a> = (&'a (String, String), Provider<'a>);

/// How many CEL evaluations (a rule on one bundle) the resolutions sharing one [`Found`] may
/// run in all: finding what meets a CEL rule runs it on every bundle of the catalogs searched,
/// ~25 µs each on this project's 2-core machine (a scan is one job on the CEL thread), so a
/// catalog whose channel entries each need a rule of their own could otherwise keep the OLM
/// controller busy for seconds a pass. 8,192 is ~0.2 s there (`bench olm`), and several scans
/// of a catalog of a thousand bundles; one scan of catalogs larger than that is always allowed.
pub const MAX_CEL_EVALUATIONS: usize = 8192;

/// Each dependency's candidates, by its text: found once and shared by every resolution that
/// searches the same catalogs in the same order (the bundles one Subscription tries in turn), as
/// finding them may run a CEL rule over every bundle of a catalog; and the CEL evaluations
/// spent on finding them.
#[derive(Default)]
pub struct Found<'a> {
    candidates: HashMap<String, Vec<Candidate<'a>>>,
    cel_evaluations: usize,
}

/// One resolution of a bundle's unmet dependencies, transitively.
pub struct Resolver<'a> {
    installed: &'a [Bundle],
    others: &'a [Subscription],
    catalogs: &'a Snapshot,
    searched: &'a [(&'a (String, String), &'a Catalog)],
    /// The Subscription and bundle being resolved.
    root: (String, String),
    root_package: String,
    /// The bundle being resolved, which meets a dependency of the chain that needs it back.
    root_bundle: Bundle,
    /// The APIs the bundle being resolved provides: no bundle it pulls in may provide one too.
    root_apis: Vec<Gvk>,
    /// Dependency-first: a planned bundle comes after everything it needs.
    pub planned: Vec<Planned<'a>>,
    tries: usize,
    /// Each dependency's candidates, found once: a search that backtracks meets the same
    /// dependencies again (see [`Found`]).
    found: Found<'a>,
    /// What a bundle of a package must also meet, learned from earlier rounds (see
    /// [`Resolver::ways`]): the dependency of one bundle of the chain that the bundle chosen
    /// for another's dependency on the same package did not meet.
    also: Vec<Dependency>,
    /// Such dependencies met in this round, for the next.
    learned: Vec<Dependency>,
    /// The bundles being planned, from the bundle being resolved's dependency down to the one
    /// whose dependencies are being looked for (the bundles of `path` but the first).
    chain: Vec<&'a Bundle>,
}

/// How many times [`Resolver::ways`] starts over with what it learned: each round learns at
/// least one more dependency a package must meet, and real chains need one or two.
pub const MAX_ROUNDS: usize = 4;

impl Way {
    /// Whether the dependency is met (or will be) this way.
    pub fn settles(&self) -> bool {
        matches!(self, Way::Subscribed { .. } | Way::New(_) | Way::Root | Way::Chain(_))
    }
}

impl<'a> Resolver<'a> {
    /// A resolution of `bundle`, which Subscription `sub` would install, in a namespace with
    /// `installed` operators and `others` Subscriptions (`sub` among them or not), looking in
    /// `searched` (in order); `found`, what earlier resolutions over the same `searched` found
    /// (see [`Resolver::found`]).
    pub fn new(
        installed: &'a [Bundle],
        others: &'a [Subscription],
        catalogs: &'a Snapshot,
        searched: &'a [(&'a (String, String), &'a Catalog)],
        (sub, bundle): (&str, &Bundle),
        found: Found<'a>,
    ) -> Self {
        Resolver {
            installed,
            others,
            catalogs,
            searched,
            root: (sub.to_string(), bundle.name.clone()),
            root_package: bundle.package.clone(),
            root_bundle: bundle.clone(),
            root_apis: bundle.provided_gvks(),
            planned: Vec::new(),
            tries: 0,
            found,
            also: Vec::new(),
            learned: Vec::new(),
            chain: Vec::new(),
        }
    }

    /// The ways to meet each of `unmet`, the bundle's own unmet dependencies, what they need in
    /// turn planned in [`Resolver::planned`]. Two bundles of the chain may need one package in
    /// ranges the bundle chosen first for it does not both meet (app needs `base >=1.0.0`, and
    /// so gets its head 2.0.0; its other dependency needs `base <2.0.0`). A namespace has one
    /// operator of a package, so OLM's solver chooses one that meets both; so does this: it
    /// starts over, every bundle of that package then having to meet both, until a round
    /// settles every dependency, learns nothing new, or [`MAX_ROUNDS`] have run. The rounds
    /// share [`MAX_TRIES`] and the CEL budget: a resolution does no more than it did in one.
    pub fn ways(&mut self, unmet: &[Dependency]) -> Vec<Way> {
        let mut round = 1;
        loop {
            let ways: Vec<Way> = unmet.iter().map(|dep| self.way(dep, unmet)).collect();
            let mut fresh: Vec<Dependency> = Vec::new();
            for d in std::mem::take(&mut self.learned) {
                if !self.also.contains(&d) && !fresh.contains(&d) {
                    fresh.push(d);
                }
            }
            if ways.iter().all(Way::settles) || fresh.is_empty() || round >= MAX_ROUNDS {
                return ways;
            }
            self.also.extend(fresh);
            self.planned.clear();
            round += 1;
        }
    }

    /// The dependencies' candidates this resolution found, for the next one over the same
    /// catalogs.
    pub fn found(&mut self) -> Found<'a> {
        std::mem::take(&mut self.found)
    }

    /// The way to meet `dep`, one of `unmet`, the bundle's own unmet dependencies; what it needs
    /// in turn is planned too.
    pub fn way(&mut self, dep: &Dependency, unmet: &[Dependency]) -> Way {
        let mut path = vec![self.root_package.clone()];
        let root = self.root.clone();
        self.way_at(dep, unmet, &mut path, &root)
    }

    /// `siblings`: the unmet dependencies of the bundle that has `dep` (`dep` among them): a
    /// candidate of a package another of them names must meet that one too, since the package
    /// gets one Subscription (OLM's solver looks for such a bundle the same way); `path`: the
    /// packages of the chain from the dependent down to that bundle (a candidate of one of them
    /// would be a cycle); `needer`: that bundle's Subscription and name.
    fn way_at(
        &mut self,
        dep: &Dependency,
        siblings: &[Dependency],
        path: &mut Vec<String>,
        needer: &(String, String),
    ) -> Way {
        let root = self.root.0.as_str();
        if let Some(s) =
            self.others.iter().filter(|s| s.metadata.name != root).find(|s| subscribes_to(s, dep, self.catalogs))
        {
            let (moving, detail) = progress(s);
            let name = s.metadata.name.clone();
            return if moving {
                Way::Subscribed { name, detail }
            } else {
                Way::Stuck { name, package: s.spec.name.clone(), detail }
            };
        }
        if path.len() > 1 && dep.met_by(&self.root_bundle) {
            return Way::Root;
        }
        if let Some(k) = self.planned.iter().position(|n| dep.met_by(n.bundle)) {
            let p = &mut self.planned[k];
            if p.needed_by == *needer && !p.meets.contains(&dep.to_string()) {
                p.meets.push(dep.to_string());
            }
            return Way::New(k);
        }
        if let Some(b) = self.chain.iter().find(|b| dep.met_by(b)) {
            return Way::Chain(b.name.clone());
        }
        let searched = self.searched;
        let key = dep.to_string();
        let candidates = match self.found.candidates.get(&key) {
            Some(found) => found.clone(),
            None => {
                if dep.uses_cel() {
                    // One scan of the catalogs is always allowed, however large they are.
                    let cost: usize = searched.iter().map(|(_, c)| c.bundles.len()).sum();
                    if self.found.cel_evaluations + cost > MAX_CEL_EVALUATIONS.max(cost) {
                        return Way::TooCostly;
                    }
                    self.found.cel_evaluations += cost;
                }
                let found: Vec<Candidate<'a>> =
                    searched.iter().flat_map(|(id, c)| c.providers_of(dep).map(move |p| (*id, p))).collect();
                self.found.candidates.insert(key, found.clone());
                found
            }
        };
        if candidates.is_empty() {
            return Way::Missing;
        }
        let mut first: Option<(String, String)> = None;
        let mut others = 0;
        for (id, p) in candidates {
            let what = format!("{} of {}/{}", p.bundle.name, id.0, id.1);
            let package = p.bundle.package.as_str();
            let refused = if let Some(k) = path.iter().position(|x| x == package) {
                // A cycle back to a package of the chain, whose bundle there does not meet it.
                let held = if k == 0 { self.root.1.as_str() } else { self.chain[k - 1].name.as_str() };
                Some(format!(
                    "it is of package {package:?}, which needs it itself, as {held} (a dependency cycle to another \
                     bundle of the package, and a namespace has one operator of a package)"
                ))
            } else if let Some(other) = self.also.iter().find(|d| d.package() == Some(package) && !d.met_by(p.bundle)) {
                Some(format!("it does not also meet {other}, which the same package's one Subscription must"))
            } else if let Some(n) = self.planned.iter().find(|n| n.bundle.package == package) {
                // Another bundle of the chain needs this package too, and the bundle chosen
                // for it does not meet `dep`: the next round has every bundle of the package
                // meet `dep` as well.
                if dep.package() == Some(package) {
                    self.learned.push(dep.clone());
                }
                Some(format!(
                    "{} of the same package is needed already (by {}), and a namespace has one Subscription a \
                     package",
                    n.bundle.name, n.needed_by.1
                ))
            } else if let Some(s) =
                self.others.iter().find(|s| s.spec.name == package && s.metadata.name != self.root.0)
            {
                Some(format!("Subscription {:?} of this namespace holds package {package:?}", s.metadata.name))
            } else if let Some(other) =
                siblings.iter().find(|d| d.package() == Some(package) && *d != dep && !d.met_by(p.bundle))
            {
                Some(format!("it does not also meet {other}, which the same package's one Subscription must"))
            } else if let Some(why) = self.api_taken(p.bundle) {
                Some(format!("{why}, and a namespace has one provider of an API"))
            } else if self.tries >= MAX_TRIES {
                Some(format!("the resolution gave up after trying {MAX_TRIES} bundles"))
            } else {
                None
            };
            let why = match refused {
                Some(why) => why,
                None => {
                    self.tries += 1;
                    let name = super::dependencies::subscription_name(package, &p.channel.name, &id.1, &id.0);
                    let mark = self.planned.len();
                    path.push(package.to_string());
                    self.chain.push(p.bundle);
                    let needs = self.needs_of(p.bundle, path, &(name.clone(), p.bundle.name.clone()));
                    self.chain.pop();
                    path.pop();
                    match needs {
                        Ok(needs_root) => {
                            self.planned.push(Planned {
                                catalog: id,
                                channel: &p.channel.name,
                                bundle: p.bundle,
                                name,
                                needed_by: needer.clone(),
                                meets: vec![dep.to_string()],
                                needs_root,
                            });
                            return Way::New(self.planned.len() - 1);
                        }
                        Err(why) => {
                            self.planned.truncate(mark);
                            why
                        }
                    }
                }
            };
            if first.is_none() {
                first = Some((what, why));
            } else {
                others += 1;
            }
        }
        let (first, why) = first.unwrap_or_default();
        Way::Unmet { first, why, others }
    }

    /// Which bundle already provides an API that `bundle`, a candidate, provides too: an
    /// operator installed in the namespace (but those of the package being resolved, which it
    /// replaces), a bundle planned already, or the bundle being resolved. OLM's solver allows
    /// one provider of an API in a namespace.
    fn api_taken(&self, bundle: &Bundle) -> Option<String> {
        let installed = self.installed.iter().filter(|b| olm::package_of(b) != self.root_package);
        olm::api_provided_already(bundle, installed.chain(self.planned.iter().map(|n| n.bundle))).or_else(|| {
            let gvk = bundle.provided_gvks().into_iter().find(|g| self.root_apis.contains(g))?;
            (bundle.package != self.root_package).then(|| {
                format!("{} and {} provide {} ({}/{})", self.root.1, bundle.name, gvk.kind, gvk.group, gvk.version)
            })
        })
    }

    /// Plan what `bundle` (a candidate, `me` its Subscription and name) needs beyond what is
    /// installed, and say whether it needs the bundle being resolved (see [`Planned::needs_root`]);
    /// why it cannot be installed when something cannot be met.
    fn needs_of(&mut self, bundle: &Bundle, path: &mut Vec<String>, me: &(String, String)) -> Result<bool, String> {
        let unmet = olm::unmet_of(bundle.dependencies(), self.installed);
        if !unmet.is_empty() && path.len() > MAX_DEPTH {
            return Err(format!("its chain of dependencies is deeper than {MAX_DEPTH}"));
        }
        let mut needs_root = false;
        for dep in &unmet {
            match self.way_at(dep, &unmet, path, me) {
                Way::Subscribed { .. } | Way::Chain(_) => {}
                Way::Root => needs_root = true,
                Way::New(k) => needs_root |= self.planned[k].needs_root,
                Way::Stuck { name, detail, .. } => {
                    return Err(format!("it requires {dep}, and Subscription {name:?} of this namespace, which holds that package, {detail}"));
                }
                Way::Missing => return Err(format!("it requires {dep}, which no bundle of the catalogs provides")),
                Way::TooCostly => return Err(format!("it requires {dep}: {}", too_costly())),
                Way::Unmet { first, why, others } => {
                    return Err(format!("it requires {dep}: {}", unmet_text(&first, &why, others)));
                }
            }
        }
        Ok(needs_root)
    }
}

/// Why a dependency was not looked for: its CEL rule would take the resolution past its bound.
pub fn too_costly() -> String {
    format!(
        "finding what meets its CEL rule would take the resolution past {MAX_CEL_EVALUATIONS} CEL evaluations (a rule on \
         one bundle), where it stops"
    )
}

/// "`first` provides it, but `why`", with how many more were tried.
pub fn unmet_text(first: &str, why: &str, others: usize) -> String {
    match others {
        0 => format!("{first} provides it, but {why}"),
        1 => format!("{first} provides it, but {why}; 1 other bundle that provides it cannot be installed either"),
        n => format!("{first} provides it, but {why}; {n} other bundles that provide it cannot be installed either"),
    }
}

/// Whether `s` subscribes to what `dep` asks for: the package it names, or (for an API) a
/// package whose bundles in `s`'s catalog provide it.
pub(super) fn subscribes_to(s: &Subscription, dep: &Dependency, catalogs: &Snapshot) -> bool {
    match dep.package() {
        Some(p) => s.spec.name == p,
        None => catalogs
            .get(&(s.spec.source_namespace.clone(), s.spec.source.clone()))
            .and_then(|v| v.catalog.as_deref())
            .is_some_and(|c| c.bundles_of(&s.spec.name).any(|b| dep.met_by(b))),
    }
}

/// Whether a Subscription still moves (it may yet install a bundle that meets a dependency),
/// and where it stands, in a few words.
fn progress(s: &Subscription) -> (bool, String) {
    let status = s.status.clone().unwrap_or_default();
    let failed = |t: &str| find_condition(&status.conditions, t).filter(|c| c.status == "True");
    if let Some(c) = failed(olm::RESOLUTION_FAILED) {
        return (false, format!("its resolution failed: {}", c.message));
    }
    if status.state == olm::UPGRADE_FAILED {
        return (false, format!("its install of {} failed", status.current_csv));
    }
    if let Some(c) = failed(super::subscriptions::UPGRADE_HELD) {
        return (false, format!("its upgrade is held: {}", c.message));
    }
    if status.state == olm::AT_LATEST_KNOWN {
        return (false, format!("installed {} and moves no further on its channel", status.installed_csv));
    }
    let pending = find_condition(&status.conditions, olm::INSTALL_PLAN_PENDING)
        .map(|c| format!(", its plan {}", c.reason))
        .unwrap_or_default();
    let target = if status.current_csv.is_empty() {
        "resolving".to_string()
    } else {
        format!("installing {}", status.current_csv)
    };
    (true, format!("{target}{pending}"))
}

#[cfg(test)]
mod tests {
    use super::super::catalogs::View;
    use super::*;
    use serde_json::{json, Value};
    use std::sync::Arc;

    /// A bundle of `package` at `version` that requires each (package, range) of `requires`.
    fn bundle(package: &str, version: &str, requires: &[(&str, &str)]) -> Value {
        let mut properties =
            vec![json!({"type": "olm.package", "value": {"packageName": package, "version": version}})];
        properties.extend(
            requires
                .iter()
                .map(|(p, r)| json!({"type": "olm.package.required", "value": {"packageName": p, "versionRange": r}})),
        );
        json!({"schema": "olm.bundle", "name": format!("{package}.v{version}"), "package": package,
               "image": format!("example.com/{package}:{version}"), "properties": properties})
    }

    /// A package whose channel `stable` goes through `versions` in order (the last is its
    /// head), each bundle requiring what `requires` says for its version.
    fn package(name: &str, versions: &[&str], requires: impl Fn(&str) -> Vec<(&'static str, String)>) -> Vec<Value> {
        let entries: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| match i {
                0 => json!({"name": format!("{name}.v{v}")}),
                _ => json!({"name": format!("{name}.v{v}"), "replaces": format!("{name}.v{}", versions[i - 1])}),
            })
            .collect();
        let mut out = vec![
            json!({"schema": "olm.package", "name": name, "defaultChannel": "stable"}),
            json!({"schema": "olm.channel", "package": name, "name": "stable", "entries": entries}),
        ];
        for v in versions {
            let needs = requires(v);
            let needs: Vec<(&str, &str)> = needs.iter().map(|(p, r)| (*p, r.as_str())).collect();
            out.push(bundle(name, v, &needs));
        }
        out
    }

    fn needs(p: &'static str) -> Vec<(&'static str, String)> {
        vec![(p, ">=1.0.0".to_string())]
    }

    /// app needs mid; mid's head (2.0.0) needs leaf, which no catalog has, its 1.0.0 needs
    /// leaf2, which it has; bad needs mid 2.x; cyc-a and cyc-b need each other (a cycle); two needs ranged
    /// (1.0.0, 2.0.0) both at 1.0.0 or later and below 2.0.0.
    fn catalog() -> Catalog {
        let mut blobs = Vec::new();
        blobs.extend(package("app", &["1.0.0"], |_| needs("mid")));
        blobs.extend(package("bad", &["1.0.0"], |_| vec![("mid", ">=2.0.0".to_string())]));
        blobs.extend(package(
            "mid",
            &["1.0.0", "2.0.0"],
            |v| if v == "2.0.0" { needs("leaf") } else { needs("leaf2") },
        ));
        blobs.extend(package("leaf2", &["1.0.0"], |_| vec![]));
        blobs.extend(package("cyc-a", &["1.0.0"], |_| needs("cyc-b")));
        blobs.extend(package("cyc-b", &["1.0.0"], |_| needs("cyc-a")));
        blobs.extend(package("ranged", &["1.0.0", "2.0.0"], |_| vec![]));
        blobs.extend(package("two", &["1.0.0"], |_| vec![("ranged", ">=1.0.0".into()), ("ranged", "<2.0.0".into())]));
        catalog_of(blobs)
    }

    fn catalog_of(blobs: Vec<Value>) -> Catalog {
        Catalog::from_blobs(blobs.into_iter().map(|b| ("c.json".to_string(), b))).expect("a valid catalog")
    }

    fn snapshot(c: Catalog) -> Snapshot {
        let view = View { catalog: Some(Arc::new(c)), healthy: true, failure: None, priority: 0 };
        [(("olm".to_string(), "c".to_string()), view)].into_iter().collect()
    }

    /// Every catalog of `catalogs`, as the resolver searches them.
    fn searched(catalogs: &Snapshot) -> Vec<(&(String, String), &Catalog)> {
        catalogs.iter().filter_map(|(id, v)| v.catalog.as_deref().map(|c| (id, c))).collect()
    }

    /// The ways to meet the unmet dependencies of `package`'s head, what is planned (bundle,
    /// the bundle that needs it), with `installed` operators and `others` Subscriptions.
    fn resolve(
        catalogs: &Snapshot,
        package: &str,
        installed: &[Bundle],
        others: &[Subscription],
    ) -> (Vec<Way>, Vec<(String, String)>) {
        let searched = searched(catalogs);
        let c = searched[0].1;
        let root = c.bundles_of(package).last().expect("the package");
        let unmet = olm::unmet_of(root.dependencies(), installed);
        let mut r = Resolver::new(installed, others, catalogs, &searched, ("root-sub", root), Found::default());
        let ways = r.ways(&unmet);
        let planned = r.planned.iter().map(|p| (p.bundle.name.clone(), p.needed_by.1.clone())).collect();
        (ways, planned)
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    /// A bundle providing an API that an installed operator of another package, the bundle
    /// being resolved, or another planned bundle provides is not taken: the next one that does
    /// not is, and when none is left the dependency is unmet, naming the two providers.
    #[test]
    fn a_second_provider_of_an_api_is_not_pulled_in() {
        let profile =
            json!({"type": "olm.gvk", "value": {"group": "tuning.example.com", "version": "v1", "kind": "Profile"}});
        let provides = |blobs: &mut Vec<Value>, name: &str| {
            for b in blobs.iter_mut().filter(|b| b["name"] == name) {
                b["properties"].as_array_mut().unwrap().push(profile.clone());
            }
        };
        let mut blobs = Vec::new();
        blobs.extend(package("app", &["1.0.0"], |_| needs("tuner")));
        // tuner's head provides Profile; its 1.0.0 does not.
        blobs.extend(package("tuner", &["1.0.0", "2.0.0"], |_| vec![]));
        provides(&mut blobs, "tuner.v2.0.0");
        blobs.extend(package("own", &["1.0.0"], |_| needs("only")));
        provides(&mut blobs, "own.v1.0.0");
        blobs.extend(package("only", &["1.0.0"], |_| vec![]));
        provides(&mut blobs, "only.v1.0.0");
        let catalogs = snapshot(catalog_of(blobs));
        let base: Bundle =
            serde_json::from_value(json!({"schema": "olm.bundle", "name": "base.v1.3.0", "properties": [
            {"type": "olm.package", "value": {"packageName": "base", "version": "1.3.0"}}, profile]}))
            .unwrap();
        // Nothing installed provides Profile: tuner's head is taken.
        let (_, planned) = resolve(&catalogs, "app", &[], &[]);
        assert_eq!(planned, [pair("tuner.v2.0.0", "app.v1.0.0")]);
        // base provides it: tuner 1.0.0, which does not.
        let (_, planned) = resolve(&catalogs, "app", std::slice::from_ref(&base), &[]);
        assert_eq!(planned, [pair("tuner.v1.0.0", "app.v1.0.0")]);
        // own provides Profile itself, and only has nothing else to offer.
        let (ways, planned) = resolve(&catalogs, "own", &[], &[]);
        assert!(planned.is_empty(), "{planned:?}");
        let [Way::Unmet { first, why, others: 0 }] = &ways[..] else { panic!("{ways:?}") };
        assert_eq!(first, "only.v1.0.0 of olm/c");
        assert_eq!(
            why,
            "own.v1.0.0 and only.v1.0.0 provide Profile (tuning.example.com/v1), and a namespace has one provider of \
             an API"
        );
    }

    /// A CEL rule's scan of the catalogs is not started when it would take the resolutions
    /// sharing what they found past MAX_CEL_EVALUATIONS: the dependency is left unmet, saying
    /// why; a rule scanned already costs nothing more.
    #[test]
    fn cel_scans_stop_at_their_bound() {
        let rule = json!({"type": "olm.constraint", "value": {"cel": {"rule": "properties.exists(p, p.type == 'none-such')"}}});
        let mut blobs = package("ruled", &["1.0.0"], |_| vec![]);
        for b in blobs.iter_mut().filter(|b| b["schema"] == "olm.bundle") {
            b["properties"].as_array_mut().unwrap().push(rule.clone());
        }
        blobs.extend(package("leaf2", &["1.0.0"], |_| vec![]));
        let catalogs = snapshot(catalog_of(blobs));
        let searched = searched(&catalogs);
        let ruled = searched[0].1.bundles_of("ruled").next().unwrap();
        let deps = ruled.dependencies();
        let way = |spent: usize| {
            let found = Found { candidates: HashMap::new(), cel_evaluations: spent };
            let mut r = Resolver::new(&[], &[], &catalogs, &searched, ("root-sub", ruled), found);
            let way = r.way(&deps[0], &deps);
            (way, r.found())
        };
        let (first, found) = way(0);
        assert!(matches!(first, Way::Missing), "{first:?}");
        assert_eq!(found.cel_evaluations, 2, "one evaluation a bundle");
        let (stopped, found) = way(MAX_CEL_EVALUATIONS - 1);
        assert!(matches!(stopped, Way::TooCostly), "{stopped:?}");
        assert_eq!(found.cel_evaluations, MAX_CEL_EVALUATIONS - 1, "nothing evaluated");
        assert!(too_costly().contains("8192 CEL evaluations"));
        // Found already: no scan, whatever was spent.
        let mut again = Found { candidates: HashMap::new(), cel_evaluations: MAX_CEL_EVALUATIONS };
        again.candidates.insert(deps[0].to_string(), Vec::new());
        let mut r = Resolver::new(&[], &[], &catalogs, &searched, ("root-sub", ruled), again);
        assert!(matches!(r.way(&deps[0], &deps), Way::Missing));
    }

    #[test]
    fn a_dependency_whose_preferred_bundle_needs_what_no_catalog_has_takes_the_next() {
        let catalogs = snapshot(catalog());
        let (ways, planned) = resolve(&catalogs, "app", &[], &[]);
        assert!(matches!(ways[..], [Way::New(1)]), "{ways:?}");
        // What mid 1.0.0 needs comes before it, so its Subscription is created first.
        assert_eq!(planned, [pair("leaf2.v1.0.0", "mid.v1.0.0"), pair("mid.v1.0.0", "app.v1.0.0")]);
        let searched = searched(&catalogs);
        let app = searched[0].1.bundles_of("app").next().unwrap();
        let mut r = Resolver::new(&[], &[], &catalogs, &searched, ("root-sub", app), Found::default());
        r.way(&app.dependencies()[0], &app.dependencies());
        assert_eq!(r.planned[0].name, "leaf2-stable-c-olm");
        assert_eq!(r.planned[0].needed_by, pair("mid-stable-c-olm", "mid.v1.0.0"), "its requiredBy");
        assert_eq!(r.planned[1].needed_by, pair("root-sub", "app.v1.0.0"));
        assert_eq!(r.planned[1].meets, [r#"package "mid" in range ">=1.0.0" (olm.package.required)"#]);
    }

    #[test]
    fn a_chain_that_cannot_be_completed_plans_nothing_and_says_where_it_breaks() {
        let catalogs = snapshot(catalog());
        let (ways, planned) = resolve(&catalogs, "bad", &[], &[]);
        assert!(planned.is_empty(), "nothing planned: {planned:?}");
        let [Way::Unmet { first, why, others }] = &ways[..] else { panic!("{ways:?}") };
        assert_eq!((first.as_str(), *others), ("mid.v2.0.0 of olm/c", 0));
        assert_eq!(
            why,
            r#"it requires package "leaf" in range ">=1.0.0" (olm.package.required), which no bundle of the catalogs provides"#
        );
        // Installed, leaf meets it, and mid's head is taken.
        let leaf: Bundle = serde_json::from_value(bundle("leaf", "1.0.0", &[])).unwrap();
        let (ways, planned) = resolve(&catalogs, "bad", &[leaf], &[]);
        assert!(matches!(ways[..], [Way::New(0)]), "{ways:?}");
        assert_eq!(planned, [pair("mid.v2.0.0", "bad.v1.0.0")]);
    }

    #[test]
    fn a_subscription_of_the_namespace_meets_what_a_dependency_needs() {
        let catalogs = snapshot(catalog());
        let sub = |name: &str, package: &str, state: &str| -> Subscription {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
                "spec": {"name": package, "source": "c", "sourceNamespace": "olm"},
                "status": {"state": state, "installedCSV": format!("{package}.v1.0.0")}}))
            .unwrap()
        };
        let (ways, planned) = resolve(&catalogs, "app", &[], &[sub("mine", "leaf2", "UpgradePending")]);
        assert!(matches!(ways[..], [Way::New(0)]), "{ways:?}");
        assert_eq!(planned, [pair("mid.v1.0.0", "app.v1.0.0")], "leaf2 is left to its Subscription");
        // Settled on a bundle that cannot move: mid 1.0.0 cannot be installed either.
        let (ways, planned) = resolve(&catalogs, "app", &[], &[sub("mine", "leaf2", "AtLatestKnown")]);
        assert!(planned.is_empty(), "{planned:?}");
        let [Way::Unmet { first, why, others }] = &ways[..] else { panic!("{ways:?}") };
        assert_eq!((first.as_str(), *others), ("mid.v2.0.0 of olm/c", 1), "{why}");
    }

    #[test]
    fn two_dependencies_on_one_package_get_one_bundle_that_meets_both() {
        let catalogs = snapshot(catalog());
        let (ways, planned) = resolve(&catalogs, "two", &[], &[]);
        // ranged's head, 2.0.0, meets the first and not the second: 1.0.0 meets both.
        assert!(matches!(ways[..], [Way::New(0), Way::New(0)]), "{ways:?}");
        assert_eq!(planned, [pair("ranged.v1.0.0", "two.v1.0.0")]);
    }

    /// Two bundles of a chain need one package in ranges its head does not both meet: the
    /// first gets the head, the second cannot, and the resolution starts over with every bundle
    /// of that package meeting both, whichever needer comes first. Ranges no bundle meets both
    /// of still fail, naming the range the bundle passed over does not also meet.
    #[test]
    fn two_bundles_needing_one_package_get_one_bundle_that_meets_both() {
        let mut blobs = Vec::new();
        blobs.extend(package("app", &["1.0.0"], |_| vec![("wide", ">=1.0.0".into()), ("narrow", ">=1.0.0".into())]));
        blobs.extend(package("rev", &["1.0.0"], |_| vec![("narrow", ">=1.0.0".into()), ("wide", ">=1.0.0".into())]));
        blobs.extend(package("wide", &["1.0.0"], |_| vec![("base", ">=1.0.0".into())]));
        blobs.extend(package("narrow", &["1.0.0"], |_| vec![("base", "<2.0.0".into())]));
        blobs.extend(package("never", &["1.0.0"], |_| vec![("strict", ">=1.0.0".into()), ("old", ">=1.0.0".into())]));
        blobs.extend(package("strict", &["1.0.0"], |_| vec![("base", ">=1.5.0".into())]));
        blobs.extend(package("old", &["1.0.0"], |_| vec![("base", "<1.2.0".into())]));
        blobs.extend(package("base", &["1.0.0", "1.5.0", "2.0.0"], |_| vec![]));
        let catalogs = snapshot(catalog_of(blobs));
        let (ways, planned) = resolve(&catalogs, "app", &[], &[]);
        assert!(ways.iter().all(Way::settles), "{ways:?}");
        assert_eq!(
            planned,
            [
                pair("base.v1.5.0", "wide.v1.0.0"),
                pair("wide.v1.0.0", "app.v1.0.0"),
                pair("narrow.v1.0.0", "app.v1.0.0")
            ]
        );
        let (ways, planned) = resolve(&catalogs, "rev", &[], &[]);
        assert!(ways.iter().all(Way::settles), "{ways:?}");
        assert_eq!(
            planned,
            [
                pair("base.v1.5.0", "narrow.v1.0.0"),
                pair("narrow.v1.0.0", "rev.v1.0.0"),
                pair("wide.v1.0.0", "rev.v1.0.0")
            ]
        );
        // strict needs base 1.5.0 or later, old below 1.2.0: no base meets both, and the
        // second round says so of strict's.
        let (ways, _) = resolve(&catalogs, "never", &[], &[]);
        let [Way::Unmet { first, why, others }, Way::New(_)] = &ways[..] else { panic!("{ways:?}") };
        assert_eq!((first.as_str(), *others), ("strict.v1.0.0 of olm/c", 0));
        assert!(
            why.ends_with(r#"base.v2.0.0 of olm/c provides it, but it does not also meet package "base" in range "<1.2.0" (olm.package.required), which the same package's one Subscription must; 1 other bundle that provides it cannot be installed either"#),
            "{why}"
        );
    }

    /// A cycle through the bundle being resolved (cyc-a needs cyc-b, which needs cyc-a) plans
    /// cyc-b, marked as needing it back, so neither waits for the other; a cycle below it (app
    /// needs cyc-a, which needs cyc-b, which needs cyc-a) plans both, the second met by the
    /// first; a bundle of a package of the chain that the chain's bundle does not stand for
    /// (cyc-b needing cyc-a 2.x, which there is not) is refused, saying so.
    #[test]
    fn a_dependency_cycle_is_planned_through_the_bundle_and_below_it() {
        let mut blobs = Vec::new();
        blobs.extend(package("cyc-a", &["1.0.0"], |_| needs("cyc-b")));
        blobs.extend(package("cyc-b", &["1.0.0"], |_| needs("cyc-a")));
        blobs.extend(package("app", &["1.0.0"], |_| needs("cyc-a")));
        blobs.extend(package("odd-a", &["1.0.0", "2.0.0"], |v| if v == "1.0.0" { needs("odd-b") } else { vec![] }));
        blobs.extend(package("odd-b", &["1.0.0"], |_| vec![("odd-a", ">=2.0.0".to_string())]));
        blobs.extend(package("odd", &["1.0.0"], |_| vec![("odd-a", "<2.0.0".to_string())]));
        let catalogs = snapshot(catalog_of(blobs));
        let searched = searched(&catalogs);
        let root = searched[0].1.bundles_of("cyc-a").next().expect("cyc-a");
        let mut r = Resolver::new(&[], &[], &catalogs, &searched, ("root-sub", root), Found::default());
        let ways = r.ways(&root.dependencies());
        assert!(matches!(ways[..], [Way::New(0)]), "{ways:?}");
        assert_eq!((r.planned[0].bundle.name.as_str(), r.planned[0].needs_root), ("cyc-b.v1.0.0", true));

        let (ways, planned) = resolve(&catalogs, "app", &[], &[]);
        assert!(matches!(ways[..], [Way::New(1)]), "{ways:?}");
        assert_eq!(planned, [pair("cyc-b.v1.0.0", "cyc-a.v1.0.0"), pair("cyc-a.v1.0.0", "app.v1.0.0")]);

        let (ways, planned) = resolve(&catalogs, "odd", &[], &[]);
        assert!(planned.is_empty(), "{planned:?}");
        let [Way::Unmet { first, why, .. }] = &ways[..] else { panic!("{ways:?}") };
        assert_eq!(first, "odd-a.v1.0.0 of olm/c");
        assert!(
            why.starts_with(r#"it requires package "odd-b" in range ">=1.0.0" (olm.package.required): odd-b.v1.0.0 of olm/c provides it, but it requires package "odd-a" in range ">=2.0.0" (olm.package.required): odd-a.v2.0.0 of olm/c provides it, but it is of package "odd-a", which needs it itself, as odd-a.v1.0.0 (a dependency cycle to another bundle of the package, and a namespace has one operator of a package)"#),
            "{why}"
        );
    }

    #[test]
    fn a_chain_deeper_than_the_bound_is_refused() {
        let names: Vec<String> = (0..=MAX_DEPTH + 2).map(|i| format!("p{i:02}")).collect();
        let mut blobs = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let next: Vec<(&str, &str)> = names.get(i + 1).map(|n| vec![(n.as_str(), ">=1.0.0")]).unwrap_or_default();
            blobs.push(json!({"schema": "olm.package", "name": name, "defaultChannel": "stable"}));
            blobs.push(json!({"schema": "olm.channel", "package": name, "name": "stable", "entries": [{"name": format!("{name}.v1.0.0")}]}));
            blobs.push(bundle(name, "1.0.0", &next));
        }
        let catalogs = snapshot(catalog_of(blobs));
        let (ways, planned) = resolve(&catalogs, "p00", &[], &[]);
        assert!(planned.is_empty(), "{planned:?}");
        let [Way::Unmet { why, .. }] = &ways[..] else { panic!("{ways:?}") };
        assert!(why.ends_with(&format!("its chain of dependencies is deeper than {MAX_DEPTH}")), "{why}");
        // At the bound exactly: p02 needs MAX_DEPTH bundles in a chain (p03 to p18), p01 one more.
        let (_, planned) = resolve(&catalogs, "p02", &[], &[]);
        assert_eq!(planned.len(), MAX_DEPTH, "{planned:?}");
        let (ways, planned) = resolve(&catalogs, "p01", &[], &[]);
        assert!(planned.is_empty() && matches!(ways[..], [Way::Unmet { .. }]), "{ways:?}");
    }

    #[test]
    fn a_catalog_that_branches_everywhere_is_given_up_on() {
        // wide needs w, which has 700 versions, each needing a package no catalog has.
        let versions: Vec<String> = (0..700).map(|i| format!("1.0.{i}")).collect();
        let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
        let mut blobs = package("wide", &["1.0.0"], |_| needs("w"));
        blobs.extend(package("w", &versions, |_| needs("nowhere")));
        let catalogs = snapshot(catalog_of(blobs));
        let searched = searched(&catalogs);
        let wide = searched[0].1.bundles_of("wide").next().unwrap();
        let mut r = Resolver::new(&[], &[], &catalogs, &searched, ("root-sub", wide), Found::default());
        let way = r.way(&wide.dependencies()[0], &wide.dependencies());
        assert_eq!(r.tries, MAX_TRIES, "it stopped at the bound");
        let Way::Unmet { first, others, .. } = way else { panic!("{way:?}") };
        assert_eq!((first.as_str(), others), ("w.v1.0.699 of olm/c", 699));
    }

    #[test]
    fn a_subscription_that_settled_or_failed_no_longer_moves() {
        let sub = |state: &str, failed: bool| -> Subscription {
            let mut conditions = vec![];
            if failed {
                conditions.push(json!({"type": "ResolutionFailed", "status": "True", "message": "no such channel"}));
            }
            serde_json::from_value(json!({"metadata": {"name": "base"}, "spec": {"name": "base"},
                "status": {"state": state, "installedCSV": "base.v1.1.0", "currentCSV": "base.v1.3.0",
                           "conditions": conditions}}))
            .unwrap()
        };
        assert!(progress(&sub("UpgradePending", false)).0);
        assert!(progress(&sub("", false)).0, "a new subscription moves");
        let (moving, why) = progress(&sub("AtLatestKnown", false));
        assert!(!moving && why.contains("installed base.v1.1.0"), "{why}");
        let (moving, why) = progress(&sub("UpgradePending", true));
        assert!(!moving && why.contains("no such channel"), "{why}");
        assert!(!progress(&sub("UpgradeFailed", false)).0);
        let mut held = sub("AtLatestKnown", false);
        if let Some(status) = held.status.as_mut() {
            status.conditions = serde_json::from_value(json!([{"type": "UpgradeHeld", "status": "True",
                "message": "base.v1.1.0 stays installed: tuned needs it"}]))
            .unwrap();
        }
        let (moving, why) = progress(&held);
        assert_eq!((moving, why.as_str()), (false, "its upgrade is held: base.v1.1.0 stays installed: tuned needs it"));
    }
}
