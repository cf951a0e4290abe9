//! A coordinator process for tests: started from the built binary on a temp data dir, HTTPS on a
//! free loopback port, killed on drop.

#![allow(dead_code)]

use aloft_coordinator::client::{Client, ClientConfig};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Coordinator {
    pub dir: tempfile::TempDir,
    pub url: String,
    child: Child,
}

impl Coordinator {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_aloft-coordinator"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("ALOFT_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn aloft-coordinator");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            assert!(Instant::now() < deadline, "coordinator did not start");
            let line = lines.next().expect("coordinator exited").expect("read stdout");
            if let Some(u) = line.strip_prefix("aloft-coordinator listening on ") {
                break u.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Coordinator { dir, url, child }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    pub fn ca(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("ca.crt")).expect("ca.crt")
    }

    pub fn admin(&self) -> Client {
        Client::new(&ClientConfig::from_kubeconfig(&self.kubeconfig()).expect("kubeconfig")).expect("client")
    }

    pub fn client_with(&self, token: &str) -> Client {
        Client::new(&ClientConfig { server: self.url.clone(), ca_pem: Some(self.ca()), token: Some(token.to_string()) })
            .expect("client")
    }

    /// `aloft-coordinator token create` against this data dir.
    pub fn token(&self, name: &str, role: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_aloft-coordinator"))
            .args(["token", "create", "--name", name, "--role", role, "--data-dir"])
            .arg(self.dir.path())
            .output()
            .expect("token create");
        assert!(out.status.success(), "token create failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf8").trim().to_string()
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `f` until it returns Some or `secs` pass.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
