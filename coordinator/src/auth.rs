//! Who may do what. Every request carries a bearer token; the store keeps only its SHA-256, with
//! a name and a role. Roles:
//! - `admin`: everything;
//! - `viewer`: get, list and watch everything (dashboards, auditors, CI);
//! - `bootstrap`: may only enroll nodes (`POST /aloft/v1/enroll`), which mints `node:` tokens,
//!   giving them only the labels of Kubernetes' own namespaces it allows ([`EnrollLabels`];
//!   stored as `bootstrap:key=value,...`);
//! - `node:<name>`: an enrolled agent: read its own Node and the rendered MachineConfigs its Node
//!   names (desiredConfig, and `aloft.dev/prestageConfig`, the one the node controller asks it
//!   to pre-stage; both the coordinator's alone to write), write its own Node's status and
//!   annotations but those. Nothing else, so one compromised node cannot read another pool's
//!   config or fake another's state.

use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// What a request does, in Kubernetes' verb names (they appear in 403 messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
    pub fn is_read(self) -> bool {
        matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
    /// A Kubernetes verb name (as in a SelfSubjectAccessReview); None for the ones aloft does not
    /// serve (`deletecollection`, `*`, `use`, ...).
    pub fn parse(s: &str) -> Option<Verb> {
        [Verb::Get, Verb::List, Verb::Watch, Verb::Create, Verb::Update, Verb::Patch, Verb::Delete]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Admin,
    Viewer,
    /// May only enroll nodes, giving them the labels of Kubernetes' own it allows.
    Bootstrap(EnrollLabels),
    Node(String),
}

/// The labels in Kubernetes' own namespaces (`kubernetes.io`, `k8s.io`) a bootstrap token may
/// give the nodes it enrolls; any other label it may give freely. Such labels choose a node's
/// pool (`node-role.kubernetes.io/<role>`), and so which rendered configs, secrets included, its
/// credential may read: a token every new host holds must not choose them freely. Kubernetes'
/// NodeRestriction admission refuses them from a kubelet for the same reason, and allows the
/// same few a host says of itself (hostname, OS, architecture, instance type, zone, region,
/// and the `kubelet.kubernetes.io` and `node.kubernetes.io` namespaces), which are allowed here
/// too. `None` is a token made without a list (`token create --role bootstrap`): it may give
/// `node-role.kubernetes.io/worker=`, a worker's role, as OpenShift serves the worker config
/// to any host that asks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnrollLabels(pub Option<BTreeMap<String, String>>);

/// The label a bootstrap token made without a list may give.
pub const WORKER_ROLE_LABEL: &str = "node-role.kubernetes.io/worker";

/// Labels of Kubernetes' namespaces a host may set of itself (NodeRestriction's list).
const SELF_LABELS: [&str; 10] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
];

/// Whether `key` is a label of Kubernetes' own namespaces that a host may not give itself.
pub fn is_restricted_label(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else { return false };
    let in_domain = |d: &str, base: &str| d == base || d.ends_with(&format!(".{base}"));
    if !(in_domain(domain, "kubernetes.io") || in_domain(domain, "k8s.io")) {
        return false;
    }
    !(SELF_LABELS.contains(&key)
        || in_domain(domain, "kubelet.kubernetes.io")
        || in_domain(domain, "node.kubernetes.io"))
}

