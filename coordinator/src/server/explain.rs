//! What `kubectl explain` reads: the fields of the kinds an admin writes or reads by hand (a
//! MachineConfigPool's, with aloft's `spec.rollout` and `spec.drain`, aloft's own
//! NodeDisruptionBudget, a MachineConfig's and a Node's), as OpenAPI v3 properties with descriptions. `oc explain mcp.spec`
//! documents OpenShift's fields; without these, `kubectl explain mcp.spec.maxUnavailable` said
//! the field does not exist. Every object still keeps unknown fields in the schema
//! (`x-kubernetes-preserve-unknown-fields`): admission, not the schema, is what checks them.

use serde_json::{json, Value};

fn field(type_: &str, description: &str) -> Value {
    json!({"type": type_, "description": description})
}

fn int_or_string(description: &str) -> Value {
    // As Kubernetes' own IntOrString schema is written (kubectl explain shows it as a string; the
    // description says a count or a percentage).
    json!({"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": true, "description": description})
}

fn object(description: &str, properties: Value) -> Value {
    json!({"type": "object", "description": description, "properties": properties})
}

fn label_selector(description: &str) -> Value {
    object(
        description,
        json!({
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "Labels an object must have, each with this value."},
            "matchExpressions": {"type": "array", "description": "Requirements an object's labels must meet, all of them.",
                "items": object("A label requirement.", json!({
                    "key": field("string", "The label key."),
                    "operator": field("string", "In, NotIn, Exists or DoesNotExist."),
                    "values": {"type": "array", "items": {"type": "string"},
                        "description": "Values for In and NotIn; empty for Exists and DoesNotExist."},
                }))},
        }),
    )
}

fn conditions() -> Value {
    json!({"type": "array", "description": "The object's conditions, Kubernetes style.",
    "items": object("A condition.", json!({
        "type": field("string", "The condition's type."),
        "status": field("string", "True, False or Unknown."),
        "reason": field("string", "Why, in one CamelCase word or a short phrase."),
        "message": field("string", "Why, in words."),
        "lastTransitionTime": field("string", "When the status last changed (RFC 3339)."),
    }))})
}

