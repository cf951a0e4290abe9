//! Shared helpers for aloft's cross-crate integration tests: a real `aloft-coordinator` process on
//! a temp data dir ([`Coordinator`]), polling with a deadline ([`eventually`]), reading watch
//! streams ([`WatchStream`]), the shared MCO test data ([`testdata`], [`yaml_docs`],
//! [`process_template`]) and leaf-by-leaf comparison of objects ([`missing_leaves`]).
//!
//! The harness runs the coordinator binary from the target directory the test executable lives
//! in. Before the first start in a test process it runs `cargo build --workspace --bins` (falling
//! back to `-p aloft-coordinator` when another crate does not build), so that
//! `cargo test -p aloft-tests` never tests a stale binary. Set `ALOFT_TEST_NO_BUILD=1` to skip
//! that when the binaries are known to be fresh.

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod catalog_server;
pub mod graph_service;
pub mod sandbox;
pub mod update_service;

pub use aloft_coordinator::client::{install_crypto, resource_path, Client, ClientConfig, Reply};
pub use aloft_coordinator::resources::{self, ResourceType, EVENT, MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};

/// The Accept header kubectl sends for server-side printing.
pub const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// How long a coordinator may take to print its URL and answer /healthz.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The workspace root (the parent of this crate's directory).
/// A loopback port free at the time of asking (for a server that must listen on a known port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// `shared/testdata`, beside the workspace root.
pub fn testdata() -> PathBuf {
    workspace_root().join("../shared/testdata")
}

/// The target profile directory (`target/debug`) the running test executable was built into.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/<test>-<hash>
    let deps = exe.parent().expect("test exe has a parent");
    let dir =
        if deps.file_name().is_some_and(|n| n == "deps") { deps.parent().expect("deps has a parent") } else { deps };
    dir.to_path_buf()
}

