//! The FleetLock protocol, as airlock serves it to Fedora CoreOS hosts whose Zincati runs the
//! `fleet_lock` strategy: `POST /v1/pre-reboot` takes a slot of the host's group before it
//! reboots into an update, `POST /v1/steady-state` gives it back once the host is up again.
//! Both carry `fleet-lock-protocol: true` and `{"client_params": {"id": ..., "group": ...}}`;
//! only a 200 is success, and an error's body is `{"kind": ..., "value": ...}`.
//!
//! Each group is a FleetLock object (`aloft.dev/v1`, named as the group): a counting semaphore
//! of `spec.maxHolders` slots, re-entrant per host (a host that holds a slot and asks again
//! gets 200, as after a crash between its request and its reboot). Unlike airlock, the holders
//! are in the object's status (`kubectl get fleetlocks`), with when each took its slot, and an
//! admin frees the slot of a host that will not come back with a patch of that status.
//!
//! Served on a listener of its own (`serve --fleetlock-listen`), in plain HTTP and without
//! credentials, because Zincati sends none: like airlock's, it is meant for the hosts' own
//! network. Each request is a compare-and-swap on the group's object, retried on a conflict, so
//! hosts racing for the last slot get it once.

use crate::controllers::events::{EventType, Involved, Recorder};
use crate::resources::FLEET_LOCK;
use crate::store::{Key, Store, StoreError};
use aloft_api::fleetlock::{FleetLock, FleetLockHolder, FleetLockStatus};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// How many times a request retries its compare-and-swap before it answers with an error (the
/// host tries again later, as Zincati does after any failure).
const ATTEMPTS: usize = 16;

/// Event reasons on a FleetLock.
pub mod reasons {
    pub const SLOT_TAKEN: &str = "SlotTaken";
    pub const SLOT_RELEASED: &str = "SlotReleased";
}

#[derive(Clone)]
struct Shared {
    store: Arc<dyn Store>,
    events: Recorder,
}

/// The FleetLock endpoints (`/v1/pre-reboot`, `/v1/steady-state`), for the listener of their own.
pub fn router(store: Arc<dyn Store>, events: Recorder) -> Router {
    Router::new()
        .route("/v1/pre-reboot", post(pre_reboot))
        .route("/v1/steady-state", post(steady_state))
        .fallback(|| async {
            refusal(
                StatusCode::NOT_FOUND,
                "not_found",
                "FleetLock serves POST /v1/pre-reboot and POST /v1/steady-state",
            )
        })
        .with_state(Shared { store, events })
}

/// A request refused, as the protocol answers it: a status other than 200 and `{kind, value}`.
#[derive(Debug)]
struct Refusal {
    code: StatusCode,
    kind: &'static str,
    value: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.code, axum::Json(json!({"kind": self.kind, "value": self.value}))).into_response()
    }
}

fn refusal(code: StatusCode, kind: &'static str, value: impl Into<String>) -> Refusal {
    Refusal { code, kind, value: value.into() }
}

/// Fields besides these are ignored, as airlock's decoder ignores them: a later Zincati that
/// sends more still gets its slot.
#[derive(Debug, Deserialize)]
struct Request {
    client_params: ClientParams,
}

#[derive(Debug, Deserialize)]
struct ClientParams {
    #[serde(default)]
    id: String,
    #[serde(default)]
    group: String,
}

/// The request's host and group, or the answer that says what is wrong with it.
fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<(String, String), Refusal> {
    let bad = |kind: &'static str, value: String| Err(refusal(StatusCode::BAD_REQUEST, kind, value));
    if headers.get("fleet-lock-protocol").and_then(|v| v.to_str().ok()) != Some("true") {
        return bad("missing_header", "the header fleet-lock-protocol: true is required".into());
    }
    let req: Request = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return bad("bad_body", format!("want {{\"client_params\": {{\"id\": ..., \"group\": ...}}}}: {e}")),
    };
    let ClientParams { id, group } = req.client_params;
    if id.is_empty() {
        return bad("bad_body", "client_params.id: Required value".into());
    }
    if id.len() > 253 || id.chars().any(|c| c.is_control()) {
        return bad("bad_body", "client_params.id: at most 253 characters, no control characters".into());
    }
    // The protocol's group pattern (`^[a-zA-Z0-9.-]+$`; Zincati sends its configured group as
    // written). The FleetLock object is named as the group in lowercase, since object names are.
    let valid = !group.is_empty()
        && group.len() <= 253
        && group.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if !valid {
        return bad(
            "bad_body",
            format!("client_params.group: Invalid value: {group:?}: want letters, digits, '.' and '-' (the FleetLock protocol's group)"),
        );
    }
    let name = group.to_ascii_lowercase();
    if !crate::server::validate::name_causes(&name).is_empty() {
        // Otherwise a 404 would ask the admin for a FleetLock object whose name admission refuses.
        return bad(
            "bad_body",
            format!(
                "client_params.group: Invalid value: {group:?}: names the FleetLock object {name:?}, which must start and end \
                 with a letter or digit, each '.'-separated part too"
            ),
        );
    }
    Ok((id, name))
}

