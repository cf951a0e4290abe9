//! Subscriptions: what to install next, and the InstallPlan that installs it.
//!
//! OLM v0's choice (`aloft_api::catalog`): a fresh install takes the head of the channel (or
//! `startingCSV`), or, when the head cannot be installed with everything it needs, the entry
//! nearest it that can; an installed bundle moves to the entry that replaces, skips or
//! skip-ranges it, nearest the head, of those that can be installed, and stays when none can.
//! One plan at a time per subscription: a plan that waits for approval or installs holds the
//! next resolution back; a failed plan stays failed until the catalog offers another bundle
//! (never retried in a loop), and deleting the plan asks for a new one.
//! A bundle that needs operators the namespace lacks waits for them: [`super::dependencies`]
//! subscribes to them.

use super::catalogs::Snapshot;
use super::dependencies::{self, Outcome};
use super::{involved, key_of, note, write_if_changed};
use crate::controllers::events::Recorder;
use crate::resources::{CLUSTER_SERVICE_VERSION, INSTALL_PLAN, SUBSCRIPTION};
use crate::server::objects;
use crate::store::{Key, Store, StoreError};
use aloft_api::catalog::{Bundle, Catalog, Dependency};
use aloft_api::meta::{find_condition, set_condition, Condition};
use aloft_api::olm::{self, CatalogHealth, InstallPlan, PlanReference, Subscription, SubscriptionStatus};
use serde_json::{json, Value};
use std::sync::Arc;

/// The Event reason of a bundle installed without waiting for its dependencies, because they
/// need it in turn ([`Outcome::Cycle`]).
pub const DEPENDENCY_CYCLE: &str = "DependencyCycle";

/// The Event reason of a new Subscription that takes an operator no Subscription holds as its
/// installed one ([`freestanding`]).
pub const ADOPTED: &str = "AdoptedCSV";

/// The `InstallPlanPending` reason of a subscription whose bundle waits for the Subscriptions
/// of its dependencies (OLM would put them in the same plan; aloft installs them first).
pub const WAITING_FOR_DEPENDENCIES: &str = "WaitingForDependencies";

/// aloft's Subscription condition (and Event reason) for an upgrade held back, or a bundle
/// taken that is older than the channel's preferred one, because the preferred one would leave
/// another installed operator's dependency unmet, or cannot be installed. OLM's solver makes
/// the same choice silently; aloft says why.
pub const UPGRADE_HELD: &str = "UpgradeHeld";
/// [`UPGRADE_HELD`]'s reason when an upgrade that could be installed would break a dependent.
pub const REQUIRED_BY_DEPENDENTS: &str = "RequiredByDependents";
/// [`UPGRADE_HELD`]'s reason when no upgrade can be installed: each needs, at some depth, what
/// no catalog provides. OLM's solver keeps the installed bundle then, and says nothing.
pub const NOT_INSTALLABLE: &str = "NotInstallable";

/// The most bundles of a channel one resolution considers for a Subscription (each may take a
/// resolution of its whole chain of dependencies), so no catalog can keep the OLM controller
/// busy; past it, the preferred one is resolved and fails, saying what it lacks.
const MAX_CANDIDATES: usize = 64;

/// Resolve every Subscription; `global` is the global catalog namespace, whose catalogs a
/// dependency is looked for in too.
pub async fn reconcile(
    store: &Arc<dyn Store>,
    catalogs: &Snapshot,
    global: Option<&str>,
    events: &Recorder,
) -> Result<(), StoreError> {
    for raw in store.list(&SUBSCRIPTION.store_key(), None).await?.items {
        let Ok(sub) = serde_json::from_value::<Subscription>(raw.clone()) else { continue };
        if sub.metadata.deletion_timestamp.is_some() {
            continue;
        }
        sync(store, catalogs, global, events, &raw, sub).await?;
    }
    Ok(())
}

async fn sync(
    store: &Arc<dyn Store>,
    catalogs: &Snapshot,
    global: Option<&str>,
    events: &Recorder,
    raw: &Value,
    sub: Subscription,
) -> Result<(), StoreError> {
    let now = objects::now();
    let ns = sub.metadata.namespace.clone().unwrap_or_default();
    let name = sub.metadata.name.clone();
    let spec = &sub.spec;
    let mut status = sub.status.clone().unwrap_or_default();
    let about = involved("Subscription", &ns, &name);

    // The catalog's health.
    let id = (spec.source_namespace.clone(), spec.source.clone());
    let view = catalogs.get(&id);
    let healthy = view.is_some_and(|v| v.healthy);
    let target_ref = PlanReference {
        api_version: olm::API_VERSION.into(),
        kind: "CatalogSource".into(),
        name: spec.source.clone(),
        namespace: spec.source_namespace.clone(),
        ..Default::default()
    };
    let was_healthy = status.catalog_health.first().map(|h| h.healthy);
    if was_healthy != Some(healthy) || status.catalog_health.len() != 1 {
        status.catalog_health = vec![CatalogHealth {
            catalog_source_ref: target_ref,
            healthy,
            last_updated: Some(now.clone()),
            ..Default::default()
        }];
    }
    let unhealthy = match view {
        None => Some(format!("targeted catalogsource {}/{} missing", id.0, id.1)),
        Some(v) if !v.healthy => Some(format!(
            "targeted catalogsource {}/{} unhealthy: {}",
            id.0,
            id.1,
            v.failure.as_deref().unwrap_or("not read yet")
        )),
        Some(_) => None,
    };
    set_condition(
        &mut status.conditions,
        match &unhealthy {
            Some(m) => Condition::new(olm::CATALOG_SOURCES_UNHEALTHY, "True", "UnhealthyCatalogSourceFound", m),
            None => Condition::new(
                olm::CATALOG_SOURCES_UNHEALTHY,
                "False",
                "AllCatalogSourcesHealthy",
                "all available catalogsources are healthy",
            ),
        },
        &now,
    );
    let catalog = view.and_then(|v| v.catalog.clone());

    // The plan in flight, if any.
    let mut hold = false;
    let mut failed_for: Option<String> = None;
    if let Some(r) = status.install_plan_ref.clone() {
        let key = Key::new(&INSTALL_PLAN.store_key(), &ns, &r.name);
        let plan = store.get(&key).await?.and_then(|s| serde_json::from_value::<InstallPlan>((*s.object).clone()).ok());
        match plan {
            None => {
                // Deleted: resolve again (a new plan for whatever is next).
                status.install_plan_ref = None;
                remove_condition(&mut status.conditions, olm::INSTALL_PLAN_PENDING);
                remove_condition(&mut status.conditions, olm::INSTALL_PLAN_FAILED);
            }
            Some(plan) => {
                let phase = plan.status.as_ref().map(|s| s.phase.clone()).unwrap_or_default();
                let csv = plan.spec.cluster_service_version_names.first().cloned().unwrap_or_default();
                match phase.as_str() {
                    olm::PLAN_COMPLETE => {
                        remove_condition(&mut status.conditions, olm::INSTALL_PLAN_PENDING);
                        remove_condition(&mut status.conditions, olm::INSTALL_PLAN_FAILED);
                        if status.installed_csv != csv {
                            note(events, &about, "InstallPlanComplete", &format!("installed {csv} ({})", r.name));
                        }
                        status.installed_csv = csv;
                    }
                    olm::PLAN_FAILED => {
                        remove_condition(&mut status.conditions, olm::INSTALL_PLAN_PENDING);
                        let message = plan.status.as_ref().map(|s| s.message.clone()).unwrap_or_default();
                        set_condition(
                            &mut status.conditions,
                            Condition::new(olm::INSTALL_PLAN_FAILED, "True", "InstallComponentFailed", &message),
                            &now,
                        );
                        status.state = olm::UPGRADE_FAILED.into();
                        failed_for = Some(csv);
                    }
                    phase => {
                        let reason = if phase.is_empty() { olm::PLAN_INSTALLING } else { phase };
                        set_condition(
                            &mut status.conditions,
                            Condition::new(olm::INSTALL_PLAN_PENDING, "True", reason, ""),
                            &now,
                        );
                        status.state = olm::UPGRADE_PENDING.into();
                        hold = true;
                    }
                }
            }
        }
    }
    // An installed CSV deleted by hand is installed again while the subscription stays (OLM's
    // rule: delete the Subscription first to uninstall).
    if !status.installed_csv.is_empty() && !hold {
        let key = Key::new(&CLUSTER_SERVICE_VERSION.store_key(), &ns, &status.installed_csv);
        if store.get(&key).await?.is_none() {
            note(
                events,
                &about,
                "InstalledCSVGone",
                &format!(
                    "{} was deleted; installing again (delete the Subscription first to uninstall)",
                    status.installed_csv
                ),
            );
            status.installed_csv.clear();
            status.install_plan_ref = None;
            remove_condition(&mut status.conditions, olm::INSTALL_PLAN_PENDING);
            remove_condition(&mut status.conditions, olm::INSTALL_PLAN_FAILED);
        }
    }

    if let (Some(catalog), false) = (catalog, hold) {
        let at = Resolution { catalog: &catalog, catalogs, global, failed_for: failed_for.as_deref(), now: &now };
        resolve(store, events, &sub, at, &mut status).await?;
    }
    status.last_updated = status.last_updated.or_else(|| Some(now.clone()));
    let mut next = raw.clone();
    next["status"] = serde_json::to_value(&status).unwrap_or(Value::Null);
    if next != *raw {
        next["status"]["lastUpdated"] = json!(now);
    }
    write_if_changed(store, &key_of(&SUBSCRIPTION, raw), raw, next).await.map(|_| ())
}

