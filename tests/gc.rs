//! Garbage collection by ownerReferences, as Kubernetes does it: deleting a pool deletes the
//! rendered configs it owns (background propagation), except one a node is on; an object with
//! one owner still there stays; `propagationPolicy=Orphan` (or an `orphan` finalizer) keeps the
//! dependents, their references to the deleted owner removed; `propagationPolicy=Foreground`
//! keeps the owner until its dependents are gone. (`kubectl delete --cascade=...`:
//! tests/kubectl.rs.)

use aloft_coordinator::resources::{EVENT, MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use aloft_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A pool `infra` rendered twice (one MachineConfig, then two): its two rendered configs, oldest first.
async fn pool_rendered_twice(admin: &aloft_client::Client) -> (String, String) {
    let post = |rt, obj: Value| async move {
        admin.post(&path_of(rt, None), &obj).await.unwrap().into_result().unwrap();
    };
    post(&MACHINE_CONFIG, machine_config("50-infra-a", "infra")).await;
    post(&MACHINE_CONFIG_POOL, machine_config_pool("infra", "infra")).await;
    let first = rendered_target(admin, None).await;
    let mut second = machine_config("51-infra-b", "infra");
    second["spec"]["kernelArguments"] = json!(["nosmt"]);
    post(&MACHINE_CONFIG, second).await;
    let second = rendered_target(admin, Some(&first)).await;
    (first, second)
}

/// The pool's `spec.configuration.name`, once it is set and not `previous`.
async fn rendered_target(admin: &aloft_client::Client, previous: Option<&str>) -> String {
    eventually(Duration::from_secs(20), "the pool's rendered config", || async {
        let p = get_ok(admin, &MACHINE_CONFIG_POOL, "infra").await;
        let name = p["spec"]["configuration"]["name"].as_str().unwrap_or("").to_string();
        Ok((!name.is_empty() && Some(name.as_str()) != previous).then_some(name))
    })
    .await
}

/// Node `n1` (outside every pool: nothing updates it) on `config`, created the first time;
/// None: moved off it.
async fn node_on(admin: &aloft_client::Client, config: Option<&str>) {
    if admin.get(&path_of(&NODE, Some("n1"))).await.unwrap().code == 404 {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {"machineconfiguration.openshift.io/currentConfig": config}}});
        admin.post(&path_of(&NODE, None), &node).await.unwrap().into_result().unwrap();
    } else {
        let patch = json!({"metadata": {"annotations": {"machineconfiguration.openshift.io/currentConfig": config}}});
        let n = path_of(&NODE, Some("n1"));
        admin.patch(&n, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap();
    }
}

async fn exists(admin: &aloft_client::Client, name: &str) -> bool {
    let r = admin.get(&path_of(&MACHINE_CONFIG, Some(name))).await.unwrap();
    assert!(r.code == 200 || r.code == 404, "{}", r.body);
    r.code == 200
}

/// Deleting a pool deletes the rendered config nothing uses, and keeps the one a node is on,
/// with an Event for each; the kept one goes once the node moves on.
#[tokio::test]
async fn deleting_a_pool_collects_its_unused_rendered_configs() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, second) = pool_rendered_twice(&admin).await;
    // A node (outside the pool: nothing updates it) still on the first config.
    node_on(&admin, Some(&first)).await;

    let r = admin.delete(&path_of(&MACHINE_CONFIG_POOL, Some("infra"))).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    eventually(Duration::from_secs(20), "the unused rendered config to go", || async {
        Ok((!exists(&admin, &second).await).then_some(()))
    })
    .await;
    assert!(exists(&admin, &first).await, "a config a node is on is never deleted");
    for user in ["50-infra-a", "51-infra-b"] {
        assert!(exists(&admin, user).await, "{user} has no owner: never touched");
    }
    let events = eventually(Duration::from_secs(20), "the garbage collector's Events", || async {
        let list = admin.get(&path_of(&EVENT, None)).await?.into_result()?;
        let mine: Vec<Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["source"]["component"] == "aloft-garbage-collector")
            .cloned()
            .collect();
        Ok((mine.len() >= 2).then_some(mine))
    })
    .await;
    let by_reason = |reason: &str| events.iter().find(|e| e["reason"] == reason).cloned().unwrap();
    let deleted = by_reason("SuccessfulDelete");
    assert_eq!(deleted["involvedObject"]["kind"], "MachineConfigPool");
    assert_eq!(deleted["involvedObject"]["name"], "infra");
    assert!(deleted["message"].as_str().unwrap().contains(&second), "{deleted}");
    let kept = by_reason("DeleteDeferred");
    assert_eq!(kept["involvedObject"]["name"], first.as_str());
    assert!(kept["message"].as_str().unwrap().contains("node n1"), "{kept}");

    // The node moves on: the config goes (within a resync: Nodes are not watched).
    node_on(&admin, None).await;
    eventually(Duration::from_secs(45), "the config no node is on any more to go", || async {
        Ok((!exists(&admin, &first).await).then_some(()))
    })
    .await;
}

