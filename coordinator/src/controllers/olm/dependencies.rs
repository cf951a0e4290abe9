//! A bundle's dependencies, installed as OLM installs them: each gets a Subscription of its own.
//!
//! When the bundle a Subscription would install needs operators the namespace does not have
//! (`olm.package.required`, `olm.gvk.required`), OLM's resolver finds a bundle for each in the
//! catalogs, adds them to the plan and creates their Subscriptions. aloft creates the same
//! Subscriptions (named as OLM names them, `<package>-<channel>-<catalog>-<catalog namespace>`,
//! starting at the bundle found) and holds the dependent bundle back until they are installed,
//! so it is never installed without what it needs. What those bundles need in turn is found the
//! same way, all the way down ([`closure`]). All or nothing, as a resolution is: when one
//! dependency, at any depth, cannot be met, no Subscription is created for the others.
//!
//! Where a dependency is looked for: a Subscription of the namespace already on that package
//! (or on a package with that API) is the one that will meet it, if it still moves; otherwise
//! the subscription's own catalog first, then the other catalogs of its own namespace, of its
//! catalog's namespace and of the global catalog namespace (`--olm-global-namespace`), the
//! higher `spec.priority` first, at equal priority the subscription's own namespace first, then
//! by namespace and name: the order of OLM's resolver, which looks in the namespace's catalogs
//! and the global ones.

use super::catalogs::Snapshot;
use super::closure::{self, Found, Planned, Resolver, Way};
use super::{involved, note};
use crate::controllers::events::Recorder;
use crate::resources::SUBSCRIPTION;
use crate::server::objects;
use crate::store::{Key, Store, StoreError};
use aloft_api::catalog::{Bundle, Catalog, Dependency};
use aloft_api::meta::find_condition;
use aloft_api::olm::{self, Subscription};
use serde_json::json;
use std::sync::Arc;

/// The annotation on a Subscription created for a dependency: the Subscription and bundle
/// that needed it (OLM records nothing; a user asking "where did this come from" should not
/// have to guess).
pub const REQUIRED_BY: &str = "aloft.dev/requiredBy";

/// What became of a bundle's unmet dependencies.
#[derive(Debug)]
pub enum Outcome {
    /// Every one has a Subscription that will install it (some perhaps just created): the
    /// bundle waits for them; the message says for what.
    Waiting(String),
    /// At least one cannot be met; nothing was created. The message says why, for each.
    Unsatisfiable(String),
    /// Every one has a Subscription that will install it, and each of those needs the bundle
    /// in turn (a dependency cycle): the bundle is installed now, without waiting for them,
    /// which then find it installed. The message names the cycle.
    Cycle(String),
}

