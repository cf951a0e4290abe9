//! What the scenarios do through the coordinator's API: pools, MachineConfigs, waiting for a
//! rollout, and sampling the Nodes once a second to check the budget and time each node's
//! unavailable window.

use crate::Fleet;
use aloft_api::annotations as ann;
use aloft_tests::{path_of, MACHINE_CONFIG, MACHINE_CONFIG_POOL};
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An annotation of an object ("" when absent).
pub fn annotation<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str).unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

/// Ready condition True.
pub fn is_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

pub fn is_cordoned(node: &Value) -> bool {
    node.pointer("/spec/unschedulable").and_then(Value::as_bool).unwrap_or(false)
}

/// Unavailable as a user of the node would see it: cordoned, not Ready, asked to move to a
/// config it has not finished, or Working.
pub fn is_unavailable(node: &Value) -> bool {
    let desired = annotation(node, ann::DESIRED_CONFIG);
    is_cordoned(node)
        || !is_ready(node)
        || (!desired.is_empty() && desired != annotation(node, ann::CURRENT_CONFIG))
        || annotation(node, ann::STATE) == "Working"
}

/// Create or replace an object (POST, or PUT over the stored one on 409).
pub async fn apply(fleet: &Fleet, collection: &str, obj: &Value) -> Result<Value> {
    let r = fleet.admin.post(collection, obj).await?;
    if r.code != 409 {
        return r.into_result();
    }
    let path = format!("{collection}/{}", name(obj));
    let current = fleet.admin.get(&path).await?.into_result()?;
    let mut obj = obj.clone();
    obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    fleet.admin.put(&path, &obj).await?.into_result()
}

/// The worker pool (selects role=worker configs and nodes), with `maxUnavailable` and more spec.
pub async fn worker_pool(fleet: &Fleet, max_unavailable: i64, extra_spec: Value) -> Result<()> {
    let mut pool = aloft_tests::machine_config_pool("worker", "worker");
    pool["spec"]["maxUnavailable"] = json!(max_unavailable);
    if let Some(extra) = extra_spec.as_object() {
        for (k, v) in extra {
            pool["spec"][k] = v.clone();
        }
    }
    apply(fleet, &path_of(&MACHINE_CONFIG_POOL, None), &pool).await?;
    Ok(())
}

/// A worker MachineConfig with `spec` (the `config` gets Ignition 3.4.0 if it has no version).
pub async fn machine_config(fleet: &Fleet, mc_name: &str, mut spec: Value) -> Result<()> {
    if spec.pointer("/config/ignition/version").is_none() {
        spec["config"]["ignition"]["version"] = json!("3.4.0");
    }
    let mc = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": mc_name, "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": spec,
    });
    apply(fleet, &path_of(&MACHINE_CONFIG, None), &mc).await?;
    Ok(())
}

/// An Ignition file entry with `data:` contents (mode 0644).
pub fn file(path: &str, contents: &str) -> Value {
    let encoded: String = contents
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b".-_~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    json!({"path": path, "mode": 420, "overwrite": true, "contents": {"source": format!("data:,{encoded}")}})
}

/// The pool's current target (`spec.configuration.name`; "" before the first render).
pub async fn pool_target(fleet: &Fleet, pool: &str) -> Result<String> {
    let p = fleet.admin.get(&path_of(&MACHINE_CONFIG_POOL, Some(pool))).await?.into_result()?;
    Ok(p.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("").to_string())
}

