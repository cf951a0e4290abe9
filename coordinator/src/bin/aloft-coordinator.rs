//! aloft-coordinator: the API server and controllers of an aloft fleet.

use aloft_coordinator::serve::{self, ServeOptions};
use aloft_coordinator::server::Limits;
use aloft_coordinator::{auth, store::SqliteStore};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// jemalloc instead of glibc's malloc: serving a fleet is allocation-heavy (JSON objects per
/// request and per watch event), and glibc's malloc and free were a fifth of the coordinator's
/// CPU in a 1,000-node rollout; jemalloc cut the CPU by about a quarter at the same peak RSS
/// (mimalloc did as well on CPU, at +55 MiB of RSS). docs/rollout-bench-history.md has the runs.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's own counts for `/metrics` (`aloft_allocator_bytes`): what the program holds against
/// what the allocator keeps. The counts are a snapshot jemalloc refreshes when its epoch advances.
fn jemalloc_stats() -> Option<aloft_coordinator::process_metrics::AllocatorStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    Some(aloft_coordinator::process_metrics::AllocatorStats {
        allocated: stats::allocated::read().ok()? as u64,
        active: stats::active::read().ok()? as u64,
        resident: stats::resident::read().ok()? as u64,
        mapped: stats::mapped::read().ok()? as u64,
        retained: stats::retained::read().ok()? as u64,
        metadata: stats::metadata::read().ok()? as u64,
    })
}

