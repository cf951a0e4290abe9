//! Paged LIST: `limit` and `continue`, which kubectl sends by default (`--chunk-size=500`) and
//! client-go's pager and informers use for their first list.
//!
//! Every page of one list comes from the same snapshot and carries its `resourceVersion`, so a
//! client that lists in pages and then watches from that revision misses nothing, as with
//! Kubernetes. Kubernetes reads later pages from etcd at the first page's revision; this store
//! keeps only each object's newest version and a compacted log, which cannot say what every key
//! held at an older revision. So the first page takes the whole (filtered) list once, as an
//! unpaged list does, and keeps what follows the first page, as the stored JSON, for the later
//! pages to slice. For the resources the store keeps in memory (Nodes, MachineConfigs, pools)
//! that JSON is the store's own copy, shared: a kept list costs a pointer per item until the
//! objects change, and only the versions replaced since stay alive for it. A 10,000-node
//! `kubectl get nodes` was one 12 MB response; it is now 20 pages.
//!
//! The kept lists are bounded in bytes and age, and dropped once their last page is served. A
//! continue token whose list is gone gets 410 Expired with Kubernetes' message, and the client
//! starts a new list, as it does after an etcd compaction.

use super::error::ApiError;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bytes of serialized items all kept lists may hold together; the oldest go first. Counted
/// whole even where an item is shared with the store's memory: the bound holds once every kept
/// object has changed.
pub const MAX_BYTES: usize = 128 * 1024 * 1024;
/// How long a kept list waits for its next page (etcd's default compaction interval).
pub const MAX_AGE: Duration = Duration::from_secs(300);

const EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. \
                       You can start a new list without the continue parameter.";

/// What a list request asked for: `limit` (0: everything) and where to continue from.
#[derive(Debug, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: usize,
    pub from: Option<Token>,
}

/// The continue token: which kept list, at which revision, from which item. Opaque to clients
/// (base64 of this JSON), as Kubernetes' is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    rv: u64,
    id: u64,
    offset: usize,
}

impl Token {
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(s: &str) -> Result<Token, ApiError> {
        let invalid = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s.trim_end_matches('='))
            .map_err(|e| invalid(&format!("not base64: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| invalid(&format!("not a token this server issued: {e}")))
    }
}

impl PageRequest {
    /// Reads `limit`, `continue` and `resourceVersion` from a list request's query.
    pub fn from_params(params: &HashMap<String, String>) -> Result<PageRequest, ApiError> {
        let limit = match params.get("limit").map(String::as_str) {
            None | Some("") => 0,
            Some(s) => s
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("limit {s:?} is not a number of items (0 or more)")))?,
        };
        let from = match params.get("continue").map(String::as_str) {
            None | Some("") => None,
            Some(s) => {
                if params.get("resourceVersion").is_some_and(|rv| !rv.is_empty()) {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                Some(Token::decode(s)?)
            }
        };
        Ok(PageRequest { limit, from })
    }
}

/// One page: its items as stored JSON (a JSON answer copies them as they are; only a Table
/// needs them parsed), the list's revision, and the token for the next page with the count of
/// items after this page (none when this page is the last).
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Arc<str>>,
    pub revision: u64,
    pub next: Option<(String, usize)>,
}

struct Kept {
    id: u64,
    /// The resource, namespace and selectors the list was for: a token is only good for the same.
    query: String,
    revision: u64,
    items: Vec<Arc<str>>,
    bytes: usize,
    created: Instant,
}

#[derive(Default)]
struct State {
    next_id: u64,
    kept: VecDeque<Kept>,
    bytes: usize,
}

/// The lists kept for their later pages.
#[derive(Default)]
pub struct Pages {
    state: Mutex<State>,
}

