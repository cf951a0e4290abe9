//! The embedded store: one SQLite file in WAL mode.
//!
//! Two tables: `objects` (the current state) and `log` (every write, with the object as written,
//! keyed by revision). A write bumps the revision, changes `objects` and appends to `log`; one
//! writer thread commits the writes queued meanwhile together (group commit, one fsync), and a
//! write is acknowledged only after that COMMIT returns with `synchronous=FULL`, so an
//! acknowledged write survives kill -9 and power loss. Watches replay `log` and then follow the
//! in-memory [`Hub`] of new writes; a watcher that falls behind goes back to `log` instead of
//! losing events. The log keeps the newest `retain` revisions; a watch from an older
//! revision gets `Gone` (HTTP 410), exactly as Kubernetes clients expect after etcd compaction.

use super::follow::{self, History};
use super::hub::{Hub, Subscription};
pub use super::object_cache::CachedResource;
use super::object_cache::{parse, stored_of, Kept, ObjectCache};
use super::token_cache::{Cached, TokenCache};
use super::{
    set_revision, CasWrite, Event, EventType, JsonListing, Key, Listing, ProgressSchedule, ProgressStream, Store,
    StoreError, Stored, WatchFilter, WatchStream,
};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Revisions of history kept for watches by default.
pub const DEFAULT_RETAIN: u64 = 200_000;
const READERS: usize = 4;
const REPLAY_PAGE: i64 = 1000;

struct Inner {
    /// The writer thread's queue (see [`writer_thread`]); it ends when this is dropped.
    jobs: std::sync::mpsc::Sender<Job>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    hub: Arc<Hub>,
    retain: u64,
    cache: Arc<ObjectCache>,
    /// Token lookups already answered, dropped whenever the tokens' WAL is written.
    tokens: TokenCache,
}

/// An object's stored JSON, from the file.
fn read_text(c: &Connection, key: &Key) -> Result<Option<String>, StoreError> {
    Ok(c.prepare_cached("SELECT data FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3")?
        .query_row(params![key.resource, key.namespace, key.name], |r| r.get(0))
        .optional()?)
}

/// SQLite-backed [`Store`]. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

/// A connection to the store's file at `path`, with the tokens' file attached.
fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let conn = open_file(path)?;
    attach_tokens(&conn, path)?;
    Ok(conn)
}

/// Makes the store's file at `path` (and its write-ahead log and shared-memory files) readable
/// by the owner alone: every MachineConfig's secrets are in it. SQLite creates a file 0644 and
/// gives the other two the file's mode, so a data dir an operator made 0755 left it readable by
/// every local user. A missing file is created empty (a new store) with mode 0600; an existing
/// one others may read is made 0600, and that is logged.
fn make_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |what: &str, p: &Path, e: std::io::Error| StoreError::Backend(format!("{what} {}: {e}", p.display()));
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        // A read-only data dir: the open below says what it can (a store there may still be read).
        Err(e) if matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) => {
            return Ok(())
        }
        Err(e) => return Err(fail("creating", path, e)),
    }
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let mut shm = path.as_os_str().to_owned();
    shm.push("-shm");
    for p in [path.to_path_buf(), wal.into(), shm.into()] {
        // A read-only mount cannot be mended: said, and the store still read.
        if let Err(e) = crate::fsutil::keep_private(&p) {
            tracing::warn!(error = %format!("{e:#}"), "the store's file is readable by other users");
        }
    }
    Ok(())
}

/// How long a store connection waits for a lock another holds before giving up.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection to one SQLite file with the store's settings, nothing attached.
fn open_file(path: &Path) -> Result<Connection, StoreError> {
    make_private(path)?;
    open_file_as_is(path)
}

/// [`open_file`] without making the file private first: for a file that is checked before
/// anything of it changes.
fn open_file_as_is(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    // Closing a connection does not copy the write-ahead log into the database file (the
    // checkpointer does that while serving, and the next open replays what is left): a start
    // refused for a damaged store rewrote `aloft.db` and deleted its log on the way out, the
    // very files a recovery or a forensic copy needs.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The savepoint every write runs in keeps its statement journal in memory, not in a temp
    // file: that file was truncated and grown again by every commit, and the kernel zeroed its
    // new pages on each write (a fifth of the writer thread's time at 10,000 nodes).
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(conn)
}

/// `objects` is an ordinary (rowid) table with a unique key. It was a WITHOUT ROWID table: such
/// a table keeps rows in an index b-tree, which stores at most ~1,000 bytes of a row in its page
/// and the rest in overflow pages, so every write of a Node (a few KB of JSON) rewrote and
/// re-read overflow pages too. Measured at 10,000 nodes: the writer's time per write fell from
/// 81-104 µs to 45-49 µs, its page reads from ~8,500 to ~100 a second, its WAL writes by a
/// third. [`migrate_objects`] converts an old file.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS objects (
    resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    revision INTEGER NOT NULL, data TEXT NOT NULL,
    UNIQUE (resource, namespace, name));
CREATE TABLE IF NOT EXISTS log (
    revision INTEGER PRIMARY KEY, resource TEXT NOT NULL, namespace TEXT NOT NULL,
    name TEXT NOT NULL, kind INTEGER NOT NULL, data TEXT NOT NULL);
-- A watch of one object (every agent watches its own Node) replays only that object's rows.
CREATE INDEX IF NOT EXISTS log_by_object ON log (resource, name, revision);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('compacted', 0);
";

/// The API tokens' table, in a database file of its own next to the store's (see
/// [`tokens_path`]), attached to every connection as `tok`.
/// `expires`: RFC 3339, or NULL for a token that never expires (added to older files by
/// [`add_token_expiry`]).
const TOKENS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tok.tokens (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, role TEXT NOT NULL, created TEXT NOT NULL, expires TEXT);
";

/// Whether the tokens table of `schema` on `c` has the `expires` column.
fn has_token_expiry(c: &Connection, schema: &str) -> Result<bool, rusqlite::Error> {
    let n: i64 =
        c.query_row("SELECT count(*) FROM pragma_table_info('tokens', ?1) WHERE name = 'expires'", [schema], |r| {
            r.get(0)
        })?;
    Ok(n > 0)
}

/// The `expires` column for a tokens file made before it: its tokens never expire. An older
/// aloft still reads and writes the file (it names its columns).
fn add_token_expiry(c: &Connection) -> Result<(), StoreError> {
    if !has_token_expiry(c, "tok")? {
        c.execute_batch("ALTER TABLE tok.tokens ADD COLUMN expires TEXT")?;
    }
    Ok(())
}

/// Whether a token whose `expires` is this has expired at `now`. An unreadable time is expired:
/// refusing is the safe side.
pub(crate) fn expired(expires: Option<&str>, now: chrono::DateTime<chrono::Utc>) -> bool {
    expires.is_some_and(|e| chrono::DateTime::parse_from_rfc3339(e).map_or(true, |t| t <= now))
}

/// Where the tokens of the store at `path` live: `aloft.db` -> `aloft-tokens.db`.
///
/// Why a file of its own: every request is authenticated by a token lookup, and SQLite drops a
/// connection's whole page cache for a file when another connection has committed to it since.
/// With the tokens in the store's file, every commit of the writer (hundreds a second in a
/// rollout) sent the next lookup back to the disk cache for its pages, a tenth of the API
/// threads' time at 10,000 nodes. In a file of their own the readers' pages stay valid until a
/// token changes, and the lookups kept in memory ([`TokenCache`]) can be dropped exactly when
/// one does: a write to this file's WAL.
pub fn tokens_path(path: &Path) -> std::path::PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "aloft".into());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-tokens.{}", ext.to_string_lossy()),
        None => format!("{stem}-tokens"),
    };
    path.with_file_name(name)
}

/// Attach the tokens' file as `tok`, with the store's durability.
fn attach_tokens(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let tokens = tokens_path(path);
    make_private(&tokens)?;
    let attach = || -> rusqlite::Result<()> {
        conn.execute("ATTACH DATABASE ?1 AS tok", [tokens.to_string_lossy()])?;
        conn.pragma_update(Some("tok"), "journal_mode", "WAL")?;
        conn.pragma_update(Some("tok"), "synchronous", "FULL")
    };
    attach().map_err(|e| StoreError::Backend(format!("the tokens' file {}: {e}", tokens.display())))
}

/// The store's data format, kept in `meta` as `format`. An aloft refuses a store of a higher
/// format than its own, before it changes anything: a coordinator downgraded onto a data
/// directory a newer one wrote had served it wrongly without a word (a pool whose stored fields
/// it could not parse went unmanaged and could not be edited; tokens the newer one had moved
/// were gone). Raise it with any change after which an older aloft would misread what this one
/// stores: a table's layout, a value older readers refuse or drop. (Stores from before the
/// marker are format 1; aloft from before it cannot refuse anything.)
pub const STORE_FORMAT: i64 = 1;