fn pool_spec() -> Value {
    object(
        "What the pool's nodes run and how a new config is rolled out to them.",
        json!({
            "machineConfigSelector": label_selector(
                "The MachineConfigs rendered into the pool's config, by their labels (usually \
                 machineconfiguration.openshift.io/role)."),
            "nodeSelector": label_selector(
                "The pool's nodes, by their labels. A custom pool takes its nodes from worker; \
                 master beats a custom pool; a node in two custom pools is an error on both."),
            "maxUnavailable": int_or_string(
                "How many of the pool's nodes may be unavailable at once (not Ready, cordoned, \
                 updating or degraded, whatever the reason): a count or a percentage of the \
                 pool (rounded down, at least 1). Default 1."),
            "paused": field("boolean",
                "Stop moving nodes to new configs; the pool's status is still kept. Nodes that join get \
                 the config the pool's nodes run."),
            "configuration": object("The rendered config the pool's nodes are moved to (set by the render controller).",
                json!({
                    "name": field("string", "The rendered MachineConfig's name."),
                    "source": {"type": "array", "description": "The MachineConfigs it was rendered from.",
                        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                })),
            "rollout": object(
                "aloft: how each new config is rolled out beyond maxUnavailable.",
                json!({
                    "canary": field("integer", "Update only this many nodes first (0: none)."),
                    "soakSeconds": field("integer",
                        "Then wait this long once the canaries are updated and back in service \
                         (at most 31536000, a year)."),
                    "maxFailures": field("integer",
                        "Stop picking nodes for the config (condition CircuitBroken) when more than this \
                         many nodes fail on it; resume with `aloftctl rollout resume mcp/NAME`. Unset: \
                         never stop."),
                    "prestage": field("boolean",
                        "Ask waiting nodes to download the config's OS image ahead of their turn. Default true."),
                    "maintenance": object(
                        "When nodes may start an update: outside every window none is picked (condition \
                         MaintenanceWindowClosed); updates under way finish, waiting nodes still pre-stage. \
                         Unset: any time.",
                        json!({
                            "timeZone": field("string",
                                "An IANA time zone name (Europe/Berlin) from the coordinator's database; \
                                 default UTC. Windows follow its daylight saving time."),
                            "windows": {"type": "array",
                                "description": "Weekly windows; overlapping or touching ones make one.",
                                "items": object("A window that opens on each of its days.", json!({
                                    "days": {"type": "array", "description": "Mon .. Sun (or full names).",
                                        "items": {"type": "string"}},
                                    "startTime": field("string", "HH:MM, 24-hour, in timeZone."),
                                    "lengthMinutes": field("integer",
                                        "How long it stays open, 1 to 10080 (a week), past midnight if need be."),
                                }))},
                        }),
                    ),
                }),
            ),
            "drain": object(
                "aloft: how a node is drained before an update that needs it.",
                json!({
                    "timeoutSeconds": field("integer",
                        "A drain (or uncordon) not finished within this many seconds marks the node \
                         degraded, and is retried. Default 3600 (MCO's hour)."),
                    "hooks": {"type": "array",
                        "description": "Webhooks called in order after the cordon (phase drain) and before \
                            the uncordon (phase uncordon); any 2xx answer is success.",
                        "items": object("A drain webhook.", json!({
                            "url": field("string", "Where to POST: http or https."),
                            "timeoutSeconds": field("integer", "How long one call may take (default 30, at most 3600)."),
                        }))},
                }),
            ),
        }),
    )
}

fn pool_status() -> Value {
    let count = |what: &str| field("integer", what);
    object(
        "Where the pool's rollout stands, as MCO computes it.",
        json!({
            "configuration": object("The config every node of the pool runs, once they all do.",
                json!({"name": field("string", "The rendered MachineConfig's name.")})),
            "machineCount": count("Nodes in the pool."),
            "updatedMachineCount": count("Nodes on the pool's target config, finished."),
            "readyMachineCount": count("Nodes updated and ready (Ready, not cordoned)."),
            "unavailableMachineCount": count("Nodes not ready or still updating."),
            "degradedMachineCount": count("Nodes that failed to update (Degraded or Unreconcilable) or are stuck in a drain."),
            "observedGeneration": count("The spec generation this status is about."),
            "conditions": conditions(),
            "rollout": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "description": "aloft: the rollout policy's record (phase, soak start, failed nodes)."},
        }),
    )
}

fn budget_spec() -> Value {
    object(
        "Which nodes the budget covers and how many of them may be disrupted at once, across pools.",
        json!({
            "selector": label_selector("The nodes covered; empty covers every node."),
            "minAvailable": int_or_string(
                "At least this many covered nodes (of each group) stay available: a count or a \
                 percentage (rounded up). Exclusive with maxUnavailable."),
            "maxUnavailable": int_or_string(
                "At most this many covered nodes (of each group) are unavailable at once: a count \
                 or a percentage (rounded up, as a PodDisruptionBudget's). Exclusive with minAvailable."),
            "groupBy": {"type": "array", "items": {"type": "string"},
                "description": "Label keys: nodes with equal values for all of them form a group, each \
                    held to the budget on its own (e.g. topology.kubernetes.io/zone). Empty: one group."},
        }),
    )
}

fn fleet_lock_spec() -> Value {
    object(
        "A FleetLock group (the object's name) whose hosts update with Zincati's fleet_lock strategy \
         against the coordinator's FleetLock endpoint (serve --fleetlock-listen).",
        json!({
            "maxHolders": field("integer",
                "How many hosts of the group may hold a slot (reboot) at once. Default 1. Lowering it \
                 takes no slot back."),
        }),
    )
}

fn fleet_lock_status() -> Value {
    object(
        "The hosts holding a slot, as the FleetLock requests left them.",
        json!({
            "holders": {"type": "array", "description": "One per host holding a slot.",
                "items": object("A holder.", json!({
                    "id": field("string", "The host's FleetLock client_params.id (Zincati: its app-specific machine ID)."),
                    "since": field("string", "When it took the slot (RFC 3339)."),
                }))},
        }),
    )
}

