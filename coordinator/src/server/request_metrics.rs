//! What the API answered, counted as Kubernetes' API server counts it: `apiserver_request_total`,
//! `apiserver_request_duration_seconds` and `apiserver_longrunning_requests`, under the same names
//! and labels, so the dashboards and alerts written for an OpenShift control plane (an error
//! rate by verb and resource, a slow LIST, the number of open watches) read aloft unchanged.
//!
//! Why here and not in the handlers: every answer is counted, including the 401 of a missing
//! token, the 404 of an unknown path and the health endpoints, from one place.
//!
//! Labels carry only names the API knows (verbs, the resource types of [`crate::resources`],
//! `status`), never a piece of the request path, so no client can grow the series without
//! bound. A WATCH is counted once its answer starts and is not timed (it lasts as long as the
//! client keeps it); `apiserver_longrunning_requests` says how many are open.

use super::request::{self, Target};
use axum::body::Body;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use http_body_util::BodyExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// The upper bounds of the duration histogram, in seconds: kube-apiserver's own (the SLO rules
/// of the Kubernetes mixin and OpenShift read `le="1"`, `le="5"`, `le="30"` of this family),
/// after three below its first, since the API's point reads from memory answer well under a
/// millisecond.
const BUCKETS: [f64; 26] = [
    0.0005, 0.001, 0.0025, 0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// What a request addressed, in Kubernetes' label names. Non-resource paths (`/version`,
/// `/metrics`, discovery, health, enrollment) have only a verb, the HTTP method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Route {
    pub verb: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
    pub subresource: &'static str,
    /// `resource` (one named object), `namespace` (a collection in one namespace) or `cluster`.
    pub scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Answered {
    #[prometheus(flatten)]
    route: Route,
    code: u16,
}

impl Route {
    /// The route of a request, from its method, path, query and content type.
    pub fn of(method: &Method, uri: &Uri, headers: &HeaderMap) -> Route {
        let path = uri.path();
        let method_verb = method_name(method);
        let plain = Route { verb: method_verb, group: "", version: "", resource: "", subresource: "", scope: "" };
        let parsed = if let Some(rest) = path.strip_prefix("/apis").filter(|r| r.is_empty() || r.starts_with('/')) {
            request::parse(false, rest)
        } else if let Some(rest) = path.strip_prefix("/api").filter(|r| r.is_empty() || r.starts_with('/')) {
            request::parse(true, rest)
        } else {
            return plain;
        };
        let Ok(Target::Resource(p)) = parsed else { return plain };
        let named = p.name.is_some();
        // As the handler reads it, with the same parser: the last `watch` parameter, its name
        // and value decoded. Read with the name as written, `watch=true&%77atch=false` was a
        // watch here and a list in the handler: a list free of the in-flight limit.
        let watching = || {
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
                .ok()
                .and_then(|q| q.0.into_iter().rev().find(|(k, _)| k == "watch"))
                .is_some_and(|(_, v)| v == "true" || v == "1")
        };
        let applying = || {
            headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/apply-patch"))
        };
        let verb = match method_verb {
            // A GET of one object is a get, `watch` or not (`handlers::watches`).
            "GET" if !named && watching() => "WATCH",
            "GET" if !named => "LIST",
            "PATCH" if applying() => "APPLY",
            v => v,
        };
        Route {
            verb,
            group: p.rt.group,
            version: p.rt.version,
            resource: p.rt.plural,
            // The only subresource the parse accepts; a path naming another is labelled as no resource.
            subresource: if p.subresource.is_some() { "status" } else { "" },
            scope: match (named, p.namespace.is_some()) {
                (true, _) => "resource",
                (false, true) => "namespace",
                (false, false) => "cluster",
            },
        }
    }
}

/// An HTTP method as a label: the ones the API serves by name, any other as `OTHER` (a client
/// may send any token as a method).
fn method_name(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The series, kept for the coordinator's life and registered into each scrape's registry.
#[derive(Clone)]
pub struct RequestMetrics {
    total: Family<Answered, Counter>,
    duration: Family<Route, Histogram, fn() -> Histogram>,
    longrunning: Family<Route, Gauge>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        RequestMetrics {
            total: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            longrunning: Family::default(),
        }
    }
}

impl RequestMetrics {
    /// Count one answer: its code, and unless it is a watch, how long it took.
    pub fn answered(&self, route: &Route, code: u16, took: Duration) {
        self.total.get_or_create(&Answered { route: route.clone(), code }).inc();
        if route.verb != "WATCH" {
            self.duration.get_or_create(route).observe(took.as_secs_f64());
        }
    }

    /// A successful watch's answer, counted as open until its body is dropped (the stream ended,
    /// or the client went away).
    pub fn track_open(&self, route: Route, res: Response) -> Response {
        let gauge = self.longrunning.get_or_create(&route).clone();
        gauge.inc();
        let open = OpenWatch(gauge);
        let (parts, body) = res.into_parts();
        let body = body.map_frame(move |frame| {
            let _ = &open;
            frame
        });
        Response::from_parts(parts, Body::new(body))
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apiserver_request",
            "Requests answered, by verb, resource and HTTP code",
            self.total.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Time from a request's arrival to its answer's start, by verb and resource (watches are not timed)",
            self.duration.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Requests open now that last as long as the client keeps them (watches)",
            self.longrunning.clone(),
        );
    }
}