/// Find a way to meet each of `unmet` (the dependencies of `bundle`, the bundle `sub` would
/// install, that none of the namespace's installed operators meets), and what those ways need
/// in turn ([`closure`]), and create the Subscriptions that are missing.
pub async fn arrange(
    store: &Arc<dyn Store>,
    events: &Recorder,
    sub: &Subscription,
    bundle: &Bundle,
    unmet: &[Dependency],
    at: Context<'_>,
) -> Result<Outcome, StoreError> {
    let ns = sub.metadata.namespace.clone().unwrap_or_default();
    let (ways, planned) = match resolve(sub, bundle, unmet, at, &Memo::default()) {
        Ok(resolved) => resolved,
        Err(why) => {
            let more = "nothing is installed for it until every dependency can be met, and it goes on by itself once \
                        they can";
            return Ok(Outcome::Unsatisfiable(format!("constraints not satisfiable: {why}; {more}")));
        }
    };

    let about = involved("Subscription", &ns, &sub.metadata.name);
    // What each needs is planned before it, so it is created first.
    for n in &planned {
        let mut obj = json!({
            "apiVersion": olm::API_VERSION,
            "kind": "Subscription",
            "metadata": {
                "name": n.name,
                "labels": {format!("operators.coreos.com/{}.{ns}", n.bundle.package): ""},
                "annotations": {REQUIRED_BY: format!("{} ({})", n.needed_by.0, n.needed_by.1)},
            },
            "spec": {
                "source": n.catalog.1,
                "sourceNamespace": n.catalog.0,
                "name": n.bundle.package,
                "channel": n.channel,
                "startingCSV": n.bundle.name,
                // OLM installs them all in one plan: each waits for approval when the
                // dependent's does.
                "installPlanApproval": if sub.spec.manual() { olm::MANUAL } else { olm::AUTOMATIC },
            },
        });
        objects::prepare_create(&mut obj, &ns);
        match store.create(&Key::new(&SUBSCRIPTION.store_key(), &ns, &n.name), obj).await {
            Ok(_) => note(
                events,
                &about,
                "DependencySubscribed",
                &format!(
                    "created Subscription {:?} for {} (it requires {}): installs {} from {}/{}, channel {:?}",
                    n.name,
                    n.needed_by.1,
                    n.meets.join(" and "),
                    n.bundle.name,
                    n.catalog.0,
                    n.catalog.1,
                    n.channel
                ),
            ),
            // Made by an earlier pass whose status write lost a race: the same thing.
            Err(StoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut cycle: Vec<String> = Vec::new();
    let mut waits: Vec<String> = unmet
        .iter()
        .zip(&ways)
        .filter_map(|(dep, way)| match way {
            Way::Subscribed { name, .. } if waits_for(at, name, bundle) => {
                cycle.push(format!("Subscription {name:?} meets {dep} and waits for {} itself", bundle.name));
                None
            }
            Way::Subscribed { name, detail } => Some(format!("{dep} from Subscription {name:?} ({detail})")),
            Way::New(k) if planned[*k].needs_root => {
                let n = &planned[*k];
                cycle.push(format!(
                    "{} (Subscription {:?}) meets {dep} and needs {} in turn",
                    n.bundle.name, n.name, bundle.name
                ));
                None
            }
            Way::New(k) => {
                Some(format!("{dep} from Subscription {:?} (installing {})", planned[*k].name, planned[*k].bundle.name))
            }
            // Not a dependency of the bundle itself: only one of the chain's.
            Way::Root | Way::Chain(_) => None,
            // A blocked resolution returned above.
            Way::Stuck { .. } | Way::Missing | Way::TooCostly | Way::Unmet { .. } => None,
        })
        .collect();
    if waits.is_empty() && !cycle.is_empty() {
        return Ok(Outcome::Cycle(format!(
            "{} is installed without waiting for its dependencies, which need it in turn (a dependency cycle, which \
             OLM installs in one plan): {}",
            bundle.name,
            cycle.join("; ")
        )));
    }
    let deeper: Vec<String> = planned
        .iter()
        .filter(|n| n.needed_by.0 != sub.metadata.name)
        .map(|n| format!("{} for {} from Subscription {:?}", n.bundle.name, n.needed_by.1, n.name))
        .collect();
    if !deeper.is_empty() {
        waits.push(format!("and what those need: {}", deeper.join(", ")));
    }
    Ok(Outcome::Waiting(format!("{} waits for its dependencies to be installed: {}", bundle.name, waits.join("; "))))
}

/// Whether Subscription `name` of the namespace waits for its dependencies to be installed
/// and `bundle` meets every one of them that is not installed: the two wait for each other.
fn waits_for(at: Context<'_>, name: &str, bundle: &Bundle) -> bool {
    let Some(s) = at.others.iter().find(|s| s.metadata.name == name) else { return false };
    let status = s.status.clone().unwrap_or_default();
    let waiting = find_condition(&status.conditions, olm::INSTALL_PLAN_PENDING)
        .is_some_and(|c| c.reason == super::subscriptions::WAITING_FOR_DEPENDENCIES);
    let Some(theirs) = at
        .catalogs
        .get(&(s.spec.source_namespace.clone(), s.spec.source.clone()))
        .and_then(|v| v.catalog.as_deref())
        .and_then(|c| c.bundle(&s.spec.name, &status.current_csv))
    else {
        return false;
    };
    let unmet = olm::unmet_of(theirs.dependencies(), at.installed);
    waiting && !unmet.is_empty() && unmet.iter().all(|d| d.met_by(bundle))
}

/// What a resolution of a bundle's dependencies reads.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub catalogs: &'a Snapshot,
    /// The catalogs dependencies are looked for in, in order ([`search_order`]).
    pub searched: &'a [(&'a (String, String), &'a Catalog)],
    /// The namespace's Subscriptions (the one resolving among them or not).
    pub others: &'a [Subscription],
    /// The namespace's installed operators.
    pub installed: &'a [Bundle],
}

/// What the resolutions of the bundles one Subscription tries in turn share: each dependency's
/// candidates, found once (a channel's entries often need the same things, and finding what
/// meets a CEL rule runs it over every bundle of the catalogs).
pub type Memo<'a> = std::cell::RefCell<Found<'a>>;

/// The way to meet each of `unmet` (dependencies of `bundle`, which `sub` would install) and
/// the Subscriptions that would have to be created, what each needs first; or, when one cannot
/// be met at any depth, why ("bundle X requires D: why; ..."), each dependency named.
fn resolve<'a>(
    sub: &Subscription,
    bundle: &Bundle,
    unmet: &[Dependency],
    at: Context<'a>,
    memo: &Memo<'a>,
) -> Result<(Vec<Way>, Vec<Planned<'a>>), String> {
    let found = memo.take();
    let mut resolver =
        Resolver::new(at.installed, at.others, at.catalogs, at.searched, (&sub.metadata.name, bundle), found);
    let ways = resolver.ways(unmet);
    memo.replace(resolver.found());
    let planned = resolver.planned;
    if ways.iter().all(Way::settles) {
        return Ok((ways, planned));
    }
    let shown: Vec<String> = at.searched.iter().map(|(id, _)| format!("{}/{}", id.0, id.1)).collect();
    let why: Vec<String> = unmet
        .iter()
        .zip(&ways)
        .map(|(dep, way)| match way {
            Way::Missing => format!("{dep}: no bundle of the catalogs {} provides it", shown.join(", ")),
            Way::TooCostly => format!("{dep}: {}", closure::too_costly()),
            Way::Unmet { first, why, others } => format!("{dep}: {}", closure::unmet_text(first, why, *others)),
            Way::Stuck { name, package, detail } => format!(
                "{dep}: Subscription {name:?} of this namespace (package {package:?}) is the one to meet it, but \
                 {detail}; change its channel to one that reaches a bundle that meets it"
            ),
            Way::Subscribed { name, detail } => format!("{dep}: Subscription {name:?} will meet it ({detail})"),
            Way::Root => format!("{dep}: {} meets it", bundle.name),
            Way::Chain(name) => format!("{dep}: {name} meets it"),
            Way::New(k) => format!(
                "{dep}: {} of {}/{} meets it",
                planned[*k].bundle.name, planned[*k].catalog.0, planned[*k].catalog.1
            ),
        })
        .collect();
    Err(format!("bundle {} requires {}", bundle.name, why.join("; ")))
}

/// Whether `bundle`, which `sub` would install, can be installed with everything it needs, at
/// any depth (nothing is created): why not, when it cannot. An upgrade candidate that cannot be
/// is passed over for the next one, as OLM's solver passes over a bundle it cannot satisfy;
/// `memo` is shared by the candidates of one resolution.
pub fn installable<'a>(sub: &Subscription, bundle: &Bundle, at: Context<'a>, memo: &Memo<'a>) -> Result<(), String> {
    let unmet = olm::unmet_of(bundle.dependencies(), at.installed);
    if unmet.is_empty() {
        return Ok(());
    }
    resolve(sub, bundle, &unmet, at, memo).map(|_| ())
}