/// Wait until `n` Nodes exist (every VM enrolled).
pub async fn wait_enrolled(fleet: &Fleet, n: usize, timeout: Duration) -> Result<Vec<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        let nodes = fleet.nodes().await?;
        if nodes.len() >= n {
            return Ok(nodes.iter().map(|n| name(n).to_string()).collect());
        }
        if Instant::now() >= deadline {
            bail!("only {} of {n} nodes enrolled within {timeout:?}", nodes.len());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// How long a node may stay Degraded on a rollout's target before [`wait_converged`] gives up
/// on it. The agent retries a failed update with backoff (5 s doubling to 60 s), so a passing
/// failure (a download cut short on QEMU's user network, the OS helper restarting) clears within
/// a few tries; ending the wait on the first Degraded report failed a run the fleet was about to
/// finish. Unreconcilable is never retried and ends the wait at once.
pub const DEGRADED_GRACE: Duration = Duration::from_secs(180);

/// Nodes seen Degraded on a target, and since when (a report that clears forgets it).
#[derive(Debug, Default)]
pub struct DegradedSince(BTreeMap<String, Instant>);

impl DegradedSince {
    /// Note whether `node` is Degraded `now`; returns how long it has been, once that is longer
    /// than `grace`.
    pub fn over(&mut self, node: &str, degraded: bool, now: Instant, grace: Duration) -> Option<Duration> {
        if !degraded {
            self.0.remove(node);
            return None;
        }
        let since = *self.0.entry(node.to_string()).or_insert(now);
        let for_ = now.saturating_duration_since(since);
        (for_ > grace).then_some(for_)
    }
}

/// Wait for the worker pool to render a target other than `previous` and for every node to be
/// Done on it; returns the target. Fails early when a node is Unreconcilable on it, or has been
/// Degraded on it for longer than [`DEGRADED_GRACE`] (naming the reason).
pub async fn wait_converged(fleet: &Fleet, previous: &str, timeout: Duration) -> Result<String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    let mut logged = String::new();
    let mut degraded = DegradedSince::default();
    loop {
        for vm in &fleet.vms {
            match vm.status().phase {
                crate::Phase::Failed(msg) => bail!("{} failed while waiting for the rollout: {msg}", vm.name),
                crate::Phase::Off { power_cut: false } => bail!("{} powered off during the rollout", vm.name),
                _ => {}
            }
        }
        let target = pool_target(fleet, "worker").await?;
        if !target.is_empty() && target != previous {
            let nodes = fleet.nodes().await?;
            let mut done = 0;
            let mut summary = Vec::new();
            for n in &nodes {
                let (state, current, desired) =
                    (annotation(n, ann::STATE), annotation(n, ann::CURRENT_CONFIG), annotation(n, ann::DESIRED_CONFIG));
                if state == "Unreconcilable" && desired == target {
                    bail!("node {} is {state} on {target}: {}", name(n), annotation(n, ann::REASON));
                }
                let on_target = state == "Degraded" && desired == target;
                if let Some(for_) = degraded.over(name(n), on_target, Instant::now(), DEGRADED_GRACE) {
                    bail!(
                        "node {} has been Degraded on {target} for {}s: {}",
                        name(n),
                        for_.as_secs(),
                        annotation(n, ann::REASON)
                    );
                }
                // Done on the target and uncordoned (the coordinator uncordons after Done).
                if state == "Done" && current == target && !is_cordoned(n) {
                    done += 1;
                }
                summary.push(format!(
                    "{}={state}{}{}{}",
                    name(n),
                    if current == target { "@target" } else { "" },
                    if is_cordoned(n) { ",cordoned" } else { "" },
                    if on_target { format!(" ({})", annotation(n, ann::REASON)) } else { String::new() }
                ));
            }
            last = format!("target {target}: {}", summary.join(" "));
            if last != logged {
                tracing::info!("rollout: {last}");
                logged = last.clone();
            }
            if done == nodes.len() && !nodes.is_empty() {
                return Ok(target);
            }
        }
        if Instant::now() >= deadline {
            bail!("the pool did not converge within {timeout:?}; last: {last}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// One look at the Nodes.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    /// node name -> (cordoned, unavailable, annotations of interest)
    pub nodes: BTreeMap<String, NodeSample>,
}

#[derive(Debug, Clone)]
pub struct NodeSample {
    pub cordoned: bool,
    pub unavailable: bool,
    pub ready: bool,
    pub current: String,
    pub desired: String,
    pub state: String,
    pub prestage: String,
    pub prestaged: String,
}

/// Samples the Nodes through the API once a second until stopped.
pub struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    errors: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub fn start(fleet: &Fleet) -> Sampler {
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let errors: Arc<Mutex<u64>> = Arc::default();
        let (s, e) = (samples.clone(), errors.clone());
        let admin = fleet.admin.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let at = Instant::now();
                let list = match admin.get(&path_of(&aloft_tests::NODE, None)).await.and_then(|r| r.into_result()) {
                    Ok(l) => l,
                    Err(_) => {
                        *e.lock().expect("errors") += 1;
                        continue;
                    }
                };
                let nodes = list["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .map(|n| {
                                (
                                    name(n).to_string(),
                                    NodeSample {
                                        cordoned: is_cordoned(n),
                                        unavailable: is_unavailable(n),
                                        ready: is_ready(n),
                                        current: annotation(n, ann::CURRENT_CONFIG).to_string(),
                                        desired: annotation(n, ann::DESIRED_CONFIG).to_string(),
                                        state: annotation(n, ann::STATE).to_string(),
                                        prestage: annotation(n, ann::PRESTAGE_CONFIG).to_string(),
                                        prestaged: annotation(n, ann::PRESTAGED_CONFIG).to_string(),
                                    },
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                s.lock().expect("samples").push(Sample { at, nodes });
            }
        });
        Sampler { samples, errors, task }
    }

    /// Stop sampling; the samples taken.
    pub fn stop(self) -> (Vec<Sample>, u64) {
        self.task.abort();
        let samples = self.samples.lock().expect("samples").clone();
        let errors = *self.errors.lock().expect("errors");
        (samples, errors)
    }
}

/// The most nodes cordoned at once and the most unavailable at once, over all samples.
pub fn max_concurrent(samples: &[Sample]) -> (usize, usize) {
    samples.iter().fold((0, 0), |(c, u), s| {
        let cordoned = s.nodes.values().filter(|n| n.cordoned).count();
        let unavailable = s.nodes.values().filter(|n| n.unavailable).count();
        (c.max(cordoned), u.max(unavailable))
    })
}

/// The first sample where more than `allowed` nodes were unavailable, each node as it was then
/// (what a budget failure needs to be told apart from a slow agent or a lost heartbeat); empty
/// when none was.
pub fn first_over_budget(samples: &[Sample], allowed: usize) -> String {
    let Some(at) = samples.iter().position(|s| s.nodes.values().filter(|n| n.unavailable).count() > allowed) else {
        return String::new();
    };
    let show = |s: &Sample| {
        s.nodes
            .iter()
            .map(|(name, n)| {
                format!(
                    "{name}: ready {} cordoned {} state {:?} current {:?} desired {:?}{}",
                    n.ready,
                    n.cordoned,
                    n.state,
                    n.current,
                    n.desired,
                    if n.unavailable { " UNAVAILABLE" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let start = samples[0].at;
    let mut out = String::new();
    for s in &samples[at.saturating_sub(1)..(at + 2).min(samples.len())] {
        out.push_str(&format!("\n  at {:.0} s: {}", (s.at - start).as_secs_f64(), show(s)));
    }
    out
}

/// Per node, how long it was cordoned (first sample cordoned to the first sample after that
/// not cordoned) and how long unavailable (same, by [`is_unavailable`]). Nodes never seen in
/// that state are missing.
pub fn windows(samples: &[Sample]) -> BTreeMap<String, (Option<Duration>, Option<Duration>)> {
    let mut out: BTreeMap<String, (Option<Duration>, Option<Duration>)> = BTreeMap::new();
    let names: Vec<String> = samples.iter().flat_map(|s| s.nodes.keys().cloned()).collect();
    for n in names {
        let span = |pick: &dyn Fn(&NodeSample) -> bool| -> Option<Duration> {
            let start = samples.iter().position(|s| s.nodes.get(&n).is_some_and(pick))?;
            // A window still open at the last sample (the sampler stops as soon as the rollout
            // converges, which can be within a second of the last node's uncordon) runs to it.
            let end = samples[start..]
                .iter()
                .position(|s| s.nodes.get(&n).is_some_and(|x| !pick(x)))
                .map_or(samples.len() - 1, |e| start + e);
            Some(samples[end].at - samples[start].at)
        };
        out.insert(n.clone(), (span(&|x| x.cordoned), span(&|x| x.unavailable)));
    }
    out
}

/// A unit's `InvocationID` and `ActiveEnterTimestampMonotonic` in the guest.
pub async fn unit_invocation(vm: &crate::Vm, unit: &str) -> Result<(String, String)> {
    let out = vm
        .sh(&format!("systemctl show -p InvocationID -p ActiveEnterTimestampMonotonic -p ActiveState {unit}"))
        .await?;
    let get = |k: &str| out.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).map(str::to_string);
    if get("ActiveState").as_deref() != Some("active") {
        return Err(anyhow!("{}: {unit} is not active: {out}", vm.name));
    }
    Ok((get("InvocationID").unwrap_or_default(), get("ActiveEnterTimestampMonotonic").unwrap_or_default()))
}

#[cfg(test)]
mod window_tests {
    use super::*;

    fn sample(at: Instant, cordoned: bool) -> Sample {
        let node = NodeSample {
            cordoned,
            unavailable: cordoned,
            ready: true,
            current: String::new(),
            desired: String::new(),
            state: String::new(),
            prestage: String::new(),
            prestaged: String::new(),
        };
        Sample { at, nodes: BTreeMap::from([("vm-0".to_string(), node)]) }
    }

    #[test]
    fn a_window_still_open_at_the_last_sample_counts() {
        let t = Instant::now();
        let s = |secs: u64, c: bool| sample(t + Duration::from_secs(secs), c);
        let closed = windows(&[s(0, false), s(1, true), s(3, true), s(4, false)]);
        assert_eq!(closed["vm-0"], (Some(Duration::from_secs(3)), Some(Duration::from_secs(3))));
        let open = windows(&[s(0, false), s(1, true), s(3, true)]);
        assert_eq!(open["vm-0"], (Some(Duration::from_secs(2)), Some(Duration::from_secs(2))));
        let never = windows(&[s(0, false), s(1, false)]);
        assert_eq!(never["vm-0"], (None, None));
    }
}

#[cfg(test)]
mod degraded_tests {
    use super::*;

    #[test]
    fn a_degraded_node_ends_the_wait_only_after_the_grace() {
        let t = Instant::now();
        let at = |secs: u64| t + Duration::from_secs(secs);
        let grace = Duration::from_secs(180);
        let mut d = DegradedSince::default();
        assert_eq!(d.over("vm-0", true, at(0), grace), None, "a first Degraded report is a retry to wait for");
        assert_eq!(d.over("vm-0", true, at(180), grace), None);
        assert_eq!(d.over("vm-1", true, at(180), grace), None, "each node has its own clock");
        assert_eq!(d.over("vm-0", true, at(181), grace), Some(Duration::from_secs(181)));
        // Cleared (a retry went through): the next Degraded report starts afresh.
        assert_eq!(d.over("vm-0", false, at(182), grace), None);
        assert_eq!(d.over("vm-0", true, at(300), grace), None);
        assert_eq!(d.over("vm-0", true, at(481), grace), Some(Duration::from_secs(181)));
    }
}
