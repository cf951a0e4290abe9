//! Events expire, as Kubernetes expires them: kube-apiserver keeps an Event for `--event-ttl`
//! (one hour by default) after it last happened, then drops it. Without this a fleet's store
//! grows by every decision the controllers ever recorded (a rollout's picks, waits, drains),
//! and `kubectl get events` gets slower with every rollout.
//!
//! An Event last happened at the latest of its `lastTimestamp`, `eventTime`,
//! `series.lastObservedTime` and `metadata.creationTimestamp` (core/v1 writers set the first,
//! events.k8s.io/v1 writers the other two). An Event counted again (its `count` bumped, its
//! `lastTimestamp` moved) lives on; one with no time it can be aged by is kept.

use crate::resources::EVENT;
use crate::store::{Key, Store, StoreError};
use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// Deletes that share one commit of the store.
const DELETES_AT_ONCE: usize = 512;

/// How often to look for expired Events: a tenth of the TTL, between a second and a minute
/// (an Event outlives its TTL by at most that much).
pub fn period(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// The fields of a stored Event a sweep reads, borrowed from its JSON: a sweep reads every
/// Event of the last hour, and building each one's whole object tree made every sweep a burst of
/// several times the Events' size (120 rollouts of a simulated 2,000-node fleet in eight minutes
/// left up to ~30,000 Events, and the coordinator's RSS rose by up to ~100 MiB at each sweep).
#[derive(serde::Deserialize)]
struct Aged<'a> {
    #[serde(default, borrow, rename = "lastTimestamp")]
    last_timestamp: Text<'a>,
    #[serde(default, borrow, rename = "eventTime")]
    event_time: Text<'a>,
    /// Small and rare (events.k8s.io writers' repeats): read whole, whatever it holds.
    #[serde(default)]
    series: Option<serde_json::Value>,
    #[serde(borrow)]
    metadata: Meta<'a>,
}

#[derive(serde::Deserialize)]
struct Meta<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    namespace: Text<'a>,
    #[serde(default, borrow, rename = "resourceVersion")]
    resource_version: Text<'a>,
    #[serde(default, borrow, rename = "creationTimestamp")]
    creation_timestamp: Text<'a>,
}

/// A string field of an Event, or None when it holds anything else. The store does not check an
/// Event's fields, so a client may have written `"lastTimestamp": 5`; that field is then no time
/// to age the Event by, but the Event's other times still are (an Event that failed to read
/// whole would never expire).
#[derive(Default)]
struct Text<'a>(Option<Cow<'a, str>>);

impl Text<'_> {
    fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> serde::de::Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Owned(v.to_string()))))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }
    fn visit_unit<E>(self) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
        while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }
}

impl Aged<'_> {
    /// When the Event last happened (see the module's doc); None when it carries no time we can
    /// read.
    fn last_happened(&self) -> Option<DateTime<Utc>> {
        let series = self.series.as_ref().and_then(|s| s.get("lastObservedTime")).and_then(serde_json::Value::as_str);
        [self.last_timestamp.get(), self.event_time.get(), series, self.metadata.creation_timestamp.get()]
            .into_iter()
            .flatten()
            .filter_map(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
            .max()
    }
}

/// The Events of `items` (their JSON) that last happened more than `ttl` before `now`, with the
/// revision they were read at (the delete is conditional on it). An Event that cannot be read
/// is kept: nothing says it expired.
pub fn expired<'a>(
    items: impl IntoIterator<Item = &'a str>,
    ttl: Duration,
    now: DateTime<Utc>,
) -> Vec<(Key, Option<u64>)> {
    // A TTL reaching back past the first representable date expires nothing (no panic).
    let Some(cutoff) = chrono::Duration::from_std(ttl).ok().and_then(|ttl| now.checked_sub_signed(ttl)) else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|json| serde_json::from_str::<Aged>(json).ok())
        .filter(|ev| ev.last_happened().is_some_and(|t| t < cutoff))
        .map(|ev| {
            let ns = ev.metadata.namespace.get().unwrap_or("");
            let rev = ev.metadata.resource_version.get().and_then(|v| v.parse().ok());
            (Key::new(&EVENT.store_key(), ns, &ev.metadata.name), rev)
        })
        .collect()
}

