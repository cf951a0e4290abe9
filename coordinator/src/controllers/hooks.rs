//! Drain hooks: HTTP webhooks a pool names in `spec.drain.hooks`, called in order before a node
//! is acknowledged drained (e.g. to take it out of a load balancer) and after it is uncordoned
//! (to put it back). Each call is `POST <url>` with a JSON [`HookRequest`]; any 2xx answer within
//! the hook's timeout is success. A drain whose hook fails is not acknowledged and is retried, so
//! hooks must be idempotent (a coordinator restart between a hook and the acknowledgement calls
//! it again).

use aloft_api::machineconfig::DEFAULT_HOOK_TIMEOUT_SECONDS;
use aloft_api::DrainHook;
use serde::Serialize;
use std::time::Duration;

/// Which side of the update the call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Drain,
    Uncordon,
}

/// The body of a hook call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookRequest<'a> {
    pub node: &'a str,
    pub pool: &'a str,
    pub phase: Phase,
    /// The agent's request: `drain-<rendered>` or `uncordon-<rendered>`.
    pub request: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("drain hook {url} did not answer within {seconds} s")]
    Timeout { url: String, seconds: i64 },
    #[error("drain hook {url} answered HTTP {code}: {body}")]
    Status { url: String, code: u16, body: String },
    #[error("drain hook {url} failed: {message}")]
    Request { url: String, message: String },
}

/// Calls hooks; one HTTP client (connection pool) for the controller's lifetime.
#[derive(Clone)]
pub struct Hooks {
    http: reqwest::Client,
}

impl Hooks {
    pub fn new() -> Result<Self, HookError> {
        crate::client::install_crypto();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| HookError::Request { url: String::new(), message: e.to_string() })?;
        Ok(Hooks { http })
    }

    /// Call every hook in order; the first failure stops the sequence.
    pub async fn call_all(&self, hooks: &[DrainHook], req: &HookRequest<'_>) -> Result<(), HookError> {
        for h in hooks {
            self.call(h, req).await?;
        }
        Ok(())
    }

    pub async fn call(&self, hook: &DrainHook, req: &HookRequest<'_>) -> Result<(), HookError> {
        let seconds = hook.timeout_seconds.filter(|s| *s > 0).unwrap_or(DEFAULT_HOOK_TIMEOUT_SECONDS);
        let url = hook.url.clone();
        let send = self.http.post(&hook.url).json(req).timeout(Duration::from_secs(seconds as u64)).send();
        let resp = match send.await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Err(HookError::Timeout { url, seconds }),
            Err(e) => return Err(HookError::Request { url, message: error_chain(&e) }),
        };
        let code = resp.status();
        if code.is_success() {
            return Ok(());
        }
        let body = match tokio::time::timeout(Duration::from_secs(seconds as u64), resp.text()).await {
            Ok(Ok(t)) => t.chars().take(200).collect(),
            _ => String::new(),
        };
        Err(HookError::Status { url, code: code.as_u16(), body })
    }
}

/// An error and its causes on one line ("connection refused" hides in the source chain).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
