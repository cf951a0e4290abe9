//! Token lookups answered from memory for as long as nothing has written the tokens' WAL.
//!
//! Every API request is authenticated by its token, and the SQLite point read that does it was
//! about a tenth of the API threads' time in a 10,000-node rollout. A cache with a time to live
//! (kube-apiserver trusts a lookup for 10 s) would break aloft's promise that a token replaced
//! by `aloft-coordinator token create` in another process stops working at the next request.
//!
//! This cache keeps that promise with inotify. It watches the WAL of the tokens' database (in
//! WAL mode every commit, from any process, is written there). SQLite commits by `pwrite` into
//! the WAL before it publishes the commit to readers, and the kernel queues the inotify event
//! inside that `pwrite`. So by the time another process's token change is visible, or its
//! command has returned, the event is waiting in our queue. Every lookup first drains the
//! queue (one non-blocking `read`, a fraction of the SQLite read it replaces) and drops the
//! whole cache on any event, under the same lock as the lookup. The database file itself is
//! not watched: only checkpoints write it, copying pages already committed, which changes no
//! answer (the checkpoint after a fleet enrolled dropped the whole cache when it was).
//!
//! A lookup that missed reads SQLite outside the lock, so it carries the cache's generation:
//! its answer is kept only if no event arrived meanwhile (an answer read before a concurrent
//! change could otherwise outlive the change's event). Only tokens that exist are kept; an
//! unknown token always goes to SQLite. If the watch cannot be set up or is lost (the file
//! deleted or moved), the cache turns itself off and every lookup reads SQLite, as before.

use inotify::{EventMask, Inotify, WatchMask};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Mutex;

/// Above this many entries the cache starts again empty (a fleet has one token per node).
const MAX_ENTRIES: usize = 200_000;

/// A token hash's (name, role), as the tokens' table has them.
pub(crate) type Entry = (String, String);

/// What [`TokenCache::get`] found.
pub(crate) enum Cached {
    Hit(Entry),
    /// Not cached: read SQLite, then offer the answer with [`TokenCache::put`] and this
    /// generation.
    Miss(u64),
}

pub(crate) struct TokenCache {
    inner: Mutex<Inner>,
}

struct Inner {
    /// None: caching is off.
    watch: Option<Inotify>,
    /// Bumped whenever an event dropped the entries.
    generation: u64,
    entries: HashMap<String, Entry>,
    buf: Vec<u8>,
}

impl TokenCache {
    /// Watch `files` (the tokens' WAL, which must exist). On any failure the cache is off:
    /// correct, only slower.
    pub(crate) fn watching(files: &[&Path]) -> Self {
        let watch = (|| -> std::io::Result<Inotify> {
            let inotify = Inotify::init()?;
            let mask = WatchMask::MODIFY | WatchMask::DELETE_SELF | WatchMask::MOVE_SELF;
            for f in files {
                inotify.watches().add(f, mask)?;
            }
            Ok(inotify)
        })();
        let watch = match watch {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, files = ?files, "cannot watch the tokens' WAL; every request reads the token from disk");
                None
            }
        };
        TokenCache { inner: Mutex::new(Inner { watch, generation: 0, entries: HashMap::new(), buf: vec![0; 4096] }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, hash: &str) -> Cached {
        let mut inner = self.lock();
        inner.sync();
        match inner.entries.get(hash) {
            Some(e) => Cached::Hit(e.clone()),
            None => Cached::Miss(inner.generation),
        }
    }

    /// Keep `entry` for `hash`, read from SQLite after [`TokenCache::get`] returned
    /// `Miss(generation)`, unless the tokens' WAL was written since.
    pub(crate) fn put(&self, generation: u64, hash: String, entry: Entry) {
        let mut inner = self.lock();
        inner.sync();
        if inner.watch.is_none() || inner.generation != generation {
            return;
        }
        if inner.entries.len() >= MAX_ENTRIES {
            inner.entries.clear();
        }
        inner.entries.insert(hash, entry);
    }

    #[cfg(test)]
    pub(crate) fn is_on(&self) -> bool {
        self.lock().watch.is_some()
    }

    /// How many lookups are kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        let mut inner = self.lock();
        inner.sync();
        inner.entries.len()
    }
}

impl Inner {
    /// Drain the watch's events: any event drops every entry; a lost watch turns caching off.
    fn sync(&mut self) {
        let Some(watch) = self.watch.as_mut() else { return };
        let (mut changed, mut lost) = (false, false);
        loop {
            match watch.read_events(&mut self.buf) {
                Ok(events) => {
                    for ev in events {
                        changed = true;
                        if ev.mask.intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                            lost = true;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the watch of the tokens' WAL failed");
                    lost = true;
                    break;
                }
            }
        }
        if changed || lost {
            self.generation += 1;
            self.entries.clear();
        }
        if lost {
            tracing::warn!("the tokens' WAL was deleted or moved; every request now reads the token from disk");
            self.watch = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn entry() -> Entry {
        ("node:n1".into(), "node:n1".into())
    }

    /// A file `t.db` in a fresh directory, and a cache watching it.
    fn watched() -> (tempfile::TempDir, PathBuf, TokenCache) {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        std::fs::write(&db, b"x").unwrap();
        let c = TokenCache::watching(&[&db]);
        (dir, db, c)
    }

    /// Look "h" up (a miss) and offer its answer with the generation of that miss.
    fn miss_then_put(c: &TokenCache) {
        let Cached::Miss(g) = c.get("h") else { panic!("\"h\" was kept already") };
        c.put(g, "h".into(), entry());
    }

    fn hits(c: &TokenCache) -> bool {
        matches!(c.get("h"), Cached::Hit(e) if e == entry())
    }

    #[test]
    fn any_write_to_a_watched_file_drops_the_entries() {
        let (_dir, db, c) = watched();
        assert!(c.is_on());
        miss_then_put(&c);
        assert!(hits(&c));
        std::fs::write(&db, b"y").unwrap();
        assert!(!hits(&c), "a write is seen by the next lookup");
        miss_then_put(&c);
        assert!(hits(&c));
        std::fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(0).unwrap();
        assert!(!hits(&c), "a truncation too");
    }

    /// A lookup that read SQLite before a change must not keep its answer past the change.
    #[test]
    fn an_answer_read_before_a_write_is_not_kept() {
        let (_dir, db, c) = watched();
        let Cached::Miss(g) = c.get("h") else { panic!() };
        std::fs::write(&db, b"changed while the lookup read the old row").unwrap();
        c.put(g, "h".into(), entry());
        assert!(!hits(&c));
    }

    #[test]
    fn a_deleted_file_turns_the_cache_off_and_a_missing_one_never_turns_it_on() {
        let (dir, db, c) = watched();
        std::fs::remove_file(&db).unwrap();
        miss_then_put(&c);
        assert!(!c.is_on());
        assert!(!hits(&c), "nothing is kept once the watch is lost");
        let off = TokenCache::watching(&[&dir.path().join("absent.db")]);
        assert!(!off.is_on());
        miss_then_put(&off);
        assert!(!hits(&off));
    }
}
