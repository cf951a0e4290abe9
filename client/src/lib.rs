//! aloft-client: talking to a coordinator. The client config is a kubeconfig (so kubectl reads
//! the same file), and the HTTP client speaks the coordinator's Kubernetes-style API. Used by
//! aloftctl, the node agent and the tests.

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
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
        let ctx = find("contexts", current)
            .or_else(|| doc.get("contexts")?.as_array()?.first().cloned())
            .ok_or_else(|| anyhow!("{}: no context to use (current-context {current:?})", path.display()))?;
        let cluster_name = ctx.pointer("/context/cluster").and_then(Value::as_str).unwrap_or("");
        let user_name = ctx.pointer("/context/user").and_then(Value::as_str).unwrap_or("");
        let cluster = find("clusters", cluster_name)
            .ok_or_else(|| anyhow!("{}: cluster {cluster_name:?} not found", path.display()))?;
        let server = cluster.pointer("/cluster/server").and_then(Value::as_str).unwrap_or("").to_string();
        if server.is_empty() {
            bail!("{}: cluster {cluster_name:?} has no server", path.display());
        }
        let ca_pem = if let Some(data) = cluster.pointer("/cluster/certificate-authority-data").and_then(Value::as_str)
        {
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .context("certificate-authority-data is not base64")?,
            )
        } else if let Some(file) = cluster.pointer("/cluster/certificate-authority").and_then(Value::as_str) {
            Some(std::fs::read(file).with_context(|| format!("reading CA {file}"))?)
        } else {
            None
        };
        let user = find("users", user_name);
        let token = match user.as_ref() {
            Some(u) => match (
                u.pointer("/user/token").and_then(Value::as_str),
                u.pointer("/user/tokenFile").and_then(Value::as_str),
            ) {
                (Some(t), _) => Some(t.to_string()),
                (None, Some(f)) => Some(
                    std::fs::read_to_string(f).with_context(|| format!("reading token file {f}"))?.trim().to_string(),
                ),
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
            let msg = self.body.get("message").and_then(Value::as_str).unwrap_or("").to_string();
            let msg = if msg.is_empty() { self.body.to_string() } else { msg };
            bail!(
                "Error from server ({}): {msg}",
                self.body.get("reason").and_then(Value::as_str).unwrap_or(&self.code.to_string())
            )
        }
    }
}

/// A [`Reply`] from a status code and a body: JSON, or the text as a JSON string.
fn reply(code: u16, bytes: &[u8]) -> Reply {
    let body =
        serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    Reply { code, body }
}

/// HTTP client for one coordinator.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Install ring as rustls' process-wide crypto provider (once; later calls are no-ops).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Client {
    pub fn new(cfg: &ClientConfig) -> Result<Self> {
        install_crypto();
        let mut b = reqwest::Client::builder().pool_max_idle_per_host(64);
        if let Some(ca) = &cfg.ca_pem {
            let cert = reqwest::Certificate::from_pem(ca).context("the CA is not a PEM certificate")?;
            b = b.tls_certs_only([cert]);
        }
        Ok(Client {
            http: b.build().context("building the HTTP client")?,
            base: cfg.server.trim_end_matches('/').to_string(),
            token: cfg.token.clone(),
        })
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// Send a request; `body` with its content type. The status code and the body as sent.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
    ) -> Result<(u16, bytes::Bytes)> {
        let mut r = self.req(method.clone(), path);
        if let Some((ctype, data)) = body {
            r = r.header("content-type", ctype).body(data);
        }
        if let Some(a) = accept {
            r = r.header("accept", a);
        }
        let resp = r.send().await.with_context(|| format!("{method} {}{path}", self.base))?;
        let code = resp.status().as_u16();
        let bytes = resp.bytes().await.context("reading the response")?;
        Ok((code, bytes))
    }

    /// Send a request; `body` with its content type.
    pub async fn call(
        &self,
        method: reqwest::Method,
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
        method: reqwest::Method,
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
        self.call_as(reqwest::Method::GET, path, None).await
    }

    /// PATCH `path` with `body` of `patch_type`, the answer as `T` (see [`Client::call_as`]).
    pub async fn patch_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        patch_type: &str,
        body: &Value,
    ) -> Result<Option<T>> {
        self.call_as(reqwest::Method::PATCH, path, Some((patch_type, serde_json::to_vec(body)?))).await
    }

    pub async fn get(&self, path: &str) -> Result<Reply> {
        self.call(reqwest::Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, obj: &Value) -> Result<Reply> {
        self.call(reqwest::Method::POST, path, Some(("application/json", serde_json::to_vec(obj)?)), None).await
    }

    pub async fn put(&self, path: &str, obj: &Value) -> Result<Reply> {
        self.call(reqwest::Method::PUT, path, Some(("application/json", serde_json::to_vec(obj)?)), None).await
    }

    pub async fn patch(&self, path: &str, patch_type: &str, body: &Value) -> Result<Reply> {
        self.call(reqwest::Method::PATCH, path, Some((patch_type, serde_json::to_vec(body)?)), None).await
    }

    pub async fn delete(&self, path: &str) -> Result<Reply> {
        self.call(reqwest::Method::DELETE, path, None, None).await
    }

    /// Open a watch; returns the raw response to read newline-delimited events from.
    pub async fn watch(&self, path: &str, accept: Option<&str>) -> Result<reqwest::Response> {
        let mut r = self.req(reqwest::Method::GET, path);
        if let Some(a) = accept {
            r = r.header("accept", a);
        }
        let resp = r.send().await.with_context(|| format!("watching {path}"))?;
        if !resp.status().is_success() {
            let code = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
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
