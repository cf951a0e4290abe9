//! One HTTP/2 connection to the coordinator, spoken with `h2` directly.
//!
//! Why not reqwest (which the client used before): every agent report is a PATCH with a small
//! body, and hyper's client sends a request body only once its stream has flow-control capacity,
//! which h2 assigns after the stream's HEADERS went out. So each report left as two writes — its
//! HEADERS, then its DATA — each a TLS record, a loopback or network segment, and a wake-up of
//! the coordinator's connection task. Handing the body to `h2` with the request queues both
//! frames before the connection task writes, and they leave as one. It also drops a task hop per
//! request (hyper's dispatch task) and two URL parses (reqwest's request builder and its redirect
//! policy). What reqwest gave and this keeps: `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (CONNECT
//! tunnels through an `http://` proxy, as reqwest does for HTTPS), reconnection after the
//! coordinator restarts, and the coordinator's CA or the system's roots.
//!
//! The coordinator always speaks HTTP/2 (ALPN `h2` over TLS; prior knowledge without TLS), so
//! this client does not fall back to HTTP/1.1.

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use h2::client::SendRequest;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, Request, Response, Uri};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

/// Flow-control windows as hyper's client sets them: a 10,000-node list (~12 MB) must not wait
/// for a WINDOW_UPDATE every 64 KB.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 5 << 20;

/// How long opening a connection may take: the TCP connect (or the proxy's CONNECT), then the TLS
/// and HTTP/2 handshakes. Without a limit a connect to an address that drops packets waited for
/// the kernel's SYN retries, and a peer that accepted and never answered, for good.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// When an open connection is taken for dead, as client-go's HTTP/2 health check: after
/// `read_idle` without a byte from the coordinator a PING is sent, and a connection whose PING is
/// not answered within `ping_timeout` is closed, which fails every request and watch on it (they
/// open a new connection). A watch is quiet most of the time, and a peer gone without a FIN or
/// RST (a host powered off, a NAT or load balancer that forgot the flow, a failover) left it
/// waiting for good: the node never heard of its next config, and a request on the same
/// connection waited for TCP to give up, about 15 minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub read_idle: Duration,
    pub ping_timeout: Duration,
}

impl Default for Keepalive {
    /// client-go's `ReadIdleTimeout` and `PingTimeout`.
    fn default() -> Self {
        Keepalive { read_idle: Duration::from_secs(30), ping_timeout: Duration::from_secs(15) }
    }
}

/// Where the coordinator is and how to reach it.
struct Target {
    tls: Option<tokio_rustls::TlsConnector>,
    host: String,
    port: u16,
    /// For `NO_PROXY` and the tunnel: `scheme://host:port`.
    origin: Uri,
    proxy: hyper_util::client::proxy::matcher::Matcher,
    /// For an `http://` address: the same address as `https://`, to suggest when the server
    /// answers with TLS.
    https_hint: Option<String>,
    /// Whether a CA was given (else the system's roots check the coordinator): what a failed
    /// certificate check tells the user to look at.
    ca_given: bool,
}

/// A lazily opened, shared HTTP/2 connection (clones of a `Client` share it), opened again when
/// it is found closed.
#[derive(Clone)]
pub(crate) struct Connection {
    target: Arc<Target>,
    send: Arc<Mutex<Option<SendRequest<Bytes>>>>,
    pub(crate) keepalive: Keepalive,
}

