//! The client's proxy settings from the environment (`HTTPS_PROXY`, `NO_PROXY`) through a
//! CONNECT proxy on loopback, against a real coordinator. A test binary with one test: it sets
//! the process's environment, which no other test may see.

use aloft_tests::{Client, ClientConfig, Coordinator};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A CONNECT proxy on loopback: records each CONNECT target, answers `status` (200 tunnels).
async fn proxy(status: u16) -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = l.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if inbound.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(head.lines().next().unwrap_or("").to_string());
                if status != 200 {
                    let _ = inbound.write_all(format!("HTTP/1.1 {status} Refused\r\n\r\n").as_bytes()).await;
                    return;
                }
                let Ok(mut outbound) = TcpStream::connect(target).await else { return };
                let _ = inbound.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await;
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn https_proxy_and_no_proxy_from_the_environment() {
    let c = Coordinator::start();
    let port = c.url().rsplit(':').next().unwrap().trim_end_matches('/').to_string();
    let cfg = ClientConfig { server: c.url().to_string(), ca_pem: Some(c.ca_pem()), token: Some(c.admin_token()) };
    for v in
        ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"]
    {
        // This binary's only test that touches the environment.
        std::env::remove_var(v);
    }

    let (url, seen) = proxy(200).await;
    std::env::set_var("HTTPS_PROXY", &url);
    let through = Client::new(&cfg).unwrap();
    let nodes = through.get("/api/v1/nodes").await.unwrap().into_result().unwrap();
    assert_eq!(nodes["kind"], "NodeList");
    let lines = seen.lock().unwrap().clone();
    assert_eq!(lines, vec![format!("CONNECT 127.0.0.1:{port} HTTP/1.1")], "the request went through the proxy");

    // NO_PROXY names the coordinator: straight there, the proxy sees nothing new.
    std::env::set_var("NO_PROXY", "127.0.0.1");
    let direct = Client::new(&cfg).unwrap();
    direct.get("/api/v1/nodes").await.unwrap().into_result().unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1, "NO_PROXY bypasses the proxy");
    std::env::remove_var("NO_PROXY");

    // A proxy that refuses the tunnel: the error names the proxy, nothing reaches the coordinator.
    let (refusing, seen) = proxy(403).await;
    std::env::set_var("HTTPS_PROXY", &refusing);
    let refused = Client::new(&cfg).unwrap();
    let e = refused.get("/api/v1/nodes").await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("proxy") && msg.contains(&refusing), "{msg}");
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Only http:// proxies (CONNECT) are supported; an https:// one is refused by name.
    std::env::set_var("HTTPS_PROXY", "https://127.0.0.1:1");
    let e = Client::new(&cfg).unwrap().get("/api/v1/nodes").await.unwrap_err();
    assert!(format!("{e:#}").contains("only http:// proxies"), "{e:#}");
    std::env::remove_var("HTTPS_PROXY");
}
