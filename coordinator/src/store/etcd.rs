//! The etcd backend: the store on an etcd v3 cluster, as kube-apiserver keeps a cluster's
//! objects, so that the store survives the loss of a machine and a standby coordinator can take
//! over (`serve --etcd-servers`).
//!
//! The mapping is etcd's own model, which the [`Store`] trait was shaped after: an object is one
//! key (`<prefix>/registry/<group>/<plural>/<namespace>/<name>`), its `resourceVersion` is the
//! key's `mod_revision`, a compare-and-swap is a transaction comparing it, and a watch is an
//! etcd watch from a revision (410 Gone once etcd has compacted past it). Objects are stored
//! without `resourceVersion`, which is set from the revision on every read, as kube-apiserver
//! does. Tokens (hashes only) live under `<prefix>/tokens/`. The active coordinator serves from
//! a watch cache in front of this store ([`super::watch_cache`]), which marks each of its starts
//! by writing `<prefix>/watch-cache-start` (see [`EtcdStore::history`]).
//!
//! One coordinator acts at a time ([`EtcdStore::become_active`]): it holds a key on a lease,
//! and every write it makes is a transaction that also compares that key's creation revision,
//! so a coordinator that lost its lease (paused, cut off from etcd) cannot write even once
//! after another took over. Kubernetes' controller leader election has no such fence; two node
//! controllers writing at once could take more nodes down than `maxUnavailable` allows.

use super::etcd_metrics::EtcdMetrics;
use super::read_batch::{ReadBatch, ReadMany};
use super::{
    set_revision, CasWrite, Event, EventType, JsonListing, Key, Listing, Store, StoreError, Stored, TokenInfo, Tokens,
    WatchFilter, WatchStream, MAX_OBJECT_BYTES,
};
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KvClient, PutOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchOptions,
};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How large a response the client takes: a list of every Node of a large fleet (10,000 nodes
/// of ~1 KB) is far over gRPC's default of 4 MiB.
const MAX_RESPONSE_BYTES: usize = 1 << 30;

/// How to reach etcd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// `http://host:2379` or `https://host:2379`, one per member.
    pub endpoints: Vec<String>,
    /// Where aloft's keys live, e.g. `/aloft`: several aloft installations (or a Kubernetes
    /// cluster) can share one etcd under different prefixes.
    pub prefix: String,
    /// PEM files for TLS to etcd: the CA that signed etcd's certificate, and this client's
    /// certificate and key (etcd's `--client-cert-auth`).
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl EtcdOptions {
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdOptions { endpoints, prefix: "/aloft".into(), ca: None, cert: None, key: None }
    }
}

/// The key of the active coordinator ([`EtcdStore::become_active`]) and the revision it was
/// created at: every write compares it.
#[derive(Debug, Clone)]
struct Fence {
    key: Vec<u8>,
    created: i64,
}

/// The store on etcd. Cheap to clone: every clone shares one connection.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    kv: KvClient,
    /// `<prefix>/registry/`
    registry: String,
    /// `<prefix>/tokens/hash/` and `<prefix>/tokens/name/`
    token_hashes: String,
    token_names: String,
    /// `<prefix>/active`: the active coordinator's key.
    active: String,
    /// `<prefix>/`: everything of this installation.
    base: String,
    endpoints: String,
    fence: Mutex<Option<Fence>>,
    /// Set when a write found the fence gone: this coordinator is no longer the active one.
    fenced_out: tokio::sync::watch::Sender<bool>,
    /// Token lookups, many requests' in one read (see [`super::read_batch`]).
    token_reads: ReadBatch,
    /// How to open another connection: the active coordinator keeps its lease alive on one of
    /// its own, so that renewals do not queue behind a burst of writes on the shared one.
    connect: (Vec<String>, ConnectOptions),
    metrics: EtcdMetrics,
}

fn backend(e: etcd_client::Error) -> StoreError {
    let text = e.to_string();
    if text.contains("too many operations in txn request") {
        return StoreError::Backend(format!(
            "etcd refused a transaction of {MAX_READS_PER_TXN} operations ({text}): start etcd with \
             --max-txn-ops of at least {MAX_READS_PER_TXN} (its default)"
        ));
    }
    if text.contains("request is too large") {
        return StoreError::Backend(format!(
            "etcd refused a write as too large ({text}): start etcd with --max-request-bytes of at least {}",
            MAX_OBJECT_BYTES + (1 << 20)
        ));
    }
    StoreError::Backend(format!("etcd: {text}"))
}

/// `/` and `%` of a namespace or name, escaped so that a key splits back into its parts.
fn escape(part: &str) -> String {
    part.replace('%', "%25").replace('/', "%2F")
}

fn unescape(part: &str) -> String {
    percent_encoding::percent_decode_str(part).decode_utf8_lossy().into_owned()
}

fn describe(key: &Key) -> String {
    if key.namespace.is_empty() {
        format!("{} {:?}", key.resource, key.name)
    } else {
        format!("{} {}/{}", key.resource, key.namespace, key.name)
    }
}

/// The JSON etcd keeps: the object without `resourceVersion` (its key's revision is).
fn encode(object: &Value) -> Result<Vec<u8>, StoreError> {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    let bytes = serde_json::to_vec(&object).map_err(|e| StoreError::Backend(e.to_string()))?;
    if bytes.len() > MAX_OBJECT_BYTES {
        return Err(StoreError::TooLarge { size: bytes.len(), limit: MAX_OBJECT_BYTES });
    }
    Ok(bytes)
}

/// An object as read from etcd, with its revision as its `resourceVersion`.
fn decode(value: &[u8], revision: i64) -> Result<Stored, StoreError> {
    let mut object: Value =
        serde_json::from_slice(value).map_err(|e| StoreError::Backend(format!("a stored object is not JSON: {e}")))?;
    set_revision(&mut object, revision as u64);
    Ok(Stored::new(object))
}

/// What a write returns: the object written, at the transaction's revision.
fn written(mut object: Value, revision: i64) -> Stored {
    set_revision(&mut object, revision as u64);
    Stored::new(object)
}

/// Etcd's default `--max-txn-ops`: a batched read of more keys is several transactions.
const MAX_READS_PER_TXN: usize = 128;

/// Reads keys for a [`ReadBatch`]: one key a plain get, more a read-only transaction of gets
/// (linearizable, like a get, and no new revision), at most [`MAX_READS_PER_TXN`] a
/// transaction, the transactions at once.
fn read_many(kv: KvClient, metrics: EtcdMetrics) -> ReadMany {
    Arc::new(move |keys: Vec<String>| {
        let (kv, metrics) = (kv.clone(), metrics.clone());
        Box::pin(async move {
            let began = std::time::Instant::now();
            let values = read_keys(kv, keys).await;
            metrics.request("tokens", began);
            values
        })
    })
}

async fn read_keys(kv: KvClient, keys: Vec<String>) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
    if let [key] = keys.as_slice() {
        let resp = kv.clone().get(key.as_str(), None).await.map_err(backend)?;
        return Ok(vec![resp.kvs().first().map(|kv| kv.value().to_vec())]);
    }
    let reads = keys.chunks(MAX_READS_PER_TXN).map(|chunk| {
        let mut kv = kv.clone();
        let ops: Vec<TxnOp> = chunk.iter().map(|k| TxnOp::get(k.as_str(), None)).collect();
        async move { kv.txn(Txn::new().and_then(ops)).await.map_err(backend) }
    });
    let mut values = Vec::with_capacity(keys.len());
    for resp in futures::future::try_join_all(reads).await? {
        for op in resp.op_responses() {
            values.push(match op {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            });
        }
    }
    Ok(values)
}

fn header_revision(resp: &TxnResponse) -> i64 {
    resp.header().map(|h| h.revision()).unwrap_or_default()
}