/// Takes one off the open-watch gauge when the answer's body goes.
struct OpenWatch(Gauge);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The middleware: every request through the router is counted with its answer's code.
pub async fn observe(
    axum::extract::State(ctx): axum::extract::State<super::SharedCtx>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = Route::of(req.method(), req.uri(), req.headers());
    req.extensions_mut().insert(super::inflight::Verb(route.verb));
    let start = std::time::Instant::now();
    let res = next.run(req).await;
    ctx.requests.answered(&route, res.status().as_u16(), start.elapsed());
    if route.verb == "WATCH" && res.status().is_success() {
        return ctx.requests.track_open(route, res);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(method: Method, uri: &str, ctype: Option<&str>) -> Route {
        let mut h = HeaderMap::new();
        if let Some(c) = ctype {
            h.insert("content-type", c.parse().expect("header value"));
        }
        Route::of(&method, &uri.parse().expect("uri"), &h)
    }

    #[test]
    fn verbs_and_scopes_are_kubernetes() {
        let r = route(Method::GET, "/api/v1/nodes", None);
        assert_eq!((r.verb, r.group, r.version, r.resource, r.scope), ("LIST", "", "v1", "nodes", "cluster"));
        let r = route(Method::GET, "/api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=true", None);
        assert_eq!((r.verb, r.scope), ("WATCH", "cluster"));
        let r = route(Method::GET, "/api/v1/nodes/n1", None);
        assert_eq!((r.verb, r.scope), ("GET", "resource"));
        let r = route(Method::GET, "/api/v1/nodes/n1?watch=1", None);
        assert_eq!((r.verb, r.scope), ("GET", "resource"));
        for (query, verb) in [
            ("watch=false", "LIST"),
            ("watch=%74rue", "WATCH"),
            ("watch=1&watch=0", "LIST"),
            // The handler decodes names too: a list, whatever the first one says.
            ("watch=true&%77atch=false", "LIST"),
            ("%77atch=true", "WATCH"),
        ] {
            assert_eq!(route(Method::GET, &format!("/api/v1/nodes?{query}"), None).verb, verb, "{query}");
        }
        let r = route(Method::PATCH, "/api/v1/nodes/n1/status", Some("application/merge-patch+json"));
        assert_eq!((r.verb, r.subresource, r.scope), ("PATCH", "status", "resource"));
        let r = route(
            Method::PATCH,
            "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
            Some("application/apply-patch+yaml"),
        );
        assert_eq!((r.verb, r.group, r.resource), ("APPLY", "machineconfiguration.openshift.io", "machineconfigpools"));
        let r = route(Method::POST, "/api/v1/namespaces/default/events", None);
        assert_eq!((r.verb, r.resource, r.scope), ("POST", "events", "namespace"));
    }

    #[test]
    fn paths_outside_the_resources_carry_only_a_verb() {
        for (m, uri) in [
            (Method::GET, "/readyz?verbose"),
            (Method::GET, "/apis"),
            (Method::GET, "/api/v1"),
            (Method::POST, "/aloft/v1/enroll"),
            // Not a resource: its name must not become a label.
            (Method::GET, "/apis/example.com/v1/anything-a-client-sends"),
            (Method::GET, "/apisx/v1/nodes"),
        ] {
            let r = route(m.clone(), uri, None);
            assert_eq!(
                r,
                Route { verb: method_name(&m), group: "", version: "", resource: "", subresource: "", scope: "" },
                "{uri}"
            );
        }
        assert_eq!(route(Method::from_bytes(b"BREW").expect("method"), "/version", None).verb, "OTHER");
    }

    #[test]
    fn a_watch_is_open_until_its_body_goes_and_is_not_timed() {
        let m = RequestMetrics::default();
        let watch = route(Method::GET, "/api/v1/nodes?watch=1", None);
        m.answered(&watch, 200, Duration::from_secs(30));
        let res = m.track_open(watch.clone(), Response::new(Body::from("x")));
        let text = |m: &RequestMetrics| {
            let mut reg = Registry::default();
            m.register(&mut reg);
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &reg).expect("encode");
            out
        };
        let open = "apiserver_longrunning_requests{verb=\"WATCH\",group=\"\",version=\"v1\",resource=\"nodes\",subresource=\"\",scope=\"cluster\"}";
        let t = text(&m);
        assert!(t.contains(&format!("{open} 1\n")), "{t}");
        assert!(t.contains("apiserver_request_total{verb=\"WATCH\",group=\"\",version=\"v1\",resource=\"nodes\",subresource=\"\",scope=\"cluster\",code=\"200\"} 1\n"), "{t}");
        assert!(!t.contains("apiserver_request_duration_seconds_count{verb=\"WATCH\""), "{t}");
        drop(res);
        assert!(text(&m).contains(&format!("{open} 0\n")));
    }
}
