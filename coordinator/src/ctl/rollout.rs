//! `aloftctl rollout status` and `rollout resume`: follow a pool's rollout until every node
//! runs its target, saying what holds it back and failing on what the pool shows failed, and
//! close a circuit breaker the rollout tripped.

use super::{list_in_pages, print, resolve, Usage};
use crate::client::{resource_path, Client};
use crate::resources;
use anyhow::{anyhow, bail, Result};
use serde_json::Value;

fn condition_of<'a>(pool: &'a Value, type_: &str) -> Option<&'a Value> {
    pool.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// `mcp/NAME` or `mcp NAME` into the pool's path, its name, and the pool as the user wrote it
/// (`mcp/NAME`), for messages.
pub(super) fn pool_target(args: &[String], verb: &str) -> Result<(String, String, String)> {
    pool_target_of(args, verb).map_err(|e| Usage(format!("{e:#}")).into())
}

fn pool_target_of(args: &[String], verb: &str) -> Result<(String, String, String)> {
    let (kind, name) = match args {
        [one] => one.split_once('/').ok_or_else(|| match resolve(one) {
            // A type without a name (`rollout resume mcp`).
            Ok(_) => anyhow!("rollout {verb}: no pool name in {one:?} (try: aloftctl rollout {verb} {one}/NAME)"),
            Err(_) => anyhow!(
                "rollout {verb}: want mcp/NAME or mcp NAME, got {one:?} (try: aloftctl rollout {verb} mcp/{one})"
            ),
        })?,
        [kind, name] if !kind.contains('/') => (kind.as_str(), name.as_str()),
        _ => bail!("rollout {verb} takes one pool, as mcp/NAME or mcp NAME, not {:?}", args.join(" ")),
    };
    if name.is_empty() {
        bail!("rollout {verb}: no pool name in {:?}", args.join(" "));
    }
    let rt = resolve(kind)?;
    if rt.kind != "MachineConfigPool" {
        bail!("rollout {verb} works on MachineConfigPools (mcp/NAME), not {}", rt.plural);
    }
    Ok((resource_path(rt.path_ref(), None, Some(name)), name.to_string(), format!("{kind}/{name}")))
}

/// The message of the pool's condition `type_` when it is True.
fn condition_true(pool: &Value, type_: &str) -> Option<String> {
    condition_of(pool, type_)
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .map(|c| c.get("message").and_then(Value::as_str).unwrap_or("").to_string())
}

