//! ClusterServiceVersions: an install is a rollout.
//!
//! A CSV is Installing until every pool that selects its MachineConfigs runs a rendered config
//! made with them on all its nodes, then Succeeded; a degraded pool on the way makes it Failed
//! (and Installing again once the pool recovers), with the pool's words. The CSV it replaces
//! stays, Replacing, until then, and is deleted after, with every CSV behind it on the
//! `replaces` chain (an upgrade of several hops plans the next before the last has succeeded),
//! as OLM deletes a CSV whose chain of replacements leads to a Succeeded one. MachineConfigs
//! whose CSV is gone (an uninstall: `delete csv`) are removed, which rolls the pools back
//! without them.

use super::{configs_of, involved, key_of, note, warn, write_if_changed};
use crate::controllers::events::{EventType, Involved, Recorder};
use crate::resources::{CLUSTER_SERVICE_VERSION, MACHINE_CONFIG, MACHINE_CONFIG_POOL};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError};
use aloft_api::meta::find_condition;
use aloft_api::olm::{self, ClusterServiceVersion, OWNER_CSV_LABEL, OWNER_NAMESPACE_LABEL};
use aloft_api::MachineConfigPool;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Follow every CSV; whether one is still installing.
pub async fn reconcile(store: &Arc<dyn Store>, events: &Recorder) -> Result<bool, StoreError> {
    let listed = store.list(&CLUSTER_SERVICE_VERSION.store_key(), None).await?.items;
    let csvs: Vec<(Value, ClusterServiceVersion)> = listed
        .into_iter()
        .filter_map(|raw| serde_json::from_value::<ClusterServiceVersion>(raw.clone()).ok().map(|c| (raw, c)))
        .collect();
    let pools: Vec<MachineConfigPool> = store
        .list(&MACHINE_CONFIG_POOL.store_key(), None)
        .await?
        .items
        .into_iter()
        .filter_map(|p| serde_json::from_value(p).ok())
        .collect();
    let mut installing = false;
    // The upgrades done: every CSV behind a Succeeded one goes, the oldest first, so that a
    // deletion cut short leaves the rest of the chain to find it by in the next pass.
    let mut retiring = HashSet::new();
    for (head, behind) in replaced_chains(&csvs) {
        let (_, new) = &csvs[head];
        let ns = new.metadata.namespace.clone().unwrap_or_default();
        retiring.extend(behind.iter().copied());
        for old in behind.iter().rev() {
            let (raw, csv) = &csvs[*old];
            if !delete_replaced(store, events, raw, &ns, &csv.metadata.name, &new.metadata.name).await? {
                break;
            }
        }
    }
    for (i, (raw, csv)) in csvs.iter().enumerate() {
        if retiring.contains(&i) {
            continue;
        }
        let ns = csv.metadata.namespace.clone().unwrap_or_default();
        let name = &csv.metadata.name;
        let about = involved("ClusterServiceVersion", &ns, name);
        let now = objects::now();
        let mut status = csv.status.clone().unwrap_or_default();
        let successor = csvs.iter().find(|(_, c)| {
            c.metadata.namespace.as_deref() == Some(ns.as_str()) && c.spec_str("replaces") == name.as_str()
        });
        if let Some((_, new)) = successor {
            status.set_phase(
                olm::CSV_REPLACING,
                "BeingReplaced",
                &format!("being replaced by csv: {ns}/{}", new.metadata.name),
                &now,
            );
        } else {
            let configs = configs_of(store, &ns, name).await?;
            let progress = progress(&configs, &pools);
            let (phase, reason, message) = match &progress {
                Progress::Done => {
                    (olm::CSV_SUCCEEDED, "InstallSucceeded", "install strategy completed with no errors".to_string())
                }
                Progress::Degraded(why) => (olm::CSV_FAILED, "InstallCheckFailed", why.clone()),
                Progress::Waiting(why) => (olm::CSV_INSTALLING, "InstallWaiting", why.clone()),
            };
            let was = status.phase.clone();
            if status.set_phase(phase, reason, &message, &now) && was != phase {
                match phase {
                    olm::CSV_SUCCEEDED => {
                        note(events, &about, "InstallSucceeded", "install strategy completed with no errors")
                    }
                    olm::CSV_FAILED => warn(events, &about, "InstallCheckFailed", &message),
                    _ => {}
                }
            }
            installing |= phase != olm::CSV_SUCCEEDED;
        }
        let mut next = raw.clone();
        next["status"] = serde_json::to_value(&status).unwrap_or(Value::Null);
        write_if_changed(store, &key_of(&CLUSTER_SERVICE_VERSION, raw), raw, next).await?;
    }
    sweep_orphans(store, events, &csvs).await?;
    Ok(installing)
}