/// The catalogs a dependency is looked for in, in order: the subscription's own, then the other
/// healthy ones of its own namespace, of its catalog's namespace and of the global catalog
/// namespace `global`, the higher priority first, then those of the subscription's namespace,
/// then by namespace and name.
pub fn search_order<'a>(
    catalogs: &'a Snapshot,
    sub: &Subscription,
    global: Option<&str>,
) -> Vec<(&'a (String, String), &'a Catalog)> {
    let own = (sub.spec.source_namespace.clone(), sub.spec.source.clone());
    let ns = sub.metadata.namespace.clone().unwrap_or_default();
    let searched = |id: &(String, String)| *id == own || id.0 == own.0 || id.0 == ns || Some(id.0.as_str()) == global;
    let mut out: Vec<(&(String, String), &Catalog, i64)> = catalogs
        .iter()
        .filter(|(id, v)| v.healthy && searched(id))
        .filter_map(|(id, v)| v.catalog.as_deref().map(|c| (id, c, v.priority)))
        .collect();
    out.sort_by(|a, b| {
        (*b.0 == own)
            .cmp(&(*a.0 == own))
            .then(b.2.cmp(&a.2))
            .then_with(|| (b.0 .0 == ns).cmp(&(a.0 .0 == ns)))
            .then_with(|| a.0.cmp(b.0))
    });
    out.into_iter().map(|(id, c, _)| (id, c)).collect()
}

