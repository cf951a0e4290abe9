//! Unit tests of the pick decision, and the property test of the rollout invariant over a
//! simulated fleet: random agent behaviour (normal, hanging, failing, flapping), Ready flips,
//! new configs mid-rollout, drains gated by the same budget ledger, and coordinator "restarts"
//! (the decision sees only the stored objects; a status write may be lost, as when the
//! coordinator is killed between writing picks and writing the pool status).

use super::*;
use crate::controllers::budget::Ledger;
use aloft_api::{IntOrString, RolloutPhase};
use proptest::prelude::*;
use serde_json::json;

fn node(name: &str, labels: serde_json::Value, current: &str, desired: &str, state: &str, ready: bool) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {
            ann::CURRENT_CONFIG: current, ann::DESIRED_CONFIG: desired, ann::STATE: state}},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

fn pool(name: &str, max: serde_json::Value, target: &str, extra_spec: serde_json::Value) -> MachineConfigPool {
    let mut spec = json!({
        "nodeSelector": {"matchLabels": {format!("node-role.kubernetes.io/{name}"): ""}},
        "maxUnavailable": max,
        "configuration": {"name": target},
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn worker() -> serde_json::Value {
    json!({"node-role.kubernetes.io/worker": ""})
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
}

fn picked_names(nodes: &[Node], pp: &PoolPlan) -> Vec<String> {
    pp.picks.iter().map(|&i| nodes[i].metadata.name.clone()).collect()
}

#[test]
fn a_node_stuck_on_an_old_config_moves_to_the_new_target_without_taking_a_slot() {
    // "a" is Unreconcilable on the bad r2 (so unavailable, using the only slot); the pool moved
    // on to r3. Moving "a" to r3 adds no disruption; "b" still waits for room.
    let nodes =
        vec![node("a", worker(), "r1", "r2", "Unreconcilable", true), node("b", worker(), "r1", "r1", "Done", true)];
    let pools = [pool("worker", json!(1), "r3", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a"]);
    assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0] }));
    // A node Working on an old config is not stuck: it keeps its slot and is not re-targeted.
    let nodes = vec![node("a", worker(), "r1", "r2", "Working", true), node("b", worker(), "r1", "r1", "Done", true)];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty());
}

#[test]
fn a_node_degraded_after_a_rollback_moves_to_the_new_target_without_taking_a_slot() {
    // "a" rolled back from r2's OS (its health check failed): Degraded on r2 with desired ==
    // current, still cordoned from the drain. It holds the pool's only slot; the pool moved on to
    // r3 (the fix). Moving "a" to r3 adds no disruption; "b" waits.
    let mut a = node("a", worker(), "r2", "r2", "Degraded", true);
    a.spec.unschedulable = true;
    set_ann(&mut a, ann::LAST_APPLIED_DRAIN, Some("drain-r2"));
    let hand_cordoned = {
        let mut a = a.clone();
        set_ann(&mut a, ann::LAST_APPLIED_DRAIN, Some("uncordon-r1"));
        a
    };
    let nodes = vec![a, node("b", worker(), "r1", "r1", "Done", true)];
    let pools = [pool("worker", json!(1), "r3", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a"]);
    assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0] }));
    // Cordoned by an admin after its drain was over (its last drain answer an uncordon), or
    // with no drain at all: MCO never picks an unschedulable node, and the cordon stays theirs.
    for a in [hand_cordoned.clone(), {
        let mut a = hand_cordoned.clone();
        set_ann(&mut a, ann::LAST_APPLIED_DRAIN, None);
        a
    }] {
        let nodes = vec![a, node("b", worker(), "r1", "r1", "Done", true)];
        let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
        assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
        assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0] }));
    }
    // Not Ready instead of cordoned: the same.
    let nodes = vec![node("a", worker(), "r2", "r2", "Degraded", false), node("b", worker(), "r1", "r1", "Done", true)];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a"]);
    // Degraded but in service (neither cordoned nor NotReady): an ordinary candidate, in a slot.
    let nodes = vec![node("a", worker(), "r2", "r2", "Degraded", true), node("b", worker(), "r1", "r1", "Done", true)];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a"]);
    assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0] }));
    // A cordoned node that is not failing (an operator's cordon) is not picked.
    let mut a = node("a", worker(), "r1", "r1", "Done", true);
    a.spec.unschedulable = true;
    let nodes = vec![a, node("b", worker(), "r1", "r1", "Done", true)];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
}