/// The coordinator of an aloft fleet: a Kubernetes-style API (MachineConfig, MachineConfigPool,
/// Node, ...) on an embedded SQLite store, and the controllers that render configs per pool.
#[derive(Parser)]
#[command(version = aloft_api::long_version!(), about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once at start: `serve`'s many flags make its variant large, which costs nothing here.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Serve the API and run the controllers.
    ///
    /// On first start the data directory gets a CA and a serving certificate (unless
    /// --insecure-http), an admin token (admin.token, 0600) and a client config
    /// (admin.kubeconfig) that both aloftctl and kubectl read:
    ///
    ///   aloftctl --kubeconfig DIR/admin.kubeconfig get mcp
    ///   kubectl --kubeconfig DIR/admin.kubeconfig get mcp
    ///
    /// Back it up with `aloft-coordinator backup` (while it runs); every agent pins the CA, which
    /// a backup keeps.
    ///
    /// Logs go to stderr; ALOFT_LOG sets what is logged (RUST_LOG syntax: info, debug,
    /// aloft_coordinator=debug,info; default info).
    #[command(verbatim_doc_comment)]
    Serve {
        /// Where the store (aloft.db), the PKI and the tokens live.
        #[arg(long, env = "ALOFT_DATA_DIR", default_value = "/var/lib/aloft-coordinator")]
        data_dir: PathBuf,
        /// Address to listen on; port 0 picks a free port (printed, and written to the client config).
        #[arg(long, env = "ALOFT_LISTEN", default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Serve plain HTTP (local use and tests only: tokens travel in clear text; kubectl
        /// never sends a token over plain HTTP, so only aloftctl can use such a coordinator).
        #[arg(long)]
        insecure_http: bool,
        /// Issue a new CA when ca.crt or ca.key is missing although nodes have enrolled (a
        /// restore without them); every agent then needs the new ca.crt. Without it, serve
        /// refuses to start in that case.
        #[arg(long)]
        new_ca: bool,
        /// Also serve the FleetLock protocol (Zincati's fleet_lock strategy, as airlock) on this
        /// address, in plain HTTP without credentials (Zincati sends none): hosts of a group
        /// take and give back reboot slots of the FleetLock object named as their group. Off by
        /// default; bind it to the hosts' own network. Example: 0.0.0.0:3333.
        #[arg(long, value_name = "ADDR")]
        fleetlock_listen: Option<std::net::SocketAddr>,
        /// How often the update graph of the ClusterVersion's spec.upstream and spec.channel is
        /// fetched again while they stay the same (the CVO polls every 2-4 minutes). A change of
        /// either, or of the current release, fetches at once; a failed fetch is tried again
        /// within 30 s.
        #[arg(long, default_value = "3m", value_parser = humantime::parse_duration, value_name = "DURATION")]
        update_poll_interval: std::time::Duration,
        /// OpenPGP public keys (binary, as `gpg --export` writes them, or ASCII-armored) that a
        /// release's OS commit must be signed by before the ClusterVersion takes it, as the CVO
        /// verifies a payload: the coordinator fetches the commit and its detached signatures
        /// from the release's repository and one must be by a key here; otherwise the release
        /// is refused (ReleaseAccepted=False, reason RetrievePayload) unless
        /// spec.desiredUpdate.force is set. Give the keyring the nodes trust
        /// (/usr/share/ostree/trusted.gpg.d/aloft.gpg in aloft's images); the coordinator must
        /// reach the release's repository at the URL its payload names. Without it releases are
        /// taken unverified (history verified: false); each agent still verifies the commit
        /// before it deploys it. Expired keys and signatures do not count, as for libostree.
        #[arg(long, env = "ALOFT_RELEASE_KEYRING", value_name = "FILE")]
        release_keyring: Option<std::path::PathBuf>,
        /// OLM's global catalog namespace: its CatalogSources serve every namespace. A bundle's
        /// dependencies are looked for in its catalogs too (after the Subscription's own catalog
        /// and, at equal priority, after the catalogs of the Subscription's namespace), as OLM's
        /// resolver does. OLM's own default is olm; OpenShift's is openshift-marketplace. An
        /// empty value turns it off (a dependency is then looked for in the Subscription's
        /// namespace and its catalog's only).
        #[arg(
            long,
            default_value = aloft_coordinator::controllers::olm::DEFAULT_GLOBAL_NAMESPACE,
            value_name = "NAMESPACE",
            value_parser = parse_global_namespace
        )]
        olm_global_namespace: GlobalNamespace,
        /// Use the admin token in this file instead of generating one.
        #[arg(long)]
        admin_token_file: Option<PathBuf>,
        /// Extra DNS names or IPs for the serving certificate (repeatable).
        #[arg(long = "tls-san")]
        tls_san: Vec<String>,
        /// Largest request body in bytes.
        #[arg(long, default_value_t = 3 * 1024 * 1024)]
        max_body_bytes: usize,
        /// Reads (get, list) served at once; one more is answered 429 with Retry-After: 1 and
        /// its client sends it again, as kube-apiserver's flag. Watches are not counted, and an
        /// admin's request is always served. 0 is no limit. /metrics shows the most in flight
        /// (aloft_apiserver_inflight_requests_high_water) to size it against.
        #[arg(long, default_value_t = aloft_coordinator::server::inflight::DEFAULT_READ_ONLY)]
        max_requests_inflight: usize,
        /// Writes (create, update, patch, delete, enrollment) served at once; as
        /// --max-requests-inflight, for writes.
        #[arg(long, default_value_t = aloft_coordinator::server::inflight::DEFAULT_MUTATING)]
        max_mutating_requests_inflight: usize,
        /// How long an HTTP/2 connection may send nothing before the coordinator pings it; a
        /// ping not answered within --http2-ping-timeout closes the connection, and so ends the
        /// watches of a host that vanished without closing it (powered off, cut off the
        /// network) instead of at their timeout. client-go pings from its side on the same
        /// figures. 0 sends no pings.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
        http2_ping_interval: std::time::Duration,
        /// How long an HTTP/2 ping of --http2-ping-interval may go unanswered.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, value_name = "DURATION")]
        http2_ping_timeout: std::time::Duration,
        /// Revisions of history kept for watches; a client resuming from an older
        /// resourceVersion gets 410 Gone and re-lists.
        #[arg(long, default_value_t = aloft_coordinator::store::sqlite::DEFAULT_RETAIN)]
        watch_history: u64,
        /// How long an Event is kept after it last happened, as kube-apiserver's --event-ttl
        /// (e.g. 1h, 30m, 2h30m); 0 keeps Events forever.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        event_ttl: std::time::Duration,
        /// How long a node's agent may be without a connection (its watch of its own Node)
        /// before the Node's Ready condition turns Unknown (reason NodeStatusUnknown) and the
        /// node is no longer picked; as kube-controller-manager's flag. 0 turns it off.
        #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
        node_monitor_grace_period: std::time::Duration,
        #[command(flatten)]
        etcd: EtcdArgs,
        /// With --etcd-servers: how long the active coordinator's lease in etcd lasts without
        /// being renewed (it is renewed every third of it). A standby takes over this long at
        /// most after the active one stopped answering etcd; one that stops normally hands over
        /// at once. The active one stops when no renewal is answered within it: keep it well
        /// above the longest an etcd under load takes to answer (seconds, for one taking
        /// 10,000 agents' writes on the coordinator's own two cores). As
        /// kube-controller-manager's --leader-elect-lease-duration.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, value_name = "DURATION")]
        active_lease_duration: std::time::Duration,
    },
    /// Copy the data directory while the coordinator serves, for `restore`.
    ///
    /// Into a new or empty directory: the store and the tokens as one consistent copy each (no
    /// sqlite3 tool needed), the CA, the admin token and client config, the serving
    /// certificate. The copy holds every secret the data directory does (made 0700, its secrets
    /// 0600): keep it as you keep the CA key.
    ///
    ///   aloft-coordinator backup --data-dir /var/lib/aloft-coordinator /root/aloft-backup-$(date +%F)
    ///
    /// With the store on etcd (--etcd-servers), this copies the CA, the admin token and the certificates; take
    /// `etcdctl snapshot save` of the store as well.
    #[command(verbatim_doc_comment)]
    Backup {
        #[arg(long, env = "ALOFT_DATA_DIR", default_value = "/var/lib/aloft-coordinator")]
        data_dir: PathBuf,
        /// Where the copy goes: a directory that does not exist yet, or an empty one.
        to: PathBuf,
    },
    /// Put a backup back into the data directory of a stopped coordinator.
    ///
    /// Refused while one serves from it. The backup is checked before anything is changed
    /// (its databases whole, the store with its tokens, the CA certificate with its key); the
    /// files it replaces are moved into DATA_DIR/pre-restore-<time>/, not deleted. Then start `serve` again: agents that had seen newer revisions are told so,
    /// read their Node afresh and carry on.
    ///
    ///   systemctl stop aloft-coordinator
    ///   aloft-coordinator restore --data-dir /var/lib/aloft-coordinator /root/aloft-backup-2026-12-07
    ///   systemctl start aloft-coordinator
    #[command(verbatim_doc_comment)]
    Restore {
        #[arg(long, env = "ALOFT_DATA_DIR", default_value = "/var/lib/aloft-coordinator")]
        data_dir: PathBuf,
        /// The directory `aloft-coordinator backup` wrote.
        from: PathBuf,
    },
    /// Serve an update graph, as OpenShift's update service (OSUS) does, from a graph-data
    /// directory in OpenShift's schema (cincinnati-graph-data) and aloft's release files.
    ///
    /// GRAPH_DATA holds `version` (the schema, 1.x), `channels/*.yaml` (`name`, `versions`),
    /// optionally `blocked-edges/*.yaml` (`to`, `from` regex; with `url`, `name`, `message` and
    /// `matchingRules` the update is served as a conditional one with that risk, without them it
    /// is dropped) and `raw/metadata.json`; RELEASES (default GRAPH_DATA/releases) holds one file
    /// per release, JSON or YAML, in subdirectories too:
    ///
    ///   version: 1.1.0
    ///   payload: ostree+http://repo.example/os#aloft/stable/x86_64@<checksum>
    ///   architecture: amd64                    # Go's name; the default
    ///   previous: [1.0.0]                      # releases that update to this one
    ///   metadata: {url: https://notes.example/1.1.0}
    ///
    /// Point a ClusterVersion at it (spec.upstream: http://HOST:8080/api/upgrades_info/v1/graph,
    /// spec.channel: a channel's name). The inputs are read again every --refresh-interval and on
    /// SIGHUP; a reload that fails is logged and the graphs that loaded last stay served.
    /// `GET /api/upgrades_info/v1/channels?arch=amd64` lists the channels that offer releases.
    ///
    ///   aloft-coordinator update-service --graph-data /srv/graph-data --check
    ///   aloft-coordinator update-service --graph-data /srv/graph-data --listen 0.0.0.0:8080
    #[command(verbatim_doc_comment)]
    UpdateService {
        /// The graph-data directory (cincinnati-graph-data's layout).
        #[arg(long, env = "ALOFT_GRAPH_DATA", value_name = "DIR")]
        graph_data: PathBuf,
        /// The release files (default: GRAPH_DATA/releases).
        #[arg(long, env = "ALOFT_RELEASES", value_name = "DIR")]
        releases: Option<PathBuf>,
        /// Address to listen on.
        #[arg(long, env = "ALOFT_UPDATE_SERVICE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// How often the inputs are read again (OpenShift's update service: 5 minutes).
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, value_name = "DURATION")]
        refresh_interval: std::time::Duration,
        /// Serve HTTPS with this PEM certificate chain (with --tls-key-file).
        #[arg(long, value_name = "FILE", requires = "tls_key_file")]
        tls_cert_file: Option<PathBuf>,
        /// The PEM private key of --tls-cert-file.
        #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
        tls_key_file: Option<PathBuf>,
        /// Where to serve Prometheus metrics (`/metrics`, plain HTTP, under OpenShift's update
        /// service's names: cincinnati_gb_*, cincinnati_pe_*); `off` serves none.
        #[arg(long, default_value = "127.0.0.1:9081", value_parser = parse_metrics_listen, value_name = "ADDR|off")]
        metrics_listen: MetricsListen,
        /// Read and build the graphs, print what they hold (each channel's releases per
        /// architecture) and exit: non-zero, naming the file and field, when they do not load.
        #[arg(long)]
        check: bool,
    },
    /// Benchmarks (not tests): each prints figures with a baseline measured in the same run.
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
    /// Check and render file-based operator catalogs (what a CatalogSource reads), as `opm
    /// validate` and `opm render` do.
    Catalog {
        #[command(subcommand)]
        cmd: CatalogCmd,
    },
    /// Manage API tokens (works while the coordinator runs).
    Token {
        #[command(subcommand)]
        cmd: TokenCmd,
    },
}