/// What a resolution reads besides the subscription.
#[derive(Clone, Copy)]
struct Resolution<'a> {
    /// The subscription's catalog.
    catalog: &'a Catalog,
    /// Every catalog, where dependencies are looked for.
    catalogs: &'a Snapshot,
    /// The global catalog namespace, whose catalogs dependencies are looked for in too.
    global: Option<&'a str>,
    /// The bundle whose plan failed, if the last one did.
    failed_for: Option<&'a str>,
    now: &'a str,
}

/// Choose the next bundle, subscribe to what it depends on, and make its plan; the conditions
/// and state say the outcome.
async fn resolve(
    store: &Arc<dyn Store>,
    events: &Recorder,
    sub: &Subscription,
    at: Resolution<'_>,
    status: &mut SubscriptionStatus,
) -> Result<(), StoreError> {
    let Resolution { catalog, catalogs, global, failed_for, now } = at;
    let spec = &sub.spec;
    let ns = sub.metadata.namespace.clone().unwrap_or_default();
    let about = involved("Subscription", &ns, &sub.metadata.name);
    let channel = (!spec.channel.is_empty()).then_some(spec.channel.as_str());
    let mut held: Option<(&str, String)> = None;
    let subs = namespace_subscriptions(store, &ns).await?;
    if let Some(why) = package_held(sub, &subs) {
        deprecations(catalog, sub, status, now);
        resolution_failed(events, &about, status, &format!("constraints not satisfiable: {why}"), now);
        return Ok(());
    }
    // The namespace's installed operators, read once a resolution when it needs them.
    let mut installed: Option<Vec<Bundle>> = None;
    if status.installed_csv.is_empty() {
        let csvs = current_csvs(store, &ns).await?;
        let adoptable = freestanding(&spec.name, &csvs, &subs, failed_for);
        installed = Some(csvs.iter().map(|c| olm::installed_bundle(&c.metadata.name, &c.metadata)).collect());
        match adoptable.as_slice() {
            [] => {}
            [one] => {
                note(
                    events,
                    &about,
                    ADOPTED,
                    &format!(
                        "{one} of package {} is installed and no Subscription holds it: this Subscription takes it \
                         as installed, and upgrades it along {}",
                        spec.name,
                        if spec.channel.is_empty() {
                            "the package's default channel".to_string()
                        } else {
                            format!("channel {:?}", spec.channel)
                        }
                    ),
                );
                status.installed_csv = one.clone();
                status.current_csv = one.clone();
            }
            many => {
                deprecations(catalog, sub, status, now);
                let message = format!(
                    "constraints not satisfiable: clusterserviceversions {} of package {} exist and are not referenced \
                     by a subscription, and there can be only one operator from package {} in a namespace; delete \
                     all but one of them, and this Subscription takes that one",
                    many.join(", "),
                    spec.name,
                    spec.name
                );
                resolution_failed(events, &about, status, &message, now);
                return Ok(());
            }
        }
    }
    // Why the bundle chosen cannot be installed beside the namespace's operators, when none of
    // the candidates can and this is why the preferred one cannot.
    let mut api_refusal: Option<String> = None;
    let chosen = if status.installed_csv.is_empty() {
        let starting = (!spec.starting_csv.is_empty()).then_some(spec.starting_csv.as_str());
        let coming = coming_bundles(&subs, &sub.metadata.name, catalogs);
        let mut dependents = fresh_targets(&subs, &sub.metadata.name, catalogs);
        dependents.extend(coming.iter().cloned());
        let needed = needed_of(sub, &dependents, catalogs);
        match catalog.install_candidates(&spec.name, channel, starting) {
            // The preferred bundle needs nothing, provides no API and nothing waits for this
            // Subscription: it is the one, with nothing to read.
            Ok(candidates)
                if needed.is_empty()
                    && candidates
                        .first()
                        .is_none_or(|b| b.dependencies().is_empty() && b.provided_gvks().is_empty()) =>
            {
                Ok(candidates.first().copied())
            }
            Ok(candidates) => {
                let listed = installed_once(&mut installed, store, &ns).await?;
                // What an installed operator meets already is not this Subscription's to meet.
                let needed: Vec<&(String, Dependency)> =
                    needed.iter().filter(|(_, d)| !listed.iter().any(|b| d.met_by(b))).collect();
                let searched = dependencies::search_order(catalogs, sub, global);
                let at = dependencies::Context { catalogs, searched: &searched, others: &subs, installed: listed };
                let memo = dependencies::Memo::default();
                let can = |to: &Bundle| {
                    sole_provider(to, listed, &coming)?;
                    if let Some((who, _)) = needed.iter().find(|(_, d)| !d.met_by(to)) {
                        return Err(format!("{who}, which it does not meet"));
                    }
                    dependencies::installable(sub, to, at, &memo)
                };
                let first = first_installable(&candidates, &can);
                if let Some(message) = &first.passed_over {
                    note(events, &about, UPGRADE_HELD, message);
                }
                api_refusal = first.chosen.and_then(|b| sole_provider(b, listed, &coming).err());
                Ok(first.chosen)
            }
            Err(e) => Err(e),
        }
    } else {
        // A CSV the catalog no longer has (or never had: one taken as installed) is placed by
        // the version its own properties give, so a skipRange can still cover it.
        let version = match catalog.bundle(&spec.name, &status.installed_csv) {
            Some(b) => b.version(),
            None => {
                let listed = installed_once(&mut installed, store, &ns).await?;
                listed.iter().find(|b| b.name == status.installed_csv).and_then(Bundle::version)
            }
        };
        match catalog.upgrade_candidates(&spec.name, channel, &status.installed_csv, version.as_ref()) {
            Ok(candidates) if !candidates.is_empty() => {
                let listed = installed_once(&mut installed, store, &ns).await?;
                let coming = coming_bundles(&subs, &sub.metadata.name, catalogs);
                // Their dependencies hold an upgrade back as the chosen ones' do; only the
                // chosen ones count as providers of an API (two new Subscriptions would each
                // refuse the other's).
                let mut dependents = coming.clone();
                dependents.extend(fresh_targets(&subs, &sub.metadata.name, catalogs));
                let from = status.installed_csv.clone();
                let next = |to: &Bundle, broken: &[olm::Broken]| followers(&from, to, broken, listed, &subs, catalogs);
                let searched = dependencies::search_order(catalogs, sub, global);
                let at = dependencies::Context { catalogs, searched: &searched, others: &subs, installed: listed };
                let memo = dependencies::Memo::default();
                let can = |to: &Bundle| {
                    sole_provider(to, listed, &coming)?;
                    dependencies::installable(sub, to, at, &memo)
                };
                let allowed = allowed_upgrade(&status.installed_csv, &candidates, (listed, &dependents), &next, &can);
                if let Some(message) = &allowed.passed_over {
                    note(events, &about, UPGRADE_HELD, message);
                }
                if let Some(message) = &allowed.followed_by {
                    note(events, &about, "UpgradeBeforeDependents", message);
                }
                held = allowed.passed_over.filter(|_| allowed.chosen.is_none()).map(|m| (allowed.reason, m));
                Ok(allowed.chosen)
            }
            other => other.map(|c| c.into_iter().next()),
        }
    };
    match &held {
        Some((reason, message)) => {
            set_condition(&mut status.conditions, Condition::new(UPGRADE_HELD, "True", reason, message), now);
        }
        None => remove_condition(&mut status.conditions, UPGRADE_HELD),
    }
    deprecations(catalog, sub, status, now);
    let failed =
        |status: &mut SubscriptionStatus, message: &str| resolution_failed(events, &about, status, message, now);
    if let Some(why) = api_refusal {
        let more = "nothing is installed for it, and it goes on by itself once the other is uninstalled";
        failed(status, &format!("constraints not satisfiable: {why}; {more}"));
        return Ok(());
    }
    let chosen = match chosen {
        Ok(c) => c,
        Err(e) => {
            let message = format!(
                "constraints not satisfiable: subscription {} requires {}/{}/{}: {e}",
                sub.metadata.name, spec.source_namespace, spec.source, spec.name
            );
            failed(status, &message);
            return Ok(());
        }
    };
    if let Some(bundle) = chosen {
        let (unmet, installed) = unmet_dependencies(store, &ns, bundle, installed).await?;
        if !unmet.is_empty() {
            let searched = dependencies::search_order(catalogs, sub, global);
            let at = dependencies::Context { catalogs, searched: &searched, others: &subs, installed: &installed };
            match dependencies::arrange(store, events, sub, bundle, &unmet, at).await? {
                Outcome::Unsatisfiable(message) => {
                    failed(status, &message);
                    return Ok(());
                }
                Outcome::Waiting(message) => {
                    set_condition(&mut status.conditions, Condition::new(olm::RESOLUTION_FAILED, "False", "", ""), now);
                    set_condition(
                        &mut status.conditions,
                        Condition::new(olm::INSTALL_PLAN_PENDING, "True", WAITING_FOR_DEPENDENCIES, message),
                        now,
                    );
                    status.current_csv = bundle.name.clone();
                    status.state = olm::UPGRADE_PENDING.into();
                    return Ok(());
                }
                // Planned now, below.
                Outcome::Cycle(message) => note(events, &about, DEPENDENCY_CYCLE, &message),
            }
        }
    }
    set_condition(&mut status.conditions, Condition::new(olm::RESOLUTION_FAILED, "False", "", ""), now);
    if find_condition(&status.conditions, olm::INSTALL_PLAN_PENDING)
        .is_some_and(|c| c.reason == WAITING_FOR_DEPENDENCIES)
    {
        remove_condition(&mut status.conditions, olm::INSTALL_PLAN_PENDING);
    }
    let Some(bundle) = chosen else {
        // Nothing newer: the installed bundle is the latest this channel knows.
        status.current_csv = status.installed_csv.clone();
        status.state = olm::AT_LATEST_KNOWN.into();
        return Ok(());
    };
    status.current_csv = bundle.name.clone();
    if failed_for == Some(bundle.name.as_str()) {
        // Its plan failed: not tried again until the catalog offers something else.
        return Ok(());
    }
    let replaces = (!status.installed_csv.is_empty()).then_some(status.installed_csv.as_str());
    let plan = super::plans::create_for(store, sub, bundle, replaces, now).await?;
    note(
        events,
        &about,
        "InstallPlanCreated",
        &format!(
            "{} installs {}{}",
            plan.name,
            bundle.name,
            if spec.manual() { "; it waits for approval (spec.approved: true)" } else { "" }
        ),
    );
    remove_condition(&mut status.conditions, olm::INSTALL_PLAN_FAILED);
    set_condition(&mut status.conditions, Condition::new(olm::INSTALL_PLAN_PENDING, "True", &plan.phase, ""), now);
    status.state = olm::UPGRADE_PENDING.into();
    status.install_plan_ref = Some(PlanReference {
        api_version: olm::API_VERSION.into(),
        kind: "InstallPlan".into(),
        name: plan.name,
        namespace: ns,
        uid: plan.uid,
        ..Default::default()
    });
    Ok(())
}

