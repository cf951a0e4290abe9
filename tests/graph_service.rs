//! aloft's update service (`aloft-coordinator update-service`) as a process for the tests: a
//! graph-data directory written by the test, served on loopback (the fixture in
//! `update_service` serves graphs a test writes as JSON; this one builds them as users do).

use crate::bin;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// An `update-service` process; stopped when dropped.
pub struct Service {
    child: Child,
    /// The graph URL, for `spec.upstream`.
    pub url: String,
    /// Its `/metrics` URL (on a port of its own), unless the test turned them off.
    pub metrics: Option<String>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Service {
    pub fn start(graph_data: &Path, releases: &Path, refresh: &str) -> Service {
        Service::start_with(graph_data, releases, &["--refresh-interval", refresh])
    }

    pub fn start_with(graph_data: &Path, releases: &Path, args: &[&str]) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("service.log");
        let metrics_set = args.contains(&"--metrics-listen");
        let mut child = Command::new(bin("aloft-coordinator"))
            .args(["update-service", "--listen", "127.0.0.1:0", "--graph-data"])
            .arg(graph_data)
            .arg("--releases")
            .arg(releases)
            .args(if metrics_set { &[][..] } else { &["--metrics-listen", "127.0.0.1:0"][..] })
            .args(args)
            .env("ALOFT_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("update service at ")
            .unwrap_or_else(|| panic!("{line:?}: {}", std::fs::read_to_string(&log).unwrap_or_default()))
            .to_string();
        let mut metrics = None;
        if !args.windows(2).any(|w| w == ["--metrics-listen", "off"]) {
            line.clear();
            out.read_line(&mut line).unwrap();
            let at = line.trim().strip_prefix("metrics at ");
            metrics = Some(at.unwrap_or_else(|| panic!("no metrics line: {line:?}")).to_string());
        }
        Service { child, url, metrics, log, _dir: dir }
    }

    pub fn base(&self) -> String {
        self.url.trim_end_matches("/api/upgrades_info/v1/graph").to_string()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A series' value on `/metrics` (the first line that starts with `series` and a space).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let url = self.metrics.as_ref().expect("metrics are served");
        let text = reqwest::get(url).await.unwrap().text().await.unwrap();
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Ask for a reload now.
    pub fn hup(&self) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGHUP)
            .unwrap();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write `text` to `rel` under `root`, making its directories.
pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}