/// Refuse a store a newer aloft wrote (see [`STORE_FORMAT`]).
fn check_format(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    if !has_table(conn, "meta")? {
        return Ok(());
    }
    let found: Option<i64> =
        conn.query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| r.get(0)).optional()?;
    match found {
        Some(found) if found > STORE_FORMAT => Err(StoreError::Backend(format!(
            "{} was written by a newer aloft (store format {found}; this aloft reads format {STORE_FORMAT} and \
             older): run the newer aloft-coordinator on it, or restore a backup of the data directory taken \
             before the upgrade. Nothing was changed",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Whether the store's own file has a table `name`.
fn has_table(conn: &Connection, name: &str) -> Result<bool, StoreError> {
    let n: i64 =
        conn.query_row("SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| {
            r.get(0)
        })?;
    Ok(n > 0)
}

/// Move the tokens of a store file from before [`tokens_path`] into the tokens' file: first
/// copied (and committed there), then dropped from the store's file. A crash in between leaves
/// them in both, and the next open finishes. Of two tokens of one name the newer stays: one
/// replaced in the tokens' file since, or one created again in the store's file by an aloft from
/// before this file that served the directory meanwhile (the older one was kept, and the token
/// its holder had been given refused).
fn migrate_tokens(conn: &mut Connection) -> Result<(), StoreError> {
    if !has_table(conn, "tokens")? {
        return Ok(());
    }
    let txn = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let moved = txn.execute(
        "INSERT INTO tok.tokens (hash, name, role, created) SELECT hash, name, role, created FROM main.tokens WHERE true
         ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, role = excluded.role, created = excluded.created
             WHERE excluded.created > tok.tokens.created
         ON CONFLICT DO NOTHING",
        [],
    )?;
    txn.commit()?;
    conn.execute_batch("DROP TABLE main.tokens")?;
    tracing::info!(tokens = moved, "store: moved the API tokens into a file of their own");
    Ok(())
}

/// Convert a store file whose `objects` table is WITHOUT ROWID (see [`SCHEMA`]) in one
/// transaction: a crash half-way leaves the old table as it was.
fn migrate_objects(conn: &mut Connection) -> Result<(), StoreError> {
    let sql: Option<String> = conn
        .query_row("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'objects'", [], |r| r.get(0))
        .optional()?;
    if !sql.is_some_and(|s| s.to_ascii_uppercase().contains("WITHOUT ROWID")) {
        return Ok(());
    }
    let txn = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    txn.execute_batch(
        "ALTER TABLE objects RENAME TO objects_without_rowid;
         CREATE TABLE objects (
             resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
             revision INTEGER NOT NULL, data TEXT NOT NULL,
             UNIQUE (resource, namespace, name));
         INSERT INTO objects (resource, namespace, name, revision, data)
             SELECT resource, namespace, name, revision, data FROM objects_without_rowid;
         DROP TABLE objects_without_rowid;",
    )?;
    txn.commit()?;
    tracing::info!("store: converted the objects table to a rowid table");
    Ok(())
}

fn meta_get(conn: &Connection, key: &str) -> Result<u64, StoreError> {
    let v: i64 = conn.prepare_cached("SELECT value FROM meta WHERE key = ?1")?.query_row([key], |r| r.get(0))?;
    Ok(v as u64)
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
        Self::open_with(path, retain, &[])
    }

    /// [`SqliteStore::open_with_retain`], keeping the objects of `cached` resources in memory
    /// (see [`ObjectCache`]; loaded here, before anything else can write).
    pub fn open_with(path: &Path, retain: u64, cached: &[CachedResource]) -> Result<Self, StoreError> {
        // The format is checked before the tokens' file is attached (and created when missing)
        // and before an existing file's mode is mended, so that a store refused for its format
        // is left as it was, tokens' file and modes and all. A new file is created private
        // first: SQLite would create it readable by all.
        let existed = path.exists();
        let mut writer = if existed { open_file_as_is(path)? } else { open_file(path)? };
        check_format(&writer, path)?;
        if existed {
            make_private(path)?;
        }
        attach_tokens(&writer, path)?;
        migrate_objects(&mut writer)?;
        writer.execute_batch(SCHEMA)?;
        writer.execute_batch(TOKENS_SCHEMA)?;
        add_token_expiry(&writer)?;
        migrate_tokens(&mut writer)?;
        writer.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('format', ?1)", [STORE_FORMAT])?;
        // Checkpoints run on a thread of their own (see `checkpointer`), not inside a commit.
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        let checkpoints = open_conn(path)?;
        let readers = (0..READERS).map(|_| open_conn(path).map(Mutex::new)).collect::<Result<Vec<_>, _>>()?;
        let hub = Arc::new(Hub::new(meta_get(&writer, "revision")?));
        let cache = Arc::new(ObjectCache::of(cached));
        {
            let mut st = cache.lock();
            st.revision = meta_get(&writer, "revision")?;
            let mut stmt = writer.prepare("SELECT resource, namespace, name, data FROM objects WHERE resource = ?1")?;
            for c in cached {
                let rows = stmt.query_map([&c.resource], |r| {
                    Ok((Key { resource: r.get(0)?, namespace: r.get(1)?, name: r.get(2)? }, r.get::<_, String>(3)?))
                })?;
                for row in rows {
                    let (key, data) = row?;
                    let kept = if c.parsed {
                        Kept::Parsed(Stored { object: Arc::new(parse(&data)?), json: Arc::from(data) })
                    } else {
                        parse(&data)?; // a row that does not parse fails the open, as a parsed one does
                        Kept::Text(Arc::from(data))
                    };
                    st.put(key, kept);
                }
            }
        }
        // The WAL exists now: the writer has the tokens' file attached, in WAL mode.
        let mut tokens_wal = tokens_path(path).into_os_string();
        tokens_wal.push("-wal");
        let tokens_wal = std::path::PathBuf::from(tokens_wal);
        let tokens = TokenCache::watching(&[&tokens_wal]);
        let writer_cache = cache.clone();
        let (jobs, rx) = std::sync::mpsc::channel();
        let (checkpoint_due, commits) = std::sync::mpsc::sync_channel(1);
        let writer_hub = hub.clone();
        let thread = |name: &str| std::thread::Builder::new().name(name.into());
        let failed = |e: std::io::Error| StoreError::Backend(format!("starting the store's threads: {e}"));
        thread("store-checkpoint").spawn(move || checkpointer(checkpoints, commits)).map_err(failed)?;
        thread("store-writer")
            .spawn(move || writer_thread(writer, rx, writer_hub, writer_cache, checkpoint_due))
            .map_err(failed)?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                jobs,
                readers,
                next_reader: AtomicUsize::new(0),
                hub,
                retain: retain.max(1),
                cache,
                tokens,
            }),
        })
    }

    /// Run a point read (one indexed row: a token, an object by key) on a free reader
    /// connection right here, or on the blocking pool when every reader is busy. Handing each
    /// of a fleet's small reads to another thread cost more (a wake-up and a context switch
    /// each way) than the read itself, which is tens of microseconds.
    async fn read_point<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        for conn in &self.inner.readers {
            if let Ok(conn) = conn.try_lock() {
                return f(&conn);
            }
        }
        self.read(f).await
    }

    /// Every stored object of `resource` (in `namespace` when given) as its JSON text, sorted by
    /// namespace and name, with the revision they are at (one snapshot), handed to `f` on the
    /// reading thread.
    async fn listing<T: Send + 'static>(
        &self,
        resource: &str,
        namespace: Option<&str>,
        f: impl FnOnce(Vec<String>, u64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let resource = resource.to_string();
        let namespace = namespace.map(str::to_string);
        self.read(move |c| {
            c.execute_batch("BEGIN DEFERRED")?;
            let result = (|| -> Result<(Vec<String>, u64), StoreError> {
                let mut stmt = c.prepare_cached(
                    "SELECT data FROM objects WHERE resource = ?1 AND (?2 IS NULL OR namespace = ?2)
                     ORDER BY namespace, name",
                )?;
                let rows = stmt.query_map(params![resource, namespace], |r| r.get::<_, String>(0))?;
                let items = rows.collect::<Result<Vec<String>, _>>()?;
                Ok((items, meta_get(c, "revision")?))
            })();
            c.execute_batch("COMMIT")?;
            let (items, revision) = result?;
            f(items, revision)
        })
        .await
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

    /// One write: `decide` sees the stored object's revision and returns what to do. It runs on
    /// the writer thread inside a group commit (see [`writer_thread`]); the result is returned,
    /// and the event published to watches, only once the commit is durable.
    async fn write(
        &self,
        key: &Key,
        origin: Option<&str>,
        decide: impl FnOnce(Option<u64>) -> Result<WriteOp, StoreError> + Send + 'static,
    ) -> Result<Stored, StoreError> {
        let key = key.clone();
        let retain = self.inner.retain;
        let origin: Option<Arc<str>> = origin.map(Arc::from);
        let ev = self
            .submit(Box::new(move |conn, head| {
                write_one(conn, head, key, retain, decide).map(|mut e| {
                    e.origin = origin;
                    vec![e]
                })
            }))
            .await?;
        ev.first().map(stored_of).ok_or_else(|| StoreError::Backend("write without an event".into()))
    }

    async fn update_by_origin(
        &self,
        key: &Key,
        object: Value,
        expected: Option<u64>,
        origin: Option<&str>,
    ) -> Result<Stored, StoreError> {
        let what = describe(key);
        self.write(key, origin, move |stored| match stored {
            None => Err(StoreError::NotFound(what)),
            Some(rev) => {
                check_expected(expected, rev)?;
                Ok(WriteOp::Put(EventType::Modified, object))
            }
        })
        .await
    }

    /// Queue `run` for the writer thread and wait for its commit.
    async fn submit(&self, run: WriteFn) -> Result<Vec<Event>, StoreError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.inner
            .jobs
            .send(Job { run, reply })
            .map_err(|_| StoreError::Backend("the store's writer has stopped".into()))?;
        rx.await.map_err(|_| StoreError::Backend("the store's writer has stopped".into()))?
    }
}

#[async_trait]
impl super::Tokens for SqliteStore {
    /// Store an API token's hash with its identity and role; see [`crate::auth`]. With `ttl`, it
    /// stops working that long from now (kubeadm's bootstrap tokens expire after 24 h).
    async fn put_token(
        &self,
        hash: String,
        name: String,
        role: String,
        ttl: Option<std::time::Duration>,
    ) -> Result<(), StoreError> {
        let now = chrono::Utc::now();
        let expires = super::token_expiry(now, ttl)?;
        self.submit(Box::new(move |conn, _| {
            let now = super::rfc3339(now);
            conn.execute(
                "INSERT INTO tok.tokens (hash, name, role, created, expires) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (name) DO UPDATE SET hash = ?1, role = ?3, created = ?4, expires = ?5",
                params![hash, name, role, now, expires],
            )?;
            Ok(Vec::new())
        }))
        .await
        .map(|_| ())
    }

