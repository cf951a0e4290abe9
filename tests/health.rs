//! The coordinator's health endpoints and metrics, on a real coordinator over HTTPS: `/readyz`
//! lists the store and every supervised controller in Kubernetes' format, and `/metrics` (admin
//! or viewer token only) carries each pool's status exactly as stored. (kubectl reads both with
//! `get --raw`: tests/kubectl.rs.)

use aloft_api::annotations as ann;
use aloft_tests::*;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A plain HTTPS client pinning the coordinator's CA, sending `token` if any.
async fn raw(c: &Coordinator, path: &str, token: Option<&str>) -> (u16, String, String) {
    raw_accepting(c, path, token, "*/*").await
}

/// [`raw`] with an `Accept` header.
async fn raw_accepting(c: &Coordinator, path: &str, token: Option<&str>, accept: &str) -> (u16, String, String) {
    let h = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&c.ca_pem()).unwrap()])
        .build()
        .unwrap();
    let mut req = h.get(format!("{}{path}", c.url())).header("accept", accept);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let code = r.status().as_u16();
    let ctype = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (code, ctype, r.text().await.unwrap())
}

/// The value of the sample `series` (name and labels, as printed) in a metrics text.
fn sample(text: &str, series: &str) -> Option<i64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn node(c: &Client, name: &str) {
    let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {ann::STATE: "Done"}}});
    c.post(&path_of(&NODE, None), &n).await.unwrap().into_result().unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let status = format!("{}/status", path_of(&NODE, Some(name)));
    c.patch(&status, "application/merge-patch+json", &ready).await.unwrap().into_result().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_lists_the_store_and_every_controller_and_rejects_unknown_checks() {
    let c = Coordinator::start();
    let body = eventually(WAIT, "/readyz?verbose listing the event-ttl loop", || async {
        let (code, _, body) = raw(&c, "/readyz?verbose", None).await;
        Ok((code == 200
            && body.contains("controller/event-ttl")
            && body.contains("controller/token-cleaner")
            && body.contains("controller/cluster-version")
            && body.contains("controller/olm"))
        .then_some(body))
    })
    .await;
    let want = "[+]ping ok\n[+]store ok\n[+]controllers ok\n[+]controller/cluster-version ok\n[+]controller/drain ok\n\
                [+]controller/event-ttl ok\n[+]controller/gc ok\n[+]controller/node ok\n[+]controller/node-lifecycle ok\n[+]controller/olm ok\n[+]controller/render ok\n[+]controller/token-cleaner ok\nreadyz check passed\n";
    assert_eq!(body, want, "no token needed; each check on its line");

    assert_eq!(raw(&c, "/readyz", None).await, (200, "text/plain; charset=utf-8".into(), "ok".into()));
    assert_eq!(raw(&c, "/healthz", None).await.2, "ok");
    assert_eq!(raw(&c, "/livez?verbose", None).await.2, "[+]ping ok\nlivez check passed\n");
    assert_eq!(raw(&c, "/readyz/controller/node", None).await.2, "ok");
    assert_eq!(raw(&c, "/healthz/store", None).await.2, "ok");

    let (code, _, body) = raw(&c, "/readyz/etcd", None).await;
    assert_eq!((code, body.as_str()), (404, "no health check named \"etcd\"\n"));
    let (code, _, body) = raw(&c, "/readyz?exclude=stor", None).await;
    assert_eq!(code, 400, "a misspelt exclusion could hide a failing check: {body}");
    assert!(body.contains("\"stor\"") && body.contains("store"), "{body}");
    let (code, _, body) = raw(&c, "/readyz?verbose&exclude=store&exclude=controller%2Fdrain", None).await;
    assert_eq!(code, 200);
    assert!(!body.contains("store") && !body.contains("drain") && body.contains("[+]controller/node ok"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_each_pools_status_for_admins_and_viewers_only() {
    let c = Coordinator::start();
    let admin = c.client();
    admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("00-worker", "worker")).await.unwrap();
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &machine_config_pool("worker", "worker")).await.unwrap();
    for n in ["w1", "w2", "w3"] {
        node(&admin, n).await;
    }
    eventually(WAIT, "the worker pool counting 3 machines", || async {
        let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
        Ok((p["status"]["machineCount"] == 3).then_some(()))
    })
    .await;

    assert_eq!(raw(&c, "/metrics", None).await.0, 401, "a token is needed");
    let node_token = {
        let boot = c.client_with_token(Some(&c.create_token("boot-w4", "bootstrap")));
        let r = boot.post("/aloft/v1/enroll", &json!({"nodeName": "w4", "labels": {}})).await.unwrap();
        r.into_result().unwrap()["token"].as_str().unwrap().to_string()
    };
    let (code, _, body) = raw(&c, "/metrics", Some(&node_token)).await;
    assert_eq!(code, 403, "a node's credential reads only what its node needs: {body}");

    let viewer = c.create_token("dashboards", "viewer");
    let (code, ctype, text) = raw(&c, "/metrics", Some(&viewer)).await;
    assert_eq!(code, 200, "{text}");
    // The classic text format unless OpenMetrics is asked for, as Prometheus' client libraries
    // answer (curl and strict parsers of 0.0.4 get what they expect; Prometheus asks first).
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert!(text.lines().any(|l| l == "# TYPE aloft_controller_restarts_total counter"), "{text}");
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
    let prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (_, ctype, om) = raw_accepting(&c, "/metrics", Some(&viewer), prometheus).await;
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(om.trim_end().ends_with("# EOF"), "OpenMetrics ends with # EOF");
    assert!(om.lines().any(|l| l == "# TYPE aloft_controller_restarts counter"), "{om}");
    // The status moves on while the controllers settle; read it again with each scrape.
    let (text, status) = eventually(WAIT, "metrics and the stored pool agreeing", || async {
        let (_, _, text) = raw(&c, "/metrics", Some(&viewer)).await;
        let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
        let counts = [
            ("aloft_pool_machine_count", "machineCount"),
            ("aloft_pool_ready_machine_count", "readyMachineCount"),
            ("aloft_pool_updated_machine_count", "updatedMachineCount"),
            ("aloft_pool_unavailable_machine_count", "unavailableMachineCount"),
            ("aloft_pool_degraded_machine_count", "degradedMachineCount"),
        ];
        let agree = counts.iter().all(|(m, f)| {
            sample(&text, &format!("{m}{{pool=\"worker\"}}")) == p["status"][f].as_i64()
                && p["status"][f].as_i64().is_some()
        });
        Ok(agree.then(|| (text, p["status"].clone())))
    })
    .await;
    assert_eq!(status["machineCount"], 3, "w4 has no worker label: {status}");
    for cond in status["conditions"].as_array().unwrap() {
        let t = cond["type"].as_str().unwrap();
        let want = i64::from(cond["status"] == "True");
        assert_eq!(
            sample(&text, &format!("aloft_pool_condition{{pool=\"worker\",condition=\"{t}\"}}")),
            Some(want),
            "condition {t}:\n{text}"
        );
    }
    assert_eq!(sample(&text, "aloft_pool_paused{pool=\"worker\"}"), Some(0), "{text}");
    for controller in ["render", "node", "drain", "event-ttl", "gc"] {
        assert_eq!(sample(&text, &format!("aloft_controller_up{{controller=\"{controller}\"}}")), Some(1), "{text}");
        let restarts = format!("aloft_controller_restarts_total{{controller=\"{controller}\"}}");
        assert_eq!(sample(&text, &restarts), Some(0), "{text}");
    }
    // The controllers' passes: the pool's status above was written by node-controller passes run
    // for the nodes' events, and the pool was rendered by a render pass.
    for controller in ["render", "node", "drain"] {
        let ok = format!("aloft_controller_passes_total{{controller=\"{controller}\",result=\"success\"}}");
        assert!(sample(&text, &ok).is_some_and(|n| n >= 1), "{controller}: {text}");
        let timed = format!("aloft_controller_pass_duration_seconds_count{{controller=\"{controller}\"}}");
        assert!(sample(&text, &timed).is_some_and(|n| n >= 1), "{controller}'s passes timed: {text}");
    }
    let events = "aloft_controller_pass_events_total{controller=\"node\"}";
    assert!(sample(&text, events).is_some_and(|n| n >= 4), "the four nodes' events at least: {text}");
    assert!(sample(&text, "aloft_store_revision").is_some_and(|r| r > 0), "{text}");

    // Pausing the pool shows at the next scrape.
    let paused = json!({"spec": {"paused": true}});
    let p = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    admin.patch(&p, "application/merge-patch+json", &paused).await.unwrap().into_result().unwrap();
    let (_, _, text) = raw(&c, "/metrics", Some(&c.admin_token())).await;
    assert_eq!(sample(&text, "aloft_pool_paused{pool=\"worker\"}"), Some(1), "{text}");
}

/// `/metrics` carries the coordinator process's own series under the names every Prometheus
/// client exports (so an alert on kube-apiserver's `process_resident_memory_bytes` reads aloft),
/// and what its allocator holds: live data against what jemalloc keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_process_and_its_allocator() {
    let c = Coordinator::start();
    let (code, _, text) = raw(&c, "/metrics", Some(&c.admin_token())).await;
    assert_eq!(code, 200, "{text}");
    let float = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series}:\n{text}"))
    };
    // The coordinator's own RSS, read by the test from /proc, within the span of two readings.
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.pid())).unwrap();
    let vm_rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let rss = float("process_resident_memory_bytes");
    assert!(rss > 4e6 && (rss / (vm_rss_kib * 1024.0) - 1.0).abs() < 0.5, "{rss} against VmRSS {vm_rss_kib} KiB");
    assert!(float("process_virtual_memory_bytes") > rss);
    assert!(float("process_cpu_seconds_total") > 0.0, "{text}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let start = float("process_start_time_seconds");
    assert!(start > now - 300.0 && start <= now + 1.0, "started in the last minutes: {start} vs {now}");
    let fds = float("process_open_fds");
    let listed = std::fs::read_dir(format!("/proc/{}/fd", c.pid())).unwrap().count() as f64;
    assert!(fds >= 5.0 && (fds - listed).abs() <= 8.0, "{fds} open, {listed} listed");
    assert!(float("process_max_fds") >= fds);

    let kind = |k: &str| float(&format!("aloft_allocator_bytes{{kind=\"{k}\"}}"));
    let (allocated, active, resident, mapped) = (kind("allocated"), kind("active"), kind("resident"), kind("mapped"));
    assert!(allocated > 1e6, "a serving coordinator holds more than 1 MB: {allocated}");
    assert!(allocated <= active && active <= resident && active <= mapped, "{text}");
    assert!(resident <= rss * 1.5, "the allocator's resident is part of the RSS: {resident} vs {rss}");
    assert!(kind("metadata") > 0.0 && kind("retained") >= 0.0, "{text}");
}