/// Set `ResolutionFailed` with `message`, and say it in a Warning Event when it is new.
fn resolution_failed(
    events: &Recorder,
    about: &crate::controllers::events::Involved,
    status: &mut SubscriptionStatus,
    message: &str,
    now: &str,
) {
    if set_condition(
        &mut status.conditions,
        Condition::new(olm::RESOLUTION_FAILED, "True", "ConstraintsNotSatisfiable", message),
        now,
    ) {
        super::warn(events, about, "ResolutionFailed", message);
    }
}

/// Refuses `to` when an operator of another package, installed or chosen by another
/// Subscription, provides one of its APIs already (see [`olm::api_provided_already`]), saying
/// so with OLM's rule.
fn sole_provider(to: &Bundle, installed: &[Bundle], coming: &[Bundle]) -> Result<(), String> {
    match olm::api_provided_already(to, installed.iter().chain(coming)) {
        Some(why) => Err(format!("{why}, and a namespace has one provider of an API")),
        None => Ok(()),
    }
}

/// Another Subscription of the namespace on the same package that holds it, in a few words:
/// OLM's solver allows one operator of a package in a namespace. One holds it when it has
/// installed a bundle, or, when neither has, when it was created first (then by name), so of
/// two new ones exactly one goes on. (OLM fails the whole namespace's resolution instead, the
/// installed operator's Subscription too.)
fn package_held(sub: &Subscription, subs: &[Subscription]) -> Option<String> {
    let installed = |s: &Subscription| s.status.as_ref().map(|st| st.installed_csv.clone()).unwrap_or_default();
    let created = |s: &Subscription| (s.metadata.creation_timestamp.clone(), s.metadata.name.clone());
    let mine = installed(sub);
    subs.iter().filter(|o| o.metadata.name != sub.metadata.name && o.spec.name == sub.spec.name).find_map(|o| {
        let theirs = installed(o);
        let holds = !theirs.is_empty() || (mine.is_empty() && created(o) < created(sub));
        holds.then(|| {
            let how = if theirs.is_empty() { "created first".to_string() } else { format!("installed {theirs}") };
            format!(
                "Subscription {:?} of this namespace holds package {:?} ({how}), and there can be only one operator \
                 from package {} in a namespace; delete one of the two Subscriptions",
                o.metadata.name, sub.spec.name, sub.spec.name
            )
        })
    })
}