impl Connection {
    /// `base` is the coordinator's URL and `origin` its `scheme://host[:port]`; `ca_pem` its CA
    /// (else the system's roots).
    pub(crate) fn new(base: &url::Url, origin: Uri, ca_pem: Option<&[u8]>) -> Result<Self> {
        let host = base.host_str().context("no host")?;
        // IPv6 literals come bracketed out of the URL.
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let tls = match base.scheme() {
            "https" => Some(tls_connector(ca_pem)?),
            // A CA says the caller means to check who it talks to; plain HTTP cannot, and would
            // send the token unencrypted without a word.
            "http" if ca_pem.is_some() => {
                let mut https = base.clone();
                let _ = https.set_scheme("https");
                let _ = https.set_port(base.port_or_known_default());
                bail!(
                    "plain HTTP, but a CA was given to check the coordinator's certificate, which plain HTTP \
                     does not have (and the token would go out unencrypted); use {}",
                    https.as_str().trim_end_matches('/')
                )
            }
            "http" => None,
            other => bail!("scheme {other:?}: use https:// (or http://)"),
        };
        let port = base.port_or_known_default().context("no port")?;
        let https_hint = tls.is_none().then(|| {
            let mut https = base.clone();
            // Both are special schemes, so neither call can fail; the port is kept explicit (an
            // omitted :80 must not become https' 443).
            let _ = https.set_scheme("https");
            let _ = https.set_port(Some(port));
            https.as_str().trim_end_matches('/').to_string()
        });
        Ok(Connection {
            target: Arc::new(Target {
                tls,
                host,
                port,
                origin,
                proxy: hyper_util::client::proxy::matcher::Matcher::from_env(),
                https_hint,
                ca_given: ca_pem.is_some(),
            }),
            send: Arc::new(Mutex::new(None)),
            keepalive: Keepalive::default(),
        })
    }

    /// A sender ready for one more stream, on the open connection or a new one.
    async fn ready(&self) -> Result<SendRequest<Bytes>> {
        let mut slot = self.send.lock().await;
        if let Some(s) = slot.as_ref() {
            // A connection the coordinator closed (a restart, an idle timeout) fails here, before
            // anything was sent on it: open a new one instead.
            if let Ok(s) = s.clone().ready().await {
                return Ok(s);
            }
        }
        *slot = None;
        let s = self.open().await?;
        let s = s.ready().await.context("the new connection refused a request")?;
        *slot = Some(s.clone());
        Ok(s)
    }

