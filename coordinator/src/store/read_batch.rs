//! Point reads of many concurrent requests, answered by one read of the store.
//!
//! Every API request is authenticated by its token. On etcd a lookup was a round trip of its
//! own, ~2 per node update in a rollout, each a linearizable read through etcd's leader. A cache
//! fed by a watch would answer from memory, but could answer "still valid" for a token that
//! `aloft-coordinator token revoke` (another process) has already deleted: the watch event
//! arrives after the command returned, and aloft promises that a revoked token stops working
//! at the next request.
//!
//! This keeps that promise and still shares the round trips. One read is in flight at a time;
//! the keys asked for meanwhile wait, and are then read together, in one etcd read. Every
//! read therefore starts after each of its keys was asked for, so its answer is at least as
//! new as anything that had been committed when the request asked: linearizable, like
//! etcd's own reads. Under load a read serves every request that arrived during the one before
//! it; alone, a request waits for one read, as before.

use super::StoreError;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A key's value, or None when the store has no such key.
pub(crate) type Value = Option<Vec<u8>>;

/// Reads the given distinct keys at once; answers one value per key, in their order.
pub(crate) type ReadMany = Arc<dyn Fn(Vec<String>) -> BoxFuture<'static, Result<Vec<Value>, StoreError>> + Send + Sync>;

type Reply = oneshot::Sender<Result<Value, StoreError>>;

pub(crate) struct ReadBatch {
    state: Arc<Mutex<State>>,
    read: ReadMany,
}

#[derive(Default)]
struct State {
    waiting: Vec<(String, Reply)>,
    /// A reader task is running: it takes `waiting` once its read in flight is answered.
    running: bool,
    /// Reads made, for tests and metrics.
    reads: u64,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl ReadBatch {
    pub(crate) fn new(read: ReadMany) -> Self {
        ReadBatch { state: Arc::default(), read }
    }

    /// The value of `key`, read after this call began.
    pub(crate) async fn get(&self, key: String) -> Result<Value, StoreError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut s = lock(&self.state);
            s.waiting.push((key, tx));
            !std::mem::replace(&mut s.running, true)
        };
        if start {
            // A task of its own: a request that goes away must not take the reader with it.
            tokio::spawn(Self::reader(self.state.clone(), self.read.clone()));
        }
        rx.await.map_err(|_| StoreError::Backend("a token lookup was dropped before it was read".into()))?
    }

    /// How many reads answered the lookups so far.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        lock(&self.state).reads
    }

    async fn reader(state: Arc<Mutex<State>>, read: ReadMany) {
        loop {
            let batch = {
                let mut s = lock(&state);
                if s.waiting.is_empty() {
                    s.running = false;
                    return;
                }
                s.reads += 1;
                std::mem::take(&mut s.waiting)
            };
            let mut keys: Vec<String> = batch.iter().map(|(k, _)| k.clone()).collect();
            keys.sort_unstable();
            keys.dedup();
            match read(keys.clone()).await {
                Ok(values) if values.len() == keys.len() => {
                    let values: HashMap<String, Value> = keys.into_iter().zip(values).collect();
                    for (key, reply) in batch {
                        let _ = reply.send(Ok(values.get(&key).cloned().flatten()));
                    }
                }
                Ok(values) => {
                    let e = format!("a batched read answered {} values for {} keys", values.len(), keys.len());
                    for (_, reply) in batch {
                        let _ = reply.send(Err(StoreError::Backend(e.clone())));
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    for (_, reply) in batch {
                        let _ = reply.send(Err(StoreError::Backend(e.clone())));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A map behind the batcher, whose reads take a moment, as etcd's do.
    fn over(map: Arc<Mutex<HashMap<String, Vec<u8>>>>, fail: Arc<AtomicBool>) -> ReadBatch {
        ReadBatch::new(Arc::new(move |keys: Vec<String>| {
            let map = map.clone();
            let fail = fail.clone();
            Box::pin(async move {
                // What the read sees is what the map holds when it starts.
                let seen: Vec<Value> = {
                    let m = map.lock().unwrap_or_else(|e| e.into_inner());
                    keys.iter().map(|k| m.get(k).cloned()).collect()
                };
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                if fail.load(Ordering::SeqCst) {
                    return Err(StoreError::Backend("etcd: connection refused".into()));
                }
                Ok(seen)
            })
        }))
    }

    #[tokio::test]
    async fn concurrent_lookups_share_reads_and_each_sees_what_was_there_when_it_asked() {
        let map: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
        for i in 0..100 {
            lock_map(&map).insert(format!("k{i}"), format!("v{i}").into_bytes());
        }
        let fail = Arc::new(AtomicBool::new(false));
        let batch = Arc::new(over(map.clone(), fail.clone()));
        let mut tasks = Vec::new();
        for i in 0..500 {
            let b = batch.clone();
            // Every fifth key does not exist.
            let key = if i % 5 == 0 { format!("missing{i}") } else { format!("k{}", i % 100) };
            tasks.push(tokio::spawn(async move { (key.clone(), b.get(key).await) }));
        }
        for t in tasks {
            let (key, got) = t.await.expect("lookup task");
            let want = key.strip_prefix('k').map(|n| format!("v{n}").into_bytes());
            assert_eq!(got.expect("lookup"), want, "{key}");
        }
        let reads = batch.reads();
        assert!((1..=3).contains(&reads), "500 concurrent lookups took {reads} reads");

        // A key deleted while a read is in flight: a lookup that began after the delete is
        // read after it, even though a read that began before was still answering.
        let first = {
            let b = batch.clone();
            tokio::spawn(async move { b.get("k1".into()).await })
        };
        // Until its read has begun (the batch is taken and read in the same step).
        while batch.reads() == reads {
            tokio::task::yield_now().await;
        }
        lock_map(&map).remove("k1");
        let after = batch.get("k1".into()).await.expect("lookup");
        assert_eq!(after, None, "a lookup that began after the delete does not see the key");
        assert_eq!(first.await.expect("task").expect("lookup"), Some(b"v1".to_vec()));

        // A failed read fails every lookup it was for, and the next read is tried afresh.
        fail.store(true, Ordering::SeqCst);
        let e = batch.get("k2".into()).await.expect_err("failed read");
        assert!(e.to_string().contains("connection refused"), "{e}");
        fail.store(false, Ordering::SeqCst);
        assert_eq!(batch.get("k2".into()).await.expect("lookup"), Some(b"v2".to_vec()));
    }

    fn lock_map(m: &Mutex<HashMap<String, Vec<u8>>>) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}