/// Delete `keys`, each only if still at the revision it was read at: an Event written again
/// since (counted once more) is no longer expired. Returns how many were deleted.
pub async fn delete(store: &Arc<dyn Store>, keys: Vec<(Key, Option<u64>)>) -> Result<usize, StoreError> {
    let mut deleted = 0;
    for chunk in keys.chunks(DELETES_AT_ONCE) {
        let results = futures::future::join_all(chunk.iter().map(|(k, rev)| store.delete(k, *rev))).await;
        for r in results {
            match r {
                Ok(_) => deleted += 1,
                // Counted again, or deleted by someone else, since the list.
                Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(deleted)
}

/// One sweep: list every Event, delete the expired ones. Returns how many were deleted.
pub async fn sweep(store: &Arc<dyn Store>, ttl: Duration, now: DateTime<Utc>) -> Result<usize, StoreError> {
    let listing = store.list_json(&EVENT.store_key(), None).await?;
    let doomed = expired(listing.items.iter().map(|j| &**j), ttl, now);
    drop(listing);
    delete(store, doomed).await
}

/// Sweep every [`period`] forever. A zero `ttl` keeps Events forever (nothing runs).
pub async fn run(store: Arc<dyn Store>, ttl: Duration) {
    if ttl.is_zero() {
        tracing::info!("events never expire (--event-ttl 0)");
        return;
    }
    let every = period(ttl);
    loop {
        tokio::time::sleep(every).await;
        match sweep(&store, ttl, Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(count = n, ttl_seconds = ttl.as_secs(), "expired events deleted"),
            Err(e) => tracing::warn!(error = %e, "expiring events failed; trying again later"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::objects;
    use crate::store::SqliteStore;
    use serde_json::{json, Value};

    fn event(name: &str, times: Value) -> Value {
        let mut ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "Test", "message": name});
        if let (Some(ev), Some(t)) = (ev.as_object_mut(), times.as_object()) {
            ev.extend(t.clone());
        }
        objects::prepare_create(&mut ev, "default");
        ev
    }

    async fn names(store: &Arc<dyn Store>) -> Vec<String> {
        let mut v: Vec<String> = store
            .list(&EVENT.store_key(), None)
            .await
            .unwrap()
            .items
            .iter()
            .map(|e| objects::name_of(e).to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_event_last_happened_at_its_latest_time() {
        // None when the Event carries no readable time, or cannot be read (no metadata.name).
        let last = |ev: Value| {
            serde_json::from_str::<Aged>(&ev.to_string()).ok().and_then(|a| a.last_happened()).map(|t| t.to_rfc3339())
        };
        let ev = json!({"lastTimestamp": "2026-01-01T10:00:00Z", "eventTime": "2026-01-01T09:00:00.000000Z",
            "series": {"lastObservedTime": "2026-01-01T11:30:00.000000Z"},
            "metadata": {"name": "e", "creationTimestamp": "2026-01-01T08:00:00Z"}});
        assert_eq!(last(ev), Some("2026-01-01T11:30:00+00:00".into()));
        let created_only =
            json!({"lastTimestamp": null, "metadata": {"name": "e", "creationTimestamp": "2026-01-01T08:00:00Z"}});
        assert_eq!(last(created_only), Some("2026-01-01T08:00:00+00:00".into()));
        // A name with an escape is read (not borrowed), and the time still counts.
        let escaped = json!({"lastTimestamp": "2026-01-01T10:00:00Z", "metadata": {"name": "a\"b"}});
        assert_eq!(last(escaped), Some("2026-01-01T10:00:00+00:00".into()));
        assert_eq!(last(json!({"lastTimestamp": "yesterday", "metadata": {"name": "e"}})), None, "no readable time");
        assert_eq!(last(json!({"lastTimestamp": "2026-01-01T10:00:00Z"})), None, "no metadata: not an Event");
        // Fields of the wrong kind (the store does not check an Event's fields) are no times,
        // and the others still count: such an Event still expires.
        let odd = json!({"lastTimestamp": 5, "eventTime": {"at": [1, 2]}, "series": "twice",
            "metadata": {"name": "e", "namespace": 3, "creationTimestamp": "2026-01-01T08:00:00Z"}});
        assert_eq!(last(odd), Some("2026-01-01T08:00:00+00:00".into()));
    }

    #[test]
    fn what_cannot_be_read_is_kept() {
        let long_ago =
            r#"{"lastTimestamp": "2000-01-01T00:00:00Z", "metadata": {"name": "old", "resourceVersion": "7"}}"#;
        let items = ["{", "[]", r#"{"lastTimestamp": "2000-01-01T00:00:00Z", "metadata": {}}"#, long_ago];
        let doomed = expired(items, DEFAULT_TTL, Utc::now());
        assert_eq!(doomed, [(Key::new(&EVENT.store_key(), "", "old"), Some(7))], "only the readable, dated one");
        // A TTL longer than the calendar (`--event-ttl` is the user's) expires nothing.
        for ttl in [Duration::from_secs(i64::MAX as u64 / 1000), Duration::MAX] {
            assert!(expired(items, ttl, Utc::now()).is_empty(), "{ttl:?}");
        }
    }

    #[test]
    fn the_period_is_a_tenth_of_the_ttl_within_a_second_and_a_minute() {
        assert_eq!(period(DEFAULT_TTL), Duration::from_secs(60));
        assert_eq!(period(Duration::from_secs(100)), Duration::from_secs(10));
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(1));
    }

    /// Old Events go, recent ones and ones counted again recently stay, an Event with no
    /// readable time stays, and other resources are never touched.
    #[tokio::test]
    async fn a_sweep_deletes_only_events_past_their_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let now = Utc::now();
        let ago =
            |mins: i64| (now - chrono::Duration::minutes(mins)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let evs = [
            event("old", json!({"firstTimestamp": ago(120), "lastTimestamp": ago(120)})),
            event("recent", json!({"firstTimestamp": ago(5), "lastTimestamp": ago(5)})),
            event("counted-again", json!({"firstTimestamp": ago(300), "lastTimestamp": ago(10)})),
            event("series", json!({"eventTime": ago(200), "series": {"count": 2, "lastObservedTime": ago(1)}})),
            event("events-v1-old", json!({"eventTime": ago(90)})),
            event("undated", json!({"lastTimestamp": "not a time"})),
        ];
        for mut ev in evs {
            let name = objects::name_of(&ev).to_string();
            if name == "undated" {
                // No creation time either: nothing to age it by.
                ev["metadata"].as_object_mut().unwrap().remove("creationTimestamp");
            } else if name != "recent" {
                // Created long ago (what the store would have stamped then).
                ev["metadata"]["creationTimestamp"] = ago(400).into();
            }
            store.create(&Key::new(&EVENT.store_key(), "default", &name), ev).await.unwrap();
        }
        let node =
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "creationTimestamp": ago(500)}});
        let node_key = Key::cluster(&crate::resources::NODE.store_key(), "n1");
        store.create(&node_key, node).await.unwrap();

        assert_eq!(sweep(&store, DEFAULT_TTL, now).await.unwrap(), 2);
        assert_eq!(names(&store).await, ["counted-again", "recent", "series", "undated"]);
        assert!(store.get(&node_key).await.unwrap().is_some(), "only Events expire");
        // Nothing left to expire: a second sweep deletes nothing.
        assert_eq!(sweep(&store, DEFAULT_TTL, now).await.unwrap(), 0);
    }

    /// An Event counted again between the sweep's list and its delete is not deleted.
    #[tokio::test]
    async fn an_event_written_again_after_the_list_survives_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let now = Utc::now();
        let old = (now - chrono::Duration::hours(3)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let key = Key::new(&EVENT.store_key(), "default", "e1");
        let mut ev = event("e1", json!({"lastTimestamp": old, "count": 1}));
        ev["metadata"]["creationTimestamp"] = old.into();
        store.create(&key, ev).await.unwrap();
        let listing = store.list_json(&EVENT.store_key(), None).await.unwrap();
        let doomed = expired(listing.items.iter().map(|j| &**j), DEFAULT_TTL, now);
        assert_eq!(doomed.len(), 1);
        // The same decision again: counted, lastTimestamp now.
        let mut ev = store.get(&key).await.unwrap().unwrap().into_value();
        ev["count"] = 2.into();
        ev["lastTimestamp"] = objects::now().into();
        let rev = crate::store::revision_of(&ev);
        store.update(&key, ev, rev).await.unwrap();
        assert_eq!(delete(&store, doomed).await.unwrap(), 0);
        assert!(store.get(&key).await.unwrap().is_some(), "counted again: not expired");
    }
}