/// OLM's name for a dependency's Subscription, `<package>-<channel>-<catalog>-<catalog
/// namespace>`, made a valid object name (lower case; anything but letters, digits, `-` and
/// `.` becomes `-`; at most 253 characters).
pub(super) fn subscription_name(package: &str, channel: &str, catalog: &str, catalog_ns: &str) -> String {
    let joined = format!("{package}-{channel}-{catalog}-{catalog_ns}").to_ascii_lowercase();
    let cleaned: String =
        joined.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' }).collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut name: String = trimmed.chars().take(253).collect();
    while name.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        name.pop();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependencys_subscription_is_named_as_olm_names_it_and_valid() {
        assert_eq!(
            subscription_name("base-tuning", "stable", "fleet", "aloft-marketplace"),
            "base-tuning-stable-fleet-aloft-marketplace"
        );
        assert_eq!(subscription_name("Base", "stable_V1.2", "c", "ns"), "base-stable-v1.2-c-ns");
        let long = subscription_name(&"p".repeat(300), "s", "c", "n");
        assert_eq!(long.len(), 253);
        assert_eq!(subscription_name("_x", "y_", "c", "n."), "x-y--c-n");
    }

    #[test]
    fn dependencies_are_looked_for_in_the_own_catalog_first_then_by_priority() {
        use super::super::catalogs::View;
        let view = |healthy: bool, priority: i64| View {
            catalog: Some(Arc::new(Catalog::default())),
            healthy,
            failure: None,
            priority,
        };
        let id = |ns: &str, name: &str| (ns.to_string(), name.to_string());
        let catalogs: Snapshot = [
            (id("olm", "fleet"), view(true, -5)),
            (id("olm", "a"), view(true, 0)),
            (id("olm", "b"), view(true, 10)),
            (id("olm", "broken"), view(false, 100)),
            (id("operators", "c"), view(true, 0)),
            (id("elsewhere", "d"), view(true, 100)),
        ]
        .into_iter()
        .collect();
        let sub: Subscription = serde_json::from_value(json!({
            "metadata": {"name": "tuned", "namespace": "operators"},
            "spec": {"source": "fleet", "sourceNamespace": "olm", "name": "tuned-exporter"},
        }))
        .unwrap();
        let order = |sub: &Subscription, global: Option<&str>| -> Vec<String> {
            search_order(&catalogs, sub, global).iter().map(|(id, _)| format!("{}/{}", id.0, id.1)).collect()
        };
        // Equal priorities: the subscription's namespace first ("operators/c" before "olm/a").
        assert_eq!(order(&sub, None), ["olm/fleet", "olm/b", "operators/c", "olm/a"]);
        // "olm" is global already as the catalog's namespace; another global namespace adds its
        // catalogs by priority, a broken one still left out.
        assert_eq!(order(&sub, Some("olm")), ["olm/fleet", "olm/b", "operators/c", "olm/a"]);
        assert_eq!(order(&sub, Some("elsewhere")), ["olm/fleet", "elsewhere/d", "olm/b", "operators/c", "olm/a"]);
        // A subscription whose catalog is in its own namespace sees the global catalogs too,
        // after its own namespace's at equal priority; without a global namespace, only its own.
        let local: Subscription = serde_json::from_value(json!({
            "metadata": {"name": "tuned", "namespace": "operators"},
            "spec": {"source": "c", "sourceNamespace": "operators", "name": "tuned-exporter"},
        }))
        .unwrap();
        assert_eq!(order(&local, Some("olm")), ["operators/c", "olm/b", "olm/a", "olm/fleet"]);
        assert_eq!(order(&local, None), ["operators/c"]);
    }
}