/// The build identity this crate was compiled with (scripts/build-env.sh's variables, or none),
/// for the binaries it builds: the same as the test or bench that runs them, so that the build is
/// a no-op where `cargo build --workspace --bins` ran before with the same environment, and never
/// takes the stamp off binaries built with one (a bench from a plain shell relinked them saying
/// their commit was not recorded).
fn build_identity(cmd: &mut Command) {
    for (key, value) in [
        ("ALOFT_GIT_COMMIT", option_env!("ALOFT_GIT_COMMIT")),
        ("ALOFT_GIT_TREE_STATE", option_env!("ALOFT_GIT_TREE_STATE")),
        ("ALOFT_BUILD_DATE", option_env!("ALOFT_BUILD_DATE")),
    ] {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
}

/// Path of a binary of the workspace (`aloft-coordinator`, `aloftctl`), built fresh once per test
/// process unless `ALOFT_TEST_NO_BUILD` is set.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let dir = profile_dir();
    let built = BUILT.get_or_init(|| {
        if std::env::var_os("ALOFT_TEST_NO_BUILD").is_some() {
            return Ok(());
        }
        // `--workspace --bins` is what scripts/test.sh builds before the tests, so there this is a
        // no-op: a `-p aloft-coordinator` build resolves dependency features differently and
        // would rebuild and relink. If another crate of the workspace does not build, fall back
        // to building only what these tests run.
        let build = |selection: &[&str]| -> std::result::Result<(), String> {
            let mut cmd = Command::new(env!("CARGO"));
            cmd.arg("build").args(selection).arg("--bins").current_dir(workspace_root());
            build_identity(&mut cmd);
            // Build into the target dir this test was built in (it may be a --target-dir).
            if let Some(target) = dir.parent() {
                cmd.arg("--target-dir").arg(target);
            }
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let out = cmd.output().map_err(|e| format!("running cargo build: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "cargo build {} --bins failed:\n{}",
                    selection.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        build(&["--workspace"]).or_else(|_| build(&["-p", "aloft-coordinator"]))
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} does not exist: build it with `cargo build -p aloft-coordinator --bins` (or unset ALOFT_TEST_NO_BUILD)",
        path.display()
    );
    path
}

/// Whether this run keeps the coordinators' stores on etcd (`ALOFT_TEST_STORE=etcd`, see
/// [`Coordinator::start_with`]). A test of the SQLite files themselves (a restore from a copy
/// of the data directory) says so and passes over that part.
pub fn stores_on_etcd() -> bool {
    std::env::var("ALOFT_TEST_STORE").is_ok_and(|s| s == "etcd")
}

/// Options for starting a coordinator.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Serve plain HTTP instead of HTTPS.
    pub insecure_http: bool,
    /// Extra arguments for `serve` (e.g. `--max-body-bytes 1024`).
    pub args: Vec<String>,
    /// Keep the same loopback port across restarts (agents keep their URL), instead of a new
    /// free port per start.
    pub fixed_port: bool,
    /// Extra environment for the process (e.g. `NOTIFY_SOCKET`).
    pub env: Vec<(String, String)>,
    /// The loopback port to listen on (instead of a free one): two coordinators on one etcd
    /// take turns on one address, as they would behind one virtual IP.
    pub listen_port: Option<u16>,
    /// Files written into the data directory before the first start (name, contents): a
    /// second coordinator on one etcd gets the first one's CA and admin token this way.
    pub data_files: Vec<(String, Vec<u8>)>,
}

/// A running `aloft-coordinator serve` on its own temp data dir, on a free loopback port.
/// Killed (SIGKILL) when dropped.
pub struct Coordinator {
    root: tempfile::TempDir,
    opts: Options,
    child: Option<Child>,
    url: String,
    starts: usize,
    /// The port of the first start, reused by later ones when `fixed_port` is set.
    port: Option<u16>,
    /// The URL line of the running process, once it prints one.
    url_rx: Option<std::sync::mpsc::Receiver<String>>,
    /// The etcd it keeps its store in, with `ALOFT_TEST_STORE=etcd` (see [`Self::start_with`]).
    /// Dropped after the process is killed (fields drop in order).
    _etcd: Option<aloft_coordinator::store::etcd::testing::EtcdServer>,
}

impl Coordinator {
    /// Start with HTTPS and default options.
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    pub fn start_with(opts: Options) -> Self {
        let mut c = Self::unstarted(opts);
        c.spawn();
        c
    }

    /// With `ALOFT_TEST_STORE=etcd` in the environment, a coordinator whose test did not choose
    /// etcd itself keeps its store in an etcd of its own (started here, on loopback), so that a
    /// test written for the SQLite store can be run against the etcd backend as well.
    fn unstarted(mut opts: Options) -> Self {
        install_crypto();
        let mut etcd = None;
        if stores_on_etcd() && !opts.args.iter().any(|a| a == "--etcd-servers") {
            let server = aloft_coordinator::store::etcd::testing::EtcdServer::start();
            opts.args.extend(["--etcd-servers", server.endpoint()].map(String::from));
            if !opts.args.iter().any(|a| a == "--active-lease-duration") {
                // A restart after a kill waits for the killed one's lease: 3 s, not 15.
                opts.args.extend(["--active-lease-duration", "3s"].map(String::from));
            }
            etcd = Some(server);
        }
        let root = tempfile::Builder::new().prefix("aloft-test-").tempdir().expect("tempdir");
        if !opts.data_files.is_empty() {
            let data = root.path().join("data");
            std::fs::create_dir(&data).expect("data dir");
            std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
            for (name, bytes) in &opts.data_files {
                std::fs::write(data.join(name), bytes).expect("data file");
                let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
                std::fs::set_permissions(data.join(name), private).expect("chmod");
            }
        }
        Coordinator { root, opts, child: None, url: String::new(), starts: 0, port: None, url_rx: None, _etcd: etcd }
    }

    /// Start without waiting for it to serve: a standby on etcd serves only once the active
    /// coordinator stops ([`Self::wait_serving`]).
    pub fn start_standby(opts: Options) -> Self {
        let mut c = Self::unstarted(opts);
        c.launch();
        c
    }

    /// Wait until the process serves (it printed its URL and answers /healthz).
    pub fn wait_serving(&mut self, timeout: Duration) {
        let rx = self.url_rx.take().expect("a started coordinator");
        let url = match rx.recv_timeout(timeout) {
            Ok(u) => u,
            Err(_) => {
                let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                panic!("aloft-coordinator did not print its URL (exit status {status:?}); log:\n{}", self.log_tail());
            }
        };
        self.port = url.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse().ok());
        self.url = url;
        self.wait_healthy();
    }

    /// Whether the process printed its URL yet (without waiting).
    pub fn serving_yet(&self) -> bool {
        !self.url.is_empty()
    }

    /// The exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// The etcd this coordinator was given by `ALOFT_TEST_STORE=etcd`, if any.
    pub fn etcd_pid(&self) -> Option<u32> {
        self._etcd.as_ref().map(|e| e.pid())
    }

    /// That etcd's client URL (where it also serves `/metrics`).
    pub fn etcd_endpoint(&self) -> Option<&str> {
        self._etcd.as_ref().map(|e| e.endpoint())
    }

    /// The data directory (`--data-dir`).
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join(format!("coordinator-{}.log", self.starts))
    }

    fn spawn(&mut self) {
        self.launch();
        self.wait_serving(START_TIMEOUT);
    }

    fn launch(&mut self) {
        self.starts += 1;
        let log = File::create(self.log_path()).expect("create log file");
        let mut cmd = Command::new(bin("aloft-coordinator"));
        let listen = match self.port.filter(|_| self.opts.fixed_port).or(self.opts.listen_port) {
            Some(p) => format!("127.0.0.1:{p}"),
            None => "127.0.0.1:0".to_string(),
        };
        cmd.arg("serve").arg("--data-dir").arg(self.data_dir()).args(["--listen", &listen]);
        if self.opts.insecure_http {
            cmd.arg("--insecure-http");
        }
        cmd.args(&self.opts.args)
            .env("ALOFT_LOG", std::env::var("ALOFT_LOG").unwrap_or_else(|_| "info".into()))
            .env("NO_COLOR", "1")
            .env_remove("ALOFT_DATA_DIR")
            .env_remove("ALOFT_LISTEN")
            // After the defaults, so that a test can set its own (e.g. `NO_COLOR` empty).
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().expect("spawn aloft-coordinator");
        let stdout = child.stdout.take().expect("child stdout");
        // Read stdout on a thread, so a coordinator that never prints cannot hang the test.
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                if let Some(u) = line.strip_prefix("aloft-coordinator listening on ") {
                    let _ = tx.send(u.trim().to_string());
                }
            }
        });
        self.child = Some(child);
        self.url_rx = Some(rx);
    }

    fn wait_healthy(&mut self) {
        let url = format!("{}/healthz", self.url);
        let ca = if self.opts.insecure_http { None } else { Some(self.ca_pem()) };
        // reqwest::blocking must not run on a tokio worker thread: use a thread of our own.
        let result = std::thread::spawn(move || -> std::result::Result<(), String> {
            let mut b = reqwest::blocking::Client::builder().timeout(Duration::from_secs(5));
            if let Some(ca) = ca {
                b = b.tls_certs_only([reqwest::Certificate::from_pem(&ca).map_err(|e| e.to_string())?]);
            }
            let http = b.build().map_err(|e| e.to_string())?;
            let deadline = Instant::now() + START_TIMEOUT;
            let mut last = String::new();
            while Instant::now() < deadline {
                match http.get(&url).send() {
                    Ok(r) if r.status().is_success() => return Ok(()),
                    Ok(r) => last = format!("HTTP {}", r.status()),
                    Err(e) => last = format!("{e:#}"),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(format!("GET {url} never succeeded: {last}"))
        })
        .join()
        .expect("healthz thread");
        if let Err(e) = result {
            panic!("{e}; log:\n{}", self.log_tail());
        }
    }

    /// `https://127.0.0.1:PORT` (changes on restart: the port is picked anew).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("coordinator running").id()
    }

    /// Run `aloftctl ARGS` against this coordinator (its admin kubeconfig).
    pub fn aloftctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("aloftctl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig_path())
            .args(args)
            .output()
            .expect("run aloftctl")
    }

    pub fn kubeconfig_path(&self) -> PathBuf {
        self.data_dir().join("admin.kubeconfig")
    }

    pub fn ca_path(&self) -> PathBuf {
        self.data_dir().join("ca.crt")
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).expect("read ca.crt")
    }

    /// The admin token `serve` generated (DIR/admin.token).
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("admin.token")).expect("read admin.token").trim().to_string()
    }

    /// The admin client, from the kubeconfig `serve` wrote (so it pins the generated CA).
    pub fn client(&self) -> Client {
        let cfg = ClientConfig::from_kubeconfig(&self.kubeconfig_path()).expect("read admin.kubeconfig");
        assert_eq!(cfg.server, self.url, "admin.kubeconfig names the server the coordinator printed");
        Client::new(&cfg).expect("admin client")
    }

    /// A client with another token (or none), pinning the CA.
    pub fn client_with_token(&self, token: Option<&str>) -> Client {
        let ca_pem = if self.opts.insecure_http { None } else { Some(self.ca_pem()) };
        Client::new(&ClientConfig { server: self.url.clone(), ca_pem, token: token.map(str::to_string) })
            .expect("client")
    }

    /// A client with the node credential of a node enrolled now as `name`, with `labels`.
    pub async fn node_client(&self, name: &str, labels: Value) -> Client {
        // A bootstrap token that may give exactly these labels (a pool's role label among them).
        let pairs: Vec<String> = labels
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect())
            .unwrap_or_default();
        let role = format!("bootstrap:{}", pairs.join(","));
        let boot = self.client_with_token(Some(&self.create_token(&format!("boot-{name}"), &role)));
        let r = boot
            .post("/aloft/v1/enroll", &serde_json::json!({"nodeName": name, "labels": labels}))
            .await
            .and_then(|r| r.into_result())
            .expect("enrollment");
        let token = r["token"].as_str().expect("enrollment without a token");
        self.client_with_token(Some(token))
    }

    /// `aloft-coordinator token create --role ROLE` on this data dir; returns the token.
    /// What an `aloft-coordinator token` command needs besides `--data-dir` to reach this
    /// coordinator's store: `--etcd-servers URL` when it is on etcd (its tokens are there).
    pub fn store_args(&self) -> Vec<String> {
        match self.opts.args.iter().position(|a| a == "--etcd-servers") {
            Some(i) => self.opts.args[i..].iter().take(2).cloned().collect(),
            None => Vec::new(),
        }
    }

    pub fn create_token(&self, name: &str, role: &str) -> String {
        let out = Command::new(bin("aloft-coordinator"))
            .args(["token", "create", "--name", name, "--role", role, "--data-dir"])
            .arg(self.data_dir())
            .args(self.store_args())
            .env("ALOFT_LOG", "warn")
            .output()
            .expect("run token create");
        assert!(out.status.success(), "token create failed: {}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8(out.stdout).expect("utf8 token").trim().to_string();
        assert!(!token.is_empty() && !token.contains(char::is_whitespace), "token create printed {token:?}");
        token
    }

    /// `aloft-coordinator token revoke --name NAME` on this coordinator's store (another
    /// process, as an admin runs it).
    pub fn revoke_token(&self, name: &str) {
        let out = Command::new(bin("aloft-coordinator"))
            .args(["token", "revoke", "--name", name, "--data-dir"])
            .arg(self.data_dir())
            .args(self.store_args())
            .env("ALOFT_LOG", "warn")
            .output()
            .expect("run token revoke");
        assert!(out.status.success(), "token revoke failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A plain HTTP client (no aloft client behaviour: no retries) that trusts only this
    /// coordinator's CA: for requests whose raw answer a test looks at.
    pub fn http_client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&self.ca_pem()).expect("CA")])
            .build()
            .expect("reqwest client")
    }

    /// A request the coordinator holds in flight: its headers and the start of its body are
    /// sent, the rest waits until [`HeldRequest::release`]. Meanwhile it keeps its place under the
    /// in-flight limits (`--max-requests-inflight`, `--max-mutating-requests-inflight`).
    pub async fn hold_request(&self, token: &str, method: reqwest::Method, path: &str) -> HeldRequest {
        let http = self.http_client();
        let (more, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        more.send(Ok(b"{".to_vec())).await.expect("the body's start is queued");
        let body = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) });
        let send = http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(body))
            .send();
        let task = tokio::spawn(async move { send.await.map(|r| r.status().as_u16()).ok() });
        HeldRequest { more: Some(more), task }
    }

    /// SIGKILL the process (by its own PID) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // std's Child::kill sends SIGKILL to this child's PID on Unix.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// The extra `serve` arguments of the next start (a restart with other flags).
    pub fn set_args(&mut self, args: Vec<String>) {
        self.opts.args = args;
    }

    /// Kill (if running) and start again on the same data dir.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// The lines of the current run's stderr log that contain `needle`.
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        text.lines().filter(|l| l.contains(needle)).map(str::to_string).collect()
    }

    /// The last 60 lines of the current run's stderr log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- coordinator log (tail) ---\n{}\n---", self.log_tail());
        } else if let Some(status) = self.exited().filter(|s| !s.success()) {
            // Died on its own, e.g. under a bench that returns an error rather than panicking.
            eprintln!("--- coordinator exited ({status}); its log (tail) ---\n{}\n---", self.log_tail());
        }
        self.kill9();
        // `ALOFT_TEST_KEEP_LOGS=DIR`: every start's log, kept past the temp dir.
        if let Some(dir) = std::env::var_os("ALOFT_TEST_KEEP_LOGS") {
            let dir = PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            for start in 1..=self.starts {
                let from = self.root.path().join(format!("coordinator-{start}.log"));
                let root = self.root.path().file_name().unwrap_or_default().to_string_lossy();
                let to = dir.join(format!("coordinator-{root}-{start}.log"));
                let _ = std::fs::copy(from, to);
            }
        }
    }
}

