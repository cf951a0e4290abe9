//! aloft-client: talking to a coordinator. The client config is a kubeconfig (so kubectl reads
//! the same file), and the HTTP client speaks the coordinator's Kubernetes-style API. Used by
//! aloftctl, the node agent and the tests.

pub mod backoff;
mod h2conn;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
pub use h2conn::{Keepalive, StreamingResponse};
/// The request methods ([`Client::call`]).
pub use http::Method;
use serde_json::{json, Value};
use std::path::Path;

/// Where and how to reach a coordinator.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// `https://host:port` or `http://host:port`.
    pub server: String,
    /// PEM of the CA that signed the coordinator's certificate.
    pub ca_pem: Option<Vec<u8>>,
    pub token: Option<String>,
}

impl ClientConfig {
    /// Render as a kubeconfig with one cluster, user and context named `aloft`.
    pub fn to_kubeconfig(&self) -> String {
        let mut cluster = json!({"server": self.server});
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] = base64::engine::general_purpose::STANDARD.encode(ca).into();
        }
        let mut user = json!({});
        if let Some(t) = &self.token {
            user["token"] = t.clone().into();
        }
        let doc = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "aloft", "cluster": cluster}],
            "users": [{"name": "aloft-admin", "user": user}],
            "contexts": [{"name": "aloft", "context": {"cluster": "aloft", "user": "aloft-admin"}}],
            "current-context": "aloft",
        });
        yaml_serde::to_string(&doc).unwrap_or_default()
    }

    /// Read the current context of a kubeconfig (the one `serve` writes, or any kubectl uses with
    /// a token and a CA).
    pub fn from_kubeconfig(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading client config {}", path.display()))?;
        let doc: Value =
            yaml_serde::from_str(&text).with_context(|| format!("{} is not a kubeconfig", path.display()))?;
        let current = doc.get("current-context").and_then(Value::as_str).unwrap_or("");
        let find = |list: &str, name: &str| -> Option<Value> {
            doc.get(list)?.as_array()?.iter().find(|e| e.get("name").and_then(Value::as_str) == Some(name)).cloned()
        };
        // As kubectl: a current-context that names no context is an error, never another
        // context's cluster (commands meant for one fleet would go to another). Without a
        // current-context, a kubeconfig of exactly one context means that one.
        let contexts = doc.get("contexts").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let ctx = if current.is_empty() {
            match contexts {
                [only] => only.clone(),
                [] => bail!("{}: has no contexts", path.display()),
                _ => bail!(
                    "{}: current-context is not set and there are {} contexts to choose from",
                    path.display(),
                    contexts.len()
                ),
            }
        } else {
            find("contexts", current)
                .ok_or_else(|| anyhow!("{}: context {current:?} (its current-context) was not found", path.display()))?
        };
        let cluster_name = ctx.pointer("/context/cluster").and_then(Value::as_str).unwrap_or("");
        let user_name = ctx.pointer("/context/user").and_then(Value::as_str).unwrap_or("");
        let cluster = find("clusters", cluster_name)
            .ok_or_else(|| anyhow!("{}: cluster {cluster_name:?} not found", path.display()))?;
        let server = cluster.pointer("/cluster/server").and_then(Value::as_str).unwrap_or("").to_string();
        if server.is_empty() {
            bail!("{}: cluster {cluster_name:?} has no server", path.display());
        }
        // Relative file names are the kubeconfig's own directory's, as kubectl resolves them.
        let beside = |file: &str| path.parent().unwrap_or(Path::new("")).join(file);
        let ca_pem = if let Some(data) = cluster.pointer("/cluster/certificate-authority-data").and_then(Value::as_str)
        {
            Some(base64::engine::general_purpose::STANDARD.decode(data.trim()).with_context(|| {
                format!("{}: cluster {cluster_name:?}: certificate-authority-data is not base64", path.display())
            })?)
        } else if let Some(file) = cluster.pointer("/cluster/certificate-authority").and_then(Value::as_str) {
            let file = beside(file);
            Some(std::fs::read(&file).with_context(|| format!("reading CA {}", file.display()))?)
        } else {
            None
        };
        // A context's user that is not in the file is an error, as kubectl's: going on without
        // its token only turned into a 401 that named nothing.
        let user = if user_name.is_empty() {
            None
        } else {
            Some(find("users", user_name).ok_or_else(|| {
                anyhow!(
                    "{}: user {user_name:?} (of context {:?}) was not found",
                    path.display(),
                    ctx.get("name").and_then(Value::as_str).unwrap_or("")
                )
            })?)
        };
        let token = match user.as_ref() {
            Some(u) => match (
                u.pointer("/user/token").and_then(Value::as_str),
                u.pointer("/user/tokenFile").and_then(Value::as_str),
            ) {
                (Some(t), _) => Some(t.to_string()),
                (None, Some(f)) => {
                    let f = beside(f);
                    Some(
                        std::fs::read_to_string(&f)
                            .with_context(|| format!("reading token file {}", f.display()))?
                            .trim()
                            .to_string(),
                    )
                }
                _ => None,
            },
            None => None,
        };
        Ok(ClientConfig { server, ca_pem, token })
    }
}