/// As `kubectl rollout resume` of a deployment that is not paused: an error, nothing written.
pub(super) async fn rollout_resume(client: &Client, target: &[String]) -> Result<()> {
    let (path, name, shown) = pool_target(target, "resume")?;
    let pool = client.get(&path).await?.into_result()?;
    if condition_true(&pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN).is_none() {
        if pool.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
            bail!(
                "{shown}: the circuit breaker is not open; nothing to resume. The pool is paused (spec.paused): \
                 unpause it with `aloftctl patch mcp {name} -p '{{\"spec\":{{\"paused\":false}}}}'`"
            );
        }
        bail!("{shown}: the circuit breaker is not open; nothing to resume");
    }
    // Any new value resumes once; a timestamp is new every time.
    let token = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let patch = serde_json::json!({"metadata": {"annotations": {aloft_api::annotations::RESUME_ROLLOUT: token}}});
    client.patch(&path, "application/merge-patch+json", &patch).await?.into_result()?;
    // Said once the node controller has acted on it, so that `resume && rollout status` reads
    // the pool after the resume (an annotation moves no generation to wait for).
    let deadline = tokio::time::Instant::now() + RESUME_WAIT;
    loop {
        let pool = client.get(&path).await?.into_result()?;
        if resume_honoured(&pool, &token) {
            println!(
                "machineconfigpool/{name} resumed: the circuit breaker is closed, the nodes that failed so far are forgiven"
            );
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            println!(
                "machineconfigpool/{name}: resume requested ({} {token}); the coordinator has not acted on it yet \
                 (`aloftctl rollout status {shown}` waits for it)",
                aloft_api::annotations::RESUME_ROLLOUT
            );
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How long `rollout resume` waits for the node controller to act on the resume.
const RESUME_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Whether the node controller has acted on the resume `token`: recorded it, or the breaker is
/// not open any more (the rollout finished meanwhile, or its limit was lifted).
fn resume_honoured(pool: &Value, token: &str) -> bool {
    pool.pointer("/status/rollout/resumeToken").and_then(Value::as_str) == Some(token)
        || condition_true(pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN).is_none()
}

/// A resume asked for (the pool's annotation) that the node controller has not acted on yet,
/// while the breaker shows open: what the pool says of the breaker is from before it.
fn resume_pending(pool: &Value) -> bool {
    let asked = pool
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(aloft_api::annotations::RESUME_ROLLOUT))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    asked.is_some_and(|t| !resume_honoured(pool, t))
}

/// Why a pool that looks updated may not be yet: the render controller has not caught up with a
/// change. Two things tell from the client: a status older than the spec
/// (`status.observedGeneration` below `metadata.generation`, where reported), and a
/// MachineConfig the pool selects (by the render's own selection) that its target was not
/// rendered from, i.e. a new one. A config changed under its old name cannot be told.
fn render_pending(pool: &Value, mcs: &[Value]) -> Option<String> {
    let generation = pool.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = pool.pointer("/status/observedGeneration").and_then(Value::as_i64);
    if let (Some(g), Some(o)) = (generation, observed) {
        if o < g {
            return Some(format!("waiting for the status of generation {g} (it shows {o})"));
        }
    }
    let parsed: aloft_api::MachineConfigPool = serde_json::from_value(pool.clone()).ok()?;
    let configs: Vec<aloft_api::MachineConfig> =
        mcs.iter().filter_map(|m| serde_json::from_value(m.clone()).ok()).collect();
    let selected = aloft_api::render::select_and_order(&parsed, &configs).ok()?;
    let sources: Vec<&str> = pool
        .pointer("/spec/configuration/source")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .collect();
    let selected: Vec<&str> = selected.iter().map(|m| m.metadata.name.as_str()).collect();
    let new: Vec<&str> = selected.iter().copied().filter(|n| !sources.contains(n)).collect();
    // A MachineConfig deleted (or no longer selected) that the target was rendered from: the
    // usual revert, as pending as a new one.
    let gone: Vec<&str> = sources.iter().copied().filter(|n| !selected.contains(n)).collect();
    let list = |names: &[&str]| match names {
        [one] => format!("MachineConfig {one}"),
        many => format!("MachineConfigs {}", many.join(", ")),
    };
    match (new.is_empty(), gone.is_empty()) {
        (true, true) => None,
        (false, true) => Some(format!("waiting for the render of {}", list(&new))),
        (true, false) => Some(format!("waiting for the render without {}", list(&gone))),
        (false, false) => Some(format!("waiting for the render of {} and without {}", list(&new), list(&gone))),
    }
}

/// One look at a pool during `rollout status`.
#[derive(Debug, PartialEq)]
enum Progress {
    /// Still going: the line to show, and what holds the pool back when its status says (for
    /// the timeout's error).
    Waiting(String, Option<String>),
    /// A failure the pool shows that a change just made may have made stale, within
    /// [`STALE_GRACE`]: waited through as [`Progress::Waiting`] (the same line and reason),
    /// and not taken as where the rollout stands by a `--watch=false` look until the grace or
    /// the timeout ends (then the failure, the third field, is).
    Settling(String, Option<String>, String),
    Done(String),
    Failed(String),
}

/// How long `rollout status` takes a failure that a later change may have made stale as not yet
/// known: a failed render after a MachineConfig change (the render controller renders within
/// seconds of a change, and writes the pool if the outcome changed), or nodes degraded on a
/// config the pool's target no longer is (the node controller moves them and their agents report
/// within seconds). Past this, the failure stands.
const STALE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// When one `rollout status` first saw each kind of possibly stale failure ([`STALE_GRACE`]).
#[derive(Debug, Default)]
struct Grace {
    render: Option<std::time::Instant>,
    nodes: Option<std::time::Instant>,
}

impl Grace {
    /// Whether a stale failure first seen in `slot` is still within its grace.
    fn within(slot: &mut Option<std::time::Instant>) -> bool {
        slot.get_or_insert_with(std::time::Instant::now).elapsed() < STALE_GRACE
    }
}

/// Every pool and Node, typed, for the pool membership the controllers compute (objects that do
/// not read as their type are left out, as the controllers leave them).
async fn pools_and_nodes(client: &Client) -> Result<(Vec<aloft_api::MachineConfigPool>, Vec<aloft_api::Node>)> {
    fn typed<T: serde::de::DeserializeOwned>(list: &Value) -> Vec<T> {
        let items = list.get("items").and_then(Value::as_array).into_iter().flatten();
        items.filter_map(|v| serde_json::from_value(v.clone()).ok()).collect()
    }
    let pools_path = resource_path(resources::MACHINE_CONFIG_POOL.path_ref(), None, None);
    let pools = typed(&list_in_pages(client, &pools_path, None).await?);
    let nodes = typed(&list_in_pages(client, &resource_path(resources::NODE.path_ref(), None, None), None).await?);
    Ok((pools, nodes))
}

/// The pool's degraded nodes, when every one of them failed on a config other than `target`
/// (the config its agent's failure report names): a failure the target no longer asks for, as
/// right after a bad MachineConfig is deleted to revert it. The pool still counts those nodes
/// degraded (MCO's status reads the agent's state) until the node controller moves them and their
/// agents report. None: no such node, or one failing on the target, stuck in its drain, or not
/// saying which config it failed on; that degradation stands.
async fn degraded_elsewhere(client: &Client, pool: &Value, target: &str) -> Result<Option<Vec<String>>> {
    use crate::controllers::pools::{failing_state, membership, NodeFacts};
    let Ok(this) = serde_json::from_value::<aloft_api::MachineConfigPool>(pool.clone()) else { return Ok(None) };
    let (pools, nodes) = pools_and_nodes(client).await?;
    let (members, _) = membership(&pools, &nodes);
    let mut names = Vec::new();
    for &i in members.get(&this.metadata.name).into_iter().flatten() {
        let facts = NodeFacts::of(&nodes[i]);
        if !facts.status_degraded() {
            continue;
        }
        let elsewhere = facts.drain_failure.is_empty()
            && failing_state(&facts.state)
            && !facts.failed_config.is_empty()
            && facts.failed_config != target
            // Drift names the config the node runs: found on its disk, it goes nowhere by itself.
            && facts.failed_config != facts.current;
        if !elsewhere {
            return Ok(None);
        }
        names.push(nodes[i].metadata.name.clone());
    }
    Ok((!names.is_empty()).then_some(names))
}

/// The MachineConfigs `pool` selects that were written after the pool last was (by
/// resourceVersion): changes its status may not have caught up with.
fn written_after_pool(pool: &Value, mcs: &[Value]) -> Vec<String> {
    let rv = |v: &Value| v.pointer("/metadata/resourceVersion").and_then(Value::as_str)?.parse::<u64>().ok();
    let Some(pool_rv) = rv(pool) else { return Vec::new() };
    let Ok(parsed) = serde_json::from_value::<aloft_api::MachineConfigPool>(pool.clone()) else { return Vec::new() };
    let later: Vec<Value> = mcs.iter().filter(|m| rv(m).is_some_and(|r| r > pool_rv)).cloned().collect();
    let configs: Vec<aloft_api::MachineConfig> =
        later.into_iter().filter_map(|m| serde_json::from_value(m).ok()).collect();
    aloft_api::render::select_and_order(&parsed, &configs)
        .map(|s| s.into_iter().map(|m| m.metadata.name).collect())
        .unwrap_or_default()
}

/// The MachineConfigs a render failure's `message` names ("MachineConfig NAME") that are not in
/// `mcs` any more: the failure is about a set of configs there no longer is (the one at fault was
/// deleted to fix it), and the render has not said so yet.
fn named_and_gone(message: &str, mcs: &[Value]) -> Vec<String> {
    let exists = |n: &str| mcs.iter().any(|m| m.pointer("/metadata/name").and_then(Value::as_str) == Some(n));
    let mut gone: Vec<String> = message
        .split("MachineConfig ")
        .skip(1)
        .filter_map(|rest| {
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.').collect();
            let name = name.trim_end_matches('.');
            (!name.is_empty() && !exists(name)).then(|| name.to_string())
        })
        .collect();
    gone.sort();
    gone.dedup();
    gone
}

/// What the pool says failed: Degraded, or its circuit breaker open. Nodes failing make the pool
/// Degraded by them, and the breaker they tripped is said too, with how to go on (its message
/// ends with the resume command).
fn pool_failure(pool: &Value, name: &str) -> Option<String> {
    let breaker = condition_true(pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN);
    if let Some(m) = condition_true(pool, aloft_api::machineconfig::conditions::DEGRADED) {
        // Degraded by the breaker alone points at the breaker's condition: its message instead.
        let by_breaker = condition_of(pool, aloft_api::machineconfig::conditions::DEGRADED)
            .and_then(|c| c.get("reason"))
            .and_then(Value::as_str)
            == Some(aloft_api::machineconfig::conditions::CIRCUIT_BROKEN);
        let m = match &breaker {
            Some(b) if by_breaker && !b.is_empty() => return Some(format!("pool {name} is degraded: {b}")),
            _ => m,
        };
        return Some(match breaker.filter(|b| !b.is_empty() && !m.contains(b.as_str())) {
            Some(b) => format!("pool {name} is degraded: {m}; {b}"),
            None => format!("pool {name} is degraded: {m}"),
        });
    }
    breaker.map(|m| {
        let m = if m.is_empty() { "circuit breaker open".to_string() } else { m };
        format!("pool {name}: {m}")
    })
}

/// Where the pool stands, from its object and (only once it looks updated) the MachineConfigs.
/// `grace`: when this wait first saw failures that may be stale.
async fn pool_progress(
    client: &Client,
    pool: &Value,
    name: &str,
    not_config: Option<&str>,
    grace: &mut Grace,
) -> Result<Progress> {
    let want = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("");
    let have = pool.pointer("/status/configuration/name").and_then(Value::as_str).unwrap_or("");
    // A degradation while the target is still the old one is about the old one: the wait is for
    // a new target.
    let on_old = not_config.is_some_and(|old| old == want);
    if !on_old && resume_pending(pool) {
        let why = "waiting for the coordinator to act on the resume of the circuit breaker".to_string();
        return Ok(Progress::Waiting(format!("pool {name}: {why}"), Some(why)));
    }
    let failed = if on_old { None } else { pool_failure(pool, name) };
    let looks_updated = condition_true(pool, "Updated").is_some() && !want.is_empty() && want == have;
    if failed.is_none() && (!looks_updated || on_old) {
        let held = (!on_old).then(|| held_by(pool)).flatten();
        return Ok(Progress::Waiting(progress_line(pool, name, not_config.filter(|_| on_old)), held));
    }
    let mcs = list_in_pages(client, &resource_path(resources::MACHINE_CONFIG.path_ref(), None, None), None).await?;
    let items = mcs.get("items").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    // A render that failed is about the MachineConfigs there are now: the target will not catch
    // up with them, so the failure stands (it names the config). Unless a MachineConfig the pool
    // selects changed after the pool's last write (the one just applied to fix it): the render
    // has a few seconds to say otherwise.
    if let Some(f) = &failed {
        if let Some(message) = condition_true(pool, aloft_api::machineconfig::conditions::RENDER_DEGRADED) {
            let later = written_after_pool(pool, items);
            let gone = named_and_gone(&message, items);
            if (!later.is_empty() || !gone.is_empty()) && Grace::within(&mut grace.render) {
                let why = match (later.is_empty(), gone.is_empty()) {
                    (false, true) => format!("waiting for the render of MachineConfig {}", later.join(", ")),
                    (true, false) => format!("waiting for the render without MachineConfig {}", gone.join(", ")),
                    _ => format!(
                        "waiting for the render of MachineConfig {} and without {}",
                        later.join(", "),
                        gone.join(", ")
                    ),
                };
                return Ok(Progress::Settling(format!("pool {name}: {why}"), Some(why), f.clone()));
            }
            return Ok(Progress::Failed(f.clone()));
        }
    }
    // Updated or failed, as the pool shows it: unless its target is not rendered from the
    // MachineConfigs there are now (one just applied, or deleted to revert a bad one, whose
    // degradation the pool still shows until the render).
    if let Some(why) = render_pending(pool, items) {
        return Ok(Progress::Waiting(format!("pool {name}: {why}"), Some(why)));
    }
    if let Some(f) = failed {
        // Nodes degraded on the config before (a revert's render is out, and the node that failed
        // on the bad config is not moved back yet, or its agent has not reported): not a failure
        // of this target, for the few seconds it takes them to say so.
        let by_nodes = condition_true(pool, aloft_api::machineconfig::conditions::DEGRADED).is_some()
            && condition_true(pool, aloft_api::machineconfig::conditions::NODE_DEGRADED).is_some();
        if by_nodes {
            if let Some(nodes) = degraded_elsewhere(client, pool, want).await? {
                if Grace::within(&mut grace.nodes) {
                    let why = format!(
                        "waiting for degraded {} {} to take {want}: {} on another config",
                        if nodes.len() == 1 { "node" } else { "nodes" },
                        crate::controllers::pick::names_text(&nodes),
                        if nodes.len() == 1 { "it failed" } else { "they failed" }
                    );
                    return Ok(Progress::Settling(format!("pool {name}: {why}"), Some(why), f));
                }
            }
        }
        return Ok(Progress::Failed(f));
    }
    let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    Ok(Progress::Done(format!(
        "pool {name} is updated: {}/{} nodes on {want}",
        n("/status/updatedMachineCount"),
        n("/status/machineCount")
    )))
}

/// The progress bar and counts; `old` when the target is still the --not-config one.
fn progress_line(pool: &Value, name: &str, old: Option<&str>) -> String {
    let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let want = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("");
    let (total, updated, degraded) =
        (n("/status/machineCount"), n("/status/updatedMachineCount"), n("/status/degradedMachineCount"));
    // Paused, the rollout's phase is not progress.
    let phase = if pool.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
        ", paused"
    } else {
        match pool.pointer("/status/rollout/phase").and_then(Value::as_str) {
            Some("Canary") => ", canary",
            Some("Soaking") => ", soaking",
            _ => "",
        }
    };
    let width = 30usize;
    let filled = match usize::try_from(total) {
        Ok(t) if t > 0 => usize::try_from(updated).unwrap_or(0).min(t) * width / t,
        _ => width,
    };
    let waiting = old.map(|o| format!(" (waiting for a target other than {o})")).unwrap_or_default();
    // Waiting for another target, the pool's state is not what the wait is about.
    let (ready, held) = match old {
        Some(_) => (String::new(), String::new()),
        None => (
            not_all_ready(pool).map(|r| format!(", {r}")).unwrap_or_default(),
            held_by_conditions(pool).map(|h| format!("; {h}")).unwrap_or_default(),
        ),
    };
    format!(
        "pool {name}: [{}{}] {updated}/{total} updated{ready}, {degraded} degraded{phase}, target {}{waiting}{held}",
        "#".repeat(filled),
        "-".repeat(width - filled),
        if want.is_empty() { "<rendering>" } else { want }
    )
}

