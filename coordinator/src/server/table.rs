//! Server-side printing: `meta.k8s.io/v1` Table responses, asked for by kubectl (and aloftctl)
//! with `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Columns follow OpenShift's printer
//! columns, so `kubectl get mcp` here looks like `oc get mcp` there.

use crate::resources::ResourceType;
use aloft_api::annotations as ann;
use serde_json::{json, Value};

struct Col {
    name: &'static str,
    kind: &'static str,
    /// 0: always shown; 1: only with `-o wide`.
    priority: u8,
    description: &'static str,
}

const fn col(name: &'static str, kind: &'static str, priority: u8, description: &'static str) -> Col {
    Col { name, kind, priority, description }
}

fn columns(r: &ResourceType) -> Vec<Col> {
    let name = col("Name", "string", 0, "Name of the object");
    let age = col("Age", "date", 0, "Time since creation");
    match r.kind {
        "MachineConfigPool" => vec![
            name,
            col("Config", "string", 0, "The rendered config the pool is on (status.configuration.name)"),
            col("Updated", "string", 0, "When all the machines in the pool are updated to the correct machine config."),
            col("Updating", "string", 0, "When at least one of machine is not either not updated or is in the process of updating to the desired machine config."),
            col("Degraded", "string", 0, "When progress is blocked on updating one or more nodes or the pool configuration is failing."),
            col("MachineCount", "integer", 0, "Total number of machines in the machine config pool"),
            col("ReadyMachineCount", "integer", 0, "Total number of ready machines targeted by the pool"),
            col("UpdatedMachineCount", "integer", 0, "Total number of machines targeted by the pool that have the CurrentMachineConfig as their config"),
            col("DegradedMachineCount", "integer", 0, "Total number of machines marked degraded (or unreconcilable)"),
            age,
        ],
        "MachineConfig" => vec![
            name,
            col("GeneratedByController", "string", 0, "Version of the controller that generated the machineconfig. This will be empty if the machineconfig is not managed by a controller."),
            col("IgnitionVersion", "string", 0, "Version of the Ignitions Config defined in the machineconfig."),
            age,
            col("OSImageURL", "string", 1, "The OS image this config pins"),
        ],
        "Node" => vec![
            name,
            col("Status", "string", 0, "Ready condition and scheduling"),
            col("Roles", "string", 0, "node-role.kubernetes.io/ and kubernetes.io/role labels"),
            col("Config", "string", 0, "currentConfig annotation"),
            col("State", "string", 0, "The agent's state annotation (Degraded while a drain is past its timeout)"),
            col("Reason", "string", 0, "Why the node is in its state; while it updates, how far a long OS download is"),
            age,
            col("Desired", "string", 1, "desiredConfig annotation"),
            col("Failed Config", "string", 1, "The config the agent's last failure report was about (aloft.dev/failedConfig)"),
            col("Version", "string", 1, "The node's aloft-agent build, as its kubeletVersion (e.g. v0.1.0+1a2b3c4d5e6f)."),
            col("OS-Image", "string", 1, "OS image reported by the node from /etc/os-release (e.g. Red Hat Enterprise Linux CoreOS 418.94.202410090804-0 (Plow))."),
            col("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
        ],
        "NodeDisruptionBudget" => vec![
            name,
            col("Min Available", "string", 0, "Nodes of each group that must stay available"),
            col("Max Unavailable", "string", 0, "Nodes of each group that may be unavailable at once"),
            col("Allowed Disruptions", "integer", 0, "Nodes that may be disrupted now (with groupBy: the least of any group)"),
            age,
            col("Group By", "string", 1, "Label keys that split the selected nodes into groups"),
            col("Selector", "string", 1, "Which nodes the budget covers"),
        ],
        "ClusterVersion" => vec![
            name,
            col("Version", "string", 0, "The release the fleet runs (the last completed)"),
            col("Available", "string", 0, "Whether a release has been rolled out completely"),
            col("Progressing", "string", 0, "Whether a release is being rolled out"),
            col("Since", "date", 0, "When Progressing last changed"),
            col("Status", "string", 0, "The Progressing (or Failing) condition's message"),
        ],
        "CatalogSource" => vec![
            name,
            col("Display", "string", 0, "The pretty name of the catalog"),
            col("Type", "string", 0, "The type of the catalog"),
            col("Publisher", "string", 0, "The publisher of the catalog"),
            age,
            col("State", "string", 1, "The last read's state (READY or TRANSIENT_FAILURE)"),
            col("Packages", "integer", 1, "Packages in the last good read"),
        ],
        "PackageManifest" => vec![
            name,
            col("Catalog", "string", 0, "The display name of the catalog the package is in"),
            age,
            col("Default Channel", "string", 1, "The channel a Subscription that names none follows"),
            col("Channels", "string", 1, "Each channel and its current CSV"),
        ],
        "Subscription" => vec![
            name,
            col("Package", "string", 0, "The package subscribed to"),
            col("Source", "string", 0, "The catalog source for the specified package"),
            col("Channel", "string", 0, "The channel of updates to subscribe to"),
            col("State", "string", 1, "AtLatestKnown, UpgradePending or UpgradeFailed"),
            col("Installed", "string", 1, "The installed CSV"),
        ],
        "InstallPlan" => vec![
            name,
            col("CSV", "string", 0, "The first CSV in the list of clusterServiceVersionNames"),
            col("Approval", "string", 0, "The approval mode"),
            col("Approved", "boolean", 0, "Whether the plan may install"),
            col("Phase", "string", 1, "RequiresApproval, Installing, Complete or Failed"),
        ],
        "ClusterServiceVersion" => vec![
            name,
            col("Display", "string", 0, "The name of the CSV"),
            col("Version", "string", 0, "The version of the CSV"),
            col("Replaces", "string", 0, "The name of a CSV that this one replaces"),
            col("Phase", "string", 0, "The phase of the CSV"),
            col("Message", "string", 1, "Why the CSV is in its phase"),
        ],
        "OperatorGroup" => vec![
            name,
            age,
            col("Namespaces", "string", 1, "The target namespaces (* for every namespace)"),
        ],
        "FleetLock" => vec![
            name,
            col("Max Holders", "integer", 0, "Hosts of the group that may reboot at once"),
            col("Holders", "string", 0, "The hosts holding a slot (their FleetLock id)"),
            age,
        ],
        "Event" => vec![
            col("Last Seen", "string", 0, "When the event was last seen"),
            col("Type", "string", 0, "Normal or Warning"),
            col("Reason", "string", 0, "Short reason"),
            col("Object", "string", 0, "The object the event is about"),
            col("Message", "string", 0, "What happened"),
        ],
        _ => vec![name, age],
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn condition(v: &Value, type_: &str) -> String {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(type_)))
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// An age as kubectl prints it (apimachinery's `duration.HumanDuration`): precise while it is
/// short (`95s`, `5m30s`, `5h20m`, `3d4h`), coarser as it grows (`150m`, `20h`, `45d`, `2y30d`),
/// so that `get` tables read the same from aloftctl and from kubectl.
pub fn age(created: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else { return "<unknown>".into() };
    human_duration((now - t.with_timezone(&chrono::Utc)).num_seconds())
}

fn human_duration(secs: i64) -> String {
    // A clock a second ahead of the server's reads as now; more is an error.
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| match small {
        0 => format!("{big}{unit}"),
        _ => format!("{big}{unit}{small}{small_unit}"),
    };
    let (minutes, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if minutes < 10 => with(minutes, "m", secs % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => with(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => with(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => with(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

fn cells(r: &ResourceType, o: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    let age = json!(age(s(o, "/metadata/creationTimestamp"), now));
    let int = |p: &str| json!(o.pointer(p).and_then(Value::as_i64).unwrap_or(0));
    let annotation = |k: &str| {
        json!(o.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str).unwrap_or(""))
    };
    match r.kind {
        "MachineConfigPool" => vec![
            name,
            json!(s(o, "/status/configuration/name")),
            json!(condition(o, "Updated")),
            json!(condition(o, "Updating")),
            json!(condition(o, "Degraded")),
            int("/status/machineCount"),
            int("/status/readyMachineCount"),
            int("/status/updatedMachineCount"),
            int("/status/degradedMachineCount"),
            age,
        ],
        "MachineConfig" => vec![
            name,
            annotation(ann::GENERATED_BY),
            json!(s(o, "/spec/config/ignition/version")),
            age,
            json!(s(o, "/spec/osImageURL")),
        ],
        "Node" => {
            // As kubectl's: no Ready condition (a node that never reported) is Unknown; one that
            // is not True, whatever its status says, NotReady.
            let has_ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c.get("type").and_then(Value::as_str) == Some("Ready")));
            let mut status = match (has_ready, condition(o, "Ready").as_str()) {
                (true, "True") => "Ready".to_string(),
                (true, _) => "NotReady".to_string(),
                (false, _) => "Unknown".to_string(),
            };
            if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            // As kubectl's: `node-role.kubernetes.io/<role>` labels, and the older
            // `kubernetes.io/role: <role>`; sorted, each once.
            let roles: std::collections::BTreeSet<&str> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| {
                    l.iter()
                        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                            Some(role) => Some(role),
                            None if k == "kubernetes.io/role" => v.as_str(),
                            None => None,
                        })
                        .filter(|role| !role.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            let roles: Vec<&str> = roles.into_iter().collect();
            let roles = if roles.is_empty() { "<none>".to_string() } else { roles.join(",") };
            let a = |k: &str| {
                o.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str).unwrap_or("")
            };
            let drain_failure = a(ann::DRAIN_FAILURE);
            let (state, reason) = match (drain_failure, a(ann::STATE), a(ann::REASON)) {
                // Picked, the node downloads before it reports Working: the progress shows then too.
                ("", state, "") => (state, a(ann::PROGRESS)),
                ("", state, reason) => (state, reason),
                (failure, _, _) => ("Degraded", failure),
            };
            vec![
                name,
                json!(status),
                json!(roles),
                annotation(ann::CURRENT_CONFIG),
                json!(state),
                json!(reason),
                age,
                annotation(ann::DESIRED_CONFIG),
                annotation(ann::FAILED_CONFIG),
                json!(s(o, "/status/nodeInfo/kubeletVersion")),
                json!(s(o, "/status/nodeInfo/osImage")),
                json!(s(o, "/status/nodeInfo/kernelVersion")),
            ]
        }
        "NodeDisruptionBudget" => {
            let int_or_string = |p: &str| match o.pointer(p) {
                Some(Value::String(s)) => json!(s),
                Some(Value::Number(n)) => json!(n.to_string()),
                _ => json!("N/A"),
            };
            let group_by: Vec<&str> = o
                .pointer("/spec/groupBy")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            // No selector covers every node, as `selector: {}` does: both read `<all>` (a blank
            // cell read as "selects nothing").
            let selector = selector_text(
                &o.pointer("/spec/selector")
                    .and_then(|s| serde_json::from_value::<aloft_api::LabelSelector>(s.clone()).ok())
                    .unwrap_or_default(),
            );
            vec![
                name,
                int_or_string("/spec/minAvailable"),
                int_or_string("/spec/maxUnavailable"),
                int("/status/disruptionsAllowed"),
                age,
                json!(if group_by.is_empty() { "<none>".to_string() } else { group_by.join(",") }),
                json!(selector),
            ]
        }
        "ClusterVersion" => {
            let cond = |t: &str| {
                o.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(t)))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            let completed = o
                .pointer("/status/history")
                .and_then(Value::as_array)
                .and_then(|h| h.iter().find(|e| e.get("state").and_then(Value::as_str) == Some("Completed")))
                .and_then(|e| e.get("version").and_then(Value::as_str))
                .unwrap_or("");
            let (progressing, failing) = (cond("Progressing"), cond("Failing"));
            let st = |c: &Value| c.get("status").and_then(Value::as_str).unwrap_or("").to_string();
            let since = match progressing.get("lastTransitionTime").and_then(Value::as_str) {
                Some(t) => crate::server::table::age(t, now),
                None => String::new(),
            };
            let message = if st(&failing) == "True" { &failing } else { &progressing };
            vec![
                name,
                json!(completed),
                json!(st(&cond("Available"))),
                json!(st(&progressing)),
                json!(since),
                json!(message.get("message").and_then(Value::as_str).unwrap_or("")),
            ]
        }
        "CatalogSource" => vec![
            name,
            json!(s(o, "/spec/displayName")),
            json!(s(o, "/spec/sourceType")),
            json!(s(o, "/spec/publisher")),
            age,
            json!(s(o, "/status/connectionState/lastObservedState")),
            int("/status/packages"),
        ],
        "PackageManifest" => {
            let channels: Vec<String> = o
                .pointer("/status/channels")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|c| format!("{}={}", s(c, "/name"), s(c, "/currentCSV"))).collect())
                .unwrap_or_default();
            vec![
                name,
                json!(s(o, "/status/catalogSourceDisplayName")),
                age,
                json!(s(o, "/status/defaultChannel")),
                json!(channels.join(",")),
            ]
        }
        "Subscription" => vec![
            name,
            json!(s(o, "/spec/name")),
            json!(s(o, "/spec/source")),
            json!(s(o, "/spec/channel")),
            json!(s(o, "/status/state")),
            json!(s(o, "/status/installedCSV")),
        ],
        "InstallPlan" => vec![
            name,
            json!(s(o, "/spec/clusterServiceVersionNames/0")),
            json!(s(o, "/spec/approval")),
            json!(o.pointer("/spec/approved").and_then(Value::as_bool).unwrap_or(false)),
            json!(s(o, "/status/phase")),
        ],
        "ClusterServiceVersion" => vec![
            name,
            json!(s(o, "/spec/displayName")),
            json!(s(o, "/spec/version")),
            json!(s(o, "/spec/replaces")),
            json!(s(o, "/status/phase")),
            json!(s(o, "/status/message")),
        ],
        "OperatorGroup" => {
            let ns: Vec<&str> = o
                .pointer("/status/namespaces")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(|n| if n.is_empty() { "*" } else { n }).collect())
                .unwrap_or_default();
            vec![name, age, json!(ns.join(","))]
        }
        "FleetLock" => {
            let max = o
                .pointer("/spec/maxHolders")
                .and_then(Value::as_i64)
                .unwrap_or(aloft_api::fleetlock::DEFAULT_MAX_HOLDERS);
            let holders: Vec<&str> = o
                .pointer("/status/holders")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|h| h.get("id").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            vec![
                name,
                json!(max),
                json!(if holders.is_empty() { "<none>".to_string() } else { holders.join(",") }),
                age,
            ]
        }
        "Event" => {
            let last = [s(o, "/lastTimestamp"), s(o, "/eventTime"), s(o, "/metadata/creationTimestamp")]
                .into_iter()
                .find(|t| !t.is_empty())
                .unwrap_or("");
            vec![
                json!(self::age(last, now)),
                json!(s(o, "/type")),
                json!(s(o, "/reason")),
                json!(format!(
                    "{}/{}",
                    s(o, "/involvedObject/kind").to_ascii_lowercase(),
                    s(o, "/involvedObject/name")
                )),
                json!(s(o, "/message")),
            ]
        }
        _ => vec![name, age],
    }
}