impl EtcdStore {
    /// Connect to etcd (and check that it answers).
    pub async fn connect(opts: &EtcdOptions) -> Result<EtcdStore, StoreError> {
        if opts.endpoints.is_empty() {
            return Err(StoreError::Backend("no etcd endpoint given".into()));
        }
        let prefix = opts.prefix.trim_end_matches('/');
        if !prefix.starts_with('/') {
            return Err(StoreError::Backend(format!("the etcd prefix {:?} must start with '/'", opts.prefix)));
        }
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        if opts.ca.is_some() || opts.cert.is_some() {
            connect = connect.with_tls(tls_options(opts)?);
        }
        let client = Client::connect(&opts.endpoints, Some(connect.clone()))
            .await
            .map_err(|e| StoreError::Backend(format!("connecting to etcd at {}: {e}", opts.endpoints.join(","))))?;
        let kv = client.kv_client().max_decoding_message_size(MAX_RESPONSE_BYTES);
        let kv_for_reads = kv.clone();
        let metrics = EtcdMetrics::default();
        let (fenced_out, _) = tokio::sync::watch::channel(false);
        let store = EtcdStore {
            inner: Arc::new(Inner {
                client,
                kv,
                registry: format!("{prefix}/registry/"),
                token_hashes: format!("{prefix}/tokens/hash/"),
                token_names: format!("{prefix}/tokens/name/"),
                active: format!("{prefix}/active"),
                base: format!("{prefix}/"),
                endpoints: opts.endpoints.join(","),
                fence: Mutex::new(None),
                fenced_out,
                token_reads: ReadBatch::new(read_many(kv_for_reads, metrics.clone())),
                connect: (opts.endpoints.clone(), connect),
                metrics,
            }),
        };
        // Bounded: an address that takes the connection and never answers must not hold a
        // start (or a token command) for good.
        match tokio::time::timeout(Duration::from_secs(10), store.revision()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(StoreError::Backend(format!("etcd at {} does not answer: {e}", store.inner.endpoints)));
            }
            Err(_) => {
                return Err(StoreError::Backend(format!(
                    "etcd at {} did not answer within 10 s",
                    store.inner.endpoints
                )));
            }
        }
        Ok(store)
    }

    fn kv(&self) -> KvClient {
        self.inner.kv.clone()
    }

    /// How long etcd takes to answer, for `/metrics`.
    pub fn metrics(&self) -> &EtcdMetrics {
        &self.inner.metrics
    }

    fn key_of(&self, key: &Key) -> String {
        format!("{}{}/{}/{}", self.inner.registry, key.resource, escape(&key.namespace), escape(&key.name))
    }

    /// The key of an etcd key under the registry; None for anything else.
    fn parse_key(&self, raw: &[u8]) -> Option<Key> {
        let rest = std::str::from_utf8(raw).ok()?.strip_prefix(self.inner.registry.as_str())?;
        let mut parts = rest.rsplitn(3, '/');
        let name = parts.next()?;
        let namespace = parts.next()?;
        let resource = parts.next()?;
        Some(Key { resource: resource.to_string(), namespace: unescape(namespace), name: unescape(name) })
    }

    /// The key range a watch or list of `resource` (in `namespace`) covers.
    fn prefix_of(&self, resource: Option<&str>, namespace: Option<&str>) -> String {
        match (resource, namespace) {
            (None, _) => self.inner.registry.clone(),
            (Some(r), None) => format!("{}{r}/", self.inner.registry),
            (Some(r), Some(ns)) => format!("{}{r}/{}/", self.inner.registry, escape(ns)),
        }
    }

    fn fence(&self) -> Option<Fence> {
        self.inner.fence.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A transaction of `ops` when `compares` hold, fenced by the active key if this coordinator
    /// holds one. On failure the `else` branch reads the fence's key first, then `reads`.
    async fn txn(&self, compares: Vec<Compare>, ops: Vec<TxnOp>, reads: Vec<TxnOp>) -> Result<TxnResponse, StoreError> {
        let fence = self.fence();
        let mut when = Vec::with_capacity(compares.len() + 1);
        let mut otherwise = Vec::with_capacity(reads.len() + 1);
        if let Some(f) = &fence {
            when.push(Compare::create_revision(f.key.clone(), CompareOp::Equal, f.created));
            otherwise.push(TxnOp::get(f.key.clone(), None));
        }
        when.extend(compares);
        otherwise.extend(reads);
        let began = std::time::Instant::now();
        let resp = self.kv().txn(Txn::new().when(when).and_then(ops).or_else(otherwise)).await.map_err(backend);
        self.inner.metrics.request("txn", began);
        let resp = resp?;
        if !resp.succeeded() {
            if let Some(f) = &fence {
                let still = match resp.op_responses().first() {
                    Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()) == Some(f.created),
                    _ => false,
                };
                if !still {
                    self.inner.fenced_out.send_replace(true);
                    return Err(StoreError::Backend(
                        "this coordinator is no longer the active one (its lease in etcd expired or was taken over); \
                         nothing was written"
                            .into(),
                    ));
                }
            }
        }
        Ok(resp)
    }

    /// The get responses of a failed transaction's `else` branch, after the fence's.
    fn reads_of(&self, resp: &TxnResponse) -> Vec<Option<(i64, i64)>> {
        let skip = usize::from(self.fence().is_some());
        resp.op_responses()
            .into_iter()
            .skip(skip)
            .map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| (kv.create_revision(), kv.mod_revision())),
                _ => None,
            })
            .collect()
    }

    /// Why a compare-and-swap of `key` expecting `expected` failed, from what the store holds.
    fn refusal(key: &Key, expected: Option<u64>, held: Option<(i64, i64)>) -> StoreError {
        match held {
            None => StoreError::NotFound(describe(key)),
            Some((_, stored)) => StoreError::Conflict { have: expected.unwrap_or_default(), stored: stored as u64 },
        }
    }

    fn compares_for(k: &str, expected: Option<u64>) -> Vec<Compare> {
        let mut c = vec![Compare::create_revision(k, CompareOp::Greater, 0)];
        if let Some(e) = expected {
            c.push(Compare::mod_revision(k, CompareOp::Equal, e as i64));
        }
        c
    }

    /// Becomes the active coordinator: waits while another holds the active key, then holds
    /// it on a lease of `ttl` kept alive in the background, and fences every write of this
    /// store with it. `waiting` is called once when another is active (with its identity).
    /// The returned [`Active`] says when the lease is lost; dropping it lets the key go at once.
    pub async fn become_active(
        &self,
        identity: &str,
        ttl: Duration,
        mut waiting: impl FnMut(&str),
    ) -> Result<Active, StoreError> {
        let key = self.inner.active.clone();
        let ttl_s = ttl.as_secs().max(2) as i64;
        let (endpoints, options) = &self.inner.connect;
        let lease_connection = Client::connect(endpoints, Some(options.clone())).await.map_err(backend)?;
        let mut told = false;
        loop {
            let mut lease_client = lease_connection.lease_client();
            // The lease runs from before it was asked for, at the latest.
            let asked = tokio::time::Instant::now();
            let lease = lease_client.grant(ttl_s, None).await.map_err(backend)?.id();
            let put = TxnOp::put(key.clone(), identity, Some(PutOptions::new().with_lease(lease)));
            let resp = self
                .kv()
                .txn(
                    Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                        .and_then([put])
                        .or_else([TxnOp::get(key.clone(), None)]),
                )
                .await
                .map_err(backend)?;
            if resp.succeeded() {
                let created = header_revision(&resp);
                *self.inner.fence.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Fence { key: key.clone().into_bytes(), created });
                self.inner.fenced_out.send_replace(false);
                let ttl = Duration::from_secs(ttl_s as u64);
                return Ok(Active::start(self, lease_connection, lease, ttl, asked + ttl));
            }
            let _ = lease_client.revoke(lease).await;
            let holder = match resp.op_responses().first() {
                Some(TxnOpResponse::Get(g)) => {
                    g.kvs().first().map(|kv| (String::from_utf8_lossy(kv.value()).into_owned(), kv.mod_revision()))
                }
                _ => None,
            };
            let Some((holder, at)) = holder else { continue };
            if !told {
                waiting(&holder);
                told = true;
            }
            // Until the key is deleted (its holder stopped, or its lease expired).
            let mut watch = self
                .inner
                .client
                .watch_client()
                .watch(key.clone(), Some(WatchOptions::new().with_start_revision(at + 1)))
                .await
                .map_err(backend)?;
            loop {
                match watch.message().await.map_err(backend)? {
                    Some(r) if r.events().iter().any(|e| e.event_type() == etcd_client::EventType::Delete) => break,
                    Some(r) if r.canceled() => break,
                    Some(_) => {}
                    None => break,
                }
            }
        }
    }

    /// Removes the history before `revision` (etcd's compaction), as kube-apiserver compacts
    /// every few minutes: etcd keeps every version otherwise.
    pub async fn compact(&self, revision: u64) -> Result<(), StoreError> {
        match self.kv().compact(revision as i64, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("compacted") => Ok(()),
            Err(e) => Err(backend(e)),
        }
    }

    /// The endpoints, for messages.
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// What API requests authenticate with: the token's record, read with others' (one read in
    /// flight at a time, each started after its lookups were asked for).
    async fn token_of_request(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        let k = format!("{}{hash}", self.inner.token_hashes);
        let Some(value) = self.inner.token_reads.get(k).await? else { return Ok(None) };
        serde_json::from_slice(&value).map(Some).map_err(|e| StoreError::Backend(format!("a stored token: {e}")))
    }

    async fn token_record(&self, hash: &str) -> Result<Option<(TokenRecord, i64)>, StoreError> {
        let k = format!("{}{hash}", self.inner.token_hashes);
        let resp = self.kv().get(k, None).await.map_err(backend)?;
        let Some(kv) = resp.kvs().first() else { return Ok(None) };
        let rec: TokenRecord =
            serde_json::from_slice(kv.value()).map_err(|e| StoreError::Backend(format!("a stored token: {e}")))?;
        Ok(Some((rec, kv.mod_revision())))
    }

    /// The hash the token `name` has, and its key's revision.
    async fn token_name(&self, name: &str) -> Result<Option<(String, i64)>, StoreError> {
        let k = format!("{}{}", self.inner.token_names, escape(name));
        let resp = self.kv().get(k, None).await.map_err(backend)?;
        Ok(resp.kvs().first().map(|kv| (String::from_utf8_lossy(kv.value()).into_owned(), kv.mod_revision())))
    }

    /// Deletes the token `name` if its name key is still at `at` (nothing minted since).
    async fn delete_token_at(&self, name: &str, hash: &str, at: i64) -> Result<bool, StoreError> {
        let nk = format!("{}{}", self.inner.token_names, escape(name));
        let hk = format!("{}{hash}", self.inner.token_hashes);
        let resp = self
            .txn(
                vec![Compare::mod_revision(nk.clone(), CompareOp::Equal, at)],
                vec![TxnOp::delete(nk, None), TxnOp::delete(hk, None)],
                Vec::new(),
            )
            .await?;
        Ok(resp.succeeded())
    }
}