/// `3 ready, 1 unavailable` when every node is updated but the pool is not Updated for it: MCO's
/// Updated needs updated == ready == total and none unavailable, so a node cordoned by hand or
/// NotReady holds the pool although the bar is full.
fn not_all_ready(pool: &Value) -> Option<String> {
    let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (total, updated) = (n("/status/machineCount"), n("/status/updatedMachineCount"));
    let (ready, unavailable) = (n("/status/readyMachineCount"), n("/status/unavailableMachineCount"));
    let held = total > 0 && updated >= total && (ready < total || unavailable > 0);
    (held && condition_true(pool, "Updated").is_none()).then(|| format!("{ready} ready, {unavailable} unavailable"))
}

/// The pool's True `MaintenanceWindowClosed`, `BudgetBlocked` and `NodeDrainTimeout` conditions,
/// shortened: what holds a rollout beyond slots to free (a window to open, a budget that may
/// block for good, a drain that is stuck).
fn held_by_conditions(pool: &Value) -> Option<String> {
    use aloft_api::machineconfig::conditions as cond;
    let parts: Vec<String> = [
        (cond::MAINTENANCE_WINDOW_CLOSED, "held"),
        (cond::BUDGET_BLOCKED, "blocked"),
        (cond::NODE_DRAIN_TIMEOUT, "drain timed out"),
    ]
    .into_iter()
    .filter_map(|(type_, what)| condition_true(pool, type_).map(|m| format!("{what}: {}", shortened(&m))))
    .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// What [`held_by`] says of the nodes that hold an updated pool, until they are named.
const SEE_NODES: &str = "(cordoned or NotReady nodes: aloftctl get nodes)";

/// The nodes that hold an updated pool (read again at `path`): `(cordoned: a, b; NotReady: c)`.
/// Every member runs the pool's target by then, and a rendered config belongs to one pool, so
/// the members are the nodes on it. None when the pool is not so held, or the nodes cannot be
/// read (the counts then stand alone).
async fn named_holders(client: &Client, path: &str) -> Option<String> {
    let pool = client.get(path).await.ok()?.into_result().ok()?;
    not_all_ready(&pool)?;
    let target = pool.pointer("/spec/configuration/name").and_then(Value::as_str).filter(|t| !t.is_empty())?;
    let nodes = list_in_pages(client, &resource_path(resources::NODE.path_ref(), None, None), None).await.ok()?;
    let items = nodes.get("items").and_then(Value::as_array)?;
    let (mut cordoned, mut not_ready, mut pressure) = (Vec::new(), Vec::new(), Vec::new());
    for n in items {
        let current = n.pointer("/metadata/annotations").and_then(|a| a.get(aloft_api::annotations::CURRENT_CONFIG));
        if current.and_then(Value::as_str) != Some(target) {
            continue;
        }
        let name = n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let ready = n
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        // MCO's isNodeReady: disk or network trouble makes a Ready node unavailable too, which
        // `get nodes` (Ready) does not show: name the condition.
        let troubled: Vec<&str> = n
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| {
                matches!(c["type"].as_str(), Some("DiskPressure" | "NetworkUnavailable")) && c["status"] == "True"
            })
            .filter_map(|c| c["type"].as_str())
            .collect();
        if n.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
            cordoned.push(name);
        } else if !ready {
            not_ready.push(name);
        } else if !troubled.is_empty() {
            pressure.push(format!("{name} ({})", troubled.join(", ")));
        }
    }
    let parts: Vec<String> = [("cordoned", cordoned), ("NotReady", not_ready), ("under pressure", pressure)]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", crate::controllers::pick::names_text(&names)))
        .collect();
    (!parts.is_empty()).then(|| format!("({})", parts.join("; ")))
}