/// The dependencies of `bundle` that no CSV installed in `namespace` meets (see
/// [`olm::unmet_dependencies`]), and those CSVs' bundles when there are any unmet (what is
/// needed in turn is checked against them); `installed` when this resolution read them already
/// (see [`installed_bundles`]).
async fn unmet_dependencies(
    store: &Arc<dyn Store>,
    namespace: &str,
    bundle: &Bundle,
    installed: Option<Vec<Bundle>>,
) -> Result<(Vec<Dependency>, Vec<Bundle>), StoreError> {
    let dependencies = bundle.dependencies();
    if dependencies.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let installed = match installed {
        Some(i) => i,
        None => installed_bundles(store, namespace).await?,
    };
    Ok((olm::unmet_of(dependencies, &installed), installed))
}

/// The namespace's installed operators, read into `slot` the first time a resolution needs
/// them.
async fn installed_once<'s>(
    slot: &'s mut Option<Vec<Bundle>>,
    store: &Arc<dyn Store>,
    namespace: &str,
) -> Result<&'s [Bundle], StoreError> {
    if slot.is_none() {
        *slot = Some(installed_bundles(store, namespace).await?);
    }
    Ok(slot.as_deref().unwrap_or(&[]))
}

/// The operators installed in `namespace`, as their CSVs' properties say (see
/// [`current_csvs`]).
async fn installed_bundles(store: &Arc<dyn Store>, namespace: &str) -> Result<Vec<Bundle>, StoreError> {
    Ok(current_csvs(store, namespace)
        .await?
        .iter()
        .map(|c| olm::installed_bundle(&c.metadata.name, &c.metadata))
        .collect())
}

/// The CSVs of `namespace` that are not on their way out: those being deleted, and those
/// another CSV replaces (kept, Replacing, only until their successor is in), are left out.
async fn current_csvs(store: &Arc<dyn Store>, namespace: &str) -> Result<Vec<olm::ClusterServiceVersion>, StoreError> {
    let csvs: Vec<olm::ClusterServiceVersion> = store
        .list(&CLUSTER_SERVICE_VERSION.store_key(), Some(namespace))
        .await?
        .items
        .into_iter()
        .filter_map(|raw| serde_json::from_value(raw).ok())
        .collect();
    let replaced: Vec<String> =
        csvs.iter().map(|c| c.spec_str("replaces").to_string()).filter(|r| !r.is_empty()).collect();
    Ok(csvs
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && !replaced.contains(&c.metadata.name))
        .collect())
}

/// The CSVs of `package` among `csvs` that no Subscription of `subs` has installed, by name:
/// an operator left behind when its Subscription was deleted, or one installed by hand. OLM's
/// solver requires such a CSV in every solution ("clusterserviceversion X exists and is not
/// referenced by a subscription"), so a new Subscription of its package fails until someone
/// deletes it, the running operator with it. aloft's new Subscription takes it as its
/// installed CSV instead, and upgrades it from there. The CSV of the Subscription's own
/// failed plan (`failed_for`) is not taken: that plan failed.
fn freestanding(
    package: &str,
    csvs: &[olm::ClusterServiceVersion],
    subs: &[Subscription],
    failed_for: Option<&str>,
) -> Vec<String> {
    if package.is_empty() {
        return Vec::new();
    }
    let held = |name: &str| subs.iter().any(|s| s.status.as_ref().is_some_and(|st| st.installed_csv == name));
    let mut names: Vec<String> = csvs
        .iter()
        .map(|c| &c.metadata)
        .filter(|m| !held(&m.name) && failed_for != Some(m.name.as_str()))
        .filter(|m| olm::package_of(&olm::installed_bundle(&m.name, m)) == package)
        .map(|m| m.name.clone())
        .collect();
    names.sort();
    names
}

/// The Subscriptions of `namespace`, those being deleted left out.
pub(super) async fn namespace_subscriptions(
    store: &Arc<dyn Store>,
    namespace: &str,
) -> Result<Vec<Subscription>, StoreError> {
    Ok(store
        .list(&SUBSCRIPTION.store_key(), Some(namespace))
        .await?
        .items
        .into_iter()
        .filter_map(|raw| serde_json::from_value::<Subscription>(raw).ok())
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect())
}

/// When every dependent that moving `from` to `to` would break has an Automatic Subscription
/// whose next bundle works with `to` (its dependencies met once `to` is in), the two move
/// together, as OLM's solver moves them in one plan: `to` first, then each dependent. Returns
/// what each dependent moves to, or `None` when one cannot follow (a Manual one is not
/// followed: it would run against `to` until someone approves its plan).
fn followers(
    from: &str,
    to: &Bundle,
    broken: &[olm::Broken],
    installed: &[Bundle],
    subs: &[Subscription],
    catalogs: &Snapshot,
) -> Option<String> {
    let mut dependents: Vec<&str> = broken.iter().map(|b| b.dependent.as_str()).collect();
    dependents.dedup();
    let mut moves = Vec::new();
    for dependent in dependents {
        let sub = subs.iter().find(|s| s.status.as_ref().is_some_and(|st| st.installed_csv == dependent))?;
        // A dependent whose plans wait for a person would run against `to` until approved.
        if sub.spec.manual() {
            return None;
        }
        let catalog =
            catalogs.get(&(sub.spec.source_namespace.clone(), sub.spec.source.clone()))?.catalog.as_deref()?;
        let channel = (!sub.spec.channel.is_empty()).then_some(sub.spec.channel.as_str());
        let version = catalog.bundle(&sub.spec.name, dependent).and_then(Bundle::version);
        let candidates = catalog.upgrade_candidates(&sub.spec.name, channel, dependent, version.as_ref()).ok()?;
        let next = candidates.into_iter().find(|next| {
            let after: Vec<&Bundle> =
                installed.iter().filter(|b| b.name != from && b.name != dependent).chain([to, *next]).collect();
            next.dependencies().iter().all(|d| after.iter().any(|b| d.met_by(b)))
        })?;
        moves.push(format!("{dependent} (Subscription {:?}) moves to {} after it", sub.metadata.name, next.name));
    }
    Some(moves.join(", "))
}