impl EnrollLabels {
    /// `key=value,key2=` (an empty value written `key=`), as `--labels` takes them.
    pub fn parse(list: &str) -> Result<Self, RoleError> {
        let mut out = BTreeMap::new();
        for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                RoleError(format!("label {pair:?} must be written key=value (key= for an empty value)"))
            })?;
            let errors: Vec<String> = aloft_api::selector::label_key_errors(k)
                .into_iter()
                .chain(aloft_api::selector::label_value_errors(v))
                .collect();
            if !errors.is_empty() {
                return Err(RoleError(format!("label {pair:?}: {}", errors.join("; "))));
            }
            out.insert(k.to_string(), v.to_string());
        }
        Ok(EnrollLabels(Some(out)))
    }

    /// The listed labels a node may carry without being allowed them (outside Kubernetes'
    /// namespaces, or ones a host says of itself): listing them changes nothing, and a list
    /// that names only such labels takes away the worker role a token without a list allows.
    pub fn needless(&self) -> Vec<&str> {
        self.0.iter().flat_map(|m| m.keys()).map(String::as_str).filter(|k| !is_restricted_label(k)).collect()
    }

    /// Whether a node enrolled with this token may carry the label `key=value`.
    pub fn allows(&self, key: &str, value: &str) -> bool {
        if !is_restricted_label(key) {
            return true;
        }
        match &self.0 {
            None => key == WORKER_ROLE_LABEL && value.is_empty(),
            Some(allowed) => allowed.get(key).is_some_and(|v| v == value),
        }
    }
}

impl Identity {
    /// Whether this caller may do anything at all, whatever the verb, resource or path (also the
    /// ones aloft does not serve, such as `deletecollection` or `*`).
    pub fn allowed_everything(&self) -> bool {
        self.role == Role::Admin
    }

    /// The Kubernetes user this caller is, as `kubectl auth whoami` shows it (SelfSubjectReview):
    /// `(username, groups)`. Named like kube-apiserver's own identities: a node credential is the
    /// kubelet's `system:node:NAME` in `system:nodes`, a bootstrap token `system:bootstrap:NAME` in
    /// `system:bootstrappers`, an admin token its name in `system:masters`, a viewer its name in
    /// `aloft:viewers`; every one is also in `system:authenticated`. Only the role decides what a
    /// caller may do: these names are for people and tools reading them.
    pub fn user_info(&self) -> (String, Vec<String>) {
        let (user, group) = match &self.role {
            Role::Admin => (self.name.clone(), "system:masters"),
            Role::Viewer => (self.name.clone(), "aloft:viewers"),
            Role::Bootstrap(_) => (format!("system:bootstrap:{}", self.name), "system:bootstrappers"),
            Role::Node(n) => (format!("system:node:{n}"), "system:nodes"),
        };
        (user, vec![group.to_string(), "system:authenticated".to_string()])
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RoleError(String);

impl std::str::FromStr for Role {
    type Err = RoleError;
    fn from_str(s: &str) -> Result<Self, RoleError> {
        match s {
            "admin" => Ok(Role::Admin),
            "viewer" => Ok(Role::Viewer),
            "bootstrap" => Ok(Role::Bootstrap(EnrollLabels(None))),
            _ => match (s.strip_prefix("node:"), s.strip_prefix("bootstrap:")) {
                (Some(n), _) if !n.is_empty() => Ok(Role::Node(n.to_string())),
                (_, Some(labels)) => Ok(Role::Bootstrap(EnrollLabels::parse(labels)?)),
                _ => Err(RoleError(format!("unknown role {s:?}: want admin, viewer or bootstrap"))),
            },
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Admin => f.write_str("admin"),
            Role::Viewer => f.write_str("viewer"),
            Role::Bootstrap(EnrollLabels(None)) => f.write_str("bootstrap"),
            Role::Bootstrap(EnrollLabels(Some(labels))) => {
                let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "bootstrap:{}", pairs.join(","))
            }
            Role::Node(n) => write!(f, "node:{n}"),
        }
    }
}

/// A new random token. 256 bits, URL-safe, with a prefix that makes leaked tokens greppable.
pub fn generate_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("aloft_{}", hex::encode(b))
}

/// What the store keeps instead of the token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The request a decision is about.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub verb: Verb,
    /// `ResourceType::store_key()`.
    pub resource: &'a str,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
    /// For list and watch: the single name a `metadata.name=` field selector pins.
    pub field_name: Option<&'a str>,
}

/// The answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// Allowed if the write changes nothing but `metadata.annotations` and `status` (a node
    /// writing its own Node).
    AllowStatusAndAnnotations,
}

/// Facts some decisions need from the store: the caller's own Node, for node roles.
#[derive(Debug, Default, Clone, Copy)]
pub struct Facts<'a> {
    pub own_node: Option<&'a serde_json::Value>,
}