/// Poll `f` until it returns `Ok(Some(v))`, or fail after `timeout` with the last error.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::from("condition not met");
    loop {
        match f().await {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Path of one object (cluster-scoped kinds) or of the collection when `name` is None.
pub fn path_of(rt: &ResourceType, name: Option<&str>) -> String {
    resource_path(rt.path_ref(), None, name)
}

/// Write what the agent's apply of the rendered config `target` over the host's saved current
/// config writes (its files, units and journal, through the agent's own code) while the agent is
/// stopped: the disk as a crash after the apply leaves it, before the phase moves on. Returns the
/// current config's and the target's normalized specs.
pub async fn apply_as_the_agent(
    admin: &Client,
    root: &aloft_agent::host::Root,
    bus_address: &str,
    target: &str,
) -> (aloft_api::MachineConfigSpec, aloft_api::MachineConfigSpec) {
    use aloft_agent::{daemon, engine};
    let services = engine::connect_services(Some(bus_address)).await.expect("the host's bus");
    let new: aloft_api::MachineConfig = serde_json::from_value(
        admin.get(&path_of(&MACHINE_CONFIG, Some(target))).await.unwrap().into_result().unwrap(),
    )
    .expect("a rendered config");
    let old = daemon::load_current(root).unwrap().expect("a current config");
    let (old_spec, new_spec) = (engine::normalize(&old.spec).unwrap(), engine::normalize(&new.spec).unwrap());
    engine::apply(root, &old_spec, &new_spec, services.as_ref()).await.expect("the apply");
    (old_spec, new_spec)
}

/// GET an object; panics unless the answer is 200.
pub async fn get_ok(c: &Client, rt: &ResourceType, name: &str) -> Value {
    let r = c.get(&path_of(rt, Some(name))).await.expect("GET");
    assert_eq!(r.code, 200, "GET {} {name}: {}", rt.plural, r.body);
    r.body
}

/// Names of the items of a list answer.
pub fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|a| a.iter().map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

/// Names of every stored object of a kind.
pub async fn list_names(c: &Client, rt: &ResourceType) -> Vec<String> {
    let r = c.get(&path_of(rt, None)).await.expect("LIST");
    assert_eq!(r.code, 200, "LIST {}: {}", rt.plural, r.body);
    item_names(&r.body)
}

/// `metadata.resourceVersion` as a number.
pub fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("object without a numeric resourceVersion: {obj}"))
}

