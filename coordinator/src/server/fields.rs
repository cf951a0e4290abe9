//! Field validation, as kube-apiserver does it (`?fieldValidation=Strict|Warn|Ignore`): fields
//! of a written object that its kind does not have, and keys a JSON body repeats. `Strict`
//! refuses the write (400, `strict decoding error: unknown field "spec.maxUnavailble"`); `Warn`,
//! the default, stores the object and answers with one `Warning` header per field, which kubectl
//! prints; `Ignore` says nothing. kubectl 1.27+ sends `Strict` for `apply`/`create`/`replace`.
//!
//! Only what aloft knows the schema of is checked: the whole NodeDisruptionBudget and core/v1
//! Event, the standard ObjectMeta of every kind checked, the known fields of
//! MachineConfigPool.spec (with aloft's `rollout` and `drain`) and MachineConfig.spec. Ignition
//! configs, statuses, Node specs and label/annotation maps are free: unknown fields there are
//! kept and not reported.
//! Unknown fields are never dropped; an update reports only those it adds, so an object
//! stored under `Warn` can still be changed under `Strict` without first removing them.

use super::error::ApiError;
use crate::resources::ResourceType;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

/// What to do about unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    Strict,
    Warn,
    Ignore,
}

impl Directive {
    /// From the `fieldValidation` query parameter; absent is `Warn`, as in kube-apiserver.
    pub fn from_params(params: &std::collections::HashMap<String, String>) -> Result<Self, ApiError> {
        match params.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => Ok(Directive::Warn),
            Some("Strict") => Ok(Directive::Strict),
            Some("Ignore") => Ok(Directive::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }

    /// Act on what a write carries: an error under `Strict` when there is anything, the
    /// warnings to send under `Warn`, nothing under `Ignore`.
    pub fn judge(self, rt: &ResourceType, problems: Vec<String>) -> Result<Vec<String>, ApiError> {
        match self {
            _ if problems.is_empty() => Ok(Vec::new()),
            Directive::Ignore => Ok(Vec::new()),
            Directive::Warn => Ok(problems),
            Directive::Strict => Err(ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                problems.join(", "),
                kind = rt.kind,
                version = rt.version,
            ))),
        }
    }
}

/// One problem as kube-apiserver words it.
pub fn unknown_field(path: &str) -> String {
    format!("unknown field {path:?}")
}

fn duplicate_field(path: &str) -> String {
    format!("json: duplicate field {path:?}")
}

/// The shape of the parts of a kind that are checked.
enum Shape {
    /// Anything: not checked.
    Any,
    /// An object with exactly these fields.
    Obj(&'static [(&'static str, Shape)]),
    /// A list of one shape.
    List(&'static Shape),
}

use Shape::{Any, List, Obj};

const OWNER_REFERENCE: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("name", Any),
    ("uid", Any),
    ("controller", Any),
    ("blockOwnerDeletion", Any),
]);

/// metav1.ObjectMeta.
const META: Shape = Obj(&[
    ("name", Any),
    ("generateName", Any),
    ("namespace", Any),
    ("selfLink", Any),
    ("uid", Any),
    ("resourceVersion", Any),
    ("generation", Any),
    ("creationTimestamp", Any),
    ("deletionTimestamp", Any),
    ("deletionGracePeriodSeconds", Any),
    ("labels", Any),
    ("annotations", Any),
    ("ownerReferences", List(&OWNER_REFERENCE)),
    ("finalizers", Any),
    ("managedFields", Any),
]);

const REQUIREMENT: Shape = Obj(&[("key", Any), ("operator", Any), ("values", Any)]);
const SELECTOR: Shape = Obj(&[("matchLabels", Any), ("matchExpressions", List(&REQUIREMENT))]);

/// corev1.ObjectReference, which a pool's `spec.configuration` embeds.
const OBJECT_REFERENCE: Shape = Obj(&[
    ("kind", Any),
    ("namespace", Any),
    ("name", Any),
    ("uid", Any),
    ("apiVersion", Any),
    ("resourceVersion", Any),
    ("fieldPath", Any),
]);

const POOL_CONFIGURATION: Shape = Obj(&[
    ("kind", Any),
    ("namespace", Any),
    ("name", Any),
    ("uid", Any),
    ("apiVersion", Any),
    ("resourceVersion", Any),
    ("fieldPath", Any),
    ("source", List(&OBJECT_REFERENCE)),
]);

const NAME_ONLY: Shape = Obj(&[("name", Any)]);