/// What a rollout that its status says nothing about is waiting for, read at its timeout: how
/// many nodes are updated, and the members taking the pool's `maxUnavailable` slots with why
/// (`worker-1 updating, worker-0 cordoned and NotReady`), as the NodeWaiting Event says it but
/// without looking for it. None when the pool or the nodes cannot be read.
async fn slots_taken(client: &Client, path: &str) -> Option<String> {
    use crate::controllers::pools::{max_unavailable, membership, NodeFacts};
    let pool: aloft_api::MachineConfigPool =
        serde_json::from_value(client.get(path).await.ok()?.into_result().ok()?).ok()?;
    let (pools, nodes) = pools_and_nodes(client).await.ok()?;
    let (members, _) = membership(&pools, &nodes);
    let members = members.get(&pool.metadata.name).cloned().unwrap_or_default();
    let target: crate::controllers::config_name::ConfigName =
        pool.spec.configuration.as_ref().map(|c| c.name.as_str()).unwrap_or("").into();
    let mut updated = 0;
    let mut taken = Vec::new();
    for &i in &members {
        let (node, f) = (&nodes[i], NodeFacts::of(&nodes[i]));
        // Counted as the pool's status counts it (updatedMachineCount), readiness aside.
        if !target.is_empty() && f.updated_to(&target) {
            updated += 1;
        }
        // The rollout's reading of a slot taken (cordoned nodes are not Ready for it).
        if !f.disrupted() {
            continue;
        }
        let mut why = Vec::new();
        if f.degraded() {
            why.push("degraded");
        } else if f.state == "Working" || (!f.desired.is_empty() && f.desired != f.current) {
            why.push("updating");
        }
        if f.cordoned {
            why.push("cordoned");
        }
        if !node.is_ready() {
            why.push("NotReady");
        } else if !node.is_ready_for_update() {
            why.push("under pressure");
        }
        taken.push(format!("{} {}", node.metadata.name, why.join(" and ")));
    }
    let max = max_unavailable(pool.spec.max_unavailable.as_ref(), members.len());
    let mut out = format!("{updated} of {} updated", members.len());
    if !taken.is_empty() {
        out.push_str(&format!(
            "; unavailable ({} of maxUnavailable {max}): {}",
            taken.len(),
            crate::controllers::pick::names_text(&taken)
        ));
    }
    Some(out)
}

