//! `aloft-coordinator bench api`: load a coordinator with a fleet's worth of objects over HTTPS on
//! loopback, then measure what clients feel: get, list and watch-event delivery latency, and the
//! render time of a large pool. Each figure is printed with a baseline measured in the same run
//! (an unauthenticated /healthz round trip for HTTP figures; a plain JSON parse of the same
//! configs for render), so a slow machine shows up as slow baselines, not as a regression.

use crate::client::{resource_path, Client, ClientConfig};
use crate::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use crate::serve::{self, ServeOptions};
use crate::server::Limits;
use aloft_api::{MachineConfig, MachineConfigPool};
use anyhow::{Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Options of `bench api`.
#[derive(Debug, Clone)]
pub struct ApiBench {
    pub nodes: usize,
    pub configs: usize,
    pub samples: usize,
    pub concurrency: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats { p50: percentile(&v, 0.5), p99: percentile(&v, 0.99) }
}

fn node(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": format!("node-{i:05}"),
            "labels": {"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": format!("zone-{}", i % 3)},
            "annotations": {
                "machineconfiguration.openshift.io/currentConfig": "rendered-worker-0",
                "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-0",
                "machineconfiguration.openshift.io/state": "Done",
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// A worker MachineConfig with a few files and a unit, like the ones a real cluster carries.
pub fn machine_config(i: usize) -> Value {
    let files: Vec<Value> = (0..3)
        .map(|f| {
            json!({"path": format!("/etc/aloft-bench/{i}/{f}.conf"), "mode": 420, "overwrite": true,
                        "contents": {"source": format!("data:,config%20{i}%20{f}")}})
        })
        .collect();
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": format!("50-bench-{i:03}"), "labels": {"machineconfiguration.openshift.io/role": "worker"}},
        "spec": {
            "config": {"ignition": {"version": "3.4.0"}, "storage": {"files": files},
                       "systemd": {"units": [{"name": format!("bench-{i}.service"), "enabled": true,
                                              "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]}},
            "kernelArguments": [format!("bench.arg{i}=1")],
        },
    })
}

fn worker_pool() -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "worker"},
        "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
                 "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}},
    })
}

async fn timed<F, Fut>(n: usize, mut f: F) -> Result<Vec<Duration>>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Run the benchmark and print its report.
pub async fn run(opts: ApiBench) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    drop(listener);
    let serve_opts = ServeOptions {
        data_dir: dir.path().to_path_buf(),
        listen: format!("127.0.0.1:{port}").parse()?,
        insecure_http: false,
        admin_token_file: None,
        tls_san: vec![],
        limits: Limits::default(),
        watch_history: crate::store::sqlite::DEFAULT_RETAIN,
        event_ttl: crate::controllers::event_ttl::DEFAULT_TTL,
        allocator: None,
        node_monitor_grace: crate::controllers::presence::DEFAULT_GRACE,
        new_ca: false,
        fleetlock_listen: None,
        update_poll: crate::controllers::cluster_version::DEFAULT_POLL,
        release_keyring: None,
        olm_global_namespace: Some(crate::controllers::olm::DEFAULT_GLOBAL_NAMESPACE.to_string()),
        etcd: None,
        active_lease_duration: std::time::Duration::from_secs(15),
        build: aloft_api::build::BuildInfo::new(env!("CARGO_PKG_VERSION"), None, None, None),
    };
    let server = tokio::spawn(serve::run(serve_opts));
    let kubeconfig = serve::DataDir::new(dir.path()).kubeconfig;
    let deadline = Instant::now() + Duration::from_secs(30);
    let cfg = loop {
        if let Ok(c) = ClientConfig::from_kubeconfig(&kubeconfig) {
            let client = Client::new(&c)?;
            if client.get("/healthz").await.is_ok_and(|r| r.ok()) {
                break c;
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "coordinator did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let client = Client::new(&cfg)?;
    println!(
        "aloft-coordinator bench api: {} nodes, {} MachineConfigs, {} samples, HTTPS on loopback",
        opts.nodes, opts.configs, opts.samples
    );

    // Load.
    let t = Instant::now();
    let nodes_path = resource_path(NODE.path_ref(), None, None);
    futures::stream::iter(0..opts.nodes)
        .map(|i| {
            let (c, p) = (client.clone(), nodes_path.clone());
            async move { c.post(&p, &node(i)).await?.into_result().map(|_| ()) }
        })
        .buffer_unordered(opts.concurrency)
        .collect::<Vec<Result<()>>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>>>()?;
    let load = t.elapsed();
    println!(
        "load: {} nodes in {:.1} s ({:.0} creates/s, {} concurrent clients, each write fsynced)",
        opts.nodes,
        load.as_secs_f64(),
        opts.nodes as f64 / load.as_secs_f64(),
        opts.concurrency
    );
    let mc_path = resource_path(MACHINE_CONFIG.path_ref(), None, None);
    for i in 0..opts.configs {
        client.post(&mc_path, &machine_config(i)).await?.into_result()?;
    }
    client.post(&resource_path(MACHINE_CONFIG_POOL.path_ref(), None, None), &worker_pool()).await?.into_result()?;

    // Baseline: the cheapest authenticated-free round trip on the same connection pool.
    let base = stats(
        timed(opts.samples, |_| {
            let c = client.clone();
            async move { c.get("/healthz").await.map(|_| ()) }
        })
        .await?,
    );
    let get = stats(
        timed(opts.samples, |i| {
            let c = client.clone();
            let p = resource_path(NODE.path_ref(), None, Some(&format!("node-{:05}", (i * 7919) % opts.nodes.max(1))));
            async move { c.get(&p).await?.into_result().map(|_| ()) }
        })
        .await?,
    );
    let list_samples = (opts.samples / 50).max(5);
    let list = stats(
        timed(list_samples, |_| {
            let (c, p) = (client.clone(), nodes_path.clone());
            async move { c.get(&p).await?.into_result().map(|_| ()) }
        })
        .await?,
    );
    let list_sel = stats(
        timed(list_samples, |_| {
            let c = client.clone();
            let p = format!("{nodes_path}?labelSelector=topology.kubernetes.io%2Fzone%3Dzone-1");
            async move { c.get(&p).await?.into_result().map(|_| ()) }
        })
        .await?,
    );
    // In pages of 500, as kubectl asks by default: the first page alone (what a client waits
    // for before it can print), and the whole list page by page.
    let first_page = stats(
        timed(list_samples, |_| {
            let (c, p) = (client.clone(), format!("{nodes_path}?limit=500"));
            async move { c.get(&p).await?.into_result().map(|_| ()) }
        })
        .await?,
    );
    let paged = stats(
        timed(list_samples, |_| {
            let (c, p) = (client.clone(), nodes_path.clone());
            async move {
                let mut cont = String::new();
                loop {
                    let page = c.get(&format!("{p}?limit=500&continue={cont}")).await?.into_result()?;
                    match page.pointer("/metadata/continue").and_then(Value::as_str) {
                        Some(next) => cont = next.to_string(),
                        None => return Ok(()),
                    }
                }
            }
        })
        .await?,
    );

    // Watch delivery: time from sending an update to the watcher seeing its event.
    let watch_samples = opts.samples.min(500);
    let rev = client.get(&format!("{nodes_path}?fieldSelector=metadata.name%3Dnode-00000")).await?.into_result()?;
    let rv = rev.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("0").to_string();
    let resp = client.watch(&format!("{nodes_path}?watch=true&resourceVersion={rv}"), None).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    tokio::spawn(async move {
        let mut s = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = s.next().await {
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                buf.drain(..=pos);
                if tx.send(Instant::now()).is_err() {
                    return;
                }
            }
        }
    });
    let mut delivery = Vec::with_capacity(watch_samples);
    let mut writes = Vec::with_capacity(watch_samples);
    for i in 0..watch_samples {
        let p = resource_path(NODE.path_ref(), None, Some(&format!("node-{:05}", i % opts.nodes.max(1))));
        let patch = json!({"metadata": {"annotations": {"aloft.dev/bench": i.to_string()}}});
        let sent = Instant::now();
        client.patch(&p, "application/merge-patch+json", &patch).await?.into_result()?;
        writes.push(sent.elapsed());
        let seen = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .context("watch event never arrived")?
            .context("watch ended")?;
        delivery.push(seen.duration_since(sent));
    }
    let delivery = stats(delivery);
    let writes = stats(writes);

    // Render: the real merge of every config the pool selects.
    let mcs: Vec<MachineConfig> =
        (0..opts.configs).map(|i| serde_json::from_value(machine_config(i))).collect::<Result<_, _>>()?;
    let pool: MachineConfigPool = serde_json::from_value(worker_pool())?;
    let raw: Vec<String> = (0..opts.configs).map(|i| machine_config(i).to_string()).collect();
    let render_base = stats(
        timed(20, |_| {
            let r = &raw;
            async move {
                for s in r {
                    let _: Value = serde_json::from_str(s)?;
                }
                Ok(())
            }
        })
        .await?,
    );
    let render = stats(
        timed(20, |_| {
            let (p, m) = (&pool, &mcs);
            async move { aloft_api::render::render(p, m, None).map(|_| ()).map_err(anyhow::Error::from) }
        })
        .await?,
    );

    println!();
    println!("{:<34} {:>10} {:>10} {:>16}", "operation", "p50 ms", "p99 ms", "p50 vs baseline");
    let row = |name: &str, s: &Stats, b: &Stats| {
        println!(
            "{:<34} {:>10.3} {:>10.3} {:>15.1}x",
            name,
            ms(s.p50),
            ms(s.p99),
            s.p50.as_secs_f64() / b.p50.as_secs_f64().max(1e-9)
        );
    };
    row("baseline: GET /healthz", &base, &base);
    row("GET one node", &get, &base);
    row(&format!("LIST {} nodes", opts.nodes), &list, &base);
    row("LIST nodes, labelSelector (1/3)", &list_sel, &base);
    row("LIST nodes, first page of 500", &first_page, &base);
    row("LIST nodes, every page of 500", &paged, &base);
    row("PATCH one node (fsynced write)", &writes, &base);
    row("watch event delivery (PATCH->event)", &delivery, &base);
    row("baseline: parse configs as JSON", &render_base, &render_base);
    row(&format!("render pool of {} configs", opts.configs), &render, &render_base);
    println!();
    println!(
        "targets: render < 20 ms -> {}; p99 get < 5 ms -> {}",
        if render.p50 < Duration::from_millis(20) { "met" } else { "MISSED" },
        if get.p99 < Duration::from_millis(5) { "met" } else { "MISSED" }
    );
    server.abort();
    Ok(())
}

/// `aloft-coordinator bench event-ttl`: what one Event TTL sweep costs with `events` Events in a
/// store file (none of them expired, the steady state), against reading and aging every Event
/// (what each sweep did before sweeps went by revision, and what a start still does once),
/// measured on the same file in the same run.
pub async fn event_ttl(events: usize, rounds: usize) -> Result<()> {
    use crate::controllers::event_ttl::{Sweeper, DEFAULT_TTL};
    use crate::resources::EVENT;
    use crate::store::{Key, SqliteStore, Store};
    use std::sync::Arc;
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("store.db"))?);
    // A sweeper started on the empty store: its mark precedes every Event written below.
    let t0 = std::time::Instant::now();
    let (mut sweeper, _) = Sweeper::start(&store, DEFAULT_TTL, t0, chrono::Utc::now()).await?;
    let started = Instant::now();
    let now = crate::server::objects::now();
    for chunk in (0..events).collect::<Vec<_>>().chunks(512) {
        let writes = chunk.iter().map(|i| {
            let name = format!("node-{i:05}.{:016x}", i * 7919);
            let mut ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": format!("node-{i:05}")},
                "reason": "Drained", "type": "Normal", "count": 1,
                "message": format!("Drained node node-{i:05} for rendered-worker-3f2a9c1d7e5b4a6c8d0e2f4a6b8c0d2e"),
                "source": {"component": "aloft-coordinator"}, "firstTimestamp": now, "lastTimestamp": now,
                "reportingComponent": "aloft-coordinator", "reportingInstance": "aloft-coordinator"});
            crate::server::objects::prepare_create(&mut ev, "default");
            let store = store.clone();
            async move { store.create(&Key::new(&EVENT.store_key(), "default", &name), ev).await }
        });
        for r in futures::future::join_all(writes).await {
            r?;
        }
    }
    let bytes: usize = store.list_json(&EVENT.store_key(), None).await?.items.iter().map(|j| j.len()).sum();
    println!(
        "{events} Events ({:.1} MiB of JSON) written in {:.1} s",
        bytes as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );
    let mut full = Vec::new();
    let mut by_revision = Vec::new();
    for round in 0..rounds {
        let t = Instant::now();
        let (_, deleted) = Sweeper::start(&store, DEFAULT_TTL, std::time::Instant::now(), chrono::Utc::now()).await?;
        full.push(t.elapsed());
        anyhow::ensure!(deleted == 0, "nothing is past the TTL, yet {deleted} were deleted");
        // A TTL after the start's mark, a mark per round later: nothing written since expires.
        let at = t0 + DEFAULT_TTL + Duration::from_secs(1 + round as u64);
        let t = Instant::now();
        let deleted = sweeper.sweep(&store, at).await?;
        by_revision.push(t.elapsed());
        anyhow::ensure!(deleted == 0, "nothing is past the TTL, yet {deleted} were deleted");
    }
    let (full, by_revision) = (stats(full), stats(by_revision));
    println!(
        "read and age every Event (the baseline: each sweep before, a start now): p50 {:.2} ms, worst of {rounds} {:.2} ms",
        ms(full.p50),
        ms(full.p99)
    );
    println!(
        "a sweep by revision, nothing expired: p50 {:.2} ms, worst of {rounds} {:.2} ms; {:.1}x less time",
        ms(by_revision.p50),
        ms(by_revision.p99),
        full.p50.as_secs_f64() / by_revision.p50.as_secs_f64().max(1e-9)
    );
    let t = Instant::now();
    let all = store.written_by(&EVENT.store_key(), store.revision().await?).await?;
    println!("finding every Event as expired (before their deletes): {:.2} ms for {}", ms(t.elapsed()), all.len());
    Ok(())
}