impl Pages {
    /// The first page of a fresh list at `revision`: `page` (at most `limit` items) and the
    /// matching items after it, all as stored JSON; the rest is kept for the later pages.
    pub fn first(&self, query: String, revision: u64, page: Vec<Arc<str>>, rest: Vec<Arc<str>>) -> Page {
        if rest.is_empty() {
            return Page { items: page, revision, next: None };
        }
        let remaining = rest.len();
        let bytes = rest.iter().map(|s| s.len()).sum();
        let mut st = self.lock();
        st.expire(Instant::now());
        let id = st.next_id;
        st.next_id += 1;
        st.bytes += bytes;
        st.kept.push_back(Kept { id, query, revision, items: rest, bytes, created: Instant::now() });
        while st.bytes > MAX_BYTES && st.kept.len() > 1 {
            st.pop_oldest();
        }
        let token = Token { rv: revision, id, offset: 0 };
        Page { items: page, revision, next: Some((token.encode(), remaining)) }
    }

    /// The page `from` points at, for the same `query`; up to `limit` items (0: all the rest).
    pub fn next(&self, query: &str, from: &Token, limit: usize) -> Result<Page, ApiError> {
        let mut st = self.lock();
        st.expire(Instant::now());
        let Some(i) = st.kept.iter().position(|k| k.id == from.id && k.revision == from.rv) else {
            return Err(ApiError::gone(EXPIRED));
        };
        let kept = &st.kept[i];
        if kept.query != query {
            return Err(ApiError::bad_request("continue key is not valid: it was issued for another list"));
        }
        if from.offset > kept.items.len() {
            return Err(ApiError::bad_request("continue key is not valid: it points past the list"));
        }
        let end = if limit == 0 { kept.items.len() } else { from.offset.saturating_add(limit).min(kept.items.len()) };
        let items = kept.items[from.offset..end].to_vec();
        let remaining = kept.items.len() - end;
        let revision = kept.revision;
        let next = if remaining == 0 {
            // The last page: nothing will ask for this list again.
            let gone = st.kept.remove(i).map(|k| k.bytes).unwrap_or(0);
            st.bytes -= gone;
            None
        } else {
            Some((Token { rv: revision, id: from.id, offset: end }.encode(), remaining))
        };
        Ok(Page { items, revision, next })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn kept_bytes(&self) -> (usize, usize) {
        let st = self.lock();
        (st.kept.len(), st.bytes)
    }
}

impl State {
    fn pop_oldest(&mut self) {
        if let Some(k) = self.kept.pop_front() {
            self.bytes -= k.bytes;
        }
    }

