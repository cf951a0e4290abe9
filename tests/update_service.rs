//! An update service on loopback for the tests: serves a Cincinnati graph per channel at
//! `/graph` (as OpenShift's update service serves `/api/upgrades_info/v1/graph`), records each
//! query, and can be told to fail. The graphs are the tests' (derived from the real served
//! graphs in shared/testdata/cincinnati-graphs, or small ones naming the tests' OS commits).

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Served {
    /// What each channel answers: (HTTP status, body).
    answers: HashMap<String, (u16, Value)>,
    /// Every query, with the Accept header as `accept`.
    queries: Vec<BTreeMap<String, String>>,
}

pub struct UpdateService {
    /// The graph URL, for `spec.upstream`.
    pub url: String,
    served: Arc<Mutex<Served>>,
    /// Serving until dropped.
    _server: crate::LoopbackServer,
}

impl UpdateService {
    pub async fn start() -> UpdateService {
        let served = Arc::new(Mutex::new(Served::default()));
        let app = axum::Router::new().route("/graph", axum::routing::get(serve_graph)).with_state(served.clone());
        let server = crate::LoopbackServer::start(app).await;
        UpdateService { url: format!("http://{}/graph", server.addr), served, _server: server }
    }

    /// Serve `graph` for `channel`.
    pub fn set(&self, channel: &str, graph: Value) {
        self.answer(channel, 200, graph);
    }

    /// Answer `channel`'s queries with `code` and `body`.
    pub fn answer(&self, channel: &str, code: u16, body: Value) {
        self.served.lock().expect("not poisoned").answers.insert(channel.to_string(), (code, body));
    }

    /// The queries so far.
    pub fn queries(&self) -> Vec<BTreeMap<String, String>> {
        self.served.lock().expect("not poisoned").queries.clone()
    }
}

async fn serve_graph(
    State(served): State<Arc<Mutex<Served>>>,
    Query(mut q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    q.insert("accept".into(), accept);
    let mut s = served.lock().expect("not poisoned");
    let channel = q.get("channel").cloned().unwrap_or_default();
    s.queries.push(q);
    let (code, body) =
        s.answers.get(&channel).cloned().unwrap_or_else(|| {
            (400, json!({"kind": "invalid_params", "value": format!("unknown channel {channel:?}")}))
        });
    (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), axum::Json(body))
}

/// A graph of `releases` (version, payload) with `edges` between versions and conditional edges
/// `(from, to, risk name, message)` whose risk always applies.
pub fn graph(releases: &[(&str, &str)], edges: &[(&str, &str)], risky: &[(&str, &str, &str, &str)]) -> Value {
    let index = |v: &str| releases.iter().position(|(r, _)| *r == v).expect("a release of the graph");
    json!({
        "version": 1,
        "nodes": releases.iter().map(|(v, p)| json!({
            "version": v, "payload": p,
            "metadata": {"url": format!("https://notes.example/{v}"),
                "io.openshift.upgrades.graph.release.channels": "stable-1"},
        })).collect::<Vec<_>>(),
        "edges": edges.iter().map(|(a, b)| json!([index(a), index(b)])).collect::<Vec<_>>(),
        "conditionalEdges": risky.iter().map(|(a, b, name, message)| json!({
            "edges": [{"from": a, "to": b}],
            "risks": [{"name": name, "message": message, "url": format!("https://bugs.example/{name}"),
                "matchingRules": [{"type": "Always"}]}],
        })).collect::<Vec<_>>(),
    })
}

/// The updates a graph offers from `version`, read from its JSON here: (unconditional
/// destinations without the conditional ones, conditional destinations), each sorted.
pub fn offered(g: &Value, version: &str) -> (Vec<String>, Vec<String>) {
    let nodes = g["nodes"].as_array().unwrap();
    let from = nodes.iter().position(|n| n["version"] == version).unwrap();
    let mut conditional: Vec<String> = g["conditionalEdges"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["edges"].as_array().unwrap().iter())
        .filter(|e| e["from"] == version)
        .map(|e| e["to"].as_str().unwrap().to_string())
        .collect();
    conditional.sort();
    conditional.dedup();
    let mut plain: Vec<String> = g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e[0].as_u64() == Some(from as u64))
        .map(|e| nodes[e[1].as_u64().unwrap() as usize]["version"].as_str().unwrap().to_string())
        .filter(|v| !conditional.contains(v))
        .collect();
    plain.sort();
    (plain, conditional)
}

/// OpenShift's worker pool, as the releases' tests start from (no nodes unless a test enrolls some).
pub async fn worker_pool(admin: &crate::Client) {
    admin
        .post(&crate::path_of(&crate::MACHINE_CONFIG_POOL, None), &crate::machine_config_pool("worker", "worker"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
}
