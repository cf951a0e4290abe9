//! rollout-bench: the fleet simulator. How close does a pool rollout come to the ideal
//! ceil(N / maxUnavailable) × per-node time, and does it ever exceed its budget?
//!
//! A real coordinator (the release binary, HTTPS, SQLite) and N simulated nodes in this process.
//! Each simulated node enrolls with a bootstrap token and then speaks the agent's own protocol
//! code ([`aloft_agent::coordinator::NodeApi`]): watch its Node, take the rendered config and
//! the disruption policy from the watch's `UPDATE_INPUTS` event ahead of the pick (as the daemon
//! does; two reads at once when they did not come),
//! report Working with the drain request and wait for the drain, then a simulated host (sleep
//! for the per-node time: apply + reboot, with an optional failure rate), then report Done with
//! the uncordon request. The host is the one simulated part; the protocol, the controllers and
//! the store are the real ones.
//!
//! Prints the wall time from the new MachineConfig to the last node Done, the ideal time, their
//! ratio (rollout efficiency), the highest number of nodes updating at once (sampled by the nodes
//! themselves: a node counts itself from seeing its pick to writing Done, inside the window in
//! which the coordinator counts it unavailable, so a count above the budget is a real violation),
//! the coordinator's CPU time and peak RSS (and its RSS per connected node), and per generation
//! (the picks in the order the nodes saw them, k at a time) the spread of its picks and how late
//! its last pick came; and how much longer than the per-node time the simulated hosts slept
//! (this process's timer, counted in the wall time); the read/write-family system calls per node
//! update on each side, and the bytes they moved (counts, which the host's speed does not move);
//! the coordinator's CPU by thread (the store writer and the controllers are one thread each),
//! and the store writer's write calls and bytes per store write;
//! and the host's speed, timed before and after the run (figures taken on different hosts, or on
//! one host at different times, differ by it).
//!
//! Usage: cargo run --release -p aloft-tests --bin rollout-bench -- \
//!          --nodes 1000 --max-unavailable 10% --per-node-ms 500 [--failure-rate 0.0]

use aloft_agent::coordinator::{NodeApi, NodeView};
use aloft_api::annotations as ann;
use aloft_coordinator::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL};
use aloft_tests::{path_of, proc_usage, threads, used_by_name, Client, ClientConfig, Coordinator, Options};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The simulated fleet is a test harness sharing the machine's two cores with the coordinator it
/// measures (a real fleet's agents run on hosts of their own): it uses the coordinator's
/// allocator, jemalloc, instead of glibc's, whose malloc and free were ~30% of the simulator's
/// CPU at 10,000 nodes. The agent's protocol code it runs is unchanged.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A run in which no node finishes an update for this long fails (the ones that pass finish in
/// seconds).
const STALLED: Duration = Duration::from_secs(120);

/// The agent's run loop retries a failed step after this, doubling up to [`AGENT_BACKOFF_MAX`]
/// (MCO's daemon: 5 s to 60 s); a simulated node does the same when a request fails.
const AGENT_BACKOFF: Duration = Duration::from_secs(5);
const AGENT_BACKOFF_MAX: Duration = Duration::from_secs(60);

struct Args {
    nodes: usize,
    max_unavailable: String,
    per_node: Duration,
    failure_rate: f64,
    /// Rollouts one after another on the same fleet (each a new MachineConfig), for the
    /// spread of the ratio within one sitting.
    runs: usize,
    /// Extra arguments for the coordinator's `serve` (e.g. `--event-ttl 30s`).
    coordinator_args: Vec<String>,
    /// Kill the coordinator (SIGKILL) once this many nodes of a rollout are Done, and start it
    /// again on the same data directory and port.
    restart_after: Option<usize>,
    /// How long the killed coordinator stays down before it is started again (an upgrade's
    /// stop, replace and start), on top of its own start.
    restart_down: Duration,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        nodes: 1000,
        max_unavailable: "10%".into(),
        per_node: Duration::from_millis(500),
        failure_rate: 0.0,
        runs: 1,
        coordinator_args: Vec::new(),
        restart_after: None,
        restart_down: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => a.nodes = value()?.parse().context("--nodes wants a whole number of nodes")?,
            "--max-unavailable" => a.max_unavailable = value()?,
            "--per-node-ms" => {
                a.per_node = Duration::from_millis(
                    value()?.parse().context("--per-node-ms wants a whole number of milliseconds")?,
                )
            }
            "--failure-rate" => {
                a.failure_rate = value()?.parse().context("--failure-rate wants a number from 0 to 1")?
            }
            "--runs" => a.runs = value()?.parse().context("--runs wants a whole number")?,
            "--coordinator-arg" => a.coordinator_args.push(value()?),
            "--restart-after" => {
                a.restart_after = Some(value()?.parse().context("--restart-after wants a whole number of nodes Done")?)
            }
            "--restart-down-ms" => {
                a.restart_down = Duration::from_millis(
                    value()?.parse().context("--restart-down-ms wants a whole number of milliseconds")?,
                )
            }
            "-h" | "--help" => {
                println!(
                    "rollout-bench [--nodes N] [--max-unavailable INT|PCT%] [--per-node-ms MS] [--failure-rate 0..1]\n\
                     [--runs R] [--coordinator-arg ARG]... [--restart-after N [--restart-down-ms MS]]\n\
                     \n\
                     Defaults: 1000 nodes, 10% of the pool, 500 ms per node, no failures, one run.\n\
                     ROLLOUT_BENCH_TRACE=1 adds every node's step times. ALOFT_TEST_STORE=etcd keeps the\n\
                     coordinator's store on an etcd of its own (one member, started on loopback), whose CPU\n\
                     is reported too.\n\
                     \n\
                     --restart-after N: kill the coordinator (SIGKILL) once N nodes of the rollout are Done, and\n\
                     start it again on the same data directory and port, as a crash or an upgrade would. The\n\
                     simulated nodes ride it out as the agent does (their watches reconnect; a failed report is\n\
                     retried once the watch reaches the coordinator again, or after 5 s, doubling to 60 s). The\n\
                     budget is checked throughout; the report adds when the coordinator was back, when the\n\
                     fleet's watches were, and the retried requests.\n\
                     --restart-down-ms MS: keep the killed coordinator down this long before starting it again\n\
                     (an upgrade's stop, replace and start; default 0).\n\
                     \n\
                     --coordinator-arg ARG: one more argument for the coordinator's `serve` (repeat for more),\n\
                     e.g. `--coordinator-arg --event-ttl --coordinator-arg 30s`.\n\
                     --runs R: R rollouts one after another on the same enrolled fleet (each a new MachineConfig,\n\
                     after the coordinator went idle), each reported in full, then their ratios in order with\n\
                     their median, lowest and highest. The ratio moves with the host's speed from run to run;\n\
                     one figure says little."
                );
                std::process::exit(0);
            }
            other => bail!("unknown flag {other} (see --help)"),
        }
    }
    if a.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if a.per_node.is_zero() {
        bail!("--per-node-ms must be at least 1 (the ideal time is a multiple of it)");
    }
    if !(0.0..=1.0).contains(&a.failure_rate) {
        bail!("--failure-rate must be from 0 to 1 (the share of nodes whose update fails), not {}", a.failure_rate);
    }
    budget(&a.max_unavailable, a.nodes)?;
    if !a.restart_down.is_zero() && a.restart_after.is_none() {
        bail!("--restart-down-ms needs --restart-after (when to kill the coordinator)");
    }
    if a.restart_after.is_some_and(|n| n >= a.nodes) {
        bail!("--restart-after must be below --nodes ({}): the restart happens during the rollout", a.nodes);
    }
    if a.runs > 1 && a.failure_rate > 0.0 {
        bail!("--runs above 1 needs --failure-rate 0: a failed node stays Degraded, so the next rollout would not be one of the whole fleet");
    }
    Ok(a)
}