/// Where a CSV's MachineConfigs are in the pools.
#[derive(Debug, PartialEq)]
enum Progress {
    Done,
    Waiting(String),
    Degraded(String),
}

/// Every pool that selects one of `configs` must run a rendered config made with all of those
/// it selects, on every node.
fn progress(configs: &[Value], pools: &[MachineConfigPool]) -> Progress {
    if configs.is_empty() {
        return Progress::Done;
    }
    let labels_of = |mc: &Value| -> BTreeMap<String, String> {
        mc.pointer("/metadata/labels").and_then(|l| serde_json::from_value(l.clone()).ok()).unwrap_or_default()
    };
    let mut waiting = Vec::new();
    let mut degraded = Vec::new();
    let mut selected_by_any = false;
    for pool in pools {
        let Some(selector) =
            pool.spec.machine_config_selector.as_ref().filter(|s| !s.is_empty()).and_then(|s| s.to_selector().ok())
        else {
            continue;
        };
        let mine: HashSet<&str> =
            configs.iter().filter(|mc| selector.matches(&labels_of(mc))).map(objects::name_of).collect();
        if mine.is_empty() {
            continue;
        }
        selected_by_any = true;
        let name = &pool.metadata.name;
        let st = pool.status.clone().unwrap_or_default();
        if let Some(c) = find_condition(&st.conditions, "Degraded").filter(|c| c.is_true()) {
            degraded.push(format!("pool {name} is degraded: {}", c.message));
            continue;
        }
        let target = pool.spec.configuration.as_ref().map(|c| c.name.as_str()).unwrap_or("");
        let running = st.configuration.as_ref();
        let rendered_with_mine =
            running.is_some_and(|c| c.name == target && mine.iter().all(|m| c.source.iter().any(|s| s.name == *m)));
        if !rendered_with_mine {
            waiting.push(format!("{name} (not rendered with them yet)"));
        } else if st.updated_machine_count < st.machine_count {
            waiting.push(format!("{name} ({} of {} nodes updated)", st.updated_machine_count, st.machine_count));
        }
    }
    if !degraded.is_empty() {
        return Progress::Degraded(degraded.join("; "));
    }
    if !selected_by_any {
        let names: Vec<&str> = configs.iter().map(objects::name_of).collect();
        return Progress::Waiting(format!(
            "no pool selects its MachineConfigs ({}): a pool's machineConfigSelector must match their labels",
            names.join(", ")
        ));
    }
    if waiting.is_empty() {
        Progress::Done
    } else {
        Progress::Waiting(format!("waiting for the pools to roll out its MachineConfigs: {}", waiting.join(", ")))
    }
}

