//! The render controller: for every pool, merge the MachineConfigs it selects into
//! `rendered-<pool>-<hash>` (MCO's rules, in [`aloft_api::render`]), create that config, and point
//! the pool's `spec.configuration` at it. A pool that cannot render gets `RenderDegraded=True` with
//! the reason, and keeps its previous configuration.

use crate::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError};
use aloft_api::machineconfig::conditions as cond;
use aloft_api::meta::set_condition;
use aloft_api::{
    Condition, MachineConfig, MachineConfigPool, MachineConfigPoolStatus, ObjectMeta, OwnerReference, PoolConfiguration,
};
use serde_json::Value;
use std::sync::Arc;

/// Renders after every change of a MachineConfig, and of a pool's spec: a pool's status writes
/// (the node controller's, many a second in a rollout) render nothing new, and would keep the
/// batch of a MachineConfig change open until [`super::BATCH_AT_MOST`].
pub async fn run(store: Arc<dyn Store>, passes: super::passes::Passes) {
    let watched = [MACHINE_CONFIG.store_key(), MACHINE_CONFIG_POOL.store_key()];
    let pools = MACHINE_CONFIG_POOL.store_key();
    let relevant = move || -> Box<dyn FnMut(&crate::store::Event) -> bool + Send> {
        let pools = pools.clone();
        let mut specs = super::SpecChanges::default();
        Box::new(move |ev| ev.key.resource != pools || specs.changed(ev))
    };
    super::run_loop("render", store, &watched, relevant, passes, |s| async move { reconcile_all(&s).await }).await
}

/// A stored MachineConfig that does not read as one (stored by an older aloft, before a rule
/// admission now enforces): a pool that selects it cannot render, as MCO fails a render on a
/// config it cannot use. Left out silently, its files and units would be deleted from the nodes.
struct Unreadable {
    meta: ObjectMeta,
    error: String,
}

/// Render every pool against the current MachineConfigs.
pub async fn reconcile_all(store: &Arc<dyn Store>) -> Result<(), StoreError> {
    let mut mcs: Vec<MachineConfig> = Vec::new();
    let mut unreadable = Vec::new();
    for v in store.list(&MACHINE_CONFIG.store_key(), None).await?.items {
        match serde_json::from_value::<MachineConfig>(v.clone()) {
            Ok(mc) => mcs.push(mc),
            Err(e) => {
                let meta: ObjectMeta = serde_json::from_value(v["metadata"].clone()).unwrap_or_default();
                tracing::warn!(config = %meta.name, error = %e, "a stored MachineConfig does not read");
                unreadable.push(Unreadable { meta, error: e.to_string() });
            }
        }
    }
    let pools = store.list(&MACHINE_CONFIG_POOL.store_key(), None).await?;
    for pool in pools.items {
        let name = objects::name_of(&pool).to_string();
        let key = Key::cluster(&MACHINE_CONFIG_POOL.store_key(), &name);
        let mut raw = pool;
        // A write that lost to another (mostly the node controller's status, whose events do
        // not wake this controller) is made again on a fresh read, not left to the resync.
        for attempt in 1..=RACES {
            match reconcile_pool(store, &mcs, &unreadable, raw).await {
                Ok(Written::Done) => break,
                Ok(Written::LostRace) if attempt < RACES => {}
                Ok(Written::LostRace) => {
                    tracing::warn!(pool = %name, "render lost {RACES} writes in a row; the next pass retries")
                }
                Err(e) => {
                    tracing::warn!(pool = %name, error = %e, "render failed to write");
                    break;
                }
            }
            match store.get(&key).await? {
                Some(fresh) => raw = (*fresh.object).clone(),
                None => break,
            }
        }
    }
    Ok(())
}

/// How many times a pass writes a pool again after losing the race for it.
const RACES: u32 = 5;

/// Whether a pool's write landed.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    /// Written, or nothing to write.
    Done,
    /// Another write came first: read again and redo.
    LostRace,
}