/// MachineConfigPoolSpec of openshift/api, with aloft's extensions.
const POOL_SPEC: Shape = Obj(&[
    ("machineConfigSelector", SELECTOR),
    ("nodeSelector", SELECTOR),
    ("paused", Any),
    ("maxUnavailable", Any),
    ("configuration", POOL_CONFIGURATION),
    ("pinnedImageSets", List(&NAME_ONLY)),
    ("osImageStream", NAME_ONLY),
    (
        "rollout",
        Obj(&[
            ("canary", Any),
            ("soakSeconds", Any),
            ("maxFailures", Any),
            ("prestage", Any),
            (
                "maintenance",
                Obj(&[
                    ("timeZone", Any),
                    ("windows", List(&Obj(&[("days", Any), ("startTime", Any), ("lengthMinutes", Any)]))),
                ]),
            ),
        ]),
    ),
    ("drain", Obj(&[("timeoutSeconds", Any), ("hooks", List(&Obj(&[("url", Any), ("timeoutSeconds", Any)])))])),
]);

/// MachineConfigSpec of openshift/api; `config` is Ignition, read by its own rules.
const MC_SPEC: Shape = Obj(&[
    ("osImageURL", Any),
    ("baseOSExtensionsContainerImage", Any),
    ("config", Any),
    ("kernelArguments", Any),
    ("extensions", Any),
    ("fips", Any),
    ("kernelType", Any),
]);

const NDB_SPEC: Shape =
    Obj(&[("selector", SELECTOR), ("minAvailable", Any), ("maxUnavailable", Any), ("groupBy", Any)]);

const POOL: Shape =
    Obj(&[("apiVersion", Any), ("kind", Any), ("metadata", META), ("spec", POOL_SPEC), ("status", Any)]);
const MACHINE_CONFIG: Shape =
    Obj(&[("apiVersion", Any), ("kind", Any), ("metadata", META), ("spec", MC_SPEC), ("status", Any)]);
const BUDGET: Shape =
    Obj(&[("apiVersion", Any), ("kind", Any), ("metadata", META), ("spec", NDB_SPEC), ("status", Any)]);
const NODE: Shape = Obj(&[("apiVersion", Any), ("kind", Any), ("metadata", META), ("spec", Any), ("status", Any)]);
const FLEET_LOCK: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    ("spec", Obj(&[("maxHolders", Any)])),
    ("status", Any),
]);

const CLUSTER_VERSION: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    (
        "spec",
        Obj(&[
            ("clusterID", Any),
            ("channel", Any),
            ("upstream", Any),
            ("desiredUpdate", Obj(&[("version", Any), ("image", Any), ("force", Any)])),
            ("automaticUpdates", Obj(&[("enabled", Any)])),
        ]),
    ),
    ("status", Any),
]);

/// What aloft reads of OLM's CatalogSource: an HTTP(S) catalog and how it is shown. OLM's pod
/// settings (`grpcPodConfig`, `secrets`, `configMap`) are unknown here: no pod runs them.
const CATALOG_SOURCE: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    (
        "spec",
        Obj(&[
            ("sourceType", Any),
            ("address", Any),
            ("image", Any),
            ("displayName", Any),
            ("publisher", Any),
            ("description", Any),
            ("icon", Obj(&[("base64data", Any), ("mediatype", Any)])),
            ("priority", Any),
            ("updateStrategy", Obj(&[("registryPoll", Obj(&[("interval", Any)]))])),
        ]),
    ),
    ("status", Any),
]);

/// OLM's Subscription, without `spec.config` (the operator pod's settings: no pod runs here).
const SUBSCRIPTION: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    (
        "spec",
        Obj(&[
            ("source", Any),
            ("sourceNamespace", Any),
            ("name", Any),
            ("channel", Any),
            ("startingCSV", Any),
            ("installPlanApproval", Any),
        ]),
    ),
    ("status", Any),
]);

/// OLM's OperatorGroup, without what scopes operator pods' permissions (`serviceAccountName`,
/// `staticProvidedAPIs`): no pod runs here.
const OPERATOR_GROUP: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    ("spec", Obj(&[("targetNamespaces", Any), ("selector", SELECTOR), ("upgradeStrategy", Obj(&[("name", Any)]))])),
    ("status", Any),
]);

const INSTALL_PLAN: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    ("spec", Obj(&[("clusterServiceVersionNames", Any), ("approval", Any), ("approved", Any), ("generation", Any)])),
    ("status", Any),
]);