/// `/metrics` counts what the API answered under Kubernetes' names and labels: by verb (LIST,
/// WATCH, GET, ...), resource, scope and code, a missing token's 401 included; watches are counted
/// open until they end and are not timed; a path that names no resource leaves no trace of its
/// text in the labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_api_answered() {
    let c = Coordinator::start();
    let admin_token = c.admin_token();
    let admin = c.client();
    for _ in 0..3 {
        assert_eq!(raw(&c, "/api/v1/nodes/no-such-node", Some(&admin_token)).await.0, 404);
    }
    for _ in 0..2 {
        assert_eq!(raw(&c, "/api/v1/nodes", None).await.0, 401);
    }
    assert_eq!(raw(&c, "/apis/example.com/v1/widgets", Some(&admin_token)).await.0, 404);
    let mut watch = admin.watch("/api/v1/nodes?watch=true", None).await.unwrap().bytes_stream();

    let series = |verb: &str, scope: &str| {
        format!("{{verb=\"{verb}\",group=\"\",version=\"v1\",resource=\"nodes\",subresource=\"\",scope=\"{scope}\"")
    };
    let open = format!("apiserver_longrunning_requests{}}}", series("WATCH", "cluster"));
    let (_, _, text) = raw(&c, "/metrics", Some(&admin_token)).await;
    let total = |text: &str, verb: &str, scope: &str, code: u16| {
        sample(text, &format!("apiserver_request_total{},code=\"{code}\"}}", series(verb, scope)))
    };
    assert_eq!(total(&text, "GET", "resource", 404), Some(3), "{text}");
    assert_eq!(total(&text, "LIST", "cluster", 401), Some(2), "a missing token is counted too:\n{text}");
    assert_eq!(total(&text, "WATCH", "cluster", 200), Some(1), "{text}");
    assert_eq!(sample(&text, &open), Some(1), "one watch open:\n{text}");
    let timed = format!("apiserver_request_duration_seconds_count{}}}", series("GET", "resource"));
    assert_eq!(sample(&text, &timed), Some(3), "{text}");
    // kube-apiserver's buckets, written as Go writes them: the Kubernetes mixin's SLO rules read
    // `le="1"` and `le="30"` of this family.
    let bucket = |le: &str| {
        format!("apiserver_request_duration_seconds_bucket{{le=\"{le}\",{}}}", &series("GET", "resource")[1..])
    };
    for le in ["1", "30", "60", "+Inf"] {
        assert_eq!(sample(&text, &bucket(le)), Some(3), "{}:\n{text}", bucket(le));
    }
    assert!(sample(&text, &bucket("0.0005")).is_some() && !text.contains("le=\"1.0\""), "{text}");
    assert!(!text.contains("apiserver_request_duration_seconds_count{verb=\"WATCH\""), "a watch is not timed:\n{text}");
    let nowhere = "apiserver_request_total{verb=\"GET\",group=\"\",version=\"\",resource=\"\",subresource=\"\",scope=\"\",code=\"404\"}";
    assert_eq!(sample(&text, nowhere), Some(1), "{text}");
    assert!(!text.contains("widgets") && !text.contains("example.com"), "no label from a path's text:\n{text}");

    // The watch still answers; once the client lets it go, it is no longer counted open.
    admin
        .post(&path_of(&NODE, None), &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w1"}}))
        .await
        .unwrap();
    use futures::StreamExt;
    assert!(tokio::time::timeout(WAIT, watch.next()).await.unwrap().is_some(), "the watch delivers");
    drop(watch);
    eventually(WAIT, "the watch counted closed", || async {
        let (_, _, text) = raw(&c, "/metrics", Some(&admin_token)).await;
        Ok((sample(&text, &open) == Some(0)).then_some(()))
    })
    .await;
}