    /// Store a token under `name` only if no token has that name: true if stored. Enrollment
    /// claims a node's credential this way, so two hosts enrolling under one name at the same
    /// time cannot both get one (the second is refused, not silently replacing the first).
    async fn claim_token(&self, hash: String, name: String, role: String) -> Result<bool, StoreError> {
        let stored = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stored.clone();
        self.submit(Box::new(move |conn, _| {
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let n = conn.execute(
                "INSERT INTO tok.tokens (hash, name, role, created) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO NOTHING",
                params![hash, name, role, now],
            )?;
            flag.store(n > 0, std::sync::atomic::Ordering::Relaxed);
            Ok(Vec::new())
        }))
        .await?;
        Ok(stored.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The hash of the token named `name`, if there is one.
    async fn token_hash_of(&self, name: String) -> Result<Option<String>, StoreError> {
        self.read_point(move |c| {
            Ok(c.prepare_cached("SELECT hash FROM tok.tokens WHERE name = ?1")?
                .query_row([name], |r| r.get(0))
                .optional()?)
        })
        .await
    }

    /// Every token's (name, role, created, expires), by name; never the hashes.
    async fn list_tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        self.read(|c| Ok(tokens_in(c, "tok")?)).await
    }

    /// Delete the token named `name` (and, with `hash`, only if it still has that hash: a token
    /// minted since under the same name stays). True if one was deleted. A deleted token stops
    /// working at the next request, also in a coordinator running in another process.
    async fn delete_token(&self, name: String, hash: Option<String>) -> Result<bool, StoreError> {
        let deleted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = deleted.clone();
        self.submit(Box::new(move |conn, _| {
            let n = match &hash {
                Some(h) => conn.execute("DELETE FROM tok.tokens WHERE name = ?1 AND hash = ?2", params![name, h])?,
                None => conn.execute("DELETE FROM tok.tokens WHERE name = ?1", params![name])?,
            };
            flag.store(n > 0, std::sync::atomic::Ordering::Relaxed);
            Ok(Vec::new())
        }))
        .await?;
        Ok(deleted.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Delete every token that has expired at `now` (one whose expiry cannot be read counts as
    /// expired, as it does for a request); returns their names, sorted. Kubernetes' tokencleaner
    /// deletes an expired bootstrap token the same way: it works no more, and kept it would be
    /// listed for good, and its name taken.
    async fn purge_expired_tokens(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Vec<String>, StoreError> {
        let purged = Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = purged.clone();
        self.submit(Box::new(move |conn, _| {
            let doomed: Vec<(String, String)> = conn
                .prepare_cached("SELECT name, expires FROM tok.tokens WHERE expires IS NOT NULL ORDER BY name")?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .filter(|(_, expires)| expired(Some(expires), now))
                .collect();
            let mut names = Vec::with_capacity(doomed.len());
            for (name, expires) in doomed {
                // Only the token that was read: one minted since under the name stays.
                conn.execute("DELETE FROM tok.tokens WHERE name = ?1 AND expires = ?2", params![name, expires])?;
                names.push(name);
            }
            *out.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = names;
            Ok(Vec::new())
        }))
        .await?;
        let names = std::mem::take(&mut *purged.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        Ok(names)
    }

    /// Look a token hash up: (name, role).
    /// From memory while the tokens' WAL is unwritten (see [`TokenCache`]): a token replaced
    /// by another process (the `token` subcommand on the same file) still stops working at
    /// the next request.
    async fn find_token(&self, hash: String) -> Result<Option<(String, String)>, StoreError> {
        let generation = match self.inner.tokens.get(&hash) {
            Cached::Hit(entry) => return Ok(Some(entry)),
            Cached::Miss(generation) => generation,
        };
        let key = hash.clone();
        let found: Option<(String, String, Option<String>)> = self
            .read_point(move |c| {
                Ok(c.prepare_cached("SELECT name, role, expires FROM tok.tokens WHERE hash = ?1")?
                    .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?)
            })
            .await?;
        match found {
            None => Ok(None),
            // A token that expires is never kept in memory: it is read each time (a bootstrap
            // token, used once per enrollment), so it stops working at its time.
            Some((_, _, Some(expires))) if expired(Some(&expires), chrono::Utc::now()) => Ok(None),
            Some((name, role, Some(_))) => Ok(Some((name, role))),
            Some((name, role, None)) => {
                self.inner.tokens.put(generation, hash, (name.clone(), role.clone()));
                Ok(Some((name, role)))
            }
        }
    }
}

/// The tokens of the store at `path`, read without opening the store for writing: `token list`
/// on a read-only copy (a mounted backup) or beside a running coordinator changes nothing.
/// `None` when the store has no tokens file yet (made at the next open, which moves older
/// stores' tokens into it).
pub fn list_tokens_read_only(path: &Path) -> Result<Option<Vec<TokenInfo>>, StoreError> {
    use rusqlite::OpenFlags;
    let file = tokens_path(path);
    if !file.exists() {
        return Ok(None);
    }
    let uri = format!("file:{}?mode=ro", uri_path(&file));
    let read_only = Connection::open_with_flags(uri, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI);
    match read_only.and_then(|c| tokens_in(&c, "main")) {
        Ok(t) => Ok(Some(t)),
        // A WAL store on a read-only file system without its shared-memory file (SQLite cannot
        // make one there): read a copy of the database and its log where it can, so that tokens
        // written since the last checkpoint are listed (read as it is, the file missed them).
        Err(_) => Ok(Some(list_tokens_from_copy(&file)?)),
    }
}

/// The tokens of the tokens file `file` (and its write-ahead log), read from a copy in a
/// directory of its own.
fn list_tokens_from_copy(file: &Path) -> Result<Vec<TokenInfo>, StoreError> {
    let copy = tempfile::tempdir().map_err(|e| StoreError::Backend(format!("a directory for a copy: {e}")))?;
    let db = copy.path().join("tokens.db");
    let copied = |from: &Path, to: &Path| {
        std::fs::copy(from, to).map_err(|e| StoreError::Backend(format!("copying {}: {e}", from.display())))
    };
    copied(file, &db)?;
    let mut wal = file.as_os_str().to_owned();
    wal.push("-wal");
    let wal = std::path::PathBuf::from(wal);
    if wal.exists() {
        copied(&wal, &copy.path().join("tokens.db-wal"))?;
    }
    Ok(tokens_in(&Connection::open(&db)?, "main")?)
}

/// The tokens table of `schema` on `c` (`main` on a connection to a tokens file; a file from
/// before the `expires` column lists every token as never expiring).
fn tokens_in(c: &Connection, schema: &str) -> Result<Vec<TokenInfo>, rusqlite::Error> {
    let expires = if has_token_expiry(c, schema)? { "expires" } else { "NULL" };
    let mut stmt = c.prepare(&format!("SELECT name, role, created, {expires} FROM {schema}.tokens ORDER BY name"))?;
    let rows = stmt.query_map([], |r| {
        Ok(TokenInfo { name: r.get(0)?, role: r.get(1)?, created: r.get(2)?, expires: r.get(3)? })
    })?;
    rows.collect()
}

/// `path` for a `file:` URI: the characters a URI gives a meaning to, control characters and
/// bytes beyond ASCII, escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'?' | b'#' | b'%' | 0..=0x1f | 0x7f.. => out.push_str(&format!("%{b:02X}")),
            _ => out.push(*b as char),
        }
    }
    out
}

/// A token as `aloft-coordinator token list` shows it (the hash stays in the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub name: String,
    pub role: String,
    /// RFC 3339, seconds.
    pub created: String,
    /// RFC 3339, seconds; `None`: never.
    pub expires: Option<String>,
}

impl TokenInfo {
    /// Whether it no longer works.
    pub fn expired(&self) -> bool {
        expired(self.expires.as_deref(), chrono::Utc::now())
    }
}

/// Work for the writer thread: changes made on its connection inside the open transaction
/// (with the transaction's newest revision to advance), returning the events to publish once
/// committed. A job is all or nothing: it runs in a savepoint of its own.
type WriteFn = Box<dyn FnOnce(&Connection, &mut u64) -> Result<Vec<Event>, StoreError> + Send>;

struct Job {
    run: WriteFn,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Event>, StoreError>>,
}

/// Writes queued while a commit is running go into the next commit together, at most this many.
const GROUP: usize = 512;

/// How long the checkpointer lets commits accumulate in the WAL before copying them into the
/// database file. A second, not 100 ms: a rollout rewrites the same Node pages several times a
/// second, and each checkpoint copies a page once and fsyncs the file, beside the writer's WAL
/// fsyncs. At 10,000 nodes, four interleaved runs each: ratio 1.306 / 1.269 / 1.228 / 1.329
/// with 100 ms, 1.215 / 1.246 / 1.266 / 1.232 with 1 s; the same at 1,000 nodes. The WAL then
/// holds up to a second of writes (tens of MB for that fleet).
const CHECKPOINT_AFTER: std::time::Duration = std::time::Duration::from_millis(1000);

/// Copies committed WAL frames into the database file, after commits (never while idle). With
/// SQLite's automatic checkpoint, every thousandth page a commit wrote made that commit also
/// copy the WAL back and fsync the database file: a pause of milliseconds for every write of
/// the group, on a rollout's critical path. PASSIVE: it never blocks the writer or a reader.
fn checkpointer(conn: Connection, commits: std::sync::mpsc::Receiver<()>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut due = commits.recv().is_ok();
    while due {
        std::thread::sleep(CHECKPOINT_AFTER);
        while commits.try_recv().is_ok() {}
        // Unqualified: every attached file, the tokens' too (the writer checkpoints none).
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "store checkpoint failed; retried after the next commit");
        }
        due = match commits.recv_timeout(TRUNCATE_WHEN_IDLE) {
            Ok(()) => true,
            Err(RecvTimeoutError::Disconnected) => false,
            Err(RecvTimeoutError::Timeout) => {
                // Quiet for a while: the log goes back to nothing. SQLite reuses a log from its
                // start but never shrinks it, so a burst (a rollout, a disk filled and freed)
                // left it at its largest for good, many times the store's size.
                // Without waiting: a TRUNCATE that waits for a long reader (a backup's copy, a
                // large list) holds off every writer meanwhile.
                let _ = conn.busy_timeout(std::time::Duration::ZERO);
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
                    tracing::debug!(error = %e, "store log truncation failed; tried again when next idle");
                }
                let _ = conn.busy_timeout(BUSY_TIMEOUT);
                commits.recv().is_ok()
            }
        };
    }
}