    async fn open(&self) -> Result<SendRequest<Bytes>> {
        let t = &self.target;
        let connect = async {
            match t.proxy.intercept(&t.origin) {
                Some(proxy) => tunnel(&proxy, &t.origin).await,
                None => TcpStream::connect((t.host.as_str(), t.port))
                    .await
                    .with_context(|| format!("connecting to {}", t.origin)),
            }
        };
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, connect).await.map_err(|_| {
            anyhow!("connecting to {}: no connection within {} s", t.origin, CONNECT_TIMEOUT.as_secs())
        })??;
        let _ = tcp.set_nodelay(true);
        tokio::time::timeout(HANDSHAKE_TIMEOUT, self.handshake(tcp)).await.map_err(|_| {
            anyhow!(
                "{}: the TLS and HTTP/2 handshakes did not finish within {} s",
                t.origin,
                HANDSHAKE_TIMEOUT.as_secs()
            )
        })?
    }

    async fn handshake(&self, tcp: TcpStream) -> Result<SendRequest<Bytes>> {
        let t = &self.target;
        let last_read = Arc::new(LastRead::new());
        let mut b = h2::client::Builder::new();
        b.initial_window_size(STREAM_WINDOW).initial_connection_window_size(CONNECTION_WINDOW);
        let send = match &t.tls {
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(t.host.clone())
                    .with_context(|| format!("{:?} is not a host name for TLS", t.host))?;
                let stream = tls.connect(name, tcp).await.map_err(|e| {
                    let hint = certificate_hint(&e, &t.host, t.ca_given);
                    anyhow::Error::new(e).context(format!("TLS handshake with {}{hint}", t.origin))
                })?;
                if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                    bail!("{} does not speak HTTP/2 (ALPN h2); is it an aloft coordinator?", t.origin);
                }
                let stream = Watched { inner: stream, last_read: last_read.clone(), tls_check: None };
                let (send, conn) = b.handshake(stream).await.context("HTTP/2 handshake")?;
                spawn_connection(conn, last_read, self.keepalive, t.origin.to_string());
                send
            }
            None => {
                let check = TlsCheck {
                    origin: t.origin.to_string().trim_end_matches('/').to_string(),
                    https_hint: t.https_hint.clone().unwrap_or_default(),
                };
                let plain = Watched { inner: tcp, last_read: last_read.clone(), tls_check: Some(check) };
                let (send, conn) = b.handshake(plain).await.context("HTTP/2 handshake")?;
                spawn_connection(conn, last_read, self.keepalive, t.origin.to_string());
                send
            }
        };
        Ok(send)
    }

    /// Send a request and wait for the response's head. `uri` is absolute.
    pub(crate) async fn request(
        &self,
        method: Method,
        uri: Uri,
        auth: Option<&HeaderValue>,
        body: Option<(&str, Bytes)>,
        accept: Option<&str>,
    ) -> Result<Response<h2::RecvStream>> {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(a) = auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        if let Some(a) = accept {
            req = req.header(http::header::ACCEPT, a);
        }
        if let Some((ctype, data)) = &body {
            req = req.header(CONTENT_TYPE, *ctype).header(CONTENT_LENGTH, data.len());
        }
        let req = req.body(()).context("building the request")?;
        let data = body.map(|(_, data)| data);
        // Sent again once, on a new connection: a request the coordinator never saw (it could
        // not be sent, the connection being found closed only now; or it was refused with
        // REFUSED_STREAM, which HTTP/2 promises was not processed), and a read that met a
        // connection the coordinator had dropped (a restart): reading twice changes nothing.
        // A write that met a dropped connection may have been applied; its caller decides.
        let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let mut retried = false;
        loop {
            let mut send = self.ready().await?;
            let unseen = match send.send_request(req.clone(), data.is_none()) {
                Ok((response, mut stream)) => {
                    if let Some(data) = &data {
                        // Queued with the HEADERS: both leave in the connection task's next write.
                        if let Err(e) = stream.send_data(data.clone(), true) {
                            // The coordinator may answer before it reads a body it has no use
                            // for (a 401 for a request without a credential) and end the stream,
                            // and on a busy machine that can happen between the HEADERS and
                            // this call: then its answer is the answer.
                            return match response.await {
                                Ok(r) => Ok(r),
                                Err(_) => Err(e).context("sending the request body"),
                            };
                        }
                    }
                    match response.await {
                        Ok(r) => return Ok(r),
                        Err(e) if not_processed(&e) || (safe && (e.is_io() || e.is_go_away())) => e,
                        Err(e) => {
                            self.forget_if_broken(&e).await;
                            return Err(e).context("waiting for the response");
                        }
                    }
                }
                Err(e) => e,
            };
            if retried {
                self.forget_if_broken(&unseen).await;
                return Err(unseen).context("sending the request");
            }
            retried = true;
            *self.send.lock().await = None;
        }
    }

    /// After a connection-level failure the next request opens a new connection at once.
    async fn forget_if_broken(&self, e: &h2::Error) {
        if e.is_io() || e.is_go_away() {
            *self.send.lock().await = None;
        }
    }
}

/// An error that HTTP/2 guarantees left the request unprocessed.
fn not_processed(e: &h2::Error) -> bool {
    e.is_reset() && e.reason() == Some(h2::Reason::REFUSED_STREAM)
}