const NODES: &str = "/nodes";
/// The core pods collection's key (not a kind aloft serves; see [`decide`]).
const PODS: &str = "/pods";

/// The rendered configs a node may read: the one it is asked to run and the one it is asked to
/// pre-stage, which only the coordinator may name ([`crate::controllers::uncordon::COORDINATOR_ONLY`]:
/// a node writing them could read another pool's config, secrets included). Not its
/// `currentConfig`: the agent reports that one and keeps its own copy, so a node naming another
/// pool's config there gains nothing by it.
fn node_config_names(node: Option<&serde_json::Value>) -> Vec<&str> {
    let ann = node.and_then(|n| crate::server::objects::at(n, &["metadata", "annotations"]));
    [aloft_api::annotations::DESIRED_CONFIG, aloft_api::annotations::PRESTAGE_CONFIG]
        .iter()
        .filter_map(|k| ann.and_then(|a| a.get(*k)).and_then(serde_json::Value::as_str))
        .filter(|n| !n.is_empty())
        .collect()
}

/// Decide. `facts` is only read for node roles reading MachineConfigs.
pub fn decide(who: &Identity, req: &Request<'_>, facts: Facts<'_>) -> Decision {
    let allow = |b: bool| if b { Decision::Allow } else { Decision::Deny };
    if req.resource == PODS && matches!(who.role, Role::Bootstrap(_) | Role::Node(_)) {
        // The empty pod list every caller gets (`kubectl describe node` lists the node's pods);
        // admins and viewers may read any kind.
        return allow(req.verb == Verb::List && req.name.is_none() && req.subresource.is_none());
    }
    match &who.role {
        Role::Admin => Decision::Allow,
        Role::Viewer => allow(req.verb.is_read()),
        Role::Bootstrap(_) => Decision::Deny,
        Role::Node(own) => {
            let own = own.as_str();
            match (req.resource, req.verb) {
                (NODES, Verb::Get) => allow(req.name == Some(own)),
                (NODES, Verb::List | Verb::Watch) => allow(req.field_name == Some(own)),
                (NODES, Verb::Update | Verb::Patch) if req.name == Some(own) => {
                    if req.subresource == Some("status") {
                        Decision::Allow
                    } else {
                        Decision::AllowStatusAndAnnotations
                    }
                }
                // The cluster's node disruption policy, which every agent applies.
                (r, Verb::Get) if r == crate::resources::MACHINE_CONFIGURATION.store_key() => {
                    allow(req.name == Some("cluster"))
                }
                (r, Verb::Get) if r == crate::resources::MACHINE_CONFIG.store_key() => {
                    allow(req.name.is_some_and(|n| node_config_names(facts.own_node).contains(&n)))
                }
                _ => Decision::Deny,
            }
        }
    }
}

