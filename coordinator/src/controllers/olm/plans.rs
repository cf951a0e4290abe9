//! InstallPlans: what installing a bundle creates, shown before approval and created after it.
//!
//! The steps are fixed when the plan is made (each manifest kept whole), so approving a plan
//! installs exactly what was shown. A bundle aloft cannot install whole (objects of kinds it
//! does not run, a CSV that asks for Deployments, MachineConfigs an agent would refuse, no
//! manifests at all) gives a Failed plan that names every reason and creates nothing. So does
//! a name the install finds taken (a MachineConfig of the admin's or of another operator, a CSV
//! the plan did not make): every object is checked before any is written, and what a plan
//! wrote before a name was taken under it (a race) is undone, so a failed plan never leaves a
//! half-installed bundle, nor a CSV for its Subscription to adopt or to see succeed.

use super::{config_owner, configs_of, involved, key_of, note, warn, write_if_changed};
use crate::controllers::events::Recorder;
use crate::resources::{CLUSTER_SERVICE_VERSION, INSTALL_PLAN, MACHINE_CONFIG};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError};
use aloft_api::catalog::Bundle;
use aloft_api::meta::{set_condition, Condition};
use aloft_api::olm::{self, InstallPlan, InstallPlanStatus, Step, StepResource, Subscription};
use serde_json::{json, Value};
use std::sync::Arc;

/// The kinds a bundle may carry.
const INSTALLABLE: [&str; 2] = ["ClusterServiceVersion", "MachineConfig"];

/// A plan just made (or found made already).
pub struct Created {
    pub name: String,
    pub uid: String,
    pub phase: String,
}

/// Make the plan that installs `bundle` for `sub`, or find the one made before (a pass that
/// created it and did not get to write the subscription's status). `replaces` is the CSV the
/// subscription has installed, which the new one replaces (deleted once the new one is in).
/// A Failed plan is not taken, nor a Complete one whose CSV is gone: the installed CSV was
/// deleted while the Subscription stays, and it is installed again (OLM's rule) by a new plan.
pub async fn create_for(
    store: &Arc<dyn Store>,
    sub: &Subscription,
    bundle: &Bundle,
    replaces: Option<&str>,
    now: &str,
) -> Result<Created, StoreError> {
    let ns = sub.metadata.namespace.clone().unwrap_or_default();
    let sub_uid = sub.metadata.uid.clone().unwrap_or_default();
    for raw in store.list(&INSTALL_PLAN.store_key(), Some(&ns)).await?.items {
        let Ok(plan) = serde_json::from_value::<InstallPlan>(raw) else { continue };
        let owned = plan.metadata.owner_references.iter().any(|o| o.kind == "Subscription" && o.uid == sub_uid);
        let phase = plan.status.as_ref().map(|s| s.phase.clone()).unwrap_or_default();
        if !owned || plan.spec.cluster_service_version_names != [bundle.name.clone()] || phase == olm::PLAN_FAILED {
            continue;
        }
        if phase == olm::PLAN_COMPLETE && store.get(&csv_key(&ns, &bundle.name)).await?.is_none() {
            continue;
        }
        return Ok(Created { name: plan.metadata.name, uid: plan.metadata.uid.unwrap_or_default(), phase });
    }
    let generation = store
        .list(&INSTALL_PLAN.store_key(), Some(&ns))
        .await?
        .items
        .iter()
        .filter_map(|p| p.pointer("/spec/generation").and_then(Value::as_i64))
        .max()
        .unwrap_or(0)
        + 1;
    let (steps, problems) = steps_of(bundle, replaces, &sub.spec.source, &sub.spec.source_namespace);
    let manual = sub.spec.manual();
    let mut status = InstallPlanStatus {
        catalog_sources: vec![sub.spec.source.clone()],
        plan: steps,
        start_time: Some(now.to_string()),
        ..Default::default()
    };
    if problems.is_empty() {
        status.phase = if manual { olm::PLAN_REQUIRES_APPROVAL } else { olm::PLAN_INSTALLING }.into();
        set_condition(&mut status.conditions, Condition::new("Resolved", "True", "", ""), now);
    } else {
        status.phase = olm::PLAN_FAILED.into();
        status.message = format!("bundle {} cannot be installed: {}", bundle.name, problems.join("; "));
        set_condition(
            &mut status.conditions,
            Condition::new("Installed", "False", "InstallComponentFailed", &status.message),
            now,
        );
    }
    let name = objects::generate_name("install-");
    let mut obj = json!({
        "apiVersion": olm::API_VERSION,
        "kind": "InstallPlan",
        "metadata": {
            "name": name,
            "ownerReferences": [{
                "apiVersion": olm::API_VERSION, "kind": "Subscription",
                "name": sub.metadata.name, "uid": sub_uid,
            }],
            "labels": {format!("operators.coreos.com/{}.{ns}", sub.spec.name): ""},
        },
        "spec": {
            "clusterServiceVersionNames": [bundle.name],
            "approval": if manual { olm::MANUAL } else { olm::AUTOMATIC },
            "approved": !manual,
            "generation": generation,
        },
        "status": serde_json::to_value(&status).unwrap_or(Value::Null),
    });
    objects::prepare_create(&mut obj, &ns);
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    store.create(&Key::new(&INSTALL_PLAN.store_key(), &ns, &name), obj).await?;
    Ok(Created { name, uid, phase: status.phase })
}