/// maxUnavailable as MCO resolves it: an int, or a percent of the pool rounded down, at least 1.
fn budget(max_unavailable: &str, nodes: usize) -> Result<usize> {
    let wants = "--max-unavailable wants a whole number of nodes or a percentage from 0% to 100%";
    let k = match max_unavailable.strip_suffix('%') {
        Some(p) => match p.parse::<usize>().context(wants)? {
            p if p > 100 => bail!("{wants}, not {max_unavailable}"),
            p => p * nodes / 100,
        },
        None => max_unavailable.parse::<usize>().context(wants)?,
    };
    Ok(k.max(1))
}

fn max_unavailable_json(s: &str) -> Value {
    s.parse::<u64>().map(Value::from).unwrap_or_else(|_| Value::from(s))
}

/// What the simulated nodes share: how many are updating now, the most ever, how many are done.
struct Fleet {
    /// ROLLOUT_BENCH_TRACE=1: print each node's step durations when it is Done.
    trace: bool,
    t0: Instant,
    /// The nodes between Working and Done, and the step each is in (for a stall report).
    steps: std::sync::Mutex<std::collections::BTreeMap<String, &'static str>>,
    updating: AtomicUsize,
    max_updating: AtomicUsize,
    /// When each node saw its pick (a generation's spread of these is where the overhead shows).
    seen_at: std::sync::Mutex<Vec<Instant>>,
    /// How much longer than the per-node time each simulated host slept: tokio's timer wakes on
    /// a millisecond tick, later when this process's threads are busy. Counted in the wall time
    /// though no coordinator would make it shorter, so the report says how much it was.
    overslept: std::sync::Mutex<Vec<Duration>>,
    done: AtomicUsize,
    failures: AtomicUsize,
    /// Requests that failed and were retried as the agent retries (with `--restart-after`).
    retries: AtomicUsize,
    /// ROLLOUT_BENCH_FIXED_BACKOFF=1: retry a failed request after the agent's whole backoff, as
    /// the agent did before it learned to retry once the coordinator answers again (for the
    /// comparison in BENCHMARKS.md).
    fixed_backoff: bool,
}

/// One simulated node: the agent's protocol with a host that sleeps.
fn step(fleet: &Fleet, name: &str, what: Option<&'static str>) {
    let mut m = fleet.steps.lock().unwrap_or_else(|e| e.into_inner());
    match what {
        Some(w) => m.insert(name.to_string(), w),
        None => m.remove(name),
    };
}

/// How far a simulated node got with the update it was asked for: what it does again after a
/// request failed (the coordinator away), as the agent's journal tells the agent.
#[derive(Debug, Clone, PartialEq)]
enum Turn {
    /// Nothing under way.
    Idle,
    /// Picked for `target` and counted as updating; the inputs, the Working report and the
    /// apply are still ahead.
    Picked { target: String, seen: Instant },
    /// `target` applied; its Done report is still to be written.
    Applied { target: String, seen: Instant },
}

/// The agent's retry after a failed step (its run loop's backoff: 5 s, doubling to 60 s, cut
/// short when the node's watch reaches the coordinator again after `links`), then a fresh read
/// of the Node (retried the same way while it fails too). A failed request is expected only
/// while the coordinator is away: the bench counts them rather than printing each.
async fn recover(api: &NodeApi, fleet: &Fleet, backoff: &mut Duration, links: u64) -> NodeView {
    fleet.retries.fetch_add(1, Ordering::Relaxed);
    let mut links = links;
    loop {
        if fleet.fixed_backoff {
            tokio::time::sleep(*backoff).await;
        } else {
            api.wait_reached(links, *backoff).await;
        }
        *backoff = (*backoff * 2).min(AGENT_BACKOFF_MAX);
        links = api.links();
        match api.get().await {
            Ok(v) => return v,
            Err(_) => fleet.retries.fetch_add(1, Ordering::Relaxed),
        };
    }
}

