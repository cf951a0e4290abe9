//! `aloft-coordinator serve`: open the data directory, make sure the PKI, the admin token and the
//! client config exist, start the controllers, and serve the API.

use crate::server::{self, Ctx, Limits};
use crate::store::{EtcdStore, SqliteStore, Store, Tokens};
use crate::{auth, controllers, fsutil, tls};
use aloft_client::{install_crypto, ClientConfig};
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

/// Options of `serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub insecure_http: bool,
    /// Use this admin token instead of generating one.
    pub admin_token_file: Option<PathBuf>,
    /// Extra names for the serving certificate.
    pub tls_san: Vec<String>,
    pub limits: Limits,
    /// Revisions of history kept for watches (older resourceVersions get 410 Gone).
    pub watch_history: u64,
    /// How long an Event is kept after it last happened (zero: forever); see
    /// [`controllers::event_ttl`].
    pub event_ttl: std::time::Duration,
    /// Reads the allocator the binary linked, for `/metrics` (`aloft_allocator_bytes`); `None`
    /// leaves those series out.
    pub allocator: Option<crate::process_metrics::AllocatorProbe>,
    /// How long a node's agent may be without a watch open before its Node is marked
    /// Ready=Unknown (zero: never); see [`controllers::presence`].
    pub node_monitor_grace: std::time::Duration,
    /// Issue a new CA although the store has enrolled nodes (whose agents trust the one that
    /// is missing).
    pub new_ca: bool,
    /// Where to serve the FleetLock protocol (`crate::fleetlock`), if anywhere.
    pub fleetlock_listen: Option<SocketAddr>,
    /// How often the ClusterVersion's update graph is fetched again (`--update-poll-interval`).
    pub update_poll: std::time::Duration,
    /// The keys a release must be signed by before it is taken (`--release-keyring`).
    pub release_keyring: Option<std::sync::Arc<crate::release_signature::Keyring>>,
    /// OLM's global catalog namespace (`--olm-global-namespace`), if any.
    pub olm_global_namespace: Option<String>,
    /// Keep the store on etcd instead of the data directory's SQLite file; several coordinators
    /// may share it, one active at a time (see [`crate::store::etcd`]).
    pub etcd: Option<crate::store::EtcdOptions>,
    /// How long the active coordinator's lease in etcd lasts unrenewed.
    pub active_lease_duration: std::time::Duration,
    /// Which build this is (`aloft_api::build_info!()` in the binary), for `/version`,
    /// `/metrics` and the log.
    pub build: aloft_api::build::BuildInfo,
}

/// Files `serve` keeps in the data directory.
pub struct DataDir {
    pub db: PathBuf,
    pub admin_token: PathBuf,
    pub kubeconfig: PathBuf,
}

impl DataDir {
    pub fn new(dir: &std::path::Path) -> Self {
        DataDir {
            db: dir.join("aloft.db"),
            admin_token: dir.join("admin.token"),
            kubeconfig: dir.join("admin.kubeconfig"),
        }
    }
}

/// Read a token file: one line, not empty.
pub fn read_token_file(path: &std::path::Path) -> Result<String> {
    let t = std::fs::read_to_string(path).with_context(|| format!("reading token file {}", path.display()))?;
    let t = t.trim().to_string();
    if t.is_empty() || t.contains(char::is_whitespace) {
        bail!("token file {} must hold one token on one line", path.display());
    }
    Ok(t)
}