fn tls_options(opts: &EtcdOptions) -> Result<etcd_client::TlsOptions, StoreError> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| StoreError::Backend(format!("reading {}: {e}", p.display())))
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &opts.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    match (&opts.cert, &opts.key) {
        (Some(c), Some(k)) => tls = tls.identity(Identity::from_pem(read(c)?, read(k)?)),
        (None, None) => {}
        _ => {
            return Err(StoreError::Backend(
                "an etcd client certificate needs its key, and a key its certificate".into(),
            ))
        }
    }
    Ok(tls)
}

/// A token as etcd keeps it, under its hash.
#[derive(serde::Serialize, serde::Deserialize)]
struct TokenRecord {
    name: String,
    role: String,
    created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires: Option<String>,
}

/// This coordinator is the active one while this lives: its lease is kept alive in the
/// background. [`Active::lost`] returns when it is not any more.
pub struct Active {
    /// Kept for its fence: `fenced_out`, which the keeper waits on, lives in the store.
    _store: EtcdStore,
    /// The lease's own connection.
    client: Client,
    lease: i64,
    keeper: tokio::task::JoinHandle<()>,
    lost: tokio::sync::watch::Receiver<bool>,
    /// Set by [`Active::resign`]: the lease is revoked already.
    resigned: bool,
}

impl Active {
    /// `until`: when the lease runs out unless renewed (measured from before it was granted).
    fn start(store: &EtcdStore, client: Client, lease: i64, ttl: Duration, until: tokio::time::Instant) -> Active {
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        let fenced = store.inner.fenced_out.subscribe();
        let keeper = tokio::spawn(keep_alive(client.clone(), lease, ttl, until, lost_tx, fenced));
        Active { _store: store.clone(), client, lease, keeper, lost, resigned: false }
    }

    /// Returns once the lease is lost (it expired, etcd could not be reached for its time to
    /// live, or a write found another coordinator active).
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|l| *l).await;
    }

    /// Lets the active key go now, so that a standby takes over at once instead of after the
    /// lease's time to live.
    pub async fn resign(mut self) {
        self.keeper.abort();
        self.resigned = true;
        // The fence stays: with the key gone, every later write of this store is refused.
        let _ = self.client.lease_client().revoke(self.lease).await;
    }
}

impl Drop for Active {
    /// Dropped without [`Active::resign`] (`serve` leaving on an error after it became active:
    /// a port taken, its TLS files unreadable): the key still goes at once rather than after
    /// the lease's time to live, so a standby takes over now. The revoke is waited for (2 s at
    /// most) where the runtime can block a thread, since the process is about to exit and
    /// would drop a task spawned for it.
    fn drop(&mut self) {
        self.keeper.abort();
        if self.resigned {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let mut leases = self.client.lease_client();
        let lease = self.lease;
        let revoke = async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), leases.revoke(lease)).await;
        };
        if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| runtime.block_on(revoke));
        } else {
            runtime.spawn(revoke);
        }
    }
}

/// What one renewal of the lease came to.
enum Renewal {
    /// Renewed by a request sent at this instant: the lease holds until then + its TTL.
    Renewed(tokio::time::Instant),
    /// etcd no longer has the lease.
    Expired,
    Failed(String),
}

type LeaseStream = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

async fn renew(client: &Client, lease: i64, stream: &mut Option<LeaseStream>) -> Renewal {
    let sent = tokio::time::Instant::now();
    let Some((keeper, responses)) = stream.as_mut() else {
        // Opening the stream renews the lease once (its first answer is the renewal's).
        return match client.lease_client().keep_alive(lease).await {
            Ok(opened) => {
                *stream = Some(opened);
                Renewal::Renewed(sent)
            }
            Err(etcd_client::Error::LeaseKeepAliveError(e)) if e.contains("not found") => Renewal::Expired,
            Err(e) => Renewal::Failed(e.to_string()),
        };
    };
    if let Err(e) = keeper.keep_alive().await {
        return Renewal::Failed(e.to_string());
    }
    match responses.message().await {
        Ok(Some(r)) if r.ttl() > 0 => Renewal::Renewed(sent),
        Ok(Some(_)) => Renewal::Expired,
        Ok(None) => Renewal::Failed("etcd closed the lease's stream".into()),
        Err(e) => Renewal::Failed(e.to_string()),
    }
}

