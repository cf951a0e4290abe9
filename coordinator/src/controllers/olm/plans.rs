//! InstallPlans: what installing a bundle creates, shown before approval and created after it.
//!
//! The steps are fixed when the plan is made (each manifest kept whole), so approving a plan
//! installs exactly what was shown. A bundle aloft cannot install whole (objects of kinds it
//! does not run, a CSV that asks for Deployments, MachineConfigs an agent would refuse, no
//! manifests at all) gives a Failed plan that names every reason and creates nothing.

use super::{configs_of, involved, key_of, note, warn, write_if_changed};
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
        if owned && plan.spec.cluster_service_version_names == [bundle.name.clone()] && phase != olm::PLAN_FAILED {
            return Ok(Created { name: plan.metadata.name, uid: plan.metadata.uid.unwrap_or_default(), phase });
        }
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
    let about = involved("InstallPlan", &ns, &plan.metadata.name);
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
    // The CSV first: the MachineConfigs name it, and the sweep of an uninstalled CSV's configs
    // must never see them without it.
    let mut replaces = String::new();
    for (i, obj) in
        objects.iter().filter(|(_, o)| o.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion"))
    {
        replaces = obj.pointer("/spec/replaces").and_then(Value::as_str).unwrap_or("").to_string();
        let key = Key::new(&CLUSTER_SERVICE_VERSION.store_key(), &ns, objects::name_of(obj));
        status.plan[*i].status = if store.get(&key).await?.is_some() {
            "Present".into()
        } else {
            let mut csv = obj.clone();
            csv["status"] = json!({
                "phase": olm::CSV_PENDING, "reason": "RequirementsUnknown",
                "message": "requirements not yet checked", "lastUpdateTime": now, "lastTransitionTime": now,
                "conditions": [{"phase": olm::CSV_PENDING, "reason": "RequirementsUnknown",
                                "message": "requirements not yet checked", "lastTransitionTime": now}],
            });
            objects::prepare_create(&mut csv, &ns);
            match store.create(&key, csv).await {
                Ok(_) | Err(StoreError::AlreadyExists(_)) => "Created".into(),
                Err(e) => return Err(e),
            }
        };
    }
    let mut installed_configs = Vec::new();
    let mut refused = Vec::new();
    for (i, obj) in objects.iter().filter(|(_, o)| o.get("kind").and_then(Value::as_str) == Some("MachineConfig")) {
        let name = objects::name_of(obj).to_string();
        installed_configs.push(name.clone());
        match put_config(store, obj, &ns, &csv_name, &replaces).await? {
            Ok(step) => status.plan[*i].status = step.into(),
            Err(why) => refused.push(why),
        }
    }
    if !refused.is_empty() {
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
                if !installed_configs.contains(&name) {
                    let key = Key::cluster(&MACHINE_CONFIG.store_key(), &name);
                    match store.delete(&key, revision_of(&old)).await {
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

/// Create or take over one MachineConfig for `csv`: the step's status, or why it is refused (a
/// config of that name the admin wrote, or another operator's that this CSV does not replace).
async fn put_config(
    store: &Arc<dyn Store>,
    obj: &Value,
    ns: &str,
    csv: &str,
    replaces: &str,
) -> Result<Result<&'static str, String>, StoreError> {
    use aloft_api::olm::{OWNER_CSV_LABEL, OWNER_NAMESPACE_LABEL};
    let name = objects::name_of(obj).to_string();
    let key = Key::cluster(&MACHINE_CONFIG.store_key(), &name);
    let mut want = obj.clone();
    if !want["metadata"]["labels"].is_object() {
        want["metadata"]["labels"] = json!({});
    }
    want["metadata"]["labels"][OWNER_CSV_LABEL] = json!(csv);
    want["metadata"]["labels"][OWNER_NAMESPACE_LABEL] = json!(ns);
    for _ in 0..3 {
        let result = match store.get(&key).await? {
            None => {
                let mut created = want.clone();
                objects::prepare_create(&mut created, "");
                store.create(&key, created).await.map(|_| "Created")
            }
            Some(existing) => {
                let label = |k: &str| {
                    existing.object.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str)
                };
                let owner = (label(OWNER_NAMESPACE_LABEL), label(OWNER_CSV_LABEL));
                let ours =
                    owner == (Some(ns), Some(csv)) || (!replaces.is_empty() && owner == (Some(ns), Some(replaces)));
                if !ours {
                    return Ok(Err(match owner {
                        (Some(n), Some(c)) => {
                            format!("MachineConfig {name:?} belongs to ClusterServiceVersion {n}/{c}")
                        }
                        _ => format!("MachineConfig {name:?} exists and was not installed by an operator bundle"),
                    }));
                }
                let mut next = (*existing.object).clone();
                next["spec"] = want["spec"].clone();
                next["metadata"]["labels"] = want["metadata"]["labels"].clone();
                if let Some(a) = want.pointer("/metadata/annotations") {
                    next["metadata"]["annotations"] = a.clone();
                }
                if next == *existing.object {
                    return Ok(Ok("Present"));
                }
                objects::set_generation(&existing.object, &mut next);
                store.update(&key, next, revision_of(&existing.object)).await.map(|_| "Created")
            }
        };
        match result {
            Ok(step) => return Ok(Ok(step)),
            Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadyExists(_)) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    // Written under it three times over: the pass ends and the next one tries again.
    Err(StoreError::Conflict { have: 0, stored: 0 })
}
