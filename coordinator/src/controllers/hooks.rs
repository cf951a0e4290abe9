//! Drain hooks: HTTP webhooks a pool names in `spec.drain.hooks`, called in order before a node
//! is acknowledged drained (e.g. to take it out of a load balancer) and after it is uncordoned
//! (to put it back). Each call is `POST <url>` with a JSON [`HookRequest`]; any 2xx answer within
//! the hook's timeout is success. A drain whose hook fails is not acknowledged and is retried, so
//! hooks must be idempotent (a coordinator restart between a hook and the acknowledgement calls
//! it again). Redirects are not followed: a client following one would turn the POST into a GET
//! without the request, and count the other URL's 2xx as this hook's success.

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
    #[error("drain hook {url} answered HTTP {code}{}{}", redirect_advice(*.code, location.as_deref()), if body.is_empty() { String::new() } else { format!(": {body}") })]
    Status {
        url: String,
        code: u16,
        body: String,
        /// Where a redirect pointed (without credentials): what the hook's URL should say.
        location: Option<String>,
    },
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
            .redirect(reqwest::redirect::Policy::none())
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
        // The error names the hook, never its credentials: it ends up in Events and annotations
        // that far more people can read than the pool's spec.
        let url = redacted(&hook.url);
        // tokio caps a timer at about two years: no overflow however large the timeout.
        let timeout = Duration::from_secs(seconds.unsigned_abs());
        let send = self.http.post(&hook.url).json(req).timeout(timeout).send();
        let resp = match send.await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Err(HookError::Timeout { url, seconds }),
            Err(e) => return Err(HookError::Request { url, message: super::error_chain(&e.without_url()) }),
        };
        let code = resp.status();
        if code.is_success() {
            return Ok(());
        }
        let location = code.is_redirection().then(|| redirect_target(&hook.url, &resp)).flatten();
        let body = tokio::time::timeout(timeout, body_start(resp)).await.unwrap_or_default();
        Err(HookError::Status { url, code: code.as_u16(), body, location })
    }
}

/// How much of a failed call's answer is kept for its error: its first 200 characters.
const BODY_CHARS: usize = 200;