/// Renews the lease every third of its TTL; after a failure, again soon, for as long as the
/// lease holds. Lost (and `lost` says so) when etcd no longer has the lease, when it ran out
/// before a renewal was answered, or when a write found the fence gone. A late answer still
/// counts: the lease then holds from when its request was sent, never from when the answer
/// came. (The first version gave up when one answer took more than a third of the TTL: 10,000
/// agents connecting to a coordinator on etcd made one answer late by a second and stopped it.)
async fn keep_alive(
    client: Client,
    lease: i64,
    ttl: Duration,
    mut deadline: tokio::time::Instant,
    lost: tokio::sync::watch::Sender<bool>,
    mut fenced: tokio::sync::watch::Receiver<bool>,
) {
    let every = (ttl / 3).max(Duration::from_millis(500));
    let retry = (ttl / 15).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut stream = None;
    loop {
        let wait = tokio::select! {
            renewal = tokio::time::timeout_at(deadline, renew(&client, lease, &mut stream)) => match renewal {
                Ok(Renewal::Renewed(sent)) => {
                    deadline = deadline.max(sent + ttl);
                    let took = sent.elapsed();
                    if took > every / 2 {
                        // Seen with etcd on the coordinator's two cores taking 10,000 agents'
                        // writes: renewals answered seconds late.
                        tracing::warn!(lease, ?took, "etcd was slow to renew the active coordinator's lease");
                    }
                    every
                }
                Ok(Renewal::Expired) => {
                    tracing::error!(lease, "the active coordinator's lease in etcd expired");
                    break;
                }
                Ok(Renewal::Failed(why)) => {
                    stream = None;
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    tracing::warn!(lease, %why, ?left, "could not renew the active coordinator's lease in etcd; trying again");
                    retry
                }
                Err(_) => {
                    tracing::error!(lease, "the active coordinator's lease in etcd could not be renewed in time");
                    break;
                }
            },
            _ = fenced.wait_for(|f| *f) => break,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = fenced.wait_for(|f| *f) => break,
        }
    }
    lost.send_replace(true);
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, StoreError> {
        let began = std::time::Instant::now();
        let resp = self.kv().get(self.key_of(key), None).await.map_err(backend);
        self.inner.metrics.request("get", began);
        let resp = resp?;
        resp.kvs().first().map(|kv| decode(kv.value(), kv.mod_revision())).transpose()
    }

    async fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Listing, StoreError> {
        let (items, revision) = self.list_stored(resource, namespace).await?;
        Ok(Listing { items: items.into_iter().map(Stored::into_value).collect(), revision })
    }

    async fn list_json(&self, resource: &str, namespace: Option<&str>) -> Result<JsonListing, StoreError> {
        let (items, revision) = self.list_stored(resource, namespace).await?;
        Ok(JsonListing { items: items.into_iter().map(|s| s.json).collect(), revision })
    }

    async fn create(&self, key: &Key, object: Value) -> Result<Stored, StoreError> {
        let k = self.key_of(key);
        let value = encode(&object)?;
        let resp = self
            .txn(
                vec![Compare::create_revision(k.clone(), CompareOp::Equal, 0)],
                vec![TxnOp::put(k.clone(), value, None)],
                vec![TxnOp::get(k, Some(GetOptions::new().with_keys_only()))],
            )
            .await?;
        if !resp.succeeded() {
            return Err(StoreError::AlreadyExists(describe(key)));
        }
        Ok(written(object, header_revision(&resp)))
    }

    async fn update(&self, key: &Key, object: Value, expected: Option<u64>) -> Result<Stored, StoreError> {
        let k = self.key_of(key);
        let value = encode(&object)?;
        let resp = self
            .txn(
                Self::compares_for(&k, expected),
                vec![TxnOp::put(k.clone(), value, None)],
                vec![TxnOp::get(k, Some(GetOptions::new().with_keys_only()))],
            )
            .await?;
        if !resp.succeeded() {
            let held = self.reads_of(&resp).into_iter().next().flatten();
            let fails = match (held, expected) {
                (None, _) => true,
                (Some((_, stored)), Some(e)) => stored as u64 != e,
                (Some(_), None) => false,
            };
            if !fails {
                return Err(StoreError::Backend("etcd refused a write whose conditions all hold".into()));
            }
            return Err(Self::refusal(key, expected, held));
        }
        Ok(written(object, header_revision(&resp)))
    }

    async fn delete(&self, key: &Key, expected: Option<u64>) -> Result<Stored, StoreError> {
        let k = self.key_of(key);
        let resp = self
            .txn(
                Self::compares_for(&k, expected),
                vec![TxnOp::delete(k.clone(), Some(DeleteOptions::new().with_prev_key()))],
                vec![TxnOp::get(k, Some(GetOptions::new().with_keys_only()))],
            )
            .await?;
        if !resp.succeeded() {
            let held = self.reads_of(&resp).into_iter().next().flatten();
            return Err(Self::refusal(key, expected, held));
        }
        let revision = header_revision(&resp);
        let prev = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        let prev = prev.ok_or_else(|| StoreError::NotFound(describe(key)))?;
        decode(&prev, revision)
    }

    async fn watch(&self, filter: WatchFilter, from: u64) -> Result<WatchStream, StoreError> {
        let prefix = match (&filter.resource, &filter.namespace, &filter.name) {
            (Some(r), Some(ns), Some(n)) => {
                self.key_of(&Key { resource: r.clone(), namespace: ns.clone(), name: n.clone() })
            }
            (Some(r), None, Some(n)) if !n.is_empty() => {
                // A cluster-scoped object's key; a namespaced one is filtered below.
                self.prefix_of(Some(r), None)
            }
            (r, ns, _) => self.prefix_of(r.as_deref(), ns.as_deref()),
        };
        let exact = filter.resource.is_some() && filter.namespace.is_some() && filter.name.is_some();
        let mut opts = WatchOptions::new().with_start_revision(from as i64 + 1).with_prev_key();
        if !exact {
            opts = opts.with_prefix();
        }
        let mut client = self.inner.client.watch_client().max_decoding_message_size(MAX_RESPONSE_BYTES);
        let stream = client.watch(prefix, Some(opts)).await.map_err(backend)?;
        let state = WatchState { store: self.clone(), filter, from, stream, queue: Default::default(), done: false };
        Ok(Box::pin(futures::stream::unfold(state, WatchState::next)))
    }

    async fn revision(&self) -> Result<u64, StoreError> {
        let began = std::time::Instant::now();
        let resp =
            self.kv().get(self.inner.active.clone(), Some(GetOptions::new().with_count_only())).await.map_err(backend);
        self.inner.metrics.request("revision", began);
        let resp = resp?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default() as u64)
    }

    /// A linearizable read: it goes through etcd's leader and a quorum, which is what a write
    /// needs (etcd has no write that takes no revision).
    async fn check_writes(&self) -> Result<(), StoreError> {
        self.revision().await.map(|_| ())
    }

    async fn update_in_order(
        &self,
        first: Vec<CasWrite>,
        then: Vec<CasWrite>,
    ) -> Result<Vec<Option<Stored>>, StoreError> {
        outcomes_of(self.write_in_order(first, then).await)
    }
}

/// What [`EtcdStore::write_in_order`] made of each write: `None` for one not tried.
pub(crate) type Outcomes = Vec<Option<Result<Stored, StoreError>>>;

/// [`Store::update_in_order`]'s answer from each write's outcome: the first error that is not
/// a lost condition, if any.
pub(crate) fn outcomes_of(outcomes: Outcomes) -> Result<Vec<Option<Stored>>, StoreError> {
    outcomes
        .into_iter()
        .map(|o| match o {
            Some(Ok(stored)) => Ok(Some(stored)),
            None | Some(Err(StoreError::Conflict { .. } | StoreError::NotFound(_))) => Ok(None),
            Some(Err(e)) => Err(e),
        })
        .collect()
}

impl EtcdStore {
    /// [`Store::update_in_order`], with every write's own outcome, so that a cache in front
    /// can wait for each write made before it answers. Each write is a transaction of its
    /// own: etcd gives one revision to every write of a transaction, and a watcher resuming
    /// at that revision would miss the objects it had not received yet. `then` is sent once
    /// etcd has answered every write of `first` (an answer means committed): one more round
    /// trip than a single transaction, the price of every object's own revision.
    pub(crate) async fn write_in_order(&self, first: Vec<CasWrite>, then: Vec<CasWrite>) -> Outcomes {
        let mut out: Outcomes = self.write_each(first).await.into_iter().map(Some).collect();
        if out.iter().all(|o| matches!(o, Some(Ok(_)))) {
            out.extend(self.write_each(then).await.into_iter().map(Some));
        } else {
            out.extend(then.iter().map(|_| None));
        }
        out
    }

    /// Independent writes, sent at once (etcd commits concurrent ones together).
    async fn write_each(&self, writes: Vec<CasWrite>) -> Vec<Result<Stored, StoreError>> {
        futures::future::join_all(
            writes.into_iter().map(|(key, object, expected)| async move { self.update(&key, object, expected).await }),
        )
        .await
    }

    /// Writes `objects` in one transaction, at one revision (returned), as another client of
    /// etcd may: what the watch cache must still take whole.
    #[cfg(test)]
    pub(crate) async fn put_together(&self, objects: Vec<(Key, Value)>) -> Result<u64, StoreError> {
        let ops = objects
            .iter()
            .map(|(key, object)| Ok(TxnOp::put(self.key_of(key), encode(object)?, None)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let resp = self.txn(Vec::new(), ops, Vec::new()).await?;
        Ok(header_revision(&resp) as u64)
    }
}

impl EtcdStore {
    async fn list_stored(&self, resource: &str, namespace: Option<&str>) -> Result<(Vec<Stored>, u64), StoreError> {
        let prefix = self.prefix_of(Some(resource), namespace);
        let began = std::time::Instant::now();
        let resp = self.kv().get(prefix, Some(GetOptions::new().with_prefix())).await.map_err(backend);
        self.inner.metrics.request("list", began);
        let resp = resp?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default() as u64;
        let mut items = Vec::with_capacity(resp.kvs().len());
        for kv in resp.kvs() {
            let Some(key) = self.parse_key(kv.key()) else { continue };
            items.push(((key.namespace, key.name), decode(kv.value(), kv.mod_revision())?));
        }
        // By namespace, then name: etcd orders by key, where `a-b/` sorts before `a/`.
        items.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((items.into_iter().map(|(_, s)| s).collect(), revision))
    }
}

/// An open etcd watch, as a [`WatchStream`].
struct WatchState {
    store: EtcdStore,
    filter: WatchFilter,
    from: u64,
    stream: etcd_client::WatchStream,
    queue: std::collections::VecDeque<Event>,
    done: bool,
}

impl WatchState {
    async fn next(mut self) -> Option<(Result<Event, StoreError>, WatchState)> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Some((Ok(ev), self));
            }
            if self.done {
                return None;
            }
            match self.stream.message().await {
                Err(e) => {
                    self.done = true;
                    return Some((Err(backend(e)), self));
                }
                Ok(None) => {
                    self.done = true;
                    return Some((Err(StoreError::Backend("etcd ended the watch".into())), self));
                }
                Ok(Some(resp)) => {
                    if resp.compact_revision() > 0 {
                        self.done = true;
                        let oldest = resp.compact_revision() as u64;
                        return Some((Err(StoreError::Gone { requested: self.from, oldest }), self));
                    }
                    if resp.canceled() {
                        self.done = true;
                        let why = format!("etcd canceled the watch: {}", resp.cancel_reason());
                        return Some((Err(StoreError::Backend(why)), self));
                    }
                    for e in resp.events() {
                        match self.store.event_of(e, &self.filter) {
                            Ok(Some(ev)) => self.queue.push_back(ev),
                            Ok(None) => {}
                            Err(err) => {
                                self.done = true;
                                return Some((Err(err), self));
                            }
                        }
                    }
                }
            }
        }
    }
}