/// How long the store must go without a commit before its write-ahead log is truncated.
const TRUNCATE_WHEN_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// The single writer: takes every queued write, runs each inside its own SAVEPOINT of one
/// IMMEDIATE transaction (a write that fails — a conflict, a missing object — is rolled back
/// alone), commits once, then answers and publishes in revision order.
///
/// Why: with `synchronous=FULL` every COMMIT waits for an fsync of the WAL (3.5 ms measured here
/// under load), and a rollout makes ~5 writes per node; committed one at a time the fsyncs
/// alone cap a fleet at ~60 nodes per second. Group commit (what etcd's batched backend does)
/// pays one fsync for everything that arrived meanwhile, and no write is acknowledged before it
/// is durable.
fn writer_thread(
    mut conn: Connection,
    jobs: std::sync::mpsc::Receiver<Job>,
    hub: Arc<Hub>,
    cache: Arc<ObjectCache>,
    checkpoint_due: std::sync::mpsc::SyncSender<()>,
) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < GROUP {
            match jobs.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let mut results: Vec<Result<Vec<Event>, StoreError>> = Vec::with_capacity(batch.len());
        // Taken out first: a commit that fails before it reaches a write (BEGIN on a store
        // another process holds locked) still answers every write with the reason, instead of
        // dropping them (which read as "the writer has stopped").
        let (runs, replies): (Vec<WriteFn>, Vec<_>) = batch.into_iter().map(|j| (j.run, j.reply)).unzip();
        let committed = (|| -> Result<u64, StoreError> {
            let txn = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // The revision is read and stored once per commit, not once per write (read inside
            // the IMMEDIATE transaction, so it is current even if another process wrote).
            let start = meta_get(&txn, "revision")?;
            let mut head = start;
            for run in runs {
                txn.prepare_cached("SAVEPOINT w")?.execute([])?;
                let before = head;
                let r = run(&txn, &mut head);
                if r.is_err() {
                    txn.prepare_cached("ROLLBACK TO w")?.execute([])?;
                    head = before;
                }
                txn.prepare_cached("RELEASE w")?.execute([])?;
                results.push(r);
            }
            if head != start {
                txn.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'revision'")?.execute([head as i64])?;
            }
            txn.commit()?;
            Ok(head)
        })();
        let head = match committed {
            Ok(head) => head,
            Err(e) => {
                let why = commit_failure(&e);
                tracing::error!(error = %why, writes = replies.len(), "store commit failed; the writes are refused");
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Backend(why.clone())));
                }
                continue;
            }
        };
        // Full: a checkpoint is due already.
        let _ = checkpoint_due.try_send(());
        cache.apply_commit(results.iter().flatten().flatten(), head);
        // The commit's events at once: a watcher woken by the first finds them all.
        hub.publish_all(results.iter().flatten().flatten());
        for (reply, r) in replies.into_iter().zip(results) {
            let _ = reply.send(r);
        }
    }
}

/// What a failed commit tells the writers. SQLite's "database is locked" after the busy timeout
/// means another process holds the store's write lock (a `sqlite3` shell, a backup tool
/// writing): nothing of this coordinator stopped, and the writes work again once it lets go.
fn commit_failure(e: &StoreError) -> String {
    match e {
        StoreError::Backend(m) if m.contains("database is locked") => format!(
            "commit failed: another process holds the store's write lock ({m}); this write was not stored, \
             retry once it lets go"
        ),
        e => format!("commit failed: {e}"),
    }
}

