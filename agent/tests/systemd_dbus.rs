//! The agent's systemd/logind client ([`SystemdDbus`]) against the test implementation of
//! systemd1/login1 ([`FakeSystemd`]) on a private dbus-daemon ([`TestBus`]): every
//! ServiceManager method, the calls as recorded in order, the unit-file effects on disk, job
//! failures and timeouts reported as errors naming the unit, and the reboot recorded.

use aloft_agent::host::ServiceManager;
use aloft_agent::systemd::{SystemdDbus, SystemdError};
use aloft_agent::testing::{Arg, Call, FakeSystemd, TestBus};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A host root with three unit files: one in /etc wanted by multi-user.target, one in /usr/lib
/// required by a target, one static.
fn seeded_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc/systemd/system");
    let lib = dir.path().join("usr/lib/systemd/system");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(etc.join("a.service"), "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
        .unwrap();
    std::fs::write(lib.join("b.service"), "[Service]\nExecStart=/bin/true\n[Install]\nRequiredBy=basic.target\n")
        .unwrap();
    std::fs::write(lib.join("s.service"), "[Service]\nExecStart=/bin/true\n").unwrap();
    dir
}

struct Host {
    root: tempfile::TempDir,
    fake: FakeSystemd,
    services: SystemdDbus,
    _bus: TestBus,
}

async fn host() -> Host {
    let root = seeded_root();
    let bus = TestBus::start().expect("dbus-daemon");
    let fake = FakeSystemd::serve(&bus, root.path()).await.expect("fake systemd on the test bus");
    let services = SystemdDbus::connect(bus.address()).await.expect("client");
    Host { root, fake, services, _bus: bus }
}

fn link(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_link(root.join(rel)).ok().map(|p| p.to_string_lossy().into_owned())
}

#[tokio::test]
async fn every_method_reaches_the_fake_in_order() {
    let h = host().await;
    let sm: &dyn ServiceManager = &h.services;
    sm.daemon_reload().await.unwrap();
    sm.enable_units(&names(&["a.service", "b.service"])).await.unwrap();
    sm.disable_units(&names(&["b.service"])).await.unwrap();
    sm.mask_units(&names(&["m.service"])).await.unwrap();
    sm.unmask_units(&names(&["m.service"])).await.unwrap();
    sm.preset_units(&names(&["b.service"])).await.unwrap();
    sm.reload_unit("crio.service").await.unwrap();
    sm.restart_unit("crio.service").await.unwrap();
    sm.start_unit("kubelet.service").await.unwrap();
    sm.stop_unit("kubelet.service").await.unwrap();
    sm.reboot("aloft: applying rendered-worker-2").await.unwrap();
    assert_eq!(
        h.fake.call_strings(),
        vec![
            "Reload()",
            "EnableUnitFiles([a.service, b.service], false, true)",
            "DisableUnitFiles([b.service], false)",
            "MaskUnitFiles([m.service], false, true)",
            "UnmaskUnitFiles([m.service], false)",
            "PresetUnitFiles([b.service], false, true)",
            "ReloadUnit(crio.service, replace)",
            "RestartUnit(crio.service, replace)",
            "StartUnit(kubelet.service, replace)",
            "StopUnit(kubelet.service, replace)",
            "Reboot(false)",
        ]
    );
    // The structured form, as a test in another crate would inspect it.
    let calls = h.fake.calls();
    assert_eq!(
        calls[1],
        Call::new(
            "EnableUnitFiles",
            [Arg::List(names(&["a.service", "b.service"])), Arg::Bool(false), Arg::Bool(true)]
        )
    );
    assert_eq!(calls[1].units(), names(&["a.service", "b.service"]));
    assert_eq!(calls[7].units(), names(&["crio.service"]));
    assert!(calls[10].units().is_empty());
    assert_eq!(h.fake.reboots(), vec![false], "reboot recorded, interactive=false; nothing rebooted");
}