/// The data directory's lock, held for as long as `serve` runs: two coordinators on one store
/// would each run the controllers (two node controllers each filling `maxUnavailable`) and each
/// serve from its own cache, so a second one is refused, as etcd refuses a second member on its
/// data directory. An advisory lock (`flock`) on `coordinator.lock`: the kernel drops it when
/// the process ends, however it ends, so a crash leaves nothing to clean up. `token create`
/// does not take it (it works while the coordinator runs).
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    pub fn take(dir: &std::path::Path) -> Result<DataDirLock> {
        use std::io::{Read, Seek, Write};
        let path = dir.join("coordinator.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let by = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
                bail!(
                    "data directory {} is in use by another aloft-coordinator{by}: two coordinators on one \
                     store would both run the controllers; stop it first, or give this one another --data-dir",
                    dir.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        Ok(DataDirLock { _file: file })
    }
}

/// The store a coordinator serves from, and where its tokens are.
pub struct Backend {
    pub store: Arc<dyn Store>,
    pub tokens: Arc<dyn Tokens>,
    /// Set when the store is on etcd: the coordinator must become the active one first.
    pub etcd: Option<EtcdStore>,
}

/// Lock the data directory, open the store (the data directory's, or etcd) and read or make the
/// admin token; returns the store, the token and the lock (held while serving). The admin token
/// is stored by [`keep_admin_token`], once this coordinator may write.
pub async fn prepare(opts: &ServeOptions) -> Result<(Backend, String, DataDirLock)> {
    data_dir_ready(&opts.data_dir)?;
    let lock = DataDirLock::take(&opts.data_dir)?;
    crate::backup::refuse_interrupted_restore(&opts.data_dir)?;
    let files = DataDir::new(&opts.data_dir);
    let backend = match &opts.etcd {
        Some(etcd) => {
            let store = EtcdStore::connect(etcd)
                .await
                .with_context(|| format!("connecting to etcd at {} (--etcd-servers)", etcd.endpoints.join(",")))?;
            Backend { store: Arc::new(store.clone()), tokens: Arc::new(store.clone()), etcd: Some(store) }
        }
        None => {
            let store = SqliteStore::open_with(&files.db, opts.watch_history, &cached_resources())
                .with_context(|| format!("opening store {}", files.db.display()))?;
            Backend { store: Arc::new(store.clone()), tokens: Arc::new(store), etcd: None }
        }
    };
    // Before anything is written: a refused start changes nothing (the admin token of a restored
    // store keeps working).
    if !opts.insecure_http {
        check_ca(&tls::Pki::in_dir(&opts.data_dir), backend.tokens.as_ref(), opts.new_ca).await?;
    }
    let token = match &opts.admin_token_file {
        Some(f) => read_token_file(f)?,
        None if files.admin_token.exists() => read_token_file(&files.admin_token)?,
        None => {
            let t = auth::generate_token();
            fsutil::write_private(&files.admin_token, t.as_bytes())?;
            t
        }
    };
    // Written only when it changed: a start on a full disk then serves reads (and refuses
    // writes, as a running coordinator does) instead of failing on a write of nothing new.
    let pki = tls::Pki::in_dir(&opts.data_dir);
    for secret in [&files.admin_token, &files.kubeconfig, &pki.ca_key, &pki.key] {
        fsutil::keep_private(secret)?;
    }
    if backend.etcd.is_none() {
        keep_admin_token(backend.tokens.as_ref(), &token).await?;
    }
    Ok((backend, token, lock))
}

/// What the SQLite store keeps in memory as well: what a fleet reads on every step of an update
/// (its Node, on every report; the rendered config and the disruption policy it fetches; the
/// pools). MachineConfigs as their text only: large, all kept (every rendered config), and
/// mostly sent on as they are (see `store::sqlite::CachedResource`). The watch cache in front
/// of etcd keeps everything, these MachineConfigs as text too.
fn cached_resources() -> [crate::store::sqlite::CachedResource; 4] {
    use crate::store::sqlite::CachedResource;
    [
        CachedResource::parsed(crate::resources::NODE.store_key()),
        CachedResource::text(crate::resources::MACHINE_CONFIG.store_key()),
        CachedResource::parsed(crate::resources::MACHINE_CONFIG_POOL.store_key()),
        CachedResource::parsed(crate::resources::MACHINE_CONFIGURATION.store_key()),
    ]
}

/// Store the admin token's hash (under the name `admin`) unless it is there already.
pub async fn keep_admin_token(tokens: &dyn Tokens, token: &str) -> Result<()> {
    let hash = auth::token_hash(token);
    if tokens.token_hash_of("admin".into()).await?.as_deref() != Some(hash.as_str()) {
        tokens.put_token(hash, "admin".into(), "admin".into(), None).await?;
    }
    Ok(())
}

/// With the store on etcd: wait until this coordinator is the active one (another may be),
/// then store the admin token and keep etcd's history to `--watch-history` revisions.
async fn become_active(opts: &ServeOptions, etcd: &EtcdStore, token: &str) -> Result<crate::store::etcd::Active> {
    let identity = format!(
        "{} (pid {}, {})",
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "?".into()),
        std::process::id(),
        opts.listen
    );
    // Told to systemd only once another is found active: one that becomes active at once says
    // READY=1 when it serves, and never that it is a standby.
    let mut standby = None;
    let active = etcd
        .become_active(&identity, opts.active_lease_duration, |holder| {
            tracing::info!(
                active = holder,
                etcd = etcd.endpoints(),
                "standby: another coordinator is active; waiting for it to stop"
            );
            println!("standby: {holder} is the active coordinator on etcd; waiting for it to stop");
            standby = Some(crate::notify::standby(etcd.endpoints().to_string()));
        })
        .await
        .with_context(|| format!("becoming the active coordinator on etcd at {}", etcd.endpoints()))?;
    if let Some(s) = standby {
        s.abort();
    }
    tracing::info!(%identity, etcd = etcd.endpoints(), "this coordinator is the active one");
    println!("active: this coordinator ({identity}) holds the store on etcd at {}", etcd.endpoints());
    keep_admin_token(etcd, token).await?;
    let (compactor, keep) = (etcd.clone(), opts.watch_history);
    tokio::spawn(async move {
        // As kube-apiserver compacts etcd: every five minutes, to what the history keeps.
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(300));
        loop {
            tick.tick().await;
            match compactor.revision().await {
                Ok(head) if head > keep => {
                    if let Err(e) = compactor.compact(head - keep).await {
                        tracing::warn!(error = %e, "compacting etcd's history failed; trying again later");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "reading etcd's revision failed"),
            }
        }
    });
    Ok(active)
}