/// The bundle's objects as steps, and everything that stops aloft from installing them.
fn steps_of(bundle: &Bundle, replaces: Option<&str>, source: &str, source_namespace: &str) -> (Vec<Step>, Vec<String>) {
    let mut problems = Vec::new();
    let mut objects = match bundle.objects() {
        Ok(o) => o,
        Err(e) => return (Vec::new(), vec![e.to_string()]),
    };
    // The CSV carries its bundle's properties, as OLM writes them: its platform limit
    // (`olm.maxOpenShiftVersion`) is read from there once it is installed.
    for csv in objects.iter_mut().filter(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion")) {
        if let Some(meta) = csv.get_mut("metadata").and_then(Value::as_object_mut) {
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(olm::PROPERTIES_ANNOTATION.into(), json!(olm::properties_annotation(bundle)));
            }
        }
        // As OLM does, the CSV replaces the one installed now, whatever its manifest says: an
        // upgrade that skips (or skipRange-covers) the installed bundle names another, and the
        // installed CSV must still be deleted once this one is in.
        if let (Some(installed), Some(spec)) = (replaces, csv.get_mut("spec").and_then(Value::as_object_mut)) {
            spec.insert("replaces".into(), json!(installed));
        }
    }
    if objects.is_empty() {
        problems.push(format!(
            "it carries no manifests (no olm.bundle.object properties): aloft installs bundles whose \
             manifests are in the catalog, and does not pull bundle images ({})",
            bundle.image
        ));
    }
    let mut steps = Vec::new();
    let mut foreign = Vec::new();
    let mut csvs = 0;
    for obj in &objects {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if !INSTALLABLE.contains(&kind) {
            foreign.push(format!("{kind} {name:?}"));
        }
        match kind {
            "ClusterServiceVersion" => {
                csvs += 1;
                if name != bundle.name {
                    problems.push(format!("its ClusterServiceVersion is named {name:?}, not {:?}", bundle.name));
                }
                let deployments = obj
                    .pointer("/spec/install/spec/deployments")
                    .and_then(Value::as_array)
                    .map(|d| {
                        d.iter().filter_map(|d| d.get("name").and_then(Value::as_str)).collect::<Vec<_>>().join(", ")
                    })
                    .unwrap_or_default();
                if !deployments.is_empty() {
                    problems.push(format!(
                        "ClusterServiceVersion {name:?} runs Deployments (spec.install.spec.deployments: {deployments}), \
                         and aloft runs no workloads: an aloft bundle delivers MachineConfigs"
                    ));
                }
            }
            "MachineConfig" => {
                let causes = crate::server::validate::object_causes(&MACHINE_CONFIG, obj);
                if !causes.is_empty() {
                    let said: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
                    problems.push(format!("MachineConfig {name:?} is invalid: {}", said.join(", ")));
                }
            }
            _ => {}
        }
        steps.push(Step {
            resolving: bundle.name.clone(),
            resource: StepResource {
                source_name: source.to_string(),
                source_namespace: source_namespace.to_string(),
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
                name: name.to_string(),
                manifest: serde_json::to_string(obj).unwrap_or_default(),
                ..Default::default()
            },
            status: "Unknown".into(),
            ..Default::default()
        });
    }
    if !foreign.is_empty() {
        problems.push(format!(
            "it carries objects aloft does not install ({}): aloft installs a bundle's ClusterServiceVersion \
             and MachineConfigs",
            foreign.join(", ")
        ));
    }
    if !objects.is_empty() && csvs != 1 {
        problems.push(format!("it must carry exactly one ClusterServiceVersion, not {csvs}"));
    }
    (steps, problems)
}

/// Start approved plans and install what they hold.
pub async fn reconcile(store: &Arc<dyn Store>, events: &Recorder) -> Result<(), StoreError> {
    for raw in store.list(&INSTALL_PLAN.store_key(), None).await?.items {
        let Ok(plan) = serde_json::from_value::<InstallPlan>(raw.clone()) else { continue };
        let phase = plan.status.as_ref().map(|s| s.phase.as_str()).unwrap_or("");
        let startable = phase == olm::PLAN_INSTALLING || (phase == olm::PLAN_REQUIRES_APPROVAL && plan.spec.approved);
        if !startable || plan.metadata.deletion_timestamp.is_some() {
            continue;
        }
        install(store, events, &raw, plan).await?;
    }
    Ok(())
}