/// The bundles the namespace's other Subscriptions (all but `own`) have chosen and not yet
/// installed: each one's `currentCSV` when it is not its `installedCSV`, unless its resolution
/// or install failed, read from its catalog. An upgrade must not take away what they are
/// waiting for (see [`olm::broken_by_replacing`]).
fn coming_bundles(subs: &[Subscription], own: &str, catalogs: &Snapshot) -> Vec<Bundle> {
    subs.iter()
        .filter(|s| s.metadata.name != own)
        .filter_map(|s| {
            let status = s.status.as_ref()?;
            let failed = find_condition(&status.conditions, olm::RESOLUTION_FAILED).is_some_and(|c| c.status == "True");
            if status.current_csv.is_empty()
                || status.current_csv == status.installed_csv
                || failed
                || status.state == olm::UPGRADE_FAILED
            {
                return None;
            }
            let catalog =
                catalogs.get(&(s.spec.source_namespace.clone(), s.spec.source.clone()))?.catalog.as_deref()?;
            catalog.bundle(&s.spec.name, &status.current_csv).cloned()
        })
        .collect()
}

/// The bundle each of the namespace's other new Subscriptions (all but `own`: nothing installed
/// or chosen yet, its resolution not failed) would install first, its `startingCSV` or its
/// channel's head, read from its catalog. OLM's solver chooses for every Subscription of a
/// namespace at once, so the one resolved first must not take a bundle another's cannot work
/// with (`oc apply` of an operator's Subscription and its dependency's together).
fn fresh_targets(subs: &[Subscription], own: &str, catalogs: &Snapshot) -> Vec<Bundle> {
    subs.iter()
        .filter(|s| s.metadata.name != own)
        .filter_map(|s| {
            let status = s.status.clone().unwrap_or_default();
            let failed = find_condition(&status.conditions, olm::RESOLUTION_FAILED).is_some_and(|c| c.status == "True");
            if !status.installed_csv.is_empty() || !status.current_csv.is_empty() || failed {
                return None;
            }
            let catalog =
                catalogs.get(&(s.spec.source_namespace.clone(), s.spec.source.clone()))?.catalog.as_deref()?;
            let channel = (!s.spec.channel.is_empty()).then_some(s.spec.channel.as_str());
            let starting = (!s.spec.starting_csv.is_empty()).then_some(s.spec.starting_csv.as_str());
            catalog.install_target(&s.spec.name, channel, starting).ok().cloned()
        })
        .collect()
}

/// The dependencies of `dependents` (bundles other Subscriptions of the namespace are
/// installing, or will install first) that `sub` is the one to meet (on its package, or on an
/// API its package's bundles provide), as "BUNDLE requires DEPENDENCY" with the dependency:
/// a new Subscription takes a bundle that meets them all when one can be installed.
fn needed_of(sub: &Subscription, dependents: &[Bundle], catalogs: &Snapshot) -> Vec<(String, Dependency)> {
    dependents
        .iter()
        .flat_map(|b| b.dependencies().into_iter().map(move |d| (format!("{} requires {d}", b.name), d)))
        .filter(|(_, d)| super::closure::subscribes_to(sub, d, catalogs))
        .collect()
}

/// The bundle a Subscription takes, and what was passed over on the way.
#[derive(Debug, PartialEq)]
pub(crate) struct Allowed<'a> {
    pub(crate) chosen: Option<&'a Bundle>,
    /// Why the preferred candidate is not the one taken (or why none is), when it is not.
    pub(crate) passed_over: Option<String>,
    /// The dependents that move after the chosen one, which they need (or no longer refuse).
    followed_by: Option<String>,
    /// [`UPGRADE_HELD`]'s reason when none is taken: [`NOT_INSTALLABLE`] when not one could be
    /// installed, else [`REQUIRED_BY_DEPENDENTS`].
    reason: &'static str,
}

/// The first of a new Subscription's `candidates` (the preferred first) that can be installed
/// with everything it needs, as OLM's solver takes it; when none can be, the preferred one, so
/// its resolution fails saying what it lacks.
pub(crate) fn first_installable<'a>(
    candidates: &[&'a Bundle],
    installable: &dyn Fn(&Bundle) -> Result<(), String>,
) -> Allowed<'a> {
    let mut reasons = Vec::new();
    for candidate in candidates.iter().take(MAX_CANDIDATES) {
        match installable(candidate) {
            Ok(()) => {
                let passed_over = (!reasons.is_empty()).then(|| {
                    format!("{} is installed instead of {}: {}", candidate.name, candidates[0].name, reasons.join("; "))
                });
                return Allowed { chosen: Some(candidate), passed_over, followed_by: None, reason: NOT_INSTALLABLE };
            }
            Err(why) => reasons.push(format!("{} cannot be installed: {why}", candidate.name)),
        }
    }
    Allowed { chosen: candidates.first().copied(), passed_over: None, followed_by: None, reason: NOT_INSTALLABLE }
}

