//! A file server on loopback for the tests' operator catalogs: serves a text body per path (as
//! any web server serves the output of `opm render`, or OLM v1's catalogd serves
//! `/api/v1/all`), counts the reads, and can be told to answer an error.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Served {
    /// What each path answers: (HTTP status, body).
    answers: HashMap<String, (u16, String)>,
    reads: HashMap<String, usize>,
}

pub struct CatalogServer {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    served: Arc<Mutex<Served>>,
    /// Serving until dropped.
    _server: crate::LoopbackServer,
}

impl CatalogServer {
    pub async fn start() -> CatalogServer {
        let served = Arc::new(Mutex::new(Served::default()));
        let app = axum::Router::new().route("/{*path}", axum::routing::get(serve)).with_state(served.clone());
        let server = crate::LoopbackServer::start(app).await;
        CatalogServer { base: format!("http://{}", server.addr), served, _server: server }
    }

    /// Serve `body` at `path` (no leading slash); returns its URL.
    pub fn set(&self, path: &str, body: &str) -> String {
        self.answer(path, 200, body)
    }

    /// Answer `path` with `code` and `body`; returns its URL.
    pub fn answer(&self, path: &str, code: u16, body: &str) -> String {
        self.served.lock().expect("not poisoned").answers.insert(path.to_string(), (code, body.to_string()));
        self.url(path)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    /// How many times `path` was read.
    pub fn reads(&self, path: &str) -> usize {
        self.served.lock().expect("not poisoned").reads.get(path).copied().unwrap_or(0)
    }
}

async fn serve(State(served): State<Arc<Mutex<Served>>>, Path(path): Path<String>) -> impl IntoResponse {
    let mut s = served.lock().expect("not poisoned");
    *s.reads.entry(path.clone()).or_default() += 1;
    let (code, body) = s.answers.get(&path).cloned().unwrap_or_else(|| (404, format!("no catalog at /{path}\n")));
    (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body)
}