    fn expire(&mut self, now: Instant) {
        while self.kept.front().is_some_and(|k| now.duration_since(k.created) > MAX_AGE) {
            self.pop_oldest();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn items(n: usize) -> Vec<Value> {
        (0..n).map(|i| json!({"metadata": {"name": format!("n{i:03}")}})).collect()
    }

    /// The first page of `all` at `limit`, as the list handler splits it.
    fn first(pages: &Pages, query: &str, revision: u64, mut all: Vec<Value>, limit: usize) -> Page {
        let rest = if limit == 0 || all.len() <= limit { Vec::new() } else { all.split_off(limit) };
        let text = |v: Vec<Value>| v.iter().map(|v| Arc::from(v.to_string())).collect();
        pages.first(query.into(), revision, text(all), text(rest))
    }

    fn names(p: &Page) -> Vec<String> {
        p.items
            .iter()
            .map(|s| serde_json::from_str::<Value>(s).unwrap()["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn pages_walk_one_snapshot_and_the_last_page_frees_it() {
        let pages = Pages::default();
        let first = first(&pages, "nodes", 7, items(5), 2);
        assert_eq!(names(&first), ["n000", "n001"]);
        let (token, remaining) = first.next.clone().unwrap();
        assert_eq!(remaining, 3);
        assert_eq!(pages.kept_bytes().0, 1);
        let from = PageRequest::from_params(&params(&[("limit", "2"), ("continue", &token)])).unwrap();
        let second = pages.next("nodes", from.from.as_ref().unwrap(), 2).unwrap();
        assert_eq!((names(&second), second.revision), (vec!["n002".to_string(), "n003".to_string()], 7));
        let (token, remaining) = second.next.clone().unwrap();
        assert_eq!(remaining, 1);
        let third = pages.next("nodes", &Token::decode(&token).unwrap(), 2).unwrap();
        assert_eq!(names(&third), ["n004"]);
        assert!(third.next.is_none());
        assert_eq!(pages.kept_bytes(), (0, 0), "the last page drops the kept list");
        // Asking again for a list already finished: Expired, as after a compaction.
        let again = pages.next("nodes", &Token::decode(&token).unwrap(), 2).unwrap_err();
        assert_eq!((again.status.code, again.status.reason.as_str()), (410, "Expired"), "{:?}", again.status);
    }

    #[test]
    fn a_list_that_fits_keeps_nothing() {
        let pages = Pages::default();
        for limit in [0, 5, 9] {
            let p = first(&pages, "nodes", 1, items(5), limit);
            assert_eq!(p.items.len(), 5);
            assert!(p.next.is_none());
        }
        assert_eq!(pages.kept_bytes(), (0, 0));
    }

    #[test]
    fn bad_tokens_and_parameters_are_refused_by_name() {
        let pages = Pages::default();
        let first = first(&pages, "nodes", 3, items(4), 1);
        let (token, _) = first.next.unwrap();
        let t = Token::decode(&token).unwrap();
        let other = pages.next("pods", &t, 1).unwrap_err();
        assert!(other.status.message.contains("issued for another list"), "{:?}", other.status);
        let past = Token { offset: 99, ..t.clone() };
        assert_eq!(pages.next("nodes", &past, 1).unwrap_err().status.code, 400);
        let stale = Token { rv: 2, ..t };
        assert_eq!(pages.next("nodes", &stale, 1).unwrap_err().status.code, 410);
        for (k, v, want) in [
            ("limit", "-1", "limit \"-1\" is not a number"),
            ("limit", "ten", "limit \"ten\" is not a number"),
            ("continue", "%%%", "continue key is not valid: not base64"),
            ("continue", "e30", "continue key is not valid: not a token"),
        ] {
            let e = PageRequest::from_params(&params(&[(k, v)])).unwrap_err();
            assert!(e.status.message.starts_with(want), "{k}={v}: {:?}", e.status);
        }
        let both = PageRequest::from_params(&params(&[("continue", &token), ("resourceVersion", "3")])).unwrap_err();
        assert!(both.status.message.contains("not allowed when using continue"));
        assert_eq!(PageRequest::from_params(&params(&[])).unwrap(), PageRequest { limit: 0, from: None });
    }

    #[test]
    fn the_oldest_kept_lists_go_when_the_bytes_run_out() {
        let pages = Pages::default();
        let big = "x".repeat(1024 * 1024);
        let list = |n: usize| -> Vec<Value> { (0..n).map(|i| json!({"i": i, "pad": big})).collect() };
        // Each keeps 99 MiB after its first item: the second pushes the first out.
        let a = first(&pages, "a", 1, list(100), 1);
        let b = first(&pages, "b", 1, list(100), 1);
        let (ta, _) = a.next.unwrap();
        let (tb, _) = b.next.unwrap();
        assert_eq!(pages.next("a", &Token::decode(&ta).unwrap(), 1).unwrap_err().status.code, 410);
        assert_eq!(pages.next("b", &Token::decode(&tb).unwrap(), 1).unwrap().items.len(), 1);
        let (n, bytes) = pages.kept_bytes();
        assert_eq!(n, 1);
        assert!(bytes <= MAX_BYTES, "{bytes}");
    }

    #[test]
    fn kept_lists_expire() {
        let mut st = State::default();
        st.kept.push_back(Kept {
            id: 0,
            query: "nodes".into(),
            revision: 1,
            items: vec!["{}".into()],
            bytes: 2,
            created: Instant::now(),
        });
        st.bytes = 2;
        st.expire(Instant::now());
        assert_eq!(st.kept.len(), 1);
        st.expire(Instant::now() + MAX_AGE + Duration::from_secs(1));
        assert_eq!((st.kept.len(), st.bytes), (0, 0));
    }
}