impl EtcdStore {
    /// The etcd event `e` as the store's event, when it is of an object `filter` wants (every
    /// registry object without one).
    fn event_of(&self, e: &etcd_client::Event, filter: &WatchFilter) -> Result<Option<Event>, StoreError> {
        let Some(kv) = e.kv() else { return Ok(None) };
        let Some(key) = self.parse_key(kv.key()) else { return Ok(None) };
        if !filter.matches(&key) {
            return Ok(None);
        }
        let revision = kv.mod_revision();
        let (kind, stored) = match e.event_type() {
            etcd_client::EventType::Put => {
                let kind = if kv.create_revision() == revision { EventType::Added } else { EventType::Modified };
                (kind, decode(kv.value(), revision)?)
            }
            etcd_client::EventType::Delete => {
                let Some(prev) = e.prev_kv() else {
                    return Err(StoreError::Backend("etcd sent a deletion without the object's last state".into()));
                };
                (EventType::Deleted, decode(prev.value(), revision)?)
            }
        };
        Ok(Some(Event { revision: revision as u64, key, kind, object: stored.object, json: stored.json, origin: None }))
    }

    /// Every object of the registry, at one revision (returned), read a page at a time: the
    /// watch cache's starting point.
    pub(crate) async fn snapshot(&self) -> Result<(Vec<(Key, Stored)>, u64), StoreError> {
        const PAGE: i64 = 2000;
        let prefix = self.inner.registry.as_bytes();
        // The end of the prefix's range: its last byte, plus one ('/' becomes '0').
        let mut end = prefix.to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let mut from = prefix.to_vec();
        let mut at = 0i64;
        let mut out = Vec::new();
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if at > 0 {
                opts = opts.with_revision(at);
            }
            let resp = self.kv().get(from.clone(), Some(opts)).await.map_err(backend)?;
            if at == 0 {
                at = resp.header().map(|h| h.revision()).unwrap_or_default();
            }
            for kv in resp.kvs() {
                let Some(key) = self.parse_key(kv.key()) else { continue };
                out.push((key, decode(kv.value(), kv.mod_revision())?));
            }
            match resp.kvs().last() {
                Some(kv) if resp.more() => {
                    from = kv.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok((out, at as u64))
    }

    /// An etcd watch of every registry object after revision `after`, with each deleted
    /// object's last state.
    pub(crate) async fn watch_registry(&self, after: u64) -> Result<etcd_client::WatchStream, StoreError> {
        let opts = WatchOptions::new().with_start_revision(after as i64 + 1).with_prev_key().with_prefix();
        let mut client = self.inner.client.watch_client().max_decoding_message_size(MAX_RESPONSE_BYTES);
        let mut stream = client.watch(self.inner.registry.clone(), Some(opts)).await.map_err(backend)?;
        // Confirmed before the cache serves: from here on etcd sends every event after `after`.
        match tokio::time::timeout(Duration::from_secs(10), stream.message()).await {
            Ok(Ok(Some(r))) if r.created() => Ok(stream),
            Ok(Ok(Some(r))) => Err(StoreError::Backend(format!(
                "etcd answered a new watch with something else than its creation (canceled: {}, {})",
                r.canceled(),
                r.cancel_reason()
            ))),
            Ok(Ok(None)) => Err(StoreError::Backend("etcd ended a new watch".into())),
            Ok(Err(e)) => Err(backend(e)),
            Err(_) => Err(StoreError::Backend("etcd did not confirm a new watch within 10 s".into())),
        }
    }

    /// The registry events etcd still holds with revisions in (`after`, `to`], oldest first,
    /// and the revision after which they are complete: `after`, or later when etcd compacted
    /// past it. What a restarted coordinator's watch cache starts its window with, so that a
    /// watch from before the restart need not be Gone.
    ///
    /// A watch says nothing when nothing happens (and etcd 3.4's progress notes may come before
    /// the history they cover), so this first writes a marker key under the prefix, at a
    /// revision past `to`, and reads the whole prefix's history up to it.
    pub(crate) async fn history(&self, after: u64, to: u64) -> Result<(u64, Vec<Event>), StoreError> {
        if after >= to {
            return Ok((to, Vec::new()));
        }
        let marker = format!("{}watch-cache-start", self.inner.base);
        let resp = self.txn(Vec::new(), vec![TxnOp::put(marker, Vec::new(), None)], Vec::new()).await?;
        if !resp.succeeded() {
            return Err(StoreError::Backend("etcd refused the watch cache's start marker".into()));
        }
        let end = header_revision(&resp) as u64;
        let mut after = after;
        'open: loop {
            let mut out = Vec::new();
            if after >= to {
                return Ok((to, out));
            }
            let opts = WatchOptions::new().with_start_revision(after as i64 + 1).with_prev_key().with_prefix();
            let mut client = self.inner.client.watch_client().max_decoding_message_size(MAX_RESPONSE_BYTES);
            let mut stream = client.watch(self.inner.base.clone(), Some(opts)).await.map_err(backend)?;
            let all = WatchFilter::default();
            while let Some(resp) = stream.message().await.map_err(backend)? {
                if resp.compact_revision() > 0 {
                    // The oldest revision etcd holds is the compaction's: from there.
                    after = (resp.compact_revision() as u64).saturating_sub(1).max(after + 1);
                    continue 'open;
                }
                if resp.canceled() {
                    return Err(StoreError::Backend(format!("etcd canceled a watch: {}", resp.cancel_reason())));
                }
                for e in resp.events() {
                    let revision = e.kv().map(|kv| kv.mod_revision()).unwrap_or_default() as u64;
                    if revision > to || revision >= end {
                        return Ok((after, out));
                    }
                    out.extend(self.event_of(e, &all)?);
                }
            }
            return Err(StoreError::Backend("etcd ended a watch".into()));
        }
    }

    /// The registry events of one watch response, in order.
    pub(crate) fn events_of(&self, resp: &etcd_client::WatchResponse) -> Result<Vec<Event>, StoreError> {
        let all = WatchFilter::default();
        let mut out = Vec::with_capacity(resp.events().len());
        for e in resp.events() {
            out.extend(self.event_of(e, &all)?);
        }
        Ok(out)
    }
}

#[async_trait]
impl Tokens for EtcdStore {
    async fn put_token(
        &self,
        hash: String,
        name: String,
        role: String,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let now = chrono::Utc::now();
        let expires = super::token_expiry(now, ttl)?;
        let rec = TokenRecord { name: name.clone(), role, created: super::rfc3339(now), expires };
        let value = serde_json::to_vec(&rec).map_err(|e| StoreError::Backend(e.to_string()))?;
        let nk = format!("{}{}", self.inner.token_names, escape(&name));
        let hk = format!("{}{hash}", self.inner.token_hashes);
        loop {
            let old = self.token_name(&name).await?;
            let (compare, mut ops) = match &old {
                Some((old_hash, at)) => (
                    Compare::mod_revision(nk.clone(), CompareOp::Equal, *at),
                    vec![TxnOp::delete(format!("{}{old_hash}", self.inner.token_hashes), None)],
                ),
                None => (Compare::create_revision(nk.clone(), CompareOp::Equal, 0), Vec::new()),
            };
            ops.push(TxnOp::put(nk.clone(), hash.clone(), None));
            ops.push(TxnOp::put(hk.clone(), value.clone(), None));
            if self.txn(vec![compare], ops, Vec::new()).await?.succeeded() {
                return Ok(());
            }
        }
    }