/// What holds a pool that is not Updated, from its status (None: nothing it says, e.g. nodes
/// still updating): the not-ready counts and the conditions of [`held_by_conditions`].
fn held_by(pool: &Value) -> Option<String> {
    // A paused pool moves no node: the first thing a timeout should say.
    let paused = (pool.pointer("/spec/paused").and_then(Value::as_bool) == Some(true))
        .then(|| "the pool is paused (spec.paused)".to_string());
    let parts: Vec<String> =
        [paused, not_all_ready(pool).map(|r| format!("{r} {SEE_NODES}")), held_by_conditions(pool)]
            .into_iter()
            .flatten()
            .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A condition's message for one line: its first `; `-separated part, at most 160 characters.
fn shortened(message: &str) -> String {
    const MAX: usize = 160;
    let (first, more) = match message.split_once("; ") {
        Some((first, _)) => (first, true),
        None => (message, false),
    };
    let mut out: String = first.chars().take(MAX).collect();
    if more || first.chars().count() > MAX {
        out.push_str(" …");
    }
    out
}

/// How long `rollout status` tries a coordinator that has not answered yet before it says so and
/// fails (once answered, it waits through outages until --timeout).
const FIRST_CONTACT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// `line` cut to fit in `width` columns (as the terminal draws it: a wide character, CJK or an
/// emoji, takes two; the last column kept an ellipsis where it is cut), for a line redrawn in
/// place.
fn fit_to_width(line: &str, width: usize) -> std::borrow::Cow<'_, str> {
    use unicode_width::UnicodeWidthChar;
    let width = width.max(2);
    // Measured as it is cut, a character at a time (a whole string's width can differ where a
    // selector joins an emoji to the character before it).
    let columns = |s: &str| s.chars().map(|c| c.width().unwrap_or(0)).sum::<usize>();
    if columns(line) < width {
        return std::borrow::Cow::Borrowed(line);
    }
    // One column short of the width: a line that fills the last column wraps on some terminals.
    let room = width - 2;
    let mut used = 0;
    let mut kept = String::new();
    for c in line.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        kept.push(c);
    }
    std::borrow::Cow::Owned(format!("{kept}…"))
}

/// How long the names of the nodes holding a pool back are looked for once `rollout status`
/// has timed out: the timeout is the user's, a coordinator that stopped answering must not
/// stretch it.
const AFTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