/// A response: status code and JSON body (a `Status` for errors).
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    pub body: Value,
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
    /// The body, or an error with the server's message.
    pub fn into_result(self) -> Result<Value> {
        if self.ok() {
            Ok(self.body)
        } else {
            // A text answer (a 429 of the in-flight limits, a proxy's error page) is its text.
            let msg = match &self.body {
                Value::String(text) => text.trim().to_string(),
                body => body.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
            };
            let msg = if msg.is_empty() { self.body.to_string() } else { msg };
            let reason = match self.body.get("reason").and_then(Value::as_str) {
                Some(r) => r.to_string(),
                None if self.code == 429 => "TooManyRequests".to_string(),
                None => self.code.to_string(),
            };
            bail!("Error from server ({reason}): {msg}")
        }
    }
}

/// How many times a request is sent again when the coordinator asks for it later: client-go's
/// default (`maxRetries`, 10). After that the last answer (a 429) is the caller's.
const MAX_SENT_AGAIN: u32 = 10;

/// The longest wait a `Retry-After` is followed for; a longer one waits this long.
const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// How long to wait before sending a request again, when its answer asks for that: a 429, or a
/// 5xx with a `Retry-After` in seconds, as client-go reads it (`checkWait`). A server sends
/// `Retry-After` only with a request it did not serve (the coordinator's in-flight limits, a
/// proxy's overload), so a write is not applied twice. An HTTP-date is read as 1 s.
fn retry_after<B>(resp: &http::Response<B>) -> Option<std::time::Duration> {
    let code = resp.status().as_u16();
    if code != 429 && !(500..600).contains(&code) {
        return None;
    }
    let value = resp.headers().get(http::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds = value.parse::<u64>().unwrap_or(1);
    Some(std::time::Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// A [`Reply`] from a status code and a body: JSON, or the text as a JSON string.
fn reply(code: u16, bytes: &[u8]) -> Reply {
    let body =
        serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    Reply { code, body }
}

/// HTTP client for one coordinator: one HTTP/2 connection (see [`h2conn`]), shared by clones.
#[derive(Clone)]
pub struct Client {
    conn: h2conn::Connection,
    base: String,
    /// `base` parsed once, and its path without the trailing slash: every request's URL is this
    /// one with its own path and query set, not a new string parsed from the scheme on (a
    /// simulated fleet's 10,000 agents spent a few percent of their CPU parsing URLs).
    base_url: url::Url,
    prefix: String,
    /// The scheme and authority of every request's URI.
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// `Bearer <token>`, marked sensitive (kept out of debug output and of HPACK's table).
    auth: Option<http::HeaderValue>,
    /// Told the text of every `Warning` the coordinator answers with (see [`Client::on_warning`]).
    warnings: Option<WarningHandler>,
}

/// What a [`Client`] calls with the text of each warning a response carries.
pub type WarningHandler = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// The texts of the warnings in one `Warning` header (RFC 7234 5.5: `299 - "text"`, a
/// comma-separated list, each text a quoted string with `\` escapes, maybe followed by a date).
/// Only code 299 ("miscellaneous persistent warning") is kept: it is what kube-apiserver sends,
/// and the only one kubectl prints. A malformed list yields the warnings before the fault, as
/// client-go parses it: a warning must not fail the request it came with.
pub fn warning_texts(header: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = header;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return out;
        }
        let Some((code, after)) = rest.split_once(' ') else { return out };
        let Some((_agent, after)) = after.split_once(' ') else { return out };
        let Some((text, after)) = quoted(after) else { return out };
        // An optional quoted date.
        rest = after.trim_start_matches(' ');
        if rest.starts_with('"') {
            match quoted(rest) {
                Some((_, after)) => rest = after,
                None => return out,
            }
        }
        if !rest.is_empty() && !rest.trim_start_matches([' ', '\t']).starts_with(',') {
            return out;
        }
        if code == "299" {
            out.push(text);
        }
    }
}

/// A quoted string at the start of `s`, unescaped, and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices();
    let mut text = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((text, &s[i + 2..])),
            '\\' => text.push(chars.next()?.1),
            c => text.push(c),
        }
    }
    None
}