/// Create the data directory when it is missing, private (0700, parents as the umask has them).
/// An existing one keeps its mode: `--data-dir /tmp` by mistake must not take the sticky,
/// world-writable bit off `/tmp`. One others may read gets a warning, as etcd gives.
fn data_dir_ready(dir: &std::path::Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => bail!("data dir {} is not a directory", dir.display()),
        Ok(m) => {
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    data_dir = %dir.display(),
                    "the data dir is accessible to other users (mode {mode:04o}); the recommended mode is 0700 (the store, keys and tokens in it are made 0600 either way)"
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
                .create(dir)
                .with_context(|| format!("creating data dir {}", dir.display()))
        }
        Err(e) => Err(e).with_context(|| format!("reading data dir {}", dir.display())),
    }
}

/// Raise the soft limit on open files to the hard one, as Go raises it for kube-apiserver: every
/// agent holds a connection open (its Node's watch), and systemd starts a service at a soft
/// limit of 1024, at which ~1,000 agents took every descriptor and the coordinator answered
/// nobody, silently. Returns the limit in force.
fn raise_open_files_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some(hard),
        Err(e) => {
            tracing::warn!(soft, hard, error = %e, "could not raise the open files limit; each agent holds one open");
            Some(soft)
        }
    }
}

/// Refuse to issue a new CA for a store whose nodes trust the one that is missing (a restore
/// that left out `ca.crt`/`ca.key`): every agent pins the CA, so a new one cut the whole fleet
/// off, silently. `--new-ca` issues one anyway.
async fn check_ca(pki: &tls::Pki, store: &dyn Tokens, new_ca: bool) -> Result<()> {
    if new_ca || (pki.ca_cert.exists() && pki.ca_key.exists()) {
        return Ok(());
    }
    let nodes = store.list_tokens().await?.iter().filter(|t| t.role.starts_with("node:")).count();
    if nodes == 0 {
        return Ok(());
    }
    bail!(
        "{} or {} is missing, but the store has {nodes} enrolled {}, whose agents trust that CA: \
         restore both files from the backup of this data dir; or pass --new-ca to issue a new CA, \
         and then give every agent the new ca.crt (its --ca file)",
        pki.ca_cert.display(),
        pki.ca_key.display(),
        if nodes == 1 { "node" } else { "nodes" }
    )
}

