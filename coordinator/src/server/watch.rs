//! Watches over HTTP: newline-delimited JSON `{"type": ..., "object": ...}` events, as client-go
//! reads them. Without a resourceVersion (or with "0") the watch starts with an ADDED event for
//! every current object; with one, it replays every event after it from the store's log, so a
//! client reconnecting with its last version misses nothing, or gets 410 Gone when the log no
//! longer reaches back that far.
//!
//! `skipOwnWrites=true` (an aloft extension; the agent's watch of its own Node asks for it)
//! leaves out the live events of the caller's own writes: it has those objects from its
//! writes' answers already, and they were half of what a fleet's watches carried during a
//! rollout. Replayed events are sent whoever made them.

use super::error::ApiError;
use super::handlers::Filters;
use super::request::ResourcePath;
use super::{table, Ctx};
use crate::store::{EventType, WatchFilter};
use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

enum Item {
    /// The kind, the object, and the object's JSON when the store has it at hand.
    Event(EventType, Arc<Value>, Option<Arc<str>>),
    Error(ApiError),
}

pub async fn serve(
    ctx: &Ctx,
    path: ResourcePath,
    params: &HashMap<String, String>,
    filters: Filters,
    as_table: bool,
    who: &str,
) -> Result<Response, ApiError> {
    let skip_own = match params.get("skipOwnWrites").map(String::as_str) {
        None | Some("false") => None,
        Some("true") => Some(Arc::<str>::from(who)),
        Some(other) => return Err(ApiError::bad_request(format!("skipOwnWrites {other:?} is not true or false"))),
    };
    let rt = path.rt;
    let resource = rt.store_key();
    let rv = params.get("resourceVersion").map(String::as_str).unwrap_or("");
    let timeout = match params.get("timeoutSeconds") {
        Some(s) => Duration::from_secs(
            s.parse().map_err(|_| ApiError::bad_request(format!("timeoutSeconds {s:?} is not a number")))?,
        ),
        None => ctx.limits.watch_timeout,
    };
    let (initial, from) = if rv.is_empty() || rv == "0" {
        let listing = ctx
            .store
            .list(&resource, path.namespace.as_deref())
            .await
            .map_err(|e| ApiError::from_store(e, &rt.qualified(), ""))?;
        (listing.items, listing.revision)
    } else {
        let from = rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("resourceVersion {rv:?} is not a resourceVersion this server issued"))
        })?;
        (Vec::new(), from)
    };
    let filter = WatchFilter {
        resource: Some(resource),
        namespace: path.namespace.clone(),
        name: filters.fields.name().map(str::to_string),
        skip_origin: skip_own,
    };
    let live = ctx.store.watch(filter, from).await.map_err(|e| ApiError::from_store(e, &rt.qualified(), ""))?;
    let initial = futures::stream::iter(initial.into_iter().map(|o| Item::Event(EventType::Added, Arc::new(o), None)));
    // The caller's own writes (skipOwnWrites) are left out by the store, where they are published.
    let live = live.map(move |r| match r {
        Ok(ev) => Item::Event(ev.kind, ev.object, Some(ev.json)),
        Err(e) => Item::Error(ApiError::from_store(e, &rt.qualified(), "")),
    });
    let mut first = true;
    let body = initial
        .chain(live)
        .filter(move |item| {
            let keep = match item {
                Item::Event(_, o, _) => filters.matches(o),
                Item::Error(_) => true,
            };
            futures::future::ready(keep)
        })
        // End the stream after an error event.
        .scan(false, |ended, item| {
            if *ended {
                return futures::future::ready(None);
            }
            *ended = matches!(item, Item::Error(_));
            futures::future::ready(Some(item))
        })
        .map(move |item| {
            let line = match item {
                Item::Event(kind, obj, json) if !as_table => event_line(kind, &obj, json.as_deref()),
                Item::Event(kind, obj, _) => {
                    let rev = crate::store::revision_of(&obj);
                    let t = table::table(rt, &[&obj], rev, first);
                    first = false;
                    event_line(kind, &t, None)
                }
                Item::Error(e) => {
                    let mut line =
                        serde_json::to_vec(&json!({"type": "ERROR", "object": e.status})).unwrap_or_default();
                    line.push(b'\n');
                    line
                }
            };
            Ok::<_, std::convert::Infallible>(Bytes::from(line))
        })
        .take_until(tokio::time::sleep(timeout));
    Response::builder()
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(Body::from_stream(body))
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// `{"type":"<kind>","object":<object>}` and a newline, with the object's JSON as the store
/// wrote it when given (the same bytes serializing it again would give).
fn event_line(kind: EventType, obj: &Value, json: Option<&str>) -> Vec<u8> {
    let object = match json {
        Some(j) => std::borrow::Cow::Borrowed(j.as_bytes()),
        None => std::borrow::Cow::Owned(serde_json::to_vec(obj).unwrap_or_default()),
    };
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_str().as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(&object);
    line.extend_from_slice(b"}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_from_stored_json_is_the_serialized_event() {
        let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "resourceVersion": "7",
            "annotations": {"x": "a \"quoted\" value"}}});
        // Kubernetes' wire order: the type, then the object.
        let serialized = format!("{{\"type\":\"MODIFIED\",\"object\":{}}}\n", serde_json::to_string(&obj).unwrap());
        let stored = serde_json::to_string(&obj).unwrap();
        assert_eq!(String::from_utf8(event_line(EventType::Modified, &obj, Some(&stored))).unwrap(), serialized);
        assert_eq!(String::from_utf8(event_line(EventType::Modified, &obj, None)).unwrap(), serialized);
        let parsed: Value = serde_json::from_str(&serialized).unwrap();
        assert_eq!(parsed, json!({"type": "MODIFIED", "object": obj}));
        // Objects list their keys sorted, whatever order they were built in (ARCHITECTURE.md).
        assert!(
            serialized
                .contains(r#""metadata":{"annotations":{"x":"a \"quoted\" value"},"name":"a","resourceVersion":"7"}"#),
            "{serialized}"
        );
        let back: Value = serde_json::from_slice(&event_line(EventType::Deleted, &obj, None)).unwrap();
        assert_eq!((back["type"].as_str(), &back["object"]), (Some("DELETED"), &obj));
    }
}