/// Install ring as rustls' process-wide crypto provider (once; later calls are no-ops).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Client {
    /// The coordinator's address as configured, for messages that must say which one was asked.
    pub fn server(&self) -> &str {
        &self.base
    }

    pub fn new(cfg: &ClientConfig) -> Result<Self> {
        install_crypto();
        let base = cfg.server.trim_end_matches('/').to_string();
        let base_url = url::Url::parse(&base)
            .with_context(|| format!("the coordinator's address (server) {:?} is not a URL", cfg.server))?;
        if base_url.cannot_be_a_base() || base_url.query().is_some() || base_url.fragment().is_some() {
            bail!("the coordinator's address (server) {:?} must be scheme://host[:port][/path]", cfg.server);
        }
        let auth = match &cfg.token {
            Some(t) => {
                let mut v = http::HeaderValue::from_str(&format!("Bearer {t}"))
                    .context("the token has characters an HTTP header cannot carry")?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let origin: http::Uri = base_url
            .origin()
            .ascii_serialization()
            .parse()
            .with_context(|| format!("the coordinator's address (server) {:?}", cfg.server))?;
        let (scheme, authority) = match (origin.scheme(), origin.authority()) {
            (Some(s), Some(a)) => (s.clone(), a.clone()),
            _ => bail!("the coordinator's address (server) {:?} must be scheme://host[:port][/path]", cfg.server),
        };
        Ok(Client {
            conn: h2conn::Connection::new(&base_url, origin, cfg.ca_pem.as_deref())
                .with_context(|| format!("the coordinator's address (server) {:?}", cfg.server))?,
            prefix: base_url.path().trim_end_matches('/').to_string(),
            base,
            base_url,
            scheme,
            authority,
            auth,
            warnings: None,
        })
    }

    /// Take a connection for dead after `keepalive` (client-go's 30 s without a frame, then
    /// 15 s for the PING's answer, by default). For the connections this client opens from now.
    pub fn with_keepalive(mut self, keepalive: Keepalive) -> Self {
        self.conn.keepalive = keepalive;
        self
    }

    /// Have `handler` told the text of every warning any answer carries, as client-go's warning
    /// handler is: kubectl prints them (`Warning: unknown field "spec.x"`) whatever the command,
    /// and so does aloftctl.
    pub fn on_warning(mut self, handler: WarningHandler) -> Self {
        self.warnings = Some(handler);
        self
    }

    fn tell_warnings(&self, headers: &http::HeaderMap) {
        let Some(handler) = &self.warnings else { return };
        for value in headers.get_all(http::header::WARNING) {
            for text in warning_texts(&String::from_utf8_lossy(value.as_bytes())) {
                handler(&text);
            }
        }
    }

    /// The URL of `path` (an absolute path, with or without a query) on the coordinator, as a
    /// URL parser reads it (percent-encoding what a path or query may not hold as it is).
    fn url(&self, path: &str) -> url::Url {
        let (p, q) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let mut u = self.base_url.clone();
        if self.prefix.is_empty() {
            u.set_path(p);
        } else {
            u.set_path(&format!("{}{p}", self.prefix));
        }
        u.set_query(q);
        u
    }

    /// The request URI of `path`. The paths this crate's callers build are percent-encoded
    /// already and taken as they are; anything else goes through [`Client::url`].
    fn uri(&self, path: &str) -> Result<http::Uri> {
        let pq = format!("{}{path}", self.prefix);
        let pq = match http::uri::PathAndQuery::try_from(pq.as_str()) {
            Ok(pq) if !path.contains("/.") && pq.as_str().starts_with('/') => pq,
            _ => {
                let u = self.url(path);
                let encoded = &u[url::Position::BeforePath..];
                http::uri::PathAndQuery::try_from(encoded).with_context(|| format!("{path:?} is not a request path"))?
            }
        };
        http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(pq)
            .build()
            .with_context(|| format!("{path:?} is not a request path"))
    }

    /// Send a request and wait for the response's head.
    async fn start(
        &self,
        method: &Method,
        path: &str,
        body: Option<(&str, bytes::Bytes)>,
        accept: Option<&str>,
    ) -> Result<http::Response<h2::RecvStream>> {
        let uri = self.uri(path)?;
        let resp = self
            .conn
            .request(method.clone(), uri, self.auth.as_ref(), body, accept)
            .await
            .with_context(|| format!("{method} {}{path}", self.base))?;
        self.tell_warnings(resp.headers());
        Ok(resp)
    }

    /// Send a request; `body` with its content type. The status code and the body as sent.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
    ) -> Result<(u16, bytes::Bytes)> {
        let body = body.map(|(ctype, data)| (ctype, bytes::Bytes::from(data)));
        let mut sent_again = 0;
        let resp = loop {
            let resp = self.start(&method, path, body.clone(), accept).await?;
            match retry_after(&resp) {
                Some(wait) if sent_again < MAX_SENT_AGAIN => {
                    sent_again += 1;
                    // Spread: a whole fleet told "1 s" at once would come back at once.
                    let wait = backoff::jittered(wait);
                    tracing::debug!(
                        code = resp.status().as_u16(),
                        attempt = sent_again,
                        wait_ms = wait.as_millis() as u64,
                        "{method} {path}: the coordinator asked for the request again later"
                    );
                    drop(resp);
                    tokio::time::sleep(wait).await;
                }
                _ => break resp,
            }
        };
        let code = resp.status().as_u16();
        let bytes =
            h2conn::read_body(resp.into_body()).await.with_context(|| format!("{method} {}{path}", self.base))?;
        Ok((code, bytes))
    }

    /// Send a request; `body` with its content type.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
    ) -> Result<Reply> {
        let (code, bytes) = self.send(method, path, body, accept).await?;
        Ok(reply(code, &bytes))
    }

    /// [`Client::call`] with a successful answer read straight into `T`, without building a JSON
    /// tree first (an agent reads its Node after every write: on a fleet's coordinator host, or
    /// a simulated fleet, that tree was a good part of the client's CPU). `Ok(None)` for 404;
    /// other failures are errors worded as [`Reply::into_result`] words them.
    pub async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Option<T>> {
        let (code, bytes) = self.send(method, path, body, None).await?;
        match code {
            200..300 => serde_json::from_slice(&bytes).map(Some).context("the coordinator's answer is malformed"),
            404 => Ok(None),
            _ => reply(code, &bytes).into_result().map(|_| None),
        }
    }

    /// GET `path` as `T` (see [`Client::call_as`]).
    pub async fn get_as<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Option<T>> {
        self.call_as(Method::GET, path, None).await
    }

    /// PATCH `path` with `body` of `patch_type`, the answer as `T` (see [`Client::call_as`]).
    pub async fn patch_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        patch_type: &str,
        body: &Value,
    ) -> Result<Option<T>> {
        self.call_as(Method::PATCH, path, Some((patch_type, serde_json::to_vec(body)?))).await
    }

    /// GET `path` as bytes, whatever its type (`aloftctl get --raw`, as `kubectl get --raw`:
    /// health endpoints and metrics are text, not JSON): the status code and the body.
    pub async fn get_raw(&self, path: &str) -> Result<(u16, Vec<u8>)> {
        let (code, bytes) = self.send(Method::GET, path, None, None).await?;
        Ok((code, bytes.to_vec()))
    }

    pub async fn get(&self, path: &str) -> Result<Reply> {
        self.call(Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, obj: &Value) -> Result<Reply> {
        self.call(Method::POST, path, Some(("application/json", serde_json::to_vec(obj)?)), None).await
    }

    pub async fn put(&self, path: &str, obj: &Value) -> Result<Reply> {
        self.call(Method::PUT, path, Some(("application/json", serde_json::to_vec(obj)?)), None).await
    }

    pub async fn patch(&self, path: &str, patch_type: &str, body: &Value) -> Result<Reply> {
        self.call(Method::PATCH, path, Some((patch_type, serde_json::to_vec(body)?)), None).await
    }

    pub async fn delete(&self, path: &str) -> Result<Reply> {
        self.call(Method::DELETE, path, None, None).await
    }

    /// Open a watch; returns the response to read newline-delimited events from.
    pub async fn watch(&self, path: &str, accept: Option<&str>) -> Result<StreamingResponse> {
        let resp = self.start(&Method::GET, path, None, accept).await.with_context(|| format!("watching {path}"))?;
        let resp = StreamingResponse::new(resp);
        let code = resp.status();
        if !(200..300).contains(&code) {
            let body = resp.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
            let err = Reply { code, body }.into_result().err();
            return Err(err.unwrap_or_else(|| anyhow!("watch {path} failed with HTTP {code}")));
        }
        Ok(resp)
    }
}

