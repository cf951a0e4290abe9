//! The host end of the guest's command channel (virtio-serial port `org.aloft.cmd`, served in
//! the guest by `aloft-cmd.service`): one request line (`b64:<script>`), one JSON reply line
//! `{"rc": N, "out": "<base64 of stdout+stderr>"}`. See images/README.md.
//!
//! Every request starts by printing a nonce, and a reply is taken only when its output starts
//! with that nonce: a late reply to a request that timed out is recognised and dropped instead
//! of being taken as the answer to the next one.

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// What a command printed (stdout and stderr together) and its exit code.
#[derive(Debug, Clone)]
pub struct Output {
    pub rc: i32,
    pub out: String,
}

impl Output {
    /// The output, or an error naming the command when it exited non-zero.
    pub fn ok(self, what: &str) -> Result<String> {
        if self.rc == 0 {
            Ok(self.out)
        } else {
            bail!("{what}: exit code {}: {}", self.rc, self.out.trim_end())
        }
    }
}

#[derive(Deserialize)]
struct Reply {
    rc: i32,
    out: String,
}

pub struct Channel {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    seq: u64,
}

impl Channel {
    /// Connect to QEMU's end of the port (a Unix socket QEMU listens on), retrying until it exists.
    pub async fn connect(path: &Path, timeout: Duration) -> Result<Channel> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match UnixStream::connect(path).await {
                Ok(s) => {
                    let (r, w) = s.into_split();
                    return Ok(Channel { reader: BufReader::new(r), writer: w, seq: 0 });
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(e).with_context(|| format!("connecting to the command channel {}", path.display()))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Run `script` (any shell script) as root in the guest; wait at most `timeout` for the reply.
    pub async fn run(&mut self, script: &str, timeout: Duration) -> Result<Output> {
        self.seq += 1;
        let nonce = format!("aloft-vm-tests-{}-{}", std::process::id(), self.seq);
        let full = format!("echo {nonce}\n{script}");
        let line = format!("b64:{}\n", base64::engine::general_purpose::STANDARD.encode(full));
        self.writer.write_all(line.as_bytes()).await.context("writing to the command channel")?;
        self.writer.flush().await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut reply = String::new();
            let n = tokio::time::timeout_at(deadline, self.reader.read_line(&mut reply))
                .await
                .map_err(|_| anyhow!("no reply within {timeout:?}"))?
                .context("reading from the command channel")?;
            if n == 0 {
                bail!("the command channel closed (the VM went down)");
            }
            let Ok(r) = serde_json::from_str::<Reply>(reply.trim()) else {
                tracing::debug!(line = %reply.trim(), "command channel: not a reply line, ignored");
                continue;
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(r.out.trim())
                .with_context(|| format!("reply output is not base64: {:?}", r.out))?;
            let out = String::from_utf8_lossy(&bytes).into_owned();
            match out.strip_prefix(&format!("{nonce}\n")) {
                Some(rest) => return Ok(Output { rc: r.rc, out: rest.to_string() }),
                None => tracing::debug!("command channel: a late reply to an earlier request, dropped"),
            }
        }
    }
}