/// A pool deleted while a node is on its config, then created again under the same name, takes
/// that config over (its reference names the new pool's uid), so the config is not collected
/// once the node moves on, as the pool's other rendered configs are not.
#[tokio::test]
async fn a_pool_created_again_takes_over_its_rendered_config() {
    let c = Coordinator::start();
    let admin = c.client();
    let (_, second) = pool_rendered_twice(&admin).await;
    node_on(&admin, Some(&second)).await;
    let owner_uid = |mc: &Value| mc["metadata"]["ownerReferences"][0]["uid"].as_str().unwrap_or("").to_string();
    let old_uid = get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(owner_uid(&get_ok(&admin, &MACHINE_CONFIG, &second).await), old_uid);

    admin.delete(&path_of(&MACHINE_CONFIG_POOL, Some("infra"))).await.unwrap().into_result().unwrap();
    admin
        .post(&path_of(&MACHINE_CONFIG_POOL, None), &machine_config_pool("infra", "infra"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let pool = get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await;
    let new_uid = pool["metadata"]["uid"].as_str().unwrap().to_string();
    assert_ne!(new_uid, old_uid);
    assert_eq!(rendered_target(&admin, None).await, second, "the same configs render to the same name");
    eventually(Duration::from_secs(20), "the config's reference to name the new pool", || async {
        let mc = get_ok(&admin, &MACHINE_CONFIG, &second).await;
        Ok((owner_uid(&mc) == new_uid).then_some(()))
    })
    .await;
    let mc = get_ok(&admin, &MACHINE_CONFIG, &second).await;
    assert_eq!(mc["metadata"]["ownerReferences"].as_array().map(Vec::len), Some(1), "{mc}");
    assert_eq!(mc["metadata"]["ownerReferences"][0]["name"], "infra");

    // The node moves off it, and a deletion starts a collection pass: the config stays.
    node_on(&admin, None).await;
    admin
        .post(&path_of(&MACHINE_CONFIG, None), &machine_config("70-unrelated", "none"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    admin.delete(&path_of(&MACHINE_CONFIG, Some("70-unrelated"))).await.unwrap().into_result().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(exists(&admin, &second).await, "a config its pool owns is kept");
}

/// An object with two owners, one deleted, stays: one owner is still there.
#[tokio::test]
async fn an_object_with_one_live_owner_stays() {
    let c = Coordinator::start();
    let admin = c.client();
    let (_, second) = pool_rendered_twice(&admin).await;
    let other = admin
        .post(&path_of(&MACHINE_CONFIG_POOL, None), &machine_config_pool("other", "other"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let infra = get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await;
    let owner = |p: &Value| {
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]})
    };
    let mut shared = machine_config("60-shared", "none");
    shared["metadata"]["ownerReferences"] = json!([owner(&infra), owner(&other)]);
    admin.post(&path_of(&MACHINE_CONFIG, None), &shared).await.unwrap().into_result().unwrap();

    admin.delete(&path_of(&MACHINE_CONFIG_POOL, Some("infra"))).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(20), "the pool's rendered config to go", || async {
        Ok((!exists(&admin, &second).await).then_some(()))
    })
    .await;
    assert!(exists(&admin, "60-shared").await, "one owner is still there");
    // Its last owner goes: so does it.
    admin.delete(&path_of(&MACHINE_CONFIG_POOL, Some("other"))).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(20), "the object whose owners are all gone to go", || async {
        Ok((!exists(&admin, "60-shared").await).then_some(()))
    })
    .await;
}

/// `?propagationPolicy=Orphan` keeps the dependents, without their references to the pool; a
/// policy aloft does not know is refused, and deletes nothing.
#[tokio::test]
async fn an_orphaning_delete_keeps_the_dependents_without_their_owner() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, second) = pool_rendered_twice(&admin).await;
    let pool = path_of(&MACHINE_CONFIG_POOL, Some("infra"));
    let r = admin.delete(&format!("{pool}?propagationPolicy=Sideways")).await.unwrap();
    assert_status(&r, 422, "Invalid", "an unknown propagationPolicy");
    assert!(
        r.body["message"].as_str().unwrap().contains("propagationPolicy: Unsupported value: \"Sideways\""),
        "{}",
        r.body
    );
    get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await;

    let r = admin.delete(&format!("{pool}?propagationPolicy=Orphan")).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    for name in [&first, &second] {
        let mc = get_ok(&admin, &MACHINE_CONFIG, name).await;
        assert!(mc["metadata"].get("ownerReferences").is_none(), "{mc}");
    }
    // Nor does a later pass take them (the controller runs after each deletion).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(exists(&admin, &first).await && exists(&admin, &second).await);
}

