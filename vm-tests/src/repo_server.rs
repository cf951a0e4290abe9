//! A static file server for the image's ostree repo on a loopback port: guests reach it as
//! `http://10.0.2.100/repo` through a `guestfwd`. Counts requests, so a test can tell whether a
//! node downloaded anything.

use anyhow::{Context, Result};
use axum::Router;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tower_http::services::ServeDir;

pub struct RepoServer {
    pub port: u16,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RepoServer {
    /// Serve `repo` (a directory) under `/repo` on 127.0.0.1, a free port.
    pub async fn start(repo: &Path) -> Result<RepoServer> {
        let requests = Arc::new(AtomicU64::new(0));
        let counter = requests.clone();
        let app = Router::new().nest_service("/repo", ServeDir::new(repo)).layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                counter.fetch_add(1, Ordering::Relaxed);
                async move { next.run(req).await }
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the repo server")?;
        let port = listener.local_addr()?.port();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "repo server stopped");
            }
        });
        tracing::info!(port, repo = %repo.display(), "serving the ostree repo (guests: http://10.0.2.100/repo)");
        Ok(RepoServer { port, requests, task })
    }

    /// Requests served so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for RepoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
