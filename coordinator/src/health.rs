//! The coordinator's own health: whether its supervised loops (the render, node and drain
//! controllers, the Event TTL) are running, and whether the store answers.
//!
//! Why: a controller that panics is started again by [`crate::controllers::supervise`], but
//! while it waits to start (up to a minute when it keeps failing) no node is picked, and before
//! this the only sign was a log line. `/readyz` (Kubernetes' format, so load balancers, systemd
//! checks and `kubectl get --raw '/readyz?verbose'` read it) fails while a loop waits to start
//! again or the store does not answer, and `/metrics` counts every restart for alerting.

use crate::store::Store;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long the store check waits for a read before it fails.
const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the controllers' thread proves it still runs (see [`Health::beat`]).
pub const BEAT_EVERY: Duration = Duration::from_secs(1);
/// A thread that has not beaten for this long is stuck: a controller's pass that never yields
/// (a pass over 10,000 nodes takes ~15 ms), or a blocking call that never returns.
const BEAT_STALE: Duration = Duration::from_secs(15);

/// Where a supervised loop is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopState {
    /// Started and not stopped since.
    Running,
    /// Stopped (it panicked or returned); the supervisor starts it again at `at`.
    WaitingToStart { at: Instant },
}

/// What the coordinator knows about one supervised loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopHealth {
    pub state: LoopState,
    /// Times it stopped and was started again since the coordinator started.
    pub restarts: u64,
    /// When it last stopped.
    pub last_stop: Option<Instant>,
}

impl LoopHealth {
    /// A loop as first started.
    fn new() -> Self {
        LoopHealth { state: LoopState::Running, restarts: 0, last_stop: None }
    }
}

/// The supervised loops' states, shared by the supervisor (which writes) and the API server's
/// health and metrics endpoints (which read).
#[derive(Debug, Default)]
pub struct Health {
    loops: Mutex<BTreeMap<&'static str, LoopHealth>>,
    /// The controllers' passes, counted and timed (see [`crate::controllers::passes`]).
    passes: crate::controllers::passes::PassMetrics,
    /// When the controllers' thread last ran its heartbeat task; None before it started.
    beat: Mutex<Option<Instant>>,
}

impl Health {
    fn with_loops<T>(&self, f: impl FnOnce(&mut BTreeMap<&'static str, LoopHealth>) -> T) -> T {
        // A panic while the lock was held cannot leave a half-written entry: each change is
        // one assignment.
        let mut loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut loops)
    }

    /// `name` was started (for the first time, or again).
    pub fn started(&self, name: &'static str) {
        self.with_loops(|loops| loops.entry(name).or_insert_with(LoopHealth::new).state = LoopState::Running);
    }

    /// `name` stopped; the supervisor starts it again after `restart_in`.
    pub fn stopped(&self, name: &'static str, restart_in: Duration) {
        let now = Instant::now();
        self.with_loops(|loops| {
            let l = loops.entry(name).or_insert_with(LoopHealth::new);
            l.state = LoopState::WaitingToStart { at: now + restart_in };
            l.restarts += 1;
            l.last_stop = Some(now);
        });
    }

    /// Every loop seen so far, by name.
    /// Where the controllers record their passes, and `/metrics` reads them.
    pub fn passes(&self) -> &crate::controllers::passes::PassMetrics {
        &self.passes
    }

    pub fn loops(&self) -> BTreeMap<&'static str, LoopHealth> {
        self.with_loops(|loops| loops.clone())
    }

    /// The controllers' thread is running: a task on its runtime calls this every
    /// [`BEAT_EVERY`]. A panic is caught by the supervisor, but a pass that never yields stops
    /// every controller of the thread without one, and only the missing beat shows it.
    pub fn beat(&self) {
        *self.beat.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Why the controllers' thread is not running, if it is not.
    fn thread_failure(&self) -> Option<String> {
        match *self.beat.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Some("the controllers' thread has not started".into()),
            Some(t) if t.elapsed() > BEAT_STALE => {
                Some(format!("the controllers' thread has not run for {}s", t.elapsed().as_secs()))
            }
            Some(_) => None,
        }
    }
}

/// The checks that decide whether the coordinator is alive, for the systemd watchdog: the
/// controllers' thread runs and the store reads and writes. A controller waiting to be started
/// again is not among them: its supervisor starts it, and restarting the process for it would
/// drop every agent's watch.
const LIVENESS: &[&str] = &["store", "controllers"];

/// Whether `checks` (from [`checks`]) say the coordinator is alive; the first failure otherwise.
pub fn alive(checks: &[Check]) -> Result<(), String> {
    match checks.iter().find(|c| LIVENESS.contains(&c.name.as_str()) && c.failure.is_some()) {
        Some(c) => Err(format!("{}: {}", c.name, c.failure.as_deref().unwrap_or_default())),
        None => Ok(()),
    }
}

