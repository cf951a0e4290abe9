//! A download gives way: a pull whose client hangs up is cancelled in the helper, and an update
//! cancels the agent's pre-stage download instead of waiting up to an hour behind it. Real
//! `aloft-os-helper` processes and libostree pulls, over HTTP on loopback from a server that
//! holds object downloads for as long as the test says (a slow link).

use aloft_agent::os::client::HelperClient;
use aloft_agent::os::{OsBackend, OsError, OsHandle};
use aloft_api::osimage::{self, OstreeImage};
use aloft_osd::testkit::{self, Gate, GpgKey, HelperProcess, ServerRepo, StaticServer, REF};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Far longer than a cancel takes; a wait that reaches it is a failure, not a measurement.
const LONG: Duration = Duration::from_secs(30);

struct Fx {
    dir: tempfile::TempDir,
    gate: Gate,
    http: StaticServer,
    v2: String,
    helper: HelperProcess,
}

fn helper_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_aloft-os-helper"))
}

fn fixture() -> Fx {
    fixture_with(Gate::shut(), &[])
}

/// A fixture whose server holds object downloads behind `gate`, and whose helper runs with
/// `flags`.
fn fixture_with(gate: Gate, flags: &[&str]) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let key = GpgKey::generate(dir.path(), "k").unwrap();
    let server = ServerRepo::create(&dir.path().join("srv/repo")).unwrap();
    let tree = |v: &str| -> PathBuf {
        let t = dir.path().join(format!("tree-{v}"));
        testkit::write_tree(&t, v, 20).unwrap();
        t
    };
    let base = server.commit(&tree("1"), REF, "v1", Some(&key)).unwrap();
    let v2 = server.commit(&tree("2"), REF, "v2", Some(&key)).unwrap();
    let sysroot = dir.path().join("sysroot");
    testkit::init_sysroot(&sysroot, &server, &base, &["root=/dev/vda"]).unwrap();
    let http = StaticServer::start_gated(&dir.path().join("srv"), Some(gate.clone())).unwrap();
    let helper =
        HelperProcess::start_with(helper_bin(), &dir.path().join("run"), &sysroot, &key.keyring, flags).unwrap();
    Fx { dir, gate, http, v2, helper }
}

impl Fx {
    fn image(&self, checksum: &str) -> OstreeImage {
        osimage::parse(&format!("ostree+{}#{REF}@{checksum}", self.http.url("repo"))).unwrap().unwrap()
    }

    fn client(&self) -> HelperClient {
        self.helper.client()
    }
}

/// Run `f` on a thread; its result, or None if it has not finished within `LONG`.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LONG).ok()
}