/// How accepted connections are set up. TCP_NODELAY: small responses must not wait for the
/// client's delayed ACK (40 ms each). TCP keepalive, as Go's servers (kube-apiserver's) have by
/// default: a peer that is gone is found by the kernel on a connection idle in both directions,
/// HTTP/1.1 ones included, which [`ping_idle_connections`] does not reach.
fn tcp_acceptor() -> axum_server::accept::TcpConfigAcceptor {
    use axum_server::accept::{TcpConfigAcceptor, TcpKeepaliveConfig, TcpSocketConfig};
    let keepalive = TcpKeepaliveConfig::new()
        .time(std::time::Duration::from_secs(30))
        .interval(std::time::Duration::from_secs(10))
        .retries(3);
    TcpConfigAcceptor::new(TcpSocketConfig::new().nodelay(true).keepalive(keepalive))
}

/// HTTP/2 pings on a connection the client has sent nothing on for `interval` (zero: none),
/// closed when one is not answered within `timeout`: a host that vanished gives back its
/// watches (and its node's share of [`crate::server::watch::MAX_NODE_WATCHES`]) then, not at
/// each watch's timeout. TCP keepalive alone does not see it while the coordinator has events
/// unacknowledged on the connection.
fn ping_idle_connections(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    (interval, timeout): (std::time::Duration, std::time::Duration),
) {
    if !interval.is_zero() {
        builder.http2().keep_alive_interval(interval).keep_alive_timeout(timeout);
    }
}