/// A structured selector in the `labelSelector` string form (`<all>` when empty).
fn selector_text(s: &aloft_api::LabelSelector) -> String {
    let mut parts: Vec<String> = s.match_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for e in &s.match_expressions {
        parts.push(match e.operator.as_str() {
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            op => format!("{} {} ({})", e.key, op.to_ascii_lowercase(), e.values.join(",")),
        });
    }
    if parts.is_empty() {
        "<all>".into()
    } else {
        parts.join(",")
    }
}

/// What each row carries as its `object` (`includeObject`, metav1.IncludeObjectPolicy): nothing,
/// the object's metadata (the default), or the whole object, which kubectl asks for when it
/// sorts (`--sort-by` on a field outside metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// From a request's `includeObject`; another value is a 400, as kube-apiserver answers it.
    pub fn from_params(params: &std::collections::HashMap<String, String>) -> Result<Self, super::error::ApiError> {
        match params.get("includeObject").map(String::as_str) {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => {
                Err(super::error::ApiError::bad_request(format!("unrecognized includeObject value: {other:?}")))
            }
        }
    }
}

/// The Table for `items`. `with_headers` is false for watch events after the first, as the API
/// server does, so `kubectl get -w` prints the header once.
pub fn table(
    r: &ResourceType,
    version: TableVersion,
    items: &[&Value],
    revision: Option<u64>,
    with_headers: bool,
    include: IncludeObject,
) -> Value {
    let now = chrono::Utc::now();
    let defs: Vec<Value> = if with_headers {
        columns(r)
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": c.kind,
                    "format": if c.name == "Name" { "name" } else { "" },
                    "description": c.description,
                    "priority": c.priority,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or(Value::Null),
                }),
                IncludeObject::Object => (*o).clone(),
            };
            json!({"cells": cells(r, o, now), "object": object})
        })
        .collect();
    let mut meta = serde_json::Map::new();
    if let Some(rev) = revision {
        meta.insert("resourceVersion".into(), rev.to_string().into());
    }
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// The Table's version a client asked for: kube-apiserver writes meta.k8s.io/v1 and, still,
/// v1beta1 (what kubectl lists second), each in its own apiVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVersion {
    V1,
    V1beta1,
}