/// The first config `pool` selects that does not read, and why.
fn unreadable_selected<'a>(pool: &MachineConfigPool, unreadable: &'a [Unreadable]) -> Option<&'a Unreadable> {
    let sel = pool.spec.machine_config_selector.as_ref().filter(|s| !s.is_empty())?.to_selector().ok()?;
    unreadable
        .iter()
        .find(|u| !u.meta.owner_references.iter().any(|o| o.kind == "MachineConfigPool") && sel.matches(&u.meta.labels))
}

fn degraded_status(status: &mut MachineConfigPoolStatus, message: Option<String>) -> bool {
    let now = objects::now();
    let (s, reason, msg) = match &message {
        Some(m) => ("True", "RenderFailed", m.clone()),
        None => ("False", "", String::new()),
    };
    let mut changed = set_condition(
        &mut status.conditions,
        Condition {
            type_: cond::RENDER_DEGRADED.into(),
            status: s.into(),
            reason: reason.into(),
            message: msg.clone(),
            ..Default::default()
        },
        &now,
    );
    // Degraded summarises RenderDegraded and NodeDegraded, worded as the node controller words
    // it: a render that leaves nodes degraded must not blank the node controller's message
    // (`aloftctl rollout status` reported "pool worker is degraded: " in between).
    let node_degraded = aloft_api::meta::find_condition(&status.conditions, cond::NODE_DEGRADED)
        .filter(|c| c.is_true())
        .map(|c| c.message.clone());
    let (degraded, reason, msg) = match (message.is_some(), node_degraded) {
        (true, _) => (true, "RenderFailed", msg),
        (false, Some(m)) => (true, "NodeDegraded", m),
        (false, None) => (false, "", String::new()),
    };
    changed |= set_condition(
        &mut status.conditions,
        Condition {
            type_: cond::DEGRADED.into(),
            status: if degraded { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: msg,
            ..Default::default()
        },
        &now,
    );
    changed
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, StoreError> {
    serde_json::to_value(v).map_err(|e| StoreError::Backend(e.to_string()))
}

async fn reconcile_pool(
    store: &Arc<dyn Store>,
    mcs: &[MachineConfig],
    unreadable: &[Unreadable],
    raw: Value,
) -> Result<Written, StoreError> {
    let rev = revision_of(&raw);
    let mut pool: MachineConfigPool = match serde_json::from_value(raw.clone()) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "skipping a pool that does not parse");
            return Ok(Written::Done);
        }
    };
    if pool.metadata.deletion_timestamp.is_some() {
        // Being deleted (a finalizer holds it): as MCO's controllers, render nothing more for it.
        // A new rendered config would be rolled out to nodes the admin is taking the pool from,
        // and adopting its generated configs would undo an orphaning DELETE.
        return Ok(Written::Done);
    }
    let current = pool.spec.configuration.as_ref().and_then(|c| mcs.iter().find(|m| m.metadata.name == c.name));
    let mut status = pool.status.clone().unwrap_or_default();
    let outcome = match unreadable_selected(&pool, unreadable) {
        Some(u) => Err(format!("MachineConfig {:?} cannot be read: {}", u.meta.name, u.error)),
        None => aloft_api::render::render(&pool, mcs, current).map_err(|e| e.to_string()),
    };
    match outcome {
        Ok(rendered) => {
            let name = rendered.machine_config.metadata.name.clone();
            match mcs.iter().find(|m| m.metadata.name == name) {
                None => create_rendered(store, &pool, &rendered.machine_config).await?,
                Some(existing) if adopts(existing, &pool) => adopt(store, &pool, &rendered.machine_config).await?,
                Some(existing)
                    if aloft_api::render::is_generated(existing) && existing.spec != rendered.machine_config.spec =>
                {
                    restore(store, &pool, &rendered.machine_config).await?
                }
                Some(_) => {}
            }
            // (The target too: a write above was read afresh, and one it started comes back.)
            for mc in mcs.iter().filter(|m| unblocking(m, &pool)) {
                block_deletion(store, &pool, &mc.metadata.name).await?;
            }
            let want = PoolConfiguration { name, source: rendered.sources, extra: Default::default() };
            let spec_changed =
                pool.spec.configuration.as_ref().map(|c| (&c.name, &c.source)) != Some((&want.name, &want.source));
            if spec_changed {
                let extra = pool.spec.configuration.take().map(|c| c.extra).unwrap_or_default();
                pool.spec.configuration = Some(PoolConfiguration { extra, ..want });
            }
            let status_changed = degraded_status(&mut status, None);
            if !spec_changed && !status_changed {
                return Ok(Written::Done);
            }
        }
        Err(e) => {
            let message = format!("Failed to render configuration for pool {}: {e}", pool.metadata.name);
            if !degraded_status(&mut status, Some(message.clone())) {
                return Ok(Written::Done);
            }
            tracing::warn!(pool = %pool.metadata.name, %message, "render degraded");
        }
    }
    // Write only the two parts this controller owns into the stored document, so every other
    // field stays exactly as the user wrote it.
    let mut obj = raw;
    if let Some(c) = &pool.spec.configuration {
        let c = to_value(c)?;
        if obj["spec"]["configuration"] != c {
            obj["spec"]["configuration"] = c;
            // A spec change, as MCO's render controller writes it through the API: the
            // generation moves, so until the node controller's status catches up
            // (`observedGeneration`) clients (`kubectl wait --for=condition=Updated`, kstatus)
            // do not take the old config's `Updated=True` for the new one's.
            let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
            obj["metadata"]["generation"] = (generation + 1).into();
        }
    }
    obj["status"] = to_value(&status)?;
    let key = Key::cluster(&MACHINE_CONFIG_POOL.store_key(), &pool.metadata.name);
    match store.update(&key, obj, rev).await {
        Ok(_) | Err(StoreError::NotFound(_)) => Ok(Written::Done),
        Err(StoreError::Conflict { .. }) => Ok(Written::LostRace),
        Err(e) => Err(e),
    }
}