/// The first of `candidates` (the preferred first) that can be installed and leaves every other
/// installed operator's dependencies met, or whose dependents it would break can all move after
/// it (`follow` says how, or `None`), as OLM's solver, which resolves the namespace as a whole,
/// would choose; with the reason each one before it was passed over. None when none qualifies:
/// the installed bundle stays. At most [`MAX_CANDIDATES`] are considered.
fn allowed_upgrade<'a>(
    from: &str,
    candidates: &[&'a Bundle],
    (installed, coming): (&[Bundle], &[Bundle]),
    follow: &dyn Fn(&Bundle, &[olm::Broken]) -> Option<String>,
    installable: &dyn Fn(&Bundle) -> Result<(), String>,
) -> Allowed<'a> {
    let candidates = &candidates[..candidates.len().min(MAX_CANDIDATES)];
    let mut reasons = Vec::new();
    let mut cannot = 0;
    for candidate in candidates {
        if let Err(why) = installable(candidate) {
            reasons.push(format!("{} cannot be installed: {why}", candidate.name));
            cannot += 1;
            continue;
        }
        let broken = olm::broken_by_replacing(from, candidate, installed, coming);
        let followed_by = if broken.is_empty() { None } else { follow(candidate, &broken) };
        if broken.is_empty() || followed_by.is_some() {
            let passed_over = (!reasons.is_empty()).then(|| {
                format!("{} is installed instead of {}: {}", candidate.name, candidates[0].name, reasons.join("; "))
            });
            let followed_by = followed_by.map(|moves| format!("{} is installed first: {moves}", candidate.name));
            return Allowed { chosen: Some(candidate), passed_over, followed_by, reason: REQUIRED_BY_DEPENDENTS };
        }
        let why: Vec<String> = broken
            .iter()
            .map(|b| {
                let being = if coming.iter().any(|c| c.name == b.dependent) { " (being installed)" } else { "" };
                format!("{}{being} requires {}", b.dependent, b.dependency)
            })
            .collect();
        reasons.push(format!("{} would leave unmet what {from} meets now: {}", candidate.name, why.join(", ")));
    }
    // None is taken: the installed bundle stays, as OLM's solver keeps it (it is always one of
    // the solver's choices), and the condition says why.
    let (reason, until) = match cannot {
        0 => (REQUIRED_BY_DEPENDENTS, "its dependents allow it"),
        n if n == candidates.len() => (NOT_INSTALLABLE, "what it needs can be installed"),
        _ => (REQUIRED_BY_DEPENDENTS, "its dependents allow it or what it needs can be installed"),
    };
    let passed_over = (!reasons.is_empty())
        .then(|| format!("{from} stays installed: {}; the upgrade goes on by itself once {until}", reasons.join("; ")));
    Allowed { chosen: None, passed_over, followed_by: None, reason }
}

/// OLM's deprecation conditions: one per level (package, channel, the installed or chosen
/// bundle) with the catalog's message, and `Deprecated` when any applies.
fn deprecations(catalog: &Catalog, sub: &Subscription, status: &mut SubscriptionStatus, now: &str) {
    let spec = &sub.spec;
    let channel = if spec.channel.is_empty() {
        catalog.default_channel(&spec.name).unwrap_or_default().to_string()
    } else {
        spec.channel.clone()
    };
    let bundle = if status.installed_csv.is_empty() { &status.current_csv } else { &status.installed_csv };
    let found = catalog.deprecation_of(&spec.name, &channel, bundle);
    let mut any = Vec::new();
    for (kind, type_) in [
        ("olm.package", olm::PACKAGE_DEPRECATED),
        ("olm.channel", olm::CHANNEL_DEPRECATED),
        ("olm.bundle", olm::BUNDLE_DEPRECATED),
    ] {
        let messages: Vec<&str> =
            found.iter().filter(|d| d.reference.schema == kind).map(|d| d.message.as_str()).collect();
        if messages.is_empty() {
            remove_condition(&mut status.conditions, type_);
        } else {
            let message = messages.join("\n");
            any.push(message.clone());
            set_condition(&mut status.conditions, Condition::new(type_, "True", "Deprecated", &message), now);
        }
    }
    if any.is_empty() {
        remove_condition(&mut status.conditions, olm::DEPRECATED);
    } else {
        set_condition(
            &mut status.conditions,
            Condition::new(olm::DEPRECATED, "True", "Deprecated", any.join("\n")),
            now,
        );
    }
}