/// Why the store is not working, if it is not: a read must answer, and the writer must take a
/// write (a commit stuck in fsync holds every write while reads still answer).
async fn store_failure(store: &dyn Store) -> Option<String> {
    let secs = STORE_CHECK_TIMEOUT.as_secs();
    match tokio::time::timeout(STORE_CHECK_TIMEOUT, store.revision()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Some(format!("reading the store: {e}")),
        Err(_) => return Some(format!("the store did not answer a read within {secs}s")),
    }
    match tokio::time::timeout(STORE_CHECK_TIMEOUT, store.check_writes()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("the store's writer: {e}")),
        Err(_) => Some(format!("the store's writer did not take a write within {secs}s")),
    }
}

/// One line of `/readyz?verbose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// `ping`, `store`, `controllers` or `controller/<name>`.
    pub name: String,
    /// None when it passed; why it failed otherwise.
    pub failure: Option<String>,
    /// Facts worth showing even when it passed (a loop's earlier restarts).
    pub note: Option<String>,
}

impl Check {
    /// A check that passed, with nothing to add.
    pub fn passed(name: &str) -> Self {
        Check { name: name.into(), failure: None, note: None }
    }
}

/// The checks behind `/readyz` and `/healthz`, in a fixed order.
pub async fn checks(health: &Health, store: &dyn Store) -> Vec<Check> {
    let mut out = vec![Check::passed("ping")];
    out.push(Check { name: "store".into(), failure: store_failure(store).await, note: None });
    out.push(Check { name: "controllers".into(), failure: health.thread_failure(), note: None });
    let now = Instant::now();
    for (name, l) in health.loops() {
        let stops = match l.restarts {
            1 => "stopped once".to_string(),
            n => format!("stopped {n} times"),
        };
        let (failure, note) = match l.state {
            // The reason is in the coordinator's log (error level, with the panic's message);
            // this endpoint needs no token, so it names no more than the loop and its timing.
            LoopState::WaitingToStart { at } => (
                Some(format!(
                    "{stops}, starting again in {}s (the reason is in the coordinator's log)",
                    at.saturating_duration_since(now).as_secs()
                )),
                None,
            ),
            LoopState::Running => {
                let note = l.last_stop.map(|t| format!("{stops}, last {}s ago", now.duration_since(t).as_secs()));
                (None, note)
            }
        };
        out.push(Check { name: format!("controller/{name}"), failure, note });
    }
    out
}

/// What a health endpoint answers: 200 or 500, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ok: bool,
    pub body: String,
}

/// Kubernetes' health output for `checks` under `endpoint` (`readyz`, `healthz`): `ok` when all
/// passed and `verbose` is off; otherwise one `[+]name ok` / `[-]name failed: why` line each,
/// then `<endpoint> check passed|failed`. A failing endpoint always lists its checks.
pub fn verdict(endpoint: &str, checks: &[Check], verbose: bool) -> Verdict {
    let ok = checks.iter().all(|c| c.failure.is_none());
    if ok && !verbose {
        return Verdict { ok, body: "ok".into() };
    }
    let mut body = String::new();
    for c in checks {
        match (&c.failure, &c.note) {
            (Some(why), _) => body.push_str(&format!("[-]{} failed: {why}\n", c.name)),
            (None, Some(note)) => body.push_str(&format!("[+]{} ok ({note})\n", c.name)),
            (None, None) => body.push_str(&format!("[+]{} ok\n", c.name)),
        }
    }
    body.push_str(&format!("{endpoint} check {}\n", if ok { "passed" } else { "failed" }));
    Verdict { ok, body }
}

/// `/readyz/<name>`: one check, or None when there is no check by that name.
pub fn single(checks: &[Check], name: &str) -> Option<Verdict> {
    let c = checks.iter().find(|c| c.name == name)?;
    Some(match &c.failure {
        None => Verdict { ok: true, body: "ok".into() },
        Some(why) => Verdict { ok: false, body: format!("[-]{} failed: {why}\n", c.name) },
    })
}