/// The start of an answer's body, read chunk by chunk up to what [`BODY_CHARS`] can need (4
/// bytes a character) and no further: the whole body was read before, and a hook answering 500
/// with hundreds of megabytes (a proxy's error page, a misrouted download) took the coordinator
/// from 50 MB to 1.5 GB with three drains running. The connection is dropped with the rest.
async fn body_start(mut resp: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < BODY_CHARS * 4 {
        match resp.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(BODY_CHARS * 4);
    String::from_utf8_lossy(&bytes).chars().take(BODY_CHARS).collect()
}

/// What a redirect answer needs said: the hook is not followed there, and where it pointed, so
/// the pool's spec can name that URL instead (a load balancer moved to HTTPS, a path renamed).
fn redirect_advice(code: u16, location: Option<&str>) -> String {
    if !(300..400).contains(&code) {
        return String::new();
    }
    match location {
        Some(to) => format!(" (a redirect to {to}; drain hooks do not follow redirects: give the hook's final URL)"),
        None => " (a redirect; drain hooks do not follow redirects: give the hook's final URL)".into(),
    }
}

/// A redirect's `Location`, resolved against the hook's URL (it may be relative) and shown as
/// [`redacted`] shows URLs: a token in its query must not reach Events either.
fn redirect_target(hook_url: &str, resp: &reqwest::Response) -> Option<String> {
    let location = resp.headers().get(reqwest::header::LOCATION)?.to_str().ok()?;
    let absolute = reqwest::Url::parse(hook_url).ok()?.join(location).ok()?;
    Some(redacted(absolute.as_str()))
}

/// A hook's URL as errors show it: `scheme://host[:port]/path`, without the user and password,
/// query and fragment it may carry (tokens often travel there).
pub fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let host = u.host_str().unwrap_or("");
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{host}{port}{}", u.scheme(), u.path())
        }
        // Admission refuses such URLs; one stored before it did is named by nothing it holds.
        Err(_) => "(an invalid URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_is_named_without_its_credentials() {
        assert_eq!(
            redacted("http://admin:s3cret@127.0.0.1:18080/drain?token=abc#frag"),
            "http://127.0.0.1:18080/drain"
        );
        assert_eq!(redacted("https://user@lb.example/a/b"), "https://lb.example/a/b");
        assert_eq!(redacted("http://[::1]:80/x?k=v"), "http://[::1]/x", "the scheme's default port is left out");
        assert_eq!(redacted("not a url with s3cret"), "(an invalid URL)");
    }

    /// A hook that answers with a redirect has failed: the coordinator does not go on to the
    /// other URL (it would GET it without the request and take its 2xx for the hook's).
    #[tokio::test]
    async fn a_redirect_is_a_failed_call_and_is_not_followed() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = std::thread::spawn(move || {
            let mut lines = Vec::new();
            // The first request is answered with a redirect; a second one (the followed redirect)
            // would be answered 200. Stop after two connections, or when none comes (the first
            // within 60 s, however slow the client's start; the second within 2 s).
            for i in 0..2 {
                let within = std::time::Duration::from_secs(if i == 0 { 60 } else { 2 });
                let (mut conn, _) = match accept_within(&listener, within) {
                    Some(c) => c,
                    None => break,
                };
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                lines.push(text.lines().next().unwrap_or_default().to_string());
                let answer = if lines.len() == 1 {
                    "HTTP/1.1 302 Found\r\nLocation: /ok?token=s3cret\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string()
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                };
                let _ = conn.write_all(answer.as_bytes());
            }
            lines
        });
        let hooks = Hooks::new().unwrap();
        let req = HookRequest { node: "n1", pool: "worker", phase: Phase::Drain, request: "drain-r1" };
        let hook =
            DrainHook { url: format!("http://127.0.0.1:{port}/drain"), timeout_seconds: Some(5), ..Default::default() };
        let e = hooks.call(&hook, &req).await.expect_err("a redirect is not success").to_string();
        assert!(e.contains("answered HTTP 302") && e.contains("do not follow redirects"), "{e}");
        // Where it pointed, resolved against the hook's URL and without the token in its query.
        assert!(e.contains(&format!("a redirect to http://127.0.0.1:{port}/ok;")), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        assert!(e.ends_with("give the hook's final URL)"), "an empty body adds nothing: {e}");
        let lines = tokio::task::spawn_blocking(move || served.join().unwrap()).await.unwrap();
        assert_eq!(lines, vec!["POST /drain HTTP/1.1".to_string()], "only the hook's own URL was called");
    }

    /// A failed call's answer is read only as far as its error needs: a hook answering 500 with
    /// a body of a gigabyte costs the coordinator its first bytes, not the gigabyte.
    #[tokio::test]
    async fn only_the_start_of_a_failed_calls_body_is_read() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = std::thread::spawn(move || {
            let (mut conn, _) =
                accept_within(&listener, std::time::Duration::from_secs(5)).expect("the hook is called");
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let head = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1073741824\r\n\r\n";
            let mut sent = 0usize;
            if conn.write_all(head.as_bytes()).is_ok() {
                let chunk = vec![b'x'; 64 * 1024];
                while sent < 1 << 30 && conn.write_all(&chunk).is_ok() {
                    sent += chunk.len();
                }
            }
            sent
        });
        let hooks = Hooks::new().unwrap();
        let req = HookRequest { node: "n1", pool: "worker", phase: Phase::Drain, request: "drain-r1" };
        let hook = DrainHook {
            url: format!("http://127.0.0.1:{port}/drain"),
            timeout_seconds: Some(30),
            ..Default::default()
        };
        let e = hooks.call(&hook, &req).await.expect_err("a 500 is a failure").to_string();
        assert!(e.ends_with(&format!("answered HTTP 500: {}", "x".repeat(200))), "{}", &e[..e.len().min(300)]);
        let sent = tokio::task::spawn_blocking(move || served.join().unwrap()).await.unwrap();
        assert!(sent < 64 << 20, "{sent} bytes of the body were sent before the coordinator hung up");
    }

    fn accept_within(
        listener: &std::net::TcpListener,
        wait: std::time::Duration,
    ) -> Option<(std::net::TcpStream, std::net::SocketAddr)> {
        listener.set_nonblocking(true).ok()?;
        let until = std::time::Instant::now() + wait;
        loop {
            match listener.accept() {
                Ok((c, a)) => {
                    c.set_nonblocking(false).ok()?;
                    return Some((c, a));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(_) => return None,
            }
        }
    }

    /// Every error of a call (refused connection, HTTP status, timeout) names the hook redacted.
    #[tokio::test]
    async fn hook_errors_carry_no_secret() {
        let hooks = Hooks::new().unwrap();
        let req = HookRequest { node: "n1", pool: "worker", phase: Phase::Drain, request: "drain-r1" };
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let hook = DrainHook {
            url: format!("http://admin:s3cret@127.0.0.1:{port}/drain?token=abc"),
            timeout_seconds: Some(i64::MAX),
            ..Default::default()
        };
        let e = hooks.call(&hook, &req).await.unwrap_err().to_string();
        assert!(e.starts_with(&format!("drain hook http://127.0.0.1:{port}/drain failed: ")), "{e}");
        assert!(!e.contains("s3cret") && !e.contains("token") && !e.contains("admin"), "{e}");
    }
}