/// A pool deleted with `--cascade=orphan` and created again adopts the orphaned rendered config
/// it renders to (a controlling reference with its uid), as Kubernetes' controllers adopt the
/// orphans they match; so deleting it normally then collects that config. An orphan it does
/// not render to stays an orphan.
#[tokio::test]
async fn a_pool_created_again_adopts_its_orphaned_rendered_config() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, second) = pool_rendered_twice(&admin).await;
    let pool = path_of(&MACHINE_CONFIG_POOL, Some("infra"));
    admin.delete(&format!("{pool}?propagationPolicy=Orphan")).await.unwrap().into_result().unwrap();
    admin
        .post(&path_of(&MACHINE_CONFIG_POOL, None), &machine_config_pool("infra", "infra"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(rendered_target(&admin, None).await, second);
    let uid = get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await["metadata"]["uid"].as_str().unwrap().to_string();
    let adopted = eventually(Duration::from_secs(20), "the orphan to be adopted", || async {
        let mc = get_ok(&admin, &MACHINE_CONFIG, &second).await;
        Ok((mc["metadata"]["ownerReferences"][0]["uid"] == uid.as_str()).then_some(mc))
    })
    .await;
    let refs = &adopted["metadata"]["ownerReferences"];
    assert_eq!(refs.as_array().map(Vec::len), Some(1), "{adopted}");
    assert_eq!((refs[0]["kind"].as_str(), refs[0]["name"].as_str()), (Some("MachineConfigPool"), Some("infra")));
    assert_eq!(refs[0]["controller"], true, "{adopted}");
    let old = get_ok(&admin, &MACHINE_CONFIG, &first).await;
    assert!(old["metadata"].get("ownerReferences").is_none(), "not rendered to: left an orphan: {old}");

    admin.delete(&pool).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(20), "the adopted config to be collected with its pool", || async {
        Ok((!exists(&admin, &second).await).then_some(()))
    })
    .await;
    assert!(exists(&admin, &first).await, "the orphan nobody adopted stays");
}