impl TableVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `includeObject=Object` (what `kubectl get --sort-by=.status...` asks for) puts the whole
    /// object in each row; the default is its metadata, `None` nothing; anything else is refused.
    #[test]
    fn rows_carry_what_include_object_asks_for() {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let row_object = |params: &[(&str, &str)]| {
            let params = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let include = IncludeObject::from_params(&params).unwrap();
            table(&crate::resources::NODE, TableVersion::V1, &[&node], Some(3), true, include)["rows"][0]["object"]
                .clone()
        };
        assert_eq!(row_object(&[("includeObject", "Object")]), node);
        let partial =
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}});
        assert_eq!(row_object(&[]), partial);
        assert_eq!(row_object(&[("includeObject", "Metadata")]), partial);
        assert_eq!(row_object(&[("includeObject", "None")]), Value::Null);
        let bogus = [("includeObject".to_string(), "Everything".to_string())].into();
        assert_eq!(IncludeObject::from_params(&bogus).unwrap_err().status.code, 400);
    }

    /// kubectl's ages (apimachinery's `duration.HumanDuration`), at each of its edges.
    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let (m, h, d) = (60, 3600, 86400);
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (5 * m + 30, "5m30s"),
            (10 * m + 30, "10m"),
            (150 * m, "150m"),
            (3 * h, "3h"),
            (5 * h + 20 * m, "5h20m"),
            (8 * h + 20 * m, "8h"),
            (47 * h, "47h"),
            (2 * d, "2d"),
            (3 * d + 4 * h, "3d4h"),
            (8 * d + 4 * h, "8d"),
            (729 * d, "729d"),
            (2 * 365 * d + 30 * d, "2y30d"),
            (3 * 365 * d, "3y"),
            (9 * 365 * d + 40 * d, "9y"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs} s");
        }
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T01:00:00Z").unwrap().with_timezone(&chrono::Utc);
        assert_eq!(age("2026-01-01T00:54:30Z", now), "5m30s");
        assert_eq!(age("yesterday", now), "<unknown>");
    }

    /// A node's STATUS and ROLES as kubectl's `get nodes` prints them.
    #[test]
    fn node_status_and_roles_read_as_kubectl_prints_them() {
        let cells = |node: Value| {
            let t = table(&crate::resources::NODE, TableVersion::V1, &[&node], None, true, IncludeObject::None);
            let at =
                |name: &str| t["columnDefinitions"].as_array().unwrap().iter().position(|c| c["name"] == name).unwrap();
            let row = &t["rows"][0]["cells"];
            (row[at("Status")].clone(), row[at("Roles")].clone())
        };
        let node = |labels: Value, ready: Option<&str>, cordoned: bool| {
            let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "labels": labels},
                "spec": {"unschedulable": cordoned}});
            if let Some(r) = ready {
                n["status"] = json!({"conditions": [{"type": "Ready", "status": r}]});
            }
            n
        };
        assert_eq!(cells(node(json!({}), None, false)), (json!("Unknown"), json!("<none>")));
        assert_eq!(cells(node(json!({}), Some(""), false)), (json!("NotReady"), json!("<none>")));
        assert_eq!(
            cells(node(json!({}), Some("Unknown"), true)),
            (json!("NotReady,SchedulingDisabled"), json!("<none>"))
        );
        let labels = json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/infra": "",
            "kubernetes.io/role": "worker", "node-role.kubernetes.io/": ""});
        assert_eq!(cells(node(labels, Some("True"), false)), (json!("Ready"), json!("infra,worker")));
        let legacy = json!({"kubernetes.io/role": "master", "kubernetes.io/hostname": "a"});
        assert_eq!(cells(node(legacy, Some("False"), false)), (json!("NotReady"), json!("master")));
    }

    /// While a node updates, REASON says how far its long OS download is (the agent's
    /// `aloft.dev/progress`; a picked node downloads before it reports Working, so it may still
    /// say Done on its old config); a reason of its own or a drain past its timeout wins.
    #[test]
    fn a_working_node_shows_its_download_in_reason() {
        let cells = |annotations: Value| {
            let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "annotations": annotations}});
            let t = table(&crate::resources::NODE, TableVersion::V1, &[&n], None, true, IncludeObject::None);
            let at =
                |name: &str| t["columnDefinitions"].as_array().unwrap().iter().position(|c| c["name"] == name).unwrap();
            let row = &t["rows"][0]["cells"];
            (row[at("State")].clone(), row[at("Reason")].clone())
        };
        let progress = "downloading OS commit abc: 40 of 1200 objects, 310 MB in 1m30s";
        let working = json!({ann::STATE: "Working", ann::REASON: "", ann::PROGRESS: progress});
        assert_eq!(cells(working.clone()), (json!("Working"), json!(progress)));
        let mut picked = working.clone();
        picked[ann::STATE] = json!("Done");
        assert_eq!(cells(picked), (json!("Done"), json!(progress)), "picked, downloading before its Working report");
        let mut degraded = working.clone();
        degraded[ann::STATE] = json!("Degraded");
        degraded[ann::REASON] = json!("pull failed");
        assert_eq!(cells(degraded), (json!("Degraded"), json!("pull failed")));
        let mut draining = working.clone();
        draining[ann::DRAIN_FAILURE] = json!("drain past its timeout");
        assert_eq!(cells(draining), (json!("Degraded"), json!("drain past its timeout")));
        assert_eq!(cells(json!({ann::STATE: "Working"})), (json!("Working"), json!("")));
    }

    /// A budget without a selector covers every node, as one with `selector: {}` does, and its
    /// Selector cell says so (it was blank, which reads as "selects nothing").
    #[test]
    fn a_budget_without_a_selector_shows_all() {
        let selector_cell = |spec: Value| {
            let b = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget",
                "metadata": {"name": "b"}, "spec": spec});
            let t = table(
                &crate::resources::NODE_DISRUPTION_BUDGET,
                TableVersion::V1,
                &[&b],
                None,
                true,
                IncludeObject::None,
            );
            let column =
                t["columnDefinitions"].as_array().unwrap().iter().position(|c| c["name"] == "Selector").unwrap();
            t["rows"][0]["cells"][column].clone()
        };
        assert_eq!(selector_cell(json!({"maxUnavailable": 1})), "<all>");
        assert_eq!(selector_cell(json!({"maxUnavailable": 1, "selector": {}})), "<all>");
        assert_eq!(selector_cell(json!({"maxUnavailable": 1, "selector": {"matchLabels": {"zone": "a"}}})), "zone=a");
    }
}