fn remove_condition(conds: &mut Vec<Condition>, type_: &str) {
    conds.retain(|c| c.type_ != type_);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(package: &str, version: &str, more: Value) -> Bundle {
        let mut properties =
            vec![json!({"type": "olm.package", "value": {"packageName": package, "version": version}})];
        properties.extend(more.as_array().cloned().unwrap_or_default());
        serde_json::from_value(json!({"schema": "olm.bundle", "name": format!("{package}.v{version}"),
            "package": package, "properties": properties}))
        .expect("a bundle")
    }

    /// The preferred upgrade that keeps every installed dependent's dependencies met is taken,
    /// saying what was passed over; when none does, none is taken, saying why.
    #[test]
    fn the_upgrade_taken_is_the_first_its_dependents_allow() {
        let dependent = bundle(
            "tuned",
            "1.0.0",
            json!([{"type": "olm.package.required", "value": {"packageName": "base", "versionRange": "<2.0.0"}}]),
        );
        let installed = [dependent, bundle("base", "1.3.0", json!([]))];
        let (v14, v20) = (bundle("base", "1.4.0", json!([])), bundle("base", "2.0.0", json!([])));
        let stays = |_: &Bundle, _: &[olm::Broken]| None;
        let any = |_: &Bundle| Ok(());
        let allowed = allowed_upgrade("base.v1.3.0", &[&v20, &v14], (&installed, &[]), &stays, &any);
        assert_eq!(allowed.chosen.map(|b| b.name.as_str()), Some("base.v1.4.0"));
        assert_eq!(
            allowed.passed_over.as_deref(),
            Some(
                "base.v1.4.0 is installed instead of base.v2.0.0: base.v2.0.0 would leave unmet what base.v1.3.0 \
                 meets now: tuned.v1.0.0 requires package \"base\" in range \"<2.0.0\" (olm.package.required)"
            )
        );
        let first = allowed_upgrade("base.v1.3.0", &[&v14, &v20], (&installed, &[]), &stays, &any);
        assert_eq!((first.chosen.map(|b| b.name.as_str()), first.passed_over), (Some("base.v1.4.0"), None));
        let none = allowed_upgrade("base.v1.3.0", &[&v20], (&installed, &[]), &stays, &any);
        assert!(none.chosen.is_none());
        assert!(none.passed_over.is_some_and(|m| m.starts_with("base.v1.3.0 stays installed: base.v2.0.0 would")));
        let alone = allowed_upgrade("base.v1.3.0", &[&v20], (&installed[1..], &[]), &stays, &any);
        assert_eq!((alone.chosen.map(|b| b.name.as_str()), alone.passed_over), (Some("base.v2.0.0"), None));
        // The dependent chosen by its Subscription and not installed yet holds it as well.
        let coming = allowed_upgrade("base.v1.3.0", &[&v20], (&installed[1..], &installed[..1]), &stays, &any);
        assert!(coming.chosen.is_none());
        assert_eq!(
            coming.passed_over.as_deref(),
            Some(
                "base.v1.3.0 stays installed: base.v2.0.0 would leave unmet what base.v1.3.0 meets now: tuned.v1.0.0 \
                 (being installed) requires package \"base\" in range \"<2.0.0\" (olm.package.required); the upgrade goes \
                 on by itself once its dependents allow it"
            )
        );
        // The dependent moves after it: taken, saying so.
        let moves = |_: &Bundle, _: &[olm::Broken]| Some("tuned.v1.0.0 moves to tuned.v2.0.0 after it".to_string());
        let together = allowed_upgrade("base.v1.3.0", &[&v20], (&installed, &[]), &moves, &any);
        assert_eq!(together.chosen.map(|b| b.name.as_str()), Some("base.v2.0.0"));
        assert_eq!(
            together.followed_by.as_deref(),
            Some("base.v2.0.0 is installed first: tuned.v1.0.0 moves to tuned.v2.0.0 after it")
        );
    }

    /// A candidate that cannot be installed (something it needs, at any depth, cannot be met) is
    /// passed over for the next one, saying why; when none can be, the installed one stays,
    /// saying what the candidates lack, as OLM's solver keeps it.
    #[test]
    fn an_upgrade_that_cannot_be_installed_is_passed_over() {
        let installed = [bundle("base", "1.3.0", json!([]))];
        let (v14, v20) = (bundle("base", "1.4.0", json!([])), bundle("base", "2.0.0", json!([])));
        let stays = |_: &Bundle, _: &[olm::Broken]| None;
        let not_20 = |b: &Bundle| {
            if b.name == "base.v2.0.0" {
                Err("bundle base.v2.0.0 requires package \"leaf\": no bundle of the catalogs olm/c provides it".into())
            } else {
                Ok(())
            }
        };
        let allowed = allowed_upgrade("base.v1.3.0", &[&v20, &v14], (&installed, &[]), &stays, &not_20);
        assert_eq!(allowed.chosen.map(|b| b.name.as_str()), Some("base.v1.4.0"));
        assert_eq!(
            allowed.passed_over.as_deref(),
            Some(
                "base.v1.4.0 is installed instead of base.v2.0.0: base.v2.0.0 cannot be installed: bundle base.v2.0.0 \
                 requires package \"leaf\": no bundle of the catalogs olm/c provides it"
            )
        );
        let alone = allowed_upgrade("base.v1.3.0", &[&v20], (&installed, &[]), &stays, &not_20);
        assert_eq!(alone.chosen, None);
        assert_eq!(alone.reason, NOT_INSTALLABLE);
        assert_eq!(
            alone.passed_over.as_deref(),
            Some(
                "base.v1.3.0 stays installed: base.v2.0.0 cannot be installed: bundle base.v2.0.0 requires package \
                 \"leaf\": no bundle of the catalogs olm/c provides it; the upgrade goes on by itself once what it \
                 needs can be installed"
            )
        );
        // One cannot be installed, the other would break a dependent: held for the dependent.
        let dependent = bundle(
            "tuned",
            "1.0.0",
            json!([{"type": "olm.package.required", "value": {"packageName": "base", "versionRange": "<1.4.0"}}]),
        );
        let with_dependent = [dependent, installed[0].clone()];
        let both = allowed_upgrade("base.v1.3.0", &[&v20, &v14], (&with_dependent, &[]), &stays, &not_20);
        assert_eq!((both.chosen, both.reason), (None, REQUIRED_BY_DEPENDENTS));
        let message = both.passed_over.unwrap_or_default();
        assert!(message.contains("base.v2.0.0 cannot be installed: "), "{message}");
        assert!(
            message.contains("base.v1.4.0 would leave unmet what base.v1.3.0 meets now: tuned.v1.0.0"),
            "{message}"
        );
        assert!(message.ends_with("once its dependents allow it or what it needs can be installed"), "{message}");
    }

    /// A new Subscription takes the first bundle of its channel that can be installed, saying
    /// which it passed over and why; when none can be, the preferred one, whose resolution then
    /// fails naming what it lacks.
    #[test]
    fn a_new_subscription_takes_the_newest_bundle_that_can_be_installed() {
        let (v10, v15, v20) =
            (bundle("mid", "1.0.0", json!([])), bundle("mid", "1.5.0", json!([])), bundle("mid", "2.0.0", json!([])));
        let only_10 = |b: &Bundle| {
            if b.name == "mid.v1.0.0" {
                Ok(())
            } else {
                Err(format!("{} lacks leaf", b.name))
            }
        };
        let first = first_installable(&[&v20, &v15, &v10], &only_10);
        assert_eq!(first.chosen.map(|b| b.name.as_str()), Some("mid.v1.0.0"));
        assert_eq!(
            first.passed_over.as_deref(),
            Some(
                "mid.v1.0.0 is installed instead of mid.v2.0.0: mid.v2.0.0 cannot be installed: mid.v2.0.0 lacks \
                 leaf; mid.v1.5.0 cannot be installed: mid.v1.5.0 lacks leaf"
            )
        );
        let head = first_installable(&[&v10, &v20], &only_10);
        assert_eq!((head.chosen.map(|b| b.name.as_str()), head.passed_over), (Some("mid.v1.0.0"), None));
        let none = first_installable(&[&v20, &v15], &only_10);
        assert_eq!((none.chosen.map(|b| b.name.as_str()), none.passed_over), (Some("mid.v2.0.0"), None));
        // Past MAX_CANDIDATES, nothing more is tried: the preferred one is taken.
        let many: Vec<Bundle> = (0..MAX_CANDIDATES).map(|i| bundle("mid", &format!("3.0.{i}"), json!([]))).collect();
        let mut listed: Vec<&Bundle> = many.iter().collect();
        listed.push(&v10);
        let far = first_installable(&listed, &only_10);
        assert_eq!((far.chosen.map(|b| b.name.as_str()), far.passed_over), (Some("mid.v3.0.0"), None));
    }

    /// One operator of a package in a namespace: a Subscription that has installed it holds
    /// the package; of two that have not, the one created first (then by name).
    #[test]
    fn a_package_is_held_by_the_installed_or_the_first_subscription() {
        let sub = |name: &str, package: &str, created: &str, installed: &str| -> Subscription {
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "operators", "creationTimestamp": created},
                "spec": {"name": package, "source": "fleet", "sourceNamespace": "olm"},
                "status": {"installedCSV": installed}}),
            )
            .unwrap()
        };
        let early = "2026-12-05T10:00:00Z";
        let late = "2026-12-05T11:00:00Z";
        let base = sub("base", "base-tuning", late, "base-tuning.v1.3.0");
        let again = sub("again", "base-tuning", early, "");
        let other = sub("other", "tuned-exporter", early, "");
        let subs = [base.clone(), again.clone(), other.clone()];
        assert_eq!(
            package_held(&again, &subs).as_deref(),
            Some(
                "Subscription \"base\" of this namespace holds package \"base-tuning\" (installed base-tuning.v1.3.0), \
                 and there can be only one operator from package base-tuning in a namespace; delete one of the two \
                 Subscriptions"
            )
        );
        assert_eq!(package_held(&base, &subs), None, "the installed one goes on, though created later");
        assert_eq!(package_held(&other, &subs), None);
        // Neither installed: the first created holds it, then the first by name.
        let first = sub("first", "p", early, "");
        let second = sub("second", "p", late, "");
        let twin = sub("a-twin", "p", late, "");
        let subs = [first.clone(), second.clone(), twin.clone()];
        assert_eq!(package_held(&first, &subs), None);
        assert!(package_held(&second, &subs)
            .is_some_and(|m| m.contains("\"first\" of this namespace holds package \"p\" (created first)")));
        assert!(package_held(&twin, &subs).is_some_and(|m| m.starts_with("Subscription \"first\"")));
        assert!(package_held(&second, &[second.clone(), twin.clone()])
            .is_some_and(|m| m.starts_with("Subscription \"a-twin\"")));
    }

    /// A CSV no Subscription has installed is found by the package its properties name: not
    /// one a Subscription holds, not the one whose plan failed, not one of another package or
    /// of none; several are all named, in order.
    #[test]
    fn an_operator_no_subscription_holds_is_found_by_its_package() {
        let csv = |name: &str, package: &str| -> olm::ClusterServiceVersion {
            let annotations = match package {
                "" => json!({}),
                p => json!({olm::PROPERTIES_ANNOTATION: olm::properties_annotation(&bundle(p, "1.0.0", json!([])))}),
            };
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "operators",
                "annotations": annotations}, "spec": {}}))
            .expect("a CSV")
        };
        let holder: Subscription = serde_json::from_value(json!({"metadata": {"name": "kept"},
            "spec": {"name": "base"}, "status": {"installedCSV": "base.v1.2.0"}}))
        .expect("a Subscription");
        let csvs = [
            csv("base.v1.1.0", "base"),
            csv("tuned.v1.0.0", "tuned"),
            csv("by-hand", ""),
            csv("base.v1.0.0", "base"),
            csv("base.v1.2.0", "base"),
        ];
        let subs = [holder];
        assert_eq!(freestanding("base", &csvs, &subs, None), ["base.v1.0.0", "base.v1.1.0"]);
        assert_eq!(freestanding("base", &csvs, &subs, Some("base.v1.0.0")), ["base.v1.1.0"]);
        assert_eq!(freestanding("tuned", &csvs, &subs, None), ["tuned.v1.0.0"]);
        assert!(freestanding("", &csvs, &subs, None).is_empty(), "a CSV of no known package is nobody's");
        assert!(freestanding("base", &csvs[1..3], &subs, None).is_empty());
    }

    /// A new Subscription sees what the namespace's other new Subscriptions will install first
    /// (not those installed, chosen or failed, nor itself), and of their dependencies those on
    /// its own package.
    #[test]
    fn new_subscriptions_see_what_the_others_will_install_first() {
        let needs =
            json!([{"type": "olm.package.required", "value": {"packageName": "base", "versionRange": "<2.0.0"}}]);
        let blob = |p: &str, v: &str, more: Value| {
            let mut b = bundle(p, v, more);
            b.schema = "olm.bundle".into();
            b.image = format!("example.com/{p}:{v}");
            serde_json::to_value(b).unwrap()
        };
        let blobs = vec![
            json!({"schema": "olm.package", "name": "tuned", "defaultChannel": "stable"}),
            json!({"schema": "olm.channel", "package": "tuned", "name": "stable", "entries": [{"name": "tuned.v1.0.0"}]}),
            blob("tuned", "1.0.0", needs),
            json!({"schema": "olm.package", "name": "base", "defaultChannel": "stable"}),
            json!({"schema": "olm.channel", "package": "base", "name": "stable", "entries": [{"name": "base.v2.0.0"}]}),
            blob("base", "2.0.0", json!([])),
        ];
        let c = Catalog::from_blobs(blobs.into_iter().map(|b| ("c.json".to_string(), b))).expect("a catalog");
        let view =
            super::super::catalogs::View { catalog: Some(Arc::new(c)), healthy: true, failure: None, priority: 0 };
        let catalogs = Snapshot::from([(("olm".to_string(), "fleet".to_string()), view)]);
        let sub = |name: &str, package: &str, status: Value| -> Subscription {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "operators"},
                "spec": {"name": package, "source": "fleet", "sourceNamespace": "olm", "channel": "stable"},
                "status": status}))
            .unwrap()
        };
        let failed = json!({"conditions": [{"type": "ResolutionFailed", "status": "True", "message": "x"}]});
        let subs = [
            sub("base", "base", json!({})),
            sub("tuned", "tuned", json!({})),
            sub("chosen", "tuned", json!({"currentCSV": "tuned.v1.0.0"})),
            sub("failed", "tuned", failed),
        ];
        let fresh = fresh_targets(&subs, "base", &catalogs);
        let names: Vec<&str> = fresh.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["tuned.v1.0.0"], "only the other new one's");
        let needed = needed_of(&subs[0], &fresh, &catalogs);
        let texts: Vec<&str> = needed.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(texts, ["tuned.v1.0.0 requires package \"base\" in range \"<2.0.0\" (olm.package.required)"]);
        assert!(needed_of(&subs[1], &fresh, &catalogs).is_empty(), "nothing needs tuned");
    }

    /// A dependent follows its dependency's upgrade when its Automatic Subscription's next
    /// bundle works with it; a Manual one, or one whose next bundle still refuses it, does not.
    #[test]
    fn dependents_follow_only_on_their_own_and_only_to_a_bundle_that_works() {
        let needs = |range: &str| json!([{"type": "olm.package.required", "value": {"packageName": "base", "versionRange": range}}]);
        let blob = |p: &str, v: &str, more: Value| {
            let mut b = bundle(p, v, more);
            b.schema = "olm.bundle".into();
            b.package = p.into();
            b.image = format!("example.com/{p}:{v}");
            serde_json::to_value(b).unwrap()
        };
        let catalog = |next_needs: &str| {
            let blobs = vec![
                json!({"schema": "olm.package", "name": "tuned", "defaultChannel": "stable"}),
                json!({"schema": "olm.channel", "package": "tuned", "name": "stable", "entries": [
                    {"name": "tuned.v1.0.0"}, {"name": "tuned.v2.0.0", "replaces": "tuned.v1.0.0"}]}),
                blob("tuned", "1.0.0", needs("<2.0.0")),
                blob("tuned", "2.0.0", needs(next_needs)),
            ];
            let c = Catalog::from_blobs(blobs.into_iter().map(|b| ("c.json".to_string(), b))).expect("a catalog");
            let view =
                super::super::catalogs::View { catalog: Some(Arc::new(c)), healthy: true, failure: None, priority: 0 };
            Snapshot::from([(("olm".to_string(), "fleet".to_string()), view)])
        };
        let sub = |approval: &str| -> Subscription {
            serde_json::from_value(json!({"metadata": {"name": "tuned", "namespace": "operators"},
                "spec": {"name": "tuned", "source": "fleet", "sourceNamespace": "olm", "channel": "stable",
                         "installPlanApproval": approval},
                "status": {"installedCSV": "tuned.v1.0.0"}}))
            .unwrap()
        };
        let installed = [bundle("tuned", "1.0.0", needs("<2.0.0")), bundle("base", "1.3.0", json!([]))];
        let to = bundle("base", "2.0.0", json!([]));
        let broken = olm::broken_by_replacing("base.v1.3.0", &to, &installed, &[]);
        assert_eq!(broken.len(), 1);
        let works = catalog(">=2.0.0");
        assert_eq!(
            followers("base.v1.3.0", &to, &broken, &installed, &[sub("Automatic")], &works).as_deref(),
            Some("tuned.v1.0.0 (Subscription \"tuned\") moves to tuned.v2.0.0 after it")
        );
        assert_eq!(followers("base.v1.3.0", &to, &broken, &installed, &[sub("Manual")], &works), None);
        let refuses = catalog("<2.0.0");
        assert_eq!(followers("base.v1.3.0", &to, &broken, &installed, &[sub("Automatic")], &refuses), None);
        assert_eq!(followers("base.v1.3.0", &to, &broken, &installed, &[], &works), None, "no Subscription");
    }
}