fn cluster_version_spec() -> Value {
    let release = |what: &str| {
        object(
            what,
            json!({
                "version": field("string", "The release's semantic version, looked up in the update graph."),
                "image": field("string",
                    "The release's payload: an osImageURL agents deploy (ostree+http(s)://HOST/PATH#REF@CHECKSUM). \
                     Needed for a release the graph does not offer; must agree with the graph otherwise."),
                "force": field("boolean",
                    "Take the release although a precondition fails (a rollback, a hop over a minor); what \
                     was overridden is kept in the history's acceptedRisks."),
            }),
        )
    };
    object(
        "The fleet's release and where its updates come from (the object named version).",
        json!({
            "clusterID": field("string", "A UUID sent to the update service as id."),
            "channel": field("string", "The update service's channel to follow (lowercase letters, digits, '-' and '.')."),
            "upstream": field("string",
                "The update service's graph URL (Cincinnati protocol), e.g. \
                 https://updates.example/api/upgrades_info/v1/graph. No default."),
            "desiredUpdate": release(
                "The release the fleet should run: setting it starts an update, written to the \
                 00-master-release and 00-worker-release MachineConfigs and rolled out by the pools."),
            "automaticUpdates": object(
                "aloft's: take updates as the graph offers them, as Zincati does for a Fedora CoreOS host.",
                json!({
                    "enabled": field("boolean",
                        "When true, desiredUpdate is set to the newest recommended update once the current \
                         release has completed: newer than every release in the history (a rollback holds \
                         until a newer release is offered), passing the preconditions, never a conditional \
                         update. The pools' windows, canaries and budgets pace it."),
                }),
            ),
        }),
    )
}