/// Under systemd (NOTIFY_SOCKET and WATCHDOG_USEC, as `Type=notify` with `WatchdogSec=` sets
/// them): READY=1 with a STATUS= line once the API serves, then WATCHDOG=1 at half the interval.
/// (The pings' gate, a stuck controllers' thread or store, is unit-tested in `health`.)
#[test]
fn under_systemd_it_notifies_ready_and_pings_the_watchdog() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let env = vec![
        ("NOTIFY_SOCKET".to_string(), path.display().to_string()),
        ("WATCHDOG_USEC".to_string(), "1000000".to_string()),
    ];
    let c = Coordinator::start_with(Options { env, ..Default::default() });
    let recv = || {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).expect("a notification within 30 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let first = recv();
    let want = format!("READY=1\nSTATUS=serving on {}; ", c.url());
    assert!(first.starts_with(&want), "{first:?}");
    // What came while the test waited for the coordinator to start is queued: take it first, so
    // the pings timed below arrive as they are sent.
    let check = |m: &str| {
        assert!(
            m == "WATCHDOG=1\n" || m.starts_with("STATUS=serving on "),
            "only STATUS= and WATCHDOG=1 follow: {m:?}"
        );
        m == "WATCHDOG=1\n"
    };
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.recv(&mut buf) {
        check(&String::from_utf8_lossy(&buf[..n]));
    }
    sock.set_nonblocking(false).unwrap();
    let mut pings = Vec::new();
    while pings.len() < 3 {
        if check(&recv()) {
            pings.push(std::time::Instant::now());
        }
    }
    // Two intervals of 500 ms: not a ping per check (a late first ping shortens the span a
    // little, so the bound leaves room for it).
    let took = pings[2] - pings[0];
    assert!(took >= Duration::from_millis(600), "two intervals of 500 ms took {took:?}");
}