/// How a kind is addressed in URLs.
#[derive(Debug, Clone, Copy)]
pub struct ResourceRef<'a> {
    /// Empty for the core group.
    pub group: &'a str,
    pub version: &'a str,
    pub plural: &'a str,
    pub namespaced: bool,
}

/// The URL path of a resource collection, or of one object when `name` is given.
pub fn resource_path(rt: ResourceRef<'_>, namespace: Option<&str>, name: Option<&str>) -> String {
    let mut p =
        if rt.group.is_empty() { format!("/api/{}", rt.version) } else { format!("/apis/{}/{}", rt.group, rt.version) };
    if rt.namespaced {
        p.push_str(&format!("/namespaces/{}", namespace.unwrap_or("default")));
    }
    p.push('/');
    p.push_str(rt.plural);
    if let Some(n) = name {
        p.push('/');
        p.push_str(&percent_encoding::utf8_percent_encode(n, percent_encoding::NON_ALPHANUMERIC).to_string());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(server: &str, token: Option<&str>) -> Result<Client> {
        Client::new(&ClientConfig { server: server.into(), ca_pem: None, token: token.map(str::to_string) })
    }

    /// A request's URL is what parsing the server's address and the path together gives.
    #[test]
    fn urls_as_if_parsed_whole() {
        let paths = [
            "/api/v1/nodes",
            "/api/v1/nodes/sim-00001",
            "/api/v1/nodes/a%2Fb",
            "/api/v1/nodes?watch=1&resourceVersion=42&fieldSelector=metadata.name%3Dn1",
            "/apis/machineconfiguration.openshift.io/v1/machineconfigs/rendered-worker-0a1b",
            "/api/v1/namespaces/default/events?limit=500&continue=abc",
            "/healthz?",
            "/a b/ü",
            "/api/v1/nodes/x/../y",
        ];
        for server in [
            "https://127.0.0.1:6443",
            "https://127.0.0.1:6443/",
            "http://coord.example:80/prefix/",
            "https://[::1]:8443/p",
        ] {
            let c = client(server, None).unwrap();
            for p in paths {
                let whole = url::Url::parse(&format!("{}{p}", server.trim_end_matches('/'))).unwrap();
                assert_eq!(c.url(p), whole, "{server} {p}");
                assert_eq!(c.uri(p).unwrap().to_string(), whole.as_str(), "{server} {p}");
            }
        }
    }

    /// Sent again for a 429, or a 5xx that says when; the wait as the server names it, at most
    /// a minute; never for other codes or without a `Retry-After`.
    #[test]
    fn retry_after_as_client_go_reads_it() {
        let answer = |code: u16, retry_after: Option<&str>| {
            let mut b = http::Response::builder().status(code);
            if let Some(v) = retry_after {
                b = b.header(http::header::RETRY_AFTER, v);
            }
            b.body(()).unwrap()
        };
        let secs = std::time::Duration::from_secs;
        assert_eq!(retry_after(&answer(429, Some("1"))), Some(secs(1)));
        assert_eq!(retry_after(&answer(429, Some(" 7 "))), Some(secs(7)));
        assert_eq!(retry_after(&answer(503, Some("2"))), Some(secs(2)));
        assert_eq!(retry_after(&answer(429, Some("86400"))), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&answer(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"))), Some(secs(1)));
        assert_eq!(retry_after(&answer(429, None)), None, "no wait named: not sent again");
        assert_eq!(retry_after(&answer(500, None)), None);
        for code in [200, 201, 400, 404, 409, 413] {
            assert_eq!(retry_after(&answer(code, Some("1"))), None, "{code}");
        }
    }

    /// A text answer reads as its text; a 429 without a Status is TooManyRequests, as kubectl says.
    #[test]
    fn a_text_answer_is_its_text() {
        let r = reply(429, b"Too many requests, please try again later.\n");
        let err = r.into_result().unwrap_err().to_string();
        assert_eq!(err, "Error from server (TooManyRequests): Too many requests, please try again later.");
        let r = reply(502, b"<html>bad gateway</html>");
        assert_eq!(r.into_result().unwrap_err().to_string(), "Error from server (502): <html>bad gateway</html>");
        let r = reply(404, br#"{"kind":"Status","reason":"NotFound","message":"nodes \"x\" not found"}"#);
        assert_eq!(r.into_result().unwrap_err().to_string(), r#"Error from server (NotFound): nodes "x" not found"#);
    }

    /// kube-apiserver's form, escapes, lists, dates; other codes and malformed tails dropped.
    #[test]
    fn warning_texts_as_kubectl_reads_them() {
        assert_eq!(warning_texts(r#"299 - "unknown field \"spec.x\"""#), [r#"unknown field "spec.x""#]);
        assert_eq!(
            warning_texts(r#"299 - "a, b", 299 aloft "c\\d" "Sat, 01 Jan 2000 00:00:00 GMT",299 - "e""#),
            ["a, b", r"c\d", "e"]
        );
        assert_eq!(warning_texts(r#"199 - "stale", 299 - "kept""#), ["kept"]);
        assert_eq!(warning_texts(r#"299 - "ok", 299 - "unterminated"#), ["ok"]);
        assert_eq!(warning_texts(r#"299 - "ok" junk, 299 - "after""#), Vec::<String>::new());
        assert!(warning_texts("").is_empty() && warning_texts("299").is_empty());
    }

    /// A kubeconfig's relative `certificate-authority` and `tokenFile` name files beside it (as
    /// kubectl reads them), not in whatever directory the command runs from; absolute ones stay.
    #[test]
    fn relative_files_of_a_kubeconfig_are_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "CA PEM").unwrap();
        std::fs::write(elsewhere.path().join("token"), "abc.def\n").unwrap();
        let kubeconfig = dir.path().join("config");
        let write = |token_file: &str| {
            let text = format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                 clusters: [{{name: k, cluster: {{server: 'https://h:1', certificate-authority: ca.crt}}}}]\n\
                 users: [{{name: u, user: {{tokenFile: '{token_file}'}}}}]\n\
                 contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n"
            );
            std::fs::write(&kubeconfig, text).unwrap();
        };
        write(&elsewhere.path().join("token").display().to_string());
        let cfg = ClientConfig::from_kubeconfig(&kubeconfig).unwrap();
        assert_eq!(cfg.ca_pem.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(cfg.token.as_deref(), Some("abc.def"), "an absolute token file");
        write("token");
        let e = format!("{:#}", ClientConfig::from_kubeconfig(&kubeconfig).unwrap_err());
        let beside = dir.path().join("token");
        assert!(e.contains(&format!("reading token file {}", beside.display())), "{e}");
        std::fs::write(&beside, "ghi.jkl").unwrap();
        assert_eq!(ClientConfig::from_kubeconfig(&kubeconfig).unwrap().token.as_deref(), Some("ghi.jkl"));
    }

    /// A current-context or a user that names nothing in the file is an error naming it, as
    /// kubectl's; a kubeconfig without a current-context means its only context.
    #[test]
    fn a_kubeconfig_that_names_what_it_lacks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        let write = |current: &str, user: &str, contexts: &str| {
            let text = format!(
                "apiVersion: v1\nkind: Config\n{current}\
                 clusters: [{{name: k, cluster: {{server: 'https://h:1'}}}}, {{name: other, cluster: {{server: 'https://other:1'}}}}]\n\
                 users: [{{name: u, user: {{token: abc.def}}}}]\n\
                 contexts: [{{name: c, context: {{cluster: k, user: {user}}}}}{contexts}]\n"
            );
            std::fs::write(&kubeconfig, text).unwrap();
        };
        let read = || ClientConfig::from_kubeconfig(&kubeconfig).map_err(|e| format!("{e:#}"));
        write("current-context: c\n", "u", "");
        let cfg = read().unwrap();
        assert_eq!((cfg.server.as_str(), cfg.token.as_deref()), ("https://h:1", Some("abc.def")));
        write("current-context: gone\n", "u", ", {name: o, context: {cluster: other, user: u}}");
        let e = read().unwrap_err();
        assert!(e.contains("context \"gone\"") && e.contains("not found"), "{e}");
        write("current-context: c\n", "nobody", "");
        let e = read().unwrap_err();
        assert!(e.contains("user \"nobody\"") && e.contains("not found"), "{e}");
        write("", "u", "");
        assert_eq!(read().unwrap().server, "https://h:1", "the only context");
        write("", "u", ", {name: o, context: {cluster: other, user: u}}");
        let e = read().unwrap_err();
        assert!(e.contains("current-context is not set"), "{e}");
    }

    #[test]
    fn bad_addresses_and_tokens_are_refused_up_front() {
        let e = client("coordinator:6443", None).err().unwrap();
        assert!(format!("{e:#}").contains("server"), "{e:#}");
        let e = client("https://h:1/?x=1", None).err().unwrap();
        assert!(format!("{e:#}").contains("scheme://host"), "{e:#}");
        let e = client("https://h:1", Some("abc\ndef")).err().unwrap();
        assert!(format!("{e:#}").contains("token"), "{e:#}");
        let c = client("https://h:1", Some("abc.def")).unwrap();
        let auth = c.auth.as_ref().unwrap();
        assert_eq!(auth.to_str().unwrap(), "Bearer abc.def");
        assert!(auth.is_sensitive());
        // A CA with a plain-HTTP address: refused, not dropped (the token would go out in clear).
        let cfg = ClientConfig {
            server: "http://h:1".into(),
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            token: Some("t".into()),
        };
        let e = Client::new(&cfg).err().unwrap();
        assert!(format!("{e:#}").contains("use https://"), "{e:#}");
        assert!(client("http://h:1", Some("t")).is_ok(), "plain HTTP without a CA is still taken");
    }
}