/// The checks minus those `exclude` names (`?exclude=store&exclude=...`, as Kubernetes); an
/// unknown name is an error naming it and the known ones, so a typo cannot hide a failing check.
pub fn without(checks: Vec<Check>, exclude: &[String]) -> Result<Vec<Check>, String> {
    if let Some(unknown) = exclude.iter().find(|x| !checks.iter().any(|c| &&c.name == x)) {
        let known: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        return Err(format!("no health check named {unknown:?} to exclude; the checks are {}", known.join(", ")));
    }
    Ok(checks.into_iter().filter(|c| !exclude.contains(&c.name)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, failure: Option<&str>, note: Option<&str>) -> Check {
        Check { name: name.into(), failure: failure.map(Into::into), note: note.map(Into::into) }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_loop_fails_until_it_runs_again_and_its_restarts_are_counted() {
        let h = Health::default();
        h.started("node");
        h.started("render");
        assert_eq!(h.loops()["node"], LoopHealth { state: LoopState::Running, restarts: 0, last_stop: None });
        let t = Instant::now();
        h.stopped("node", Duration::from_secs(4));
        let l = &h.loops()["node"];
        assert_eq!(l.state, LoopState::WaitingToStart { at: t + Duration::from_secs(4) });
        assert_eq!((l.restarts, l.last_stop), (1, Some(t)));
        tokio::time::advance(Duration::from_secs(4)).await;
        h.started("node");
        h.stopped("node", Duration::from_secs(8));
        h.started("node");
        let l = &h.loops()["node"];
        assert_eq!((l.state.clone(), l.restarts), (LoopState::Running, 2));
        assert_eq!(h.loops()["render"].restarts, 0, "another loop is untouched");
    }

    /// The watchdog's gate: alive while the controllers' thread beats and the store answers;
    /// a thread that stops beating fails it (and `/readyz`), a stopped controller does not.
    /// (Real time: the store answers from its own threads; the clock is moved on only to age
    /// the beat.)
    #[tokio::test]
    async fn alive_needs_a_recent_beat_and_a_store_that_answers() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SqliteStore::open(&dir.path().join("aloft.db")).unwrap();
        let h = Health::default();
        let err = alive(&checks(&h, &store).await).unwrap_err();
        assert_eq!(err, "controllers: the controllers' thread has not started");
        h.beat();
        assert_eq!(alive(&checks(&h, &store).await), Ok(()));
        h.started("node");
        h.stopped("node", Duration::from_secs(60));
        assert_eq!(alive(&checks(&h, &store).await), Ok(()), "the supervisor handles a stopped controller");
        tokio::time::pause();
        tokio::time::advance(BEAT_STALE + Duration::from_secs(1)).await;
        tokio::time::resume();
        let c = checks(&h, &store).await;
        assert_eq!(alive(&c).unwrap_err(), "controllers: the controllers' thread has not run for 16s");
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ping", "store", "controllers", "controller/node"]);
        assert_eq!(c[2].failure.as_deref(), Some("the controllers' thread has not run for 16s"));
        // 60 s after the stop, of which 16 s (and the test's own real milliseconds) have passed.
        let secs = c[3].failure.as_deref().and_then(|f| {
            f.strip_prefix("stopped once, starting again in ")?
                .strip_suffix("s (the reason is in the coordinator's log)")
        });
        // At most 44 s; lower by as many whole seconds as a slow runner took between the steps.
        let secs = secs.and_then(|n| n.parse::<u64>().ok());
        assert!(secs.is_some_and(|n| (30..=44).contains(&n)), "{c:?}");
        h.beat();
        assert_eq!(alive(&checks(&h, &store).await), Ok(()));
        let stuck = [Check::passed("ping"), check("store", Some("no answer"), None)];
        assert_eq!(alive(&stuck), Err("store: no answer".into()), "a store that does not answer");
    }

    #[test]
    fn verdicts_follow_kubernetes_format() {
        let good = [check("ping", None, None), check("controller/node", None, Some("stopped once, last 9s ago"))];
        assert_eq!(verdict("readyz", &good, false), Verdict { ok: true, body: "ok".into() });
        assert_eq!(
            verdict("readyz", &good, true).body,
            "[+]ping ok\n[+]controller/node ok (stopped once, last 9s ago)\nreadyz check passed\n"
        );
        let bad = [check("ping", None, None), check("store", Some("no answer"), None)];
        let v = verdict("healthz", &bad, false);
        assert!(!v.ok);
        assert_eq!(
            v.body, "[+]ping ok\n[-]store failed: no answer\nhealthz check failed\n",
            "listed even without verbose"
        );
        assert_eq!(single(&bad, "ping"), Some(Verdict { ok: true, body: "ok".into() }));
        assert_eq!(single(&bad, "store").map(|v| v.ok), Some(false));
        assert_eq!(single(&bad, "etcd"), None);
    }

    #[test]
    fn exclusions_must_name_a_check() {
        let all = vec![check("ping", None, None), check("store", Some("down"), None)];
        let left = without(all.clone(), &["store".into()]).unwrap();
        assert_eq!(left, vec![check("ping", None, None)]);
        assert!(verdict("readyz", &left, false).ok, "the excluded failure no longer counts");
        let err = without(all, &["stor".into()]).unwrap_err();
        assert!(err.contains("\"stor\"") && err.contains("ping, store"), "{err}");
    }
}
