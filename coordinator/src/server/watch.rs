//! Watches over HTTP: newline-delimited JSON `{"type": ..., "object": ...}` events, as client-go
//! reads them. Without a resourceVersion (or with "0") the watch starts with an ADDED event for
//! every current object; with one, it replays every event after it from the store's log, so a
//! client reconnecting with its last version misses nothing, or gets 410 Gone when the log no
//! longer reaches back that far.

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
use std::time::Duration;

enum Item {
    Event(EventType, Value),
    Error(ApiError),
}

pub async fn serve(
    ctx: &Ctx,
    path: ResourcePath,
    params: &HashMap<String, String>,
    filters: Filters,
    as_table: bool,
) -> Result<Response, ApiError> {
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
    };
    let live = ctx.store.watch(filter, from).await.map_err(|e| ApiError::from_store(e, &rt.qualified(), ""))?;
    let initial = futures::stream::iter(initial.into_iter().map(|o| Item::Event(EventType::Added, o)));
    let live = live.map(|r| match r {
        Ok(ev) => Item::Event(ev.kind, std::sync::Arc::unwrap_or_clone(ev.object)),
        Err(e) => Item::Error(ApiError::from_store(e, &rt.qualified(), "")),
    });
    let mut first = true;
    let body = initial
        .chain(live)
        .filter(move |item| {
            let keep = match item {
                Item::Event(_, o) => filters.matches(o),
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
            let ev = match item {
                Item::Event(kind, obj) => {
                    let obj = if as_table {
                        let rev = crate::store::revision_of(&obj);
                        let t = table::table(rt, &[&obj], rev, first);
                        first = false;
                        t
                    } else {
                        obj
                    };
                    json!({"type": kind.as_str(), "object": obj})
                }
                Item::Error(e) => json!({"type": "ERROR", "object": e.status}),
            };
            let mut line = serde_json::to_vec(&ev).unwrap_or_default();
            line.push(b'\n');
            Ok::<_, std::convert::Infallible>(Bytes::from(line))
        })
        .take_until(tokio::time::sleep(timeout));
    Response::builder()
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(Body::from_stream(body))
        .map_err(|e| ApiError::internal(e.to_string()))
}
