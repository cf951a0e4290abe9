//! Crash safety: kill -9 at every failpoint of an apply (every occurrence of every named point),
//! restart, recover, and the node is exactly on the new config, or exactly on the old one with a
//! Degraded reason — never in between. Whole trees are compared (type, mode, owner, bytes of
//! every entry), not samples.
//!
//! Each crash runs in a child process: this test binary re-executed with `--exact crash_child --ignored`
//! and the scenario in an environment variable. The child arms the failpoint with a callback
//! that sends itself SIGKILL at the chosen hit, so nothing runs after it — no unwinding, no
//! destructors, no buffered writes — exactly like power loss for the process.

mod support;

use aloft_agent::apply::{self, Recovery, FAILPOINTS};
use aloft_agent::host::Root;
use aloft_agent::journal::Journal;
use aloft_agent::ondisk;
use aloft_api::MachineConfigSpec;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use support::*;

const CHILD_ENV: &str = "ALOFT_CRASH_CHILD";

/// The tests' old config plus one file too large for the journal to keep inline: the update
/// changes it, so its new bytes and its pre-image both go through blobs, and every crash point
/// of that path (journal-after-blob among them) is walked along with the inline one.
fn crash_old() -> MachineConfigSpec {
    with_big_file(old_config(), b'o')
}

/// The tests' new config plus the large file, changed.
fn crash_new() -> MachineConfigSpec {
    with_big_file(new_config(), b'n')
}

fn with_big_file(mut spec: MachineConfigSpec, fill: u8) -> MachineConfigSpec {
    let big = vec![fill; aloft_agent::journal::INLINE_MAX + 1];
    let files = spec.config.pointer_mut("/storage/files").and_then(Value::as_array_mut).unwrap();
    files.push(json!({"path": "/etc/aloft-test/big.bin", "mode": 420,
                      "contents": {"source": gzip_url(&big), "compression": "gzip"}}));
    spec
}
const AGENT_STATE: &str = "var/lib/aloft";

/// What a child does: count failpoint hits, or die at the `nth` hit of `point` during `apply`
/// (old -> new) or `recover`. `failing` makes enabling new.service fail, to drive the rollback.
#[derive(Clone)]
struct Child {
    root: String,
    mode: &'static str,
    point: String,
    nth: usize,
    failing: bool,
    out: String,
}

fn services(root: &Path, failing: bool) -> RecordingServices {
    let s = RecordingServices::on(root);
    if failing {
        s.failing_enable_of("new.service")
    } else {
        s
    }
}

/// The entry point of the child processes, run with `--ignored`: ignored in a normal test run,
/// where it would count as a passing test that checked nothing.
#[test]
#[ignore = "the crash tests' child process (run by them with --ignored)"]
fn crash_child() {
    let Ok(arg) = std::env::var(CHILD_ENV) else { return };
    let v: Value = serde_json::from_str(&arg).unwrap();
    let root_dir = v["root"].as_str().unwrap().to_string();
    let root = Root::new(&root_dir);
    let journal = Journal::new(&root);
    let svc = services(Path::new(&root_dir), v["failing"].as_bool().unwrap());
    let mode = v["mode"].as_str().unwrap().to_string();
    static COUNTS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());
    if mode == "count" {
        for p in FAILPOINTS {
            fail::cfg_callback(*p, move || *COUNTS.lock().unwrap().entry(p.to_string()).or_default() += 1).unwrap();
        }
    } else {
        let nth = v["nth"].as_u64().unwrap() as usize;
        let hits = Arc::new(AtomicUsize::new(0));
        fail::cfg_callback(v["point"].as_str().unwrap(), move || {
            if hits.fetch_add(1, Ordering::SeqCst) + 1 == nth {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        })
        .unwrap();
    }
    if mode == "recover" {
        let _ = block_on(apply::recover(&root, &journal, &svc));
    } else {
        let _ = block_on(apply::apply(&root, &journal, &crash_old(), &crash_new(), &svc));
    }
    if mode == "count" {
        let counts = COUNTS.lock().unwrap().clone();
        std::fs::write(v["out"].as_str().unwrap(), serde_json::to_vec(&counts).unwrap()).unwrap();
    }
}

/// Runs a child; true when it was killed at its failpoint, false when it ran to the end.
fn run_child(c: &Child) -> bool {
    let arg =
        json!({"root": c.root, "mode": c.mode, "point": c.point, "nth": c.nth, "failing": c.failing, "out": c.out});
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, arg.to_string())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    match out.status.signal() {
        Some(9) => true,
        None if out.status.success() => false,
        _ => panic!(
            "child {} {}#{} failed: {:?}\n{}\n{}",
            c.mode,
            c.point,
            c.nth,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A node on the old config (the starting point of every crash run).
fn node_on_old() -> (tempfile::TempDir, Root) {
    let (dir, root) = node();
    let svc = RecordingServices::on(dir.path());
    block_on(apply::apply(&root, &Journal::new(&root), &MachineConfigSpec::default(), &crash_old(), &svc)).unwrap();
    (dir, root)
}

/// A copy of `template` (a node on the old config): `cp -a` keeps modes, owners and symlinks,
/// and is much cheaper than applying the old config again with all its fsyncs.
fn copy_of(template: &Path) -> (tempfile::TempDir, Root) {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp").arg("-a").arg(format!("{}/.", template.display())).arg(dir.path()).status().unwrap();
    assert!(st.success());
    let root = Root::new(dir.path());
    (dir, root)
}

/// Runs `cases` on a few threads: each crash run waits on fsync far more than it computes.
fn parallel<T: Send>(cases: Vec<T>, f: impl Fn(T) + Sync) {
    let queue = Mutex::new(cases);
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let Some(case) = queue.lock().unwrap().pop() else { break };
                f(case);
            });
        }
    });
}