/// What a pre-reboot found.
#[derive(Debug, PartialEq, Eq)]
enum Take {
    /// The host took a slot now.
    Taken {
        held: usize,
        max: usize,
    },
    /// It held one already.
    Held,
    Full {
        max: usize,
        holders: Vec<String>,
    },
}

/// Take a slot of `lock` for `id`: the outcome, and the status to write (None: nothing changes).
fn take(lock: &FleetLock, id: &str, now: &str) -> (Take, Option<FleetLockStatus>) {
    let status = lock.status.clone().unwrap_or_default();
    if status.holders.iter().any(|h| h.id == id) {
        return (Take::Held, None);
    }
    let max = lock.spec.max_holders();
    if status.holders.len() >= max {
        return (Take::Full { max, holders: status.holders.iter().map(|h| h.id.clone()).collect() }, None);
    }
    let mut next = status;
    next.holders.push(FleetLockHolder { id: id.to_string(), since: now.to_string(), ..Default::default() });
    (Take::Taken { held: next.holders.len(), max }, Some(next))
}

/// Give `id`'s slot of `lock` back: the status to write, None when it held none.
fn release(lock: &FleetLock, id: &str) -> Option<FleetLockStatus> {
    let mut status = lock.status.clone()?;
    let before = status.holders.len();
    status.holders.retain(|h| h.id != id);
    (status.holders.len() != before).then_some(status)
}

enum Step<T> {
    /// Answer with this, writing nothing.
    Answer(T),
    /// Write this status, then answer with this.
    Write(FleetLockStatus, T),
}

/// Read the group's lock, decide, and write the new status if any, retrying on a conflict.
async fn with_lock<T>(s: &Shared, group: &str, decide: impl Fn(&FleetLock) -> Step<T>) -> Result<T, Refusal> {
    let key = Key::cluster(&FLEET_LOCK.store_key(), group);
    for _ in 0..ATTEMPTS {
        let stored = match s.store.get(&key).await {
            Ok(Some(stored)) => stored,
            Ok(None) => {
                return Err(refusal(
                    StatusCode::NOT_FOUND,
                    "unknown_group",
                    format!(
                        "no FleetLock {group:?}: an admin creates one per group (apiVersion aloft.dev/v1, kind \
                         FleetLock, metadata.name {group}, spec.maxHolders)"
                    ),
                ))
            }
            Err(e) => return Err(refusal(StatusCode::SERVICE_UNAVAILABLE, "store", e.to_string())),
        };
        let lock: FleetLock = match serde_json::from_value((*stored.object).clone()) {
            Ok(l) => l,
            Err(e) => return Err(refusal(StatusCode::INTERNAL_SERVER_ERROR, "bad_object", e.to_string())),
        };
        let revision = crate::store::revision_of(&stored.object);
        let (status, answer) = match decide(&lock) {
            Step::Answer(a) => return Ok(a),
            Step::Write(status, a) => (status, a),
        };
        let mut next = (*stored.object).clone();
        next["status"] = match serde_json::to_value(&status) {
            Ok(v) => v,
            Err(e) => return Err(refusal(StatusCode::INTERNAL_SERVER_ERROR, "bad_object", e.to_string())),
        };
        match s.store.update(&key, next, revision).await {
            Ok(_) => return Ok(answer),
            Err(StoreError::Conflict { .. }) => continue,
            // Deleted meanwhile: the next read says so.
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(refusal(StatusCode::SERVICE_UNAVAILABLE, "store", e.to_string())),
        }
    }
    Err(refusal(StatusCode::SERVICE_UNAVAILABLE, "busy", format!("FleetLock {group:?} kept changing; try again")))
}

fn about(group: &str) -> Involved {
    Involved {
        api_version: aloft_api::fleetlock::API_VERSION.into(),
        kind: FLEET_LOCK.kind.into(),
        namespace: String::new(),
        name: group.to_string(),
        uid: None,
    }
}

async fn pre_reboot(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let (id, group) = match read_request(&headers, &body) {
        Ok(r) => r,
        Err(refusal) => return refusal.into_response(),
    };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let outcome = with_lock(&s, &group, |lock| match take(lock, &id, &now) {
        (outcome, Some(status)) => Step::Write(status, outcome),
        (outcome, None) => Step::Answer(outcome),
    })
    .await;
    match outcome {
        Err(refusal) => refusal.into_response(),
        Ok(Take::Held) => {
            tracing::info!(%group, %id, "FleetLock: the host already holds a slot");
            StatusCode::OK.into_response()
        }
        Ok(Take::Taken { held, max }) => {
            let msg = format!("Host {id} took a slot to reboot ({held} of {max} held)");
            tracing::info!(%group, %id, held, max, "FleetLock: slot taken");
            s.events.emit(&about(&group), EventType::Normal, reasons::SLOT_TAKEN, &msg);
            // Each take is an occurrence, not a decision to say once: the next one by the same
            // host (its next reboot) counts on the Event instead of being held back.
            s.events.forget(&about(&group), reasons::SLOT_TAKEN);
            StatusCode::OK.into_response()
        }
        Ok(Take::Full { max, holders }) => {
            tracing::info!(%group, %id, max, "FleetLock: every slot is held");
            refusal(
                StatusCode::CONFLICT,
                "failed_lock",
                format!(
                    "all {max} slot{} of group {group} held, by {}",
                    if max == 1 { "" } else { "s" },
                    crate::controllers::pick::names_text(&holders)
                ),
            )
            .into_response()
        }
    }
}

