//! The embedded store: one SQLite file in WAL mode.
//!
//! Two tables: `objects` (the current state) and `log` (every write, with the object as written,
//! keyed by revision). A write is one transaction that bumps the revision, changes `objects` and
//! appends to `log`; it is acknowledged only after COMMIT returns with `synchronous=FULL`, so an
//! acknowledged write survives kill -9 and power loss. Watches replay `log` and then follow an
//! in-memory broadcast of new writes; a watcher that falls behind the broadcast goes back to `log`
//! instead of losing events. The log keeps the newest `retain` revisions; a watch from an older
//! revision gets `Gone` (HTTP 410), exactly as Kubernetes clients expect after etcd compaction.

use super::{set_revision, Event, EventType, Key, Listing, Store, StoreError, WatchFilter, WatchStream};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Revisions of history kept for watches by default.
pub const DEFAULT_RETAIN: u64 = 200_000;
const READERS: usize = 4;
const REPLAY_PAGE: i64 = 1000;

struct Inner {
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    tx: broadcast::Sender<Event>,
    retain: u64,
}

/// SQLite-backed [`Store`]. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS objects (
    resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    revision INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
    revision INTEGER PRIMARY KEY, resource TEXT NOT NULL, namespace TEXT NOT NULL,
    name TEXT NOT NULL, kind INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('compacted', 0);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, role TEXT NOT NULL, created TEXT NOT NULL);
";

fn meta_get(conn: &Connection, key: &str) -> Result<u64, StoreError> {
    let v: i64 = conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))?;
    Ok(v as u64)
}

fn parse(data: &str) -> Result<Value, StoreError> {
    serde_json::from_str(data).map_err(|e| StoreError::Backend(format!("corrupt object in store: {e}")))
}

fn describe(key: &Key) -> String {
    if key.namespace.is_empty() {
        format!("{} {:?}", key.resource, key.name)
    } else {
        format!("{} {}/{}", key.resource, key.namespace, key.name)
    }
}