/// core/v1 Event, every field Kubernetes gives it (`kubectl explain event`).
const EVENT: Shape = Obj(&[
    ("apiVersion", Any),
    ("kind", Any),
    ("metadata", META),
    ("involvedObject", OBJECT_REFERENCE),
    ("reason", Any),
    ("message", Any),
    ("source", Obj(&[("component", Any), ("host", Any)])),
    ("firstTimestamp", Any),
    ("lastTimestamp", Any),
    ("count", Any),
    ("type", Any),
    ("eventTime", Any),
    ("series", Obj(&[("count", Any), ("lastObservedTime", Any)])),
    ("action", Any),
    ("related", OBJECT_REFERENCE),
    ("reportingComponent", Any),
    ("reportingInstance", Any),
]);

/// The checked shape of a kind, or `None` for a kind aloft does not model.
fn kind_shape(rt: &ResourceType) -> Option<&'static Shape> {
    match rt.kind {
        "MachineConfigPool" => Some(&POOL),
        "MachineConfig" => Some(&MACHINE_CONFIG),
        "NodeDisruptionBudget" => Some(&BUDGET),
        "FleetLock" => Some(&FLEET_LOCK),
        "ClusterVersion" => Some(&CLUSTER_VERSION),
        "CatalogSource" => Some(&CATALOG_SOURCE),
        "Subscription" => Some(&SUBSCRIPTION),
        "InstallPlan" => Some(&INSTALL_PLAN),
        "OperatorGroup" => Some(&OPERATOR_GROUP),
        "Node" => Some(&NODE),
        "Event" => Some(&EVENT),
        _ => None,
    }
}

/// The paths (`spec.rollout.canery`, `spec.drain.hooks[0].bogus`) of the fields of `obj` its
/// kind does not have. Values of the wrong type are not looked into: admission names those.
pub fn unknown_fields(rt: &ResourceType, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(shape) = kind_shape(rt) {
        walk(shape, obj, &mut String::new(), &mut out);
    }
    out
}

/// [`unknown_fields`] of `next` that `stored` did not have already: what an update adds.
pub fn new_unknown_fields(rt: &ResourceType, stored: &Value, next: &Value) -> Vec<String> {
    let found = unknown_fields(rt, next);
    if found.is_empty() {
        return found;
    }
    let old: HashSet<String> = unknown_fields(rt, stored).into_iter().collect();
    found.into_iter().filter(|p| !old.contains(p)).collect()
}