/// `aloft-coordinator bench update-graph`: what reading a served update graph and working out
/// the updates from every release in it cost, against reading the same bytes as untyped JSON
/// (the floor of any reading of it), timed in the same run. The update service's own target is
/// an answer within 0.5 s; the controller does one read per poll and one `updates_from` per pass.
pub fn update_graph(path: &std::path::Path, rounds: usize) -> Result<()> {
    use aloft_api::update_graph;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let graph = update_graph::parse(&bytes).with_context(|| format!("{} is not an update graph", path.display()))?;
    let time = |f: &mut dyn FnMut()| median_time(rounds, f);
    let baseline = time(&mut || {
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        std::hint::black_box(v);
    });
    let parse = time(&mut || {
        std::hint::black_box(update_graph::parse(&bytes).ok());
    });
    let mut offered = 0usize;
    let every = time(&mut || {
        offered = 0;
        for n in &graph.nodes {
            if let Ok(u) = graph.updates_from(&n.version) {
                offered += u.available.len() + u.conditional.len();
            }
        }
    });
    let per_version = every / graph.nodes.len().max(1) as u32;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{}: {} bytes, {} releases, {} edges, {} conditional groups; median of {rounds} rounds",
        path.display(),
        bytes.len(),
        graph.nodes.len(),
        graph.edges.len(),
        graph.conditional_edges.len()
    );
    println!("  baseline: read as untyped JSON        {:8.3} ms   1.00x", ms(baseline));
    println!(
        "  read as an update graph (checked)     {:8.3} ms   {:.2}x",
        ms(parse),
        parse.as_secs_f64() / baseline.as_secs_f64()
    );
    println!(
        "  updates from one release (of {:>3})    {:8.3} ms   {:.2}x   ({offered} offered in all)",
        graph.nodes.len(),
        ms(per_version),
        per_version.as_secs_f64() / baseline.as_secs_f64()
    );
    Ok(())
}