impl SqliteStore {
    /// Open (creating if needed) the store file at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with_retain(path, DEFAULT_RETAIN)
    }

    pub fn open_with_retain(path: &Path, retain: u64) -> Result<Self, StoreError> {
        let writer = open_conn(path)?;
        writer.execute_batch(SCHEMA)?;
        let readers = (0..READERS).map(|_| open_conn(path).map(Mutex::new)).collect::<Result<Vec<_>, _>>()?;
        let (tx, _) = broadcast::channel(4096);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writer: Mutex::new(writer),
                readers,
                next_reader: AtomicUsize::new(0),
                tx,
                retain: retain.max(1),
            }),
        })
    }

    /// Run `f` on a reader connection on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let i = inner.next_reader.fetch_add(1, Ordering::Relaxed) % inner.readers.len();
            let conn = inner.readers[i].lock().map_err(|_| StoreError::Backend("reader lock poisoned".into()))?;
            f(&conn)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }

    /// One write transaction: `decide` sees the stored (revision, object) and returns what to do.
    async fn write(
        &self,
        key: &Key,
        decide: impl FnOnce(Option<(u64, Value)>) -> Result<WriteOp, StoreError> + Send + 'static,
    ) -> Result<Value, StoreError> {
        let inner = self.inner.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.writer.lock().map_err(|_| StoreError::Backend("writer lock poisoned".into()))?;
            let txn = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let stored: Option<(i64, String)> = txn
                .query_row(
                    "SELECT revision, data FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
                    params![key.resource, key.namespace, key.name],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let stored = match stored {
                Some((rev, data)) => Some((rev as u64, parse(&data)?)),
                None => None,
            };
            let op = decide(stored)?;
            let rev = meta_get(&txn, "revision")? + 1;
            let (kind, mut obj) = match op {
                WriteOp::Put(kind, obj) => (kind, obj),
                WriteOp::Delete(obj) => (EventType::Deleted, obj),
            };
            set_revision(&mut obj, rev);
            let data = serde_json::to_string(&obj).map_err(|e| StoreError::Backend(e.to_string()))?;
            if kind == EventType::Deleted {
                txn.execute(
                    "DELETE FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
                    params![key.resource, key.namespace, key.name],
                )?;
            } else {
                txn.execute(
                    "INSERT INTO objects (resource, namespace, name, revision, data) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (resource, namespace, name) DO UPDATE SET revision = ?4, data = ?5",
                    params![key.resource, key.namespace, key.name, rev as i64, data],
                )?;
            }
            txn.execute(
                "INSERT INTO log (revision, resource, namespace, name, kind, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![rev as i64, key.resource, key.namespace, key.name, kind.code(), data],
            )?;
            txn.execute("UPDATE meta SET value = ?1 WHERE key = 'revision'", [rev as i64])?;
            if rev % 1000 == 0 && rev > inner.retain {
                let floor = rev - inner.retain;
                txn.execute("DELETE FROM log WHERE revision <= ?1", [floor as i64])?;
                txn.execute("UPDATE meta SET value = ?1 WHERE key = 'compacted'", [floor as i64])?;
            }
            txn.commit()?;
            let obj = Arc::new(obj);
            // Sent while holding the writer lock, so the broadcast is in revision order.
            let _ = inner.tx.send(Event { revision: rev, key, kind, object: obj.clone() });
            Ok(Arc::unwrap_or_clone(obj))
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }

    /// Store an API token's hash with its identity and role; see [`crate::auth`].
    pub async fn put_token(&self, hash: String, name: String, role: String) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let conn = inner.writer.lock().map_err(|_| StoreError::Backend("writer lock poisoned".into()))?;
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            conn.execute(
                "INSERT INTO tokens (hash, name, role, created) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET hash = ?1, role = ?3, created = ?4",
                params![hash, name, role, now],
            )?;
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }

    /// Look a token hash up: (name, role).
    pub async fn find_token(&self, hash: String) -> Result<Option<(String, String)>, StoreError> {
        self.read(move |c| {
            Ok(c.query_row("SELECT name, role FROM tokens WHERE hash = ?1", [hash], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?)
        })
        .await
    }
}

enum WriteOp {
    Put(EventType, Value),
    Delete(Value),
}

fn check_expected(expected: Option<u64>, stored: u64) -> Result<(), StoreError> {
    match expected {
        Some(have) if have != stored => Err(StoreError::Conflict { have, stored }),
        _ => Ok(()),
    }
}