/// `--event-ttl 0` keeps Events forever (README): the sweep does nothing, and the coordinator
/// stays ready, its event-ttl loop up and never restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_ttl_of_zero_keeps_the_coordinator_ready() {
    let c = Coordinator::start_with(Options { args: vec!["--event-ttl".into(), "0".into()], ..Default::default() });
    let token = c.admin_token();
    // The supervisor restarts a stopped controller after 1 s, and /readyz fails from then on:
    // watch it over three seconds.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until {
        let (code, _, body) = raw(&c, "/readyz?verbose", None).await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("[+]controller/event-ttl ok"), "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, _, text) = raw(&c, "/metrics", Some(&token)).await;
    assert_eq!(sample(&text, "aloft_controller_restarts_total{controller=\"event-ttl\"}"), Some(0), "{text}");
    assert_eq!(sample(&text, "aloft_controller_up{controller=\"event-ttl\"}"), Some(1), "{text}");
}

/// A second coordinator on a data directory one is serving is refused before it writes
/// anything, naming the directory and the pid that holds it; the first one serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_coordinator_on_the_same_data_dir_is_refused() {
    let c = Coordinator::start();
    let kubeconfig = std::fs::read(c.kubeconfig_path()).unwrap();
    let mut second = std::process::Command::new(bin("aloft-coordinator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(c.data_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > until {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second coordinator started on the same data directory and served");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains(&format!("data directory {} is in use", c.data_dir().display())), "{stderr}");
    assert!(stderr.contains(&format!("(pid {})", c.pid())), "{stderr}");
    assert_eq!(std::fs::read(c.kubeconfig_path()).unwrap(), kubeconfig, "the client config is left alone");
    let (code, _, _) = raw(&c, "/readyz", None).await;
    assert_eq!(code, 200);
}