/// The median of `rounds` (at least one) timings of `f`.
fn median_time(rounds: usize, f: &mut dyn FnMut()) -> Duration {
    let mut samples: Vec<Duration> = (0..rounds.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

/// `aloft-coordinator bench olm`: what the OLM controller's resolution of a new Subscription
/// costs on a real catalog (e.g. shared/testdata/fbc-community-operators/v4.20), with no store:
/// for every package, the first entry of its default channel that can be installed with its
/// whole chain of dependencies, as `subscriptions::first_installable` finds it; then the worst
/// a catalog can make one resolution do (the catalog plus a package of 70 entries, each needing
/// a CEL rule no bundle meets, so each of the 64 entries tried scans every bundle). Against
/// decoding the same catalog, timed in the same run.
pub fn olm(path: &std::path::Path, rounds: usize) -> Result<()> {
    let f = olm_figures(path, rounds)?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let x = |d: Duration| d.as_secs_f64() / f.decode.as_secs_f64().max(1e-9);
    println!(
        "{}: {} packages, {} bundles, {} channels; median of {} rounds",
        path.display(),
        f.packages,
        f.bundles,
        f.channels,
        rounds.max(1)
    );
    let line =
        |what: &str, d: Duration, more: String| println!("  {what:<52} {:9.3} ms  {:7.2}x   {more}", ms(d), x(d));
    line("baseline: decode the catalog", f.decode, String::new());
    line(
        "a new Subscription of every package",
        f.every,
        format!("({} installable, {} on an entry below the head)", f.installable, f.fell_back),
    );
    line(&format!("the slowest of them ({})", f.slowest.1), f.slowest.0, String::new());
    line(
        &format!("the bound: {} entries, each needing its own CEL rule", f.bound_entries),
        f.bound,
        format!(
            "(a scan is {} bundles; at most {} CEL evaluations a resolution; refused: {})",
            f.bound_bundles,
            crate::controllers::olm::closure::MAX_CEL_EVALUATIONS,
            f.refused
        ),
    );
    Ok(())
}

/// What `bench olm` measures and finds, each time the median of its rounds.
#[derive(Debug)]
struct OlmFigures {
    packages: usize,
    bundles: usize,
    channels: usize,
    /// Decoding the catalog: the baseline.
    decode: Duration,
    /// Resolving a new Subscription of every package.
    every: Duration,
    /// Packages a new Subscription gets a bundle of.
    installable: usize,
    /// Packages whose new Subscription gets an entry below the head.
    fell_back: usize,
    /// The slowest package's resolution.
    slowest: (Duration, String),
    /// The bound's package's entries, and the bundles one of its scans looks at.
    bound_entries: usize,
    bound_bundles: usize,
    bound: Duration,
    /// Whether the bound's resolution was refused (no bundle meets its rules).
    refused: bool,
}

fn olm_figures(path: &std::path::Path, rounds: usize) -> Result<OlmFigures> {
    use crate::controllers::olm::catalogs::{Snapshot, View};
    use crate::controllers::olm::{dependencies, subscriptions};
    use aloft_api::catalog::{Bundle, Catalog};
    use aloft_api::olm::Subscription;
    use std::sync::Arc;

    let blobs = crate::fbc::blobs_of_path(path).with_context(|| format!("reading {}", path.display()))?;
    let time = |f: &mut dyn FnMut()| median_time(rounds, f);
    let baseline = time(&mut || {
        std::hint::black_box(Catalog::from_blobs(blobs.clone()).ok());
    });
    let catalog = Catalog::from_blobs(blobs.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    // A package whose every entry needs what a CEL rule no bundle meets describes, each entry
    // its own rule (so nothing found for one entry serves the next).
    const ENTRIES: usize = 70;
    let rule =
        |i: usize| format!("properties.exists(p, p.type == 'olm.package' && p.value.packageName == 'none-such-{i}')");
    let mut hostile = blobs.clone();
    hostile.push(("bound".into(), json!({"schema": "olm.package", "name": "bound", "defaultChannel": "stable"})));
    let entries: Vec<Value> = (0..ENTRIES)
        .map(|i| match i {
            0 => json!({"name": "bound.v1.0.0"}),
            _ => json!({"name": format!("bound.v1.0.{i}"), "replaces": if i == 1 { "bound.v1.0.0".to_string() } else { format!("bound.v1.0.{}", i - 1) }}),
        })
        .collect();
    hostile.push((
        "bound".into(),
        json!({"schema": "olm.channel", "package": "bound", "name": "stable", "entries": entries}),
    ));
    for i in 0..ENTRIES {
        let version = if i == 0 { "1.0.0".to_string() } else { format!("1.0.{i}") };
        hostile.push((
            "bound".into(),
            json!({"schema": "olm.bundle", "package": "bound", "name": format!("bound.v{version}"), "image": format!("example.com/bound:{version}"),
                   "properties": [{"type": "olm.package", "value": {"packageName": "bound", "version": version}},
                                  {"type": "olm.constraint", "value": {"failureMessage": "none such", "cel": {"rule": rule(i)}}}]}),
        ));
    }
    let hostile = Catalog::from_blobs(hostile).map_err(|e| anyhow::anyhow!("{e}"))?;

    let snapshot = |c: Catalog| -> Snapshot {
        let view = View { catalog: Some(Arc::new(c)), healthy: true, failure: None, priority: 0 };
        [(("olm".to_string(), "bench".to_string()), view)].into_iter().collect()
    };
    let subscription = |package: &str| -> Result<Subscription> {
        Ok(serde_json::from_value(json!({"metadata": {"name": package, "namespace": "operators"},
            "spec": {"name": package, "source": "bench", "sourceNamespace": "olm"}}))?)
    };
    // One new Subscription's resolution: the entry taken, how many were tried before it.
    fn resolve_one<'c>(catalogs: &'c Snapshot, catalog: &'c Catalog, sub: &Subscription) -> (Option<&'c Bundle>, bool) {
        let searched = dependencies::search_order(catalogs, sub, None);
        let at = dependencies::Context { catalogs, searched: &searched, others: &[], installed: &[] };
        let Ok(candidates) = catalog.install_candidates(&sub.spec.name, None, None) else { return (None, false) };
        let memo = dependencies::Memo::default();
        let can = |to: &Bundle| dependencies::installable(sub, to, at, &memo);
        let first = subscriptions::first_installable(&candidates, &can);
        let fell_back = first.passed_over.is_some();
        (first.chosen.filter(|b| can(b).is_ok()), fell_back)
    }

    let real = snapshot(catalog.clone());
    let subs: Vec<Subscription> = catalog.packages.iter().map(|p| subscription(&p.name)).collect::<Result<_>>()?;
    let (mut installable, mut fell_back, mut slowest) = (0, 0, (Duration::ZERO, String::new()));
    let every = time(&mut || {
        installable = 0;
        fell_back = 0;
        slowest = (Duration::ZERO, String::new());
        for sub in &subs {
            let t = Instant::now();
            let (chosen, back) = resolve_one(&real, &catalog, sub);
            let took = t.elapsed();
            installable += usize::from(chosen.is_some());
            fell_back += usize::from(back);
            if took > slowest.0 {
                slowest = (took, sub.spec.name.clone());
            }
        }
    });
    let bound_catalogs = snapshot(hostile.clone());
    let bound = subscription("bound")?;
    let mut refused = false;
    let worst = time(&mut || {
        refused = resolve_one(&bound_catalogs, &hostile, &bound).0.is_none();
    });

    Ok(OlmFigures {
        packages: catalog.packages.len(),
        bundles: catalog.bundles.len(),
        channels: catalog.channels.len(),
        decode: baseline,
        every,
        installable,
        fell_back,
        slowest,
        bound_entries: ENTRIES,
        bound_bundles: hostile.bundles.len(),
        bound: worst,
        refused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bench olm` on a real catalog finds what the OLM controller would: every package of
    /// community v4.12 gets its channel head, and the bound's package, whose every entry needs
    /// what no bundle has, gets nothing, within the CEL budget.
    #[test]
    fn the_olm_bench_resolves_a_real_catalog_and_refuses_its_bound() {
        let catalog = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/testdata/fbc-community-operators/v4.12");
        let f = olm_figures(&catalog, 1).expect("the bench runs on the catalog");
        assert_eq!((f.packages, f.bundles), (10, 164), "{f:?}");
        assert_eq!((f.installable, f.fell_back), (f.packages, 0), "every head installable: {f:?}");
        assert!(!f.slowest.1.is_empty(), "{f:?}");
        assert_eq!(f.bound_bundles, f.bundles + f.bound_entries, "{f:?}");
        assert!(f.refused, "no entry of the bound's package can be installed: {f:?}");
    }
}