/// What `who` may do, as a SelfSubjectRulesReview's `status` lists it (`kubectl auth can-i
/// --list`): the rules [`decide`] and [`decide_path`] follow, written out. `own_node` is the
/// caller's Node for a node role (the rendered configs it may read are the ones it names). A
/// unit test holds the two to each other over every resource and verb.
pub fn rules(who: &Identity, own_node: Option<&serde_json::Value>) -> serde_json::Value {
    use serde_json::json;
    let rule = |verbs: &[&str], group: &str, resources: &[&str], names: &[&str]| {
        let mut r = json!({"verbs": verbs, "apiGroups": [group], "resources": resources});
        if !names.is_empty() {
            r["resourceNames"] = json!(names);
        }
        r
    };
    // Every authenticated caller may ask who it is and what it may do (kube's system:basic-user).
    let mut resource_rules = vec![
        rule(&["create"], "authentication.k8s.io", &["selfsubjectreviews"], &[]),
        rule(&["create"], "authorization.k8s.io", &["selfsubjectaccessreviews", "selfsubjectrulesreviews"], &[]),
        // The empty pod list (`kubectl describe node`).
        rule(&["list"], "", &["pods"], &[]),
    ];
    let open_reads = ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version"];
    let health = ["/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*"];
    let reads: Vec<&str> = open_reads.iter().chain(health.iter()).copied().collect();
    let mut non_resource = vec![json!({"verbs": ["get", "head"], "nonResourceURLs": reads})];
    match &who.role {
        Role::Admin => {
            resource_rules = vec![rule(&["*"], "*", &["*"], &[])];
            non_resource = vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})];
        }
        Role::Viewer => {
            resource_rules.push(rule(&["get", "list", "watch"], "*", &["*"], &[]));
            non_resource.push(json!({"verbs": ["get", "head"], "nonResourceURLs": ["/metrics", "/config/*"]}));
        }
        Role::Bootstrap(_) => {
            non_resource.push(json!({"verbs": ["post"], "nonResourceURLs": ["/aloft/v1/enroll"]}));
            non_resource.push(json!({"verbs": ["get", "head"], "nonResourceURLs": ["/config/*"]}));
        }
        Role::Node(own) => {
            let own = own.as_str();
            // A resource and its status subresource: decided alike.
            let with_status = |plural: &str| [plural.to_string(), format!("{plural}/status")];
            let nodes = with_status("nodes");
            let (n0, n1) = (nodes[0].as_str(), nodes[1].as_str());
            resource_rules.push(rule(&["get", "list", "watch"], "", &[n0, n1], &[own]));
            resource_rules.push(rule(&["update", "patch"], "", &[n0, n1], &[own]));
            let mc = &crate::resources::MACHINE_CONFIG;
            let configs = node_config_names(own_node);
            if !configs.is_empty() {
                let m = with_status(mc.plural);
                resource_rules.push(rule(&["get"], mc.group, &[m[0].as_str(), m[1].as_str()], &configs));
            }
            let policy = &crate::resources::MACHINE_CONFIGURATION;
            let p = with_status(policy.plural);
            resource_rules.push(rule(&["get"], policy.group, &[p[0].as_str(), p[1].as_str()], &["cluster"]));
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource, "incomplete": false})
}

/// The API's paths outside `/api` and `/apis` that need a decision ("non-resource URLs" in
/// Kubernetes): `/metrics` for admins and viewers (a node's credential reads only what its node
/// needs), `/aloft/v1/enroll` (POST) for bootstrap tokens and admins. Discovery, `/version` and
/// `/openapi` are every authenticated caller's, the health endpoints everyone's. `verb` is the
/// lower-case HTTP method, as in a Kubernetes NonResourceAttributes.
pub fn decide_path(who: &Identity, verb: &str, path: &str) -> Decision {
    let allow = |b: bool| if b { Decision::Allow } else { Decision::Deny };
    if who.allowed_everything() {
        return Decision::Allow;
    }
    let under = |root: &str| path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'));
    let read = matches!(verb, "get" | "head");
    match path {
        "/metrics" => allow(read && who.role == Role::Viewer),
        "/aloft/v1/enroll" => allow(verb == "post" && matches!(who.role, Role::Bootstrap(_))),
        // Which pool's config a bootstrap token may read is decided by the server
        // (`server::config_server`): the pool its nodes join.
        _ if under("/config") => allow(read && matches!(who.role, Role::Viewer | Role::Bootstrap(_))),
        "/version" => allow(read),
        _ if ["/healthz", "/readyz", "/livez", "/api", "/apis", "/openapi"].iter().any(|r| under(r)) => allow(read),
        _ => Decision::Deny,
    }
}

/// Whether `who` needs its own Node looked up to decide `req`.
pub fn needs_own_node(who: &Identity, req: &Request<'_>) -> bool {
    matches!(who.role, Role::Node(_))
        && req.resource == crate::resources::MACHINE_CONFIG.store_key()
        && req.verb == Verb::Get
}