/// Where the store lives when it is not the data directory's SQLite file: an etcd cluster, as
/// kube-apiserver's flags of the same names say. Several coordinators may share one etcd: one
/// is active, the others wait as standbys and take over when it stops.
#[derive(clap::Args, Debug, Clone)]
struct EtcdArgs {
    /// etcd members to keep the store on instead of the data directory's aloft.db, comma
    /// separated (e.g. https://10.0.0.1:2379,https://10.0.0.2:2379). The data directory still
    /// holds the PKI, the admin token and its client config: give every coordinator on one etcd
    /// the same ca.crt, ca.key and admin.token.
    #[arg(long, env = "ALOFT_ETCD_SERVERS", value_delimiter = ',', value_name = "URL,...")]
    etcd_servers: Vec<String>,
    /// The prefix of every key aloft writes in etcd.
    #[arg(long, default_value = "/aloft", value_name = "PREFIX")]
    etcd_prefix: String,
    /// The CA that signed the etcd members' certificates (PEM).
    #[arg(long, value_name = "FILE")]
    etcd_cafile: Option<PathBuf>,
    /// This client's certificate for etcd (PEM), with --etcd-keyfile.
    #[arg(long, value_name = "FILE")]
    etcd_certfile: Option<PathBuf>,
    /// The key of --etcd-certfile (PEM).
    #[arg(long, value_name = "FILE")]
    etcd_keyfile: Option<PathBuf>,
}