/// Run until the process is stopped.
pub async fn run(opts: ServeOptions) -> Result<()> {
    install_crypto();
    // First: a stop that comes while the store opens or right after the address is printed is a
    // stop too, not a kill by the signal's default action.
    let handle = axum_server::Handle::new();
    stop_on_signal(handle.clone());
    if let Some(limit) = raise_open_files_limit() {
        tracing::debug!(limit, "open files limit");
    }
    let (mut backend, token, _lock) = prepare(&opts).await?;
    let active = match backend.etcd.clone() {
        // A standby may wait for days: a stop while it waits ends it at once (the server's
        // graceful stop reaches only a server that listens).
        Some(etcd) => {
            let active = tokio::select! {
                a = become_active(&opts, &etcd, &token) => a?,
                why = stop_requested() => {
                    tracing::info!(signal = why, "stopping while a standby");
                    crate::notify::stopping(why);
                    return Ok(());
                }
            };
            // Read only once active: what a standby read would be stale by the time it served.
            let window =
                crate::store::watch_cache::WindowLimits { revisions: opts.watch_history, ..Default::default() };
            let cache = crate::store::WatchCache::start_with(etcd, &cached_resources(), window)
                .await
                .context("reading the store from etcd into the coordinator's watch cache")?;
            backend.store = Arc::new(cache.clone());
            Some((active, cache))
        }
        None => None,
    };
    let files = DataDir::new(&opts.data_dir);
    let listener = std::net::TcpListener::bind(opts.listen).with_context(|| format!("binding {}", opts.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let host = match addr.ip() {
        ip if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let pki = tls::Pki::in_dir(&opts.data_dir);
    let scheme = if opts.insecure_http { "http" } else { "https" };
    let mut client =
        ClientConfig { server: format!("{scheme}://{host}:{}", addr.port()), ca_pem: None, token: Some(token) };
    // Loaded before anything says "listening": scripts wait for that line.
    let mut serving = None;
    if !opts.insecure_http {
        let host = if addr.ip().is_unspecified() { host_names() } else { Vec::new() };
        let names = serving_names(addr.ip(), &host, &opts.tls_san);
        tls::ensure(&pki, &names)?;
        serving = Some(load_serving(&pki, &names).await?);
        client.ca_pem =
            Some(std::fs::read(&pki.ca_cert).with_context(|| format!("reading {}", pki.ca_cert.display()))?);
    }
    let kubeconfig = client.to_kubeconfig();
    if std::fs::read(&files.kubeconfig).ok().as_deref() != Some(kubeconfig.as_bytes()) {
        fsutil::write_private(&files.kubeconfig, kubeconfig.as_bytes())?;
    }

    let (store, token_store) = (backend.store, backend.tokens);
    let health = Arc::new(crate::health::Health::default());
    let presence = Arc::new(controllers::presence::Presence::default());
    let ctx = Arc::new(Ctx {
        store: store.clone(),
        token_store,
        events: controllers::events::Recorder::new("aloft-coordinator", store.clone(), opts.event_ttl),
        limits: opts.limits.clone(),
        pages: Default::default(),
        health: health.clone(),
        requests: Default::default(),
        allocator: opts.allocator,
        presence: presence.clone(),
        build: opts.build.clone(),
        enrolling: Default::default(),
        inflight: server::inflight::Inflight::new(
            opts.limits.max_requests_inflight,
            opts.limits.max_mutating_requests_inflight,
        ),
        global_catalog_namespace: opts.olm_global_namespace.clone(),
        ca_pem: client.ca_pem.as_deref().map(|p| String::from_utf8_lossy(p).into_owned()),
        first_boot: Default::default(),
    });
    controllers::spawn_all(store.clone(), health.clone(), opts.event_ttl).context("starting the controllers")?;
    let (ttl_store, ttl) = (store.clone(), opts.event_ttl);
    tokio::spawn(controllers::supervise("event-ttl", health.clone(), move || {
        controllers::event_ttl::run(ttl_store.clone(), ttl)
    }));
    let cleaner_store = ctx.token_store.clone();
    tokio::spawn(controllers::supervise("token-cleaner", health.clone(), move || {
        controllers::token_cleaner::run(cleaner_store.clone())
    }));
    let (presence_store, grace) = (store.clone(), opts.node_monitor_grace);
    tokio::spawn(controllers::supervise("node-lifecycle", health.clone(), move || {
        controllers::presence::run(presence_store.clone(), presence.clone(), grace)
    }));
    // On this runtime, not the rollout controllers' thread: a slow update service must not
    // delay a pick.
    let (cv_store, cv_events, cv_passes) = (
        store.clone(),
        controllers::events::Recorder::new(controllers::cluster_version::COMPONENT, store.clone(), opts.event_ttl),
        health.passes().of("cluster-version"),
    );
    let cv_opts = controllers::cluster_version::Options {
        poll: opts.update_poll,
        keyring: opts.release_keyring.clone(),
        ..Default::default()
    };
    tokio::spawn(controllers::supervise("cluster-version", health.clone(), move || {
        controllers::cluster_version::run(cv_store.clone(), cv_events.clone(), cv_opts.clone(), cv_passes.clone())
    }));
    // OLM on this runtime too: reading a catalog (up to hundreds of MB) must not delay a pick.
    let (olm_store, olm_events, olm_passes) = (
        store.clone(),
        controllers::events::Recorder::new(controllers::olm::COMPONENT, store.clone(), opts.event_ttl),
        health.passes().of("olm"),
    );
    let olm_global = opts.olm_global_namespace.clone();
    tokio::spawn(controllers::supervise("olm", health.clone(), move || {
        controllers::olm::run(olm_store.clone(), olm_events.clone(), olm_passes.clone(), olm_global.clone())
    }));
    if let Some(at) = opts.fleetlock_listen {
        // Bound before anything says "listening", as the API's listener is.
        let listener =
            tokio::net::TcpListener::bind(at).await.with_context(|| format!("binding {at} (--fleetlock-listen)"))?;
        let bound = listener.local_addr()?;
        let app = crate::fleetlock::router(store.clone(), ctx.events.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the FleetLock listener stopped");
            }
        });
        tracing::info!(%bound, "serving FleetLock (Zincati's fleet_lock strategy)");
        println!("FleetLock listening on http://{bound} (Zincati: [updates.fleet_lock] base_url)");
    }
    let app = server::router(ctx).into_make_service();
    let serving_store = store.clone();
    tracing::info!(%addr, scheme, data_dir = %opts.data_dir.display(), version = %opts.build.long_version(),
        "aloft-coordinator serving");
    println!("aloft-coordinator listening on {}", client.server);
    // kubectl sends no token over plain HTTP: with --insecure-http only aloftctl gets in.
    let clients = if opts.insecure_http {
        "aloftctl --kubeconfig FILE"
    } else {
        "aloftctl --kubeconfig FILE, or kubectl --kubeconfig FILE"
    };
    println!("client config: {} ({clients})", files.kubeconfig.display());
    let tcp = tcp_acceptor();
    let pings = (opts.limits.ping_interval, opts.limits.ping_timeout);
    // The listener is bound (connections queue from here on), so systemd may start what waits
    // for the coordinator once the serving certificate has loaded.
    let ready = crate::notify::serving(client.server.clone(), health, serving_store);
    let serve = async move {
        match serving {
            None => {
                ready.await;
                let mut server = axum_server::from_tcp(listener)?.acceptor(tcp).handle(handle);
                ping_idle_connections(server.http_builder(), pings);
                server.serve(app).await?;
            }
            Some(cfg) => {
                let tls = axum_server::tls_rustls::RustlsAcceptor::new(cfg).acceptor(tcp);
                ready.await;
                let mut server = axum_server::from_tcp(listener)?.acceptor(tls).handle(handle);
                ping_idle_connections(server.http_builder(), pings);
                server.serve(app).await?;
            }
        }
        anyhow::Ok(())
    };
    match active {
        None => serve.await?,
        Some((mut active, cache)) => {
            let mut cache_failed = None;
            let lost = tokio::select! {
                r = serve => { r?; false }
                _ = active.lost() => true,
                why = cache.failed() => {
                    cache_failed = Some(why);
                    false
                }
            };
            if let Some(why) = cache_failed {
                crate::notify::stopping("the watch cache lost track of etcd");
                // A standby takes over now: this one serves nothing more.
                active.resign().await;
                bail!(
                    "the coordinator's watch cache stopped following etcd ({why}); it stops here, and reads \
                     everything from etcd again when started again"
                );
            }
            if lost {
                crate::notify::stopping("lost the active lease in etcd");
                bail!(
                    "this coordinator is no longer the active one: its lease in etcd could not be renewed within \
                     --active-lease-duration (etcd unreachable, or this process paused), so a standby may have \
                     taken over; it stops here (nothing more is written), and waits as a standby when started again"
                );
            }
            // Stopped normally: a standby takes over now, not after the lease runs out.
            active.resign().await;
        }
    }
    tracing::info!("aloft-coordinator stopped");
    Ok(())
}

/// How long a stop waits for the requests in flight (an agent's report, a `kubectl apply`) before
/// the connections left (watches, which never end by themselves) are closed.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// On SIGTERM (`systemctl stop`) or SIGINT: stop accepting, let the requests in flight finish,
/// then close the rest, and say so (log and systemd). Without it, a stop cut requests at any
/// point and left no trace of why the coordinator went away. Watchers see their stream end and
/// re-list from the next coordinator, as client-go does. The handlers are in place when this
/// returns; the wait is a task of its own.
fn stop_on_signal(handle: axum_server::Handle<std::net::SocketAddr>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::warn!("cannot catch SIGTERM/SIGINT: a stop will not wait for the requests in flight");
        return;
    };
    tokio::spawn(async move {
        let why = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        // A stop asked for before the server serves (the store still opening) is carried out
        // once it does: the handle's shutdown reaches only a running server.
        let _ = handle.listening().await;
        stop(&handle, why);
    });
}