/// For each Succeeded CSV that replaces another, the CSVs behind it on its `replaces` chain
/// (by index into `csvs`), nearest first: all of them are done with. A chain is followed in
/// the Succeeded CSV's namespace, each CSV once (a cycle ends it).
fn replaced_chains(csvs: &[(Value, ClusterServiceVersion)]) -> Vec<(usize, Vec<usize>)> {
    let index: BTreeMap<(&str, &str), usize> = csvs
        .iter()
        .enumerate()
        .map(|(i, (_, c))| ((c.metadata.namespace.as_deref().unwrap_or(""), c.metadata.name.as_str()), i))
        .collect();
    let mut chains = Vec::new();
    for (head, (_, csv)) in csvs.iter().enumerate() {
        if csv.status.as_ref().map(|s| s.phase.as_str()) != Some(olm::CSV_SUCCEEDED) {
            continue;
        }
        let ns = csv.metadata.namespace.as_deref().unwrap_or("");
        let mut behind = Vec::new();
        let mut next = csv.spec_str("replaces");
        while let Some(&i) = index.get(&(ns, next)) {
            if i == head || behind.contains(&i) {
                break;
            }
            behind.push(i);
            next = csvs[i].1.spec_str("replaces");
        }
        if !behind.is_empty() {
            chains.push((head, behind));
        }
    }
    chains
}