/// Drive the connection, and close it once it is found dead ([`Keepalive`]): dropping it fails
/// its streams, and the next request opens a new one.
fn spawn_connection<T>(
    mut conn: h2::client::Connection<T, Bytes>,
    last_read: Arc<LastRead>,
    ka: Keepalive,
    origin: String,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let ping_pong = conn.ping_pong();
    tokio::spawn(async move {
        let dead = async {
            let Some(mut ping_pong) = ping_pong else { return std::future::pending::<String>().await };
            loop {
                let idle = last_read.idle();
                if idle < ka.read_idle {
                    tokio::time::sleep(ka.read_idle - idle).await;
                    continue;
                }
                match tokio::time::timeout(ka.ping_timeout, ping_pong.ping(h2::Ping::opaque())).await {
                    Ok(Ok(_)) => last_read.touch(),
                    Ok(Err(e)) => return format!("a PING failed: {e}"),
                    Err(_) => {
                        return format!(
                            "no answer to a PING within {} s, after {} s without a frame",
                            ka.ping_timeout.as_secs_f64(),
                            idle.as_secs()
                        )
                    }
                }
            }
        };
        tokio::select! {
            closed = &mut conn => if let Err(e) = closed {
                tracing::debug!(error = %e, "connection to the coordinator closed");
            },
            why = dead => tracing::warn!(coordinator = %origin, "closing a dead connection to the coordinator: {why}"),
        }
    });
}

/// When the connection last read a byte, for [`Keepalive`].
struct LastRead {
    since: std::time::Instant,
    millis: AtomicU64,
}

impl LastRead {
    fn new() -> Self {
        LastRead { since: std::time::Instant::now(), millis: AtomicU64::new(0) }
    }

    fn touch(&self) {
        self.millis.store(self.since.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.millis.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(last)
    }
}

/// A stream that notes when it last read something, and on a plain-HTTP connection looks at
/// the first bytes it reads for a TLS server ([`TlsCheck`]).
struct Watched<T> {
    inner: T,
    last_read: Arc<LastRead>,
    /// Until the first bytes are read, on a plain-HTTP connection.
    tls_check: Option<TlsCheck>,
}

/// A plain-HTTP connection recognises a TLS server in its first bytes. An `http://` address
/// pointed at the coordinator's HTTPS port gets a TLS alert back for its HTTP/2 preface, which
/// h2 would report as "frame with invalid size"; this says what happened and which URL to use.
/// An HTTP/2 server's first frame is SETTINGS, whose 3-byte length never starts with 0x15 or 0x16
/// followed by 0x03 (a TLS alert or handshake record of TLS 1.x): the check cannot misfire.
struct TlsCheck {
    /// `http://host:port`, for the message.
    origin: String,
    /// The address to use instead.
    https_hint: String,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.last_read.touch();
            if let Some(check) = self.tls_check.take() {
                if matches!(&buf.filled()[before..], [0x15 | 0x16, 0x03, ..]) {
                    return std::task::Poll::Ready(Err(std::io::Error::other(format!(
                        "{} answered with TLS: the coordinator speaks HTTPS there, not plain HTTP; use {}",
                        check.origin, check.https_hint
                    ))));
                }
            }
        }
        polled
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A TCP connection to `origin` through the proxy's CONNECT tunnel.
async fn tunnel(proxy: &hyper_util::client::proxy::matcher::Intercept, origin: &Uri) -> Result<TcpStream> {
    use tower_service::Service;
    let via = proxy.uri().clone();
    if via.scheme_str() != Some("http") {
        bail!("proxy {via}: only http:// proxies are supported (CONNECT tunnels)");
    }
    let mut t = hyper_util::client::legacy::connect::proxy::Tunnel::new(
        via.clone(),
        hyper_util::client::legacy::connect::HttpConnector::new(),
    );
    if let Some(auth) = proxy.basic_auth() {
        t = t.with_auth(auth.clone());
    }
    std::future::poll_fn(|cx| t.poll_ready(cx)).await.with_context(|| format!("proxy {via}"))?;
    let io = t.call(origin.clone()).await.with_context(|| format!("CONNECT {origin} through proxy {via}"))?;
    Ok(io.into_inner())
}

/// What to check when the coordinator's certificate was refused: which CA the client was given
/// (the coordinator's `ca.crt`), or which name it must be valid for; empty for other failures.
fn certificate_hint(e: &std::io::Error, host: &str, ca_given: bool) -> String {
    use rustls::CertificateError as C;
    let Some(rustls::Error::InvalidCertificate(cert)) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
    else {
        return String::new();
    };
    match cert {
        C::UnknownIssuer | C::BadSignature if ca_given => " (its certificate is not signed by the CA given: use the \
             coordinator's ca.crt, the agent's --ca, aloftctl's --certificate-authority or its kubeconfig's)"
            .into(),
        C::UnknownIssuer | C::BadSignature => " (its certificate is not signed by a CA this system trusts: give the \
             coordinator's ca.crt, the agent's --ca or aloftctl's --certificate-authority)"
            .into(),
        C::NotValidForName | C::NotValidForNameContext { .. } => format!(
            " (its certificate is not valid for {host:?}: reach it by a name it was issued for, or add this one \
             with `aloft-coordinator serve --tls-san {host}`)"
        ),
        _ => String::new(),
    }
}

fn tls_connector(ca_pem: Option<&[u8]>) -> Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            let mut n = 0;
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                roots.add(cert.context("the CA is not a PEM certificate")?).context("the CA certificate")?;
                n += 1;
            }
            if n == 0 {
                bail!("the CA is not a PEM certificate");
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(anyhow!("no CA given and none found in the system's trust store"));
            }
        }
    }
    let mut cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