async fn node(
    name: String,
    api: NodeApi,
    fleet: Arc<Fleet>,
    per_node: Duration,
    failure_rate: f64,
    seed: u64,
) -> Result<()> {
    let mut backoff = AGENT_BACKOFF;
    let links = api.links();
    let mut view = match api.get().await {
        Ok(v) => v,
        Err(_) => recover(&api, &fleet, &mut backoff, links).await,
    };
    let mut rng = seed;
    let mut turn = Turn::Idle;
    let mut marks: Vec<(&'static str, Instant)> = Vec::new();
    loop {
        // As the agent's run loop: counted before the step, to tell whether a failure of it
        // was the coordinator being away.
        let links = api.links();
        let desired = view.annotation(ann::DESIRED_CONFIG).to_string();
        let current = view.annotation(ann::CURRENT_CONFIG).to_string();
        if let Turn::Applied { target, seen } = &turn {
            if *target == current && view.annotation(ann::STATE) == "Done" {
                // The Done report went through though its answer was lost (the coordinator
                // killed after the commit): the Node read afresh says so.
                let seen = *seen;
                finish_turn(&fleet, &name, seen, &mut marks);
                (turn, backoff) = (Turn::Idle, AGENT_BACKOFF);
            }
        }
        if desired.is_empty() || desired == current {
            if let Turn::Picked { .. } = turn {
                // The pick was taken back before the apply (not something the bench does: the
                // count stays right if it ever happens).
                fleet.updating.fetch_sub(1, Ordering::SeqCst);
                step(&fleet, &name, None);
                turn = Turn::Idle;
            }
            view = match api.wait_change(&view.revision, Duration::from_secs(300)).await? {
                Some(v) => v,
                None => match api.get().await {
                    Ok(v) => v,
                    Err(_) => recover(&api, &fleet, &mut backoff, links).await,
                },
            };
            continue;
        }
        if turn == Turn::Idle {
            let seen = Instant::now();
            fleet.seen_at.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
            marks.clear();
            // A failed node still holds its slot (it is unavailable until someone acts, as MCO
            // counts a degraded one): the budget check counts it with the updating ones.
            let now = fleet.updating.fetch_add(1, Ordering::SeqCst) + 1 + fleet.failures.load(Ordering::SeqCst);
            fleet.max_updating.fetch_max(now, Ordering::SeqCst);
            turn = Turn::Picked { target: desired.clone(), seen };
        }
        if let Turn::Picked { target, seen } = turn.clone() {
            // As the agent does: the config and the policy came with the pick on the watch
            // (`UPDATE_INPUTS`); read over the network only when they did not.
            step(&fleet, &name, Some("config and disruption policy"));
            let (config, policy) = api.update_inputs(&target).await;
            if config.and(policy).is_err() {
                view = recover(&api, &fleet, &mut backoff, links).await;
                continue;
            }
            marks.push(("inputs", Instant::now()));
            // As the agent does: the Working report is the drain request, and when the pick
            // answered that request already, it goes out without the update waiting for it.
            let request = format!("drain-{target}");
            step(&fleet, &name, Some("report Working, drain handshake"));
            if view.annotation(ann::LAST_APPLIED_DRAIN) == request {
                api.report_working(&current, Some(&request)).await;
            } else if api.working_and_drain(&current, &request, Some(&target), Duration::from_secs(3600)).await.is_err()
            {
                view = recover(&api, &fleet, &mut backoff, links).await;
                continue;
            }
            marks.push(("working+drain", Instant::now()));
            step(&fleet, &name, Some("simulated apply"));
            let applying = Instant::now();
            tokio::time::sleep(per_node).await;
            let applied = Instant::now();
            fleet
                .overslept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((applied - applying).saturating_sub(per_node));
            marks.push(("apply", applied));
            // xorshift: a repeatable failure pattern per node.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let failed = (rng % 10_000) as f64 / 10_000.0 < failure_rate;
            if failed {
                fleet.failures.fetch_add(1, Ordering::SeqCst);
                step(&fleet, &name, None);
                fleet.updating.fetch_sub(1, Ordering::SeqCst);
                // Each attempt counts the watch's connections before it, as the run loop does:
                // with the count from before the first, a second failure would not wait at all.
                loop {
                    let links = api.links();
                    if api.report_failure("Degraded", "simulated apply failure", &current, &target).await.is_ok() {
                        break;
                    }
                    recover(&api, &fleet, &mut backoff, links).await;
                }
                // The failed host stays Degraded until the run ends: a task that ended here was
                // taken for a simulated node that stopped early, and every run with a failure
                // rate ended in that error.
                std::future::pending::<()>().await;
            }
            fleet.updating.fetch_sub(1, Ordering::SeqCst);
            turn = Turn::Applied { target, seen };
        }
        let Turn::Applied { target, seen } = turn.clone() else { continue };
        // As the agent does: Done carries the uncordon request; the coordinator uncordons.
        step(&fleet, &name, Some("report Done, ask for the uncordon"));
        view = match api.report_done(&target, true).await {
            Ok(v) => v,
            Err(_) => {
                view = recover(&api, &fleet, &mut backoff, links).await;
                continue;
            }
        };
        finish_turn(&fleet, &name, seen, &mut marks);
        (turn, backoff) = (Turn::Idle, AGENT_BACKOFF);
    }
}

/// A node's Done report is written: counted, and traced with its steps' durations.
fn finish_turn(fleet: &Fleet, name: &str, seen: Instant, marks: &mut Vec<(&'static str, Instant)>) {
    marks.push(("done", Instant::now()));
    if fleet.trace {
        let mut last = seen;
        let steps: Vec<String> = marks
            .iter()
            .map(|(what, t)| {
                let d = t.duration_since(last);
                last = *t;
                format!("{what} {:.1}", d.as_secs_f64() * 1000.0)
            })
            .collect();
        eprintln!(
            "trace {name}: seen at {:.1} ms; {} (ms)",
            seen.duration_since(fleet.t0).as_secs_f64() * 1000.0,
            steps.join(", ")
        );
    }
    step(fleet, name, None);
    fleet.done.fetch_add(1, Ordering::SeqCst);
}

/// How fast this host runs the kind of work a rollout is made of: the best of five timings of
/// 10,000 parses and serializations of a Node as the store keeps it (one core), taken before the
/// coordinator starts and again once the rollout is over. The same build's ratio moves with the
/// host's speed (hosts of the same type differed by a fifth in CPU per node update across
/// sessions, and one host by half between two runs), so figures are read together with this;
/// two timings far apart say the host's speed changed during the run. The figure also depends
/// on the build's JSON maps: sorted maps (since the twenty-third session) time about a quarter
/// lower on the same host than the insertion-ordered ones before, so compare it within a build.
fn host_speed() -> Duration {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sim-00000",
        "labels": {"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "zone-0"},
        "uid": "c6c7c61e-9570-4a18-8a92-dd7ef2bcc643", "creationTimestamp": "2026-11-27T05:55:49Z",
        "generation": 2, "resourceVersion": "1070", "annotations": {
            ann::DESIRED_CONFIG: "rendered-worker-b8058c51c2716b399dbdae9a7f536c4c",
            ann::STATE: "Done", ann::REASON: "",
            ann::CURRENT_CONFIG: "rendered-worker-b8058c51c2716b399dbdae9a7f536c4c",
            ann::DESIRED_DRAIN: "uncordon-rendered-worker-b8058c51c2716b399dbdae9a7f536c4c",
            ann::LAST_APPLIED_DRAIN: "uncordon-rendered-worker-b8058c51c2716b399dbdae9a7f536c4c"}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "AloftAgentReady",
            "message": "simulated host", "lastHeartbeatTime": "2026-11-27T05:55:49Z",
            "lastTransitionTime": "2026-11-27T05:55:49Z"}]}, "spec": {}});
    let text = node.to_string();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            let mut bytes = 0;
            for _ in 0..10_000 {
                let v: Value = serde_json::from_str(std::hint::black_box(&text)).unwrap_or_default();
                bytes += std::hint::black_box(v.to_string()).len();
            }
            std::hint::black_box(bytes);
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// A coordinator killed and started again during a rollout (`--restart-after`): when, and what
/// the killed process had used.
struct Restart {
    done_at_kill: usize,
    killed_at: Duration,
    back_at: Duration,
    cpu_before: f64,
    peak_rss_before_kb: u64,
    first_done_after: Option<Duration>,
    /// When every node's watch was open again (`apiserver_longrunning_requests`).
    watches_back: Option<Duration>,
    last_watch_poll: Instant,
}