/// A minimal valid MachineConfig.
pub fn machine_config(name: &str, role: &str) -> Value {
    serde_json::json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": role}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}}},
    })
}

/// A pool of the nodes labelled `node-role.kubernetes.io/<role>`. A custom role's pool inherits
/// the worker configs, as OpenShift requires (its `MachineConfigPool` template's selector).
pub fn machine_config_pool(name: &str, role: &str) -> Value {
    const ROLE: &str = "machineconfiguration.openshift.io/role";
    let selector = match role {
        "master" | "worker" | "arbiter" => serde_json::json!({"matchLabels": {ROLE: role}}),
        _ => serde_json::json!({"matchExpressions": [{"key": ROLE, "operator": "In", "values": ["worker", role]}]}),
    };
    serde_json::json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name},
        "spec": {
            "machineConfigSelector": selector,
            "nodeSelector": {"matchLabels": {format!("node-role.kubernetes.io/{role}"): ""}},
        },
    })
}

/// A newline-delimited watch stream of `{"type", "object"}` events.
pub struct WatchStream {
    resp: aloft_client::StreamingResponse,
    buf: Vec<u8>,
}

impl WatchStream {
    /// Open `path` (a collection path; `?watch=true` and the query are added by the caller).
    pub async fn open(c: &Client, path_and_query: &str) -> Result<Self> {
        let resp = c.watch(path_and_query, None).await?;
        Ok(WatchStream { resp, buf: Vec::new() })
    }