async fn install(store: &Arc<dyn Store>, events: &Recorder, raw: &Value, plan: InstallPlan) -> Result<(), StoreError> {
    let now = objects::now();
    let ns = plan.metadata.namespace.clone().unwrap_or_default();
    let plan_name = plan.metadata.name.clone();
    let about = involved("InstallPlan", &ns, &plan_name);
    let mut status = plan.status.clone().unwrap_or_default();
    status.phase = olm::PLAN_INSTALLING.into();
    let csv_name = plan.spec.cluster_service_version_names.first().cloned().unwrap_or_default();
    // Two OperatorGroups: the plan waits, saying why, and goes on once one is deleted (OLM
    // fails the CSV instead, and a failed install does not recover by itself there).
    if let Some(why) = super::groups::too_many(store, &ns).await? {
        let mut waiting = plan.status.clone().unwrap_or_default();
        let c = Condition::new("Installed", "False", "TooManyOperatorGroups", why.as_str());
        if set_condition(&mut waiting.conditions, c, &now) {
            warn(events, &about, "TooManyOperatorGroups", &format!("{csv_name} is not installed: {why}"));
        }
        let mut next = raw.clone();
        next["status"] = serde_json::to_value(&waiting).unwrap_or(Value::Null);
        return write_if_changed(store, &key_of(&INSTALL_PLAN, raw), raw, next).await.map(|_| ());
    }
    let objects: Vec<(usize, Value)> = status
        .plan
        .iter()
        .enumerate()
        .filter_map(|(i, s)| serde_json::from_str::<Value>(&s.resource.manifest).ok().map(|v| (i, v)))
        .collect();
    let kind_is = |o: &Value, kind: &str| o.get("kind").and_then(Value::as_str) == Some(kind);
    let csvs: Vec<&(usize, Value)> = objects.iter().filter(|(_, o)| kind_is(o, "ClusterServiceVersion")).collect();
    let configs: Vec<&(usize, Value)> = objects.iter().filter(|(_, o)| kind_is(o, "MachineConfig")).collect();
    let replaces =
        csvs.first().and_then(|(_, o)| o.pointer("/spec/replaces")).and_then(Value::as_str).unwrap_or("").to_string();
    let target = Target { ns: &ns, plan: &plan_name, csv: &csv_name, replaces: &replaces };

    // Every object is checked before any is written: a name the plan may not take (a
    // MachineConfig of the admin's or of another operator, a CSV it did not make) fails it
    // with nothing written, so an upgrade's plan leaves the installed bundle as it was and a
    // fresh install leaves no CSV for a Subscription to adopt.
    let mut refused = Vec::new();
    for (_, csv) in &csvs {
        if let Some(existing) = store.get(&csv_key(&ns, objects::name_of(csv))).await? {
            if let Some(why) = csv_not_ours(&existing.object, target) {
                refused.push(why);
            }
        }
    }
    for (_, mc) in &configs {
        let name = objects::name_of(mc);
        if let Some(existing) = store.get(&config_key(name)).await? {
            if let Some(why) = config_not_ours(&existing.object, name, target) {
                refused.push(why);
            }
        }
    }
    // Then written, the CSV first: the MachineConfigs name it, and the sweep of an uninstalled
    // CSV's configs must never see them without it. A name taken between the check and the
    // write (a race) undoes what this plan wrote, as a store error does (the next pass then
    // tries the whole plan again).
    let mut written = Written::default();
    if refused.is_empty() {
        match write_all(store, target, &csvs, &configs, &mut status, &mut written, &now).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => refused.push(why),
            Err(e) => {
                if let Err(undo) = undo(store, target, &written).await {
                    tracing::warn!(plan = %plan_name, error = %undo, "cannot undo a plan's writes after a store error");
                }
                return Err(e);
            }
        }
    }
    let installed_configs: Vec<&str> = configs.iter().map(|(_, o)| objects::name_of(o)).collect();
    if !refused.is_empty() {
        undo(store, target, &written).await?;
        // Nothing it shows as written stays written.
        status.plan = plan.status.clone().unwrap_or_default().plan;
        status.phase = olm::PLAN_FAILED.into();
        status.message = format!("bundle {csv_name} cannot be installed: {}", refused.join("; "));
        set_condition(
            &mut status.conditions,
            Condition::new("Installed", "False", "InstallComponentFailed", &status.message),
            &now,
        );
        warn(events, &about, "InstallFailed", &status.message);
    } else {
        // The replaced CSV's configs this bundle no longer has go in the same pass: the pools
        // render the upgrade as one change.
        if !replaces.is_empty() {
            for old in configs_of(store, &ns, &replaces).await? {
                let name = objects::name_of(&old).to_string();
                if !installed_configs.contains(&name.as_str()) {
                    match store.delete(&config_key(&name), revision_of(&old)).await {
                        Ok(_) | Err(StoreError::NotFound(_)) | Err(StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        status.phase = olm::PLAN_COMPLETE.into();
        set_condition(&mut status.conditions, Condition::new("Installed", "True", "", ""), &now);
        note(
            events,
            &about,
            "Installed",
            &format!(
                "created {csv_name} and {} MachineConfig(s) {}",
                installed_configs.len(),
                installed_configs.join(", ")
            ),
        );
    }
    let mut next = raw.clone();
    next["status"] = serde_json::to_value(&status).unwrap_or(Value::Null);
    write_if_changed(store, &key_of(&INSTALL_PLAN, raw), raw, next).await.map(|_| ())
}

/// Who installs: the plan, into its namespace, the CSV it installs and the one that replaces.
#[derive(Clone, Copy)]
struct Target<'a> {
    ns: &'a str,
    plan: &'a str,
    csv: &'a str,
    /// Empty on a fresh install.
    replaces: &'a str,
}

/// What an install has written so far, so that a plan that cannot finish undoes it: each
/// MachineConfig with what it replaced (None: created), in the order written.
#[derive(Default)]
struct Written {
    configs: Vec<(String, Option<Value>)>,
}

fn csv_key(ns: &str, name: &str) -> Key {
    Key::new(&CLUSTER_SERVICE_VERSION.store_key(), ns, name)
}

fn config_key(name: &str) -> Key {
    Key::cluster(&MACHINE_CONFIG.store_key(), name)
}

/// Whether `csv` (stored) was created by the plan `plan`: a retry of a pass cut short finds
/// its own CSV written.
fn made_by(csv: &Value, plan: &str) -> bool {
    csv.pointer("/metadata/annotations")
        .and_then(|a| a.get(olm::INSTALL_PLAN_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|p| p == plan)
}

/// Why the plan may not take the stored CSV of its CSV's name: it did not create it.
fn csv_not_ours(existing: &Value, t: Target<'_>) -> Option<String> {
    if made_by(existing, t.plan) {
        return None;
    }
    let by = existing
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(olm::INSTALL_PLAN_ANNOTATION))
        .and_then(Value::as_str)
        .map(|p| format!("by InstallPlan {p}"))
        .unwrap_or_else(|| "by hand, not by an InstallPlan".to_string());
    Some(format!("ClusterServiceVersion {}/{} exists, created {by}", t.ns, objects::name_of(existing)))
}

/// Why the plan may not take the stored MachineConfig `name`: the admin wrote it, or another
/// operator installed it (one this plan's CSV does not replace). Never taken over.
fn config_not_ours(existing: &Value, name: &str, t: Target<'_>) -> Option<String> {
    let owner = config_owner(existing);
    let ours =
        owner == (Some(t.ns), Some(t.csv)) || (!t.replaces.is_empty() && owner == (Some(t.ns), Some(t.replaces)));
    if ours {
        return None;
    }
    Some(match owner {
        (Some(n), Some(c)) => format!("MachineConfig {name:?} belongs to ClusterServiceVersion {n}/{c}"),
        _ => format!("MachineConfig {name:?} exists and was not installed by an operator bundle"),
    })
}

/// Write the plan's CSV, then its MachineConfigs, noting each write in `written` and each
/// step's status in `status`; `Ok(Err)` names an object found taken at its write.
async fn write_all(
    store: &Arc<dyn Store>,
    t: Target<'_>,
    csvs: &[&(usize, Value)],
    configs: &[&(usize, Value)],
    status: &mut InstallPlanStatus,
    written: &mut Written,
    now: &str,
) -> Result<Result<(), String>, StoreError> {
    for (i, obj) in csvs {
        let key = csv_key(t.ns, objects::name_of(obj));
        // Stored already: this plan's own, from a pass cut short, unless made since the check.
        if let Some(existing) = store.get(&key).await? {
            if let Some(why) = csv_not_ours(&existing.object, t) {
                return Ok(Err(why));
            }
        } else {
            let mut csv = obj.clone();
            csv["status"] = json!({
                "phase": olm::CSV_PENDING, "reason": "RequirementsUnknown",
                "message": "requirements not yet checked", "lastUpdateTime": now, "lastTransitionTime": now,
                "conditions": [{"phase": olm::CSV_PENDING, "reason": "RequirementsUnknown",
                                "message": "requirements not yet checked", "lastTransitionTime": now}],
            });
            if !csv["metadata"]["annotations"].is_object() {
                csv["metadata"]["annotations"] = json!({});
            }
            csv["metadata"]["annotations"][olm::INSTALL_PLAN_ANNOTATION] = json!(t.plan);
            objects::prepare_create(&mut csv, t.ns);
            match store.create(&key, csv).await {
                Ok(_) => {}
                Err(StoreError::AlreadyExists(_)) => {
                    // Created since the check: by whom?
                    if let Some(why) = store.get(&key).await?.and_then(|e| csv_not_ours(&e.object, t)) {
                        return Ok(Err(why));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        status.plan[*i].status = "Created".into();
    }
    for (i, obj) in configs {
        let name = objects::name_of(obj).to_string();
        match put_config(store, obj, t).await? {
            Ok(Put::Present) => status.plan[*i].status = "Present".into(),
            Ok(put) => {
                written.configs.push((name, if let Put::Updated(before) = put { Some(before) } else { None }));
                status.plan[*i].status = "Created".into();
            }
            Err(why) => return Ok(Err(why)),
        }
    }
    Ok(Ok(()))
}

/// Undo what a plan that cannot finish wrote: each MachineConfig it wrote goes back to what it
/// replaced (or is deleted, if it created it), newest first, unless changed since by someone
/// else; then its CSV, if it made it, is deleted. A CSV of a plan cut short earlier is deleted
/// too: no failed plan leaves a CSV to adopt or to succeed. The configs that earlier pass took
/// over from the CSV being replaced (their old contents were lost with it) are handed back to
/// that CSV, still installed, as they are: left labelled with the deleted CSV, the sweep of
/// uninstalled CSVs would delete them, rolling an installed bundle's files off every node. A
/// config that earlier pass created is the sweep's to delete.
async fn undo(store: &Arc<dyn Store>, t: Target<'_>, written: &Written) -> Result<(), StoreError> {
    for (name, before) in written.configs.iter().rev() {
        let key = config_key(name);
        for _ in 0..3 {
            let Some(now) = store.get(&key).await? else { break };
            if config_owner(&now.object) != (Some(t.ns), Some(t.csv)) {
                break;
            }
            let result = match before {
                None => store.delete(&key, revision_of(&now.object)).await.map(|_| ()),
                Some(old) => {
                    let mut next = (*now.object).clone();
                    next["spec"] = old["spec"].clone();
                    next["metadata"]["labels"] = old.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({}));
                    match (old.pointer("/metadata/annotations"), next["metadata"].as_object_mut()) {
                        (Some(a), Some(meta)) => {
                            meta.insert("annotations".into(), a.clone());
                        }
                        (None, Some(meta)) => {
                            meta.remove("annotations");
                        }
                        _ => {}
                    }
                    objects::set_generation(&now.object, &mut next);
                    store.update(&key, next, revision_of(&now.object)).await.map(|_| ())
                }
            };
            match result {
                Ok(()) | Err(StoreError::NotFound(_)) => break,
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    if !t.replaces.is_empty() && store.get(&csv_key(t.ns, t.replaces)).await?.is_some() {
        for mc in configs_of(store, t.ns, t.csv).await? {
            if !mc
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(olm::TAKEN_OVER_ANNOTATION))
                .is_some_and(|v| v == t.replaces)
            {
                continue;
            }
            let mut next = mc.clone();
            next["metadata"]["labels"][olm::OWNER_CSV_LABEL] = json!(t.replaces);
            if let Some(a) = next["metadata"]["annotations"].as_object_mut() {
                a.remove(olm::TAKEN_OVER_ANNOTATION);
            }
            let key = config_key(objects::name_of(&mc));
            match store.update(&key, next, revision_of(&mc)).await {
                // Changed since: it is no longer this undo's to hand back.
                Ok(_) | Err(StoreError::NotFound(_)) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let key = csv_key(t.ns, t.csv);
    for _ in 0..3 {
        let Some(stored) = store.get(&key).await? else { break };
        if !made_by(&stored.object, t.plan) {
            break;
        }
        match store.delete(&key, revision_of(&stored.object)).await {
            Ok(_) | Err(StoreError::NotFound(_)) => break,
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What [`put_config`] did.
enum Put {
    Created,
    /// Rewrote a stored config (the replaced CSV's, or its own): what was stored before.
    Updated(Value),
    /// It was stored as the bundle has it.
    Present,
}

/// Create or take over one MachineConfig for the plan's CSV, or say why it is refused (see
/// [`config_not_ours`]): checked again at the write, since the check before may be stale.
async fn put_config(store: &Arc<dyn Store>, obj: &Value, t: Target<'_>) -> Result<Result<Put, String>, StoreError> {
    use aloft_api::olm::{OWNER_CSV_LABEL, OWNER_NAMESPACE_LABEL};
    let name = objects::name_of(obj).to_string();
    let key = config_key(&name);
    let mut want = obj.clone();
    if !want["metadata"]["labels"].is_object() {
        want["metadata"]["labels"] = json!({});
    }
    want["metadata"]["labels"][OWNER_CSV_LABEL] = json!(t.csv);
    want["metadata"]["labels"][OWNER_NAMESPACE_LABEL] = json!(t.ns);
    for _ in 0..3 {
        let result = match store.get(&key).await? {
            None => {
                let mut created = want.clone();
                objects::prepare_create(&mut created, "");
                store.create(&key, created).await.map(|_| Put::Created)
            }
            Some(existing) => {
                if let Some(why) = config_not_ours(&existing.object, &name, t) {
                    return Ok(Err(why));
                }
                let mut next = (*existing.object).clone();
                next["spec"] = want["spec"].clone();
                next["metadata"]["labels"] = want["metadata"]["labels"].clone();
                if let Some(a) = want.pointer("/metadata/annotations") {
                    next["metadata"]["annotations"] = a.clone();
                }
                if !t.replaces.is_empty() && config_owner(&existing.object) == (Some(t.ns), Some(t.replaces)) {
                    if !next["metadata"]["annotations"].is_object() {
                        next["metadata"]["annotations"] = json!({});
                    }
                    next["metadata"]["annotations"][olm::TAKEN_OVER_ANNOTATION] = json!(t.replaces);
                }
                if next == *existing.object {
                    return Ok(Ok(Put::Present));
                }
                objects::set_generation(&existing.object, &mut next);
                store
                    .update(&key, next, revision_of(&existing.object))
                    .await
                    .map(|_| Put::Updated((*existing.object).clone()))
            }
        };
        match result {
            Ok(put) => return Ok(Ok(put)),
            Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadyExists(_)) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    // Written under it three times over: the pass ends and the next one tries again.
    Err(StoreError::Conflict { have: 0, stored: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;
    use std::time::Duration;

    const NS: &str = "operators";

    /// A MachineConfig for the worker role with one file, labelled as `csv`'s when given.
    fn config(name: &str, contents: &str, csv: Option<&str>) -> Value {
        let mut mc = json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                {"path": format!("/etc/{name}"), "mode": 420, "contents": {"source": format!("data:,{contents}")}}]}}},
        });
        if let Some(csv) = csv {
            mc["metadata"]["labels"][olm::OWNER_CSV_LABEL] = json!(csv);
            mc["metadata"]["labels"][olm::OWNER_NAMESPACE_LABEL] = json!(NS);
        }
        mc
    }

    /// An approved plan of `csv` (replacing `replaces`) whose steps are its CSV and `configs`.
    fn plan(name: &str, csv: &str, replaces: &str, configs: &[Value]) -> Value {
        let csv_obj = json!({"apiVersion": olm::API_VERSION, "kind": "ClusterServiceVersion",
            "metadata": {"name": csv}, "spec": {"version": "2.0.0", "replaces": replaces}});
        let steps: Vec<Value> = std::iter::once(&csv_obj)
            .chain(configs)
            .map(|o| {
                json!({"resolving": csv, "status": "Unknown", "resource": {
                    "kind": o["kind"], "name": o["metadata"]["name"], "manifest": o.to_string()}})
            })
            .collect();
        json!({"apiVersion": olm::API_VERSION, "kind": "InstallPlan", "metadata": {"name": name},
            "spec": {"clusterServiceVersionNames": [csv], "approval": "Automatic", "approved": true},
            "status": {"phase": olm::PLAN_INSTALLING, "plan": steps}})
    }

    async fn put(store: &Arc<dyn Store>, rt: &crate::resources::ResourceType, ns: &str, mut obj: Value) {
        let name = objects::name_of(&obj).to_string();
        objects::prepare_create(&mut obj, ns);
        let key =
            if ns.is_empty() { Key::cluster(&rt.store_key(), &name) } else { Key::new(&rt.store_key(), ns, &name) };
        store.create(&key, obj).await.expect("created");
    }

    async fn get(store: &Arc<dyn Store>, key: Key) -> Option<Value> {
        store.get(&key).await.expect("read").map(|s| (*s.object).clone())
    }

    /// up.v1.0.0 installed with 90-up-a, and 90-up-b the admin's: the store before the
    /// upgrade to up.v2.0.0, which carries 89-up-new, 90-up-a and 90-up-b.
    async fn installed_v1(store: &Arc<dyn Store>) -> Value {
        let v1 = json!({"apiVersion": olm::API_VERSION, "kind": "ClusterServiceVersion",
            "metadata": {"name": "up.v1.0.0"}, "spec": {"version": "1.0.0"}});
        put(store, &CLUSTER_SERVICE_VERSION, NS, v1).await;
        put(store, &MACHINE_CONFIG, "", config("90-up-a", "v1", Some("up.v1.0.0"))).await;
        put(store, &MACHINE_CONFIG, "", config("90-up-b", "admin", None)).await;
        let upgrade = plan(
            "install-up2",
            "up.v2.0.0",
            "up.v1.0.0",
            &[config("89-up-new", "v2", None), config("90-up-a", "v2", None), config("90-up-b", "v2", None)],
        );
        put(store, &INSTALL_PLAN, NS, upgrade).await;
        get(store, Key::cluster(&MACHINE_CONFIG.store_key(), "90-up-a")).await.expect("90-up-a")
    }

    /// The plan's phase and message.
    async fn outcome(store: &Arc<dyn Store>) -> (String, String) {
        let plan = get(store, Key::new(&INSTALL_PLAN.store_key(), NS, "install-up2")).await.expect("the plan");
        let at = |p: &str| plan.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
        (at("/status/phase"), at("/status/message"))
    }

    /// An upgrade's plan that would take the admin's MachineConfig fails having written
    /// nothing, whatever comes first in it: no CSV of the new bundle (which would replace the
    /// installed one once it succeeded), the installed bundle's config as it was.
    #[tokio::test]
    async fn a_plan_that_finds_a_name_taken_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).expect("store"));
        let events = Recorder::new("test", store.clone(), Duration::from_secs(3600));
        let before = installed_v1(&store).await;
        reconcile(&store, &events).await.expect("a pass");
        let (phase, message) = outcome(&store).await;
        assert_eq!(phase, olm::PLAN_FAILED, "{message}");
        assert_eq!(
            message,
            "bundle up.v2.0.0 cannot be installed: MachineConfig \"90-up-b\" exists and was not installed by an \
             operator bundle"
        );
        assert_eq!(get(&store, csv_key(NS, "up.v2.0.0")).await, None, "no CSV of the failed plan");
        assert_eq!(get(&store, config_key("89-up-new")).await, None, "no config of the failed plan");
        assert_eq!(get(&store, config_key("90-up-a")).await, Some(before), "the installed bundle's, untouched");
        let admins = get(&store, config_key("90-up-b")).await.expect("90-up-b");
        assert!(admins.to_string().contains("data:,admin"), "{admins}");
        assert!(get(&store, csv_key(NS, "up.v1.0.0")).await.is_some());
    }

    /// The store, with the admin's MachineConfig `90-up-b` created right after the plan's CSV:
    /// the name is free when the plan checks it and taken when it writes it.
    fn racing(inner: Arc<dyn Store>) -> Arc<dyn Store> {
        use crate::store::hooked::{Hooked, Moment};
        Arc::new(Hooked {
            inner,
            hook: Box::new(|inner, moment, key| {
                Box::pin(async move {
                    if moment == Moment::AfterCreate && key.resource == CLUSTER_SERVICE_VERSION.store_key() {
                        let mut admins = config("90-up-b", "admin", None);
                        objects::prepare_create(&mut admins, "");
                        inner.create(&config_key("90-up-b"), admins).await?;
                    }
                    Ok(())
                })
            }),
        })
    }

    /// A name taken between the check and the write undoes what the plan wrote before it: the
    /// config it created is deleted, the installed bundle's config is back as it was (its
    /// content and its CSV label), and the new CSV is deleted, so it never replaces the
    /// installed one.
    #[tokio::test]
    async fn a_name_taken_during_the_install_undoes_what_the_plan_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).expect("store"));
        let before = installed_v1(&inner).await;
        inner.delete(&config_key("90-up-b"), None).await.expect("the admin's config gone for now");
        let store = racing(inner.clone());
        let events = Recorder::new("test", inner.clone(), Duration::from_secs(3600));
        reconcile(&store, &events).await.expect("a pass");
        let (phase, message) = outcome(&inner).await;
        assert_eq!(phase, olm::PLAN_FAILED, "{message}");
        assert!(message.contains("MachineConfig \"90-up-b\" exists and was not installed"), "{message}");
        assert_eq!(get(&inner, csv_key(NS, "up.v2.0.0")).await, None, "the new CSV undone");
        assert_eq!(get(&inner, config_key("89-up-new")).await, None, "the config it created undone");
        let restored = get(&inner, config_key("90-up-a")).await.expect("90-up-a");
        assert_eq!(restored["spec"], before["spec"], "{restored}");
        assert_eq!(restored["metadata"]["labels"], before["metadata"]["labels"], "{restored}");
        let plan = get(&inner, Key::new(&INSTALL_PLAN.store_key(), NS, "install-up2")).await.expect("the plan");
        let steps: Vec<&str> =
            plan["status"]["plan"].as_array().into_iter().flatten().filter_map(|s| s["status"].as_str()).collect();
        assert!(steps.iter().all(|s| *s == "Unknown"), "no step shows a write that was undone: {steps:?}");
    }

    /// A pass cut short (a crash) wrote the new CSV, took 90-up-a over from the installed CSV
    /// and created 89-up-new; the next pass finds 90-up-b taken and undoes: the new CSV goes,
    /// and 90-up-a is handed back to the installed CSV as it is (its old contents were lost with
    /// that pass) instead of being left for the sweep of uninstalled CSVs to delete, which
    /// would roll an installed bundle's files off every node.
    #[tokio::test]
    async fn a_config_taken_over_by_a_pass_cut_short_goes_back_to_the_installed_csv() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).expect("store"));
        let events = Recorder::new("test", store.clone(), Duration::from_secs(3600));
        let taken = installed_v1(&store).await;
        let v2 = json!({"apiVersion": olm::API_VERSION, "kind": "ClusterServiceVersion",
            "metadata": {"name": "up.v2.0.0", "annotations": {olm::INSTALL_PLAN_ANNOTATION: "install-up2"}},
            "spec": {"version": "2.0.0", "replaces": "up.v1.0.0"}});
        put(&store, &CLUSTER_SERVICE_VERSION, NS, v2).await;
        let mut a = config("90-up-a", "v2", Some("up.v2.0.0"));
        a["metadata"]["annotations"] = json!({olm::TAKEN_OVER_ANNOTATION: "up.v1.0.0"});
        a["metadata"]["resourceVersion"] = taken["metadata"]["resourceVersion"].clone();
        store.update(&config_key("90-up-a"), a, revision_of(&taken)).await.expect("taken over");
        put(&store, &MACHINE_CONFIG, "", config("89-up-new", "v2", Some("up.v2.0.0"))).await;

        reconcile(&store, &events).await.expect("a pass");
        let (phase, message) = outcome(&store).await;
        assert_eq!(phase, olm::PLAN_FAILED, "{message}");
        assert_eq!(get(&store, csv_key(NS, "up.v2.0.0")).await, None, "no CSV of the failed plan");
        let back = get(&store, config_key("90-up-a")).await.expect("90-up-a kept");
        assert_eq!(config_owner(&back), (Some(NS), Some("up.v1.0.0")), "{back}");
        assert!(back
            .pointer(&format!("/metadata/annotations/{}", olm::TAKEN_OVER_ANNOTATION.replace('/', "~1")))
            .is_none());
        let created = get(&store, config_key("89-up-new")).await.expect("the sweep's to delete");
        assert_eq!(
            config_owner(&created).1,
            Some("up.v2.0.0"),
            "a config the cut-short pass created stays the new CSV's"
        );
    }

    /// A CSV of the plan's CSV's name that the plan did not make (one created by hand) fails
    /// the plan, named, with nothing written and that CSV kept; one the plan made itself (a
    /// pass cut short after writing it) is taken, and the install goes on.
    #[tokio::test]
    async fn a_plan_takes_only_its_own_csv() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).expect("store"));
        let events = Recorder::new("test", store.clone(), Duration::from_secs(3600));
        let before = installed_v1(&store).await;
        store.delete(&config_key("90-up-b"), None).await.expect("the admin's config gone");
        let by_hand = json!({"apiVersion": olm::API_VERSION, "kind": "ClusterServiceVersion",
            "metadata": {"name": "up.v2.0.0"}, "spec": {"version": "2.0.0"}});
        put(&store, &CLUSTER_SERVICE_VERSION, NS, by_hand).await;
        reconcile(&store, &events).await.expect("a pass");
        let (phase, message) = outcome(&store).await;
        assert_eq!(phase, olm::PLAN_FAILED, "{message}");
        assert_eq!(
            message,
            "bundle up.v2.0.0 cannot be installed: ClusterServiceVersion operators/up.v2.0.0 exists, created by hand, \
             not by an InstallPlan"
        );
        assert!(get(&store, csv_key(NS, "up.v2.0.0")).await.is_some(), "the CSV made by hand is kept");
        assert_eq!(get(&store, config_key("90-up-a")).await, Some(before));

        // The plan's own CSV, as a pass cut short left it: taken, and the install completes.
        store.delete(&csv_key(NS, "up.v2.0.0"), None).await.expect("deleted");
        let own = json!({"apiVersion": olm::API_VERSION, "kind": "ClusterServiceVersion",
            "metadata": {"name": "up.v2.0.0", "annotations": {olm::INSTALL_PLAN_ANNOTATION: "install-up2"}},
            "spec": {"version": "2.0.0", "replaces": "up.v1.0.0"}});
        put(&store, &CLUSTER_SERVICE_VERSION, NS, own).await;
        let key = Key::new(&INSTALL_PLAN.store_key(), NS, "install-up2");
        let mut plan = get(&store, key.clone()).await.expect("the plan");
        plan["status"]["phase"] = json!(olm::PLAN_INSTALLING);
        let rev = revision_of(&plan);
        store.update(&key, plan, rev).await.expect("installing again");
        reconcile(&store, &events).await.expect("a pass");
        let (phase, message) = outcome(&store).await;
        assert_eq!(phase, olm::PLAN_COMPLETE, "{message}");
        let upgraded = get(&store, config_key("90-up-a")).await.expect("90-up-a");
        assert_eq!(upgraded["metadata"]["labels"][olm::OWNER_CSV_LABEL], "up.v2.0.0", "{upgraded}");
        assert!(upgraded.to_string().contains("data:,v2"), "{upgraded}");
    }
}