async fn steady_state(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let (id, group) = match read_request(&headers, &body) {
        Ok(r) => r,
        Err(refusal) => return refusal.into_response(),
    };
    let released = with_lock(&s, &group, |lock| match release(lock, &id) {
        Some(status) => Step::Write(status, true),
        None => Step::Answer(false),
    })
    .await;
    match released {
        Err(refusal) => refusal.into_response(),
        Ok(true) => {
            tracing::info!(%group, %id, "FleetLock: slot released");
            let msg = format!("Host {id} gave its slot back");
            s.events.emit(&about(&group), EventType::Normal, reasons::SLOT_RELEASED, &msg);
            s.events.forget(&about(&group), reasons::SLOT_RELEASED);
            StatusCode::OK.into_response()
        }
        // Zincati reports steady state at every start: holding nothing is success.
        Ok(false) => StatusCode::OK.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(max: Option<i64>, holders: &[&str]) -> FleetLock {
        serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": {"maxHolders": max},
            "status": {"holders": holders.iter().map(|h| json!({"id": h, "since": "t0"})).collect::<Vec<_>>()}}))
        .unwrap()
    }

    #[test]
    fn a_slot_is_taken_once_per_host_up_to_max_holders() {
        let (out, st) = take(&lock(None, &[]), "a", "t1");
        assert_eq!(out, Take::Taken { held: 1, max: 1 });
        let st = st.unwrap();
        assert_eq!((st.holders[0].id.as_str(), st.holders[0].since.as_str()), ("a", "t1"));
        assert_eq!(take(&lock(None, &["a"]), "a", "t2"), (Take::Held, None), "re-entrant, since kept");
        assert_eq!(take(&lock(None, &["a"]), "b", "t2"), (Take::Full { max: 1, holders: vec!["a".into()] }, None));
        assert_eq!(take(&lock(Some(2), &["a"]), "b", "t2").0, Take::Taken { held: 2, max: 2 });
        assert!(matches!(take(&lock(Some(0), &[]), "a", "t").0, Take::Full { max: 0, .. }), "0 slots: none");
        // Lowered below its holders: none taken back, none given.
        assert!(matches!(take(&lock(Some(1), &["a", "b"]), "c", "t").0, Take::Full { max: 1, .. }));
    }

    #[test]
    fn a_release_frees_only_the_hosts_slot() {
        assert_eq!(
            release(&lock(Some(2), &["a", "b"]), "a").unwrap().holders.iter().map(|h| &h.id).collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(release(&lock(Some(2), &["b"]), "a"), None);
        assert_eq!(release(&FleetLock::default(), "a"), None);
    }

    #[test]
    fn requests_need_the_header_an_id_and_a_group_that_names_an_object_in_lowercase() {
        let mut h = HeaderMap::new();
        let body = br#"{"client_params": {"id": "m1", "group": "default"}}"#;
        assert!(read_request(&h, body).is_err(), "no header");
        h.insert("fleet-lock-protocol", "true".parse().unwrap());
        assert_eq!(read_request(&h, body).unwrap(), ("m1".to_string(), "default".to_string()));
        let more = br#"{"client_params": {"id": "m1", "group": "g", "later": 1}, "also": true}"#;
        assert_eq!(read_request(&h, more).unwrap(), ("m1".to_string(), "g".to_string()), "unknown fields ignored");
        // The protocol allows capitals; the object is named in lowercase.
        let capital = br#"{"client_params": {"id": "m1", "group": "Workers.EU-1"}}"#;
        assert_eq!(read_request(&h, capital).unwrap(), ("m1".to_string(), "workers.eu-1".to_string()));
        for bad in [
            &br#"{"client_params": {"group": "default"}}"#[..],
            br#"{"client_params": {"id": "m1", "group": "a/b"}}"#,
            br#"{"client_params": {"id": "m1", "group": "-workers"}}"#,
            br#"{"client_params": {"id": "m1", "group": "workers."}}"#,
            br#"{"client_params": {"id": "m1", "group": "a..b"}}"#,
            br#"{"client_params": {"id": "m1"}}"#,
            br#"{"id": "m1"}"#,
            b"not json",
        ] {
            assert!(read_request(&h, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
