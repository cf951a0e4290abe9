//! Limits on the requests the API serves at once, as kube-apiserver's `--max-requests-inflight`
//! and `--max-mutating-requests-inflight`: a request over its kind's limit is answered at once
//! with `429 Too Many Requests`, `Retry-After: 1` and kube-apiserver's text, and the client
//! tries again (client-go, kubectl and aloft's own client wait the `Retry-After` and resend).
//! A host's first-boot `/config/<pool>` gets `503` instead: its Ignition asks again only after
//! a 5xx.
//!
//! Why: a fleet's agents all come back together (a coordinator restart, a network that heals,
//! thousands of hosts enrolling from one image). Without a limit every one of their requests is
//! taken in and waits for the store's writer; the waits grow past the clients' timeouts, the
//! clients send again, and the coordinator spends its time on requests nobody is waiting for.
//! A quick 429 costs a few microseconds and tells the client when to come back.
//!
//! As in kube-apiserver: reads (`get`, `list`; `HEAD` and `OPTIONS` too) and writes count
//! apart; watches are not counted (they last as long as the client keeps them); an admin's
//! request is always served (kube-apiserver serves `system:masters` whatever the load: the
//! operator must be able to look and act); a limit of 0 turns that kind's limit off. The health
//! endpoints and `/version` are outside it (a load balancer's probe must not read a busy
//! coordinator as a dead one). Only in-flight limits: kube-apiserver's priority and fairness
//! (queues per flow) is not built.

use crate::auth::{Identity, Role};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The default of `--max-requests-inflight`: OpenShift's for its kube-apiserver (upstream's 400
/// is sized for a cluster of a few hundred nodes).
pub const DEFAULT_READ_ONLY: usize = 3000;
/// The default of `--max-mutating-requests-inflight`: twice OpenShift's 1,000. Each updating
/// node can have two reports in flight in one wave (Working and Done), and a 10,000-node
/// rollout of 1,000 at a time had up to 835 writes in flight (rollout-bench): a 429 there would
/// cost a node's turn a second for nothing.
pub const DEFAULT_MUTATING: usize = 2000;

/// kube-apiserver's answer, word for word: kubectl and client-go recognise the code, not the text.
pub const TOO_MANY: &str = "Too many requests, please try again later.\n";

/// Which limit a request counts against, named as kube-apiserver's `request_kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestKind {
    request_kind: &'static str,
}

const READ_ONLY: RequestKind = RequestKind { request_kind: "readOnly" };
const MUTATING: RequestKind = RequestKind { request_kind: "mutating" };