/// For [`Decision::AllowStatusAndAnnotations`]: true when `next` differs from `stored` only in
/// annotations, status and the server-maintained metadata. Not `managedFields`: this server
/// keeps none, so they are whatever clients wrote, and a node could forge another writer's
/// record of the fields it owns.
pub fn only_status_and_annotations(stored: &serde_json::Value, next: &serde_json::Value) -> bool {
    use crate::server::objects::equal_except;
    const META: [&str; 3] = ["annotations", "resourceVersion", "generation"];
    fn meta(v: &serde_json::Value) -> Option<Option<&serde_json::Value>> {
        v.as_object().map(|m| m.get("metadata"))
    }
    let same_meta = match (meta(stored), meta(next)) {
        (Some(Some(a)), Some(Some(b))) => equal_except(a, b, &META),
        (Some(a), Some(b)) => a == b,
        // Not both objects: the whole comparison below decides.
        _ => true,
    };
    same_meta && equal_except(stored, next, &["status", "metadata"])
}

/// Where a Node's architecture is reported.
pub const NODE_ARCH_POINTER: &str = "/status/nodeInfo/architecture";

/// Go's names of the architectures Linux runs on (`GOARCH`), as a kubelet and the agent report
/// them.
pub const NODE_ARCHITECTURES: [&str; 13] = [
    "386", "amd64", "arm", "arm64", "loong64", "mips", "mipsle", "mips64", "mips64le", "ppc64", "ppc64le", "riscv64",
    "s390x",
];