fn walk(shape: &Shape, v: &Value, path: &mut String, out: &mut Vec<String>) {
    let len = path.len();
    match (shape, v) {
        (Obj(fields), Value::Object(m)) => {
            for (k, child) in m {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                match fields.iter().find(|(name, _)| name == k) {
                    Some((_, s)) => walk(s, child, path, out),
                    None => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (List(item), Value::Array(a)) => {
            for (i, x) in a.iter().enumerate() {
                use std::fmt::Write;
                let _ = write!(path, "[{i}]");
                walk(item, x, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// A JSON body and the paths of the keys it repeats (serde_json keeps the last silently).
pub fn parse_json(body: &[u8]) -> Result<(Value, Vec<String>), serde_json::Error> {
    let dups = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = Seed { at: None, dups: &dups }.deserialize(&mut de)?;
    de.end()?;
    Ok((v, dups.into_inner().into_iter().map(|p| duplicate_field(&p)).collect()))
}

/// [`super::request::decode_object`], with the keys a JSON or YAML body repeats (worded as
/// kube-apiserver words each: `json: duplicate field "x"`, `line 5: key "x" already set in map`).
pub fn decode_object(headers: &HeaderMap, body: &[u8]) -> Result<(Value, Vec<String>), ApiError> {
    let ctype = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    if ctype.contains("yaml") {
        let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("request body is not UTF-8"))?;
        let (v, dups) = crate::yaml::from_str_checked(text)
            .map_err(|e| ApiError::bad_request(format!("malformed YAML in request body: {e}")))?;
        if !v.is_object() {
            return Err(ApiError::bad_request("request body must be a JSON object"));
        }
        return Ok((v, dups));
    }
    if !(ctype.contains("json") || ctype.is_empty()) {
        return Ok((super::request::decode_object(headers, body)?, Vec::new()));
    }
    let (v, dups) =
        parse_json(body).map_err(|e| ApiError::bad_request(format!("malformed JSON in request body: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    }
    Ok((v, dups))
}

/// Where a value sits, as a chain up to the root; turned into a path only for a duplicate.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct At<'a> {
    parent: Option<&'a At<'a>>,
    step: Step<'a>,
}

fn render(at: &At<'_>) -> String {
    let mut steps = Vec::new();
    let mut cur = Some(at);
    while let Some(a) = cur {
        steps.push(&a.step);
        cur = a.parent;
    }
    let mut out = String::new();
    for s in steps.into_iter().rev() {
        match s {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Reads a value as serde_json's own `Value` does, noting repeated keys.
#[derive(Clone, Copy)]
struct Seed<'a> {
    at: Option<&'a At<'a>>,
    dups: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    crate::value_visit::scalar_visits!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            let at = At { parent: self.at, step: Step::Index(out.len()) };
            match seq.next_element_seed(Seed { at: Some(&at), dups: self.dups })? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let at = At { parent: self.at, step: Step::Key(&k) };
            let v = map.next_value_seed(Seed { at: Some(&at), dups: self.dups })?;
            if out.contains_key(&k) {
                self.dups.borrow_mut().push(render(&at));
            }
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// How many characters of warnings a response carries before they are cut short, and how
/// short, as kube-apiserver cuts them: a write with 20,000 odd finalizers answered with 3.4 MB
/// of headers, more than clients read.
const WARNINGS_TOTAL_CHARS: usize = 4 * 1024;
const WARNING_CUT_CHARS: usize = 256;

/// `response` with one `Warning: 299 - "<text>"` header per warning, as kube-apiserver sends
/// them (kubectl prints each as `Warning: <text>`): each text once; past 4 Ki characters in all,
/// each cut to 256, and the rest left out once the cut ones reach 4 Ki too.
pub fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&String> = warnings.iter().filter(|w| seen.insert(w.as_str())).collect();
    let cutting = unique.iter().map(|w| w.chars().count()).sum::<usize>() > WARNINGS_TOTAL_CHARS;
    let mut total = 0;
    for w in unique {
        if cutting && total >= WARNINGS_TOTAL_CHARS {
            break;
        }
        let shown: String = if cutting && w.chars().count() > WARNING_CUT_CHARS {
            w.chars().take(WARNING_CUT_CHARS - 3).chain("...".chars()).collect()
        } else {
            w.clone()
        };
        total += shown.chars().count();
        let text: String = shown.chars().flat_map(char::escape_default).collect();
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append("warning", v);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{MACHINE_CONFIG as MC, MACHINE_CONFIG_POOL, NODE_DISRUPTION_BUDGET};
    use serde_json::json;

    #[test]
    fn warnings_are_said_once_and_cut_short_past_4ki_characters() {
        let headers = |warnings: &[String]| -> Vec<String> {
            let r = with_warnings(axum::response::IntoResponse::into_response(()), warnings);
            r.headers().get_all("warning").iter().map(|v| v.to_str().unwrap_or("").to_string()).collect()
        };
        let few = vec!["a".to_string(), "b".to_string(), "a".to_string()];
        assert_eq!(headers(&few), ["299 - \"a\"", "299 - \"b\""], "each text once");
        let many: Vec<String> = (0..20_000).map(|i| format!("finalizer {i}: {}", "x".repeat(300))).collect();
        let cut = headers(&many);
        let chars: usize = cut.iter().map(|h| h.len() - "299 - \"\"".len()).sum();
        assert!(chars < WARNINGS_TOTAL_CHARS + WARNING_CUT_CHARS, "{chars} characters in {} headers", cut.len());
        assert!(cut[0].ends_with("...\"") && cut[0].len() == WARNING_CUT_CHARS + "299 - \"\"".len(), "{}", cut[0]);
    }

    #[test]
    fn unknown_fields_are_found_where_the_schema_is_known() {
        let pool = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "w", "labels": {"free": "x"}, "lables": {}},
            "spec": {"maxUnavailble": 3, "rollout": {"canery": 1, "soakSecond": 1800},
                     "drain": {"hooks": [{"url": "http://x/", "bogus": 1}]},
                     "nodeSelector": {"matchLabels": {"any": "thing"}, "matchExpressions": [{"key": "k", "operator": "Exists", "vals": []}]}},
            "status": {"whatever": 1}, "extra": true});
        let mut found = unknown_fields(&MACHINE_CONFIG_POOL, &pool);
        found.sort();
        assert_eq!(
            found,
            [
                "extra",
                "metadata.lables",
                "spec.drain.hooks[0].bogus",
                "spec.maxUnavailble",
                "spec.nodeSelector.matchExpressions[0].vals",
                "spec.rollout.canery",
                "spec.rollout.soakSecond",
            ]
        );
        let mc = json!({"spec": {"confg": {}, "config": {"ignition": {"version": "3.2.0"}, "anything": 1},
            "kernelArguments": ["a"], "osImageURL": "x"}});
        assert_eq!(unknown_fields(&MC, &mc), ["spec.confg"]);
        let ndb = json!({"spec": {"maxUnavialable": 1, "selector": {}}});
        assert_eq!(unknown_fields(&NODE_DISRUPTION_BUDGET, &ndb), ["spec.maxUnavialable"]);
        let node = json!({"spec": {"podCIDR": "x", "taints": []}, "status": {"nodeInfo": {}}});
        assert!(unknown_fields(&crate::resources::NODE, &node).is_empty());
        let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "lables": {}},
            "involvedObject": {"kind": "Node", "name": "n1", "uid": "u", "nmae": "x"}, "reason": "R", "message": "m",
            "source": {"component": "c", "host": "h"}, "firstTimestamp": "t", "lastTimestamp": "t", "count": 2,
            "type": "Normal", "eventTime": null, "series": {"count": 2, "lastObservedTime": "t"}, "action": "a",
            "related": {"kind": "Node", "name": "n2"}, "reportingComponent": "c", "reportingInstance": "i",
            "bogusTop": 1});
        let mut found = unknown_fields(&crate::resources::EVENT, &event);
        found.sort();
        assert_eq!(found, ["bogusTop", "involvedObject.nmae", "metadata.lables"]);
        // An update reports what it adds, not what was stored before.
        let mut next = pool.clone();
        next["spec"]["paused"] = json!(true);
        assert!(new_unknown_fields(&MACHINE_CONFIG_POOL, &pool, &next).is_empty());
        next["spec"]["pasued"] = json!(true);
        assert_eq!(new_unknown_fields(&MACHINE_CONFIG_POOL, &pool, &next), ["spec.pasued"]);
    }

    #[test]
    fn duplicate_keys_are_found_and_the_last_wins() {
        let (v, dups) =
            parse_json(br#"{"metadata": {"name": "a"}, "spec": {"l": [{"x": 1, "x": 2}]}, "metadata": {"name": "b"}}"#)
                .unwrap();
        assert_eq!(v["metadata"]["name"], "b", "as serde_json (and Go) read it");
        assert_eq!(v["spec"]["l"][0]["x"], 2);
        assert_eq!(dups, [r#"json: duplicate field "spec.l[0].x""#, r#"json: duplicate field "metadata""#]);
        let plain = br#"{"a": [1, 2.5, -3, "s", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        let (v, dups) = parse_json(plain).unwrap();
        assert!(dups.is_empty());
        assert_eq!(v, serde_json::from_slice::<Value>(plain).unwrap());
        assert!(parse_json(b"{} x").is_err(), "trailing characters");
        assert!(parse_json(b"{\"a\": ").is_err());
    }

    #[test]
    fn directives() {
        let p = |v: &str| std::collections::HashMap::from([("fieldValidation".to_string(), v.to_string())]);
        assert_eq!(Directive::from_params(&Default::default()).unwrap(), Directive::Warn);
        assert_eq!(Directive::from_params(&p("Strict")).unwrap(), Directive::Strict);
        assert_eq!(Directive::from_params(&p("Ignore")).unwrap(), Directive::Ignore);
        let e = Directive::from_params(&p("strictly")).unwrap_err();
        assert_eq!(e.status.code, 400);
        assert!(e.status.message.contains("\"strictly\""), "{}", e.status.message);
        let problems = vec![unknown_field("spec.x")];
        assert_eq!(Directive::Warn.judge(&MACHINE_CONFIG_POOL, problems.clone()).unwrap(), problems);
        assert!(Directive::Ignore.judge(&MACHINE_CONFIG_POOL, problems.clone()).unwrap().is_empty());
        let e = Directive::Strict.judge(&MACHINE_CONFIG_POOL, problems).unwrap_err();
        assert_eq!(
            e.status.message,
            "MachineConfigPool in version \"v1\" cannot be handled as a MachineConfigPool: strict decoding error: \
             unknown field \"spec.x\""
        );
        let r = with_warnings(axum::response::IntoResponse::into_response(()), &[unknown_field("spec.a\"b")]);
        assert_eq!(r.headers().get("warning").unwrap(), r#"299 - "unknown field \"spec.a\\\"b\"""#);
    }
}