#[tokio::test]
async fn unit_file_effects_land_beneath_the_root() {
    let h = host().await;
    let r = h.root.path();
    h.services.enable_units(&names(&["a.service", "b.service"])).await.unwrap();
    assert_eq!(
        link(r, "etc/systemd/system/multi-user.target.wants/a.service").as_deref(),
        Some("/etc/systemd/system/a.service")
    );
    assert_eq!(
        link(r, "etc/systemd/system/basic.target.requires/b.service").as_deref(),
        Some("/usr/lib/systemd/system/b.service"),
        "links point at the unit's fragment, wherever it lives"
    );
    assert_eq!(h.services.unit_file_state("a.service").await.unwrap(), "enabled");
    assert_eq!(h.services.unit_file_state("s.service").await.unwrap(), "static");

    h.services.disable_units(&names(&["a.service"])).await.unwrap();
    assert!(!r.join("etc/systemd/system/multi-user.target.wants").exists());
    assert_eq!(h.services.unit_file_state("a.service").await.unwrap(), "disabled");

    h.services.mask_units(&names(&["s.service"])).await.unwrap();
    assert_eq!(link(r, "etc/systemd/system/s.service").as_deref(), Some("/dev/null"));
    assert_eq!(h.services.unit_file_state("s.service").await.unwrap(), "masked");
    h.services.unmask_units(&names(&["s.service"])).await.unwrap();
    assert!(std::fs::symlink_metadata(r.join("etc/systemd/system/s.service")).is_err());

    // Preset behaves as enable in the fake.
    h.services.preset_units(&names(&["a.service"])).await.unwrap();
    assert_eq!(h.services.unit_file_state("a.service").await.unwrap(), "enabled");

    // A unit that does not exist: systemd's error, naming the unit.
    let err = h.services.enable_units(&names(&["nope.service"])).await.unwrap_err().to_string();
    assert!(err.contains("EnableUnitFiles nope.service") && err.contains("NoSuchUnit"), "{err}");
    let err = h.services.unit_file_state("nope.service").await.unwrap_err().to_string();
    assert!(err.contains("nope.service"), "{err}");
}

#[tokio::test]
async fn active_state_follows_jobs() {
    let h = host().await;
    assert_eq!(h.services.active_state("crio.service").await.unwrap(), "inactive");
    h.services.start_unit("crio.service").await.unwrap();
    assert_eq!(h.services.active_state("crio.service").await.unwrap(), "active");
    h.services.stop_unit("crio.service").await.unwrap();
    assert_eq!(h.services.active_state("crio.service").await.unwrap(), "inactive", "read fresh, not cached");
    h.fake.set_active_state("crio.service", "failed");
    assert_eq!(h.services.active_state("crio.service").await.unwrap(), "failed");
}

#[tokio::test]
async fn failed_jobs_are_errors_naming_the_unit() {
    let h = host().await;
    for (result, unit) in
        [("failed", "crio.service"), ("timeout", "kubelet.service"), ("dependency", "chronyd.service")]
    {
        h.fake.fail_jobs_of(unit, result);
        let err = h.services.restart_unit(unit).await.unwrap_err().to_string();
        assert!(err.starts_with(&format!("restart {unit} failed:")), "{err}");
        assert!(err.contains(&format!("result \"{result}\"")), "{err}");
        assert_eq!(h.fake.active_state(unit), "failed");
    }
    let err = h.services.run_job(aloft_agent::systemd::JobKind::Reload, "crio.service").await.unwrap_err();
    assert!(matches!(err, SystemdError::JobFailed { ref unit, .. } if unit == "crio.service"), "{err}");
    // Other units are unaffected, and clearing the failures restores success.
    h.services.restart_unit("other.service").await.unwrap();
    h.fake.clear_failures();
    h.services.restart_unit("crio.service").await.unwrap();
}

#[tokio::test]
async fn a_job_that_never_finishes_times_out() {
    let h = host().await;
    h.fake.hang_jobs_of("stuck.service");
    let services = h.services.clone().with_job_timeout(Duration::from_millis(300));
    let err = services.stop_unit("stuck.service").await.unwrap_err().to_string();
    assert!(err.contains("stop stuck.service") && err.contains("did not finish within 300ms"), "{err}");
}

#[tokio::test]
async fn failed_calls_name_the_method_and_units() {
    let h = host().await;
    h.fake.fail_calls("EnableUnitFiles", Some("b.service"));
    h.services.enable_units(&names(&["a.service"])).await.unwrap();
    let err = h.services.enable_units(&names(&["a.service", "b.service"])).await.unwrap_err().to_string();
    assert!(err.contains("EnableUnitFiles a.service, b.service failed"), "{err}");
    assert!(err.contains("injected failure"), "{err}");
    h.fake.fail_calls("Reboot", None);
    assert!(h.services.reboot("x").await.is_err());
    assert!(h.fake.reboots().is_empty(), "a refused reboot is not recorded as one");
    h.fake.fail_calls("Reload", None);
    let err = h.services.daemon_reload().await.unwrap_err().to_string();
    assert!(err.starts_with("daemon-reload failed: "), "named as systemctl names it: {err}");
    // Every call is recorded, failed or not.
    assert_eq!(h.fake.calls().len(), 4);
}