/// The body of one object write, inside the writer's transaction; `head` is the transaction's
/// newest revision, advanced by this write.
fn write_one(
    conn: &Connection,
    head: &mut u64,
    key: Key,
    retain: u64,
    decide: impl FnOnce(Option<u64>) -> Result<WriteOp, StoreError>,
) -> Result<Event, StoreError> {
    // Only the revision: a compare-and-swap needs nothing else, and parsing the stored object
    // on every write was a sixth of the writer's time. A delete reads the object below.
    // With its rowid: the write below then goes straight to the row, without a second lookup
    // through the (resource, namespace, name) index.
    let stored: Option<(i64, i64)> = conn
        .prepare_cached("SELECT rowid, revision FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3")?
        .query_row(params![key.resource, key.namespace, key.name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let op = decide(stored.map(|(_, r)| r as u64))?;
    let rowid = stored.map(|(id, _)| id);
    let rev = *head + 1;
    let (kind, mut obj) = match (op, rowid) {
        (WriteOp::Put(kind, obj), _) => (kind, obj),
        (WriteOp::Delete, Some(id)) => {
            let data: String =
                conn.prepare_cached("SELECT data FROM objects WHERE rowid = ?1")?.query_row([id], |r| r.get(0))?;
            (EventType::Deleted, parse(&data)?)
        }
        (WriteOp::Delete, None) => return Err(StoreError::NotFound(describe(&key))),
    };
    set_revision(&mut obj, rev);
    // One serialization: the rows below and the event's watchers share it.
    let json: Arc<str> = Arc::from(serde_json::to_string(&obj).map_err(|e| StoreError::Backend(e.to_string()))?);
    if kind != EventType::Deleted && json.len() > super::MAX_OBJECT_BYTES {
        // One stored before the limit (the body limit is larger) may still be written as long
        // as it does not grow: its deletion mark, a finalizer's removal, a controller's status.
        let stored_len: Option<i64> = match rowid {
            Some(id) => conn
                .prepare_cached("SELECT length(CAST(data AS BLOB)) FROM objects WHERE rowid = ?1")?
                .query_row([id], |r| r.get(0))
                .optional()?,
            None => None,
        };
        if stored_len.is_none_or(|n| json.len() as i64 > n) {
            return Err(StoreError::TooLarge { size: json.len(), limit: super::MAX_OBJECT_BYTES });
        }
    }
    let data: &str = &json;
    match (kind, rowid) {
        (EventType::Deleted, Some(id)) => {
            conn.prepare_cached("DELETE FROM objects WHERE rowid = ?1")?.execute([id])?;
        }
        (_, Some(id)) => {
            conn.prepare_cached("UPDATE objects SET revision = ?1, data = ?2 WHERE rowid = ?3")?
                .execute(params![rev as i64, data, id])?;
        }
        (_, None) => {
            conn.prepare_cached(
                "INSERT INTO objects (resource, namespace, name, revision, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![key.resource, key.namespace, key.name, rev as i64, data])?;
        }
    }
    conn.prepare_cached(
        "INSERT INTO log (revision, resource, namespace, name, kind, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![rev as i64, key.resource, key.namespace, key.name, kind.code(), data])?;
    *head = rev;
    if rev.is_multiple_of(1000) && rev > retain {
        let floor = rev - retain;
        conn.execute("DELETE FROM log WHERE revision <= ?1", [floor as i64])?;
        conn.execute("UPDATE meta SET value = ?1 WHERE key = 'compacted'", [floor as i64])?;
    }
    Ok(Event { revision: rev, key, kind, object: Arc::new(obj), json, origin: None })
}

enum WriteOp {
    Put(EventType, Value),
    /// Delete the stored object (returned as the event's object).
    Delete,
}

fn check_expected(expected: Option<u64>, stored: u64) -> Result<(), StoreError> {
    match expected {
        Some(have) if have != stored => Err(StoreError::Conflict { have, stored }),
        _ => Ok(()),
    }
}

fn read_log(conn: &Connection, filter: &WatchFilter, after: u64) -> Result<Vec<Event>, StoreError> {
    let compacted = meta_get(conn, "compacted")?;
    if after < compacted {
        return Err(StoreError::Gone { requested: after, oldest: compacted + 1 });
    }
    // Two shapes, so that SQLite can use `log_by_object` for a watch of one object instead of
    // scanning every write since `after`.
    let mut stmt = if filter.resource.is_some() && filter.name.is_some() {
        conn.prepare_cached(
            "SELECT revision, resource, namespace, name, kind, data FROM log
             WHERE resource = ?2 AND name = ?4 AND revision > ?1 AND (?3 IS NULL OR namespace = ?3)
             ORDER BY revision LIMIT ?5",
        )?
    } else {
        conn.prepare_cached(
            "SELECT revision, resource, namespace, name, kind, data FROM log
             WHERE revision > ?1 AND (?2 IS NULL OR resource = ?2) AND (?3 IS NULL OR namespace = ?3)
               AND (?4 IS NULL OR name = ?4)
             ORDER BY revision LIMIT ?5",
        )?
    };
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
            json: Arc::from(data),
            origin: None,
        });
    }
    Ok(out)
}

#[async_trait]
impl History for SqliteStore {
    fn hub(&self) -> &Arc<Hub> {
        &self.inner.hub
    }

    async fn after(&self, filter: &WatchFilter, after: u64) -> Result<Vec<Event>, StoreError> {
        let filter = filter.clone();
        self.read(move |c| read_log(c, &filter, after)).await
    }
}

impl SqliteStore {
    /// Subscribed before the log is checked, so nothing committed in between is missed; Gone
    /// when the log no longer reaches back to `from`.
    async fn subscribe(&self, filter: &WatchFilter, from: u64) -> Result<Subscription, StoreError> {
        let sub = self.inner.hub.subscribe(filter.clone());
        let compacted = self.read_point(|c| meta_get(c, "compacted")).await?;
        if from < compacted {
            return Err(StoreError::Gone { requested: from, oldest: compacted + 1 });
        }
        Ok(sub)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, StoreError> {
        if self.inner.cache.covers(&key.resource) {
            let cached = self.inner.cache.lock().objects.get(key).cloned();
            return cached.map(|c| c.stored()).transpose();
        }
        let key = key.clone();
        self.read_point(move |c| {
            read_text(c, &key)?.map(|d| Ok(Stored { object: Arc::new(parse(&d)?), json: Arc::from(d) })).transpose()
        })
        .await
    }

    async fn get_json(&self, key: &Key) -> Result<Option<Arc<str>>, StoreError> {
        if self.inner.cache.covers(&key.resource) {
            return Ok(self.inner.cache.lock().objects.get(key).map(|c| c.json().clone()));
        }
        let key = key.clone();
        self.read_point(move |c| Ok(read_text(c, &key)?.map(Arc::from))).await
    }

    async fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Listing, StoreError> {
        // Parsed on the reading thread, not on the caller's async worker.
        self.listing(resource, namespace, |texts, revision| {
            let items = texts.iter().map(|s| parse(s)).collect::<Result<Vec<_>, _>>()?;
            Ok(Listing { items, revision })
        })
        .await
    }

    async fn list_json(&self, resource: &str, namespace: Option<&str>) -> Result<JsonListing, StoreError> {
        if self.inner.cache.covers(resource) {
            return Ok(self.inner.cache.listing(resource, namespace));
        }
        self.listing(resource, namespace, |items, revision| {
            Ok(JsonListing { items: items.into_iter().map(Arc::from).collect(), revision })
        })
        .await
    }

    /// Read from the file's rows without their JSON (a row's text past the revision column is
    /// not read): the Event TTL's sweep over tens of thousands of Events reads integers.
    async fn written_by(&self, resource: &str, revision: u64) -> Result<Vec<(Key, u64)>, StoreError> {
        if self.inner.cache.covers(resource) {
            return Ok(super::written_by_in(resource, &self.inner.cache.listing(resource, None).items, revision));
        }
        let resource = resource.to_string();
        let at_most = i64::try_from(revision).unwrap_or(i64::MAX);
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT namespace, name, revision FROM objects WHERE resource = ?1 AND revision <= ?2",
            )?;
            let rows = stmt.query_map(params![resource, at_most], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (ns, name, rev) = row?;
                out.push((Key::new(&resource, &ns, &name), u64::try_from(rev).unwrap_or(0)));
            }
            Ok(out)
        })
        .await
    }

    async fn create(&self, key: &Key, object: Value) -> Result<Stored, StoreError> {
        let what = describe(key);
        self.write(key, None, move |stored| match stored {
            Some(_) => Err(StoreError::AlreadyExists(what)),
            None => Ok(WriteOp::Put(EventType::Added, object)),
        })
        .await
    }

    async fn update(&self, key: &Key, object: Value, expected: Option<u64>) -> Result<Stored, StoreError> {
        self.update_by_origin(key, object, expected, None).await
    }

    async fn update_by(
        &self,
        key: &Key,
        object: Value,
        expected: Option<u64>,
        origin: &str,
    ) -> Result<Stored, StoreError> {
        self.update_by_origin(key, object, expected, Some(origin)).await
    }

    async fn delete(&self, key: &Key, expected: Option<u64>) -> Result<Stored, StoreError> {
        let what = describe(key);
        self.write(key, None, move |stored| match stored {
            None => Err(StoreError::NotFound(what)),
            Some(rev) => {
                check_expected(expected, rev)?;
                Ok(WriteOp::Delete)
            }
        })
        .await
    }
    async fn watch(&self, filter: WatchFilter, from: u64) -> Result<WatchStream, StoreError> {
        let sub = self.subscribe(&filter, from).await?;
        Ok(follow::events(self.clone(), filter, from, sub))
    }

    async fn watch_with_progress(
        &self,
        filter: WatchFilter,
        from: u64,
        schedule: ProgressSchedule,
    ) -> Result<ProgressStream, StoreError> {
        let sub = self.subscribe(&filter, from).await?;
        Ok(follow::with_progress(self.clone(), filter, from, sub, schedule))
    }

    async fn revision(&self) -> Result<u64, StoreError> {
        self.read_point(|c| meta_get(c, "revision")).await
    }

    /// A job that changes nothing, through the writer's queue and transaction: it answers once
    /// the writer has committed everything queued before it. (A transaction that changed no
    /// page writes nothing to the WAL.)
    async fn check_writes(&self) -> Result<(), StoreError> {
        self.submit(Box::new(|_, _| Ok(Vec::new()))).await.map(|_| ())
    }

    /// One job of the writer, so one savepoint: every write or none, at consecutive revisions
    /// (stronger than the order the trait asks for).
    async fn update_in_order(
        &self,
        first: Vec<CasWrite>,
        then: Vec<CasWrite>,
    ) -> Result<Vec<Option<Stored>>, StoreError> {
        let retain = self.inner.retain;
        let count = first.len() + then.len();
        let writes: Vec<CasWrite> = first.into_iter().chain(then).collect();
        let events = self
            .submit(Box::new(move |conn, head| {
                let mut events = Vec::with_capacity(writes.len());
                for (key, object, expected) in writes {
                    let what = describe(&key);
                    events.push(write_one(conn, head, key, retain, move |stored| match stored {
                        None => Err(StoreError::NotFound(what)),
                        Some(rev) => {
                            check_expected(expected, rev)?;
                            Ok(WriteOp::Put(EventType::Modified, object))
                        }
                    })?);
                }
                Ok(events)
            }))
            .await;
        match events {
            Ok(events) => Ok(events.iter().map(|e| Some(stored_of(e))).collect()),
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(vec![None; count]),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Tokens;
    use crate::store::WatchItem;
    use futures::StreamExt;
    use serde_json::json;

    fn obj(name: &str, v: i64) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"v": v}})
    }

    #[test]
    fn savepoint_journals_stay_out_of_temp_files() {
        // 2 = MEMORY. A statement journal in a temp file cost the writer a fifth of its time
        // (docs/rollout-bench-history.md, tenth session); a savepoint's undo pages must not go back to disk.
        let dir = tempfile::tempdir().unwrap();
        let conn = open_file(&dir.path().join("t.db")).unwrap();
        let mode: i64 = conn.query_row("PRAGMA temp_store", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, 2);
    }

    /// The write check goes through the writer: it waits while a commit holds the writer, and
    /// answers once the writer is free again, without taking a revision.
    #[tokio::test]
    async fn the_write_check_waits_for_a_stuck_writer() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        s.check_writes().await.unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (entered, inside) = tokio::sync::oneshot::channel::<()>();
        let stuck = {
            let s = s.clone();
            tokio::spawn(async move {
                s.submit(Box::new(move |_, _| {
                    let _ = entered.send(());
                    let _ = held.recv();
                    Ok(Vec::new())
                }))
                .await
            })
        };
        inside.await.unwrap();
        let wait = std::time::Duration::from_millis(300);
        assert!(tokio::time::timeout(wait, s.check_writes()).await.is_err(), "answered while the writer was held");
        assert_eq!(s.revision().await.unwrap(), 0, "reads still answer");
        release.send(()).unwrap();
        stuck.await.unwrap().unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), s.check_writes()).await.unwrap().unwrap();
        assert_eq!(s.revision().await.unwrap(), 0, "the check takes no revision");
    }

    #[tokio::test]
    async fn writes_in_order_are_made_all_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let (a, b) = (Key::cluster("/nodes", "a"), Key::cluster("/nodes", "b"));
        s.create(&a, obj("a", 1)).await.unwrap();
        s.create(&b, obj("b", 1)).await.unwrap();
        let mut w = s.watch(WatchFilter::resource("/nodes"), 2).await.unwrap();

        // A stale revision on the second write: the first is not written either.
        let r =
            s.update_in_order(vec![(a.clone(), obj("a", 2), Some(1))], vec![(b.clone(), obj("b", 2), Some(1))]).await;
        assert!(matches!(r.as_deref(), Ok([None, None])), "{r:?}");
        assert_eq!(s.get(&a).await.unwrap().unwrap()["spec"]["v"], 1);
        assert_eq!(s.revision().await.unwrap(), 2, "a failed group takes no revision");
        // A missing object fails the group the same way.
        let gone = Key::cluster("/nodes", "gone");
        let r = s.update_in_order(vec![(a.clone(), obj("a", 2), None)], vec![(gone, obj("gone", 1), None)]).await;
        assert!(matches!(r.as_deref(), Ok([None, None])), "{r:?}");
        assert_eq!(s.get(&a).await.unwrap().unwrap()["spec"]["v"], 1);

        let stored = s
            .update_in_order(vec![(a.clone(), obj("a", 3), Some(1))], vec![(b.clone(), obj("b", 3), Some(2))])
            .await
            .unwrap();
        let revs: Vec<_> = stored.iter().map(|v| super::super::revision_of(v.as_ref().unwrap()).unwrap()).collect();
        assert_eq!(revs, vec![3, 4], "in order, consecutive revisions");
        assert_eq!(s.get(&b).await.unwrap().unwrap()["spec"]["v"], 3);
        // Only the committed writes reach a watch, in order.
        for (rev, name) in [(3, "a"), (4, "b")] {
            let ev = tokio::time::timeout(std::time::Duration::from_secs(5), w.next()).await.unwrap().unwrap().unwrap();
            assert_eq!((ev.revision, ev.key.name.as_str(), ev.object["spec"]["v"].as_i64()), (rev, name, Some(3)));
        }
    }

    /// An object over `MAX_OBJECT_BYTES` is refused (nothing stored); one an older aloft
    /// stored over it takes writes that do not grow it, and its deletion.
    #[tokio::test]
    async fn objects_past_the_size_limit_are_refused_unless_stored_so_and_not_growing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let s = SqliteStore::open(&path).unwrap();
        let key = Key::cluster("/nodes", "n1");
        let sized = |n: usize| {
            let mut o = obj("n1", 0);
            o["spec"]["pad"] = "x".repeat(n).into();
            o
        };
        s.create(&key, sized(1_000_000)).await.unwrap();
        let e = s.update(&key, sized(2_200_000), None).await.unwrap_err();
        assert!(matches!(e, StoreError::TooLarge { limit: crate::store::MAX_OBJECT_BYTES, .. }), "{e}");
        assert!(s.get(&key).await.unwrap().unwrap().json.len() < 1_100_000, "nothing stored");
        // As an older aloft stored it (up to the 3 MiB body limit): writes that do not grow it
        // go through; one that grows it does not.
        {
            let c = Connection::open(&path).unwrap();
            let mut big = sized(2_400_000);
            big["metadata"]["resourceVersion"] = "99".into();
            c.execute("UPDATE objects SET data = ?1 WHERE name = 'n1'", [big.to_string()]).unwrap();
        }
        s.update(&key, sized(2_300_000), None).await.unwrap();
        let e = s.update(&key, sized(2_350_000), None).await.unwrap_err();
        assert!(matches!(e, StoreError::TooLarge { .. }), "{e}");
        s.delete(&key, None).await.unwrap();
    }

    /// Commits do not checkpoint (the writer's automatic checkpoint is off), the checkpointer
    /// does, shortly after: the database file takes the writes, and the WAL does not grow
    /// with every write forever.
    #[tokio::test]
    async fn writes_reach_the_database_file_by_the_checkpointer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let s = SqliteStore::open(&path).unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let big = "x".repeat(2000);
        for round in 0..4 {
            let writes = (0..200).map(|i| {
                let s = &s;
                let mut o = obj(&format!("n{i}"), round);
                o["spec"]["pad"] = big.clone().into();
                async move {
                    let key = Key::cluster("/nodes", &format!("n{i}"));
                    if round == 0 {
                        s.create(&key, o).await
                    } else {
                        s.update(&key, o, None).await
                    }
                }
            });
            futures::future::try_join_all(writes).await.unwrap();
        }
        // 800 writes of ~2 KB, twice each (object and log): megabytes, in the file once
        // checkpointed. Without a checkpoint the file keeps its first few pages.
        grows_by(&path, before, 1_000_000).await;
        // Everything reads back, from a fresh connection too.
        drop(s);
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get(&Key::cluster("/nodes", "n199")).await.unwrap().unwrap()["spec"]["v"], 3);
    }

    #[tokio::test]
    async fn a_store_with_the_old_objects_table_is_converted_and_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE objects (resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
                     revision INTEGER NOT NULL, data TEXT NOT NULL,
                     PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID;
                 CREATE TABLE log (revision INTEGER PRIMARY KEY, resource TEXT NOT NULL, namespace TEXT NOT NULL,
                     name TEXT NOT NULL, kind INTEGER NOT NULL, data TEXT NOT NULL);
                 CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
                 INSERT INTO meta (key, value) VALUES ('revision', 7), ('compacted', 0);
                 INSERT INTO objects VALUES ('/nodes', '', 'a', 7,
                     '{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\"},\"spec\":{\"n\":1}}');",
            )
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        let k = Key::cluster("/nodes", "a");
        let got = s.get(&k).await.unwrap().expect("the object survives the conversion");
        assert_eq!(got["spec"]["n"], 1);
        let updated = s.update(&k, obj("a", 2), Some(7)).await.unwrap();
        assert_eq!(super::super::revision_of(&updated), Some(8), "the revision carries on");
        assert!(s.create(&k, obj("a", 3)).await.is_err(), "the key is still unique");
        let sql: String = Connection::open(&path)
            .unwrap()
            .query_row("SELECT sql FROM sqlite_master WHERE name = 'objects'", [], |r| r.get(0))
            .unwrap();
        assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
        drop(s);
        // Opening again changes nothing.
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get(&k).await.unwrap().unwrap()["spec"]["v"], 2);
    }

    /// For both ways of keeping a resource: parsed, and as text only.
    #[tokio::test]
    async fn cached_resources_read_what_was_committed_last() {
        for parsed in [true, false] {
            cached_reads_what_was_committed_last(parsed).await;
        }
    }

    async fn cached_reads_what_was_committed_last(parsed: bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let (a, b, other) = (Key::cluster("/nodes", "a"), Key::cluster("/nodes", "b"), Key::cluster("/events", "e"));
        {
            let s = SqliteStore::open(&path).unwrap();
            s.create(&a, obj("a", 1)).await.unwrap();
        }
        let nodes = CachedResource { resource: "/nodes".to_string(), parsed };
        let s = SqliteStore::open_with(&path, DEFAULT_RETAIN, &[nodes]).unwrap();
        assert_eq!(s.get(&a).await.unwrap().unwrap()["spec"]["v"], 1, "loaded at open");
        assert_eq!(s.get_json(&a).await.unwrap().unwrap(), s.get(&a).await.unwrap().unwrap().json, "text as read");
        let mut w = s.watch(WatchFilter::resource("/nodes"), s.revision().await.unwrap()).await.unwrap();
        s.update(&a, obj("a", 2), None).await.unwrap();
        assert_eq!(s.get(&a).await.unwrap().unwrap()["spec"]["v"], 2, "an acknowledged write is read back");
        // A watcher that saw an event reads at least that version.
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!(super::super::revision_of(&s.get(&a).await.unwrap().unwrap()), Some(ev.revision));
        // A write that fails its compare-and-swap changes nothing, in the cache either.
        assert!(s.update(&a, obj("a", 3), Some(1)).await.is_err());
        assert_eq!(s.get(&a).await.unwrap().unwrap()["spec"]["v"], 2);
        // All or nothing: a batch with one stale write leaves both as they were.
        s.create(&b, obj("b", 1)).await.unwrap();
        let stale = s.update_in_order(vec![(a.clone(), obj("a", 4), None)], vec![(b.clone(), obj("b", 4), Some(1))]);
        assert!(stale.await.unwrap().iter().all(Option::is_none));
        assert_eq!(s.get(&a).await.unwrap().unwrap()["spec"]["v"], 2);
        assert_eq!(s.get(&b).await.unwrap().unwrap()["spec"]["v"], 1);
        s.delete(&a, None).await.unwrap();
        assert!(s.get(&a).await.unwrap().is_none(), "deleted");
        // Resources not cached are read from the file as before.
        s.create(&other, obj("e", 1)).await.unwrap();
        assert_eq!(s.get(&other).await.unwrap().unwrap()["spec"]["v"], 1);
        drop(s);
        let s = SqliteStore::open(&path).unwrap();
        assert!(s.get(&a).await.unwrap().is_none());
        assert_eq!(s.get(&b).await.unwrap().unwrap()["spec"]["v"], 1, "the file agrees with the cache");
    }

    /// A list of a cached resource comes from memory: the same items in the same order, at the
    /// same revision, as the file gives (namespaces, updates, deletes, a failed batch and writes
    /// to other resources included), and each item is the cache's own text, not a copy.
    #[tokio::test]
    async fn cached_lists_are_the_files_and_share_its_text() {
        for parsed in [true, false] {
            cached_lists_are_the_files(parsed).await;
        }
    }

    async fn cached_lists_are_the_files(parsed: bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let leases = CachedResource { resource: "/leases".to_string(), parsed };
        let cached = SqliteStore::open_with(&path, DEFAULT_RETAIN, &[leases]).unwrap();
        let lease = |ns: &str, name: &str| Key::new("/leases", ns, name);
        for (ns, name) in [("b", "z"), ("a", "y"), ("b", "a"), ("", "x"), ("a", "b")] {
            cached.create(&lease(ns, name), obj(name, 1)).await.unwrap();
        }
        cached.update(&lease("a", "y"), obj("y", 2), None).await.unwrap();
        cached.delete(&lease("b", "z"), None).await.unwrap();
        let stale = cached
            .update_in_order(vec![(lease("a", "b"), obj("b", 9), None)], vec![(lease("b", "a"), obj("a", 9), Some(1))]);
        assert!(stale.await.unwrap().iter().all(Option::is_none));
        // A write elsewhere moves the revision a list reports.
        cached.create(&Key::cluster("/events", "e"), obj("e", 1)).await.unwrap();
        let file = SqliteStore::open(&path).unwrap();
        for ns in [None, Some("a"), Some("b"), Some(""), Some("none")] {
            let (mem, disk) =
                (cached.list_json("/leases", ns).await.unwrap(), file.list_json("/leases", ns).await.unwrap());
            assert_eq!(mem.items, disk.items, "namespace {ns:?}");
            assert_eq!(mem.revision, disk.revision, "namespace {ns:?}");
        }
        let all = cached.list_json("/leases", None).await.unwrap();
        assert_eq!(all.items.len(), 4);
        assert_eq!(all.revision, cached.revision().await.unwrap());
        let got = cached.get(&lease("a", "y")).await.unwrap().unwrap();
        assert_eq!(got["spec"]["v"], 2);
        assert!(all.items.iter().any(|item| Arc::ptr_eq(item, &got.json)), "the list shares the cache's text");
        let text = cached.get_json(&lease("a", "y")).await.unwrap().unwrap();
        assert!(Arc::ptr_eq(&text, &got.json), "a text read is the cache's text");
        assert!(cached.get_json(&lease("a", "none")).await.unwrap().is_none());
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
    async fn a_failing_write_in_a_group_commit_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        for i in 0..100 {
            s.create(&Key::cluster("/nodes", &format!("n{i}")), obj("x", i)).await.unwrap();
        }
        let mut w = s.watch(WatchFilter::resource("/nodes"), 100).await.unwrap();
        // 100 updates at once, every other one with a stale resourceVersion: they share commits.
        let results = futures::future::join_all((0..100).map(|i| {
            let s = s.clone();
            async move {
                let expected = if i % 2 == 0 { i as u64 + 1 } else { 0 };
                s.update(&Key::cluster("/nodes", &format!("n{i}")), obj("x", 1000 + i), Some(expected)).await
            }
        }))
        .await;
        let mut revs = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(v) if i % 2 == 0 => revs.push(super::super::revision_of(&v).unwrap()),
                Err(StoreError::Conflict { have: 0, .. }) if i % 2 == 1 => {}
                other => panic!("update {i}: {other:?}"),
            }
        }
        revs.sort();
        assert_eq!(revs, (101..=150).collect::<Vec<_>>(), "the successful writes take consecutive revisions");
        for i in 0..100 {
            let v = s.get(&Key::cluster("/nodes", &format!("n{i}"))).await.unwrap().unwrap();
            assert_eq!(v["spec"]["v"], if i % 2 == 0 { 1000 + i } else { i });
        }
        let seen: Vec<u64> = (&mut w).take(50).map(|e| e.unwrap().revision).collect().await;
        assert_eq!(seen, (101..=150).collect::<Vec<_>>(), "watches see them once, in revision order");
    }

    /// Another process holding the store's write lock past the busy timeout: the write is
    /// refused with a reason that says so (it was dropped unanswered, "the store's writer has
    /// stopped", though the writer went on), and the next write after the lock is released is
    /// stored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_refused_by_another_process_lock_says_so_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let s = SqliteStore::open(&path).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE; SELECT 1;").unwrap();
        let err = s.create(&Key::cluster("/nodes", "n1"), obj("n1", 1)).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("another process holds the store's write lock"), "{text}");
        assert!(!text.contains("stopped"), "{text}");
        other.execute_batch("COMMIT;").unwrap();
        s.create(&Key::cluster("/nodes", "n1"), obj("n1", 1)).await.unwrap();
        assert!(s.get(&Key::cluster("/nodes", "n1")).await.unwrap().is_some());
    }

    /// The store's files are the owner's alone (every MachineConfig's secrets are in them),
    /// also in a data dir others may read, and ones made readable before are made private; the
    /// write-ahead log goes back to nothing once the store is quiet (a burst left it at its
    /// largest for good).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_files_are_private_and_the_log_shrinks_when_idle() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let wal = |p: &Path| {
            let mut w = p.as_os_str().to_owned();
            w.push("-wal");
            std::path::PathBuf::from(w)
        };
        let s = SqliteStore::open(&path).unwrap();
        for i in 0..300 {
            s.create(&Key::cluster("/nodes", &format!("n{i}")), obj(&format!("n{i}"), 1)).await.unwrap();
        }
        s.put_token("h1".into(), "t".into(), "viewer".into(), None).await.unwrap();
        for p in [path.clone(), wal(&path), tokens_path(&path), wal(&tokens_path(&path))] {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
        assert!(std::fs::metadata(wal(&path)).unwrap().len() > 0);
        // Truncated once idle: after CHECKPOINT_AFTER + TRUNCATE_WHEN_IDLE, later on a slow disk
        // (a checkpoint running when the last commit came finishes first), so polled.
        let idle = std::time::Instant::now();
        while std::fs::metadata(wal(&path)).unwrap().len() > 0 {
            assert!(idle.elapsed() < std::time::Duration::from_secs(60), "the log is truncated when idle");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(s.get(&Key::cluster("/nodes", "n299")).await.unwrap().is_some());
        drop(s);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(mode(&path), 0o600, "made private again");
        assert!(s.get(&Key::cluster("/nodes", "n0")).await.unwrap().is_some());
    }

    /// Expired tokens are purged, and only they: a token that never expires, one that expires
    /// later, and a node's credential stay; a purged token no longer authenticates or lists.
    #[tokio::test]
    async fn only_expired_tokens_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        s.put_token("h-day".into(), "bootstrap-day".into(), "bootstrap".into(), Some(24 * hour)).await.unwrap();
        s.put_token("h-hour".into(), "bootstrap-hour".into(), "bootstrap".into(), Some(hour)).await.unwrap();
        s.put_token("h-never".into(), "admin".into(), "admin".into(), None).await.unwrap();
        assert!(s.claim_token("h-node".into(), "node:n1".into(), "node:n1".into()).await.unwrap());
        assert!(s.purge_expired_tokens(chrono::Utc::now()).await.unwrap().is_empty(), "nothing has expired yet");
        let later = chrono::Utc::now() + chrono::Duration::hours(2);
        assert_eq!(s.purge_expired_tokens(later).await.unwrap(), vec!["bootstrap-hour".to_string()]);
        let names: Vec<String> = s.list_tokens().await.unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["admin", "bootstrap-day", "node:n1"]);
        assert_eq!(s.find_token("h-hour".into()).await.unwrap(), None);
        assert!(s.find_token("h-day".into()).await.unwrap().is_some());
        let much_later = chrono::Utc::now() + chrono::Duration::days(2);
        assert_eq!(s.purge_expired_tokens(much_later).await.unwrap(), vec!["bootstrap-day".to_string()]);
        assert_eq!(s.list_tokens().await.unwrap().len(), 2, "admin and the node's credential stay");
    }

    /// Closing the store's connections leaves its files as they are: a start refused for a
    /// damaged store (the audit's: a WAL frame damaged, the file cut short) rewrote `aloft.db`
    /// from the log and deleted the log on the way out, the very files a recovery needs. Here
    /// the last connection to a file whose log holds commits is closed: nothing is copied.
    #[test]
    fn closing_the_last_connection_leaves_the_files_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let conn = open_file(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('a'), ('b');").unwrap();
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = std::path::PathBuf::from(wal);
        let (db_before, wal_before) = (std::fs::read(&path).unwrap(), std::fs::read(&wal).unwrap());
        assert!(!wal_before.is_empty());
        drop(conn);
        assert!(std::fs::read(&path).unwrap() == db_before, "the database file is as it was");
        assert!(std::fs::read(&wal).unwrap() == wal_before, "the log is as it was");
        let again = open_file(&path).unwrap();
        let n: i64 = again.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2, "the next open replays the log");
    }

    /// `token list` on a copy of a data dir without SQLite's shared-memory file (a read-only
    /// backup): a token still in the write-ahead log is listed (read as it was, the tokens file
    /// alone missed it).
    #[tokio::test]
    async fn tokens_in_the_write_ahead_log_are_listed_from_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let s = SqliteStore::open(&path).unwrap();
        s.put_token("h1".into(), "early".into(), "viewer".into(), None).await.unwrap();
        drop(s);
        let tokens = tokens_path(&path);
        let w = Connection::open(&tokens).unwrap();
        w.execute_batch("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;").unwrap();
        w.execute("INSERT INTO tokens (hash, name, role, created) VALUES ('h2', 'late', 'admin', 'now')", []).unwrap();
        let backup = tempfile::tempdir().unwrap();
        let copy = backup.path().join("s-tokens.db");
        std::fs::copy(&tokens, &copy).unwrap();
        let mut wal = tokens.clone().into_os_string();
        wal.push("-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 0, "the late token is in the log");
        std::fs::copy(&wal, backup.path().join("s-tokens.db-wal")).unwrap();
        let names: Vec<String> = list_tokens_from_copy(&copy).unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["early", "late"]);
        drop(w);
    }

    /// A watch started from revision R while another task writes its object: the write must
    /// arrive whether it lands before the watch's log read, during it, or after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_watch_racing_a_write_of_its_object_gets_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let names: Vec<String> = (0..64).map(|i| format!("n{i}")).collect();
        for n in &names {
            s.create(&Key::cluster("/nodes", n), obj(n, 0)).await.unwrap();
        }
        for round in 1..=20 {
            let tasks = names.iter().map(|n| {
                let s = s.clone();
                let n = n.clone();
                async move {
                    let from = s.revision().await.unwrap();
                    let filter = WatchFilter { name: Some(n.clone()), ..WatchFilter::resource("/nodes") };
                    // Noise from other objects, then the write the watcher waits for.
                    let writer = {
                        let s = s.clone();
                        let n = n.clone();
                        tokio::spawn(async move {
                            s.create(&Key::cluster("/other", &format!("{n}-{round}")), obj("o", 0)).await.unwrap();
                            s.update(&Key::cluster("/nodes", &n), obj(&n, round), None).await.unwrap()
                        })
                    };
                    let mut w = s.watch(filter, from).await.unwrap();
                    let got = tokio::time::timeout(std::time::Duration::from_secs(10), w.next()).await;
                    let written = writer.await.unwrap();
                    match got {
                        Ok(Some(Ok(ev))) => assert_eq!(Some(ev.revision), super::super::revision_of(&written)),
                        other => panic!("round {round}: watch of {n} from {from} missed its write: {other:?}"),
                    }
                }
            });
            futures::future::join_all(tasks).await;
        }
    }

    /// A progress note (a BOOKMARK's resourceVersion) never comes before an event it covers:
    /// every Node event at or below a note's revision was yielded before it, notes never go
    /// back, and they move past writes of other resources, which the watch does not carry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn progress_notes_come_after_every_event_they_cover() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let first = s.create(&Key::cluster("/nodes", "n"), obj("n", 0)).await.unwrap();
        let from = crate::store::revision_of(&first.object).unwrap();
        let schedule = ProgressSchedule { every: std::time::Duration::from_millis(1), deadline: None };
        let mut w = s.watch_with_progress(WatchFilter::resource("/nodes"), from, schedule).await.unwrap();
        let mut writer = {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 1..=200 {
                    s.update(&Key::cluster("/nodes", "n"), obj("n", i), None).await.unwrap();
                    s.create(&Key::cluster("/other", &format!("o{i}")), obj("o", i)).await.unwrap();
                }
                s.revision().await.unwrap()
            })
        };
        let (mut events, mut notes, mut last_write) = (Vec::new(), Vec::new(), None);
        let head = loop {
            match tokio::time::timeout(std::time::Duration::from_secs(30), w.next()).await {
                Ok(Some(Ok(WatchItem::Event(e)))) => {
                    assert!(e.key.resource == "/nodes", "{e:?}");
                    assert!(notes.last().is_none_or(|&n| e.revision > n), "event {} after note {notes:?}", e.revision);
                    events.push(e.revision);
                }
                Ok(Some(Ok(WatchItem::Progress(n)))) => {
                    assert!(notes.last().is_none_or(|&l| n >= l), "notes went back: {notes:?} then {n}");
                    assert!(events.last().is_none_or(|&e| n >= e), "note {n} below the last event {events:?}");
                    notes.push(n);
                    if last_write.is_none() && writer.is_finished() {
                        last_write = Some((&mut writer).await.unwrap());
                    }
                    // A note read before the last write may arrive after the writer ended:
                    // wait for one at least as new as that write.
                    if last_write.is_some_and(|w| n >= w) && events.len() == 200 {
                        break n;
                    }
                }
                other => panic!("{other:?} after {} events and notes {notes:?}", events.len()),
            }
        };
        assert_eq!(Some(head), last_write, "the last note is the store's revision, an /other write");
        assert!(notes.len() > 1, "notes came during the writes too: {notes:?}");
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

    #[tokio::test]
    async fn tokens_live_in_a_file_of_their_own_and_changes_from_another_process_show_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aloft.db");
        assert_eq!(tokens_path(&path), dir.path().join("aloft-tokens.db"));
        let server = SqliteStore::open(&path).unwrap();
        // The `token` subcommand opens the same files in another process while the server runs.
        let cli = SqliteStore::open(&path).unwrap();
        cli.put_token("h1".into(), "viewer".into(), "view".into(), None).await.unwrap();
        // Looked up twice: the second answer comes from the server's cache of lookups, which
        // must not outlive the change below.
        assert!(server.inner.tokens.is_on(), "the tokens' WAL is watched");
        for _ in 0..2 {
            assert_eq!(server.find_token("h1".into()).await.unwrap(), Some(("viewer".into(), "view".into())));
        }
        // Writes to the store in between do not matter to a lookup.
        server.create(&Key::cluster("/nodes", "a"), obj("a", 1)).await.unwrap();
        cli.put_token("h2".into(), "viewer".into(), "view".into(), None).await.unwrap();
        assert_eq!(server.find_token("h1".into()).await.unwrap(), None, "the replaced token stops working at once");
        assert_eq!(server.find_token("h2".into()).await.unwrap(), Some(("viewer".into(), "view".into())));
        assert!(tokens_path(&path).exists());
        assert!(!has_table(&open_file(&path).unwrap(), "tokens").unwrap(), "no tokens table in the store's own file");
    }

    /// The tokens' file is checkpointed with the store's (the writer's automatic checkpoint is
    /// off for every file it has attached): enrolling a fleet does not grow its WAL forever.
    #[tokio::test]
    async fn tokens_reach_their_file_by_the_checkpointer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aloft.db");
        let s = SqliteStore::open(&path).unwrap();
        let file = tokens_path(&path);
        let before = std::fs::metadata(&file).unwrap().len();
        let puts = (0..2000).map(|i| s.put_token(format!("{i:064}"), format!("node:n{i}"), format!("node:n{i}"), None));
        futures::future::try_join_all(puts).await.unwrap();
        assert!(s.find_token(format!("{:064}", 7)).await.unwrap().is_some());
        assert_eq!(s.inner.tokens.kept(), 1);
        grows_by(&file, before, 100_000).await;
        // A checkpoint changes no token: the lookups kept stay (a fleet's worth of them would
        // otherwise all go back to the disk after its enrollment).
        assert_eq!(s.inner.tokens.kept(), 1);
    }

    /// Wait (at most 10 s) until the file at `path` is more than `by` bytes over `before`: the
    /// checkpointer has copied the WAL into it.
    async fn grows_by(path: &Path, before: u64, by: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = std::fs::metadata(path).unwrap().len();
            if now > before + by {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{} still {now} bytes (was {before})", path.display());
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn an_unreadable_tokens_file_is_an_error_naming_it_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aloft.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            s.create(&Key::cluster("/nodes", "a"), obj("a", 1)).await.unwrap();
        }
        let file = tokens_path(&path);
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", file.display()));
        }
        std::fs::write(&file, vec![0x42u8; 8192]).unwrap();
        let e = SqliteStore::open(&path).err().expect("a tokens file that is not SQLite fails the open");
        assert!(e.to_string().contains("aloft-tokens.db"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), vec![0x42u8; 8192], "the bad file is left as it was");
        // The store's own file is untouched: with a good tokens file it opens as before.
        std::fs::remove_file(&file).unwrap();
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get(&Key::cluster("/nodes", "a")).await.unwrap().unwrap()["spec"]["v"], 1);
    }

    /// A store a newer aloft wrote (a higher format) is refused, naming what to do, and left as
    /// it was; one of this format, or from before the marker, opens and is marked.
    #[tokio::test]
    async fn a_store_of_a_newer_format_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aloft.db");
        let s = SqliteStore::open(&path).unwrap();
        s.create(&Key::cluster("/nodes", "a"), obj("a", 1)).await.unwrap();
        drop(s);
        let format = |path: &Path| -> i64 {
            open_file(path).unwrap().query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| r.get(0)).unwrap()
        };
        assert_eq!(format(&path), STORE_FORMAT);
        // From before the marker: opens, and is marked.
        open_file(&path).unwrap().execute("DELETE FROM meta WHERE key = 'format'", []).unwrap();
        drop(SqliteStore::open(&path).unwrap());
        assert_eq!(format(&path), STORE_FORMAT);
        // Written by a newer aloft.
        open_file(&path)
            .unwrap()
            .execute("UPDATE meta SET value = ?1 WHERE key = 'format'", [STORE_FORMAT + 1])
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        // A file others may read: the refusal leaves its mode too (a store that opens is made
        // private, `the_store_files_are_private`).
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // A data directory whose tokens' file is missing: the refusal does not create one.
        let tokens = tokens_path(&path);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = tokens.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
        let err = SqliteStore::open(&path).err().expect("refused").to_string();
        assert!(!tokens.exists(), "the refusal created {}", tokens.display());
        assert!(err.contains("written by a newer aloft") && err.contains("restore a backup"), "{err}");
        assert!(err.contains(&format!("store format {}", STORE_FORMAT + 1)), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was changed");
        assert_eq!(mode(&path), 0o644, "the refusal changed the file's mode");
        assert_eq!(format(&path), STORE_FORMAT + 1);
    }

    #[tokio::test]
    async fn tokens_of_an_older_store_file_move_to_the_tokens_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aloft.db");
        {
            // The layout before: the tokens in the store's file.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE tokens (hash TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, role TEXT NOT NULL, created TEXT NOT NULL);
                 INSERT INTO tokens VALUES ('old-admin', 'admin', 'admin', 't0'), ('old-viewer', 'viewer', 'view', 't0'),
                     ('dash-again', 'dash', 'view', 't2');",
            )
            .unwrap();
        }
        {
            // A move cut short by a crash: the viewer's token was replaced in the tokens file since.
            let conn = Connection::open(tokens_path(&path)).unwrap();
            conn.execute_batch(
                "CREATE TABLE tokens (hash TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, role TEXT NOT NULL, created TEXT NOT NULL);
                 INSERT INTO tokens VALUES ('new-viewer', 'viewer', 'view', 't1'), ('dash-first', 'dash', 'view', 't1');",
            )
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.find_token("old-admin".into()).await.unwrap(), Some(("admin".into(), "admin".into())));
        assert_eq!(s.find_token("new-viewer".into()).await.unwrap(), Some(("viewer".into(), "view".into())));
        assert_eq!(s.find_token("old-viewer".into()).await.unwrap(), None, "a replaced token never comes back");
        // A token created again in the store's file (by an aloft from before the tokens' file,
        // serving the directory after a downgrade) is the newer one: it stays.
        assert_eq!(s.find_token("dash-again".into()).await.unwrap(), Some(("dash".into(), "view".into())));
        assert_eq!(s.find_token("dash-first".into()).await.unwrap(), None);
        drop(s);
        assert!(!has_table(&open_file(&path).unwrap(), "tokens").unwrap(), "the old table is gone");
        // Opening again finds nothing left to move.
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.find_token("old-admin".into()).await.unwrap(), Some(("admin".into(), "admin".into())));
    }
}