    /// The next event, or None when the server ended the stream. Errors after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Result<Option<Value>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(line)
                    .map(Some)
                    .with_context(|| format!("watch line {:?}", String::from_utf8_lossy(line)));
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .map_err(|_| anyhow!("no watch event within {timeout:?}"))?
                .context("reading the watch stream")?;
            match chunk {
                Some(c) => self.buf.extend_from_slice(&c),
                None if self.buf.is_empty() => return Ok(None),
                None => bail!("watch stream ended mid-line: {:?}", String::from_utf8_lossy(&self.buf)),
            }
        }
    }

    /// The next `n` events.
    pub async fn take(&mut self, n: usize, timeout: Duration) -> Result<Vec<Value>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            match self.next(timeout).await? {
                Some(ev) => out.push(ev),
                None => bail!("watch ended after {} of {n} events", out.len()),
            }
        }
        Ok(out)
    }

    /// True if no event arrives within `quiet` (the stream stays open and silent).
    pub async fn is_quiet(&mut self, quiet: Duration) -> Result<bool> {
        match self.next(quiet).await {
            Ok(Some(_)) => Ok(false),
            Ok(None) => bail!("watch stream ended"),
            Err(e) if e.to_string().starts_with("no watch event") => Ok(true),
            Err(e) => Err(e),
        }
    }
}

/// Every YAML document of a file, as JSON values (empty documents skipped).
pub fn yaml_docs(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    yaml_docs_str(&text).with_context(|| format!("parsing {}", path.display()))
}

