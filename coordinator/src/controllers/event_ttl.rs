//! Events expire, as Kubernetes expires them: kube-apiserver writes each Event with an etcd
//! lease of `--event-ttl` (one hour by default), renewed by every write, so an Event goes a TTL
//! after it was last written (created, or counted again). Without this a fleet's store grows by
//! every decision the controllers ever recorded (a rollout's picks, waits, drains), and `kubectl
//! get events` gets slower with every rollout.
//!
//! The sweep finds what expired without reading the Events: each sweep notes the store's
//! revision, and an Event whose revision is at most the one noted a TTL ago has not been written
//! since then. The store answers that from its rows' revisions ([`Store::written_by`]), so a
//! sweep over tens of thousands of Events reads integers, and its work follows what expires.
//! (It read and parsed every Event's text once a minute: ~37 MB for the 47,000 Events a soak
//! of many rollouts left.) An Event outlives its TTL by at most one [`period`].
//!
//! Events stored before this coordinator started have no noted moment. The first sweep reads
//! them once and ages them by when they last happened, the latest of their `lastTimestamp`,
//! `eventTime`, `series.lastObservedTime` and `metadata.creationTimestamp` (core/v1 writers set
//! the first, events.k8s.io/v1 writers the next two; for the controllers' Events it is when they
//! were last written): those past the TTL go then, the others when they reach it, and all of them
//! a TTL after the start at the latest, as if written then.

use crate::resources::EVENT;
use crate::store::{Key, Store, StoreError};
use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// Deletes that share one commit of the store.
const DELETES_AT_ONCE: usize = 512;

/// Marks of the store's revision kept at most (one a sweep, a TTL's worth: 60 for the default).
const MARKS: usize = 1024;