/// More nodes failed than maxUnavailable allows (it was lowered after they failed): a new
/// config still waits for room, but the revert to the config they run takes them all back at
/// once, since it lowers every count (the audit's pool took neither until maxUnavailable was
/// raised).
/// A node Degraded on the config it runs and still serving (drift found on it, Ready and
/// schedulable) is unavailable, as MCO's `IsUnavailableForUpdate` and the pool's status count it:
/// with maxUnavailable 1 no other node goes down beside it for the next config (the audit's case:
/// the first node in order was picked, two unavailable at once). It may take the new config in
/// its own slot; with room for two, one more goes.
#[test]
fn a_node_degraded_on_the_config_it_runs_holds_a_slot() {
    let drifted = || {
        let mut b = node("b", worker(), "r1", "r1", "Degraded", true);
        set_ann(&mut b, ann::FAILED_CONFIG, Some("r1"));
        b
    };
    let nodes =
        vec![node("a", worker(), "r1", "r1", "Done", true), drifted(), node("c", worker(), "r1", "r1", "Done", true)];
    let pools = [pool("worker", json!(1), "r2", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(!picked_names(&nodes, &p).contains(&"a".to_string()), "{:?}", picked_names(&nodes, &p));
    assert!(!picked_names(&nodes, &p).contains(&"c".to_string()), "{:?}", picked_names(&nodes, &p));
    assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![1] }));
    let pools = [pool("worker", json!(2), "r2", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    let picked = picked_names(&nodes, &p);
    assert_eq!(picked.iter().filter(|n| *n != "b").count(), 1, "one more beside the drifted node: {picked:?}");
}

#[test]
fn a_revert_takes_failed_nodes_back_even_over_the_limit() {
    let nodes = vec![
        node("w1", worker(), "r1", "r1", "Done", true),
        node("w2", worker(), "r1", "r2", "Degraded", true),
        node("w3", worker(), "r1", "r2", "Degraded", true),
    ];
    let fix = [pool("worker", json!(1), "r3", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &fix, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
    let revert = [pool("worker", json!(1), "r1", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &revert, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["w2", "w3"]);
}

/// w2: failed on r2 (Degraded, still cordoned by r2's drain), running r1.
fn failed_on_r2_running_r1() -> Node {
    let mut failed = node("w2", worker(), "r1", "r2", "Degraded", true);
    set_ann(&mut failed, ann::FAILED_CONFIG, Some("r2"));
    failed.spec.unschedulable = true;
    set_ann(&mut failed, ann::LAST_APPLIED_DRAIN, Some("drain-r2"));
    failed
}

/// A revert to a config that must prove itself again (its soak was cut short by the bad config
/// now reverted): the nodes that failed on the bad config run the reverted one already, and go
/// back to it through the soak, the canaries and an open breaker (they stayed Degraded and
/// cordoned for the whole soak); the nodes that still run an older config wait for the soak.
/// Not through a pause or a closed maintenance window, which hold every change.
#[test]
fn a_revert_goes_through_the_policys_holds_but_not_a_pause_or_a_closed_window() {
    let failed = failed_on_r2_running_r1();
    let nodes =
        vec![node("w1", worker(), "r1", "r1", "Done", true), failed, node("w3", worker(), "r0", "r0", "Done", true)];
    let policy = json!({"rollout": {"canary": 1, "soakSeconds": 3600}});
    let with_record = |extra: serde_json::Value, phase: &str| {
        let mut p = pool("worker", json!(1), "r1", extra);
        p.status = Some(
            serde_json::from_value(json!({"rollout": {
                "config": "r1", "phase": phase, "soakStartTime": "2026-01-01T00:00:00.000Z"}}))
            .unwrap(),
        );
        p
    };
    let soaking = [with_record(policy.clone(), "Soaking")];
    let p = plan(Snapshot { nodes: &nodes, pools: &soaking, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["w2"], "only the revert goes during the soak");
    assert!(matches!(p.wait, Some(Wait::Policy(HoldReason::Soaking { .. }))), "{:?}", p.wait);
    assert_eq!(p.pick_config(), "r1");
    let mut breaker = policy.clone();
    breaker["rollout"]["maxFailures"] = json!(0);
    let p = plan(Snapshot { nodes: &nodes, pools: &[with_record(breaker, "CircuitBroken")], budgets: &[] }, now())
        .remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["w2"], "the breaker holds the spread of r1, not a revert to it");
    assert!(p.breaker.is_some(), "{:?}", p.rollout);
    let mut paused = policy.clone();
    paused["paused"] = json!(true);
    let p = plan(Snapshot { nodes: &nodes, pools: &[with_record(paused, "Soaking")], budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "paused: {:?}", picked_names(&nodes, &p));
    assert_eq!(p.wait, Some(Wait::Paused));
    let mut closed = policy.clone();
    closed["rollout"]["maintenance"] =
        json!({"timeZone": "UTC", "windows": [{"days": ["Sat"], "startTime": "02:00", "lengthMinutes": 60}]});
    let p = plan(Snapshot { nodes: &nodes, pools: &[with_record(closed, "Soaking")], budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "window closed: {:?}", picked_names(&nodes, &p));
}

/// A resume is acted on once the stored status records it: the pass that takes it picks
/// nothing and says so (`resume_unrecorded`); the pass after the status carrying its token is
/// stored picks. (Picked at once, a node failing before that status write landed was forgiven
/// by the next pass, which read the old token and took the same resume again.)
#[test]
fn a_resume_picks_once_its_status_is_recorded() {
    let nodes = vec![
        failed_on_r2_running_r1(),
        node("w1", worker(), "r1", "r1", "Done", true),
        node("w3", worker(), "r1", "r1", "Done", true),
    ];
    let broken = |token: &str| {
        let mut p = pool("worker", json!(2), "r2", json!({"rollout": {"maxFailures": 0}}));
        p.metadata.annotations.insert(ann::RESUME_ROLLOUT.into(), "t1".into());
        p.status = Some(
            serde_json::from_value(json!({"rollout": {
                "config": "r2", "phase": "CircuitBroken", "failedNodes": ["w2"], "resumeToken": token}}))
            .unwrap(),
        );
        p
    };
    let p = plan(Snapshot { nodes: &nodes, pools: &[broken("")], budgets: &[] }, now()).remove(0);
    assert!(p.resume_unrecorded);
    assert!(p.picks.is_empty(), "nothing picked before the resume is recorded: {:?}", picked_names(&nodes, &p));
    let r = p.rollout.as_ref().unwrap();
    assert_eq!((r.resume_token.as_str(), r.forgiven_nodes.clone()), ("t1", vec!["w2".to_string()]), "{r:?}");
    // As the status write left it: the token recorded, the breaker closed.
    let mut recorded = broken("t1");
    recorded.status.as_mut().unwrap().rollout = p.rollout.clone();
    let p = plan(Snapshot { nodes: &nodes, pools: &[recorded], budgets: &[] }, now()).remove(0);
    assert!(!p.resume_unrecorded);
    // One slot of two: the failed node holds the other.
    assert_eq!(picked_names(&nodes, &p), vec!["w1"], "{:?}", p.wait);
}

/// A held pool with both a revert and a node that joined with no config: the revert first, as
/// it may hold the slot the first config waits for (given first, the first config waited for
/// that slot on every pass, and the revert with it, until the hold ended).
#[test]
fn a_revert_goes_before_a_first_config_in_a_held_pool() {
    let failed = failed_on_r2_running_r1();
    let nodes = vec![node("w1", worker(), "r1", "r1", "Done", true), failed, node("fresh", worker(), "", "", "", true)];
    let mut p = running(pool("worker", json!(1), "r1", json!({"rollout": {"canary": 1, "soakSeconds": 3600}})), "r0");
    p.status.as_mut().unwrap().rollout = Some(
        serde_json::from_value(
            json!({"config": "r1", "phase": "Soaking", "soakStartTime": "2026-01-01T00:00:00.000Z"}),
        )
        .unwrap(),
    );
    let pools = [p];
    let plan1 = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &plan1), vec!["w2"]);
    assert_eq!(plan1.first_config, None);
    assert_eq!(plan1.pick_config(), "r1");
}

#[test]
fn picks_within_max_unavailable_counting_other_unavailable_nodes() {
    let nodes = vec![
        node("a", worker(), "r1", "r1", "Done", true),
        node("b", worker(), "r1", "r1", "Done", true),
        node("c", worker(), "r1", "r1", "Done", true),
    ];
    let plan1 = |max: serde_json::Value, nodes: &[Node]| {
        let pools = [pool("worker", max, "r2", json!({}))];
        plan(Snapshot { nodes, pools: &pools, budgets: &[] }, now()).remove(0)
    };
    assert_eq!(plan1(json!(1), &nodes).picks.len(), 1);
    assert_eq!(plan1(json!(2), &nodes).picks.len(), 2);
    assert_eq!(plan1(json!("50%"), &nodes).picks.len(), 1);
    let busy = vec![
        node("a", worker(), "r1", "r2", "Working", true),
        node("b", worker(), "r1", "r1", "Done", true),
        node("c", worker(), "r1", "r1", "Done", false),
    ];
    let p = plan1(json!(1), &busy);
    assert!(p.picks.is_empty());
    assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0, 2] }));
    assert_eq!(
        picked_names(&busy, &plan1(json!(3), &busy)),
        vec!["b"],
        "not-ready nodes count and are never candidates"
    );
    let failing =
        vec![node("a", worker(), "r1", "r2", "Degraded", true), node("b", worker(), "r1", "r1", "Done", true)];
    assert!(plan1(json!(1), &failing).picks.is_empty(), "a node failing on the target holds its slot");
    let paused = [pool("worker", json!(3), "r2", json!({"paused": true}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty());
    assert_eq!(p.wait, Some(Wait::Paused));
}

#[test]
fn budgets_hold_nodes_across_pools_and_name_themselves() {
    let infra = json!({"node-role.kubernetes.io/infra": "", "app": "db"});
    let w = json!({"node-role.kubernetes.io/worker": "", "app": "db"});
    let nodes = vec![
        node("i1", infra.clone(), "r1", "r1", "Done", true),
        node("w1", w.clone(), "r1", "r1", "Done", true),
        node("w2", w, "r1", "r1", "Done", true),
    ];
    let pools = [pool("infra", json!(1), "i2", json!({})), pool("worker", json!(2), "w2", json!({}))];
    let budgets: Vec<NodeDisruptionBudget> = vec![serde_json::from_value(
        json!({"metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1}}),
    )
    .unwrap()];
    let plans = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &budgets }, now());
    assert_eq!(picked_names(&nodes, &plans[0]), vec!["i1"], "infra decides first (name order)");
    assert!(plans[1].picks.is_empty(), "the budget spans both pools");
    assert_eq!(plans[1].blocked.len(), 1);
    assert_eq!(plans[1].blocked[0].0.budget, "db");
    assert_eq!(plans[1].blocked[0].1, vec![1, 2]);
}

/// A budget's percentages round up, as a PodDisruptionBudget's: `minAvailable: "50%"` of 5 keeps
/// 3 (2 may go), `maxUnavailable: "30%"` of 5 lets 2 go; the pool (maxUnavailable 5) is not the
/// limit.
#[test]
fn budget_percentages_round_up_as_a_pdbs() {
    let nodes: Vec<Node> = (0..5)
        .map(|i| {
            node(&format!("n{i}"), json!({"node-role.kubernetes.io/worker": "", "app": "db"}), "r1", "r1", "Done", true)
        })
        .collect();
    let pools = [pool("worker", json!(5), "r2", json!({}))];
    for spec in [json!({"minAvailable": "50%"}), json!({"maxUnavailable": "30%"})] {
        let mut b = json!({"metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "db"}}}});
        b["spec"].as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        let budgets: Vec<NodeDisruptionBudget> = vec![serde_json::from_value(b).unwrap()];
        let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &budgets }, now()).remove(0);
        assert_eq!(p.picks.len(), 2, "{spec}: {:?}", picked_names(&nodes, &p));
    }
}

#[test]
fn prestage_every_waiting_node_and_none_of_the_picked() {
    let nodes: Vec<Node> = (0..3).map(|i| node(&format!("n{i}"), worker(), "r1", "r1", "Done", true)).collect();
    let pools = [pool("worker", json!(1), "r2", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(p.picks, vec![0]);
    assert_eq!(p.prestage, vec![(1, Some("r2".to_string())), (2, Some("r2".to_string()))]);
    let mut on = nodes.clone();
    on[1].metadata.annotations.insert(ann::PRESTAGE_CONFIG.into(), "r2".into());
    on[1].metadata.annotations.insert(ann::DESIRED_CONFIG.into(), "r2".into());
    let p = plan(Snapshot { nodes: &on, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.prestage.contains(&(1, None)), "the annotation goes once the node has desiredConfig");
}

/// `now()` is Thursday 2026-01-01 00:00 UTC. Outside every window nothing is picked but a node
/// with no config (its first config, as a pause allows); waiting nodes still pre-stage, so the
/// window is spent on drains and reboots.
#[test]
fn outside_the_maintenance_window_nothing_is_picked_and_waiting_nodes_prestage() {
    let nodes = vec![
        node("a", worker(), "r1", "r1", "Done", true),
        node("b", worker(), "r1", "r1", "Done", true),
        node("fresh", worker(), "", "", "", true),
    ];
    let windows = |tz: &str, days: serde_json::Value| json!({"rollout": {"maintenance": {"timeZone": tz, "windows": [{"days": days, "startTime": "23:30", "lengthMinutes": 60}]}}});
    // Saturday 23:30 in Berlin is 22:30Z.
    let closed = [running(pool("worker", json!(3), "r2", windows("Europe/Berlin", json!(["Sat"]))), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &closed, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"], "only the node with no config");
    assert_eq!(p.first_config, Some(FirstConfig { config: ConfigName::new("r1"), held: Held::MaintenanceWindow }));
    let opens = DateTime::parse_from_rfc3339("2026-01-03T22:30:00Z").unwrap().with_timezone(&Utc);
    assert_eq!(
        p.wait,
        Some(Wait::MaintenanceWindow { opens, local: "Sat 2026-01-03 23:30 CET (Europe/Berlin)".into() })
    );
    assert_eq!(p.window, Some(WindowState::Closed { opens }));
    assert_eq!(
        p.wait.as_ref().unwrap().to_string(),
        "no maintenance window is open: the next opens Sat 2026-01-03 23:30 CET (Europe/Berlin)"
    );
    assert_eq!(
        p.prestage,
        vec![(0, Some("r2".to_string())), (1, Some("r2".to_string()))],
        "a and b pre-stage meanwhile"
    );
    // Wednesday 23:30 in UTC opened 30 minutes ago: all three are picked.
    let open = [running(pool("worker", json!(3), "r2", windows("UTC", json!(["Wed"]))), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &open, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a", "b", "fresh"]);
    assert_eq!((p.wait, p.first_config), (None, None));
    let closes = DateTime::parse_from_rfc3339("2026-01-01T00:30:00Z").unwrap().with_timezone(&Utc);
    assert_eq!(p.window, Some(WindowState::Open { closes: Some(closes) }));
    // A schedule that cannot be read (here, a zone this machine does not know) holds the pool.
    let bad = [running(pool("worker", json!(3), "r2", windows("Nowhere/Atlantis", json!(["Thu"]))), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &bad, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"]);
    match &p.wait {
        Some(w @ Wait::BadSchedule(why)) => {
            assert!(why.contains("spec.rollout.maintenance.timeZone") && why.contains("Nowhere/Atlantis"), "{why}");
            assert!(w.to_string().starts_with("spec.rollout.maintenance cannot be read, so no node is picked"), "{w}");
        }
        other => panic!("{other:?}"),
    }
    // A pause says so first; an updated pool waits for nothing.
    let mut paused = closed.clone();
    paused[0].spec.paused = true;
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
    assert_eq!(p.wait, Some(Wait::Paused));
    let done: Vec<Node> = ["a", "b"].iter().map(|n| node(n, worker(), "r2", "r2", "Done", true)).collect();
    let p = plan(Snapshot { nodes: &done, pools: &closed, budgets: &[] }, now()).remove(0);
    assert_eq!((p.picks.len(), p.wait), (0, None));
}

#[test]
fn no_prestage_of_a_target_on_the_os_a_node_runs() {
    let mut nodes: Vec<Node> = (0..3).map(|i| node(&format!("n{i}"), worker(), "r1", "r1", "Done", true)).collect();
    nodes[2].metadata.annotations.insert(ann::CURRENT_CONFIG.into(), "r0".into());
    nodes[2].metadata.annotations.insert(ann::DESIRED_CONFIG.into(), "r0".into());
    let pools = [pool("worker", json!(1), "r2", json!({}))];
    let s = Snapshot { nodes: &nodes, pools: &pools, budgets: &[] };
    let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
    // r1 and r2 run the same OS image; r0 another one.
    let same_os = |a: &str, b: &str| a != "r0" && b != "r0";
    let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
    let p = plan_with_layout(s, &facts, &hot, &Layout::of(&pools, &nodes), &same_os, now()).remove(0);
    assert_eq!(p.picks, vec![0]);
    assert_eq!(p.prestage, vec![(2, Some("r2".to_string()))], "only the node on another OS pre-stages");
    let mut on = nodes.clone();
    on[1].metadata.annotations.insert(ann::PRESTAGE_CONFIG.into(), "r2".into());
    let facts: Vec<NodeFacts> = on.iter().map(NodeFacts::of).collect();
    let s = Snapshot { nodes: &on, pools: &pools, budgets: &[] };
    let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
    let p = plan_with_layout(s, &facts, &hot, &Layout::of(&pools, &on), &same_os, now()).remove(0);
    assert!(p.prestage.contains(&(1, None)), "a request set before is withdrawn: {:?}", p.prestage);
}

#[test]
fn prestage_off_in_the_pool_spec_sets_none_and_withdraws_those_set() {
    let mut nodes: Vec<Node> = (0..3).map(|i| node(&format!("n{i}"), worker(), "r1", "r1", "Done", true)).collect();
    nodes[2].metadata.annotations.insert(ann::PRESTAGE_CONFIG.into(), "r2".into());
    let pools = [pool("worker", json!(1), "r2", json!({"rollout": {"prestage": false}}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(p.picks, vec![0], "the rollout itself is unchanged");
    assert_eq!(p.prestage, vec![(2, None)], "nothing new is pre-staged and the old request goes");
    let on = [pool("worker", json!(1), "r2", json!({"rollout": {"prestage": true}}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &on, budgets: &[] }, now()).remove(0);
    assert_eq!(p.prestage, vec![(1, Some("r2".to_string()))], "true is the default behaviour");
}

#[test]
fn canary_gates_the_first_batch() {
    let nodes: Vec<Node> = (0..4).map(|i| node(&format!("n{i}"), worker(), "r1", "r1", "Done", true)).collect();
    let pools = [pool("worker", json!(3), "r2", json!({"rollout": {"canary": 1, "soakSeconds": 60}}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(p.picks.len(), 1, "one canary although maxUnavailable is 3");
    assert_eq!(p.rollout.as_ref().unwrap().phase, RolloutPhase::Canary);
}

/// A stuck node moved to an untested config in the canary phase is one of the canaries: the
/// batch is the policy's size (it was moved on top of the canary, and both failed).
#[test]
fn a_stuck_node_counts_against_the_canary_batch() {
    let mut nodes = vec![node("a", worker(), "r1", "r2", "Unreconcilable", true)];
    nodes.extend((1..4).map(|i| node(&format!("n{i}"), worker(), "r1", "r1", "Done", true)));
    let pools = [pool("worker", json!(3), "r3", json!({"rollout": {"canary": 1, "soakSeconds": 60}}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a"], "the stuck node is the one canary");
    let pools = [pool("worker", json!(3), "r3", json!({"rollout": {"canary": 2, "soakSeconds": 60}}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(p.picks.len(), 2, "{:?}", picked_names(&nodes, &p));
}

/// A node that joins while the canary updates gets a config within maxUnavailable (it was left
/// with no config at all until the soak ended): the one the machine-config-server serves, i.e.
/// the config the pool's nodes run while no node has finished on the target (the untested target
/// would make it one canary more than the policy allows), or the target for a pool that never
/// ran a config. Paused, the same.
#[test]
fn a_node_that_joins_during_the_canary_gets_the_config_the_pool_runs() {
    let nodes = vec![
        node("a", worker(), "r1", "r2", "Working", true),
        node("b", worker(), "r1", "r1", "Done", true),
        node("fresh", worker(), "", "", "", true),
    ];
    let policy = json!({"rollout": {"canary": 1, "soakSeconds": 60}});
    let pools = [running(pool("worker", json!(2), "r2", policy.clone()), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"], "b waits for the canary, the new node does not");
    assert_eq!(p.first_config, Some(FirstConfig { config: ConfigName::new("r1"), held: Held::Canary }));
    assert_eq!(p.pick_config(), "r1", "not the target the canary is still testing");
    // A pool that never ran a config: the target.
    let pools = [pool("worker", json!(2), "r2", policy.clone())];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(p.pick_config(), "r2");
    // No room: it waits like any other node, and the wait says so.
    let pools = [running(pool("worker", json!(1), "r2", policy.clone()), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
    assert!(matches!(p.wait, Some(Wait::MaxUnavailable { .. })), "{:?}", p.wait);
    let mut paused = policy;
    paused["paused"] = json!(true);
    let pools = [pool("worker", json!(2), "r2", paused)];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"]);
    assert_eq!(p.pick_config(), "r2");
}

/// `pool` with `status.configuration` = `config`: the config its nodes run.
fn running(mut p: MachineConfigPool, config: &str) -> MachineConfigPool {
    p.status = Some(serde_json::from_value(json!({"configuration": {"name": config}})).unwrap());
    p
}

/// A paused pool whose new target (r2) has reached no node: a node that joins with no config
/// gets r1, the config the pool's nodes run (`status.configuration`), as MCO's
/// machine-config-server serves a new machine whatever the pause (it waited with no config until
/// the pool was resumed). Once it has r1 it is behind r2 like the others, held by the pause.
#[test]
fn a_node_that_joins_a_paused_pool_gets_the_config_its_nodes_run() {
    let mut nodes = vec![
        node("a", worker(), "r1", "r1", "Done", true),
        node("b", worker(), "r1", "r1", "Done", true),
        node("fresh", worker(), "", "", "", true),
    ];
    let paused = [running(pool("worker", json!(2), "r2", json!({"paused": true})), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"], "a and b are held by the pause");
    assert_eq!(p.first_config, Some(FirstConfig { config: ConfigName::new("r1"), held: Held::Paused }));
    assert_eq!(p.pick_config(), "r1", "not the untested target");
    assert_eq!(p.wait, Some(Wait::Paused));
    assert!(p.prestage.is_empty(), "nothing pre-staged while paused");
    // Updating to r1, then Done on it: behind r2, and held by the pause like a and b.
    for (current, state) in [("", "Working"), ("r1", "Done")] {
        nodes[2] = node("fresh", worker(), current, "r1", state, true);
        let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
        assert!(p.picks.is_empty(), "{state}: {:?}", picked_names(&nodes, &p));
        assert_eq!((p.first_config, p.wait), (None, Some(Wait::Paused)), "{state}");
    }
    // Resumed: a candidate for r2 like the others.
    let resumed = [running(pool("worker", json!(3), "r2", json!({})), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &resumed, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a", "b", "fresh"]);
    assert_eq!(p.pick_config(), "r2");
}

/// The breaker opened after a node took the target (b is updated on r2): the
/// machine-config-server serves r2 now, and a node that joins gets it; the configured node
/// still behind (c) waits for the breaker. Before any node was updated on r2, it gets r1.
#[test]
fn a_node_that_joins_with_the_breaker_open_gets_the_target_once_a_node_runs_it() {
    let mut nodes = vec![
        node("a", worker(), "r1", "r2", "Degraded", true),
        node("b", worker(), "r2", "r2", "Done", true),
        node("c", worker(), "r1", "r1", "Done", true),
        node("fresh", worker(), "", "", "", true),
    ];
    let pools = [running(pool("worker", json!(3), "r2", json!({"rollout": {"maxFailures": 0}})), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.breaker.is_some(), "{p:?}");
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"], "c waits for the breaker");
    assert_eq!(p.first_config, Some(FirstConfig { config: ConfigName::new("r2"), held: Held::CircuitBroken }));
    assert!(matches!(p.wait, Some(Wait::Policy(HoldReason::CircuitBroken { .. }))), "{:?}", p.wait);
    nodes[1] = node("b", worker(), "r1", "r2", "Working", true);
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.breaker.is_some(), "{p:?}");
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"]);
    assert_eq!(p.pick_config(), "r1", "r2 is on no node yet");
}

/// A held pool's node with no config takes a slot like any pick: with maxUnavailable used up
/// (a is not Ready) it waits, and the wait says it is maxUnavailable, not the pause, that holds
/// it; a NodeDisruptionBudget holds it just as well.
#[test]
fn a_node_that_joins_a_paused_pool_waits_for_max_unavailable_and_budgets() {
    let mut nodes = vec![
        node("a", worker(), "r1", "r1", "Done", false),
        node("b", worker(), "r1", "r1", "Done", true),
        node("fresh", json!({"node-role.kubernetes.io/worker": "", "app": "db"}), "", "", "", true),
    ];
    let paused = [running(pool("worker", json!(1), "r2", json!({"paused": true})), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
    assert_eq!(p.wait, Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0] }));
    assert_eq!(p.first_config.as_ref().map(|f| f.config.as_str()), Some("r1"));
    // Room again, but a budget allows no node of its group down.
    nodes[0] = node("a", worker(), "r1", "r1", "Done", true);
    let budgets: Vec<NodeDisruptionBudget> = vec![serde_json::from_value(
        json!({"metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 0}}),
    )
    .unwrap()];
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &budgets }, now()).remove(0);
    assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
    assert_eq!(p.blocked.len(), 1);
    assert_eq!(p.blocked[0].1, vec![2]);
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"]);
}

/// While paused, only nodes with no config at all are picked: not a node stuck failing on an
/// older config (moved without a slot in a running rollout), not one with a current config and
/// no desired one, not the canary the policy would pick, however much room there is.
#[test]
fn a_paused_pool_never_moves_a_configured_node() {
    let nodes = vec![
        node("stuck", worker(), "r1", "r0", "Unreconcilable", false),
        node("half", worker(), "r1", "", "Done", true),
        node("c", worker(), "r1", "r1", "Done", true),
        node("fresh", worker(), "", "", "", true),
    ];
    let policy = json!({"paused": true, "rollout": {"canary": 1, "soakSeconds": 60}});
    let paused = [running(pool("worker", json!("100%"), "r2", policy), "r1")];
    let p = plan(Snapshot { nodes: &nodes, pools: &paused, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["fresh"]);
    assert_eq!(p.wait, Some(Wait::Paused));
    // Without the new node: nothing at all.
    let p = plan(Snapshot { nodes: &nodes[..3], pools: &paused, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty(), "{:?}", picked_names(&nodes, &p));
    assert_eq!((p.first_config, p.wait), (None, Some(Wait::Paused)));
}

// ---- the property test ----

/// How a simulated agent behaves when asked to update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    Normal,
    /// Never finishes (stuck Working).
    Hangs,
    /// Goes Degraded; may recover later (a flapping node).
    Fails,
}

#[derive(Debug, Clone)]
enum Op {
    /// Controller pass; `lose_status`: the pool status write is lost (killed before it).
    Reconcile { lose_status: bool },
    /// One step of the agent on node `n`.
    AgentStep(usize),
    /// Node `n`'s Ready condition flips.
    FlipReady(usize),
    /// Pool `p` gets a new rendered config.
    NewConfig(usize),
    /// The clock moves on.
    Tick(u8),
    /// A node with no config at all joins (its agent enrolled, nothing applied yet).
    Join,
    /// Pool `p`'s `spec.paused` flips.
    Pause(usize),
    /// Node `n`, at rest, finds drift: Degraded on the config it runs, still Ready and serving.
    Drift(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<bool>().prop_map(|b| Op::Reconcile { lose_status: b }),
        6 => (0usize..16).prop_map(Op::AgentStep),
        1 => (0usize..16).prop_map(Op::FlipReady),
        1 => (0usize..2).prop_map(Op::NewConfig),
        1 => (1u8..30).prop_map(Op::Tick),
        1 => Just(Op::Join),
        1 => (0usize..2).prop_map(Op::Pause),
        1 => (0usize..16).prop_map(Op::Drift),
    ]
}

fn agent() -> impl Strategy<Value = Agent> {
    prop_oneof![6 => Just(Agent::Normal), 1 => Just(Agent::Hangs), 2 => Just(Agent::Fails)]
}

fn int_or_percent() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![(0i64..4).prop_map(|n| json!(n)), (0u32..=100).prop_map(|p| json!(format!("{p}%")))]
}

fn budget_spec() -> impl Strategy<Value = serde_json::Value> {
    (prop::bool::ANY, int_or_percent(), prop::bool::ANY, 0usize..5).prop_map(|(min, v, group, app)| {
        // An app's nodes are all in one pool; a zone's are in both.
        let selector = match app {
            0..3 => json!({"app": format!("a{app}")}),
            _ => json!({"zone": format!("z{}", app - 3)}),
        };
        let mut spec = json!({"selector": {"matchLabels": selector}});
        spec[if min { "minAvailable" } else { "maxUnavailable" }] = v;
        if group {
            spec["groupBy"] = json!(["zone"]);
        }
        spec
    })
}

#[derive(Debug, Clone)]
struct Fleet {
    agents: Vec<Agent>,
    pools: Vec<serde_json::Value>,
    budgets: Vec<serde_json::Value>,
    ops: Vec<Op>,
}

fn fleet() -> impl Strategy<Value = Fleet> {
    (
        prop::collection::vec(agent(), 1..16),
        prop::collection::vec(
            (int_or_percent(), 0i64..3, 0i64..40, prop::option::of(0i64..3)).prop_map(|(max, canary, soak, k)| {
                let mut rollout = json!({"canary": canary, "soakSeconds": soak});
                if let Some(k) = k {
                    rollout["maxFailures"] = json!(k);
                }
                json!({"maxUnavailable": max, "rollout": rollout})
            }),
            2,
        ),
        prop::collection::vec(budget_spec(), 0..3),
        prop::collection::vec(op(), 1..300),
    )
        .prop_map(|(agents, pools, budgets, ops)| Fleet { agents, pools, budgets, ops })
}

struct Sim {
    nodes: Vec<Node>,
    agents: Vec<Agent>,
    pools: Vec<MachineConfigPool>,
    budgets: Vec<NodeDisruptionBudget>,
    now: DateTime<Utc>,
    configs: u32,
}

fn set_ann(n: &mut Node, k: &str, v: Option<&str>) {
    match v {
        Some(v) => {
            n.metadata.annotations.insert(k.into(), v.into());
        }
        None => {
            n.metadata.annotations.remove(k);
        }
    }
}

fn set_ready(n: &mut Node, ready: bool) {
    n.status.conditions = vec![aloft_api::Condition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        ..Default::default()
    }];
}

impl Sim {
    fn new(f: &Fleet) -> Sim {
        let nodes = f
            .agents
            .iter()
            .enumerate()
            .map(|(i, _)| node(&format!("n{i:02}"), Sim::labels(i), "r0", "r0", "Done", true))
            .collect();
        let pools = ["infra", "worker"]
            .iter()
            .zip(&f.pools)
            .map(|(name, spec)| pool(name, spec["maxUnavailable"].clone(), "r0", json!({"rollout": spec["rollout"]})))
            .collect();
        let budgets = f
            .budgets
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                serde_json::from_value(json!({"metadata": {"name": format!("b{i}")}, "spec": spec})).unwrap()
            })
            .collect();
        Sim { nodes, agents: f.agents.clone(), pools, budgets, now: now(), configs: 0 }
    }

    /// The labels of the `i`th node: its pool, app and zone.
    fn labels(i: usize) -> serde_json::Value {
        let role = if i % 3 == 2 { "infra" } else { "worker" };
        let mut l = json!({format!("node-role.kubernetes.io/{role}"): "", "app": format!("a{}", i % 3), "zone": format!("z{}", i % 2)});
        if i % 3 == 2 && i.is_multiple_of(2) {
            // Both roles: the custom pool takes it.
            l["node-role.kubernetes.io/worker"] = json!("");
        }
        l
    }

    fn snapshot(&self) -> Snapshot<'_> {
        Snapshot { nodes: &self.nodes, pools: &self.pools, budgets: &self.budgets }
    }

    fn facts(&self) -> Vec<NodeFacts> {
        self.nodes.iter().map(NodeFacts::of).collect()
    }

    /// The agent on node `i` takes one step, as aloft-agent would: Working, drain handshake
    /// (gated by the drain controller's budget check), apply, Done and uncordon.
    fn agent_step(&mut self, i: usize) {
        let f = NodeFacts::of(&self.nodes[i]);
        if f.desired.is_empty() || (f.desired == f.current && f.state != "Degraded") {
            return;
        }
        match (self.agents[i], f.state.as_str()) {
            (_, "Done") => set_ann(&mut self.nodes[i], ann::STATE, Some("Working")),
            (Agent::Hangs, _) => {}
            (Agent::Fails, "Working") => {
                set_ann(&mut self.nodes[i], ann::STATE, Some("Degraded"));
                set_ann(&mut self.nodes[i], ann::FAILED_CONFIG, Some(f.desired.as_str()));
            }
            (Agent::Fails, _) => {
                // A flapping node: recovers and finishes this time.
                self.agents[i] = Agent::Normal;
                set_ann(&mut self.nodes[i], ann::STATE, Some("Working"));
                set_ann(&mut self.nodes[i], ann::FAILED_CONFIG, None);
            }
            (Agent::Normal, _) => {
                if !self.nodes[i].spec.unschedulable {
                    // The drain controller: cordon only within the budgets.
                    let facts = self.facts();
                    let unavailable: Vec<bool> = facts.iter().map(NodeFacts::disrupted).collect();
                    let labels: Vec<&BTreeMap<String, String>> =
                        self.nodes.iter().map(|n| &n.metadata.labels).collect();
                    if Ledger::new(&self.budgets, &labels, &unavailable).check(i).is_ok() {
                        self.nodes[i].spec.unschedulable = true;
                        let answer = format!("drain-{}", f.desired.as_str());
                        set_ann(&mut self.nodes[i], ann::LAST_APPLIED_DRAIN, Some(&answer));
                    }
                    return;
                }
                let desired = f.desired.clone();
                set_ann(&mut self.nodes[i], ann::CURRENT_CONFIG, Some(&desired));
                set_ann(&mut self.nodes[i], ann::STATE, Some("Done"));
                self.nodes[i].spec.unschedulable = false;
                set_ann(&mut self.nodes[i], ann::LAST_APPLIED_DRAIN, Some(&format!("uncordon-{}", desired.as_str())));
            }
        }
    }

    fn new_config(&mut self, p: usize) {
        self.configs += 1;
        let name = format!("r{}", self.configs);
        if let Some(c) = self.pools[p].spec.configuration.as_mut() {
            c.name = name;
        }
    }

    /// A controller pass over the stored state; returns the picks per pool.
    fn reconcile(&mut self, lose_status: bool) -> Vec<PoolPlan> {
        let plans = plan(self.snapshot(), self.now);
        for pp in &plans {
            for &i in &pp.picks {
                set_ann(&mut self.nodes[i], ann::DESIRED_CONFIG, Some(pp.pick_config()));
                set_ann(&mut self.nodes[i], ann::PRESTAGE_CONFIG, None);
            }
            for (i, want) in &pp.prestage {
                if !pp.picks.contains(i) {
                    set_ann(&mut self.nodes[*i], ann::PRESTAGE_CONFIG, want.as_deref());
                }
            }
            if !lose_status {
                // As the status computation: status.configuration moves once every member is
                // updated (what a node joining a held pool then gets).
                let all_updated = !pp.members.is_empty()
                    && pp.members.iter().all(|&i| NodeFacts::of(&self.nodes[i]).updated_to(&pp.target));
                let spec = self.pools[pp.pool].spec.configuration.clone();
                let st = self.pools[pp.pool].status.get_or_insert_with(Default::default);
                st.rollout = pp.rollout.clone();
                if all_updated {
                    st.configuration = spec;
                }
            }
        }
        plans
    }

    /// The invariant by the rules themselves, computed from the raw objects without any of the
    /// code under test (its facts, membership, limits or ledger): a mistake in one of those
    /// would otherwise be the test's mistake too.
    fn check_by_the_rules(&self, plans: &[PoolPlan]) -> Result<(), TestCaseError> {
        let ann_of = |n: &Node, k: &str| n.metadata.annotations.get(k).cloned().unwrap_or_default();
        // Unavailable: not Ready, cordoned, asked to move and not there, Working, Degraded or
        // Unreconcilable (wherever it is), or stuck in a drain.
        let unavailable = |n: &Node| {
            let ready = n.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
            let (desired, current) = (ann_of(n, ann::DESIRED_CONFIG), ann_of(n, ann::CURRENT_CONFIG));
            !ready
                || n.spec.unschedulable
                || (!desired.is_empty() && desired != current)
                || ["Working", "Degraded", "Unreconcilable"].contains(&ann_of(n, ann::STATE).as_str())
                || !ann_of(n, ann::DRAIN_FAILURE).is_empty()
        };
        // The custom pool (infra) takes a node with its role label; worker the rest with its own.
        let pool_of = |n: &Node| {
            let has = |r: &str| n.metadata.labels.contains_key(&format!("node-role.kubernetes.io/{r}"));
            if has("infra") {
                Some("infra")
            } else if has("worker") {
                Some("worker")
            } else {
                None
            }
        };
        let moving = |i: usize| {
            let n = &self.nodes[i];
            ann_of(n, ann::DESIRED_CONFIG) != ann_of(n, ann::CURRENT_CONFIG)
        };
        // "N" or "N%" of `total`; `up`: a percentage rounds up (else down).
        let resolve = |v: &serde_json::Value, total: usize, up: bool| -> usize {
            match v {
                serde_json::Value::String(p) => {
                    let p: usize = p.trim_end_matches('%').parse().unwrap();
                    if up {
                        (total * p).div_ceil(100)
                    } else {
                        total * p / 100
                    }
                }
                v => v.as_u64().unwrap() as usize,
            }
        };
        for pp in plans {
            let p = &self.pools[pp.pool];
            // Only a pick that moves a node (not a revert to the config it runs) is held to the
            // limits; held rollouts only give first configs (checked in `check`).
            if !pp.picks.iter().any(|&i| moving(i))
                || pp.picks.iter().all(|&i| ann_of(&self.nodes[i], ann::CURRENT_CONFIG).is_empty())
            {
                continue;
            }
            let members: Vec<usize> =
                (0..self.nodes.len()).filter(|&i| pool_of(&self.nodes[i]) == Some(p.metadata.name.as_str())).collect();
            let spec = serde_json::to_value(&p.spec.max_unavailable).unwrap();
            let max = if spec.is_null() { 1 } else { resolve(&spec, members.len(), false).max(1) };
            let down = members.iter().filter(|&&i| unavailable(&self.nodes[i])).count();
            prop_assert!(
                down <= max,
                "pool {}: {down} unavailable > maxUnavailable {max} (by the rules)",
                p.metadata.name
            );
        }
        let picked: Vec<usize> = plans.iter().flat_map(|pp| pp.picks.iter().copied()).filter(|&i| moving(i)).collect();
        for b in &self.budgets {
            let spec = serde_json::to_value(&b.spec).unwrap();
            let (key, want) = spec["selector"]["matchLabels"].as_object().unwrap().iter().next().unwrap();
            let covered: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].metadata.labels.get(key).map(String::as_str) == want.as_str())
                .collect();
            let grouped = spec.get("groupBy").is_some_and(|g| !g.is_null());
            for &i in &picked {
                if !covered.contains(&i) {
                    continue;
                }
                let zone = |j: usize| self.nodes[j].metadata.labels.get("zone").cloned();
                let group: Vec<usize> = covered.iter().copied().filter(|&j| !grouped || zone(j) == zone(i)).collect();
                let total = group.len();
                // A PodDisruptionBudget's: percentages round up; minAvailable leaves the rest.
                let allowed = match (spec.get("minAvailable").filter(|v| !v.is_null()), spec.get("maxUnavailable")) {
                    (Some(min), _) => total.saturating_sub(resolve(min, total, true)),
                    (None, Some(max)) => resolve(max, total, true).min(total),
                    (None, None) => 0,
                };
                let down = group.iter().filter(|&&j| unavailable(&self.nodes[j])).count();
                prop_assert!(
                    down <= allowed,
                    "picked {} into budget {} with {down} of {total} unavailable > {allowed} allowed (by the rules)",
                    self.nodes[i].metadata.name,
                    b.metadata.name
                );
            }
        }
        Ok(())
    }

    /// The invariant, checked after every operation.
    fn check(&self, plans: Option<&[PoolPlan]>) -> Result<(), TestCaseError> {
        if let Some(plans) = plans {
            self.check_by_the_rules(plans)?;
        }
        let facts = self.facts();
        let (members, _) = pools::membership(&self.pools, &self.nodes);
        for p in &self.pools {
            let idx = members.get(&p.metadata.name).cloned().unwrap_or_default();
            let max = pools::max_unavailable(p.spec.max_unavailable.as_ref(), idx.len());
            // Disruption the rollout caused (asked to move and not finished) never exceeds it.
            let by_rollout = idx.iter().filter(|&&i| facts[i].desired != facts[i].current).count();
            prop_assert!(
                by_rollout <= max,
                "pool {}: {by_rollout} nodes updating > maxUnavailable {max}",
                p.metadata.name
            );
            // When the controller picked, every unavailable node counted, picks included.
            if let Some(pp) =
                plans.and_then(|ps| ps.iter().find(|pp| self.pools[pp.pool].metadata.name == p.metadata.name))
            {
                // A revert (a failing node sent back to the config it runs) lowers every count
                // and may go while over the limit; any other pick may not.
                let moves = pp.picks.iter().any(|&i| facts[i].desired != facts[i].current);
                if moves {
                    let unavailable = idx.iter().filter(|&&i| facts[i].disrupted()).count();
                    prop_assert!(
                        unavailable <= max,
                        "pool {}: picked {:?} with {unavailable} unavailable > maxUnavailable {max}",
                        p.metadata.name,
                        pp.picks
                    );
                    // A held rollout (paused, breaker open, soaking) picks only nodes that had no
                    // config: right after the pick their current config is still empty.
                    let fresh = pp.picks.iter().all(|&i| facts[i].current.is_empty());
                    prop_assert!(fresh || !p.spec.paused, "picked a configured node while paused");
                    if let (Some(r), false) = (&pp.rollout, fresh) {
                        prop_assert!(r.phase != RolloutPhase::CircuitBroken, "picked while the breaker is open");
                        prop_assert!(r.phase != RolloutPhase::Soaking, "picked while soaking");
                    }
                }
            }
        }
        // Budgets: the rollout's own disruption (updating or cordoned) stays within every group,
        // and a group a pick went into is within its budget counting everything.
        let labels: Vec<&BTreeMap<String, String>> = self.nodes.iter().map(|n| &n.metadata.labels).collect();
        let by_rollout: Vec<bool> =
            self.nodes.iter().zip(&facts).map(|(n, f)| f.desired != f.current || n.spec.unschedulable).collect();
        let ledger = Ledger::new(&self.budgets, &labels, &by_rollout);
        for (name, g) in ledger.groups() {
            prop_assert!(
                g.unavailable <= g.allowed,
                "budget {name} group {:?}: {} > {}",
                g.key,
                g.unavailable,
                g.allowed
            );
        }
        if let Some(plans) = plans {
            let unavailable: Vec<bool> = facts.iter().map(NodeFacts::disrupted).collect();
            let all = Ledger::new(&self.budgets, &labels, &unavailable);
            for b in &self.budgets {
                let sel = b.spec.selector.to_selector().unwrap();
                for pp in plans {
                    for &i in &pp.picks {
                        // A revert lowers the counts (see above).
                        if facts[i].desired == facts[i].current {
                            continue;
                        }
                        if sel.matches(&self.nodes[i].metadata.labels) {
                            prop_assert!(
                                all.check(i).is_ok(),
                                "picked {} beyond budget {}",
                                self.nodes[i].metadata.name,
                                b.metadata.name
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_pool_or_budget_is_ever_exceeded(f in fleet()) {
        let mut sim = Sim::new(&f);
        for op in &f.ops {
            let plans = match op {
                Op::Reconcile { lose_status } => Some(sim.reconcile(*lose_status)),
                Op::AgentStep(n) => {
                    let n = n % sim.nodes.len();
                    sim.agent_step(n);
                    None
                }
                Op::FlipReady(n) => {
                    let n = n % sim.nodes.len();
                    let ready = sim.nodes[n].is_ready();
                    set_ready(&mut sim.nodes[n], !ready);
                    None
                }
                Op::NewConfig(p) => {
                    sim.new_config(*p);
                    None
                }
                Op::Tick(s) => {
                    sim.now += chrono::Duration::seconds(i64::from(*s));
                    None
                }
                Op::Join => {
                    let i = sim.nodes.len();
                    sim.nodes.push(node(&format!("n{i:02}"), Sim::labels(i), "", "", "", true));
                    sim.agents.push(Agent::Normal);
                    None
                }
                Op::Pause(p) => {
                    sim.pools[*p].spec.paused = !sim.pools[*p].spec.paused;
                    None
                }
                Op::Drift(n) => {
                    let n = n % sim.nodes.len();
                    let f = NodeFacts::of(&sim.nodes[n]);
                    if f.done() && !f.current.is_empty() {
                        let current = f.current.clone();
                        set_ann(&mut sim.nodes[n], ann::STATE, Some("Degraded"));
                        set_ann(&mut sim.nodes[n], ann::FAILED_CONFIG, Some(current.as_str()));
                    }
                    None
                }
            };
            // Check the picks' moment before anything else moves.
            sim.check(plans.as_deref())?;
        }
    }
}

#[test]
fn a_restart_after_the_picks_were_written_picks_no_more() {
    // The decision has no memory but the stored objects: a coordinator killed after writing its
    // picks and before the pool's status starts again with the picks on the Nodes and the status
    // from before. It counts them and picks no more (canary 1 of maxUnavailable 2: one, not two).
    let mut nodes: Vec<Node> = (0..6).map(|i| node(&format!("n{i}"), worker(), "r1", "r1", "Done", true)).collect();
    let pools = [pool("worker", json!(IntOrString::Int(2)), "r2", json!({"rollout": {"canary": 1}}))];
    let first = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(first.picks.len(), 1, "the canary");
    for &i in &first.picks {
        set_ann(&mut nodes[i], ann::DESIRED_CONFIG, Some("r2"));
    }
    let again = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(again.picks.is_empty(), "picked {:?} beside the canary", picked_names(&nodes, &again));
    assert_eq!(again.rollout.as_ref().map(|r| r.phase), Some(RolloutPhase::Canary));
}

/// A node reporting `DiskPressure` or `NetworkUnavailable` (anything but False) is unavailable as
/// MCO's `isNodeReady` has it: it holds a slot of maxUnavailable and is not picked itself. It was
/// counted Ready: with maxUnavailable 1 another node was picked beside it, and it was updated too.
#[test]
fn a_node_under_disk_or_network_pressure_holds_a_slot_and_is_not_picked() {
    let pressed = |name: &str, kind: &str, status: &str| {
        let mut n = node(name, worker(), "r1", "r1", "Done", true);
        n.status.conditions.push(serde_json::from_value(json!({"type": kind, "status": status})).unwrap());
        n
    };
    for (kind, status) in [("DiskPressure", "True"), ("NetworkUnavailable", "True"), ("DiskPressure", "Unknown")] {
        let nodes = vec![pressed("a", kind, status), node("b", worker(), "r1", "r1", "Done", true)];
        let pools = [pool("worker", json!(1), "r2", json!({}))];
        let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
        assert!(p.picks.is_empty(), "{kind}={status}: {:?}", picked_names(&nodes, &p));
        let pools = [pool("worker", json!(2), "r2", json!({}))];
        let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
        assert_eq!(picked_names(&nodes, &p), vec!["b"], "{kind}={status}");
    }
    // Reported False: no pressure.
    let nodes = vec![pressed("a", "DiskPressure", "False"), node("b", worker(), "r1", "r1", "Done", true)];
    let pools = [pool("worker", json!(2), "r2", json!({}))];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(picked_names(&nodes, &p), vec!["a", "b"]);
}

/// A pool being deleted (a finalizer holds it after a DELETE) gets its status only, as MCO's
/// node controller (`syncStatusOnly`): nothing is picked, not even a node with no config, and
/// the wait says why. Its nodes were reconfigured while the admin took the pool away.
#[test]
fn a_pool_being_deleted_moves_no_node() {
    let nodes = vec![node("a", worker(), "r1", "r1", "Done", true), node("fresh", worker(), "", "", "", true)];
    let mut p = running(pool("worker", json!(2), "r2", json!({})), "r1");
    p.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
    let pools = [p];
    let pp = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(pp.picks.is_empty(), "{:?}", picked_names(&nodes, &pp));
    assert!(pp.prestage.is_empty());
    assert_eq!(pp.wait, Some(Wait::Deleting));
    assert_eq!(Wait::Deleting.to_string(), "the pool is being deleted");
}

/// The only nodes left to move are not Ready: they wait for that, not for a slot (every slot may
/// be free), and a node that is joining (no config yet, not Ready before its agent's first
/// report) is no wait at all.
#[test]
fn nodes_left_that_are_not_ready_wait_for_that_and_a_joining_node_for_nothing() {
    let pools = [pool("worker", json!(2), "r2", json!({}))];
    let down = node("down", worker(), "r1", "r1", "Done", false);
    let joining = node("joining", worker(), "", "", "", false);
    let nodes = vec![node("a", worker(), "r2", "r2", "Done", true), down.clone(), joining.clone()];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert!(p.picks.is_empty());
    assert_eq!(p.wait, Some(Wait::NotReady { nodes: vec![1] }));
    let nodes = vec![node("a", worker(), "r2", "r2", "Done", true), joining];
    let p = plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[] }, now()).remove(0);
    assert_eq!(p.wait, None, "a joining node waits for its own start");
}