/// The upgrade is done: the old CSV goes (its configs were replaced or removed by the plan).
/// Whether it is gone.
async fn delete_replaced(
    store: &Arc<dyn Store>,
    events: &Recorder,
    raw: &Value,
    ns: &str,
    name: &str,
    by: &str,
) -> Result<bool, StoreError> {
    for mc in configs_of(store, ns, name).await? {
        delete(store, &Key::cluster(&MACHINE_CONFIG.store_key(), objects::name_of(&mc)), &mc).await?;
    }
    match store.delete(&key_of(&CLUSTER_SERVICE_VERSION, raw), revision_of(raw)).await {
        Ok(_) => {
            note(events, &involved("ClusterServiceVersion", ns, by), "Replaced", &format!("replaced {ns}/{name}"));
            Ok(true)
        }
        Err(StoreError::NotFound(_)) => Ok(true),
        Err(StoreError::Conflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// An uninstall: MachineConfigs whose CSV no longer exists are deleted.
async fn sweep_orphans(
    store: &Arc<dyn Store>,
    events: &Recorder,
    csvs: &[(Value, ClusterServiceVersion)],
) -> Result<(), StoreError> {
    let alive: HashSet<(String, String)> =
        csvs.iter().map(|(_, c)| (c.metadata.namespace.clone().unwrap_or_default(), c.metadata.name.clone())).collect();
    for mc in store.list(&MACHINE_CONFIG.store_key(), None).await?.items {
        let label = |k: &str| mc.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
        let (Some(ns), Some(csv)) = (label(OWNER_NAMESPACE_LABEL), label(OWNER_CSV_LABEL)) else { continue };
        if alive.contains(&(ns.to_string(), csv.to_string())) {
            continue;
        }
        // Read again: the CSV may have been created since the list (a plan installing now).
        let csv_key = Key::new(&CLUSTER_SERVICE_VERSION.store_key(), ns, csv);
        if store.get(&csv_key).await?.is_some() {
            continue;
        }
        let name = objects::name_of(&mc).to_string();
        if delete(store, &Key::cluster(&MACHINE_CONFIG.store_key(), &name), &mc).await? {
            let about = Involved {
                api_version: aloft_api::MCO_API_VERSION.into(),
                kind: "MachineConfig".into(),
                namespace: String::new(),
                name: name.clone(),
                uid: None,
            };
            events.emit(
                &about,
                EventType::Normal,
                "OperatorUninstalled",
                &format!("deleted: its ClusterServiceVersion {ns}/{csv} is gone"),
            );
        }
    }
    Ok(())
}

async fn delete(store: &Arc<dyn Store>, key: &Key, stored: &Value) -> Result<bool, StoreError> {
    match store.delete(key, revision_of(stored)).await {
        Ok(_) => Ok(true),
        Err(StoreError::NotFound(_)) | Err(StoreError::Conflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, role: &str, running: &str, sources: &[&str], updated: i64, count: i64) -> MachineConfigPool {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": role}},
                "configuration": {"name": "rendered-new"},
            },
            "status": {
                "configuration": {"name": running, "source": sources.iter().map(|s| json!({"name": s})).collect::<Vec<_>>()},
                "machineCount": count, "updatedMachineCount": updated,
            },
        }))
        .expect("pool")
    }

    fn config(name: &str, role: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": role}}})
    }

    #[test]
    fn a_csv_succeeds_when_every_pool_selecting_its_configs_runs_them() {
        let configs = [config("50-exporter", "worker")];
        assert_eq!(progress(&[], &[]), Progress::Done, "nothing to roll out");
        let rendering = [pool("worker", "worker", "rendered-old", &["00-worker"], 3, 3)];
        assert!(matches!(progress(&configs, &rendering), Progress::Waiting(m) if m.contains("worker (not rendered")));
        let rolling = [pool("worker", "worker", "rendered-new", &["00-worker", "50-exporter"], 1, 3)];
        assert!(
            matches!(progress(&configs, &rolling), Progress::Waiting(m) if m.contains("worker (1 of 3 nodes updated)"))
        );
        let done = [
            pool("worker", "worker", "rendered-new", &["00-worker", "50-exporter"], 3, 3),
            pool("master", "master", "rendered-old", &["00-master"], 0, 3),
        ];
        assert_eq!(progress(&configs, &done), Progress::Done, "the master pool does not select them");
        let nobody = [pool("master", "master", "rendered-new", &[], 3, 3)];
        assert!(matches!(progress(&configs, &nobody), Progress::Waiting(m) if m.contains("no pool selects")));
        let mut sick = pool("worker", "worker", "rendered-new", &["50-exporter"], 1, 3);
        sick.status.as_mut().expect("status").conditions = vec![aloft_api::Condition {
            type_: "Degraded".into(),
            status: "True".into(),
            message: "1 nodes are reporting degraded status".into(),
            ..Default::default()
        }];
        assert!(
            matches!(progress(&configs, &[sick]), Progress::Degraded(m) if m.contains("pool worker is degraded: 1 nodes"))
        );
    }

    /// Every CSV behind a Succeeded one on its `replaces` chain is done with, nearest first:
    /// not only its direct predecessor (a multi-hop upgrade plans each hop before the last has
    /// succeeded); nothing while the newest has not succeeded; a chain stays in its namespace,
    /// and a cycle ends.
    #[test]
    fn every_csv_behind_a_succeeded_one_is_done_with() {
        let csv = |ns: &str, name: &str, replaces: &str, phase: &str| -> (Value, ClusterServiceVersion) {
            let raw = json!({"metadata": {"name": name, "namespace": ns}, "spec": {"replaces": replaces},
                "status": {"phase": phase}});
            (raw.clone(), serde_json::from_value(raw).expect("a CSV"))
        };
        let hops = |head_phase: &str| {
            vec![
                csv("operators", "hop.v1.0.0", "", olm::CSV_REPLACING),
                csv("operators", "hop.v1.1.0", "hop.v1.0.0", olm::CSV_REPLACING),
                csv("operators", "hop.v1.2.0", "hop.v1.1.0", head_phase),
                csv("elsewhere", "hop.v1.0.0", "", olm::CSV_SUCCEEDED),
            ]
        };
        assert_eq!(replaced_chains(&hops(olm::CSV_SUCCEEDED)), [(2, vec![1, 0])]);
        assert!(replaced_chains(&hops(olm::CSV_INSTALLING)).is_empty());
        let cycle = [
            csv("operators", "a", "b", olm::CSV_SUCCEEDED),
            csv("operators", "b", "c", olm::CSV_REPLACING),
            csv("operators", "c", "b", olm::CSV_REPLACING),
        ];
        assert_eq!(replaced_chains(&cycle), [(0, vec![1, 2])]);
    }
}