pub(super) async fn rollout_status(
    client: &Client,
    target: &[String],
    timeout: u64,
    not_config: Option<&str>,
    watch: bool,
) -> Result<()> {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let (path, name, _) = pool_target(target, "status")?;
    // 0 waits for good, as kubectl's `--timeout=0`.
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_secs(timeout));
    // On a terminal one line is redrawn in place; to a pipe, each new line is printed.
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut last = String::new();
    // Ends the line being redrawn, so that what follows starts on a line of its own.
    let end_line = |last: &str| {
        if interactive && !last.is_empty() {
            println!();
        }
    };
    // The last error asking the coordinator, while it lasts (printed once per distinct error).
    let mut unreachable: Option<String> = None;
    // What the pool's status last said holds it back.
    let mut held: Option<String> = None;
    let mut grace = Grace::default();
    // With --watch=false, the failure last seen within its grace.
    let mut stale_failure: Option<String> = None;
    // Whether the coordinator has answered at all: requests that reach none for
    // FIRST_CONTACT_GRACE from the start are a setup mistake (a wrong address, a CA the server's
    // certificate does not match), not a restart to wait out for an hour; the grace covers a
    // coordinator still starting when the command is run.
    let mut answered = false;
    let started = Instant::now();
    loop {
        // A connection error or a 5xx is waited through until the timeout, as kubectl's
        // reflector re-lists through them: a coordinator restart does not end a rollout, so it
        // must not fail the command following it. Anything else (no such pool, no access) fails
        // at once.
        // Every request is bounded by the timeout (and, before a first answer, by the grace): a
        // coordinator that hangs (stopped, its host cut off) holds a request until the client's
        // own keepalive gives up, over a minute.
        let first_contact = (!answered).then(|| started + FIRST_CONTACT_GRACE);
        let limit = match (deadline, first_contact) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Set once the pool's GET answers: a follow-up request that is slow (the
        // MachineConfigs' list) is not a coordinator never reached.
        let reached = std::cell::Cell::new(false);
        let ask = async {
            let got = client.get(&path).await;
            reached.set(got.is_ok());
            match got {
                Ok(r) if r.code >= 500 || r.code == 429 => {
                    let code = r.code;
                    Ok(Err(r.into_result().err().map_or_else(|| format!("HTTP {code}"), |e| format!("{e:#}"))))
                }
                Ok(r) => {
                    let p = pool_progress(client, &r.into_result()?, &name, not_config, &mut grace).await;
                    Ok(p.map_err(|e| format!("{e:#}")))
                }
                Err(e) => anyhow::Ok(Err(format!("{e:#}"))),
            }
        };
        let asked = match limit {
            Some(at) => tokio::time::timeout_at(at.into(), ask).await.ok().transpose()?,
            None => Some(ask.await?),
        };
        answered |= reached.get();
        let no_answer = || format!("no answer from the coordinator at {} in time", client.server());
        // None: cut at the deadline after an answer, when what the last answer said stands.
        let progress = match asked {
            Some(progress) => Some(progress),
            None if answered => None,
            None => Some(Err(no_answer())),
        };
        if let Some(Err(e)) = &progress {
            if !answered && started.elapsed() >= FIRST_CONTACT_GRACE {
                bail!(
                    "cannot reach the coordinator at {} (tried for {} s): {e}",
                    client.server(),
                    FIRST_CONTACT_GRACE.as_secs()
                );
            }
        }
        if !watch {
            // Where it stands, once: a failure fails, anything else is said and is not one. A
            // failure that may be stale is looked at again until its grace is over (seconds),
            // within the timeout: said as waiting, it read as a rollout going on (exit 0) where
            // the pool had failed.
            let settled_by = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
            match progress {
                Some(Ok(Progress::Settling(line, _, failure))) => {
                    if settled_by(deadline) {
                        bail!("{failure}");
                    }
                    tracing::debug!(%line, "a failure that may be stale; looking again");
                    stale_failure = Some(failure);
                }
                Some(Ok(Progress::Done(line) | Progress::Waiting(line, _))) => {
                    println!("{}", print::term_safe(&line));
                    return Ok(());
                }
                Some(Ok(Progress::Failed(why))) => bail!("{why}"),
                other => {
                    // Cut at the timeout (or no answer) while a failure was being looked at
                    // again: it stood until then, and is the answer.
                    if let Some(failure) = stale_failure {
                        bail!("{failure}");
                    }
                    let e = match other {
                        Some(Err(e)) => e,
                        _ => no_answer(),
                    };
                    bail!("could not tell whether pool {name} is updated: {e}")
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            continue;
        }
        if let Some(progress) = progress {
            let progress = match progress {
                Ok(p) => {
                    if unreachable.take().is_some() {
                        eprintln!("reached the coordinator again");
                    }
                    p
                }
                Err(e) => {
                    if unreachable.as_deref() != Some(e.as_str()) {
                        end_line(&last);
                        last.clear();
                        // `--timeout 0` waits for good, as kubectl's; a coordinator never reached
                        // is tried for the first contact's grace only.
                        let until = match (answered, timeout) {
                            (false, t) => {
                                let grace = FIRST_CONTACT_GRACE.as_secs();
                                format!("retrying for up to {} s", if t > 0 { t.min(grace) } else { grace })
                            }
                            (true, 0) => "no timeout".to_string(),
                            (true, t) => format!("--timeout {t} s"),
                        };
                        eprintln!("warning: {e}; still waiting ({until})");
                    }
                    unreachable = Some(e);
                    Progress::Waiting(String::new(), None)
                }
            };
            match progress {
                Progress::Done(line) => {
                    end_line(&last);
                    println!("{}", print::term_safe(&line));
                    return Ok(());
                }
                Progress::Failed(why) => {
                    end_line(&last);
                    bail!("{why}");
                }
                Progress::Waiting(line, why) | Progress::Settling(line, why, _) if line != last && !line.is_empty() => {
                    held = why;
                    let shown = print::term_safe(&line);
                    if interactive {
                        // Within the terminal's width: a line that wraps is redrawn from its last
                        // row only, and every redraw left the rows above behind.
                        let width = terminal_size::terminal_size().map_or(80, |(w, _)| usize::from(w.0));
                        print!("\r{}\x1b[K", fit_to_width(&shown, width));
                    } else {
                        println!("{shown}");
                    }
                    std::io::stdout().flush()?;
                    last = line;
                }
                Progress::Waiting(_, why) | Progress::Settling(_, why, _) => {
                    if unreachable.is_none() {
                        held = why;
                    }
                }
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            end_line(&last);
            match unreachable {
                Some(e) => bail!("timed out after {timeout} s: could not tell whether pool {name} is updated: {e}"),
                None => match held {
                    Some(why) => {
                        // Named once, here: listing the fleet on every redraw would cost a big
                        // fleet's coordinator a list every 300 ms.
                        let names = tokio::time::timeout(AFTER_TIMEOUT, named_holders(client, &path)).await;
                        let why = match names {
                            Ok(Some(names)) => why.replace(SEE_NODES, &names),
                            _ => why,
                        };
                        bail!("timed out after {timeout} s: pool {name} is not updated: {why}")
                    }
                    None => {
                        match tokio::time::timeout(AFTER_TIMEOUT, slots_taken(client, &path)).await.ok().flatten() {
                            Some(what) => bail!("timed out after {timeout} s: pool {name} is not updated: {what}"),
                            None => bail!("timed out after {timeout} s: pool {name} is not updated"),
                        }
                    }
                },
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    fn pool(generation: i64, observed: Option<i64>, sources: &[&str]) -> Value {
        let source: Vec<Value> = sources.iter().map(|n| json!({"kind": "MachineConfig", "name": n})).collect();
        let mut p = json!({"metadata": {"name": "worker", "generation": generation},
            "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
                     "configuration": {"name": "rendered-worker-1", "source": source}},
            "status": {}});
        if let Some(o) = observed {
            p["status"]["observedGeneration"] = o.into();
        }
        p
    }

    fn mc(name: &str, role: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": role}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}}}})
    }

    /// A new config the pool selects (not one it does not select, nor a rendered one), one the
    /// target was rendered from that is gone, and a status behind the spec each mean the render
    /// has not caught up; an absent observedGeneration is
    /// no sign either way.
    #[test]
    fn render_pending_sees_new_configs_and_old_status() {
        let rendered = json!({"metadata": {"name": "rendered-worker-1", "ownerReferences": [{"kind": "MachineConfigPool", "name": "worker"}],
            "annotations": {"machineconfiguration.openshift.io/generated-by-controller-version": "x"}}, "spec": {}});
        let mcs = vec![mc("00-worker", "worker"), mc("50-infra", "infra"), rendered];
        assert_eq!(render_pending(&pool(2, Some(2), &["00-worker"]), &mcs), None);
        assert_eq!(render_pending(&pool(2, None, &["00-worker"]), &mcs), None);
        assert_eq!(
            render_pending(&pool(3, Some(2), &["00-worker"]), &mcs).as_deref(),
            Some("waiting for the status of generation 3 (it shows 2)")
        );
        let more = [mcs.clone(), vec![mc("99-worker-a", "worker"), mc("99-worker-b", "worker")]].concat();
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker", "99-worker-a"]), &more).as_deref(),
            Some("waiting for the render of MachineConfig 99-worker-b")
        );
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker"]), &more).as_deref(),
            Some("waiting for the render of MachineConfigs 99-worker-a, 99-worker-b")
        );
        // Deleted to revert: the target still names it.
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker", "70-bad"]), &mcs).as_deref(),
            Some("waiting for the render without MachineConfig 70-bad")
        );
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker", "70-bad"]), &more).as_deref(),
            Some("waiting for the render of MachineConfigs 99-worker-a, 99-worker-b and without MachineConfig 70-bad")
        );
    }

    /// A resume the node controller has not acted on leaves the breaker's condition from before
    /// it: pending until the pool records the token or the breaker shows closed. A pool Degraded
    /// by failing nodes says its open breaker too.
    #[test]
    fn a_resume_is_pending_until_honoured_and_the_breaker_is_said_beside_failing_nodes() {
        let open = json!({"type": "CircuitBroken", "status": "True",
            "message": "Rollout of r2 stopped by the circuit breaker: resume with `aloftctl rollout resume mcp/worker`"});
        let mut p = json!({"metadata": {"annotations": {"aloft.dev/resumeRollout": "t2"}},
            "status": {"rollout": {"resumeToken": "t1"}, "conditions": [open]}});
        assert!(resume_pending(&p));
        assert!(!resume_honoured(&p, "t2"));
        p["status"]["rollout"]["resumeToken"] = "t2".into();
        assert!(!resume_pending(&p), "recorded");
        p["status"]["rollout"]["resumeToken"] = "t1".into();
        p["status"]["conditions"][0]["status"] = "False".into();
        assert!(!resume_pending(&p), "the breaker closed (the rollout finished meanwhile)");
        assert!(resume_honoured(&p, "t2"));
        p["status"]["conditions"][0]["status"] = "True".into();
        p["metadata"]["annotations"] = json!({});
        assert!(!resume_pending(&p), "no resume asked for");

        assert_eq!(pool_failure(&p, "worker").unwrap(), format!("pool worker: {}", open["message"].as_str().unwrap()));
        p["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Degraded", "status": "True", "message": "Node w1 is reporting: \"boom\""}));
        let f = pool_failure(&p, "worker").unwrap();
        assert!(f.starts_with("pool worker is degraded: Node w1 is reporting: \"boom\"; Rollout of r2 stopped"), "{f}");
        assert!(f.ends_with("aloftctl rollout resume mcp/worker`"), "{f}");
        p["status"]["conditions"][0]["status"] = "False".into();
        assert_eq!(pool_failure(&p, "worker").unwrap(), "pool worker is degraded: Node w1 is reporting: \"boom\"");
        // Degraded by the breaker alone: the breaker's own words, once.
        p["status"]["conditions"][0]["status"] = "True".into();
        p["status"]["conditions"][1] = json!({"type": "Degraded", "status": "True", "reason": "CircuitBroken",
            "message": "Rollout of r2 stopped by the circuit breaker (see the CircuitBroken condition)"});
        assert_eq!(
            pool_failure(&p, "worker").unwrap(),
            format!("pool worker is degraded: {}", open["message"].as_str().unwrap())
        );
    }

    #[test]
    fn a_redrawn_line_fits_the_terminal() {
        assert_eq!(fit_to_width("pool worker: 1/3 updated", 80), "pool worker: 1/3 updated");
        let cut = fit_to_width("pool worker: [####------] 1/3 updated, target rendered-worker-0123456789", 40);
        assert_eq!(cut.chars().count(), 39, "{cut}");
        assert!(cut.starts_with("pool worker: [####------] 1/3 updated,") && cut.ends_with('…'), "{cut}");
        // Exactly the width: cut too (it would fill the last column).
        assert_eq!(fit_to_width("abcd", 4), "ab…");
        assert_eq!(fit_to_width("abc", 4), "abc");
        assert_eq!(fit_to_width("héllo wörld", 0), "…");
        // Wide characters take two columns each: cut by what the terminal draws, not by count.
        use unicode_width::UnicodeWidthStr;
        let wide = "pool 工作节点: 更新中";
        assert_eq!(wide.width(), 21);
        assert_eq!(fit_to_width(wide, 22), wide);
        let cut = fit_to_width(wide, 12);
        assert_eq!((cut.as_ref(), cut.width()), ("pool 工作…", 10), "never half a character");
        let cut = fit_to_width(wide, 13);
        assert_eq!((cut.as_ref(), cut.width()), ("pool 工作节…", 12));
    }

    /// Every node updated but one cordoned (or NotReady): the full bar says what holds the pool;
    /// a budget's condition is shown shortened, and both make the timeout's reason.
    #[test]
    fn progress_line_says_what_holds_the_pool() {
        let mut p = json!({"spec": {"configuration": {"name": "r2"}},
            "status": {"machineCount": 4, "updatedMachineCount": 4, "readyMachineCount": 3,
                "unavailableMachineCount": 1, "degradedMachineCount": 0,
                "conditions": [{"type": "Updated", "status": "False"}]}});
        assert_eq!(
            progress_line(&p, "worker", None),
            "pool worker: [##############################] 4/4 updated, 3 ready, 1 unavailable, 0 degraded, target r2"
        );
        assert_eq!(
            held_by(&p).as_deref(),
            Some("3 ready, 1 unavailable (cordoned or NotReady nodes: aloftctl get nodes)")
        );
        let budget = "w0, w1 wait: NodeDisruptionBudget pct allows 0 of 4 nodes unavailable and 0 already are, which blocks the group for good";
        p["status"] = json!({"machineCount": 4, "updatedMachineCount": 0, "readyMachineCount": 0,
            "conditions": [{"type": "BudgetBlocked", "status": "True", "reason": "NodeDisruptionBudget pct",
                "message": format!("{budget}; w2 waits: NodeDisruptionBudget other allows 0")}]});
        let line = progress_line(&p, "worker", None);
        assert!(line.contains("0/4 updated, 0 degraded, target r2; blocked: "), "{line}");
        assert!(line.ends_with(&format!("{budget} …")), "{line}");
        assert_eq!(held_by(&p), Some(format!("blocked: {budget} …")));
        // While nodes are still updating and nothing holds them, nothing is said.
        p["status"] =
            json!({"machineCount": 4, "updatedMachineCount": 2, "readyMachineCount": 2, "unavailableMachineCount": 1});
        assert_eq!(held_by(&p), None);
        assert!(progress_line(&p, "worker", None).ends_with("2/4 updated, 0 degraded, target r2"));
        // A paused pool: what a timeout says first.
        p["spec"]["paused"] = json!(true);
        assert_eq!(held_by(&p).as_deref(), Some("the pool is paused (spec.paused)"));
        assert_eq!(shortened(&"x".repeat(200)).chars().count(), 162);
    }

    /// Paused is said, and the canary phase is not claimed then.
    #[test]
    fn progress_line_says_paused() {
        let mut p = json!({"spec": {"paused": true, "configuration": {"name": "r2"}},
            "status": {"machineCount": 4, "updatedMachineCount": 1, "degradedMachineCount": 0, "rollout": {"phase": "Canary"}}});
        let line = progress_line(&p, "worker", None);
        assert_eq!(line, "pool worker: [#######-----------------------] 1/4 updated, 0 degraded, paused, target r2");
        p["spec"]["paused"] = false.into();
        assert!(progress_line(&p, "worker", Some("r2"))
            .ends_with(", canary, target r2 (waiting for a target other than r2)"));
    }

    /// A render failure that names a MachineConfig deleted since is about configs there no
    /// longer are.
    #[test]
    fn a_render_failure_naming_a_deleted_config_is_stale() {
        let mcs = vec![mc("30-p", "infra")];
        let msg = "Failed to render configuration for pool infra: MachineConfig 31-pq: spec.config.storage.files[0]: \
                   path /etc/p/q is under the file /etc/p of MachineConfig 30-p.";
        assert_eq!(named_and_gone(msg, &mcs), ["31-pq"]);
        assert!(named_and_gone(msg, &[mc("30-p", "infra"), mc("31-pq", "infra")]).is_empty());
        assert!(named_and_gone("no MachineConfigs found matching spec.machineConfigSelector", &mcs).is_empty());
    }
}