/// The log is plain text when stderr is not a terminal (a file here; the journal under systemd,
/// which keeps a line with escape codes as a blob): no ANSI colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_has_no_colour_codes_when_stderr_is_not_a_terminal() {
    // Without the harness's NO_COLOR (systemd does not set it either).
    let env = vec![("NO_COLOR".to_string(), String::new())];
    let c = Coordinator::start_with(Options { env, ..Default::default() });
    let log = c.log_tail();
    assert!(log.contains("INFO"), "the log has lines: {log}");
    assert!(!log.contains('\u{1b}'), "escape codes in a log written to a file: {log:?}");
}

/// `/version` and the health endpoints answer without a credential (kube-apiserver's
/// `system:public-info-viewer`); `/livez` takes a check's name and `?exclude=` as `/readyz`
/// does, a name that is no check refused.
#[tokio::test]
async fn version_and_health_are_open_and_livez_names_its_checks() {
    let c = Coordinator::start();
    let (code, _, body) = raw(&c, "/version", None).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("gitVersion"), "{body}");
    assert_eq!(raw(&c, "/livez/ping", None).await.0, 200);
    assert_eq!(raw(&c, "/livez/nothing", None).await.0, 404);
    let (code, _, body) = raw(&c, "/livez?exclude=bogus", None).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("no health check named \"bogus\""), "{body}");
    assert_eq!(raw(&c, "/livez?verbose", None).await.0, 200);
    // Everything else still needs a token.
    assert_eq!(raw(&c, "/api/v1/nodes", None).await.0, 401);
}