/// An agent restarted in the middle of a download (or a call it gave up on) leaves the helper
/// pulling for nobody, with the write lock held: the next write (here the drop of a stray staged
/// deployment, which every agent start makes) waited for the whole download. The helper now
/// watches a pull's connection and cancels libostree's pull when its client hangs up; the pull
/// is then asked again and completes.
#[test]
fn a_pull_whose_client_hangs_up_is_cancelled_and_frees_the_helper() {
    let fx = fixture();
    let mut conn = UnixStream::connect(&fx.helper.socket).unwrap();
    let request = format!(r#"{{"v":1,"op":"pull","image":"{}"}}"#, fx.image(&fx.v2));
    conn.write_all(format!("{request}\n").as_bytes()).unwrap();
    assert!(fx.gate.wait_held(LONG), "the pull never asked for an object:\n{}", fx.helper.log_text());
    drop(conn);

    let client = fx.client();
    let dropped = within(move || client.drop_staged());
    let Some(dropped) = dropped else {
        panic!("the next write still waits behind the abandoned pull:\n{}", fx.helper.log_text());
    };
    assert_eq!(dropped.unwrap(), None, "nothing was staged");
    let log = fx.helper.log_text();
    assert!(log.contains("the client hung up: cancelling its call") && log.contains("pull cancelled"), "{log}");
    assert!(!fx.client().has_verified_commit(&fx.image(&fx.v2)).unwrap(), "the commit is not complete");

    fx.gate.open();
    let report = fx.client().pull(&fx.image(&fx.v2)).unwrap();
    assert!(!report.already_present);
    assert!(fx.client().has_verified_commit(&fx.image(&fx.v2)).unwrap());
}

/// A mirror that accepts the connection and then sends nothing (a hung proxy, a broken CDN
/// node) held a pull, the helper's write lock and the node's update for ever: libostree 2022.7
/// has no timeout for it. The helper stops a pull whose progress has not moved for
/// `--pull-stall-seconds`, says so in a Pull error (the agent reports it and tries again), and
/// serves the next write at once; once the mirror sends again, the pull completes.
#[test]
fn a_pull_from_a_mirror_that_stopped_sending_is_stopped_as_stalled() {
    let fx = fixture_with(Gate::shut(), &["--pull-stall-seconds", "2"]);
    let client = fx.client();
    let image = fx.image(&fx.v2);
    let started = std::time::Instant::now();
    let Some(result) = within(move || client.pull(&image)) else {
        panic!("the stalled pull was never given up:\n{}", fx.helper.log_text());
    };
    let elapsed = started.elapsed();
    assert!(fx.gate.held() > 0, "the pull never asked for an object");
    let log = fx.helper.log_text();
    match result {
        Err(OsError::Pull { checksum, message, .. }) => {
            assert_eq!(checksum, fx.v2);
            assert!(message.contains("stalled: nothing arrived from the mirror for 2 s"), "{message}");
        }
        other => panic!("expected a stalled pull, got {other:?}\n{log}"),
    }
    assert!(elapsed >= Duration::from_secs(2), "given up after {elapsed:?}, before the stall time");
    assert!(log.contains("stopping the pull worker: stalled"), "{log}");
    assert_eq!(fx.client().drop_staged().unwrap(), None, "the next write is served");
    assert!(!fx.client().has_verified_commit(&fx.image(&fx.v2)).unwrap(), "the commit is not complete");

    fx.gate.open();
    fx.client().pull(&fx.image(&fx.v2)).expect("the pull completes once the mirror sends");
    assert!(fx.client().has_verified_commit(&fx.image(&fx.v2)).unwrap());
}

/// The stall guard is about silence, not duration: a mirror that sends one object at a time,
/// the whole download taking longer than the stall time, is not stopped. Meanwhile the helper's
/// status (a read, served beside the pull) shows how far the download has come, and once it is
/// over shows none.
#[test]
fn a_slow_mirror_that_keeps_sending_is_not_stalled() {
    let stall = Duration::from_secs(3);
    let fx = fixture_with(Gate::trickle(Duration::from_millis(600)), &["--pull-stall-seconds", "3"]);
    let client = fx.client();
    let image = fx.image(&fx.v2);
    let started = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(client.pull(&image));
    });
    let mut seen = Vec::new();
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(result) => break result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if started.elapsed() < LONG => {}
            Err(_) => panic!("the slow pull never finished:\n{}", fx.helper.log_text()),
        }
        if let Some(d) = fx.client().status().expect("the status is served during a pull").download {
            seen.push(d);
        }
    };
    let elapsed = started.elapsed();
    assert!(seen.iter().all(|d| d.checksum == fx.v2), "{seen:?}");
    let moved = seen.iter().find(|d| d.progress.fetched > 0 && d.progress.bytes > 0);
    assert!(moved.is_some(), "the status never showed the download moving: {seen:?}");
    assert!(seen.iter().all(|d| d.progress.fetched <= d.progress.requested), "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].progress.fetched <= w[1].progress.fetched),
        "the fetched count went back: {seen:?}"
    );
    assert_eq!(fx.client().status().unwrap().download, None, "the download is over");
    let report = result.unwrap_or_else(|e| panic!("{e}\n{}", fx.helper.log_text()));
    assert!(!report.already_present);
    assert!(
        elapsed > stall,
        "the download took {elapsed:?}, not longer than the stall time: the test would not tell a timeout from a stall guard ({} objects held)",
        fx.gate.held()
    );
    assert!(fx.client().has_verified_commit(&fx.image(&fx.v2)).unwrap());
}

/// The agent's side: a pre-stage download (`run_background`) is cancelled by any other OS
/// write, which then runs at once, and the daemon learns which download to start again; but a
/// pull of the very commit being downloaded waits for the download and finds it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_cancels_a_prestage_download_but_waits_for_the_commit_it_needs() {
    let fx = fixture();
    let handle = OsHandle::new(Arc::new(fx.client()));
    let img = fx.image(&fx.v2);

    let (h, i) = (handle.clone(), img.clone());
    let background = tokio::spawn(async move {
        h.run_background("rendered-worker-2", &i.checksum.clone(), move |b, c| b.pull_cancellable(&i, c)).await
    });
    let gate = fx.gate.clone();
    assert!(tokio::task::spawn_blocking(move || gate.wait_held(LONG)).await.unwrap(), "the download never started");
    let dropped = tokio::time::timeout(LONG, handle.run(|b| b.drop_staged()))
        .await
        .expect("the drop waited behind the background download");
    assert_eq!(dropped.unwrap(), None);
    let e = tokio::time::timeout(LONG, background).await.unwrap().unwrap().unwrap_err();
    assert!(matches!(e, OsError::Cancelled { .. }), "{e:?}");
    assert_eq!(handle.take_cancelled().as_deref(), Some("rendered-worker-2"));
    assert_eq!(handle.take_cancelled(), None, "told once");

    // The same commit, downloaded in the background again, and needed by an update meanwhile.
    let held_before = fx.gate.held();
    let (h, i) = (handle.clone(), img.clone());
    let background = tokio::spawn(async move {
        h.run_background("rendered-worker-2", &i.checksum.clone(), move |b, c| b.pull_cancellable(&i, c)).await
    });
    let gate = fx.gate.clone();
    let started = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + LONG;
        while gate.held() == held_before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        gate.held() > held_before
    });
    assert!(started.await.unwrap(), "the second download never started");
    let (h, i) = (handle.clone(), img.clone());
    let update = tokio::spawn(async move { h.run_pull(&i.checksum.clone(), move |b| b.pull(&i)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    fx.gate.open();
    let downloaded = tokio::time::timeout(LONG, background).await.unwrap().unwrap();
    assert!(!downloaded.expect("the background download was not cancelled").already_present);
    let report = tokio::time::timeout(LONG, update).await.unwrap().unwrap().unwrap();
    assert!(report.already_present, "the update's pull found the commit the background download fetched");
    assert_eq!(handle.take_cancelled(), None);
    drop(fx.dir);
}