/// The verb a request was counted under by [`super::request_metrics::observe`], handed to
/// [`limit`] in the request's extensions so the path is parsed once.
#[derive(Debug, Clone, Copy)]
pub struct Verb(pub &'static str);

/// One kind's count: what is in flight now, and the most in flight in the last whole second
/// (what kube-apiserver's `apiserver_current_inflight_requests` shows: a scrape every 30 s
/// would see nothing of a burst otherwise).
struct Count {
    limit: usize,
    now: AtomicUsize,
    window: Mutex<Window>,
    /// The most ever in flight at once since the start: what to size the limit against.
    high_water: AtomicUsize,
    dropped: Counter,
}

struct Window {
    started: Instant,
    most: usize,
    last_second: usize,
}

impl Count {
    fn new(limit: usize) -> Self {
        Count {
            limit,
            now: AtomicUsize::new(0),
            window: Mutex::new(Window { started: Instant::now(), most: 0, last_second: 0 }),
            high_water: AtomicUsize::new(0),
            dropped: Counter::default(),
        }
    }

    /// Take a place, unless the limit is reached.
    fn enter(self: &Arc<Self>) -> Option<Place> {
        let was = self.now.fetch_add(1, Ordering::AcqRel);
        if self.limit != 0 && was >= self.limit {
            self.now.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.high_water.fetch_max(was + 1, Ordering::Relaxed);
        self.observe(was + 1);
        Some(Place(self.clone()))
    }

    fn observe(&self, n: usize) {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = w.started.elapsed();
        if elapsed >= Duration::from_secs(1) {
            // A second with no request at all reads as what is in flight when it ends.
            w.last_second = if elapsed >= Duration::from_secs(2) { n } else { w.most.max(n) };
            w.started = Instant::now();
            w.most = n;
        } else {
            w.most = w.most.max(n);
        }
    }

    /// The most in flight over the last whole second (or now, if more are now).
    fn last_second(&self) -> usize {
        let now = self.now.load(Ordering::Acquire);
        let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let recent = match w.started.elapsed().as_secs() {
            // The window under way: the one before it is the last whole second.
            0 => w.last_second,
            // The window ended and no request has rolled it yet: it is the last whole second.
            1 => w.most,
            // Quiet since: only what is still in flight.
            _ => 0,
        };
        recent.max(now)
    }
}

/// A request's place in flight, given back when the answer is made.
struct Place(Arc<Count>);

impl Drop for Place {
    fn drop(&mut self) {
        let was = self.0.now.fetch_sub(1, Ordering::AcqRel);
        self.0.observe(was.saturating_sub(1));
    }
}

/// The limits of one API server, and their series for `/metrics`.
#[derive(Clone)]
pub struct Inflight {
    read_only: Arc<Count>,
    mutating: Arc<Count>,
}

impl Inflight {
    /// `read_only` and `mutating` as the flags give them; 0 is no limit.
    pub fn new(read_only: usize, mutating: usize) -> Self {
        Inflight { read_only: Arc::new(Count::new(read_only)), mutating: Arc::new(Count::new(mutating)) }
    }

    fn count(&self, kind: RequestKind) -> &Arc<Count> {
        if kind == MUTATING {
            &self.mutating
        } else {
            &self.read_only
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        let current = Family::<RequestKind, Gauge>::default();
        let high = Family::<RequestKind, Gauge>::default();
        let dropped = Family::<RequestKind, Counter>::default();
        for kind in [READ_ONLY, MUTATING] {
            let c = self.count(kind);
            current.get_or_create(&kind).set(c.last_second() as i64);
            high.get_or_create(&kind).set(c.high_water.load(Ordering::Relaxed) as i64);
            dropped.get_or_create(&kind).inc_by(c.dropped.get());
        }
        registry.register(
            "apiserver_current_inflight_requests",
            "The most requests in flight at once over the last second, by kind (watches are not counted)",
            current,
        );
        registry.register(
            "aloft_apiserver_inflight_requests_high_water",
            "The most requests in flight at once since the coordinator started, by kind: what \
             --max-requests-inflight and --max-mutating-requests-inflight are sized against",
            high,
        );
        registry.register(
            "apiserver_dropped_requests",
            "Requests answered 429 because their kind's in-flight limit was reached",
            dropped,
        );
    }
}

/// Which limit `verb` (as [`super::request_metrics::Route`] names it) counts against; `None` for
/// a watch, which is not limited.
fn kind_of(verb: &str) -> Option<RequestKind> {
    match verb {
        "WATCH" => None,
        "GET" | "LIST" | "HEAD" | "OPTIONS" => Some(READ_ONLY),
        _ => Some(MUTATING),
    }
}

/// The 429 kube-apiserver answers, with the time to wait before sending again.
fn too_many() -> Response {
    (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, "1"), (CONTENT_TYPE, "text/plain; charset=utf-8")], TOO_MANY)
        .into_response()
}

/// The middleware, after authentication (an admin's request is served over the limit).
pub async fn limit(
    axum::extract::State(ctx): axum::extract::State<super::SharedCtx>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let verb = req.extensions().get::<Verb>().map_or("GET", |v| v.0);
    let Some(kind) = kind_of(verb) else { return next.run(req).await };
    let count = ctx.inflight.count(kind);
    let place = match count.enter() {
        Some(p) => Some(p),
        None if req.extensions().get::<Identity>().is_some_and(|w| matches!(w.role, Role::Admin)) => None,
        None => {
            count.dropped.inc();
            // A host's first-boot Ignition asks again after a 5xx only (a 4xx ends its boot).
            if req.uri().path().starts_with("/config/") {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(RETRY_AFTER, "1"), (CONTENT_TYPE, "text/plain; charset=utf-8")],
                    TOO_MANY,
                )
                    .into_response();
            }
            return too_many();
        }
    };
    let res = next.run(req).await;
    drop(place);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_takes_up_to_its_limit_and_gives_places_back() {
        let c = Arc::new(Count::new(2));
        let a = c.enter().expect("first");
        let b = c.enter().expect("second");
        assert!(c.enter().is_none(), "a third is over the limit");
        assert_eq!(c.now.load(Ordering::Acquire), 2, "a refused request holds no place");
        drop(a);
        let again = c.enter().expect("a place given back is taken again");
        assert_eq!(c.high_water.load(Ordering::Relaxed), 2);
        assert_eq!(c.last_second(), 2);
        drop((b, again));
        assert_eq!(c.now.load(Ordering::Acquire), 0);
    }

    #[test]
    fn no_limit_at_zero_but_still_counted() {
        let c = Arc::new(Count::new(0));
        let places: Vec<Place> = (0..1000).map(|_| c.enter().expect("no limit")).collect();
        assert_eq!(c.high_water.load(Ordering::Relaxed), 1000);
        drop(places);
        assert_eq!(c.now.load(Ordering::Acquire), 0);
        assert_eq!(c.high_water.load(Ordering::Relaxed), 1000, "the high water stays");
    }

    #[test]
    fn reads_and_writes_count_apart_and_watches_not_at_all() {
        assert_eq!(kind_of("WATCH"), None);
        for v in ["GET", "LIST", "HEAD", "OPTIONS"] {
            assert_eq!(kind_of(v), Some(READ_ONLY), "{v}");
        }
        for v in ["POST", "PUT", "PATCH", "APPLY", "DELETE", "OTHER"] {
            assert_eq!(kind_of(v), Some(MUTATING), "{v}");
        }
    }
}