pub fn yaml_docs_str(text: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Process an OpenShift `Template` the way `oc process` does: each `${PARAM}` inside a string is
/// replaced by the parameter's value; a string that is exactly `${{PARAM}}` is replaced by the
/// value parsed as YAML/JSON (a non-string value). Keys are substituted too. Values come from
/// `params`, then from the template's defaults; a parameter with neither is an error.
pub fn process_template(template: &Value, params: &[(&str, &str)]) -> Result<Vec<Value>> {
    let mut values: Vec<(String, String)> = Vec::new();
    for p in template["parameters"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = p["name"].as_str().unwrap_or("").to_string();
        let given = params.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        let default = p["value"].as_str().map(str::to_string);
        match given.or(default) {
            Some(v) => values.push((name, v)),
            None => bail!("template {}: parameter {name} has no value", template["metadata"]["name"]),
        }
    }
    fn subst_str(s: &str, values: &[(String, String)]) -> Result<Value> {
        for (k, v) in values {
            if s == format!("${{{{{k}}}}}") {
                let parsed: Value =
                    yaml_serde::from_str(v).with_context(|| format!("parameter {k}={v:?} is not YAML"))?;
                return Ok(parsed);
            }
        }
        let mut out = s.to_string();
        for (k, v) in values {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        if out.contains("${") {
            bail!("unsubstituted parameter in {out:?}");
        }
        Ok(Value::String(out))
    }
    fn walk(v: &Value, values: &[(String, String)]) -> Result<Value> {
        Ok(match v {
            Value::String(s) => subst_str(s, values)?,
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, values)).collect::<Result<_>>()?),
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, x) in m {
                    let k = match subst_str(k, values)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    out.insert(k, walk(x, values)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
    let objects = template["objects"].as_array().ok_or_else(|| anyhow!("template without objects"))?;
    objects.iter().map(|o| walk(o, &values)).collect()
}

/// Every leaf (scalar, null, empty object or empty array) of `want` that is missing from `got`
/// or differs there, as `path: want != got` lines. Paths in `skip` (JSON pointers, prefixes) are
/// not compared.
pub fn missing_leaves(want: &Value, got: &Value, skip: &[&str]) -> Vec<String> {
    fn go(path: &str, want: &Value, got: Option<&Value>, skip: &[&str], out: &mut Vec<String>) {
        if skip.iter().any(|s| path == *s || path.starts_with(&format!("{s}/"))) {
            return;
        }
        match want {
            Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    go(&format!("{path}/{key}"), v, got.and_then(|g| g.get(k)), skip, out);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let got_len = got.and_then(Value::as_array).map(Vec::len);
                if got_len != Some(a.len()) {
                    out.push(format!("{path}: array of {} != {:?}", a.len(), got.map(|g| g.to_string())));
                    return;
                }
                for (i, v) in a.iter().enumerate() {
                    go(&format!("{path}/{i}"), v, got.and_then(|g| g.get(i)), skip, out);
                }
            }
            leaf => {
                if got != Some(leaf) {
                    out.push(format!(
                        "{path}: {leaf} != {}",
                        got.map(|g| g.to_string()).unwrap_or_else(|| "<missing>".into())
                    ));
                }
            }
        }
    }
    let mut out = Vec::new();
    go("", want, Some(got), skip, &mut out);
    out
}

/// The `status.details.causes[].field` values of an error answer.
pub fn cause_fields(body: &Value) -> Vec<String> {
    body.pointer("/details/causes")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|c| c["field"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

/// A condition of an object's status by type.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == type_)
}

/// Assert an error answer: the code, a Status body with that code and reason, and a message.
#[track_caller]
pub fn assert_status(r: &Reply, code: u16, reason: &str, what: &str) {
    assert_eq!(r.code, code, "{what}: want HTTP {code}, got {}: {}", r.code, r.body);
    assert_eq!(r.body["kind"], "Status", "{what}: the body is a Status: {}", r.body);
    assert_eq!(r.body["code"], code, "{what}: Status.code: {}", r.body);
    assert_eq!(r.body["status"], "Failure", "{what}: Status.status: {}", r.body);
    assert_eq!(r.body["reason"], reason, "{what}: Status.reason: {}", r.body);
    let msg = r.body["message"].as_str().unwrap_or("");
    assert!(msg.len() >= 10, "{what}: a clear message is expected, got {msg:?}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proc_usage_counts_this_process_and_its_writes() {
        let me = std::process::id();
        let before = proc_usage(me);
        assert!(before.rss_kb > 0 && before.peak_rss_kb >= before.rss_kb, "{before:?}");
        let dir = tempfile::tempdir().unwrap();
        let mut f = std::fs::File::create(dir.path().join("x")).unwrap();
        for _ in 0..10 {
            std::io::Write::write_all(&mut f, &[0u8; 4096]).unwrap();
        }
        let after = proc_usage(me);
        assert!(after.io_syscalls >= before.io_syscalls + 10, "{before:?} -> {after:?}");
        assert!(after.io_bytes >= before.io_bytes + 40_960, "{before:?} -> {after:?}");
        assert_eq!(proc_field("VmRSS:\t  1234 kB\nVmHWM:\t 99 kB\n", "VmHWM:"), 99);
        assert_eq!(proc_field("syscr: 7\n", "syscw:"), 0);
        // utime 7 + stime 5, past a command name that holds ") ".
        assert_eq!(stat_cpu_ticks("9 (x) y) S 1 1 1 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1"), 12);
        assert_eq!(stat_cpu_ticks(""), 0);
    }

    /// The calling thread's CPU time, exact (the kernel brings it up to date for the call;
    /// its schedstat file can still read 0 for a thread that has just started).
    fn own_cpu_ns() -> i64 {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
        t.tv_sec() * 1_000_000_000 + t.tv_nsec()
    }

    #[test]
    fn thread_cpu_falls_back_to_ticks_without_schedstat() {
        let dir = tempfile::tempdir().unwrap();
        let stat = "9 (w) S 1 1 1 0 -1 4194560 100 0 0 0 30 20 0 0 20 0 1";
        std::fs::write(dir.path().join("stat"), stat).unwrap();
        let from_ticks = (50.0 * 1e9 / clock_ticks_per_s()) as u64;
        assert_eq!(thread_cpu_ns(dir.path()), from_ticks, "no schedstat file");
        std::fs::write(dir.path().join("schedstat"), "0 0 0\n").unwrap();
        assert_eq!(thread_cpu_ns(dir.path()), from_ticks, "a kernel that keeps no schedstat");
        std::fs::write(dir.path().join("schedstat"), "123456789 5 2\n").unwrap();
        assert_eq!(thread_cpu_ns(dir.path()), 123_456_789, "schedstat, when kept, is exact");
        std::fs::remove_file(dir.path().join("stat")).unwrap();
        std::fs::write(dir.path().join("schedstat"), "0 0 0\n").unwrap();
        assert_eq!(thread_cpu_ns(dir.path()), 0, "nothing readable");
    }

    #[test]
    fn threads_count_a_named_thread_apart() {
        let me = std::process::id();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        let channel = std::sync::mpsc::channel::<()>;
        let ((started_tx, started_rx), (go_tx, go_rx), (done_tx, done_rx)) = (channel(), channel(), channel());
        // A thread of the same name that has used 20 ms of CPU at the first reading and exits
        // before the second: what it had used must not be taken from the other's.
        let (early_ready_tx, early_ready_rx) = channel();
        let (early_go_tx, early_go_rx) = channel();
        let early = std::thread::Builder::new()
            .name("usage-probe".into())
            .spawn(move || {
                let from = own_cpu_ns();
                while own_cpu_ns() - from < 20_000_000 {}
                early_ready_tx.send(()).unwrap();
                early_go_rx.recv().unwrap();
            })
            .unwrap();
        early_ready_rx.recv().unwrap();
        let idle = std::thread::Builder::new().name("usage-idle".into()).spawn(std::thread::park).unwrap();
        let t = std::thread::Builder::new()
            .name("usage-probe".into())
            .spawn(move || {
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                // 50 ms of this thread's own CPU (by its clock, not the wall's: on a busy
                // machine it may wait for a core), some writes, then stay alive until read.
                let from = own_cpu_ns();
                let mut x = 0u64;
                while own_cpu_ns() - from < 50_000_000 {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                }
                let mut f = std::fs::File::create(&path).unwrap();
                for _ in 0..10 {
                    std::io::Write::write_all(&mut f, &[0u8; 4096]).unwrap();
                }
                done_tx.send(()).unwrap();
                std::thread::park();
            })
            .unwrap();
        started_rx.recv().unwrap();
        let before = threads(me);
        assert_eq!(before.values().filter(|(n, _)| n == "usage-probe").count(), 2, "{before:?}");
        early_go_tx.send(()).unwrap();
        early.join().unwrap();
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        let after = threads(me);
        let used = used_by_name(&before, &after);
        t.thread().unpark();
        t.join().unwrap();
        idle.thread().unpark();
        idle.join().unwrap();
        let probe_used = used["usage-probe"];
        assert!(probe_used.cpu_s >= 0.03, "{probe_used:?}");
        assert!(probe_used.write_calls >= 10 && probe_used.write_bytes >= 40_960, "{probe_used:?}");
        assert!(used["usage-idle"].cpu_s < 0.01, "{:?}", used["usage-idle"]);
        assert_eq!(after.values().filter(|(n, _)| n == "usage-probe").count(), 1, "the exited one is gone");
        assert!(!threads(me).values().any(|(n, _)| n == "usage-probe"), "nor is the second once it exited");
    }

    #[test]
    fn leaves() {
        let want = json!({"a": {"b": 1, "c": [1, {"d": null}]}, "e": {}, "f": "x"});
        let same = json!({"a": {"b": 1, "c": [1, {"d": null}], "extra": 2}, "e": {}, "f": "x", "g": 1});
        assert!(missing_leaves(&want, &same, &[]).is_empty());
        let lost = json!({"a": {"b": 2, "c": [1, {}]}, "f": "x"});
        let m = missing_leaves(&want, &lost, &[]);
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(missing_leaves(&want, &lost, &["/a", "/e"]).is_empty());
    }

    #[test]
    fn templates() {
        let t = json!({
            "objects": [{"metadata": {"name": "${NAME}", "labels": {"x/${NAME}": ""}}, "spec": {"k": "${{ARGS}}", "s": "a-${POOL}-b"}}],
            "parameters": [{"name": "NAME"}, {"name": "POOL", "value": "worker"}, {"name": "ARGS", "value": "[\"a\"]"}],
        });
        let out = process_template(&t, &[("NAME", "n1")]).unwrap();
        assert_eq!(
            out[0],
            json!({"metadata": {"name": "n1", "labels": {"x/n1": ""}}, "spec": {"k": ["a"], "s": "a-worker-b"}})
        );
        assert!(process_template(&t, &[]).is_err(), "NAME has no default");
    }
}

/// A process's memory and CPU use, read from /proc, for the benchmarks.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcUsage {
    /// Resident set now (VmRSS), KiB.
    pub rss_kb: u64,
    /// Peak resident set (VmHWM), KiB.
    pub peak_rss_kb: u64,
    /// User + system CPU time, seconds.
    pub cpu_s: f64,
    /// Read/write-family system calls made so far (`syscr` + `syscw` of /proc/PID/io: read,
    /// readv, pread, write, writev, pwrite; the kernel does not count recv/send calls there).
    pub io_syscalls: u64,
    /// Bytes those calls moved (`rchar` + `wchar`: sockets and page cache alike, not only disk).
    pub io_bytes: u64,
}

/// [`ProcUsage`] of `pid` (zeros for what cannot be read).
pub fn proc_usage(pid: u32) -> ProcUsage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    ProcUsage {
        rss_kb: proc_field(&status, "VmRSS:"),
        peak_rss_kb: proc_field(&status, "VmHWM:"),
        cpu_s: stat_cpu_ticks(&stat) as f64 / clock_ticks_per_s(),
        io_syscalls: proc_field(&io, "syscr:") + proc_field(&io, "syscw:"),
        io_bytes: proc_field(&io, "rchar:") + proc_field(&io, "wchar:"),
    }
}

/// What a thread used (or, summed, the threads of one name).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadUsage {
    /// CPU time, seconds (`/proc/PID/task/TID/schedstat`: nanoseconds, not clock ticks, so that
    /// a thread's share of a few seconds' run is exact).
    pub cpu_s: f64,
    /// Write-family system calls (`syscw` of the thread's io file).
    pub write_calls: u64,
    /// Bytes those calls moved (`wchar`).
    pub write_bytes: u64,
}