fn tree(root: &Path) -> BTreeMap<String, String> {
    snapshot(root, &[AGENT_STATE])
}

/// The trees a run may end in: (on the old config, on the new config).
fn expected() -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (dir, root) = node_on_old();
    let old = tree(dir.path());
    let svc = RecordingServices::on(dir.path());
    block_on(apply::apply(&root, &Journal::new(&root), &crash_old(), &crash_new(), &svc)).unwrap();
    (old, tree(dir.path()))
}

fn counts(failing: bool) -> BTreeMap<String, usize> {
    let (dir, _root) = node_on_old();
    let out = dir.path().join("counts.json");
    let c = Child {
        root: dir.path().display().to_string(),
        mode: "count",
        point: String::new(),
        nth: 0,
        failing,
        out: out.display().to_string(),
    };
    assert!(!run_child(&c));
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

/// After a crash: recover in this process and check the node is wholly on one config.
fn recover_and_check(
    dir: &Path,
    root: &Root,
    failing: bool,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    what: &str,
) {
    let svc = services(dir, failing);
    let journal = Journal::new(root);
    let outcome = block_on(apply::recover(root, &journal, &svc)).unwrap_or_else(|e| panic!("{what}: recover: {e}"));
    let got = tree(dir);
    match outcome {
        Recovery::Applied { new: spec, .. } => {
            assert_eq!(*spec, crash_new(), "{what}: recovered some other apply");
            assert!(!failing, "{what}: the failing apply cannot have been applied");
            assert_eq!(&got, new, "{what}: not exactly the new config:\n{}", diff(new, &got));
            ondisk::verify(root, &crash_new()).unwrap_or_else(|d| panic!("{what}: {d}"));
        }
        Recovery::RolledBack { reason, old: spec } => {
            assert_eq!(*spec, crash_old(), "{what}: rolled back some other apply");
            assert!(failing, "{what}: rolled back without a failure: {reason}");
            assert!(reason.contains("new.service: injected failure"), "{what}: {reason}");
            assert_eq!(&got, old, "{what}: not exactly the old config:\n{}", diff(old, &got));
            ondisk::verify(root, &crash_old()).unwrap_or_else(|d| panic!("{what}: {d}"));
        }
        Recovery::Nothing => {
            // Killed before the journal was written: nothing on the host changed, and the agent
            // simply applies again.
            assert_eq!(&got, old, "{what}: changed without a journal:\n{}", diff(old, &got));
            let again = block_on(apply::apply(root, &journal, &crash_old(), &crash_new(), &svc));
            assert_eq!(again.is_ok(), !failing, "{what}: retry: {again:?}");
            assert_eq!(&tree(dir), if failing { old } else { new }, "{what}: retry");
        }
    }
}

#[test]
fn kill_at_every_failpoint_then_recover() {
    let (old, new) = expected();
    let (template, _) = node_on_old();
    let mut reached = BTreeSet::new();
    let mut cases = Vec::new();
    for failing in [false, true] {
        for (point, n) in counts(failing) {
            reached.insert(point.clone());
            cases.extend((1..=n).map(|nth| (failing, point.clone(), nth)));
        }
    }
    let missing: Vec<&&str> = FAILPOINTS.iter().filter(|p| !reached.contains(**p)).collect();
    assert!(missing.is_empty(), "failpoints never reached: {missing:?}");
    let runs = cases.len();
    parallel(cases, |(failing, point, nth)| {
        let (dir, root) = copy_of(template.path());
        let c = Child {
            root: dir.path().display().to_string(),
            mode: "apply",
            point: point.clone(),
            nth,
            failing,
            out: String::new(),
        };
        let what = format!("{} at {point}#{nth}", if failing { "failing apply" } else { "apply" });
        assert!(run_child(&c), "{what}: the failpoint was not reached");
        recover_and_check(dir.path(), &root, failing, &old, &new, &what);
    });
    eprintln!("{runs} crash runs over {} failpoints", FAILPOINTS.len());
}

#[test]
fn kill_again_during_recovery_then_recover() {
    let (old, new) = expected();
    let (template, _) = node_on_old();
    let mut cases = Vec::new();
    for failing in [false, true] {
        cases.extend(counts(failing).into_keys().map(|point| (failing, point)));
    }
    let total = cases.len();
    let killed_twice = AtomicUsize::new(0);
    parallel(cases, |(failing, point)| {
        let (dir, root) = copy_of(template.path());
        let mut c = Child {
            root: dir.path().display().to_string(),
            mode: "apply",
            point: point.clone(),
            nth: 1,
            failing,
            out: String::new(),
        };
        assert!(run_child(&c));
        c.mode = "recover";
        let twice = run_child(&c);
        if twice {
            killed_twice.fetch_add(1, Ordering::SeqCst);
        }
        let what =
            format!("{} at {point}#1, recovery killed: {twice}", if failing { "failing apply" } else { "apply" });
        recover_and_check(dir.path(), &root, failing, &old, &new, &what);
    });
    // The recovery passes the failpoints of the steps it redoes: were none of them reached,
    // this test would only repeat the single kill above.
    let killed_twice = killed_twice.into_inner();
    eprintln!("{killed_twice} of {total} recoveries killed at their failpoint");
    assert!(killed_twice > 0, "no recovery reached the failpoint its apply was killed at ({total} cases)");
}