/// Run `serve` on `dir` with `extra` arguments under `shell_prefix` (e.g. a `ulimit`), until it
/// prints that it listens (Ok: its pid, stderr so far) or exits (Err: its stderr).
fn serve_until_listening(
    dir: &std::path::Path,
    shell_prefix: &str,
    extra: &str,
) -> Result<(std::process::Child, std::path::PathBuf), String> {
    use std::io::BufRead;
    let log = dir.with_extension("log");
    let cmd = format!(
        "{shell_prefix} exec {} serve --data-dir {} --listen 127.0.0.1:0 {extra} 2>{}",
        bin("aloft-coordinator").display(),
        dir.display(),
        log.display()
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", &cmd])
        .env("ALOFT_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read on a thread for as long as it runs: a closed stdout would fail its later prints.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("listening on") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv().is_ok() {
        Ok((child, log))
    } else {
        let _ = child.wait();
        Err(std::fs::read_to_string(&log).unwrap_or_default())
    }
}

/// Operating the coordinator: an existing data dir keeps its mode (a warning says when others may
/// read it; `--data-dir /tmp` by mistake took /tmp's sticky bit away); the open-files limit is
/// raised to the hard one (systemd starts services at 1024, and every agent holds a connection);
/// a stop (SIGTERM) ends the process cleanly and says so; a data dir restored without its CA is
/// refused while nodes have enrolled (a new CA cut every agent off), unless --new-ca.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_the_data_dirs_mode_raises_its_file_limit_stops_cleanly_and_keeps_its_ca() {
    use std::os::unix::fs::PermissionsExt;
    if aloft_tests::stores_on_etcd() {
        eprintln!("not run with ALOFT_TEST_STORE=etcd: it starts `serve` by hand on a data directory's own store");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (mut child, log) = serve_until_listening(&dir, "ulimit -Sn 512;", "").expect("serves");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777, "an existing data dir keeps its mode");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
    let nums: Vec<&str> = files.split_whitespace().filter(|w| w.chars().all(|c| c.is_ascii_digit())).collect();
    assert!(nums.len() == 2 && nums[0] == nums[1] && nums[0] != "512", "soft raised to hard: {files}");

    // A stop: SIGTERM, and the process ends by itself, saying so.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {text}");
    assert!(text.contains("accessible to other users (mode 1777)"), "{text}");
    assert!(
        text.contains("stopping") && text.contains("signal=\"SIGTERM\"") && text.contains("aloft-coordinator stopped"),
        "{text}"
    );

    // A node enrolls; the CA is then lost (a restore of the databases alone): refused.
    let mut c = Coordinator::start();
    c.node_client("n1", json!({"node-role.kubernetes.io/worker": ""})).await;
    c.kill9();
    let ca = std::fs::read(c.data_dir().join("ca.crt")).unwrap();
    std::fs::remove_file(c.data_dir().join("ca.crt")).unwrap();
    std::fs::remove_file(c.data_dir().join("ca.key")).unwrap();
    std::fs::remove_file(c.data_dir().join("admin.token")).unwrap();
    let err = serve_until_listening(&c.data_dir(), "", "").map(|_| ()).expect_err("refused without its CA");
    assert!(
        err.contains("ca.crt") && err.contains("1 enrolled node, whose agents") && err.contains("--new-ca"),
        "{err}"
    );
    assert!(!c.data_dir().join("ca.crt").exists(), "nothing issued");
    assert!(!c.data_dir().join("admin.token").exists(), "a refused start writes no admin token");
    let (mut child, _) = serve_until_listening(&c.data_dir(), "", "--new-ca").expect("--new-ca serves");
    assert_ne!(std::fs::read(c.data_dir().join("ca.crt")).unwrap(), ca, "a new CA");
    let _ = child.kill();
    let _ = child.wait();
}

/// A serving certificate that cannot be loaded (a corrupt or truncated file after a bad restore),
/// or that another CA signed, is issued again from the CA before the coordinator says it
/// listens, and clients pinned to the CA go on. It used to print "listening on", then exit with rustls' "peer sent no
/// certificates", naming no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_certificate_that_cannot_be_loaded_is_issued_again() {
    let mut c = Coordinator::start();
    c.kill9();
    let cert = c.data_dir().join("serving.crt");
    std::fs::write(&cert, "junk\n").unwrap();
    c.restart();
    let version = c.client().get("/version").await.unwrap().into_result().unwrap();
    assert!(version["gitVersion"].is_string(), "{version}");
    assert!(c.is_running(), "{}", c.log_tail());
    let warned = c.log_lines_with("issuing a new one from the CA");
    assert!(warned.len() == 1 && warned[0].contains("serving.crt"), "{}", c.log_tail());
    assert!(std::fs::read_to_string(&cert).unwrap().starts_with("-----BEGIN CERTIFICATE-----"));

    // A CA replaced by hand (another coordinator's): the serving certificate is issued again
    // by it, and its clients get in (it was served as it was: "x509: unknown authority").
    let other = Coordinator::start();
    c.kill9();
    for f in ["ca.crt", "ca.key"] {
        std::fs::copy(other.data_dir().join(f), c.data_dir().join(f)).unwrap();
    }
    c.restart();
    assert_eq!(c.ca_pem(), other.ca_pem());
    let version = c.client().get("/version").await.unwrap().into_result().unwrap();
    assert!(version["gitVersion"].is_string(), "{version}");
}