fn cluster_version_status() -> Value {
    let release = || {
        object(
            "A release.",
            json!({
                "version": field("string", "Semantic version."),
                "image": field("string", "The payload (osImageURL)."),
                "url": field("string", "The release's notes."),
                "channels": {"type": "array", "items": {"type": "string"}, "description": "The channels it is in."},
            }),
        )
    };
    object(
        "What the coordinator found and did: the graph's updates and the rollout of the desired release.",
        json!({
            "desired": release(),
            "history": {"type": "array", "description": "Releases taken, newest first (at most 100).",
                "items": object("One release taken.", json!({
                    "state": field("string", "Partial until every pool runs it, then Completed."),
                    "startedTime": field("string", "When it was accepted (RFC 3339)."),
                    "completionTime": field("string", "When every pool ran it, or it was superseded."),
                    "version": field("string", "Semantic version."),
                    "image": field("string", "The payload (osImageURL)."),
                    "verified": field("boolean",
                        "false: the coordinator does not check payload signatures; each agent checks the OS \
                         commit's before deploying it."),
                    "acceptedRisks": field("string", "What force overrode, or why the graph did not recommend it."),
                }))},
            "observedGeneration": field("integer", "The spec generation this status is about."),
            "availableUpdates": {"type": "array", "items": release(),
                "description": "Releases the graph recommends from the current one."},
            "conditionalUpdates": {"type": "array", "description": "Releases offered with known risks.",
                "items": object("A conditional update.", json!({
                    "release": release(),
                    "risks": {"type": "array", "description": "The graph's risks: name, message, url, matchingRules.",
                        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "conditions": {"type": "array", "description": "Recommended: True, False (a risk applies: \
                        matchingRules Always) or Unknown (PromQL rules cannot be evaluated here).",
                        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                }))},
            "conditions": {"type": "array", "description": "RetrievedUpdates, ReleaseAccepted, Progressing, \
                Available, Failing.", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        }),
    )
}

fn budget_status() -> Value {
    let count = |what: &str| field("integer", what);
    object(
        "The budget's counts, as a PodDisruptionBudget's (for its tightest group).",
        json!({
            "expectedNodes": count("Covered nodes."),
            "currentHealthy": count("Covered nodes available now."),
            "desiredHealthy": count("Covered nodes that must stay available."),
            "disruptionsAllowed": count("How many more covered nodes may be disrupted now."),
            "observedGeneration": count("The spec generation this status is about."),
            "groups": {"type": "array", "description": "The counts of each group (with groupBy).",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "conditions": conditions(),
        }),
    )
}

fn machine_config_spec() -> Value {
    object(
        "What the nodes of the pools whose machineConfigSelector picks this config run. A pool \
         merges its configs in name order; the result is a rendered config (rendered-POOL-HASH), \
         which cannot be edited.",
        json!({
            "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "description": "An Ignition config (spec 3.x): storage.files, storage.links, \
                    storage.directories, systemd.units (with dropins), passwd.users (core's \
                    sshAuthorizedKeys and passwordHash). Files and units are written by the agent; \
                    what it cannot apply is refused when the config is created (422)."},
            "osImageURL": field("string",
                "The OS to run: ostree+http(s)://HOST/PATH#REF@CHECKSUM (one signed ostree commit). \
                 Empty: keep the booted OS. Another form is stored and rendered, and the node \
                 refuses it (Unreconcilable)."),
            "kernelArguments": {"type": "array", "items": {"type": "string"},
                "description": "Kernel arguments added to the OS's (applied with a reboot, through \
                    the OS helper); the configs' lists are joined in name order."},
            "fips": field("boolean", "FIPS mode; true if any merged config sets it."),
            "extensions": {"type": "array", "items": {"type": "string"},
                "description": "RHCOS extensions: not supported (the OS image is one commit); a config \
                    with any is stored, and its pools do not render (RenderDegraded)."},
            "kernelType": field("string",
                "default only: another kernel is not supported (its pools do not render)."),
        }),
    )
}

fn node_spec() -> Value {
    object(
        "The node as the coordinator schedules its updates.",
        json!({
            "unschedulable": field("boolean",
                "Cordoned: the drain controller sets it before a disruptive update and clears it after; \
                 `kubectl cordon` sets it by hand. A cordoned node counts as unavailable in its pool."),
        }),
    )
}

fn node_status() -> Value {
    object(
        "What the node's agent reports.",
        json!({
            "conditions": conditions(),
            "nodeInfo": object("The host, reported by the agent at each start.", json!({
                "kubeletVersion": field("string",
                    "The node's aloft-agent build: its version, and the commit it was built from as semver build \
                     metadata (v0.1.0+1a2b3c4d5e6f; .dirty after it for uncommitted changes)."),
                "osImage": field("string", "os-release's PRETTY_NAME."),
                "kernelVersion": field("string", "The running kernel (uname -r)."),
                "machineID": field("string", "/etc/machine-id."),
                "systemUUID": field("string", "The DMI product UUID, where the host has one."),
                "bootID": field("string", "The boot's ID: changes with every reboot."),
                "operatingSystem": field("string", "linux."),
                "architecture": field("string",
                    "amd64, arm64, ppc64le, s390x, ...: the update graph is asked for the one the Nodes that take \
                     the release report. Reported once: the node's credential may not change it (enrolling again \
                     clears it)."),
            })),
        }),
    )
}

/// The properties of `kind`'s schema, for the kinds described here.
pub fn properties(kind: &str) -> Option<Value> {
    let (spec, status) = match kind {
        "MachineConfigPool" => (pool_spec(), pool_status()),
        "NodeDisruptionBudget" => (budget_spec(), budget_status()),
        "FleetLock" => (fleet_lock_spec(), fleet_lock_status()),
        "ClusterVersion" => (cluster_version_spec(), cluster_version_status()),
        "Node" => (node_spec(), node_status()),
        "MachineConfig" => (machine_config_spec(), Value::Null),
        _ => return None,
    };
    let mut props = json!({
        "apiVersion": field("string", "The versioned schema of this object."),
        "kind": field("string", "The kind of this object."),
        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "description": "Standard object metadata: name, labels, annotations, ..."},
        "spec": spec,
        "status": status,
    });
    // A MachineConfig has no status (MCO's CRD has none either).
    if props["status"].is_null() {
        props.as_object_mut().map(|p| p.remove("status"));
    }
    Some(props)
}