/// For a Node's own write: keep the architecture `stored` reports, or drop one that is no
/// architecture's name, and say so (a warning for the writer); None when `next` may stand.
/// A machine does not change architecture: a host replaced by another kind enrolls again, which
/// clears it. A node's credential that could change it, or report a made-up one, could hold the
/// whole fleet's update graph back (it is asked for the one architecture the Nodes report),
/// where otherwise it can only disturb its own pool.
pub fn keep_node_arch(stored: &serde_json::Value, next: &mut serde_json::Value) -> Option<String> {
    let arch = |v: &serde_json::Value| v.pointer(NODE_ARCH_POINTER).cloned();
    let (was, now) = (arch(stored), arch(next));
    if was == now {
        return None;
    }
    let was_str = was.as_ref().and_then(serde_json::Value::as_str).filter(|s| !s.is_empty());
    let said = now.as_ref().map(|v| v.to_string()).unwrap_or_else(|| "none".into());
    match was_str {
        Some(was_str) => {
            // Reported before: it stays, whatever the write did to status or nodeInfo (left
            // out, null, not an object).
            if let Some(obj) = next.as_object_mut() {
                let status = obj.entry("status").or_insert_with(|| serde_json::json!({}));
                if !status.is_object() {
                    *status = serde_json::json!({});
                }
                if let Some(status) = status.as_object_mut() {
                    let info = status.entry("nodeInfo").or_insert_with(|| serde_json::json!({}));
                    if !info.is_object() {
                        *info = serde_json::json!({});
                    }
                    if let Some(info) = info.as_object_mut() {
                        info.insert("architecture".into(), was_str.into());
                    }
                }
            }
            Some(format!(
                "status.nodeInfo.architecture stays {was_str:?} (not {said}): a node reports it once; a host \
                 replaced by one of another architecture enrolls again (delete its Node, or revoke node:NAME first)"
            ))
        }
        None => match now.as_ref().and_then(serde_json::Value::as_str) {
            Some(name) if NODE_ARCHITECTURES.contains(&name) => None,
            _ => {
                if let Some(info) = next.pointer_mut("/status/nodeInfo").and_then(serde_json::Value::as_object_mut) {
                    info.remove("architecture");
                }
                Some(format!(
                    "status.nodeInfo.architecture {said} is not taken: not one of Go's architecture names ({})",
                    NODE_ARCHITECTURES.join(", ")
                ))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_reports_its_architecture_once_and_by_its_name() {
        use serde_json::{json, Value};
        let with = |arch: Value| json!({"status": {"nodeInfo": {"architecture": arch, "osImage": "x"}}});
        let none = json!({"status": {"nodeInfo": {"osImage": "x"}}});
        let kept = |stored: &Value, next: Value| {
            let mut next = next;
            let warning = keep_node_arch(stored, &mut next);
            (next.pointer(NODE_ARCH_POINTER).cloned(), warning)
        };
        // The first report, by a name Go has: taken.
        assert_eq!(kept(&none, with(json!("arm64"))), (Some(json!("arm64")), None));
        assert_eq!(kept(&with(json!("")), with(json!("riscv64"))), (Some(json!("riscv64")), None), "empty is none");
        // A made-up one, or not a string: not taken, said why.
        for bad in [json!("quantum"), json!(7), json!("")] {
            let (arch, warning) = kept(&none, with(bad.clone()));
            assert_eq!(arch, None, "{bad}");
            assert!(warning.is_some_and(|w| w.contains("not one of Go's architecture names")), "{bad}");
        }
        // Reported: the same again stands; another, none or emptied keeps it, with a warning;
        // the rest of the write stands.
        assert_eq!(kept(&with(json!("arm64")), with(json!("arm64"))), (Some(json!("arm64")), None));
        let nothing = [json!({}), json!({"status": null}), json!({"status": {"nodeInfo": null}}), json!({"status": 7})];
        for next in
            [with(json!("amd64")), with(json!("")), none.clone(), json!({"status": {}})].into_iter().chain(nothing)
        {
            let (arch, warning) = kept(&with(json!("arm64")), next.clone());
            assert_eq!(arch, Some(json!("arm64")), "{next}");
            assert!(warning.is_some_and(|w| w.starts_with("status.nodeInfo.architecture stays \"arm64\"")), "{next}");
        }
        let mut next = with(json!("amd64"));
        keep_node_arch(&with(json!("arm64")), &mut next);
        assert_eq!(next["status"]["nodeInfo"]["osImage"], "x");
    }

    /// The rules a SelfSubjectRulesReview lists are the ones `decide` follows: for every role,
    /// resource, verb, name and subresource, a request is allowed exactly when a rule covers it.
    #[test]
    fn the_listed_rules_are_the_decisions() {
        use serde_json::{json, Value};
        let node = json!({"metadata": {"annotations": {
            aloft_api::annotations::CURRENT_CONFIG: "rendered-worker-a", aloft_api::annotations::DESIRED_CONFIG: "rendered-worker-b"}}});
        let who = |role: Role| Identity { name: "t".into(), role };
        let covers = |rules: &Value, group: &str, resource: &str, verb: &str, name: Option<&str>| {
            let has = |v: &Value, x: &str| v.as_array().is_some_and(|a| a.iter().any(|e| e == "*" || e == x));
            rules["resourceRules"].as_array().unwrap().iter().any(|r| {
                has(&r["verbs"], verb)
                    && has(&r["apiGroups"], group)
                    && has(&r["resources"], resource)
                    && match r.get("resourceNames").and_then(Value::as_array) {
                        None => true,
                        Some(names) => name.is_some_and(|n| names.iter().any(|x| x == n)),
                    }
            })
        };
        let roles = [Role::Admin, Role::Viewer, Role::Bootstrap(EnrollLabels(None)), Role::Node("n1".into())];
        let verbs = [Verb::Get, Verb::List, Verb::Watch, Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];
        for role in roles {
            let who = who(role);
            let rules = rules(&who, Some(&node));
            let pods = crate::resources::ResourceType { group: "", plural: "pods", ..crate::resources::NODE };
            for rt in crate::resources::ALL.iter().chain(std::iter::once(&pods)) {
                for verb in verbs {
                    for name in [None, Some("n1"), Some("cluster"), Some("rendered-worker-a"), Some("other")] {
                        for sub in [None, Some("status")] {
                            let listing = matches!(verb, Verb::List | Verb::Watch);
                            let key = rt.store_key();
                            let req = Request {
                                verb,
                                resource: &key,
                                name: if listing { None } else { name },
                                subresource: sub,
                                field_name: if listing { name } else { None },
                            };
                            let decided = decide(&who, &req, Facts { own_node: Some(&node) }) != Decision::Deny;
                            let resource = match sub {
                                Some(s) => format!("{}/{s}", rt.plural),
                                None => rt.plural.to_string(),
                            };
                            let listed = covers(&rules, rt.group, &resource, verb.as_str(), name);
                            assert_eq!(
                                decided,
                                listed,
                                "{:?} {} {resource} {name:?}: {rules}",
                                who.role,
                                verb.as_str()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn nodes_see_only_their_own() {
        let a = Identity { name: "node:a".into(), role: Role::Node("a".into()) };
        let node = |name| Request {
            verb: Verb::Get,
            resource: "/nodes",
            name: Some(name),
            subresource: None,
            field_name: None,
        };
        let none = Facts::default();
        assert_eq!(decide(&a, &node("a"), none), Decision::Allow);
        assert_eq!(decide(&a, &node("b"), none), Decision::Deny);
        let watch_own = Request { verb: Verb::Watch, name: None, field_name: Some("a"), ..node("a") };
        assert_eq!(decide(&a, &watch_own, none), Decision::Allow);
        assert_eq!(decide(&a, &Request { field_name: None, ..watch_own }, none), Decision::Deny);
        assert_eq!(decide(&a, &Request { verb: Verb::Patch, ..node("a") }, none), Decision::AllowStatusAndAnnotations);
        assert_eq!(
            decide(&a, &Request { verb: Verb::Patch, subresource: Some("status"), ..node("a") }, none),
            Decision::Allow
        );
        assert_eq!(decide(&a, &Request { verb: Verb::Patch, ..node("b") }, none), Decision::Deny);
        assert_eq!(decide(&a, &Request { verb: Verb::Delete, ..node("a") }, none), Decision::Deny);
        let own = serde_json::json!({"metadata": {"annotations": {
            "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-2",
            "machineconfiguration.openshift.io/currentConfig": "rendered-worker-1"}}});
        let facts = Facts { own_node: Some(&own) };
        let mc = |name| Request {
            verb: Verb::Get,
            resource: "machineconfiguration.openshift.io/machineconfigs",
            name: Some(name),
            subresource: None,
            field_name: None,
        };
        assert!(needs_own_node(&a, &mc("x")));
        assert_eq!(decide(&a, &mc("rendered-worker-2"), facts), Decision::Allow);
        // Not the current config: the node itself writes that one.
        assert_eq!(decide(&a, &mc("rendered-worker-1"), facts), Decision::Deny);
        assert_eq!(decide(&a, &mc("rendered-infra-9"), facts), Decision::Deny);
        let prestaging = serde_json::json!({"metadata": {"annotations": {
            "machineconfiguration.openshift.io/currentConfig": "rendered-worker-1",
            "aloft.dev/prestageConfig": "rendered-worker-3"}}});
        let facts_p = Facts { own_node: Some(&prestaging) };
        assert_eq!(decide(&a, &mc("rendered-worker-3"), facts_p), Decision::Allow, "the config to pre-stage");
        assert_eq!(decide(&a, &mc("rendered-worker-2"), facts_p), Decision::Deny);
        assert_eq!(decide(&a, &Request { verb: Verb::List, name: None, ..mc("x") }, facts), Decision::Deny);
        let stored =
            serde_json::json!({"metadata": {"name": "a", "labels": {"x": "1"}, "resourceVersion": "3"}, "spec": {}});
        let mut next = stored.clone();
        next["metadata"]["annotations"] = serde_json::json!({"k": "v"});
        next["status"] = serde_json::json!({"conditions": []});
        assert!(only_status_and_annotations(&stored, &next));
        next["metadata"]["labels"]["x"] = "2".into();
        assert!(!only_status_and_annotations(&stored, &next));
        next["metadata"]["labels"]["x"] = "1".into();
        next["spec"]["unschedulable"] = true.into();
        assert!(!only_status_and_annotations(&stored, &next));
        // Server-kept metadata and status may differ; any other field added or dropped may not.
        let mut next = stored.clone();
        next["metadata"]["resourceVersion"] = "9".into();
        next["metadata"]["generation"] = 2.into();
        assert!(only_status_and_annotations(&stored, &next));
        for change in [
            serde_json::json!({"metadata": {"finalizers": ["x"]}}),
            serde_json::json!({"metadata": {"managedFields": [{"manager": "kubectl", "operation": "Update"}]}}),
            serde_json::json!({"other": 1}),
            serde_json::json!({"spec": null}),
        ] {
            let mut n = stored.clone();
            json_patch::merge(&mut n, &change);
            assert!(!only_status_and_annotations(&stored, &n), "{change}");
        }
        let mut n = stored.clone();
        n["metadata"].as_object_mut().unwrap().remove("labels");
        assert!(!only_status_and_annotations(&stored, &n), "labels dropped");
        let mut n = stored.clone();
        n.as_object_mut().unwrap().remove("metadata");
        assert!(!only_status_and_annotations(&stored, &n), "metadata dropped");
        assert!(!only_status_and_annotations(&stored, &serde_json::json!([])));
    }

    /// A bootstrap token's labels are kept in its role (`bootstrap:k=v,...`), read back the
    /// same, and decide which labels of Kubernetes' namespaces an enrollment may give.
    #[test]
    fn bootstrap_roles_carry_the_labels_they_allow() {
        for text in [
            "bootstrap",
            "bootstrap:node-role.kubernetes.io/infra=",
            "bootstrap:a.k8s.io/x=1,node-role.kubernetes.io/master=",
        ] {
            assert_eq!(text.parse::<Role>().unwrap().to_string(), text);
        }
        assert_eq!("bootstrap:".parse::<Role>().unwrap(), Role::Bootstrap(EnrollLabels(Some(BTreeMap::new()))));
        assert!("bootstrap:x".parse::<Role>().unwrap_err().to_string().contains("key=value"));
        let default = EnrollLabels(None);
        assert!(default.allows(WORKER_ROLE_LABEL, ""));
        assert!(!default.allows(WORKER_ROLE_LABEL, "x"));
        assert!(!default.allows("node-role.kubernetes.io/master", ""));
        for free in [
            "example.com/a",
            "plain",
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
            "feature.node.kubernetes.io/x",
            "x.kubelet.kubernetes.io/y",
            "kubernetes.io.example.com/a",
        ] {
            assert!(!is_restricted_label(free), "{free}");
            assert!(default.allows(free, "v"), "{free}");
        }
        for restricted in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/role",
            "node-restriction.kubernetes.io/a",
            "k8s.io/a",
            "x.k8s.io/a",
        ] {
            assert!(is_restricted_label(restricted), "{restricted}");
        }
        let infra: Role = "bootstrap:node-role.kubernetes.io/infra=".parse().unwrap();
        let Role::Bootstrap(scope) = infra else { panic!() };
        assert!(scope.allows("node-role.kubernetes.io/infra", ""));
        assert!(!scope.allows(WORKER_ROLE_LABEL, ""), "a list replaces the default");
    }

    #[test]
    fn roles_parse_and_decide() {
        assert_eq!("admin".parse::<Role>().unwrap(), Role::Admin);
        assert_eq!("node:n1".parse::<Role>().unwrap(), Role::Node("n1".into()));
        assert!("node:".parse::<Role>().is_err());
        assert!("root".parse::<Role>().is_err());
        let viewer = Identity { name: "v".into(), role: Role::Viewer };
        let get = Request { verb: Verb::Get, resource: "/nodes", name: Some("a"), subresource: None, field_name: None };
        let del = Request { verb: Verb::Delete, ..get };
        let none = Facts::default();
        assert_eq!(decide(&viewer, &get, none), Decision::Allow);
        assert_eq!(decide(&viewer, &del, none), Decision::Deny);
        let boot = Identity { name: "b".into(), role: Role::Bootstrap(EnrollLabels(None)) };
        assert_eq!(decide(&boot, &get, none), Decision::Deny);
        let t = generate_token();
        assert!(t.starts_with("aloft_") && t.len() == 70);
        assert_ne!(token_hash(&t), t);
        assert_ne!(generate_token(), t);
    }
}