    async fn claim_token(&self, hash: String, name: String, role: String) -> Result<bool, StoreError> {
        let rec = TokenRecord { name: name.clone(), role, created: super::rfc3339(chrono::Utc::now()), expires: None };
        let value = serde_json::to_vec(&rec).map_err(|e| StoreError::Backend(e.to_string()))?;
        let nk = format!("{}{}", self.inner.token_names, escape(&name));
        let hk = format!("{}{hash}", self.inner.token_hashes);
        let resp = self
            .txn(
                vec![Compare::create_revision(nk.clone(), CompareOp::Equal, 0)],
                vec![TxnOp::put(nk, hash, None), TxnOp::put(hk, value, None)],
                Vec::new(),
            )
            .await?;
        Ok(resp.succeeded())
    }

    async fn token_hash_of(&self, name: String) -> Result<Option<String>, StoreError> {
        Ok(self.token_name(&name).await?.map(|(h, _)| h))
    }

    async fn list_tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let resp = self
            .kv()
            .get(self.inner.token_hashes.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(backend)?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let rec: TokenRecord =
                serde_json::from_slice(kv.value()).map_err(|e| StoreError::Backend(format!("a stored token: {e}")))?;
            out.push(TokenInfo { name: rec.name, role: rec.role, created: rec.created, expires: rec.expires });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete_token(&self, name: String, hash: Option<String>) -> Result<bool, StoreError> {
        loop {
            let Some((held, at)) = self.token_name(&name).await? else { return Ok(false) };
            if hash.as_ref().is_some_and(|h| *h != held) {
                return Ok(false);
            }
            if self.delete_token_at(&name, &held, at).await? {
                return Ok(true);
            }
        }
    }

    async fn purge_expired_tokens(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Vec<String>, StoreError> {
        let mut purged = Vec::new();
        for t in self.list_tokens().await? {
            if t.expires.is_none() || !super::sqlite::expired(t.expires.as_deref(), now) {
                continue;
            }
            let Some((hash, at)) = self.token_name(&t.name).await? else { continue };
            // Only the token that was read: one minted since under the name stays.
            let same = self.token_record(&hash).await?.is_some_and(|(r, _)| r.expires == t.expires);
            if same && self.delete_token_at(&t.name, &hash, at).await? {
                purged.push(t.name);
            }
        }
        Ok(purged)
    }

    async fn find_token(&self, hash: String) -> Result<Option<(String, String)>, StoreError> {
        let Some(rec) = self.token_of_request(&hash).await? else { return Ok(None) };
        if rec.expires.is_some() && super::sqlite::expired(rec.expires.as_deref(), chrono::Utc::now()) {
            return Ok(None);
        }
        Ok(Some((rec.name, rec.role)))
    }
}

/// A real etcd for tests: Debian's `etcd` (package etcd-server, which `scripts/install-deps.sh`
/// installs) on loopback ports of its own, with its data in a temp directory; killed when
/// dropped.
pub mod testing {
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    pub struct EtcdServer {
        child: Child,
        endpoint: String,
        dir: tempfile::TempDir,
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
    }

    impl EtcdServer {
        /// Starts etcd and waits until it answers. Panics (naming what to install) when there
        /// is no `etcd` on PATH: the tests that need it are part of the suite, not optional.
        pub fn start() -> EtcdServer {
            Self::start_with(None)
        }

        /// [`Self::start`] serving HTTPS with `pki`'s serving certificate, and asking clients
        /// for a certificate its CA signed (etcd's `--client-cert-auth`).
        pub fn start_tls(pki: &crate::tls::Pki) -> EtcdServer {
            Self::start_with(Some(pki))
        }

        fn start_with(pki: Option<&crate::tls::Pki>) -> EtcdServer {
            let dir = tempfile::Builder::new().prefix("aloft-etcd-").tempdir().expect("tempdir");
            let (client, peer) = (free_port(), free_port());
            let scheme = if pki.is_some() { "https" } else { "http" };
            let endpoint = format!("{scheme}://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.path().join("etcd.log")).expect("etcd log");
            let mut cmd = Command::new("etcd");
            if let Some(pki) = pki {
                cmd.arg(format!("--cert-file={}", pki.cert.display()))
                    .arg(format!("--key-file={}", pki.key.display()))
                    .arg(format!("--trusted-ca-file={}", pki.ca_cert.display()))
                    .arg("--client-cert-auth");
            }
            let child = cmd
                .arg("--name=test")
                .arg(format!("--data-dir={}", dir.path().join("data").display()))
                .arg(format!("--listen-client-urls={endpoint}"))
                .arg(format!("--advertise-client-urls={endpoint}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=test={peer_url}"))
                .arg("--max-request-bytes=3145728")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("starting etcd ({e}): install it with scripts/install-deps.sh (package etcd-server)")
                });
            let mut server = EtcdServer { child, endpoint, dir };
            server.wait_ready();
            server
        }

        /// The etcd process (a benchmark counts its CPU with the coordinator's).
        pub fn pid(&self) -> u32 {
            self.child.id()
        }

        fn wait_ready(&mut self) {
            let deadline = Instant::now() + Duration::from_secs(30);
            let address = self.endpoint.split("://").nth(1).unwrap_or_default().to_string();
            while Instant::now() < deadline {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("etcd exited at start ({status}); its log:\n{}", self.log());
                }
                // Listening is enough to go on: a single member elects itself at once, and the
                // client waits for it.
                if std::net::TcpStream::connect(&address).is_ok() {
                    std::thread::sleep(Duration::from_millis(200));
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            panic!("etcd did not answer within 30 s; its log:\n{}", self.log());
        }

        /// `http://127.0.0.1:PORT` (`https://` from [`Self::start_tls`])
        pub fn endpoint(&self) -> &str {
            &self.endpoint
        }

        fn log(&self) -> String {
            std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
        }
    }

    impl Drop for EtcdServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::EtcdServer;
    use super::*;
    use crate::store::{revision_of, Tokens};
    use futures::StreamExt;
    use serde_json::json;

    fn obj(name: &str, v: i64) -> Value {
        json!({"metadata": {"name": name, "resourceVersion": "999"}, "spec": {"v": v}})
    }

    async fn store(etcd: &EtcdServer) -> EtcdStore {
        EtcdStore::connect(&EtcdOptions::new(vec![etcd.endpoint().to_string()])).await.unwrap()
    }

    #[tokio::test]
    async fn crud_and_cas_on_etcd() {
        let etcd = EtcdServer::start();
        let s = store(&etcd).await;
        let k = Key::cluster("/nodes", "a");
        let created = s.create(&k, obj("a", 1)).await.unwrap();
        let r1 = revision_of(&created).unwrap();
        assert!(r1 > 0);
        assert!(matches!(s.create(&k, obj("a", 1)).await, Err(StoreError::AlreadyExists(_))));
        let read = s.get(&k).await.unwrap().unwrap();
        assert_eq!(revision_of(&read), Some(r1), "the revision read is the write's");
        assert_eq!(read.json.as_ref(), serde_json::to_string(&*read.object).unwrap());
        let upd = s.update(&k, obj("a", 2), Some(r1)).await.unwrap();
        let r2 = revision_of(&upd).unwrap();
        assert!(r2 > r1);
        match s.update(&k, obj("a", 3), Some(r1)).await {
            Err(StoreError::Conflict { have, stored }) => assert_eq!((have, stored), (r1, r2)),
            other => panic!("a stale update: {other:?}"),
        }
        assert_eq!(s.get(&k).await.unwrap().unwrap()["spec"]["v"], 2, "the stale update changed nothing");
        assert!(matches!(
            s.update(&Key::cluster("/nodes", "none"), obj("none", 1), None).await,
            Err(StoreError::NotFound(_))
        ));
        // Listed by namespace, then name, whatever etcd's key order says (`a-b/` before `a/`).
        for (ns, name) in [("a-b", "x"), ("a", "y"), ("a", "x"), ("", "c")] {
            s.create(&Key::new("/leases", ns, name), obj(name, 0)).await.unwrap();
        }
        let l = s.list("/leases", None).await.unwrap();
        let order: Vec<(String, String)> = l
            .items
            .iter()
            .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), revision_of(o).unwrap().to_string()))
            .collect();
        assert_eq!(order.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["c", "x", "y", "x"]);
        assert_eq!(s.list("/leases", Some("a")).await.unwrap().items.len(), 2);
        assert_eq!(l.revision, s.revision().await.unwrap());
        let del = s.delete(&k, Some(r2)).await.unwrap();
        assert!(revision_of(&del).unwrap() > r2, "a deletion has its own revision");
        assert_eq!(del["spec"]["v"], 2, "a deletion returns the last state");
        assert!(s.get(&k).await.unwrap().is_none());
        assert!(matches!(s.delete(&k, None).await, Err(StoreError::NotFound(_))));
        // A name that could break the key layout stays one name.
        let odd = Key::new("/leases", "ns", "a/b%2F");
        s.create(&odd, obj("a/b%2F", 0)).await.unwrap();
        assert!(s.get(&odd).await.unwrap().is_some());
        assert!(s.get(&Key::new("/leases", "ns", "a")).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn too_large_objects_are_refused_before_etcd() {
        let etcd = EtcdServer::start();
        let s = store(&etcd).await;
        let big = json!({"metadata": {"name": "big"}, "data": "x".repeat(MAX_OBJECT_BYTES)});
        let before = s.revision().await.unwrap();
        assert!(matches!(s.create(&Key::cluster("/configmaps", "big"), big).await, Err(StoreError::TooLarge { .. })));
        assert_eq!(s.revision().await.unwrap(), before, "nothing was written");
    }

    #[tokio::test]
    async fn a_watch_replays_then_follows_and_says_when_history_is_gone() {
        let etcd = EtcdServer::start();
        let s = store(&etcd).await;
        let start = s.revision().await.unwrap();
        for i in 0..3 {
            s.create(&Key::cluster("/nodes", &format!("n{i}")), obj("n", i)).await.unwrap();
        }
        s.create(&Key::cluster("/other", "o"), obj("o", 0)).await.unwrap();
        let mut w = s.watch(WatchFilter::resource("/nodes"), start + 1).await.unwrap();
        let replayed: Vec<Event> = (&mut w).take(2).map(|e| e.unwrap()).collect().await;
        assert_eq!(replayed.iter().map(|e| e.key.name.as_str()).collect::<Vec<_>>(), ["n1", "n2"]);
        assert!(replayed.iter().all(|e| e.kind == EventType::Added));
        assert_eq!(revision_of(&replayed[0].object), Some(replayed[0].revision));
        let n1 = Key::cluster("/nodes", "n1");
        let upd = s.update(&n1, obj("n", 10), None).await.unwrap();
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!((ev.kind, ev.revision), (EventType::Modified, revision_of(&upd).unwrap()));
        let del = s.delete(&n1, None).await.unwrap();
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!((ev.kind, ev.revision), (EventType::Deleted, revision_of(&del).unwrap()));
        assert_eq!(ev.object["spec"]["v"], 10, "a deletion's event carries the last state");
        // One object's watch sees that object only.
        let mut one = s
            .watch(
                WatchFilter {
                    name: Some("n2".into()),
                    namespace: Some(String::new()),
                    ..WatchFilter::resource("/nodes")
                },
                start,
            )
            .await
            .unwrap();
        let ev = one.next().await.unwrap().unwrap();
        assert_eq!(ev.key.name, "n2");
        s.update(&Key::cluster("/nodes", "n0"), obj("n", 5), None).await.unwrap();
        let n2 = s.update(&Key::cluster("/nodes", "n2"), obj("n", 5), None).await.unwrap();
        assert_eq!(one.next().await.unwrap().unwrap().revision, revision_of(&n2).unwrap());
        // Compacted: a watch from before is told, as a client is with 410 Gone.
        let head = s.revision().await.unwrap();
        s.compact(head).await.unwrap();
        let mut old = s.watch(WatchFilter::resource("/nodes"), start).await.unwrap();
        match old.next().await {
            Some(Err(StoreError::Gone { requested, oldest })) => {
                assert_eq!(requested, start);
                assert_eq!(oldest, head);
            }
            other => panic!("a watch from compacted history: {other:?}"),
        }
    }

    /// `then` only after all of `first`, each write at a revision of its own.
    #[tokio::test]
    async fn writes_in_order_take_a_revision_each_and_then_waits_for_first() {
        let etcd = EtcdServer::start();
        let s = store(&etcd).await;
        let keys: Vec<Key> = ["a", "b", "c", "d"].iter().map(|n| Key::cluster("/nodes", n)).collect();
        let mut revs = Vec::new();
        for (k, n) in keys.iter().zip(["a", "b", "c", "d"]) {
            revs.push(revision_of(&s.create(k, obj(n, 1)).await.unwrap()).unwrap());
        }
        let write = |i: usize, v: i64, expected: Option<u64>| (keys[i].clone(), obj(&keys[i].name, v), expected);
        // b's condition fails: a (independent of it) is made, c and d are not tried.
        let before = s.revision().await.unwrap();
        let out = s.update_in_order(
            vec![write(0, 2, Some(revs[0])), write(1, 2, Some(revs[0]))],
            vec![write(2, 2, None), write(3, 2, Some(revs[3]))],
        );
        let out = out.await.unwrap();
        assert!(out[0].is_some() && out[1..].iter().all(Option::is_none), "{out:?}");
        assert_eq!(s.revision().await.unwrap(), before + 1, "a's write alone");
        for (i, v) in [(0, 2), (1, 1), (2, 1), (3, 1)] {
            assert_eq!(s.get(&keys[i]).await.unwrap().unwrap()["spec"]["v"], v, "{}", keys[i].name);
        }
        // A missing object in `first` stops `then` the same way.
        let gone = (Key::cluster("/nodes", "gone"), obj("gone", 1), None);
        let out = s.update_in_order(vec![gone], vec![write(2, 3, None)]).await.unwrap();
        assert!(out.iter().all(Option::is_none));
        assert_eq!(s.get(&keys[2]).await.unwrap().unwrap()["spec"]["v"], 1);
        // All made: four revisions, `then`'s after `first`'s; a lost condition in `then` fails
        // that write alone.
        let a = revision_of(&s.get(&keys[0]).await.unwrap().unwrap()).unwrap();
        let out = s
            .update_in_order(
                vec![write(0, 4, Some(a)), write(1, 4, Some(revs[1]))],
                vec![write(2, 4, Some(revs[2])), write(3, 4, Some(revs[3])), write(3, 5, Some(revs[3]))],
            )
            .await
            .unwrap();
        let made: Vec<u64> = out.iter().flatten().map(|o| revision_of(o).unwrap()).collect();
        assert_eq!(made.len(), 4, "d's second write lost to its first: {out:?}");
        assert!(out[3].is_some() != out[4].is_some(), "one of d's two writes");
        let mut distinct = made.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "a revision each: {made:?}");
        assert!(made[..2].iter().max() < made[2..].iter().min(), "`then` after `first`: {made:?}");
        for (i, k) in keys.iter().enumerate() {
            let stored = s.get(k).await.unwrap().unwrap();
            assert!(made.contains(&revision_of(&stored).unwrap()), "{} as written", k.name);
            assert_ne!(stored["spec"]["v"], 1, "{i}");
        }
    }