/// A pool held by a finalizer after a DELETE is being deleted: as MCO's render and node
/// controllers, aloft renders nothing more for it (a new MachineConfig does not become its
/// target, so its nodes are not reconfigured while the admin takes the pool away), and an
/// orphaning DELETE stays orphaning: the pool does not adopt its generated configs back, so they
/// outlive it when the finalizer goes. Both were wrong: the terminating pool rendered and adopted.
#[tokio::test]
async fn a_pool_being_deleted_renders_nothing_and_its_orphans_stay() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, second) = pool_rendered_twice(&admin).await;
    let pool = path_of(&MACHINE_CONFIG_POOL, Some("infra"));
    let hold = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    admin.patch(&pool, "application/merge-patch+json", &hold).await.unwrap().into_result().unwrap();
    let r = admin.delete(&format!("{pool}?propagationPolicy=Orphan")).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string(), "held by its finalizer: {}", r.body);

    let mut third = machine_config("52-infra-c", "infra");
    third["spec"]["kernelArguments"] = json!(["mitigations=off"]);
    admin.post(&path_of(&MACHINE_CONFIG, None), &third).await.unwrap().into_result().unwrap();
    // Well past the render controller's quiet time and a few passes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await;
    assert_eq!(p["spec"]["configuration"]["name"], second.as_str(), "no new target while being deleted: {p}");
    for name in [&first, &second] {
        let mc = get_ok(&admin, &MACHINE_CONFIG, name).await;
        assert!(mc["metadata"].get("ownerReferences").is_none(), "not adopted back: {mc}");
    }

    let release = json!({"metadata": {"finalizers": null}});
    admin.patch(&pool, "application/merge-patch+json", &release).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(20), "the pool to be gone", || async {
        Ok((admin.get(&pool).await?.code == 404).then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(exists(&admin, &first).await && exists(&admin, &second).await, "the orphans outlive the pool");
}

/// `?propagationPolicy=Foreground`: the pool stays, being deleted with the `foregroundDeletion`
/// finalizer, while its rendered configs go; the one a node is on holds it (a config in use is
/// never removed) until the node moves on, and then both go.
#[tokio::test]
async fn a_foreground_delete_keeps_the_pool_until_its_rendered_configs_are_gone() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, second) = pool_rendered_twice(&admin).await;
    node_on(&admin, Some(&first)).await;
    let pool = path_of(&MACHINE_CONFIG_POOL, Some("infra"));
    let r = admin.delete(&format!("{pool}?propagationPolicy=Foreground")).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string(), "{}", r.body);
    assert_eq!(r.body["metadata"]["finalizers"], json!(["foregroundDeletion"]), "{}", r.body);
    eventually(Duration::from_secs(20), "the unused rendered config to go", || async {
        Ok((!exists(&admin, &second).await).then_some(()))
    })
    .await;
    eventually(Duration::from_secs(20), "the config in use to be kept, with an Event", || async {
        let list = admin.get(&path_of(&EVENT, None)).await?.into_result()?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        Ok(items
            .iter()
            .any(|e| e["reason"] == "DeleteDeferred" && e["involvedObject"]["name"] == first.as_str())
            .then_some(()))
    })
    .await;
    let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "infra").await;
    assert_eq!(p["metadata"]["finalizers"], json!(["foregroundDeletion"]), "held by its config in use: {p}");
    assert!(exists(&admin, &first).await);

    // A second Foreground DELETE changes nothing.
    let r = admin.delete(&format!("{pool}?propagationPolicy=Foreground")).await.unwrap();
    assert_eq!(r.body["metadata"]["finalizers"], json!(["foregroundDeletion"]), "{}", r.body);
    node_on(&admin, None).await;
    eventually(Duration::from_secs(40), "the pool to go once its last config is gone", || async {
        Ok((admin.get(&pool).await?.code == 404).then_some(()))
    })
    .await;
    assert!(!exists(&admin, &first).await, "the config went first");
}

/// An `orphan` finalizer set by hand: a plain DELETE orphans the dependents (they stay, without
/// their references to the pool), and the pool goes.
#[tokio::test]
async fn an_orphan_finalizer_orphans_the_dependents_of_a_deleted_pool() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, second) = pool_rendered_twice(&admin).await;
    let pool = path_of(&MACHINE_CONFIG_POOL, Some("infra"));
    let hold = json!({"metadata": {"finalizers": ["orphan"]}});
    admin.patch(&pool, "application/merge-patch+json", &hold).await.unwrap().into_result().unwrap();
    admin.delete(&pool).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(20), "the pool to go", || async {
        Ok((admin.get(&pool).await?.code == 404).then_some(()))
    })
    .await;
    // A later pass takes nothing either (the controller runs after each deletion).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in [&first, &second] {
        let mc = get_ok(&admin, &MACHINE_CONFIG, name).await;
        assert!(mc["metadata"].get("ownerReferences").is_none(), "orphaned: {mc}");
    }
}

/// A DELETE of a pool held up in a foreground deletion (its config in use) with Background, what
/// `kubectl delete` sends, turns it into a background deletion, as kube-apiserver does: the
/// finalizer goes and the pool with it; the config in use stays, for the collector.
#[tokio::test]
async fn a_background_delete_frees_a_foreground_deletion_held_up() {
    let c = Coordinator::start();
    let admin = c.client();
    let (first, _second) = pool_rendered_twice(&admin).await;
    node_on(&admin, Some(&first)).await;
    let pool = path_of(&MACHINE_CONFIG_POOL, Some("infra"));
    admin.delete(&format!("{pool}?propagationPolicy=Foreground")).await.unwrap().into_result().unwrap();
    let r = admin.delete(&format!("{pool}?propagationPolicy=Background")).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(admin.get(&pool).await.unwrap().code, 404, "no finalizer left: gone at once");
    assert!(exists(&admin, &first).await, "the config a node is on stays");
}