/// Returns at SIGTERM or SIGINT (never, if they cannot be caught).
async fn stop_requested() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

fn stop(handle: &axum_server::Handle<std::net::SocketAddr>, why: &str) {
    tracing::info!(
        signal = why,
        grace_s = SHUTDOWN_GRACE.as_secs(),
        "stopping: finishing the requests in flight, then closing every connection"
    );
    crate::notify::stopping(why);
    handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
}

/// The serving certificate and key, ready for rustls. One that cannot be loaded (a corrupt or
/// truncated file, a key of another certificate) is issued again from the CA, as a change of the
/// names is: clients pin the CA, not the serving certificate, so nothing else has to change.
async fn load_serving(pki: &tls::Pki, names: &[String]) -> Result<axum_server::tls_rustls::RustlsConfig> {
    use axum_server::tls_rustls::RustlsConfig;
    match RustlsConfig::from_pem_file(&pki.cert, &pki.key).await {
        Ok(cfg) => Ok(cfg),
        Err(e) => {
            tracing::warn!(cert = %pki.cert.display(), key = %pki.key.display(), error = %e,
                "the serving certificate cannot be loaded: issuing a new one from the CA");
            std::fs::remove_file(&pki.cert).with_context(|| format!("removing {}", pki.cert.display()))?;
            tls::ensure(pki, names)?;
            RustlsConfig::from_pem_file(&pki.cert, &pki.key).await.with_context(|| {
                format!("loading the serving certificate {} and key {}", pki.cert.display(), pki.key.display())
            })
        }
    }
}