    #[tokio::test]
    async fn tokens_on_etcd() {
        let etcd = EtcdServer::start();
        let s = store(&etcd).await;
        s.put_token("h1".into(), "ci".into(), "viewer".into(), None).await.unwrap();
        assert_eq!(s.find_token("h1".into()).await.unwrap(), Some(("ci".into(), "viewer".into())));
        // Replaced under its name: the old hash stops working.
        s.put_token("h2".into(), "ci".into(), "admin".into(), None).await.unwrap();
        assert_eq!(s.find_token("h1".into()).await.unwrap(), None);
        assert_eq!(s.token_hash_of("ci".into()).await.unwrap().as_deref(), Some("h2"));
        assert!(s.claim_token("h3".into(), "node:n1".into(), "node:n1".into()).await.unwrap());
        assert!(!s.claim_token("h4".into(), "node:n1".into(), "node:n1".into()).await.unwrap(), "one claim a name");
        assert_eq!(s.find_token("h4".into()).await.unwrap(), None);
        s.put_token("h5".into(), "boot".into(), "bootstrap".into(), Some(Duration::from_secs(3600))).await.unwrap();
        let names: Vec<String> = s.list_tokens().await.unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["boot", "ci", "node:n1"]);
        assert!(!s.delete_token("ci".into(), Some("h1".into())).await.unwrap(), "a stale hash deletes nothing");
        assert!(s.delete_token("ci".into(), Some("h2".into())).await.unwrap());
        assert_eq!(s.find_token("h2".into()).await.unwrap(), None);
        assert!(!s.delete_token("ci".into(), None).await.unwrap());
        let later = chrono::Utc::now() + chrono::Duration::hours(2);
        assert_eq!(s.purge_expired_tokens(chrono::Utc::now()).await.unwrap(), Vec::<String>::new());
        assert_eq!(s.purge_expired_tokens(later).await.unwrap(), ["boot"]);
        let names: Vec<String> = s.list_tokens().await.unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["node:n1"]);
    }

    /// API requests' token lookups share reads (a read-only transaction of many gets, in
    /// several past etcd's 128 operations), and a token another process revoked stops at the
    /// next lookup even while reads are in flight.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_lookups_share_reads_and_see_a_revocation_at_once() {
        let etcd = EtcdServer::start();
        let (s, command) = (store(&etcd).await, store(&etcd).await);
        for i in 0..300 {
            s.put_token(format!("h{i}"), format!("t{i}"), "viewer".into(), None).await.unwrap();
        }
        let mut lookups = Vec::new();
        for i in 0..900 {
            let s = s.clone();
            let hash = if i % 3 == 0 { format!("none{i}") } else { format!("h{}", i % 300) };
            lookups.push(tokio::spawn(async move { (hash.clone(), s.find_token(hash).await) }));
        }
        for l in lookups {
            let (hash, found) = l.await.unwrap();
            let want = hash.strip_prefix('h').map(|n| (format!("t{n}"), "viewer".to_string()));
            assert_eq!(found.unwrap(), want, "{hash}");
        }
        let reads = s.inner.token_reads.reads();
        assert!(reads < 300, "900 concurrent lookups took {reads} reads");

        // Lookups of another token keep reads in flight all along.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy = {
            let (s, stop) = (s.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    assert!(s.find_token("h2".into()).await.unwrap().is_some());
                }
            })
        };
        for i in [5, 6, 7] {
            assert!(s.find_token(format!("h{i}")).await.unwrap().is_some());
            assert!(command.delete_token(format!("t{i}"), None).await.unwrap());
            assert_eq!(s.find_token(format!("h{i}")).await.unwrap(), None, "t{i} revoked by another process");
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        busy.await.unwrap();
    }

    /// One coordinator acts at a time, and one whose key was taken from it cannot write again.
    #[tokio::test]
    async fn one_store_is_active_and_one_that_lost_its_lease_writes_nothing() {
        let etcd = EtcdServer::start();
        let (a, b) = (store(&etcd).await, store(&etcd).await);
        let mut active_a =
            a.become_active("a", Duration::from_secs(10), |_| panic!("nobody else is active")).await.unwrap();
        a.create(&Key::cluster("/nodes", "x"), obj("x", 1)).await.unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                let mut tx = Some(tx);
                b.become_active("b", Duration::from_secs(10), move |holder| {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(holder.to_string());
                    }
                })
                .await
            }
        });
        assert_eq!(rx.await.unwrap(), "a", "b waits, naming the active one");
        assert!(!waiter.is_finished());
        // The key taken from a behind its back (its lease ran out while it was paused).
        let mut raw = Client::connect([etcd.endpoint()], None).await.unwrap();
        raw.delete("/aloft/active", None).await.unwrap();
        let _active_b = tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap().unwrap();
        let before = b.revision().await.unwrap();
        match a.update(&Key::cluster("/nodes", "x"), obj("x", 2), None).await {
            Err(StoreError::Backend(why)) => assert!(why.contains("no longer the active one"), "{why}"),
            other => panic!("a write of the coordinator that lost its key: {other:?}"),
        }
        assert_eq!(b.revision().await.unwrap(), before, "nothing was written");
        tokio::time::timeout(Duration::from_secs(5), active_a.lost()).await.expect("a learns it lost");
        b.update(&Key::cluster("/nodes", "x"), obj("x", 3), None).await.unwrap();
        assert_eq!(b.get(&Key::cluster("/nodes", "x")).await.unwrap().unwrap()["spec"]["v"], 3);
    }

    /// A renewal answered late, but while the lease still held, keeps the coordinator active
    /// (etcd frozen for 1.5 s of a 4 s lease); one that cannot be answered before the lease runs
    /// out loses it, by the lease's own time, even with etcd frozen and answering nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_renewal_keeps_the_lease_and_a_frozen_etcd_loses_it_in_time() {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let etcd = EtcdServer::start();
        let pid = Pid::from_raw(etcd.pid() as i32);
        let a = store(&etcd).await;
        let mut active =
            a.become_active("a", Duration::from_secs(4), |_| panic!("nobody else is active")).await.unwrap();
        for round in 0..3 {
            tokio::time::sleep(Duration::from_millis(300 + 400 * round)).await;
            kill(pid, Signal::SIGSTOP).unwrap();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            kill(pid, Signal::SIGCONT).unwrap();
        }
        assert!(
            tokio::time::timeout(Duration::from_secs(3), active.lost()).await.is_err(),
            "late renewals within the lease lost it"
        );
        a.create(&Key::cluster("/nodes", "x"), obj("x", 1)).await.expect("still active: a fenced write");

        kill(pid, Signal::SIGSTOP).unwrap();
        let frozen = std::time::Instant::now();
        let lost = tokio::time::timeout(Duration::from_secs(8), active.lost()).await;
        let after = frozen.elapsed();
        kill(pid, Signal::SIGCONT).unwrap();
        assert!(lost.is_ok(), "a frozen etcd for 8 s of a 4 s lease did not lose it");
        assert!(after <= Duration::from_millis(4500), "lost {after:?} after etcd froze, past the 4 s lease");
    }

    /// etcd over TLS with client certificates, as a production etcd runs: the store connects
    /// with --etcd-cafile/--etcd-certfile/--etcd-keyfile, and without a client certificate it
    /// is refused with a message naming the endpoint.
    #[tokio::test]
    async fn etcd_over_tls_with_a_client_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::tls::Pki::in_dir(dir.path());
        crate::tls::ensure(&pki, &["127.0.0.1".to_string()]).unwrap();
        let etcd = EtcdServer::start_tls(&pki);
        assert!(etcd.endpoint().starts_with("https://"));
        let mut opts = EtcdOptions::new(vec![etcd.endpoint().to_string()]);
        opts.ca = Some(pki.ca_cert.clone());
        let without = EtcdStore::connect(&opts).await.err().expect("a client without a certificate is refused");
        assert!(without.to_string().contains(etcd.endpoint()), "{without}");
        opts.cert = Some(pki.cert.clone());
        let half = EtcdStore::connect(&opts).await.err().expect("a certificate without its key");
        assert!(half.to_string().contains("needs its key"), "{half}");
        opts.key = Some(pki.key.clone());
        let s = EtcdStore::connect(&opts).await.unwrap();
        let k = Key::cluster("/nodes", "tls");
        s.create(&k, obj("tls", 1)).await.unwrap();
        assert_eq!(s.get(&k).await.unwrap().unwrap()["spec"]["v"], 1);
    }

    /// Bad settings are said, naming what is wrong, before anything is read or written.
    #[tokio::test]
    async fn an_etcd_that_does_not_answer_or_a_bad_prefix_is_an_error_naming_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let nobody = format!("http://127.0.0.1:{port}");
        let err = EtcdStore::connect(&EtcdOptions::new(vec![nobody.clone()])).await.err().expect("nobody answers");
        assert!(err.to_string().contains(&nobody), "{err}");
        let mut opts = EtcdOptions::new(vec![nobody]);
        opts.prefix = "aloft".into();
        let err = EtcdStore::connect(&opts).await.err().expect("a relative prefix");
        assert!(err.to_string().contains("must start with '/'"), "{err}");
        let err = EtcdStore::connect(&EtcdOptions::new(Vec::new())).await.err().expect("no endpoint");
        assert!(err.to_string().contains("no etcd endpoint"), "{err}");
    }

    /// A coordinator that stops hands over at once, not after its lease's time to live: by
    /// resigning, or by dropping its `Active` without (`serve` leaving on an error once
    /// active), on the multi-threaded runtime `serve` runs on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resigning_or_dropped_active_hands_over_at_once() {
        let etcd = EtcdServer::start();
        let stores = [store(&etcd).await, store(&etcd).await, store(&etcd).await];
        let mut active = stores[0].become_active("s0", Duration::from_secs(60), |_| {}).await.unwrap();
        for next in 1..3 {
            let waiting = stores[next].clone();
            let waiter =
                tokio::spawn(async move { waiting.become_active("next", Duration::from_secs(60), |_| {}).await });
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!waiter.is_finished(), "s{next} waits while s{} is active", next - 1);
            if next == 1 {
                active.resign().await;
            } else {
                drop(active);
            }
            let took_over = tokio::time::timeout(Duration::from_secs(5), waiter);
            active = took_over.await.expect("the next took over at once").unwrap().unwrap();
            let late = stores[next - 1].create(&Key::cluster("/nodes", "late"), obj("late", 1)).await;
            assert!(late.is_err(), "s{} writes nothing once it let go", next - 1);
        }
    }
}