/// How often to look for expired Events: a tenth of the TTL, between a second and a minute
/// (an Event outlives its TTL by at most that much).
pub fn period(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// The fields of a stored Event the start reads, borrowed from its JSON: the start reads every
/// stored Event (sweeps used to, once a minute), and building each one's whole object tree made
/// that a burst of several times the Events' size (120 rollouts of a simulated 2,000-node fleet in eight minutes
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

/// The Events of `items` (their JSON) that can be read, with the revision they were read at (a
/// delete is conditional on it) and when they last happened (None: no time to age them by).
fn aged<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<(Key, Option<u64>, Option<DateTime<Utc>>)> {
    items
        .into_iter()
        .filter_map(|json| serde_json::from_str::<Aged>(json).ok())
        .map(|ev| {
            let ns = ev.metadata.namespace.get().unwrap_or("");
            let rev = ev.metadata.resource_version.get().and_then(|v| v.parse().ok());
            (Key::new(&EVENT.store_key(), ns, &ev.metadata.name), rev, ev.last_happened())
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

/// What the sweep knows of when Events were last written.
pub struct Sweeper {
    ttl: Duration,
    /// (when, the store's revision then), oldest first: one per sweep, back to the newest one
    /// at least a TTL old.
    marks: VecDeque<(Instant, u64)>,
    /// Events stored before the start that expire before a TTL after it, by when they last
    /// happened: (when they expire, key, revision read), the latest first.
    earlier: Vec<(Instant, Key, Option<u64>)>,
}

impl Sweeper {
    /// Read the stored Events once (at `now`, `now_utc` on the calendar): delete those past the
    /// TTL by their times, keep the rest's expiry, and note the revision read. Returns the
    /// sweeper and how many it deleted.
    pub async fn start(
        store: &Arc<dyn Store>,
        ttl: Duration,
        now: Instant,
        now_utc: DateTime<Utc>,
    ) -> Result<(Sweeper, usize), StoreError> {
        let listing = store.list_json(&EVENT.store_key(), None).await?;
        let events = aged(listing.items.iter().map(|j| &**j));
        let revision = listing.revision;
        drop(listing);
        let mut doomed = Vec::new();
        let mut earlier = Vec::new();
        // A TTL past the calendar, or past this clock's range, expires nothing early.
        let ttl_chrono = chrono::Duration::from_std(ttl).ok();
        for (key, rev, last) in events {
            let Some(expires) = last.zip(ttl_chrono).and_then(|(t, ttl)| t.checked_add_signed(ttl)) else {
                continue;
            };
            match (expires - now_utc).to_std() {
                // Negative: past its TTL already.
                Err(_) => doomed.push((key, rev)),
                Ok(left) if left < ttl => {
                    if let Some(at) = now.checked_add(left) {
                        earlier.push((at, key, rev));
                    }
                }
                // Happened now or later: goes with the start's mark, a TTL from now.
                Ok(_) => {}
            }
        }
        earlier.sort_by_key(|e| std::cmp::Reverse(e.0));
        let mut sweeper = Sweeper { ttl, marks: VecDeque::new(), earlier };
        sweeper.note(now.max(Instant::now()), revision);
        let deleted = delete(store, doomed).await?;
        Ok((sweeper, deleted))
    }

    /// Note that every write up to `revision` was committed by `at`. Past [`MARKS`] (a TTL of
    /// weeks), every other older mark goes: a cutoff then finds an older mark, and Events live a
    /// little longer, never shorter.
    fn note(&mut self, at: Instant, revision: u64) {
        self.marks.push_back((at, revision));
        if self.marks.len() > MARKS {
            let mut i = 0;
            self.marks.retain(|_| {
                i += 1;
                i % 2 == 1 || i > MARKS / 2
            });
        }
    }

    /// The newest revision noted at least a TTL before `now`; the marks older than it are
    /// dropped (a later cutoff is never older).
    fn cutoff(&mut self, now: Instant) -> Option<u64> {
        let then = now.checked_sub(self.ttl)?;
        let newest = self.marks.iter().rposition(|(at, _)| *at <= then)?;
        self.marks.drain(..newest);
        self.marks.front().map(|(_, rev)| *rev)
    }

    /// One sweep at `now`: delete the Events not written since a TTL ago, and the ones from
    /// before the start whose time came. Returns how many were deleted.
    pub async fn sweep(&mut self, store: &Arc<dyn Store>, now: Instant) -> Result<usize, StoreError> {
        // Noted before the read: every write up to this revision was committed by now.
        let revision = store.revision().await?;
        let mut doomed = Vec::new();
        while self.earlier.last().is_some_and(|(at, _, _)| *at <= now) {
            if let Some((_, key, rev)) = self.earlier.pop() {
                doomed.push((key, rev));
            }
        }
        if let Some(cutoff) = self.cutoff(now) {
            doomed.extend(store.written_by(&EVENT.store_key(), cutoff).await?.into_iter().map(|(k, r)| (k, Some(r))));
        }
        self.note(now.max(Instant::now()), revision);
        delete(store, doomed).await
    }
}

/// Sweep every [`period`] forever. A zero `ttl` keeps Events forever (nothing runs).
pub async fn run(store: Arc<dyn Store>, ttl: Duration) {
    if ttl.is_zero() {
        tracing::info!("events never expire (--event-ttl 0)");
        // Not a return: the supervisor takes a controller that returns for one that stopped,
        // and `/readyz` would fail for a documented setting.
        return std::future::pending().await;
    }
    let every = period(ttl);
    let report = |r: Result<usize, StoreError>| match r {
        Ok(0) => {}
        Ok(n) => tracing::info!(count = n, ttl_seconds = ttl.as_secs(), "expired events deleted"),
        Err(e) => tracing::warn!(error = %e, "expiring events failed; trying again later"),
    };
    let mut sweeper = loop {
        match Sweeper::start(&store, ttl, Instant::now(), Utc::now()).await {
            Ok((s, deleted)) => {
                report(Ok(deleted));
                break s;
            }
            Err(e) => report(Err(e)),
        }
        tokio::time::sleep(every).await;
    };
    loop {
        tokio::time::sleep(every).await;
        report(sweeper.sweep(&store, Instant::now()).await);
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
    fn what_cannot_be_read_is_left_out_and_what_has_no_time_is_undated() {
        let long_ago =
            r#"{"lastTimestamp": "2000-01-01T00:00:00Z", "metadata": {"name": "old", "resourceVersion": "7"}}"#;
        let undated = r#"{"metadata": {"name": "u", "namespace": "ns"}}"#;
        let items = ["{", "[]", r#"{"lastTimestamp": "2000-01-01T00:00:00Z", "metadata": {}}"#, long_ago, undated];
        let got = aged(items);
        let key = |ns, name| Key::new(&EVENT.store_key(), ns, name);
        assert_eq!(got.len(), 2, "only what reads as an Event");
        assert_eq!((&got[0].0, got[0].1), (&key("", "old"), Some(7)));
        assert_eq!(got[0].2.map(|t| t.to_rfc3339()), Some("2000-01-01T00:00:00+00:00".into()));
        assert_eq!((&got[1].0, got[1].1, got[1].2), (&key("ns", "u"), None, None));
    }

    /// The newest mark at least a TTL old decides; older marks go; a TTL longer than the
    /// clock's past finds none.
    #[test]
    fn the_cutoff_is_the_newest_revision_noted_a_ttl_ago() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut s = Sweeper { ttl, marks: VecDeque::new(), earlier: Vec::new() };
        s.note(t0, 10);
        assert_eq!(s.cutoff(t0 + Duration::from_secs(59)), None, "not a TTL old yet");
        s.note(t0 + Duration::from_secs(30), 20);
        s.note(t0 + Duration::from_secs(60), 30);
        assert_eq!(s.cutoff(t0 + Duration::from_secs(60)), Some(10));
        assert_eq!(s.cutoff(t0 + Duration::from_secs(95)), Some(20));
        assert_eq!(s.marks.len(), 2, "the mark of revision 10 is of no more use");
        assert_eq!(s.cutoff(t0 + Duration::from_secs(3600)), Some(30));
        let mut long = Sweeper { ttl: Duration::MAX, marks: VecDeque::new(), earlier: Vec::new() };
        long.note(t0, 10);
        assert_eq!(long.cutoff(t0 + Duration::from_secs(3600)), None);
        // Thinned past MARKS: the newest stay, a cutoff is never newer than the true one.
        let mut many = Sweeper { ttl, marks: VecDeque::new(), earlier: Vec::new() };
        for i in 0..=MARKS as u64 {
            many.note(t0 + Duration::from_secs(i), i);
        }
        assert!(many.marks.len() <= MARKS / 2 + MARKS / 4 + 1, "{}", many.marks.len());
        assert_eq!(many.marks.back(), Some(&(t0 + Duration::from_secs(MARKS as u64), MARKS as u64)));
        let got = many.cutoff(t0 + Duration::from_secs(100) + ttl).unwrap();
        assert!((98..=100).contains(&got), "{got}");
    }

    #[test]
    fn the_period_is_a_tenth_of_the_ttl_within_a_second_and_a_minute() {
        assert_eq!(period(DEFAULT_TTL), Duration::from_secs(60));
        assert_eq!(period(Duration::from_secs(100)), Duration::from_secs(10));
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(1));
    }

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        (dir, store)
    }

    /// At the start, Events past the TTL by their times go, the others are kept for when they
    /// reach it (an Event with no readable time: a TTL from the start), and other resources are
    /// never touched.
    #[tokio::test]
    async fn the_start_ages_what_was_stored_before_it_by_its_times() {
        let (_dir, store) = store().await;
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
            } else {
                // Created long ago (what the store would have stamped then).
                ev["metadata"]["creationTimestamp"] = ago(400).into();
            }
            store.create(&Key::new(&EVENT.store_key(), "default", &name), ev).await.unwrap();
        }
        let node =
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "creationTimestamp": ago(500)}});
        let node_key = Key::cluster(&crate::resources::NODE.store_key(), "n1");
        store.create(&node_key, node).await.unwrap();

        let t0 = Instant::now();
        let (mut s, deleted) = Sweeper::start(&store, DEFAULT_TTL, t0, now).await.unwrap();
        assert_eq!(deleted, 2);
        assert_eq!(names(&store).await, ["counted-again", "recent", "series", "undated"]);
        let mins = |m: u64| Duration::from_secs(m * 60);
        // Nothing more before "counted-again" reaches its TTL (10 minutes ago + 60).
        assert_eq!(s.sweep(&store, t0 + mins(49)).await.unwrap(), 0);
        assert_eq!(s.sweep(&store, t0 + mins(51)).await.unwrap(), 1);
        assert_eq!(names(&store).await, ["recent", "series", "undated"]);
        assert_eq!(s.sweep(&store, t0 + mins(56)).await.unwrap(), 1, "recent: 5 minutes ago + 60");
        assert_eq!(s.sweep(&store, t0 + mins(59) + Duration::from_secs(30)).await.unwrap(), 1, "series");
        assert_eq!(names(&store).await, ["undated"]);
        // A TTL after the start, what is left goes, as if written then.
        assert_eq!(s.sweep(&store, t0 + mins(60) + Duration::from_secs(1)).await.unwrap(), 1);
        assert!(names(&store).await.is_empty());
        assert!(store.get(&node_key).await.unwrap().is_some(), "only Events expire");
    }

    /// An Event goes a TTL after its last write, by the marks, whatever its times say; one
    /// written again in between lives on from that write.
    #[tokio::test]
    async fn an_event_goes_a_ttl_after_it_was_last_written() {
        let (_dir, store) = store().await;
        let t0 = Instant::now();
        let (mut s, _) = Sweeper::start(&store, Duration::from_secs(60), t0, Utc::now()).await.unwrap();
        let key = |n: &str| Key::new(&EVENT.store_key(), "default", n);
        // Times long ago: not what decides for an Event written now.
        let long_ago = json!({"lastTimestamp": "2000-01-01T00:00:00Z"});
        store.create(&key("a"), event("a", long_ago.clone())).await.unwrap();
        store.create(&key("b"), event("b", long_ago.clone())).await.unwrap();
        let secs = Duration::from_secs;
        assert_eq!(s.sweep(&store, t0 + secs(30)).await.unwrap(), 0, "written after the start");
        // b is written again (counted) after that mark; c is new.
        let mut b = store.get(&key("b")).await.unwrap().unwrap().into_value();
        b["count"] = 2.into();
        let rev = crate::store::revision_of(&b);
        store.update(&key("b"), b, rev).await.unwrap();
        store.create(&key("c"), event("c", long_ago)).await.unwrap();
        assert_eq!(s.sweep(&store, t0 + secs(59)).await.unwrap(), 0, "nothing is a TTL old");
        assert_eq!(s.sweep(&store, t0 + secs(90)).await.unwrap(), 1, "a: not written since the mark at 30 s");
        assert_eq!(names(&store).await, ["b", "c"]);
        assert_eq!(s.sweep(&store, t0 + secs(119)).await.unwrap(), 2, "b and c: not since the mark at 59 s");
        assert!(names(&store).await.is_empty());
    }

    /// An Event from before the start, counted again after it, is not deleted when its old
    /// times come due: the delete is conditional on the revision read at the start.
    #[tokio::test]
    async fn an_event_written_again_after_the_start_survives_its_old_expiry() {
        let (_dir, store) = store().await;
        let now = Utc::now();
        let half = (now - chrono::Duration::minutes(30)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let key = Key::new(&EVENT.store_key(), "default", "e1");
        let mut ev = event("e1", json!({"lastTimestamp": half, "count": 1}));
        ev["metadata"]["creationTimestamp"] = half.into();
        store.create(&key, ev).await.unwrap();
        let t0 = Instant::now();
        let (mut s, deleted) = Sweeper::start(&store, DEFAULT_TTL, t0, now).await.unwrap();
        assert_eq!((deleted, s.earlier.len()), (0, 1));
        // The same decision again: counted, lastTimestamp now.
        let mut ev = store.get(&key).await.unwrap().unwrap().into_value();
        ev["count"] = 2.into();
        ev["lastTimestamp"] = objects::now().into();
        let rev = crate::store::revision_of(&ev);
        store.update(&key, ev, rev).await.unwrap();
        assert_eq!(s.sweep(&store, t0 + Duration::from_secs(31 * 60)).await.unwrap(), 0);
        assert!(store.get(&key).await.unwrap().is_some(), "counted again: not expired");
        assert!(s.earlier.is_empty());
    }

    /// The store's answer without reading the objects is the one the objects give.
    #[tokio::test]
    async fn written_by_reads_the_revisions_the_objects_carry() {
        let (_dir, store) = store().await;
        let key = |ns: &str, n: &str| Key::new(&EVENT.store_key(), ns, n);
        let a = store.create(&key("default", "a"), event("a", json!({}))).await.unwrap();
        let mut other = event("b", json!({}));
        objects::prepare_create(&mut other, "team");
        store.create(&key("team", "b"), other).await.unwrap();
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        store.create(&Key::cluster(&crate::resources::NODE.store_key(), "n1"), node).await.unwrap();
        let newest = store.revision().await.unwrap();
        let mut all = store.written_by(&EVENT.store_key(), newest).await.unwrap();
        all.sort_by(|x, y| x.0.namespace.cmp(&y.0.namespace));
        let listed = store.list_json(&EVENT.store_key(), None).await.unwrap();
        let mut by_parse = crate::store::written_by_in(&EVENT.store_key(), &listed.items, newest);
        by_parse.sort_by(|x, y| x.0.namespace.cmp(&y.0.namespace));
        assert_eq!(all, by_parse);
        assert_eq!(all.len(), 2, "Events only: {all:?}");
        let a_rev = crate::store::revision_of(&a.object).unwrap();
        assert_eq!(store.written_by(&EVENT.store_key(), a_rev).await.unwrap(), [(key("default", "a"), a_rev)]);
        assert!(store.written_by(&EVENT.store_key(), a_rev - 1).await.unwrap().is_empty());
    }
}