#[cfg(test)]
mod rollout_help_tests {
    use super::*;
    use crate::ctl::Cli;
    use clap::CommandFactory;

    /// `rollout status --help` teaches the pool forms with an example (it showed only
    /// `<TARGET>...`), and every form it names is one the parser takes.
    #[test]
    fn rollout_help_shows_the_pool_forms_the_parser_accepts() {
        for verb in ["status", "resume"] {
            let mut cli = Cli::command();
            let rollout = cli.find_subcommand_mut("rollout").expect("rollout");
            let sub = rollout.find_subcommand_mut(verb).expect(verb);
            let help = sub.render_long_help().to_string();
            assert!(!help.contains("TARGET"), "{help}");
            assert!(help.contains(&format!("Usage: aloftctl rollout {verb} [OPTIONS] mcp/NAME\n")), "{help}");
            assert!(help.contains(&format!("aloftctl rollout {verb} [OPTIONS] mcp NAME\n")), "{help}");
            assert!(help.contains("e.g. mcp/worker or mcp worker"), "{help}");
            assert!(help.contains("machineconfigpool"), "{help}");
        }
        let forms = [
            vec!["mcp/worker"],
            vec!["mcp", "worker"],
            vec!["machineconfigpool/worker"],
            vec!["machineconfigpools", "worker"],
            vec!["MCP/worker"],
            vec!["machineconfigpools.machineconfiguration.openshift.io/worker"],
            vec!["machineconfigpool.machineconfiguration.openshift.io", "worker"],
        ];
        for form in forms {
            let args: Vec<String> = form.iter().map(|s| s.to_string()).collect();
            let (_, name, _) = pool_target(&args, "status").unwrap_or_else(|e| panic!("{form:?}: {e:#}"));
            assert_eq!(name, "worker", "{form:?}");
        }
    }
}