async fn create_rendered(
    store: &Arc<dyn Store>,
    pool: &MachineConfigPool,
    rendered: &MachineConfig,
) -> Result<(), StoreError> {
    let name = &rendered.metadata.name;
    let mut obj = to_value(rendered)?;
    objects::prepare_create(&mut obj, "");
    match store.create(&Key::cluster(&MACHINE_CONFIG.store_key(), name), obj).await {
        Ok(_) => tracing::info!(pool = %pool.metadata.name, config = %name, "rendered"),
        Err(StoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

/// Put back the spec of the pool's target when the stored one differs from what its name is the
/// hash of. Admission refuses edits of a rendered config, but a delete and a create in a row
/// (`kubectl replace --force`) can win the race with this controller's own create, and an
/// import can bring one: nodes that joined after it got other contents under the same name.
async fn restore(store: &Arc<dyn Store>, pool: &MachineConfigPool, rendered: &MachineConfig) -> Result<(), StoreError> {
    let spec = to_value(&rendered.spec)?;
    match edit_config(store, &rendered.metadata.name, |obj| {
        obj["spec"] = spec;
        true
    })
    .await?
    {
        Edited::Written => {
            tracing::warn!(pool = %pool.metadata.name, config = %rendered.metadata.name,
                "a rendered config's contents differed from what its name stands for; put back");
            Ok(())
        }
        Edited::Gone => create_rendered(store, pool, rendered).await,
        Edited::Unchanged | Edited::Raced => Ok(()),
    }
}

/// How [`edit_config`] ended.
enum Edited {
    Written,
    /// The edit found nothing to change.
    Unchanged,
    /// No such config (collected meanwhile).
    Gone,
    /// Written by someone else meanwhile: the pass that write starts sees it.
    Raced,
}

/// Read the stored MachineConfig `name`, let `edit` change its JSON in place (false: nothing to
/// change), and write it back if nobody wrote it meanwhile (compare-and-swap). Edits of the JSON,
/// not of the typed config: every field this controller does not own stays as stored.
async fn edit_config(
    store: &Arc<dyn Store>,
    name: &str,
    edit: impl FnOnce(&mut Value) -> bool,
) -> Result<Edited, StoreError> {
    let key = Key::cluster(&MACHINE_CONFIG.store_key(), name);
    let Some(stored) = store.get(&key).await? else {
        return Ok(Edited::Gone);
    };
    let mut obj = (*stored.object).clone();
    let rev = revision_of(&obj);
    if !edit(&mut obj) {
        return Ok(Edited::Unchanged);
    }
    match store.update(&key, obj, rev).await {
        Ok(_) => Ok(Edited::Written),
        Err(StoreError::NotFound(_)) => Ok(Edited::Gone),
        Err(StoreError::Conflict { .. }) => Ok(Edited::Raced),
        Err(e) => Err(e),
    }
}

/// Whether `pool` takes over `mc`, the rendered config it renders to: when `mc` names as its
/// owner an earlier pool of the same name (deleted and created again: another uid), or, being a
/// generated config, has no controlling owner at all (its pool was deleted with
/// `--cascade=orphan`). Either way the garbage collector would treat it unlike the pool's other
/// rendered configs (keep it for good, or collect it once nodes move on); Kubernetes'
/// controllers adopt the orphans they match the same way. A config another owner controls is
/// left alone.
fn adopts(mc: &MachineConfig, pool: &MachineConfigPool) -> bool {
    if pool.metadata.uid.as_deref().is_none_or(str::is_empty) {
        return false;
    }
    let refs = &mc.metadata.owner_references;
    let ours = |o: &OwnerReference| o.kind == "MachineConfigPool" && o.name == pool.metadata.name;
    let stale =
        refs.iter().any(|o| ours(o) && !o.uid.is_empty() && Some(o.uid.as_str()) != pool.metadata.uid.as_deref());
    let orphan = mc.metadata.annotations.contains_key(aloft_api::annotations::GENERATED_BY)
        && !refs.iter().any(|o| o.controller == Some(true));
    stale || orphan
}

/// Whether `mc` is one of `pool`'s rendered configs (the pool as it is now controls it) whose
/// reference does not say `blockOwnerDeletion: true`: rendered before aloft set it (as MCO
/// does), so a foreground deletion of the pool would not wait for the nodes still on it.
fn unblocking(mc: &MachineConfig, pool: &MachineConfigPool) -> bool {
    let Some(uid) = pool.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
        return false;
    };
    mc.metadata.owner_references.iter().any(|o| {
        o.kind == "MachineConfigPool"
            && o.name == pool.metadata.name
            && o.uid == uid
            && o.controller == Some(true)
            && o.block_owner_deletion != Some(true)
    })
}

/// Set `blockOwnerDeletion: true` on the stored config's controlling reference to `pool` (see
/// [`unblocking`]); nothing else changes. A config written or collected meanwhile is left to the
/// pass its event starts.
async fn block_deletion(store: &Arc<dyn Store>, pool: &MachineConfigPool, name: &str) -> Result<(), StoreError> {
    let uid = pool.metadata.uid.as_deref().unwrap_or_default();
    let edited = edit_config(store, name, |obj| {
        let Some(refs) = obj.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) else {
            return false;
        };
        let mut changed = false;
        for r in refs.iter_mut().filter(|r| {
            r.get("kind").and_then(Value::as_str) == Some("MachineConfigPool")
                && r.get("name").and_then(Value::as_str) == Some(pool.metadata.name.as_str())
                && r.get("uid").and_then(Value::as_str) == Some(uid)
                && r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("blockOwnerDeletion").and_then(Value::as_bool) != Some(true)
        }) {
            r["blockOwnerDeletion"] = Value::Bool(true);
            changed = true;
        }
        changed
    })
    .await?;
    if let Edited::Written = edited {
        tracing::info!(pool = %pool.metadata.name, config = name,
            "a rendered config's reference to its pool now blocks the pool's foreground deletion (rendered by an older aloft)");
    }
    Ok(())
}

/// Point `rendered`'s stored references to its pool at the pool as it is now (its uid), or add
/// one, controlling, where there is none; every other field and reference stays. A config
/// collected meanwhile is created again; one written meanwhile is left to the pass its write
/// starts.
async fn adopt(store: &Arc<dyn Store>, pool: &MachineConfigPool, rendered: &MachineConfig) -> Result<(), StoreError> {
    let uid = pool.metadata.uid.clone().unwrap_or_default();
    let own = rendered.metadata.owner_references.first().map(to_value).transpose()?;
    let ours = |r: &Value| {
        r.get("kind").and_then(Value::as_str) == Some("MachineConfigPool")
            && r.get("name").and_then(Value::as_str) == Some(pool.metadata.name.as_str())
    };
    let edited = edit_config(store, &rendered.metadata.name, |obj| {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            return false;
        };
        let refs = meta.entry("ownerReferences").or_insert_with(|| Value::Array(Vec::new()));
        if !refs.is_array() {
            *refs = Value::Array(Vec::new());
        }
        let Some(refs) = refs.as_array_mut() else {
            return false;
        };
        if refs.iter().any(ours) {
            for r in refs.iter_mut().filter(|r| ours(r)) {
                r["uid"] = Value::String(uid.clone());
            }
        } else if let Some(own) = own {
            refs.push(own);
        }
        true
    })
    .await?;
    match edited {
        Edited::Written => {
            tracing::info!(pool = %pool.metadata.name, config = %rendered.metadata.name, "took over a rendered config whose owner was gone");
            Ok(())
        }
        Edited::Gone => create_rendered(store, pool, rendered).await,
        Edited::Unchanged | Edited::Raced => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aloft_api::meta::find_condition;

    /// A store with pool `worker` and one MachineConfig `50-a` of `config`, rendered: the store,
    /// the pool's target and its uid (the temporary directory keeps the store's file).
    async fn worker_rendered(config: serde_json::Value) -> (tempfile::TempDir, Arc<dyn Store>, String, String) {
        use crate::store::SqliteStore;
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let mut pool = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "worker"},
            "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
                "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}});
        objects::prepare_create(&mut pool, "");
        let uid = pool["metadata"]["uid"].as_str().unwrap().to_string();
        store.create(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "worker"), pool).await.unwrap();
        let mut mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "50-a", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": config}});
        objects::prepare_create(&mut mc, "");
        store.create(&Key::cluster(&MACHINE_CONFIG.store_key(), "50-a"), mc).await.unwrap();
        reconcile_all(&store).await.unwrap();
        let pool = store.get(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "worker")).await.unwrap().unwrap();
        let target = pool.object.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap().to_string();
        (dir, store, target, uid)
    }

    /// A stored config the pool selects that does not read as a MachineConfig (an older aloft
    /// stored it) fails the render, naming it, and the pool keeps its target: left out, its
    /// files and units would be deleted from every node. One of no pool's is no concern.
    #[tokio::test]
    async fn a_selected_config_that_does_not_read_fails_the_render() {
        use serde_json::json;
        let (_dir, store, target, _) = worker_rendered(json!({"ignition": {"version": "3.4.0"}})).await;
        let mut bad = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "60-b", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}}, "kernelArguments": 5}});
        objects::prepare_create(&mut bad, "");
        store.create(&Key::cluster(&MACHINE_CONFIG.store_key(), "60-b"), bad).await.unwrap();
        reconcile_all(&store).await.unwrap();
        let pool = store.get(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "worker")).await.unwrap().unwrap();
        let pool: MachineConfigPool = serde_json::from_value((*pool.object).clone()).unwrap();
        assert_eq!(pool.spec.configuration.as_ref().map(|c| c.name.as_str()), Some(target.as_str()));
        let c = find_condition(&pool.status.as_ref().unwrap().conditions, cond::RENDER_DEGRADED).unwrap();
        assert!(c.is_true() && c.message.contains("MachineConfig \"60-b\" cannot be read"), "{c:?}");

        // Relabelled for no pool: the worker pool renders again.
        let key = Key::cluster(&MACHINE_CONFIG.store_key(), "60-b");
        let mut other = (*store.get(&key).await.unwrap().unwrap().object).clone();
        let rev = revision_of(&other);
        other["metadata"]["labels"] = json!({"machineconfiguration.openshift.io/role": "infra"});
        store.update(&key, other, rev).await.unwrap();
        reconcile_all(&store).await.unwrap();
        let pool = store.get(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "worker")).await.unwrap().unwrap();
        let pool: MachineConfigPool = serde_json::from_value((*pool.object).clone()).unwrap();
        let c = find_condition(&pool.status.as_ref().unwrap().conditions, cond::RENDER_DEGRADED).unwrap();
        assert!(!c.is_true(), "{c:?}");
    }

    /// The store, with a status write of the pool slipped in ahead of the pass's first write of
    /// it (the node controller's, many a second in a rollout): the pass loses that race.
    fn racing(inner: Arc<dyn Store>) -> Arc<dyn Store> {
        use crate::store::hooked::{Hooked, Moment};
        let raced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        Arc::new(Hooked {
            inner,
            hook: Box::new(move |inner, moment, key| {
                let raced = raced.clone();
                Box::pin(async move {
                    if moment == Moment::BeforeUpdate
                        && key.resource == MACHINE_CONFIG_POOL.store_key()
                        && !raced.swap(true, std::sync::atomic::Ordering::SeqCst)
                    {
                        let now = inner.get(&key).await?.unwrap();
                        let mut o = (*now.object).clone();
                        o["status"]["machineCount"] = 7.into();
                        let rev = revision_of(&o);
                        inner.update(&key, o, rev).await?;
                    }
                    Ok(())
                })
            }),
        })
    }

    /// A pool write that lost to a status write is made again in the same pass, on a fresh
    /// read: the status write's event does not wake this controller, so waiting for one left a
    /// new target unset until the resync.
    #[tokio::test]
    async fn a_lost_pool_write_is_made_again_at_once() {
        use serde_json::json;
        let (_dir, inner, target, _) = worker_rendered(json!({"ignition": {"version": "3.4.0"}})).await;
        let store = racing(inner.clone());
        let mut mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "60-b", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}}, "kernelArguments": ["x=1"]}});
        objects::prepare_create(&mut mc, "");
        store.create(&Key::cluster(&MACHINE_CONFIG.store_key(), "60-b"), mc).await.unwrap();
        reconcile_all(&store).await.unwrap();
        let pool = inner.get(&Key::cluster(&MACHINE_CONFIG_POOL.store_key(), "worker")).await.unwrap().unwrap();
        let now = pool.object.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap();
        assert_ne!(now, target, "the new target is set in this pass");
        assert_eq!(pool.object["status"]["machineCount"], 7, "the status write that came first is kept");
    }

    /// The pool's target stored with other contents than its name stands for (a delete and a
    /// create in a row that won the race with this controller) gets them back at the next render.
    #[tokio::test]
    async fn a_target_with_other_contents_is_put_back() {
        use serde_json::json;
        let (_dir, store, target, _) = worker_rendered(json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/a", "contents": {"source": "data:,good"}}]}}))
        .await;
        let key = Key::cluster(&MACHINE_CONFIG.store_key(), &target);
        let good = store.get(&key).await.unwrap().unwrap().object["spec"].clone();
        let mut tampered = (*store.get(&key).await.unwrap().unwrap().object).clone();
        let rev = revision_of(&tampered);
        tampered["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,evil");
        store.update(&key, tampered, rev).await.unwrap();
        reconcile_all(&store).await.unwrap();
        assert_eq!(store.get(&key).await.unwrap().unwrap().object["spec"], good);
    }

    /// Rendered configs an older aloft wrote without `blockOwnerDeletion` on their reference to
    /// the pool (the target and one nodes may still run) get it, so a foreground deletion of
    /// the pool waits for them; references to another pool, or to a pool of the same name
    /// before it was created again, are not this pass's to change.
    #[tokio::test]
    async fn references_from_before_block_the_pools_deletion() {
        use serde_json::json;
        let (_dir, store, target, uid) = worker_rendered(json!({"ignition": {"version": "3.4.0"}})).await;
        // As an older aloft stored them: the target's reference without the flag, and an
        // earlier rendered config of the pool likewise; beside them, one of another pool.
        let key = Key::cluster(&MACHINE_CONFIG.store_key(), &target);
        let mut old = (*store.get(&key).await.unwrap().unwrap().object).clone();
        let rev = revision_of(&old);
        old["metadata"]["ownerReferences"][0].as_object_mut().unwrap().remove("blockOwnerDeletion");
        store.update(&key, old, rev).await.unwrap();
        let reference = |pool: &str, uid: &str| {
            json!([{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                "name": pool, "uid": uid, "controller": true}])
        };
        for (name, owner) in [
            ("rendered-worker-earlier", reference("worker", &uid)),
            ("rendered-infra-earlier", reference("infra", "u-infra")),
        ] {
            let mut mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                "metadata": {"name": name, "ownerReferences": owner,
                    "annotations": {aloft_api::annotations::GENERATED_BY: "aloft-0.1.0"}},
                "spec": {"config": {"ignition": {"version": "3.4.0"}}}});
            objects::prepare_create(&mut mc, "");
            store.create(&Key::cluster(&MACHINE_CONFIG.store_key(), name), mc).await.unwrap();
        }
        reconcile_all(&store).await.unwrap();
        let blocks = |o: &Value| o.pointer("/metadata/ownerReferences/0/blockOwnerDeletion").cloned();
        for name in [target.as_str(), "rendered-worker-earlier"] {
            let o = store.get(&Key::cluster(&MACHINE_CONFIG.store_key(), name)).await.unwrap().unwrap().object;
            assert_eq!(blocks(&o), Some(json!(true)), "{name}: {o}");
        }
        let other = store.get(&Key::cluster(&MACHINE_CONFIG.store_key(), "rendered-infra-earlier")).await.unwrap();
        assert_eq!(blocks(&other.unwrap().object), None);
    }

    /// A render over degraded nodes keeps the node controller's wording of Degraded; a render
    /// failure takes it over; neither leaves Degraded True without a message.
    #[test]
    fn degraded_keeps_the_nodes_message() {
        let mut status = MachineConfigPoolStatus::default();
        let reporting = "Node n1 is reporting: \"boom\"";
        set_condition(
            &mut status.conditions,
            Condition {
                type_: cond::NODE_DEGRADED.into(),
                status: "True".into(),
                reason: "1 nodes are reporting degraded status on sync".into(),
                message: reporting.into(),
                ..Default::default()
            },
            "2026-11-28T00:00:00Z",
        );
        degraded_status(&mut status, None);
        let degraded = find_condition(&status.conditions, cond::DEGRADED).unwrap();
        assert!(degraded.is_true());
        assert_eq!((degraded.reason.as_str(), degraded.message.as_str()), ("NodeDegraded", reporting));
        degraded_status(&mut status, Some("no such MachineConfig".into()));
        let degraded = find_condition(&status.conditions, cond::DEGRADED).unwrap();
        assert_eq!((degraded.reason.as_str(), degraded.message.as_str()), ("RenderFailed", "no such MachineConfig"));
    }
}