fn read_log(conn: &Connection, filter: &WatchFilter, after: u64) -> Result<(Vec<Event>, u64), StoreError> {
    let compacted = meta_get(conn, "compacted")?;
    if after < compacted {
        return Err(StoreError::Gone { requested: after, oldest: compacted + 1 });
    }
    let mut stmt = conn.prepare_cached(
        "SELECT revision, resource, namespace, name, kind, data FROM log
         WHERE revision > ?1 AND (?2 IS NULL OR resource = ?2) AND (?3 IS NULL OR namespace = ?3)
           AND (?4 IS NULL OR name = ?4)
         ORDER BY revision LIMIT ?5",
    )?;
    let rows =
        stmt.query_map(params![after as i64, filter.resource, filter.namespace, filter.name, REPLAY_PAGE], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
    let mut out = Vec::new();
    for row in rows {
        let (rev, resource, namespace, name, kind, data) = row?;
        out.push(Event {
            revision: rev as u64,
            key: Key { resource, namespace, name },
            kind: EventType::from_code(kind),
            object: Arc::new(parse(&data)?),
        });
    }
    let head = meta_get(conn, "revision")?;
    Ok((out, head))
}

enum Phase {
    /// Reading the persisted log after `last`.
    Replay,
    /// Following the broadcast.
    Live,
    Done,
}

struct WatchState {
    store: SqliteStore,
    filter: WatchFilter,
    last: u64,
    rx: broadcast::Receiver<Event>,
    phase: Phase,
    buf: VecDeque<Event>,
}

impl WatchState {
    async fn next(mut self) -> Option<(Result<Event, StoreError>, WatchState)> {
        loop {
            if let Some(e) = self.buf.pop_front() {
                self.last = e.revision;
                return Some((Ok(e), self));
            }
            match self.phase {
                Phase::Done => return None,
                Phase::Replay => {
                    let filter = self.filter.clone();
                    let after = self.last;
                    match self.store.read(move |c| read_log(c, &filter, after)).await {
                        Ok((events, head)) => {
                            if events.is_empty() {
                                // Nothing of ours up to `head`: skip the broadcast's older copies.
                                self.last = self.last.max(head);
                                self.phase = Phase::Live;
                            }
                            self.buf.extend(events);
                        }
                        Err(e) => {
                            self.phase = Phase::Done;
                            return Some((Err(e), self));
                        }
                    }
                }
                Phase::Live => match self.rx.recv().await {
                    Ok(ev) => {
                        if ev.revision > self.last && self.filter.matches(&ev.key) {
                            self.buf.push_back(ev);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.phase = Phase::Replay,
                    Err(broadcast::error::RecvError::Closed) => self.phase = Phase::Done,
                },
            }
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &Key) -> Result<Option<Value>, StoreError> {
        let key = key.clone();
        self.read(move |c| {
            let data: Option<String> = c
                .prepare_cached("SELECT data FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3")?
                .query_row(params![key.resource, key.namespace, key.name], |r| r.get(0))
                .optional()?;
            data.as_deref().map(parse).transpose()
        })
        .await
    }

    async fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Listing, StoreError> {
        let resource = resource.to_string();
        let namespace = namespace.map(str::to_string);
        self.read(move |c| {
            // One read transaction: the items and the revision are from the same snapshot.
            c.execute_batch("BEGIN DEFERRED")?;
            let result = (|| {
                let mut stmt = c.prepare_cached(
                    "SELECT data FROM objects WHERE resource = ?1 AND (?2 IS NULL OR namespace = ?2)
                     ORDER BY namespace, name",
                )?;
                let rows = stmt.query_map(params![resource, namespace], |r| r.get::<_, String>(0))?;
                let mut items = Vec::new();
                for row in rows {
                    items.push(parse(&row?)?);
                }
                let revision = meta_get(c, "revision")?;
                Ok(Listing { items, revision })
            })();
            c.execute_batch("COMMIT")?;
            result
        })
        .await
    }

    async fn create(&self, key: &Key, object: Value) -> Result<Value, StoreError> {
        let what = describe(key);
        self.write(key, move |stored| match stored {
            Some(_) => Err(StoreError::AlreadyExists(what)),
            None => Ok(WriteOp::Put(EventType::Added, object)),
        })
        .await
    }

    async fn update(&self, key: &Key, object: Value, expected: Option<u64>) -> Result<Value, StoreError> {
        let what = describe(key);
        self.write(key, move |stored| match stored {
            None => Err(StoreError::NotFound(what)),
            Some((rev, _)) => {
                check_expected(expected, rev)?;
                Ok(WriteOp::Put(EventType::Modified, object))
            }
        })
        .await
    }

    async fn delete(&self, key: &Key, expected: Option<u64>) -> Result<Value, StoreError> {
        let what = describe(key);
        self.write(key, move |stored| match stored {
            None => Err(StoreError::NotFound(what)),
            Some((rev, obj)) => {
                check_expected(expected, rev)?;
                Ok(WriteOp::Delete(obj))
            }
        })
        .await
    }

    async fn watch(&self, filter: WatchFilter, from: u64) -> Result<WatchStream, StoreError> {
        // Subscribe before reading the log, so nothing committed in between is missed.
        let rx = self.inner.tx.subscribe();
        let compacted = self.read(|c| meta_get(c, "compacted")).await?;
        if from < compacted {
            return Err(StoreError::Gone { requested: from, oldest: compacted + 1 });
        }
        let state =
            WatchState { store: self.clone(), filter, last: from, rx, phase: Phase::Replay, buf: VecDeque::new() };
        Ok(Box::pin(futures::stream::unfold(state, WatchState::next)))
    }

    async fn revision(&self) -> Result<u64, StoreError> {
        self.read(|c| meta_get(c, "revision")).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::json;

    fn obj(name: &str, v: i64) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"v": v}})
    }

    #[tokio::test]
    async fn crud_and_cas() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let k = Key::cluster("/nodes", "a");
        let created = s.create(&k, obj("a", 1)).await.unwrap();
        assert_eq!(super::super::revision_of(&created), Some(1));
        assert!(matches!(s.create(&k, obj("a", 1)).await, Err(StoreError::AlreadyExists(_))));
        let upd = s.update(&k, obj("a", 2), Some(1)).await.unwrap();
        assert_eq!(super::super::revision_of(&upd), Some(2));
        assert!(matches!(s.update(&k, obj("a", 3), Some(1)).await, Err(StoreError::Conflict { have: 1, stored: 2 })));
        assert_eq!(s.get(&k).await.unwrap().unwrap()["spec"]["v"], 2);
        s.create(&Key::cluster("/nodes", "b"), obj("b", 1)).await.unwrap();
        s.create(&Key::cluster("/other", "c"), obj("c", 1)).await.unwrap();
        let l = s.list("/nodes", None).await.unwrap();
        assert_eq!(l.items.len(), 2);
        assert_eq!(l.revision, 4);
        let del = s.delete(&k, None).await.unwrap();
        assert_eq!(super::super::revision_of(&del), Some(5));
        assert!(s.get(&k).await.unwrap().is_none());
        assert!(matches!(s.delete(&k, None).await, Err(StoreError::NotFound(_))));
    }

    #[tokio::test]
    async fn watch_replays_then_follows_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            for i in 0..5 {
                s.create(&Key::cluster("/nodes", &format!("n{i}")), obj("x", i)).await.unwrap();
            }
            s.create(&Key::cluster("/other", "o"), obj("o", 0)).await.unwrap();
        }
        // Reopened: revisions continue, the log is still there.
        let s = SqliteStore::open(&path).unwrap();
        let mut w = s.watch(WatchFilter::resource("/nodes"), 2).await.unwrap();
        let got: Vec<u64> = (&mut w).take(3).map(|e| e.unwrap().revision).collect().await;
        assert_eq!(got, vec![3, 4, 5]);
        let created = s.create(&Key::cluster("/nodes", "late"), obj("late", 9)).await.unwrap();
        assert_eq!(super::super::revision_of(&created), Some(7));
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!((ev.revision, ev.kind, ev.key.name.as_str()), (7, EventType::Added, "late"));
    }

    #[tokio::test]
    async fn lagging_watcher_misses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let mut w = s.watch(WatchFilter::default(), 0).await.unwrap();
        // More writes than the broadcast buffer holds, before the watcher reads anything.
        for i in 0..5000 {
            s.create(&Key::cluster("/nodes", &format!("n{i}")), obj("x", i)).await.unwrap();
        }
        let revs: Vec<u64> = (&mut w).take(5000).map(|e| e.unwrap().revision).collect().await;
        assert_eq!(revs, (1..=5000).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn compacted_history_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open_with_retain(&dir.path().join("s.db"), 10).unwrap();
        for i in 0..1000 {
            s.create(&Key::cluster("/nodes", &format!("n{i}")), obj("x", i)).await.unwrap();
        }
        assert!(matches!(s.watch(WatchFilter::default(), 5).await, Err(StoreError::Gone { .. })));
        let mut w = s.watch(WatchFilter::default(), 995).await.unwrap();
        assert_eq!(w.next().await.unwrap().unwrap().revision, 996);
    }
}