/// The names the serving certificate is valid for: loopback, the address listened on, and with
/// an unspecified one (`0.0.0.0`, `::`) the host's name and addresses (`host`), as kubeadm puts
/// the node's name and address in the API server's certificate: agents on other hosts reach the
/// coordinator by those without anyone knowing `--tls-san`. Then `--tls-san`; each name once.
fn serving_names(listen: std::net::IpAddr, host: &[String], tls_san: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if !listen.is_unspecified() {
        names.push(listen.to_string());
    }
    names.extend(host.iter().cloned());
    names.extend(tls_san.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// This host's name (when it is a valid DNS name) and the addresses of its interfaces, leaving
/// out link-local IPv6 ones (they need a zone, which no URL to the coordinator carries). What
/// cannot be read is left out: the certificate then has the loopback names and `--tls-san`.
fn host_names() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(h) = nix::unistd::gethostname() {
        if let Some(h) = h.to_str().filter(|h| is_dns_name(h)) {
            names.push(h.to_string());
        }
    }
    match nix::ifaddrs::getifaddrs() {
        Ok(addrs) => {
            for a in addrs {
                let Some(sa) = a.address else { continue };
                if let Some(v4) = sa.as_sockaddr_in() {
                    names.push(v4.ip().to_string());
                } else if let Some(v6) = sa.as_sockaddr_in6() {
                    let ip = v6.ip();
                    if (ip.segments()[0] & 0xffc0) != 0xfe80 {
                        names.push(ip.to_string());
                    }
                }
            }
        }
        Err(e) => tracing::warn!("cannot list this host's addresses for the serving certificate: {e}"),
    }
    names
}

/// Whether `s` is a host name a certificate can carry (letters, digits, `-`, dots between).
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

#[cfg(test)]
mod serving_names_tests {
    use super::*;

    #[test]
    fn each_name_once_and_the_hosts_names_only_on_an_unspecified_address() {
        let lo: std::net::IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
        let names = serving_names(lo, &[], &["127.0.0.1".into(), "coord.example".into(), "coord.example".into()]);
        assert_eq!(names, ["localhost", "127.0.0.1", "::1", "coord.example"]);
        let any: std::net::IpAddr = std::net::Ipv4Addr::UNSPECIFIED.into();
        let names =
            serving_names(any, &["node1".into(), "192.0.2.7".into(), "127.0.0.1".into()], &["lb.example".into()]);
        assert_eq!(names, ["localhost", "127.0.0.1", "::1", "node1", "192.0.2.7", "lb.example"]);
    }

    #[test]
    fn the_hosts_names_are_its_name_and_its_addresses() {
        let names = host_names();
        let host = nix::unistd::gethostname().expect("hostname");
        let host = host.to_str().expect("utf-8 hostname");
        if is_dns_name(host) {
            assert!(names.iter().any(|n| n == host), "{host} in {names:?}");
        }
        assert!(names.iter().any(|n| n == "127.0.0.1"), "the loopback interface's address: {names:?}");
        assert!(names.iter().all(|n| !n.starts_with("fe80")), "no link-local address: {names:?}");
    }

    #[test]
    fn host_names_a_certificate_cannot_carry_are_left_out() {
        assert!(is_dns_name("worker-0.example.com"));
        for bad in ["", "under_score", "-lead", "trail-", "a..b", &"x".repeat(64)] {
            assert!(!is_dns_name(bad), "{bad:?}");
        }
    }
}