/// The watches of Nodes open now (`apiserver_longrunning_requests` in `/metrics`).
fn node_watches(metrics: &str) -> usize {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("apiserver_longrunning_requests{"))
        .filter(|l| l.contains("verb=\"WATCH\"") && l.contains("resource=\"nodes\""))
        .map(|l| value(l) as usize)
        .sum()
}

/// The coordinator's `/metrics` text.
async fn scrape(admin: &Client) -> Result<String> {
    let (code, body) = admin.get_raw("/metrics").await?;
    if code != 200 {
        bail!("/metrics answered {code}: {}", String::from_utf8_lossy(&body));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The value of label `name` in a sample's label text (`a="x",b="y"}`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    labels[start..].split('"').next()
}

/// A sample line's value.
fn value(line: &str) -> f64 {
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

/// The coordinator's count of answered requests on Nodes, by verb and code (`apiserver_request_total`
/// in its `/metrics`): what the fleet asked of it. The bench's own requests during the rollout
/// read the pool, except the stall report's reads of stuck nodes.
fn node_requests(metrics: &str) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for line in metrics.lines() {
        let Some(labels) = line.strip_prefix("apiserver_request_total{") else { continue };
        if !labels.contains("resource=\"nodes\"") {
            continue;
        }
        let key = format!("{} {}", label(labels, "verb").unwrap_or("?"), label(labels, "code").unwrap_or("?"));
        *out.entry(key).or_insert(0) += value(line) as u64;
    }
    out
}

/// The value of one series (its name and labels, e.g. `x_count{operation="txn"}`), 0 without it.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics.lines().find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' '))).map_or(0.0, value)
}

/// The requests etcd answered, by gRPC method (`grpc_server_handled_total` in its `/metrics`):
/// what the coordinator asked of its store.
async fn etcd_requests(endpoint: &str) -> Result<std::collections::BTreeMap<String, u64>> {
    let text = reqwest::get(format!("{endpoint}/metrics")).await?.error_for_status()?.text().await?;
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix("grpc_server_handled_total{") else { continue };
        if let Some(method) = label(labels, "grpc_method") {
            *out.entry(method.to_string()).or_insert(0) += value(line) as u64;
        }
    }
    Ok(out)
}

/// The node controller's passes so far, from `aloft_controller_pass*` in `/metrics`.
#[derive(Default)]
struct Passes {
    count: f64,
    events: f64,
    seconds: f64,
    /// The duration histogram's cumulative buckets: (upper bound in seconds, passes).
    buckets: Vec<(f64, f64)>,
}

impl Passes {
    fn of(metrics: &str) -> Passes {
        let mut p = Passes::default();
        for line in metrics.lines() {
            let Some((name, labels)) = line.split_once('{') else { continue };
            if label(labels, "controller") != Some("node") {
                continue;
            }
            match name {
                "aloft_controller_passes_total" => p.count += value(line),
                "aloft_controller_pass_events_total" => p.events = value(line),
                "aloft_controller_pass_duration_seconds_sum" => p.seconds = value(line),
                "aloft_controller_pass_duration_seconds_bucket" => {
                    let le = label(labels, "le").and_then(|v| v.parse().ok()).unwrap_or(f64::INFINITY);
                    p.buckets.push((le, value(line)));
                }
                _ => {}
            }
        }
        p
    }

    /// What happened between `before` and this reading.
    fn since(&self, before: &Passes) -> Passes {
        let earlier = |le: f64| before.buckets.iter().find(|(b, _)| *b == le).map_or(0.0, |(_, n)| *n);
        Passes {
            count: self.count - before.count,
            events: self.events - before.events,
            seconds: self.seconds - before.seconds,
            buckets: self.buckets.iter().map(|&(le, n)| (le, n - earlier(le))).collect(),
        }
    }

    /// The least bucket bound that `q` of the passes took at most.
    fn quantile(&self, q: f64) -> f64 {
        let want = q * self.count;
        self.buckets.iter().find(|(_, n)| *n >= want).map_or(f64::INFINITY, |(le, _)| *le)
    }
}

/// A bucket bound in milliseconds, as printed.
fn bound_ms(le: f64) -> String {
    if le.is_finite() {
        format!("{}", le * 1000.0)
    } else {
        "more than the last bucket's".into()
    }
}

