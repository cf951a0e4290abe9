//! A private `dbus-daemon` per test: its own socket in its own temp directory, so tests run in
//! parallel without sharing names, and nothing touches the host's system or session bus.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a [`TestBus`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum TestBusError {
    #[error("cannot create the bus directory {dir}: {error}")]
    Dir { dir: PathBuf, error: std::io::Error },
    #[error("cannot run dbus-daemon ({error}); install it: apt-get install -y dbus-daemon")]
    Spawn { error: std::io::Error },
    #[error("dbus-daemon exited without printing its address: {stderr}")]
    NoAddress { stderr: String },
    #[error("cannot connect to the test bus {address}: {error}")]
    Connect { address: String, error: zbus::Error },
}

/// A running `dbus-daemon --session --nofork --print-address --address=unix:path=<dir>/bus`.
/// Dropping it kills the daemon and removes its directory.
#[derive(Debug)]
pub struct TestBus {
    child: Child,
    // Kept open: dbus-daemon would get SIGPIPE writing to a closed stdout.
    _stdout: BufReader<ChildStdout>,
    dir: PathBuf,
    address: String,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl TestBus {
    /// Start a private bus. Returns once the daemon listens (it prints its address only then).
    pub fn start() -> Result<Self, TestBusError> {
        let dir = std::env::temp_dir().join(format!(
            "aloft-bus-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).map_err(|error| TestBusError::Dir { dir: dir.clone(), error })?;
        let socket = dir.join("bus");
        let mut child = match Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address"])
            .arg(format!("--address=unix:path={}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(TestBusError::Spawn { error });
            }
        };
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            return Err(TestBusError::NoAddress { stderr: "no stdout pipe".into() });
        };
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        let address = match stdout.read_line(&mut line) {
            Ok(n) if n > 0 && !line.trim().is_empty() => line.trim().to_string(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                let _ = std::fs::remove_dir_all(&dir);
                return Err(TestBusError::NoAddress { stderr: stderr.trim().to_string() });
            }
        };
        // Nobody reads stderr from here on; as root dbus-daemon writes one harmless line
        // ("Failed to set fd limit") that fits the pipe's buffer.
        Ok(TestBus { child, _stdout: stdout, dir, address })
    }

    /// The bus address, e.g. `unix:path=/tmp/aloft-bus-1-0-0/bus,guid=...`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The directory holding the socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new client connection to this bus (inside a tokio runtime).
    pub async fn connect(&self) -> Result<zbus::Connection, TestBusError> {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .map_err(|error| TestBusError::Connect { address: self.address.clone(), error })
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