impl EtcdArgs {
    /// Refuses etcd settings given without `--etcd-servers`: they would be silently unused, and
    /// the store would be the data directory's instead of the etcd the user meant.
    fn check(&self) -> Result<()> {
        if self.etcd_servers.is_empty() {
            let stray: Vec<&str> = [
                (self.etcd_prefix != "/aloft", "--etcd-prefix"),
                (self.etcd_cafile.is_some(), "--etcd-cafile"),
                (self.etcd_certfile.is_some(), "--etcd-certfile"),
                (self.etcd_keyfile.is_some(), "--etcd-keyfile"),
            ]
            .into_iter()
            .filter_map(|(given, flag)| given.then_some(flag))
            .collect();
            if !stray.is_empty() {
                anyhow::bail!("{} given without --etcd-servers: name the etcd members to use", stray.join(", "));
            }
        }
        Ok(())
    }

    fn options(&self) -> Option<aloft_coordinator::store::EtcdOptions> {
        if self.etcd_servers.is_empty() {
            return None;
        }
        Some(aloft_coordinator::store::EtcdOptions {
            endpoints: self.etcd_servers.clone(),
            prefix: self.etcd_prefix.clone(),
            ca: self.etcd_cafile.clone(),
            cert: self.etcd_certfile.clone(),
            key: self.etcd_keyfile.clone(),
        })
    }
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Load a coordinator (temp data dir, HTTPS on loopback) with nodes and MachineConfigs, then
    /// measure get / list / watch-delivery latency and the render time of the pool.
    Api {
        /// Nodes created in the coordinator before the timings.
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// MachineConfigs of the worker pool (the render time grows with them).
        #[arg(long, default_value_t = 100)]
        configs: usize,
        /// Requests per latency figure.
        #[arg(long, default_value_t = 2000)]
        samples: usize,
        /// Concurrent clients while loading.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// Time one Event TTL sweep over a store file holding many Events (none expired), against
    /// reading and aging every Event, on the same file.
    EventTtl {
        #[arg(long, default_value_t = 50_000)]
        events: usize,
        /// Sweeps of each kind timed.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Time what the ClusterVersion controller does with an update graph (a file as an update
    /// service serves it, e.g. shared/testdata/cincinnati-graphs/stable-4.7_amd64_v1.json):
    /// read it, and work out the updates from every release in it; against reading the same
    /// bytes as untyped JSON.
    UpdateGraph {
        /// The graph's JSON file.
        graph: PathBuf,
        /// Times each step is timed.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
    /// Time the OLM controller's resolution of a new Subscription of every package of a catalog
    /// (a file-based catalog's directory or file, e.g.
    /// shared/testdata/fbc-community-operators/v4.20), and the most one resolution can be made
    /// to do (64 entries tried, each scanning every bundle with a CEL rule); against decoding
    /// the same catalog.
    Olm {
        /// The catalog: a directory of FBC files, or one file.
        catalog: PathBuf,
        /// Times each step is timed.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
}

#[derive(Subcommand)]
enum CatalogCmd {
    /// Check a catalog (a directory of .json/.yaml files, or one file) as `opm validate` does;
    /// prints every problem and exits 1 if there is any, else prints what it holds.
    ///
    ///   aloft-coordinator catalog validate ./catalog
    #[command(verbatim_doc_comment)]
    Validate {
        /// The catalog directory or file.
        path: PathBuf,
    },
    /// Print a catalog as one JSON stream (one blob per line, as `opm render -o json`), the
    /// form a CatalogSource's address serves; refuses a catalog that does not validate.
    ///
    ///   aloft-coordinator catalog render ./catalog > /srv/www/catalogs/fleet.json
    #[command(verbatim_doc_comment)]
    Render {
        /// The catalog directory or file.
        path: PathBuf,
    },
}

#[derive(Subcommand)]
enum TokenCmd {
    /// Create (or replace) a named token and print it. Roles: admin, viewer (read-only),
    /// bootstrap (may only enroll nodes: give it to new hosts).
    Create {
        #[arg(long, env = "ALOFT_DATA_DIR", default_value = "/var/lib/aloft-coordinator")]
        data_dir: PathBuf,
        #[command(flatten)]
        etcd: EtcdArgs,
        /// A name for the token's holder; creating the same name again replaces its token.
        /// Letters, digits and `-_.:@`. Reserved (in any case): `admin` (the token `serve` writes
        /// to admin.token), `node:*` (enrolled nodes' credentials) and `system:*`.
        #[arg(long)]
        name: String,
        /// admin (everything), viewer (read-only) or bootstrap (may only enroll nodes). A node's
        /// own credential comes from enrolling, not from here.
        #[arg(long, default_value = "viewer")]
        role: String,
        /// With --role bootstrap: the labels of Kubernetes' own namespaces (kubernetes.io,
        /// k8s.io) the nodes it enrolls may carry, as key=value pairs (key= for an empty value),
        /// e.g. `node-role.kubernetes.io/infra=`. They choose a node's pool, and so the configs
        /// and secrets it can read. Without it, only `node-role.kubernetes.io/worker=`. Other
        /// labels, and the ones a host says of itself (zone, region, hostname, OS,
        /// architecture, instance type), are always allowed.
        #[arg(long, value_name = "KEY=VALUE,...")]
        labels: Option<String>,
        /// Stop working this long from now (`24h`, `30m`, `7days`); `0` for never. A bootstrap
        /// token handed to hosts being installed need not enroll nodes for good: as kubeadm's,
        /// one expires after 24 h unless told otherwise. Admin and viewer tokens work until
        /// revoked unless given a --ttl.
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        ttl: Option<std::time::Duration>,
    },
    /// List the tokens: name, role, when each was created and when it expires (never the
    /// tokens themselves).
    List {
        #[arg(long, env = "ALOFT_DATA_DIR", default_value = "/var/lib/aloft-coordinator")]
        data_dir: PathBuf,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
    /// Revoke (delete) the token named NAME; it stops working at the next request. An enrolled
    /// node's credential is `node:<node name>` (deleting the Node revokes it too). The admin
    /// token is rotated instead: stop the coordinator, remove DIR/admin.token, start it again.
    /// `token delete` is the same (kubeadm's name for it).
    #[command(visible_alias = "delete")]
    Revoke {
        #[arg(long, env = "ALOFT_DATA_DIR", default_value = "/var/lib/aloft-coordinator")]
        data_dir: PathBuf,
        #[command(flatten)]
        etcd: EtcdArgs,
        /// The token's name, as `token list` shows it.
        #[arg(long)]
        name: String,
    },
}

/// How long a created token works: `--ttl 0` is never, as kubeadm's; without `--ttl`, a
/// bootstrap token lasts kubeadm's 24 h (a token that enrolls hosts for good is a standing
/// credential nobody remembers), other roles until revoked.
fn token_ttl(role: &auth::Role, ttl: Option<std::time::Duration>) -> Option<std::time::Duration> {
    match ttl {
        Some(t) if t.is_zero() => None,
        Some(t) => Some(t),
        None if matches!(role, auth::Role::Bootstrap(_)) => Some(BOOTSTRAP_TOKEN_TTL),
        None => None,
    }
}

/// kubeadm's default for `kubeadm token create --ttl`.
const BOOTSTRAP_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Why `token create` refuses `name`: not a name a table shows on one line, or one another part
/// of aloft owns, which a created token would silently replace.
fn reserved_token_name(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("--name is empty".into());
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_.:@".contains(*c))) {
        return Some(format!(
            "--name {name:?} has {c:?}: a token's name is letters, digits and - _ . : @ (it is shown in `token list` and in 403 messages)"
        ));
    }
    if name.eq_ignore_ascii_case("admin") {
        return Some("--name admin is reserved: it is the token `serve` keeps in admin.token".into());
    }
    // Kubernetes reserves the `system:` prefix: a token named `system:node:n2` was shown by
    // `kubectl auth whoami` and in 403 messages as that node.
    if name.to_ascii_lowercase().starts_with("system:") {
        return Some(format!("--name {name:?} is reserved: names starting with system: are Kubernetes' identities"));
    }
    if name.to_ascii_lowercase().starts_with("node:") {
        return Some(format!(
            "--name {name:?} is reserved: `node:<name>` is an enrolled node's credential (nodes get theirs by enrolling)"
        ));
    }
    None
}

/// The store of an existing data directory: the token commands write to the directory `serve`
/// uses, and a wrong `--data-dir` made a new empty store there, whose tokens no coordinator knew.
fn open_store(data_dir: &std::path::Path) -> Result<SqliteStore> {
    let db = serve::DataDir::new(data_dir).db;
    if !db.exists() {
        anyhow::bail!(
            "{} is no coordinator data dir (it has no aloft.db): pass the one `aloft-coordinator serve` uses (--data-dir or ALOFT_DATA_DIR; default /var/lib/aloft-coordinator)",
            data_dir.display()
        );
    }
    SqliteStore::open(&db).with_context(|| format!("opening {}", db.display()))
}

/// The tokens the token commands work on: etcd's with --etcd-servers, else the data directory's.
async fn open_tokens(
    data_dir: &std::path::Path,
    etcd: &EtcdArgs,
) -> Result<std::sync::Arc<dyn aloft_coordinator::store::Tokens>> {
    etcd.check()?;
    match etcd.options() {
        Some(opts) => Ok(std::sync::Arc::new(
            aloft_coordinator::store::EtcdStore::connect(&opts)
                .await
                .with_context(|| format!("connecting to etcd at {}", opts.endpoints.join(",")))?,
        )),
        None => Ok(std::sync::Arc::new(open_store(data_dir)?)),
    }
}

/// `--olm-global-namespace`'s value: a namespace, or none (empty). A type of its own: clap
/// reads an `Option` field as a flag that may be left out, not as a value that may be empty.
#[derive(Debug, Clone)]
struct GlobalNamespace(Option<String>);

fn parse_global_namespace(value: &str) -> Result<GlobalNamespace, String> {
    aloft_coordinator::controllers::olm::global_namespace(value).map(GlobalNamespace)
}

/// `update-service --metrics-listen`'s value: an address, or `off`.
#[derive(Debug, Clone)]
struct MetricsListen(Option<SocketAddr>);

fn parse_metrics_listen(value: &str) -> Result<MetricsListen, String> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(MetricsListen(None));
    }
    value
        .parse()
        .map(|a| MetricsListen(Some(a)))
        .map_err(|e| format!("{e}: give an address and port (127.0.0.1:9081), or off"))
}

/// The log filter `value` (RUST_LOG syntax; empty: info). A lone word is a level: RUST_LOG reads
/// `warning` or `debg` as a target of that name, which logged nothing at all, errors included.
fn log_filter(value: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    tracing_subscriber::EnvFilter::try_new(aloft_api::log_spec::normalized(value)?).map_err(|e| e.to_string())
}

fn init_tracing() {
    // ALOFT_LOG, else RUST_LOG (what other Rust programs read), else info; one that does not
    // parse is said, not silently replaced.
    let (var, value) = ["ALOFT_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()).map(|s| (*v, s)))
        .unwrap_or(("", String::new()));
    let filter = match log_filter(&value) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warning: {var}={value:?} is not a log filter ({e}); logging at info");
            tracing_subscriber::EnvFilter::new("info")
        }
    };
    // Colours only on a terminal: under systemd stderr goes to the journal, which stores a line
    // with escape codes as a blob (`journalctl` then shows `[N B blob data]`).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> std::process::ExitCode {
    aloft_api::exit::report(run())
}

#[tokio::main]
async fn run() -> Result<()> {
    init_tracing();
    match Cli::parse().cmd {
        Cmd::Serve {
            data_dir,
            listen,
            insecure_http,
            admin_token_file,
            tls_san,
            max_body_bytes,
            max_requests_inflight,
            max_mutating_requests_inflight,
            http2_ping_interval,
            http2_ping_timeout,
            watch_history,
            event_ttl,
            node_monitor_grace_period,
            etcd,
            active_lease_duration,
            new_ca,
            fleetlock_listen,
            update_poll_interval,
            release_keyring,
            olm_global_namespace,
        } => {
            etcd.check()?;
            if update_poll_interval < std::time::Duration::from_secs(1) {
                anyhow::bail!(
                    "--update-poll-interval {} is too short: at least 1s (the update service is asked again at every poll)",
                    humantime::format_duration(update_poll_interval)
                );
            }
            let release_keyring = match release_keyring {
                Some(path) => Some(std::sync::Arc::new(
                    aloft_coordinator::release_signature::Keyring::load(&path)
                        .map_err(|e| anyhow::anyhow!("--release-keyring: {e}"))?,
                )),
                None => None,
            };
            if active_lease_duration < std::time::Duration::from_secs(2) {
                anyhow::bail!(
                    "--active-lease-duration {} is too short: at least 2s (the lease is renewed every third of it)",
                    humantime::format_duration(active_lease_duration)
                );
            }
            if !http2_ping_interval.is_zero() && http2_ping_timeout.is_zero() {
                anyhow::bail!(
                    "--http2-ping-timeout 0s would close every connection at its first ping: give the time an \
                     answer may take (default 15s), or --http2-ping-interval 0s to send no pings"
                );
            }
            let limits = Limits {
                max_body: max_body_bytes,
                max_requests_inflight,
                max_mutating_requests_inflight,
                ping_interval: http2_ping_interval,
                ping_timeout: http2_ping_timeout,
                ..Limits::default()
            };
            serve::run(ServeOptions {
                data_dir,
                listen,
                insecure_http,
                admin_token_file,
                tls_san,
                limits,
                watch_history,
                event_ttl,
                allocator: Some(jemalloc_stats),
                node_monitor_grace: node_monitor_grace_period,
                new_ca,
                fleetlock_listen,
                update_poll: update_poll_interval,
                release_keyring,
                olm_global_namespace: olm_global_namespace.0,
                etcd: etcd.options(),
                active_lease_duration,
                build: aloft_api::build_info!(),
            })
            .await
        }
        Cmd::Bench { cmd: BenchCmd::Api { nodes, configs, samples, concurrency } } => {
            aloft_coordinator::bench::run(aloft_coordinator::bench::ApiBench { nodes, configs, samples, concurrency })
                .await
        }
        Cmd::Bench { cmd: BenchCmd::EventTtl { events, rounds } } => {
            aloft_coordinator::bench::event_ttl(events, rounds.max(1)).await
        }
        Cmd::Bench { cmd: BenchCmd::UpdateGraph { graph, rounds } } => {
            aloft_coordinator::bench::update_graph(&graph, rounds.max(1))
        }
        Cmd::Bench { cmd: BenchCmd::Olm { catalog, rounds } } => aloft_coordinator::bench::olm(&catalog, rounds.max(1)),
        Cmd::Catalog { cmd: CatalogCmd::Validate { path } } => {
            let summary = aloft_coordinator::fbc::check_path(&path)?;
            println!("{}: valid: {summary}", path.display());
            Ok(())
        }
        Cmd::Catalog { cmd: CatalogCmd::Render { path } } => {
            use std::io::Write as _;
            let blobs = aloft_coordinator::fbc::render_path(&path)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for b in blobs {
                writeln!(out, "{b}")?;
            }
            out.flush()?;
            Ok(())
        }
        Cmd::UpdateService {
            graph_data,
            releases,
            listen,
            refresh_interval,
            tls_cert_file,
            tls_key_file,
            metrics_listen,
            check,
        } => {
            let releases = releases.unwrap_or_else(|| graph_data.join("releases"));
            if check {
                let built = aloft_coordinator::update_service::load(&graph_data, &releases)
                    .map_err(|e| anyhow::anyhow!("the graph-data does not load: {e}"))?;
                print!("{}", built.report());
                return Ok(());
            }
            if refresh_interval < std::time::Duration::from_secs(1) {
                anyhow::bail!("--refresh-interval: {} is under a second", humantime::format_duration(refresh_interval));
            }
            let tls = tls_cert_file.zip(tls_key_file);
            aloft_coordinator::update_service::http::run(aloft_coordinator::update_service::http::ServiceOptions {
                graph_data,
                releases,
                listen,
                refresh: refresh_interval,
                tls,
                metrics_listen: metrics_listen.0,
                build: aloft_api::build_info!(),
            })
            .await
        }
        Cmd::Backup { data_dir, to } => {
            let report = aloft_coordinator::backup::backup(&data_dir, &to)
                .with_context(|| format!("backing up {} into {}", data_dir.display(), to.display()))?;
            for line in &report.lines {
                println!("{line}");
            }
            println!(
                "backed up {} into {}; restore with: aloft-coordinator restore --data-dir {} {}",
                data_dir.display(),
                to.display(),
                data_dir.display(),
                to.display()
            );
            Ok(())
        }
        Cmd::Restore { data_dir, from } => {
            let report = aloft_coordinator::backup::restore(&from, &data_dir)
                .with_context(|| format!("restoring {} into {}", from.display(), data_dir.display()))?;
            for line in &report.lines {
                println!("{line}");
            }
            if let Some(aside) = &report.moved_aside {
                println!("the files it replaced are in {}", aside.display());
            }
            println!("restored {} into {}; start `aloft-coordinator serve` on it", from.display(), data_dir.display());
            Ok(())
        }
        Cmd::Token { cmd: TokenCmd::Create { data_dir, etcd, name, role, labels, ttl } } => {
            if let Some(why) = reserved_token_name(&name) {
                anyhow::bail!("{why}; choose another name");
            }
            let mut role: auth::Role = role.parse()?;
            match (&mut role, labels) {
                (auth::Role::Bootstrap(scope), Some(labels)) => *scope = auth::EnrollLabels::parse(&labels)?,
                (_, Some(_)) => anyhow::bail!(
                    "--labels is for --role bootstrap: it says which labels the nodes it enrolls may carry"
                ),
                (_, None) => {}
            }
            if let auth::Role::Bootstrap(scope) = &role {
                let needless = scope.needless();
                if !needless.is_empty() {
                    anyhow::bail!(
                        "the bootstrap token's labels {} need no allowing (a node may always carry labels outside \
                         kubernetes.io and k8s.io, and the ones a host says of itself); list only the role labels \
                         it may give, e.g. node-role.kubernetes.io/worker= (without a list, that one alone; \
                         --labels \"\" for none)",
                        needless.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
                    );
                }
            }
            if let auth::Role::Node(n) = &role {
                anyhow::bail!(
                    "--role node:{n} is refused: a node's credential comes from its enrollment (a bootstrap token), so that deleting the Node revokes it; create a bootstrap token instead"
                );
            }
            let ttl = token_ttl(&role, ttl);
            let store = open_tokens(&data_dir, &etcd).await?;
            let token = auth::generate_token();
            store.put_token(auth::token_hash(&token), name.clone(), role.to_string(), ttl).await?;
            println!("{token}");
            // On stderr: the token alone goes to stdout, for `> bootstrap.token`.
            match ttl {
                Some(ttl) => eprintln!(
                    "token {name:?} ({role}) expires in {} (at {}); --ttl 0 for one that never expires",
                    humantime::format_duration(ttl),
                    (chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or_default())
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
                None => eprintln!("token {name:?} ({role}) never expires; revoke it with `aloft-coordinator token revoke --name {name}`"),
            }
            Ok(())
        }
        Cmd::Token { cmd: TokenCmd::List { data_dir, etcd } } => {
            etcd.check()?;
            let db = serve::DataDir::new(&data_dir).db;
            let listed = match aloft_coordinator::store::sqlite::list_tokens_read_only(&db) {
                _ if etcd.options().is_some() => None,
                Ok(t) if db.exists() => t,
                Ok(_) => None,
                Err(e) => return Err(e).with_context(|| format!("reading the tokens beside {}", db.display())),
            };
            let tokens = match listed {
                Some(t) => t,
                None => open_tokens(&data_dir, &etcd).await?.list_tokens().await?,
            };
            let width = tokens.iter().map(|t| t.name.len()).max().unwrap_or(0).max(4);
            let role_width = tokens.iter().map(|t| t.role.len()).max().unwrap_or(0).max(4);
            println!("{:width$}  {:role_width$}  {:20}  EXPIRES", "NAME", "ROLE", "CREATED");
            for t in tokens {
                let expires = match &t.expires {
                    None => "never".to_string(),
                    Some(at) if t.expired() => format!("{at} (expired)"),
                    Some(at) => at.clone(),
                };
                println!("{:width$}  {:role_width$}  {:20}  {expires}", t.name, t.role, t.created);
            }
            Ok(())
        }
        Cmd::Token { cmd: TokenCmd::Revoke { data_dir, etcd, name } } => {
            if name == "admin" {
                anyhow::bail!(
                    "the admin token is not revoked this way: `serve` puts it back from {} (or --admin-token-file) at its next start. \
                     To rotate it: stop the coordinator, remove that file, and start it again (a new admin token and admin.kubeconfig are written, and the old token stops working)",
                    serve::DataDir::new(&data_dir).admin_token.display()
                );
            }
            if !open_tokens(&data_dir, &etcd).await?.delete_token(name.clone(), None).await? {
                anyhow::bail!("no token named {name:?} (see `aloft-coordinator token list`)");
            }
            println!("token {name:?} revoked");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd settings without `--etcd-servers` are refused by name, not silently left unused
    /// (the data directory's store would be used instead of the etcd meant).
    #[test]
    fn etcd_settings_without_servers_are_refused() {
        let etcd_of = |args: &[&str]| match Cli::try_parse_from(args).unwrap().cmd {
            Cmd::Token { cmd: TokenCmd::List { etcd, .. } } => etcd,
            _ => unreachable!(),
        };
        let stray = etcd_of(&["aloft-coordinator", "token", "list", "--etcd-cafile", "ca.crt", "--etcd-prefix", "/x"]);
        let err = stray.check().unwrap_err().to_string();
        assert!(err.contains("--etcd-prefix, --etcd-cafile given without --etcd-servers"), "{err}");
        assert!(etcd_of(&["aloft-coordinator", "token", "list"]).check().is_ok());
        let full = etcd_of(&["aloft-coordinator", "token", "list", "--etcd-servers", "http://a:2379,http://b:2379"]);
        assert!(full.check().is_ok());
        assert_eq!(full.options().unwrap().endpoints, ["http://a:2379", "http://b:2379"]);
    }

    /// A lone word is a level or refused (it logged nothing, errors included); `warning` is
    /// `warn`; filters with targets pass through.
    #[test]
    fn log_filters_are_levels_or_refused() {
        for ok in ["", "info", "WARN", "warning", "debug", "aloft_coordinator=debug,info", "off"] {
            assert!(log_filter(ok).is_ok(), "{ok:?}");
        }
        for bad in ["debg", "verbose", "aloft_coordinator=debg"] {
            assert!(log_filter(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn system_names_are_reserved() {
        for name in ["system:node:n2", "System:admin", "system:bootstrap:fleet"] {
            assert!(reserved_token_name(name).is_some_and(|w| w.contains("system:")), "{name}");
        }
        assert!(reserved_token_name("dashboard").is_none());
    }
}