/// Wait at least 2 s, then until the coordinator (`pid`) used under 10% of a core over two
/// quarter-seconds in a row (at most 2 minutes); returns how long it took.
async fn settle(pid: u32) -> Duration {
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tick = Duration::from_millis(250);
    let mut last = proc_usage(pid).cpu_s;
    let mut quiet = 0;
    while quiet < 2 && t.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(tick).await;
        let now = proc_usage(pid).cpu_s;
        quiet = if now - last < 0.1 * tick.as_secs_f64() { quiet + 1 } else { 0 };
        last = now;
    }
    t.elapsed()
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let k = budget(&args.max_unavailable, args.nodes)?;
    let speed = host_speed();
    let mut coordinator_args = args.coordinator_args.clone();
    if aloft_tests::stores_on_etcd()
        && args.restart_after.is_none()
        && !coordinator_args.iter().any(|a| a == "--active-lease-duration")
    {
        // serve's default, not the tests' 3 s (there for quick takeovers): an etcd taking
        // 10,000 agents' writes on the same two cores answers a lease renewal seconds late.
        coordinator_args.extend(["--active-lease-duration".to_string(), "15s".to_string()]);
    }
    // A restart keeps the port: the agents know the coordinator by its address.
    let mut c = Coordinator::start_with(Options {
        args: coordinator_args,
        fixed_port: args.restart_after.is_some(),
        ..Options::default()
    });
    let admin = c.client();
    let pool = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "worker"},
        "spec": {"machineConfigSelector": {"matchLabels": {ann::ROLE_LABEL: "worker"}},
                 "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
                 "maxUnavailable": max_unavailable_json(&args.max_unavailable)}});
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await?.into_result()?;
    // The fleet runs a rendered config already (as installed nodes do); the rollout measured is
    // the next one.
    let base = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "50-worker-base", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/bench-base.conf", "mode": 420, "contents": {"source": "data:,base"}}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &base).await?.into_result()?;
    let pool_path = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    let installed = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let p = admin.get(&pool_path).await?.into_result()?;
            if let Some(name) = p.pointer("/spec/configuration/name").and_then(Value::as_str) {
                break name.to_string();
            }
            if Instant::now() > deadline {
                bail!("the pool did not render its first config within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };

    // The coordinator's memory before any agent connects, to tell what each connection costs.
    let rss_empty_kb = proc_usage(c.pid()).rss_kb;
    // Enroll the fleet (a few at a time: enrollment is a durable write each).
    let bootstrap = c.create_token("bench", "bootstrap");
    let boot = c.client_with_token(Some(&bootstrap));
    let t = Instant::now();
    let mut apis = Vec::with_capacity(args.nodes);
    for chunk in (0..args.nodes).collect::<Vec<_>>().chunks(64) {
        let enrolled = futures::future::try_join_all(chunk.iter().map(|i| {
            let boot = boot.clone();
            async move {
                let name = format!("sim-{i:05}");
                let body = json!({"nodeName": name, "labels": {"node-role.kubernetes.io/worker": "",
                    "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}});
                let r = boot.post("/aloft/v1/enroll", &body).await?.into_result()?;
                let token = r["token"].as_str().context("enrollment without a token")?.to_string();
                anyhow::Ok((name, token))
            }
        }))
        .await?;
        // Each node connects, says it is Ready and Done, a chunk at a time: agents of a fleet
        // start over minutes, not in one instant (10,000 TLS handshakes at once overrun the
        // listen queue of any server).
        let (url, ca) = (c.url().to_string(), c.ca_pem());
        let installed = &installed;
        let started = futures::future::try_join_all(enrolled.into_iter().map(|(name, token)| {
            let config = ClientConfig { server: url.clone(), ca_pem: Some(ca.clone()), token: Some(token) };
            let admin = admin.clone();
            async move {
                // Installed from the pool's rendered config, as a machine MCO's
                // machine-config-server provisioned: the coordinator names it desired (a node
                // may not write that itself), before the node is Ready and could be picked...
                let desired = json!({"metadata": {"annotations": {ann::DESIRED_CONFIG: installed}}});
                admin
                    .patch(&format!("/api/v1/nodes/{name}"), "application/merge-patch+json", &desired)
                    .await?
                    .into_result()?;
                let client = Client::new(&config)?;
                let api = NodeApi::new(client, &name);
                api.set_ready(true, "simulated host").await?;
                // ...and the agent's first report says it runs it.
                api.annotate(&[
                    (ann::STATE, Some("Done")),
                    (ann::REASON, Some("")),
                    (ann::CURRENT_CONFIG, Some(installed)),
                ])
                .await?;
                anyhow::Ok((name, api))
            }
        }))
        .await?;
        apis.extend(started);
    }
    eprintln!("rollout-bench: enrolled {} nodes in {:.1} s", args.nodes, t.elapsed().as_secs_f64());

    let fleet = Arc::new(Fleet {
        trace: std::env::var_os("ROLLOUT_BENCH_TRACE").is_some(),
        t0: Instant::now(),
        steps: Default::default(),
        updating: AtomicUsize::new(0),
        max_updating: AtomicUsize::new(0),
        seen_at: Default::default(),
        overslept: Default::default(),
        done: AtomicUsize::new(0),
        failures: AtomicUsize::new(0),
        retries: AtomicUsize::new(0),
        fixed_backoff: std::env::var_os("ROLLOUT_BENCH_FIXED_BACKOFF").is_some(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (name, api)) in apis.into_iter().enumerate() {
        let fleet = fleet.clone();
        let seed = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        tasks.spawn(node(name, api, fleet, args.per_node, args.failure_rate, seed));
    }
    // Let every simulated node report in and open its watch before the rollout starts, as the
    // agents of a real fleet did long before: at least 2 s, then until the coordinator is idle
    // (10,000 nodes' reads and watches took longer than a fixed 2 s, and spilled into the
    // measured rollout).
    let settled = settle(c.pid()).await;
    eprintln!("rollout-bench: fleet settled after {:.1} s", settled.as_secs_f64());
    let rss_fleet_kb = proc_usage(c.pid()).rss_kb;

    let mut bench =
        Bench { args: &args, k, c: &mut c, admin: admin.clone(), fleet, pool_path, rss_empty_kb, rss_fleet_kb };
    let mut ratios = Vec::with_capacity(args.runs);
    let mut speed = speed;
    for round in 1..=args.runs {
        if round > 1 {
            // The last rollout's tail (statuses, Events) is not the next one's.
            let settled = settle(bench.c.pid()).await;
            eprintln!("rollout-bench: coordinator idle again after {:.1} s", settled.as_secs_f64());
            speed = tokio::task::block_in_place(host_speed);
        }
        ratios.push(rollout(&mut bench, &mut tasks, round, speed).await?);
    }
    tasks.abort_all();
    if ratios.len() > 1 {
        let mut sorted = ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        let list: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        println!(
            "rollout-bench: {n} rollouts of {} nodes on one fleet: ratios {} (in order); median {median:.3}, \
             lowest {:.3}, highest {:.3}",
            args.nodes,
            list.join(", "),
            sorted[0],
            sorted[n - 1]
        );
    }
    Ok(())
}

/// What every rollout of one run shares: the coordinator, the enrolled fleet and its figures.
struct Bench<'a> {
    args: &'a Args,
    k: usize,
    c: &'a mut Coordinator,
    admin: Client,
    fleet: Arc<Fleet>,
    pool_path: String,
    rss_empty_kb: u64,
    rss_fleet_kb: u64,
}

/// One rollout of the whole fleet to a new MachineConfig (the `round`-th), reported in full;
/// returns its ratio. `speed` is the host's speed timed just before it.
async fn rollout(
    bench: &mut Bench<'_>,
    tasks: &mut tokio::task::JoinSet<Result<()>>,
    round: usize,
    speed: Duration,
) -> Result<f64> {
    let Bench { args, k, c, admin, fleet, pool_path, rss_empty_kb, rss_fleet_kb } = bench;
    let (args, k, admin, pool_path) = (*args, *k, admin.clone(), pool_path.as_str());
    let (rss_empty_kb, rss_fleet_kb) = (*rss_empty_kb, *rss_fleet_kb);
    fleet.done.store(0, Ordering::SeqCst);
    fleet.failures.store(0, Ordering::SeqCst);
    fleet.retries.store(0, Ordering::SeqCst);
    fleet.max_updating.store(0, Ordering::SeqCst);
    fleet.seen_at.lock().unwrap_or_else(|e| e.into_inner()).clear();
    fleet.overslept.lock().unwrap_or_else(|e| e.into_inner()).clear();
    // The store's revision, from a list of the one pool: a paged list of the Nodes (`limit=1`)
    // made the coordinator keep the other N-1 for their next page, for five minutes, and that
    // memory showed in its RSS figures (a rollout's two reads kept ~2 MiB per 1,000 nodes).
    let revision = |admin: Client| async move {
        let l = admin.get(&path_of(&MACHINE_CONFIG_POOL, None)).await?.into_result()?;
        let r = l.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("0").parse::<u64>();
        anyhow::Ok(r.unwrap_or(0))
    };
    let rev0 = revision(admin.clone()).await?;
    let metrics0 = scrape(&admin).await?;
    let (mut requests0, mut passes0) = (node_requests(&metrics0), Passes::of(&metrics0));
    let (mut coordinator0, sim0) = (proc_usage(c.pid()), proc_usage(std::process::id()));
    let mut threads0 = threads(c.pid());
    let mut restart: Option<Restart> = None;
    let (cpu0, sim_cpu0) = (coordinator0.cpu_s, sim0.cpu_s);
    let etcd_cpu0 = c.etcd_pid().map(|p| proc_usage(p).cpu_s);
    let etcd_requests0 = match c.etcd_endpoint() {
        Some(e) => Some(etcd_requests(e).await?),
        None => None,
    };
    let start = Instant::now();
    if fleet.trace {
        eprintln!("trace start at {:.1} ms", start.duration_since(fleet.t0).as_secs_f64() * 1000.0);
    }
    // Each rollout adds a MachineConfig (the first is the one a single run always used), so
    // each renders a config the fleet does not run yet.
    let (mc_name, file) = match round {
        1 => ("50-worker-bench".to_string(), "/etc/bench.conf".to_string()),
        r => (format!("50-worker-bench-{r}"), format!("/etc/bench-{r}.conf")),
    };
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": mc_name, "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": file, "mode": 420, "contents": {"source": "data:,rollout"}}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await?.into_result()?;
    let expected = args.nodes;
    let mut last_print = Instant::now();
    let (mut last_done, mut last_progress, mut reported) = (0, Instant::now(), false);
    loop {
        let done = fleet.done.load(Ordering::SeqCst);
        if done != last_done {
            (last_done, last_progress, reported) = (done, Instant::now(), false);
        }
        if !reported && last_progress.elapsed() > Duration::from_secs(5) {
            // A stall: say where the unfinished nodes are, and what the coordinator has on them.
            reported = true;
            let steps: Vec<(String, &str)> =
                fleet.steps.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(n, s)| (n.clone(), *s)).collect();
            eprintln!("rollout-bench: no progress for 5 s; {} node(s) mid-update:", steps.len());
            for (name, st) in steps.iter().take(5) {
                let node = admin.get(&format!("/api/v1/nodes/{name}")).await?.into_result()?;
                eprintln!(
                    "  {name}: {st}; unschedulable={} annotations={}",
                    node["spec"]["unschedulable"], node["metadata"]["annotations"]
                );
            }
        }
        let failed = fleet.failures.load(Ordering::SeqCst);
        if done + failed >= expected {
            break;
        }
        if restart.is_none() && args.restart_after.is_some_and(|n| done >= n) {
            // What the killed process used is added to its successor's figures at the end.
            let before = proc_usage(c.pid());
            let killed_at = start.elapsed();
            tokio::task::block_in_place(|| {
                c.kill9();
                std::thread::sleep(args.restart_down);
                c.restart()
            });
            let back_at = start.elapsed();
            eprintln!(
                "rollout-bench: {:.1} s: coordinator killed at {done} done, serving again {:.2} s later",
                killed_at.as_secs_f64(),
                (back_at - killed_at).as_secs_f64()
            );
            restart = Some(Restart {
                done_at_kill: done,
                killed_at,
                back_at,
                cpu_before: before.cpu_s - coordinator0.cpu_s,
                peak_rss_before_kb: before.peak_rss_kb,
                first_done_after: None,
                watches_back: None,
                last_watch_poll: Instant::now(),
            });
            // A new process counts from zero.
            (coordinator0, threads0) = (proc_usage(c.pid()), threads(c.pid()));
            (requests0, passes0) = (Default::default(), Passes::default());
        }
        if let Some(r) = restart.as_mut() {
            if r.first_done_after.is_none() && done > r.done_at_kill {
                r.first_done_after = Some(start.elapsed());
            }
            if r.watches_back.is_none() && r.last_watch_poll.elapsed() > Duration::from_millis(250) {
                r.last_watch_poll = Instant::now();
                if let Ok(m) = scrape(&admin).await {
                    if node_watches(&m) >= args.nodes {
                        r.watches_back = Some(start.elapsed());
                    }
                }
            }
        }
        if last_progress.elapsed() > STALLED {
            // A figure from a rollout that stopped is no figure: fail rather than wait forever
            // (a coordinator whose controllers had stopped once held a run here for good).
            bail!(
                "no node finished an update for {} s: the rollout is stalled at {done}/{expected} done; \
                 the coordinator's log ends:\n{}",
                STALLED.as_secs(),
                c.log_tail()
            );
        }
        if let Some(res) = tasks.try_join_next() {
            res??;
            bail!("a simulated node stopped early");
        }
        if last_print.elapsed() > Duration::from_secs(2) {
            eprintln!(
                "rollout-bench: {:.1} s: {done}/{} done, {} updating, {failed} failed",
                start.elapsed().as_secs_f64(),
                args.nodes,
                fleet.updating.load(Ordering::SeqCst)
            );
            last_print = Instant::now();
        }
        if failed > 0 && fleet.updating.load(Ordering::SeqCst) == 0 && start.elapsed() > args.per_node * 4 {
            // A failure rate stops the rollout (the node controller does not pick past a
            // Degraded node's slot forever); report what was reached.
            tokio::time::sleep(args.per_node * 2).await;
            if fleet.updating.load(Ordering::SeqCst) == 0 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last_done = start.elapsed();
    // The rollout is over when the pool says so (Updated: every node on the target, uncordoned
    // and available), not at the last Done report: the coordinator uncordons after Done.
    if fleet.failures.load(Ordering::SeqCst) == 0 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let p = admin.get(pool_path).await?.into_result()?;
            let updated = p
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Updated" && c["status"] == "True"));
            if updated {
                break;
            }
            if Instant::now() > deadline {
                bail!("every node reported Done but the pool is not Updated after 60 s: {}", p["status"]);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let wall = start.elapsed();
    // A controller restarted by its supervisor lost seconds of the rollout to a defect: the
    // figure would be the defect's, not the rollout's.
    let restarts = c.log_lines_with("starting it again");
    if !restarts.is_empty() {
        bail!("a controller stopped during the run and was started again:\n{}", restarts.join("\n"));
    }
    if fleet.trace {
        eprintln!("trace updated at {:.1} ms", (start + wall).duration_since(fleet.t0).as_secs_f64() * 1000.0);
    }
    let usage = proc_usage(c.pid());
    let threads1 = threads(c.pid());
    let sim_usage = proc_usage(std::process::id());
    let coordinator_cpu = match &restart {
        Some(r) => r.cpu_before + usage.cpu_s - coordinator0.cpu_s,
        None => usage.cpu_s - cpu0,
    };
    let peak_rss_kb = usage.peak_rss_kb.max(restart.as_ref().map_or(0, |r| r.peak_rss_before_kb));
    let sim_cpu = sim_usage.cpu_s - sim_cpu0;
    // The fleet is idle by now; the timing holds this thread only.
    let speed_after = tokio::task::block_in_place(host_speed);
    // Before the last revision read: that LIST is the bench's, not the fleet's.
    let metrics = scrape(&admin).await?;
    let (requests, passes) = (node_requests(&metrics), Passes::of(&metrics).since(&passes0));
    let writes = revision(admin.clone()).await? - rev0;
    let batches = args.nodes.div_ceil(k);
    let ideal = args.per_node * batches as u32;
    let max_seen = fleet.max_updating.load(Ordering::SeqCst);
    let of_runs = if args.runs > 1 { format!(" (rollout {round} of {})", args.runs) } else { String::new() };
    println!(
        "rollout-bench: {} nodes, maxUnavailable {} (= {k}), {} ms per node{of_runs}",
        args.nodes,
        args.max_unavailable,
        args.per_node.as_millis()
    );
    let failed = fleet.failures.load(Ordering::SeqCst);
    if failed == 0 {
        println!(
            "  wall {:.2} s, ideal ceil({}/{k}) x {} ms = {:.2} s, ratio {:.3}",
            wall.as_secs_f64(),
            args.nodes,
            args.per_node.as_millis(),
            ideal.as_secs_f64(),
            wall.as_secs_f64() / ideal.as_secs_f64()
        );
        println!(
            "  (the last node reported Done at {:.2} s; the pool was Updated at {:.2} s)",
            last_done.as_secs_f64(),
            wall.as_secs_f64()
        );
    } else {
        // No efficiency for a rollout that cannot finish: the failed nodes keep their slots.
        let done = fleet.done.load(Ordering::SeqCst);
        println!(
            "  the rollout stopped at {:.2} s, the pool not Updated: {failed} node(s) failed and hold their slots (as \
             MCO's degraded nodes do), {} never picked; no ratio (ideal for the whole pool {:.2} s)",
            last_done.as_secs_f64(),
            args.nodes.saturating_sub(done + failed),
            ideal.as_secs_f64()
        );
    }
    println!(
        "  max unavailable at once (updating, or failed and holding a slot; seen by the nodes): {max_seen} (budget \
         {k}){}",
        if max_seen > k { "  BUDGET EXCEEDED" } else { "" }
    );
    println!(
        "  done {}, failed {}; coordinator CPU {:.2} s during the rollout, peak RSS {:.1} MiB",
        fleet.done.load(Ordering::SeqCst),
        fleet.failures.load(Ordering::SeqCst),
        coordinator_cpu,
        peak_rss_kb as f64 / 1024.0
    );
    if let (Some(pid), Some(cpu0)) = (c.etcd_pid(), etcd_cpu0) {
        let etcd_cpu = proc_usage(pid).cpu_s - cpu0;
        println!(
            "  store on etcd (ALOFT_TEST_STORE=etcd, one member on this machine): etcd CPU {etcd_cpu:.2} s, {:.2} ms \
             per node update; with the coordinator's {:.2} ms",
            etcd_cpu * 1000.0 / args.nodes as f64,
            (etcd_cpu + coordinator_cpu) * 1000.0 / args.nodes as f64
        );
    }
    if let (Some(e), Some(before)) = (c.etcd_endpoint(), &etcd_requests0) {
        let after = etcd_requests(e).await?;
        let per_node: Vec<String> = after
            .iter()
            .filter_map(|(m, n)| {
                let d = n.saturating_sub(before.get(m).copied().unwrap_or(0));
                (d > 0).then(|| format!("{m} {:.2}", d as f64 / args.nodes as f64))
            })
            .collect();
        println!("  etcd's requests per node update (gRPC, by method): {}", per_node.join(", "));
        // The coordinator's own timings of them (`etcd_request_duration_seconds` and the
        // watch cache's wait), as means over the rollout.
        let mean_ms = |name: &str, labels: &str| {
            let of = |m: &str, part: &str| sample(m, &format!("{name}_{part}{labels}"));
            let n = of(&metrics, "count") - of(&metrics0, "count");
            if n > 0.0 {
                format!("{:.2} ms", (of(&metrics, "sum") - of(&metrics0, "sum")) * 1000.0 / n)
            } else {
                "none".to_string()
            }
        };
        println!(
            "  on etcd, a write took {} on average for etcd to answer, then {} until the watch cache had it; a \
             batch of token lookups {}",
            mean_ms("etcd_request_duration_seconds", "{operation=\"txn\"}"),
            mean_ms("aloft_watch_cache_write_wait_seconds", ""),
            mean_ms("etcd_request_duration_seconds", "{operation=\"tokens\"}"),
        );
    }
    if let Some(r) = &restart {
        let at = |t: Option<Duration>| t.map_or("never".to_string(), |t| format!("{:.2} s", t.as_secs_f64()));
        println!(
            "  coordinator killed (SIGKILL) at {:.2} s with {} done, serving again at {:.2} s; the first Done after it \
             at {}; all {} watches open again at {}; {} requests failed and were retried as the agent retries \
             them{}",
            r.killed_at.as_secs_f64(),
            r.done_at_kill,
            r.back_at.as_secs_f64(),
            at(r.first_done_after),
            args.nodes,
            at(r.watches_back),
            fleet.retries.load(Ordering::SeqCst),
            if fleet.fixed_backoff { " (ROLLOUT_BENCH_FIXED_BACKOFF: after the whole backoff, as before 2026-12-01)" } else { "" }
        );
        println!(
            "  (the coordinator's CPU and peak RSS above are both processes'; the counts below, from /metrics and \
             /proc, are the restarted process's only)"
        );
    }
    println!(
        "  coordinator RSS: {:.1} MiB before the fleet connected, {:.1} MiB with it connected and watching \
         ({:.1} KiB per node), {:.1} MiB {}",
        rss_empty_kb as f64 / 1024.0,
        rss_fleet_kb as f64 / 1024.0,
        rss_fleet_kb.saturating_sub(rss_empty_kb) as f64 / args.nodes.max(1) as f64,
        usage.rss_kb as f64 / 1024.0,
        if failed == 0 { "once the pool was Updated" } else { "once the rollout stopped" }
    );
    // What the coordinator's allocator holds against its RSS: a leak grows `allocated`, memory the
    // allocator keeps for reuse only `resident`.
    let allocator = |kind: &str| {
        let series = format!("aloft_allocator_bytes{{kind=\"{kind}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&series)?.trim().parse::<f64>().ok()).map(|b| b / 1048576.0)
    };
    if let (Some(allocated), Some(active), Some(resident), Some(retained)) =
        (allocator("allocated"), allocator("active"), allocator("resident"), allocator("retained"))
    {
        println!(
            "  coordinator allocator (/metrics, jemalloc): {allocated:.1} MiB allocated, {active:.1} MiB in active \
             pages, {resident:.1} MiB resident, {retained:.1} MiB retained (unmapped)"
        );
    }
    println!(
        "  host speed: 10,000 JSON round trips of a Node in {:.1} ms before the run, {:.1} ms after it (one core; \
         lower is faster)",
        speed.as_secs_f64() * 1000.0,
        speed_after.as_secs_f64() * 1000.0
    );
    println!("  store writes during the rollout: {writes} ({:.1} per node)", writes as f64 / args.nodes as f64);
    let per_verb: Vec<String> = requests
        .iter()
        .map(|(verb_code, n)| (verb_code, n.saturating_sub(requests0.get(verb_code).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .map(|(verb_code, n)| format!("{verb_code} {n} ({:.2} per node)", n as f64 / args.nodes as f64))
        .collect();
    println!(
        "  the fleet's requests, as the coordinator counted them (/metrics, by verb and code): {}",
        per_verb.join(", ")
    );
    // What `--max-requests-inflight` and `--max-mutating-requests-inflight` must leave room for.
    let series = |name: &str, kind: &str| {
        let prefix = format!("{name}{{request_kind=\"{kind}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    println!(
        "  requests in flight at once (/metrics, the most since the coordinator started): {:.0} reads, {:.0} writes; \
         answered 429 over the limits: {:.0} reads, {:.0} writes",
        series("aloft_apiserver_inflight_requests_high_water", "readOnly"),
        series("aloft_apiserver_inflight_requests_high_water", "mutating"),
        series("apiserver_dropped_requests_total", "readOnly"),
        series("apiserver_dropped_requests_total", "mutating"),
    );
    // A freed slot waits for the node controller's pass, and a long pass is mostly the writes of
    // its picks it waits for: how the passes went shows where a generation's turns queued.
    println!(
        "  the node controller's passes (/metrics): {:.0} for {:.0} events ({:.1} a pass), {:.2} s in all ({:.0}% of \
         the wall time); half of them took at most {} ms, 90% {} ms, 99% {} ms",
        passes.count,
        passes.events,
        passes.events / passes.count.max(1.0),
        passes.seconds,
        100.0 * passes.seconds / wall.as_secs_f64(),
        bound_ms(passes.quantile(0.5)),
        bound_ms(passes.quantile(0.9)),
        bound_ms(passes.quantile(0.99))
    );
    println!(
        "  simulated fleet's CPU {sim_cpu:.2} s (its {} TLS clients share the machine with the coordinator)",
        args.nodes
    );
    // The two processes share the cores: how busy they kept them says whether the rollout's
    // pace was bound by CPU (a generation's nodes finish together, and their reports, picks and
    // fetches then arrive in one burst).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_node = |cpu: f64| cpu * 1000.0 / (fleet.done.load(Ordering::SeqCst).max(1)) as f64;
    // Per finished update; with failures the failed ones' work is in the total too.
    let which = if failed == 0 { "node update" } else { "finished node update (failed ones' work included)" };
    println!(
        "  CPU per {which}: coordinator {:.2} ms, simulated fleet {:.2} ms; {:.2} of {cores} cores busy on \
         average",
        per_node(coordinator_cpu),
        per_node(sim_cpu),
        (coordinator_cpu + sim_cpu) / wall.as_secs_f64()
    );
    // Counts, not times: unlike CPU seconds they do not move with the host's speed, so a change
    // that saves messages or copies shows in them run after run.
    let done = fleet.done.load(Ordering::SeqCst).max(1) as f64;
    let io = |end: &aloft_tests::ProcUsage, start: &aloft_tests::ProcUsage| {
        let calls = end.io_syscalls.saturating_sub(start.io_syscalls) as f64 / done;
        let kib = end.io_bytes.saturating_sub(start.io_bytes) as f64 / done / 1024.0;
        format!("{calls:.1} ({kib:.1} KiB)")
    };
    println!(
        "  read/write-family system calls per node update (/proc/PID/io: read, write, their vector and \
         positioned forms, not recv/send), with the bytes they moved: coordinator {}, simulated fleet {}",
        io(&usage, &coordinator0),
        io(&sim_usage, &sim0)
    );
    // Which of the coordinator's threads the CPU went to: the store writer and the controllers
    // are one thread each, so their share is how close each came to being the rollout's
    // bottleneck; the writer's writes (its WAL frames) per store write are a count the host's
    // speed does not move.
    let by_thread: Vec<(String, aloft_tests::ThreadUsage)> =
        used_by_name(&threads0, &threads1).into_iter().filter(|(_, u)| u.cpu_s >= 0.005).collect();
    let named: Vec<String> = by_thread.iter().map(|(name, u)| format!("{name} {:.2} s", u.cpu_s)).collect();
    println!(
        "  coordinator CPU by thread (threads alive at the end; names as the kernel cuts them): {}",
        named.join(", ")
    );
    if let Some((_, w)) = by_thread.iter().find(|(name, _)| name == "store-writer") {
        let per_write = |n: u64| n as f64 / writes.max(1) as f64;
        println!(
            "  the store writer's write calls per store write: {:.1}, moving {:.1} KiB (SQLite's WAL frames, each a \
             header and a page, written as two calls)",
            per_write(w.write_calls),
            per_write(w.write_bytes) / 1024.0
        );
    }
    // Generation g is the g-th k of picks in the order the nodes saw them. Its spread (first to
    // last node seeing its pick) grows when a wave of Done reports takes the machine longer to
    // answer than the wave lasts; its last start against g x per-node time is how late the
    // slowest slot runs by then.
    let mut seen: Vec<f64> = fleet
        .seen_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|t| t.saturating_duration_since(start).as_secs_f64() * 1000.0)
        .collect();
    seen.sort_by(f64::total_cmp);
    let per_node_ms = args.per_node.as_secs_f64() * 1000.0;
    let generations: Vec<String> = seen
        .chunks(k)
        .enumerate()
        .map(|(g, c)| {
            let (first, last) = (c[0], c[c.len() - 1]);
            format!("{g}: {:.0}/{:.0}", last - first, last - g as f64 * per_node_ms)
        })
        .collect();
    println!(
        "  per generation, ms: spread of the picks seen / last pick seen after the ideal start: {}",
        generations.join(", ")
    );
    let mut overslept = std::mem::take(&mut *fleet.overslept.lock().unwrap_or_else(|e| e.into_inner()));
    overslept.sort();
    if let Some(max) = overslept.last() {
        let at = |q: f64| overslept[((overslept.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
        println!(
            "  the simulated hosts slept longer than {} ms by: median {:.1} ms, p99 {:.1} ms, most {:.1} ms \
             (in the wall time: each slot of the budget carries it once a turn)",
            args.per_node.as_millis(),
            at(0.5),
            at(0.99),
            max.as_secs_f64() * 1000.0
        );
    }
    if max_seen > k {
        bail!("the rollout exceeded its budget: {max_seen} > {k}");
    }
    Ok(wall.as_secs_f64() / ideal.as_secs_f64())
}