impl ThreadUsage {
    /// What was used between `start` and `self`.
    pub fn since(&self, start: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            cpu_s: (self.cpu_s - start.cpu_s).max(0.0),
            write_calls: self.write_calls.saturating_sub(start.write_calls),
            write_bytes: self.write_bytes.saturating_sub(start.write_bytes),
        }
    }
}

/// The threads of `pid` alive now, by thread id: each one's name (as the kernel keeps it, 15
/// bytes: `store-checkpoin`) and what it has used so far.
pub type Threads = std::collections::BTreeMap<u32, (String, ThreadUsage)>;

/// [`Threads`] of `pid` (empty when /proc cannot be read).
pub fn threads(pid: u32) -> Threads {
    let mut out = Threads::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for task in tasks.flatten() {
        let dir = task.path();
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else { continue };
        let Ok(name) = std::fs::read_to_string(dir.join("comm")) else { continue };
        let io = std::fs::read_to_string(dir.join("io")).unwrap_or_default();
        let used = ThreadUsage {
            cpu_s: thread_cpu_ns(&dir) as f64 / 1e9,
            write_calls: proc_field(&io, "syscw:"),
            write_bytes: proc_field(&io, "wchar:"),
        };
        out.insert(tid, (name.trim_end().to_string(), used));
    }
    out
}