/// The whole body of a response.
pub(crate) async fn read_body(mut body: h2::RecvStream) -> Result<Bytes> {
    let mut out = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.context("reading the response")?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if out.is_empty() && body.is_end_stream() {
            // One frame: no copy.
            return Ok(chunk);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// A streaming response (a watch): its status and its body as it arrives.
pub struct StreamingResponse {
    status: u16,
    body: h2::RecvStream,
}

impl StreamingResponse {
    pub(crate) fn new(resp: Response<h2::RecvStream>) -> Self {
        StreamingResponse { status: resp.status().as_u16(), body: resp.into_body() }
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// The next chunk of the body as it arrives (acknowledged to the sender's flow control), or
    /// None at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, h2::Error> {
        match self.body.data().await {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(c)) => {
                let _ = self.body.flow_control().release_capacity(c.len());
                Ok(Some(c))
            }
        }
    }

    /// The body's chunks as they arrive (see [`StreamingResponse::chunk`]).
    pub fn bytes_stream(self) -> impl Stream<Item = Result<Bytes, h2::Error>> + Send + Unpin {
        // An error ends the stream.
        Box::pin(futures::stream::unfold(Some(self), |resp| async move {
            let mut resp = resp?;
            match resp.chunk().await {
                Ok(None) => None,
                Ok(Some(c)) => Some((Ok(c), Some(resp))),
                Err(e) => Some((Err(e), None)),
            }
        }))
    }

    /// The whole body.
    pub async fn bytes(self) -> Result<Bytes> {
        read_body(self.body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(e: rustls::CertificateError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(e))
    }

    /// A refused certificate says what to check; the CA case runs for real in
    /// tests/api_conformance.rs (a client pinning another coordinator's CA).
    #[test]
    fn a_refused_certificate_says_what_to_check() {
        let given = certificate_hint(&refused(rustls::CertificateError::UnknownIssuer), "c1", true);
        assert!(given.contains("not signed by the CA given") && given.contains("--ca"), "{given}");
        let system = certificate_hint(&refused(rustls::CertificateError::BadSignature), "c1", false);
        assert!(system.contains("a CA this system trusts") && system.contains("--certificate-authority"), "{system}");
        let name = certificate_hint(&refused(rustls::CertificateError::NotValidForName), "coord.example", true);
        assert!(name.contains("not valid for \"coord.example\"") && name.contains("--tls-san coord.example"), "{name}");
        let other = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(certificate_hint(&other, "c1", true), "", "not a certificate's refusal");
        assert_eq!(certificate_hint(&refused(rustls::CertificateError::Expired), "c1", true), "");
    }
}