/// A workload that fails to stop, as a Node's reason quotes it (the daemon formats errors with
/// their chain): the stop and the unit once, systemd's result once.
#[tokio::test]
async fn a_workload_that_fails_to_stop_is_said_once() {
    let h = host().await;
    let wants = h.root.path().join("etc/systemd/system/aloft-workloads.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink("/etc/systemd/system/a.service", wants.join("a.service")).unwrap();
    h.fake.fail_jobs_of("a.service", "failed");
    let err = aloft_agent::workloads::stop(&h.services, Duration::from_secs(5)).await.unwrap_err();
    let reason = format!("{:#}", anyhow::Error::from(err));
    assert!(reason.starts_with("failed to stop a workload: stop a.service failed: systemd job "), "{reason}");
    assert!(reason.ends_with(" finished with result \"failed\""), "{reason}");
    assert_eq!(reason.matches("a.service").count(), 1, "{reason}");
}

#[tokio::test]
async fn empty_batches_are_not_sent() {
    let h = host().await;
    h.services.enable_units(&[]).await.unwrap();
    h.services.disable_units(&[]).await.unwrap();
    h.services.mask_units(&[]).await.unwrap();
    h.services.unmask_units(&[]).await.unwrap();
    h.services.preset_units(&[]).await.unwrap();
    assert!(h.fake.calls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_jobs_are_matched_by_job_path() {
    let h = host().await;
    h.fake.fail_jobs_of("bad.service", "failed");
    let sm: Arc<dyn ServiceManager> = Arc::new(h.services.clone());
    let mut tasks = Vec::new();
    for i in 0..8 {
        let sm = sm.clone();
        let unit = if i == 3 { "bad.service".to_string() } else { format!("u{i}.service") };
        tasks.push(tokio::spawn(async move { (unit.clone(), sm.restart_unit(&unit).await) }));
    }
    for t in tasks {
        let (unit, res) = t.await.unwrap();
        assert_eq!(res.is_err(), unit == "bad.service", "{unit}: {res:?}");
    }
    assert_eq!(h.fake.calls().len(), 8);
}

#[tokio::test]
async fn the_bus_goes_away_with_its_owner() {
    let bus = TestBus::start().unwrap();
    let dir = bus.dir().to_path_buf();
    let address = bus.address().to_string();
    assert!(address.starts_with("unix:path="), "{address}");
    assert!(dir.join("bus").exists());
    drop(bus);
    assert!(!dir.exists(), "socket directory removed");
    assert!(SystemdDbus::connect(&address).await.is_err(), "daemon killed");
}

#[tokio::test]
async fn no_systemd_on_the_bus_is_a_connect_time_error() {
    let bus = TestBus::start().unwrap();
    let err = SystemdDbus::connect(bus.address()).await.unwrap_err().to_string();
    assert!(err.contains("Subscribe"), "{err}");
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.to_string_lossy().into_owned()
}

fn transient(unit: &str, program: String, output: &Path, timeout: Duration) -> aloft_agent::host::TransientRun {
    aloft_agent::host::TransientRun {
        unit: unit.into(),
        description: format!("test {unit}"),
        argv: vec![program],
        env: vec!["GREETING=hello there".into()],
        output: output.to_path_buf(),
        timeout,
    }
}

/// A transient run: StartTransientUnit with the program, its environment, its output file and
/// its timeout; the job's end read as the run's; a failed unit's Service properties read for
/// how, and the unit reset so the name can be used again.
#[tokio::test]
async fn transient_runs_end_as_their_programs_do() {
    use aloft_agent::host::TransientEnd;
    let h = host().await;
    let sm: &dyn ServiceManager = &h.services;
    let dir = h.root.path();
    let out = dir.join("out.log");
    std::fs::write(&out, "left from before\n").unwrap();

    let ok = script(dir, "ok", r#"echo "$GREETING"; echo to-stderr >&2; test -z "$HOME""#);
    let run = transient("aloft-t-1.service", ok.clone(), &out, Duration::from_secs(10));
    assert_eq!(sm.run_transient(&run).await.unwrap(), Some(TransientEnd::Succeeded));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello there\nto-stderr\n", "truncated, both streams, in order");
    assert_eq!(
        h.fake.call_strings(),
        vec![format!("StartTransientUnit(aloft-t-1.service, fail, [{ok}])")],
        "a success leaves nothing to reset"
    );

    let bad = script(dir, "bad", "echo broken; exit 7");
    let run = transient("aloft-t-2.service", bad, &out, Duration::from_secs(10));
    let end = sm.run_transient(&run).await.unwrap();
    assert_eq!(end, Some(TransientEnd::Failed { result: "exit-code".into(), status: Some(7) }));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "broken\n");
    assert_eq!(h.fake.call_strings().last().unwrap(), "ResetFailedUnit(aloft-t-2.service)");
    // Reset: the name can be run again.
    assert!(matches!(sm.run_transient(&run).await.unwrap(), Some(TransientEnd::Failed { .. })));

    let hang = script(dir, "hang", "echo started; exec sleep 30");
    let run = transient("aloft-t-3.service", hang, &out, Duration::from_millis(300));
    let started = std::time::Instant::now();
    assert_eq!(sm.run_transient(&run).await.unwrap(), Some(TransientEnd::TimedOut));
    assert!(started.elapsed() < Duration::from_secs(20), "stopped at its timeout");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "started\n");

    // A name still loaded is refused, naming it.
    let slow = script(dir, "slow", "sleep 2");
    let first = transient("aloft-t-4.service", slow, &out, Duration::from_secs(10));
    let services = &h.services;
    let (a, b) = tokio::join!(services.run_transient(&first), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        services.run_transient(&first).await
    });
    assert_eq!(a.unwrap(), TransientEnd::Succeeded);
    let err = b.unwrap_err().to_string();
    assert!(err.contains("StartTransientUnit(aloft-t-4.service)") && err.contains("UnitExists"), "{err}");
}

/// Health checks through systemd: each script is a transient unit, its output in
/// /run/aloft/health/NAME.log beneath the root, its failure the Degraded reason.
#[tokio::test]
async fn health_check_scripts_run_as_transient_units() {
    use aloft_agent::host::Root;
    use aloft_agent::os::health::{HealthChecks, OUTPUT_DIR};
    let h = host().await;
    let dir = h.root.path().join("etc/aloft/health.d");
    std::fs::create_dir_all(&dir).unwrap();
    script(&dir, "10-root", r#"echo "root is $ALOFT_ROOT""#);
    script(&dir, "20 disk?", "echo disk is full >&2; exit 3");
    let checks =
        HealthChecks { root: Root::new(h.root.path()), required_units: vec![], timeout: Duration::from_secs(10) };
    let f = checks.run(&h.services).await.unwrap_err();
    assert!(f.check.ends_with("etc/aloft/health.d/20 disk?"), "{f}");
    assert_eq!(f.output, "disk is full (exit status 3)");
    let logs = h.root.path().join(OUTPUT_DIR);
    assert_eq!(
        std::fs::read_to_string(logs.join("10-root.log")).unwrap(),
        format!("root is {}\n", h.root.path().display())
    );
    assert_eq!(std::fs::read_to_string(logs.join("20_disk_.log")).unwrap(), "disk is full\n");
    let calls = h.fake.call_strings();
    let started: Vec<_> = calls.iter().filter(|c| c.starts_with("StartTransientUnit(aloft-health-")).collect();
    assert_eq!(started.len(), 2, "{calls:?}");
    assert!(started[1].starts_with("StartTransientUnit(aloft-health-20_disk_-"), "{calls:?}");
    assert!(calls.last().unwrap().starts_with("ResetFailedUnit(aloft-health-20_disk_-"), "{calls:?}");

    // A check that hangs is stopped at the timeout; what it said comes with the reason.
    std::fs::remove_file(dir.join("20 disk?")).unwrap();
    script(&dir, "30-hang", "echo waiting for the network; exec sleep 30");
    let quick = HealthChecks { timeout: Duration::from_millis(500), ..checks.clone() };
    let f = quick.run(&h.services).await.unwrap_err();
    assert_eq!(f.output, "did not finish within 0.5 seconds: waiting for the network");
    std::fs::remove_file(dir.join("30-hang")).unwrap();
    assert_eq!(checks.run(&h.services).await.unwrap().len(), 1);
}