/// What the threads alive at `end` used since `start`, summed by thread name (a runtime's
/// workers share a name). Taken thread by thread: a thread that exited in between is not
/// counted, and does not take what it had used from the others of its name.
pub fn used_by_name(start: &Threads, end: &Threads) -> std::collections::BTreeMap<String, ThreadUsage> {
    let mut out = std::collections::BTreeMap::<String, ThreadUsage>::new();
    for (tid, (name, now)) in end {
        let before = start.get(tid).map(|(_, u)| *u).unwrap_or_default();
        let used = now.since(&before);
        let sum = out.entry(name.clone()).or_default();
        sum.cpu_s += used.cpu_s;
        sum.write_calls += used.write_calls;
        sum.write_bytes += used.write_bytes;
    }
    out
}

/// The CPU time of the thread whose /proc directory is `dir`, nanoseconds: from its `schedstat`
/// (exact), or from the clock ticks of its `stat` where the kernel keeps no schedstat (the file
/// then reads all zeros, or is absent); 0 when neither can be read.
fn thread_cpu_ns(dir: &Path) -> u64 {
    let schedstat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
    let fields: Vec<u64> = schedstat.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    if fields.len() == 3 && fields.iter().any(|&f| f > 0) {
        return fields[0];
    }
    let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
    (stat_cpu_ticks(&stat) as f64 * 1e9 / clock_ticks_per_s()) as u64
}

/// utime + stime, clock ticks, of a /proc `stat` line (the fields after the command's `)`).
fn stat_cpu_ticks(stat: &str) -> u64 {
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

/// Clock ticks per second of /proc's CPU times (`CLK_TCK`; 100 when it cannot be asked).
fn clock_ticks_per_s() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

/// The number after `key` in a `key: value [unit]` file of /proc (status, io); 0 when absent.
fn proc_field(text: &str, key: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// A request of `method` on `path` held in flight, once `probe` (a request of the same kind)
/// is refused: the held one then has the kind's one place. A probe may take the place just as
/// the held request arrives, which is then refused itself; it is sent again.
pub async fn take_the_place<F, Fut>(
    c: &Coordinator,
    token: &str,
    method: reqwest::Method,
    path: &str,
    probe: F,
) -> HeldRequest
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<reqwest::Response>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no request kept {method} {path}'s place");
        let held = c.hold_request(token, method.clone(), path).await;
        while !held.ended() {
            assert!(Instant::now() < deadline, "no request kept {method} {path}'s place");
            if probe().await.is_some_and(|r| r.status() == 429) {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// See [`Coordinator::hold_request`].
pub struct HeldRequest {
    more: Option<tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>>,
    task: tokio::task::JoinHandle<Option<u16>>,
}

impl HeldRequest {
    /// Whether the request was answered already (refused by a limit, or its body ended).
    pub fn ended(&self) -> bool {
        self.task.is_finished()
    }

    /// End the body (an incomplete JSON document: the coordinator answers it 400) and wait for the
    /// answer's code: the request's place is free again once it returns.
    pub async fn release(mut self) -> Option<u16> {
        self.more.take();
        (&mut self.task).await.ok().flatten()
    }
}

impl Drop for HeldRequest {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// kubectl, or None (skip) when it is absent and not required (ALOFT_REQUIRE_KUBECTL unset).
pub fn kubectl_path() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("kubectl")).find(|p| p.is_file()));
    match found {
        Some(p) => Some(p),
        None if std::env::var_os("ALOFT_REQUIRE_KUBECTL").is_some_and(|v| !v.is_empty() && v != "0") => {
            panic!(
                "kubectl is not on PATH, and ALOFT_REQUIRE_KUBECTL is set: install kubectl (scripts/install-deps.sh)"
            )
        }
        None => {
            eprintln!("SKIPPED: kubectl is not on PATH (set ALOFT_REQUIRE_KUBECTL=1 to make this a failure)");
            None
        }
    }
}

/// An axum app served on a free loopback port, for the tests' stand-ins of servers aloft reads
/// (update services, catalogs); it stops when dropped.
pub struct LoopbackServer {
    pub addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl LoopbackServer {
    pub async fn start(app: axum::Router) -> LoopbackServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        LoopbackServer { addr, task }
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
