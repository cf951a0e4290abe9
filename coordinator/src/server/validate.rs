//! Admission: what an object must satisfy before it is stored. Every failure is a field path and a
//! message (HTTP 422), and nothing is stored.

use super::error::cause;
use crate::resources::ResourceType;
use aloft_api::machineconfig::{MAX_COUNT, MAX_DURATION_SECONDS, MAX_HOOK_TIMEOUT_SECONDS};
use aloft_api::{IntOrString, MachineConfig, MachineConfigPool, Node, NodeDisruptionBudget, StatusCause};
use serde_json::Value;

/// DNS-1123 subdomain: what Kubernetes requires of most object names.
pub fn name_causes(name: &str) -> Vec<StatusCause> {
    let field = "metadata.name";
    if name.is_empty() {
        return vec![cause(field, "FieldValueRequired", "name or generateName is required")];
    }
    let mut out = Vec::new();
    if name.len() > 253 {
        out.push(cause(field, "FieldValueInvalid", "must be no more than 253 characters"));
    }
    let ok_label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    };
    if !name.split('.').all(ok_label) {
        out.push(cause(
            field,
            "FieldValueInvalid",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                 characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    out
}

/// Read the object as its type; a wrong type anywhere is a cause at that field's path.
/// Read plainly first: tracking the path of every field costs about as much again, and only an
/// invalid object needs it (every agent report goes through here).
fn typed<T: serde::de::DeserializeOwned>(obj: &Value, out: &mut Vec<StatusCause>) -> Option<T> {
    if let Ok(t) = <T as serde::Deserialize>::deserialize(obj) {
        return Some(t);
    }
    match serde_path_to_error::deserialize::<_, T>(obj) {
        Ok(t) => Some(t),
        Err(e) => {
            let field = e.path().to_string();
            let field = if field == "." { String::new() } else { field };
            out.push(cause(
                &field,
                "FieldValueInvalid",
                aloft_api::json_words::in_json_terms(&e.into_inner().to_string()),
            ));
            None
        }
    }
}

/// Field errors of aloft-api's checks, as causes.
fn field_errors(errs: Vec<aloft_api::reconcile::FieldError>, out: &mut Vec<StatusCause>) {
    out.extend(errs.into_iter().map(|e| cause(&e.field, "FieldValueInvalid", e.message)));
}

fn selector_causes(sel: &Option<aloft_api::LabelSelector>, field: &str, out: &mut Vec<StatusCause>) {
    if let Some(s) = sel {
        field_errors(s.field_errors(field), out);
    }
}

/// `metadata.labels` of any kind, by Kubernetes' rules. Values that are not strings are left
/// to the typed read, which names them.
fn label_causes(obj: &Value, out: &mut Vec<StatusCause>) {
    let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) else { return };
    for (k, v) in labels {
        let Some(v) = v.as_str() else { continue };
        for m in aloft_api::selector::label_key_errors(k) {
            out.push(cause("metadata.labels", "FieldValueInvalid", format!("Invalid value: {k:?}: {m}")));
        }
        for m in aloft_api::selector::label_value_errors(v) {
            out.push(cause("metadata.labels", "FieldValueInvalid", format!("Invalid value: {v:?}: {m}")));
        }
    }
}

fn max_unavailable_causes(mu: &Option<IntOrString>, out: &mut Vec<StatusCause>) {
    int_or_percent_causes(mu, "spec.maxUnavailable", out)
}

/// An int from 0 to [`MAX_COUNT`] or a percentage `0%`..`100%`.
fn int_or_percent_causes(mu: &Option<IntOrString>, field: &str, out: &mut Vec<StatusCause>) {
    match mu {
        Some(IntOrString::Int(n)) => count_causes(Some(*n), field, (0, MAX_COUNT, ""), out),
        Some(IntOrString::String(s)) => {
            let ok = s.strip_suffix('%').and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| p <= 100);
            if !ok {
                out.push(cause(
                    field,
                    "FieldValueInvalid",
                    format!("Invalid value: {s:?}: must be an integer or a percentage from 0% to 100% like \"10%\""),
                ));
            }
        }
        None => {}
    }
}

/// What the ClusterVersion controller could not use: a name it does not read, a channel or URL
/// the update service would refuse, a release that is no version or no OS an agent deploys.
fn cluster_version_causes(c: &aloft_api::clusterversion::ClusterVersion, out: &mut Vec<StatusCause>) {
    use aloft_api::clusterversion::{valid_channel, valid_cluster_id, NAME};
    if c.metadata.name != NAME {
        out.push(cause(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: {:?}: a fleet has one ClusterVersion, named {NAME:?}", c.metadata.name),
        ));
    }
    let spec = &c.spec;
    if !spec.channel.is_empty() && !valid_channel(&spec.channel) {
        out.push(cause(
            "spec.channel",
            "FieldValueInvalid",
            format!("Invalid value: {:?}: lowercase letters, digits, '-' and '.' only (at most 100)", spec.channel),
        ));
    }
    if !spec.cluster_id.is_empty() && !valid_cluster_id(&spec.cluster_id) {
        out.push(cause(
            "spec.clusterID",
            "FieldValueInvalid",
            format!("Invalid value: {:?}: must be a UUID (8-4-4-4-12 hex digits)", spec.cluster_id),
        ));
    }
    if !spec.upstream.is_empty() {
        match reqwest::Url::parse(&spec.upstream) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            Ok(_) => out.push(cause(
                "spec.upstream",
                "FieldValueInvalid",
                format!("Invalid value: {:?}: must be an http or https URL", spec.upstream),
            )),
            Err(e) => out.push(cause(
                "spec.upstream",
                "FieldValueInvalid",
                format!("Invalid value: {:?}: {e}", spec.upstream),
            )),
        }
    }
    if let Some(u) = &spec.desired_update {
        if u.version.is_empty() && u.image.is_empty() {
            out.push(cause("spec.desiredUpdate", "FieldValueRequired", "Required value: a version, an image, or both"));
        }
        if !u.version.is_empty() && semver::Version::parse(&u.version).is_err() {
            out.push(cause(
                "spec.desiredUpdate.version",
                "FieldValueInvalid",
                format!("Invalid value: {:?}: must be a semantic version (e.g. 4.8.2)", u.version),
            ));
        }
        if !u.image.is_empty() {
            if let Err(e) = aloft_api::osimage::parse(&u.image) {
                out.push(cause("spec.desiredUpdate.image", "FieldValueInvalid", format!("Invalid value: {e}")));
            }
        }
    }
}

/// What the catalog controller could not read: a catalog image (OLM runs it as a pod; aloft has
/// none), an address that is no HTTP(S) URL, a poll interval that is no Go duration.
fn catalog_source_causes(c: &aloft_api::olm::CatalogSource, out: &mut Vec<StatusCause>) {
    use aloft_api::olm::SOURCE_TYPE_HTTP;
    let spec = &c.spec;
    match spec.source_type.as_str() {
        "" => out.push(cause(
            "spec.sourceType",
            "FieldValueRequired",
            format!("Required value: {SOURCE_TYPE_HTTP:?} (a file-based catalog read from spec.address)"),
        )),
        SOURCE_TYPE_HTTP => {}
        other => {
            let why = match other {
                "grpc" | "configmap" | "internal" => {
                    " (OLM runs such a catalog as a pod, and aloft runs no pods: serve the catalog's file-based \
                     content over HTTP, e.g. `opm render <image> -o json`, and point spec.address at it)"
                }
                _ => "",
            };
            out.push(cause(
                "spec.sourceType",
                "FieldValueNotSupported",
                format!("Unsupported value: {other:?}: supported values: {SOURCE_TYPE_HTTP:?}{why}"),
            ));
        }
    }
    if spec.source_type == SOURCE_TYPE_HTTP {
        if spec.address.is_empty() {
            out.push(cause(
                "spec.address",
                "FieldValueRequired",
                "Required value: the http(s) URL of the catalog's file-based content (a JSON or YAML stream)",
            ));
        } else {
            match reqwest::Url::parse(&spec.address) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                Ok(_) => out.push(cause(
                    "spec.address",
                    "FieldValueInvalid",
                    format!("Invalid value: {:?}: must be an http or https URL", spec.address),
                )),
                Err(e) => out.push(cause(
                    "spec.address",
                    "FieldValueInvalid",
                    format!("Invalid value: {:?}: {e}", spec.address),
                )),
            }
        }
    }
    let interval = spec.update_strategy.as_ref().and_then(|u| u.registry_poll.as_ref()).map(|p| p.interval.as_str());
    if let Some(i) = interval.filter(|i| !i.is_empty()) {
        if aloft_api::olm::parse_go_duration(i).is_none() {
            out.push(cause(
                "spec.updateStrategy.registryPoll.interval",
                "FieldValueInvalid",
                format!("Invalid value: {i:?}: must be a duration such as 15m, 1h or 1h30m, of at most 2562047h"),
            ));
        }
    }
}

/// What OLM's Subscription CRD requires, and an approval it knows.
fn subscription_causes(sub: &aloft_api::olm::Subscription, out: &mut Vec<StatusCause>) {
    for (field, value, what) in [
        ("spec.name", &sub.spec.name, "the package to install"),
        ("spec.source", &sub.spec.source, "the CatalogSource's name"),
        ("spec.sourceNamespace", &sub.spec.source_namespace, "the CatalogSource's namespace"),
    ] {
        if value.is_empty() {
            out.push(cause(field, "FieldValueRequired", format!("Required value: {what}")));
        }
    }
    approval_causes(&sub.spec.install_plan_approval, "spec.installPlanApproval", out);
}

/// OLM's OperatorGroup: namespaces that could exist, a selector that reads, a strategy OLM knows.
fn operator_group_causes(og: &aloft_api::olm::OperatorGroup, out: &mut Vec<StatusCause>) {
    for (i, ns) in og.spec.target_namespaces.iter().enumerate() {
        if !aloft_api::selector::is_dns_label(ns) {
            out.push(cause(
                &format!("spec.targetNamespaces[{i}]"),
                "FieldValueInvalid",
                format!(
                    "Invalid value: {ns:?}: a namespace name is a lowercase RFC 1123 label (at most 63 characters)"
                ),
            ));
        }
    }
    selector_causes(&og.spec.selector, "spec.selector", out);
    if let Some(name) = og.spec.upgrade_strategy.as_ref().map(|u| u.name.as_str()) {
        let known = aloft_api::olm::UPGRADE_STRATEGIES;
        if !known.contains(&name) {
            out.push(cause(
                "spec.upgradeStrategy.name",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {name:?}: supported values: {}",
                    known.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
}

fn approval_causes(approval: &str, field: &str, out: &mut Vec<StatusCause>) {
    use aloft_api::olm::{AUTOMATIC, MANUAL};
    if !approval.is_empty() && approval != AUTOMATIC && approval != MANUAL {
        out.push(cause(
            field,
            "FieldValueNotSupported",
            format!("Unsupported value: {approval:?}: supported values: {AUTOMATIC:?}, {MANUAL:?}"),
        ));
    }
}

/// A number that must be in `min..=max` when set; `unit` says what `max` is in words.
fn count_causes(v: Option<i64>, field: &str, (min, max, unit): (i64, i64, &str), out: &mut Vec<StatusCause>) {
    if let Some(n) = v.filter(|n| !(min..=max).contains(n)) {
        let why = if n < min { format!("must be >= {min}") } else { format!("must be at most {max}{unit}") };
        out.push(cause(field, "FieldValueInvalid", format!("Invalid value: {n}: {why}")));
    }
}

const COUNT: (i64, i64, &str) = (0, MAX_COUNT, "");
const DURATION: (i64, i64, &str) = (0, MAX_DURATION_SECONDS, " (one year)");
const TIMEOUT: (i64, i64, &str) = (1, MAX_DURATION_SECONDS, " (one year)");
const HOOK_TIMEOUT: (i64, i64, &str) = (1, MAX_HOOK_TIMEOUT_SECONDS, " (one hour)");

/// OpenShift's admission policy `custom-machine-config-pool-selector` (MCO 4.18 on), word for
/// word: a pool's `machineConfigSelector` must select the worker configs (or be the master,
/// worker or arbiter pool's). A custom pool that did not inherit worker rendered without them, and
/// labelling a worker into it removed every worker file and unit from that node.
fn pool_inheritance_causes(p: &MachineConfigPool, out: &mut Vec<StatusCause>) {
    const ROLE: &str = aloft_api::annotations::ROLE_LABEL;
    let inherits = p.spec.machine_config_selector.as_ref().is_some_and(|sel| {
        let own_role = matches!(sel.match_labels.get(ROLE).map(String::as_str), Some("master" | "worker" | "arbiter"));
        let by_expression = sel.match_expressions.iter().any(|e| {
            let worker = e.values.iter().any(|v| v == "worker");
            e.key == ROLE && ((e.operator == "In" && worker) || (e.operator == "NotIn" && !worker))
        });
        // OpenShift's check reads an expression's terms, not what the selector selects with
        // them: `matchLabels: {role: infra}` beside `In [worker, infra]` passes it and selects
        // no worker config. aloft also asks such a selector to select a worker config's labels.
        let worker_labels = std::collections::BTreeMap::from([(ROLE.to_string(), "worker".to_string())]);
        own_role || (by_expression && sel.to_selector().is_ok_and(|s| s.matches(&worker_labels)))
    });
    if !inherits {
        out.push(cause(
            "spec.machineConfigSelector",
            "FieldValueInvalid",
            "All custom MachineConfigPools must inherit from the worker pool and must have a machineConfigSelector \
             that matches for a 'machineconfiguration.openshift.io/role: worker' label",
        ));
    }
}

/// `spec.rollout` and `spec.drain`, aloft's extensions of the pool: counts and durations within
/// bounds, so that no controller does arithmetic on absurd values.
fn pool_extension_causes(p: &MachineConfigPool, out: &mut Vec<StatusCause>) {
    if let Some(r) = &p.spec.rollout {
        count_causes(r.canary, "spec.rollout.canary", COUNT, out);
        count_causes(r.soak_seconds, "spec.rollout.soakSeconds", DURATION, out);
        count_causes(r.max_failures, "spec.rollout.maxFailures", COUNT, out);
        if let Some(m) = &r.maintenance {
            let path = "spec.rollout.maintenance";
            if let Err(errors) = crate::controllers::maintenance::Schedule::parse(m, path) {
                for e in errors {
                    let kind = if e.required { "FieldValueRequired" } else { "FieldValueInvalid" };
                    out.push(cause(&e.field, kind, e.message));
                }
            }
        }
    }
    if let Some(d) = &p.spec.drain {
        count_causes(d.timeout_seconds, "spec.drain.timeoutSeconds", TIMEOUT, out);
        for (i, h) in d.hooks.iter().enumerate() {
            let field = format!("spec.drain.hooks[{i}].url");
            match reqwest::Url::parse(&h.url) {
                Err(_) if h.url.trim().is_empty() => out.push(cause(&field, "FieldValueRequired", "Required value")),
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
                Ok(u) => out.push(cause(
                    &field,
                    "FieldValueInvalid",
                    format!("{:?}: scheme {:?} is not supported (want http or https)", h.url, u.scheme()),
                )),
                Err(e) => out.push(cause(&field, "FieldValueInvalid", format!("{:?}: {e}", h.url))),
            }
            count_causes(h.timeout_seconds, &format!("spec.drain.hooks[{i}].timeoutSeconds"), HOOK_TIMEOUT, out);
        }
    }
}

/// NodeDisruptionBudget: a valid selector, exactly one of minAvailable / maxUnavailable, valid
/// label keys to group by.
fn budget_causes(b: &NodeDisruptionBudget, out: &mut Vec<StatusCause>) {
    field_errors(b.spec.selector.field_errors("spec.selector"), out);
    match (&b.spec.min_available, &b.spec.max_unavailable) {
        (Some(_), Some(_)) => out.push(cause(
            "spec",
            "FieldValueInvalid",
            "minAvailable and maxUnavailable are mutually exclusive: set one of them",
        )),
        (None, None) => {
            out.push(cause("spec", "FieldValueRequired", "one of minAvailable or maxUnavailable is required"))
        }
        _ => {}
    }
    int_or_percent_causes(&b.spec.min_available, "spec.minAvailable", out);
    int_or_percent_causes(&b.spec.max_unavailable, "spec.maxUnavailable", out);
    for (i, k) in b.spec.group_by.iter().enumerate() {
        for m in aloft_api::selector::label_key_errors(k) {
            out.push(cause(&format!("spec.groupBy[{i}]"), "FieldValueInvalid", format!("Invalid value: {k:?}: {m}")));
        }
    }
    for e in b.spec.group_by_errors() {
        out.push(cause(&e.field, "FieldValueDuplicate", e.message));
    }
}

/// Whether `next`, an update of `stored`, needs no check beyond this one: it differs from
/// `stored` only in `metadata.annotations`, each of which is a string, and in the fields the
/// server keeps (resourceVersion, generation). Fields an update leaves as they
/// were are not checked again, as Kubernetes' validation ratcheting does. Every agent report
/// is such an update; checking the whole Node for each was ~4% of the API threads' time in a
/// 10,000-node rollout.
pub fn only_annotations_changed(stored: &Value, next: &Value) -> bool {
    use super::objects::equal_except;
    let (Some(old), Some(new)) = (stored.get("metadata"), next.get("metadata")) else { return false };
    let annotations_are_strings = match new.get("annotations") {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.values().all(Value::is_string),
        Some(_) => false,
    };
    annotations_are_strings
        && equal_except(old, new, &["annotations", "resourceVersion", "generation"])
        && equal_except(stored, next, &["metadata"])
}

/// Kind-specific checks.
/// What admission accepts but says something about: a MachineConfig's Ignition keys that no
/// Ignition version has (a typo such as `contens`), which MCO's render ignores without a word
/// and the node then writes an empty file for. kubectl prints each as `Warning: ...`.
pub fn object_warnings(r: &ResourceType, obj: &Value) -> Vec<String> {
    if r.kind == "MachineConfigPool" {
        return pool_warnings(obj);
    }
    if r.kind != "MachineConfig" {
        return Vec::new();
    }
    match obj.pointer("/spec/config").map(aloft_api::ignition::parse_with_warnings) {
        Some(Ok(parsed)) => parsed.warnings,
        _ => Vec::new(),
    }
}

/// A rendered MachineConfig's spec is refused any change. Its name is the hash of what its pool's
/// MachineConfigs render to, the nodes already on it check their disks against it, and the render
/// controller never looks at it again: an edit reached only the nodes that had not yet updated,
/// and read as drift (Degraded) on the others. MCO documents rendered configs as not meant to be
/// changed and lets the edit through; here it gets the way that works. "Rendered" is the render
/// controller's own rule ([`aloft_api::render::is_generated`]: owned by a pool, or a `rendered-`
/// name with the generated-by annotation), judged on the stored object, and what marks it may not
/// be dropped either (a write that dropped the annotation, then one that edited the spec, got
/// through). Source configs exported from OpenShift carry the annotation too (`00-worker`): they
/// are inputs here, and editable. Labels, other annotations and finalizers may change.
pub fn generated_config_causes(r: &ResourceType, obj: &Value, stored: &Value) -> Vec<StatusCause> {
    if r.kind != "MachineConfig" || !rendered_config(stored) {
        return Vec::new();
    }
    let name = stored.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let mut out = Vec::new();
    if obj.get("spec") != stored.get("spec") {
        out.push(cause(
            "spec",
            "FieldValueForbidden",
            format!(
                "Forbidden: {name} is rendered by aloft from its pool's MachineConfigs and may not be changed: \
                 edit or add a MachineConfig that the pool's machineConfigSelector picks, and the pool renders \
                 and rolls out a new config"
            ),
        ));
    }
    if !rendered_config(obj) {
        out.push(cause(
            "metadata",
            "FieldValueForbidden",
            format!(
                "Forbidden: {name} is rendered by aloft: its ownerReference to its pool, and the annotation {} \
                 of a rendered- name, may not be removed",
                aloft_api::annotations::GENERATED_BY
            ),
        ));
    }
    out
}

/// The render controller's rule on the object as JSON ([`crate::config_use::owner_pool`], the
/// one `adm prune` and the garbage collector use: a rendered config can be large, and needs no
/// typed copy for each write).
fn rendered_config(v: &Value) -> bool {
    crate::config_use::owner_pool(v).is_some()
}

/// A rollout policy that says less than it seems to: a breaker that tolerates as many failures
/// as there are canaries lets a canary batch that fails entirely go on to the batches (Flight
/// Control's per-batch success threshold would stop it).
fn pool_warnings(obj: &Value) -> Vec<String> {
    let rollout = obj.pointer("/spec/rollout");
    let int = |k: &str| rollout.and_then(|r| r.get(k)).and_then(Value::as_i64);
    match (int("canary"), int("maxFailures")) {
        (Some(canary), None) if canary > 0 => vec![format!(
            "spec.rollout.canary {canary} without spec.rollout.maxFailures: canaries that fail do not stop the \
             rollout, the batches follow once they are done (set maxFailures to 0 to stop at the first failure)"
        )],
        (Some(canary), Some(k)) if canary > 0 && k >= canary => vec![format!(
            "spec.rollout.maxFailures {k} is not below spec.rollout.canary {canary}: canaries that all fail \
             do not stop the rollout (set maxFailures to at most {})",
            canary - 1
        )],
        _ => Vec::new(),
    }
}

/// The most all annotations of an object may hold, keys and values, as in Kubernetes.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// `metadata.annotations` by Kubernetes' rules: each key a qualified name (taken in lower case,
/// as kube-apiserver does), and at most 256 KiB in all. Keys `stored` already has are not
/// checked again (an agent's report only changes values). Runs for every write, the ones that
/// change only annotations too.
pub fn annotation_causes(obj: &Value, stored: Option<&Value>) -> Vec<StatusCause> {
    let mut out = Vec::new();
    let Some(annotations) = obj.pointer("/metadata/annotations").and_then(Value::as_object) else { return out };
    let old = stored.and_then(|s| s.pointer("/metadata/annotations")).and_then(Value::as_object);
    let mut total = 0;
    for (k, v) in annotations {
        total += k.len() + v.as_str().map_or(0, str::len);
        if old.is_some_and(|o| o.contains_key(k)) {
            continue;
        }
        for m in aloft_api::selector::label_key_errors(&k.to_lowercase()) {
            out.push(cause("metadata.annotations", "FieldValueInvalid", format!("Invalid value: {k:?}: {m}")));
        }
    }
    if total > MAX_ANNOTATIONS_BYTES {
        out.push(cause(
            "metadata.annotations",
            "FieldValueTooLong",
            format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
        ));
    }
    out
}

/// The types of the metadata fields no kind's typed read covers: `generateName` and
/// `managedFields`. Stored as anything, they broke every typed client on the object (`kubectl
/// describe`, `cordon` and `drain` of a Node failed to decode it).
fn meta_type_causes(obj: &Value, out: &mut Vec<StatusCause>) {
    let Some(meta) = obj.get("metadata") else { return };
    let wrong = |field: &str, v: &Value, want: &str| {
        cause(field, "FieldValueInvalid", format!("invalid type: {}, expected {want}", json_type(v)))
    };
    if let Some(g) = meta.get("generateName").filter(|g| !g.is_null() && !g.is_string()) {
        out.push(wrong("metadata.generateName", g, "a string"));
    }
    let Some(fields) = meta.get("managedFields").filter(|f| !f.is_null()) else { return };
    let Some(entries) = fields.as_array() else {
        out.push(wrong("metadata.managedFields", fields, "a list of ManagedFieldsEntry"));
        return;
    };
    for (i, e) in entries.iter().enumerate() {
        let at = format!("metadata.managedFields[{i}]");
        let Some(e) = e.as_object() else {
            out.push(wrong(&at, e, "a ManagedFieldsEntry object"));
            continue;
        };
        for (k, v) in e {
            let ok = match k.as_str() {
                "manager" | "operation" | "apiVersion" | "time" | "fieldsType" | "subresource" => v.is_string(),
                "fieldsV1" => v.is_object(),
                _ => true,
            } || v.is_null();
            if !ok {
                let want = if k == "fieldsV1" { "an object" } else { "a string" };
                out.push(wrong(&format!("{at}.{k}"), v, want));
            }
        }
    }
}

/// A core/v1 Event lives in its object's namespace, or, for a cluster-scoped object, in
/// `default` (kube-apiserver's rule for Events, which `kubectl describe` relies on to find them;
/// an Event with an `eventTime`, of the newer API, may also be in `kube-system`, and one about a
/// namespaced object is not checked).
fn event_namespace_causes(obj: &Value, out: &mut Vec<StatusCause>) {
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (namespace, involved) = (text("/metadata/namespace"), text("/involvedObject/namespace"));
    let newer = obj.get("eventTime").is_some_and(|t| !t.is_null());
    let fits = match (involved.is_empty(), newer) {
        (true, false) => namespace.is_empty() || namespace == "default",
        (true, true) => namespace == "default" || namespace == "kube-system",
        (false, false) => namespace == involved,
        (false, true) => true,
    };
    if !fits {
        out.push(cause(
            "involvedObject.namespace",
            "FieldValueInvalid",
            format!("Invalid value: {involved:?}: does not match event.namespace"),
        ));
    }
}

fn json_type(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) => format!("number `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".into(),
        Value::Object(_) => "map".into(),
    }
}

pub fn object_causes(r: &ResourceType, obj: &Value) -> Vec<StatusCause> {
    let mut out = Vec::new();
    label_causes(obj, &mut out);
    meta_type_causes(obj, &mut out);
    match r.kind {
        "MachineConfig" => {
            if let Some(mc) = typed::<MachineConfig>(obj, &mut out) {
                if let Err(e) = aloft_api::ignition::parse_config(&mc.spec.config) {
                    out.push(cause(&e.field(), "FieldValueInvalid", e.to_string()));
                }
                if let Err(errs) = aloft_api::reconcile::validate_for_day2(&mc.spec) {
                    field_errors(errs, &mut out);
                }
                // What an agent would refuse: unit names, file contents, kernel arguments.
                field_errors(aloft_api::content::spec_errors(&mc.spec), &mut out);
            }
        }
        "MachineConfigPool" => {
            if let Some(p) = typed::<MachineConfigPool>(obj, &mut out) {
                let before = out.len();
                selector_causes(&p.spec.machine_config_selector, "spec.machineConfigSelector", &mut out);
                // A selector that is itself invalid says so; whether it would inherit is moot.
                if out.len() == before {
                    pool_inheritance_causes(&p, &mut out);
                }
                selector_causes(&p.spec.node_selector, "spec.nodeSelector", &mut out);
                max_unavailable_causes(&p.spec.max_unavailable, &mut out);
                pool_extension_causes(&p, &mut out);
            }
        }
        "NodeDisruptionBudget" => {
            if let Some(b) = typed::<NodeDisruptionBudget>(obj, &mut out) {
                budget_causes(&b, &mut out);
            }
        }
        "Node" => {
            typed::<Node>(obj, &mut out);
        }
        "FleetLock" => {
            if let Some(f) = typed::<aloft_api::fleetlock::FleetLock>(obj, &mut out) {
                count_causes(f.spec.max_holders, "spec.maxHolders", COUNT, &mut out);
            }
        }
        "ClusterVersion" => {
            if let Some(c) = typed::<aloft_api::clusterversion::ClusterVersion>(obj, &mut out) {
                cluster_version_causes(&c, &mut out);
            }
        }
        "CatalogSource" => {
            if let Some(c) = typed::<aloft_api::olm::CatalogSource>(obj, &mut out) {
                catalog_source_causes(&c, &mut out);
            }
        }
        "Subscription" => {
            if let Some(sub) = typed::<aloft_api::olm::Subscription>(obj, &mut out) {
                subscription_causes(&sub, &mut out);
            }
        }
        "OperatorGroup" => {
            if let Some(og) = typed::<aloft_api::olm::OperatorGroup>(obj, &mut out) {
                operator_group_causes(&og, &mut out);
            }
        }
        "InstallPlan" => {
            if let Some(plan) = typed::<aloft_api::olm::InstallPlan>(obj, &mut out) {
                approval_causes(&plan.spec.approval, "spec.approval", &mut out);
            }
        }
        "ClusterServiceVersion" => {
            typed::<aloft_api::olm::ClusterServiceVersion>(obj, &mut out);
        }
        "Event" => event_namespace_causes(obj, &mut out),
        "MachineConfiguration" => {
            // The agent's own check (shared in aloft-api): a policy it would refuse degrades every
            // node that updates, so it is refused here instead.
            use aloft_api::disruption::{NodeDisruptionPolicy, PolicyError, POLICY_FIELD};
            let policy = obj.pointer("/spec/nodeDisruptionPolicy").cloned().unwrap_or(Value::Null);
            match NodeDisruptionPolicy::from_machine_configuration(&policy).and_then(|p| p.check_unique()) {
                Ok(()) => {}
                Err(PolicyError::Field { field, message }) => out.push(cause(&field, "FieldValueInvalid", message)),
                Err(e) => out.push(cause(POLICY_FIELD, "FieldValueInvalid", e.to_string())),
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The render controller's rule, on JSON: a source config exported from OpenShift with the
    /// annotation is an input; a rendered one is known by its pool, or by its name and annotation.
    #[test]
    fn rendered_configs_are_told_by_the_render_controllers_rule() {
        use aloft_api::render::is_generated;
        let cases = [
            serde_json::json!({"metadata": {"name": "00-worker", "annotations": {aloft_api::annotations::GENERATED_BY: "x"}}}),
            serde_json::json!({"metadata": {"name": "rendered-worker-1", "annotations": {aloft_api::annotations::GENERATED_BY: "x"}}}),
            serde_json::json!({"metadata": {"name": "rendered-by-hand"}}),
            serde_json::json!({"metadata": {"name": "x", "ownerReferences": [{"kind": "MachineConfigPool", "name": "worker", "uid": "u", "apiVersion": "v"}]}}),
        ];
        for c in cases {
            let typed: aloft_api::MachineConfig = serde_json::from_value(c.clone()).unwrap();
            assert_eq!(rendered_config(&c), is_generated(&typed), "{c}");
        }
        let mc = ResourceType { kind: "MachineConfig", ..crate::resources::MACHINE_CONFIG };
        let stored = serde_json::json!({"metadata": {"name": "rendered-worker-1",
            "annotations": {aloft_api::annotations::GENERATED_BY: "x"}}, "spec": {"fips": false}});
        let mut dropped = stored.clone();
        dropped["metadata"]["annotations"] = serde_json::json!({});
        let causes = generated_config_causes(&mc, &dropped, &stored);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "metadata");
        let mut edited = stored.clone();
        edited["spec"]["fips"] = true.into();
        assert_eq!(generated_config_causes(&mc, &edited, &stored)[0].field, "spec");
        let mut labelled = stored.clone();
        labelled["metadata"]["labels"] = serde_json::json!({"keep": "yes"});
        assert!(generated_config_causes(&mc, &labelled, &stored).is_empty());
        let source = serde_json::json!({"metadata": {"name": "00-worker",
            "annotations": {aloft_api::annotations::GENERATED_BY: "x"}}, "spec": {"fips": false}});
        let mut edited = source.clone();
        edited["spec"]["fips"] = true.into();
        assert!(generated_config_causes(&mc, &edited, &source).is_empty(), "an input, editable");
    }

    #[test]
    fn a_breaker_that_lets_every_canary_fail_is_warned_about() {
        let pool = |rollout: Value| serde_json::json!({"spec": {"rollout": rollout}});
        let w = pool_warnings(&pool(serde_json::json!({"canary": 1, "maxFailures": 1})));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("set maxFailures to at most 0"), "{}", w[0]);
        assert!(pool_warnings(&pool(serde_json::json!({"canary": 2, "maxFailures": 1}))).is_empty());
        assert!(pool_warnings(&pool(serde_json::json!({"canary": 0, "maxFailures": 3}))).is_empty());
        let w = pool_warnings(&pool(serde_json::json!({"canary": 2})));
        assert!(w.len() == 1 && w[0].contains("without spec.rollout.maxFailures"), "no breaker: {w:?}");
        assert!(pool_warnings(&pool(serde_json::json!({"canary": 2, "maxFailures": 0}))).is_empty());
        assert!(pool_warnings(&serde_json::json!({"spec": {}})).is_empty());
    }

    #[test]
    fn only_an_annotation_change_skips_the_whole_check() {
        use serde_json::json;
        let stored = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}, "annotations": {"k": "v"}},
            "spec": {"unschedulable": false}, "status": {"conditions": []}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = stored.clone();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, Value, bool)> = vec![
            ("an annotation changed", with(&|v| v["metadata"]["annotations"]["k"] = json!("w")), true),
            (
                "one added, the revision moved",
                with(&|v| {
                    v["metadata"]["annotations"]["n"] = json!("1");
                    v["metadata"]["resourceVersion"] = json!("6");
                }),
                true,
            ),
            (
                "annotations removed",
                with(&|v| {
                    v["metadata"].as_object_mut().unwrap().remove("annotations");
                }),
                true,
            ),
            ("an annotation that is not a string", with(&|v| v["metadata"]["annotations"]["k"] = json!(1)), false),
            ("annotations that are not a map", with(&|v| v["metadata"]["annotations"] = json!("k=v")), false),
            ("a label changed", with(&|v| v["metadata"]["labels"]["x"] = json!("2")), false),
            ("managedFields set", with(&|v| v["metadata"]["managedFields"] = json!("all")), false),
            ("the spec changed", with(&|v| v["spec"]["unschedulable"] = json!("yes")), false),
            ("the status changed", with(&|v| v["status"]["conditions"] = json!("none")), false),
            (
                "metadata gone",
                with(&|v| {
                    v.as_object_mut().unwrap().remove("metadata");
                }),
                false,
            ),
        ];
        for (what, next, skip) in cases {
            assert_eq!(only_annotations_changed(&stored, &next), skip, "{what}");
            if !skip {
                continue;
            }
            // Whatever skips the check passes it.
            assert!(object_causes(&crate::resources::NODE, &next).is_empty(), "{what}");
        }
        // The changes that do not skip it, and are wrong, are caught by it.
        for bad in [
            with(&|v| v["metadata"]["annotations"]["k"] = json!(1)),
            with(&|v| v["spec"]["unschedulable"] = json!("yes")),
            with(&|v| v["metadata"]["labels"]["x"] = json!(2)),
        ] {
            assert!(!object_causes(&crate::resources::NODE, &bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn type_errors_name_the_field() {
        let mc = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "x"}, "spec": {"kernelArguments": "nosmt"}});
        let causes = object_causes(&crate::resources::MACHINE_CONFIG, &mc);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.kernelArguments");
        assert_eq!(causes[0].message, "invalid type: string \"nosmt\", expected a list");
    }

    #[test]
    fn budgets_and_pool_extensions() {
        let ndb = |spec: serde_json::Value| {
            let obj = serde_json::json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget",
                "metadata": {"name": "b"}, "spec": spec});
            let mut fields: Vec<String> =
                object_causes(&crate::resources::NODE_DISRUPTION_BUDGET, &obj).into_iter().map(|c| c.field).collect();
            fields.sort();
            fields
        };
        assert!(ndb(
            serde_json::json!({"selector": {"matchLabels": {"app": "db"}}, "minAvailable": "50%", "groupBy": ["zone"]})
        )
        .is_empty());
        assert_eq!(ndb(serde_json::json!({"minAvailable": 1, "maxUnavailable": 1})), vec!["spec"]);
        assert_eq!(ndb(serde_json::json!({})), vec!["spec"]);
        assert_eq!(ndb(serde_json::json!({"maxUnavailable": "150%"})), vec!["spec.maxUnavailable"]);
        assert_eq!(ndb(serde_json::json!({"minAvailable": -1})), vec!["spec.minAvailable"]);
        assert_eq!(
            ndb(
                serde_json::json!({"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})
            ),
            vec!["spec.selector.matchExpressions[0].operator"]
        );
        assert_eq!(ndb(serde_json::json!({"maxUnavailable": 1, "groupBy": ["a b"]})), vec!["spec.groupBy[0]"]);
        let pool = |mut spec: serde_json::Value| {
            spec["machineConfigSelector"] =
                serde_json::json!({"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}});
            let obj = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                "metadata": {"name": "worker"}, "spec": spec});
            let mut fields: Vec<String> =
                object_causes(&crate::resources::MACHINE_CONFIG_POOL, &obj).into_iter().map(|c| c.field).collect();
            fields.sort();
            fields
        };
        assert!(pool(serde_json::json!({"rollout": {"canary": 1, "soakSeconds": 600, "maxFailures": 0},
            "drain": {"timeoutSeconds": 3600, "hooks": [{"url": "http://127.0.0.1:9/lb", "timeoutSeconds": 5}]}}))
        .is_empty());
        assert_eq!(
            pool(
                serde_json::json!({"rollout": {"canary": -1}, "drain": {"timeoutSeconds": 0, "hooks": [{"url": "ftp://x/"}, {"url": "http://x/", "timeoutSeconds": 0}]}})
            ),
            vec![
                "spec.drain.hooks[0].url",
                "spec.drain.hooks[1].timeoutSeconds",
                "spec.drain.timeoutSeconds",
                "spec.rollout.canary"
            ]
        );
        assert_eq!(pool(serde_json::json!({"rollout": {"canary": "two"}})), vec!["spec.rollout.canary"]);
    }

    /// Causes of `obj` (kind `rt`) as `field: message`, sorted.
    fn causes_of(rt: &ResourceType, obj: serde_json::Value) -> Vec<String> {
        let mut out: Vec<String> =
            object_causes(rt, &obj).into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        out.sort();
        out
    }

    /// OpenShift's `custom-machine-config-pool-selector` policy, case by case.
    #[test]
    fn every_pool_selects_the_worker_configs() {
        let refused = |selector: serde_json::Value| {
            let mut spec = serde_json::json!({"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/infra": ""}}});
            if !selector.is_null() {
                spec["machineConfigSelector"] = selector;
            }
            let causes = causes_of(
                &crate::resources::MACHINE_CONFIG_POOL,
                serde_json::json!({"metadata": {"name": "infra"}, "spec": spec}),
            );
            causes
                .iter()
                .any(|c| c.starts_with("spec.machineConfigSelector: All custom MachineConfigPools must inherit"))
        };
        const R: &str = "machineconfiguration.openshift.io/role";
        for role in ["worker", "master", "arbiter"] {
            assert!(!refused(serde_json::json!({"matchLabels": {R: role, "x": "y"}})), "{role}");
        }
        assert!(!refused(
            serde_json::json!({"matchExpressions": [{"key": R, "operator": "In", "values": ["worker", "infra"]}]})
        ));
        assert!(!refused(
            serde_json::json!({"matchExpressions": [{"key": R, "operator": "NotIn", "values": ["master"]}]})
        ));
        assert!(refused(
            serde_json::json!({"matchExpressions": [{"key": R, "operator": "NotIn", "values": ["worker"]}]})
        ));
        assert!(refused(serde_json::json!({"matchLabels": {R: "infra"}})));
        assert!(refused(serde_json::json!({"matchExpressions": [{"key": R, "operator": "In", "values": ["infra"]}]})));
        assert!(refused(serde_json::json!({"matchExpressions": [{"key": R, "operator": "Exists"}]})));
        // OpenShift's terms pass, but together they select no worker config.
        assert!(refused(serde_json::json!({"matchLabels": {R: "infra"},
            "matchExpressions": [{"key": R, "operator": "In", "values": ["worker", "infra"]}]})));
        assert!(refused(
            serde_json::json!({"matchExpressions": [{"key": R, "operator": "NotIn", "values": ["master"]},
            {"key": R, "operator": "In", "values": ["infra"]}]})
        ));
        assert!(refused(serde_json::json!({})), "an empty selector");
        assert!(refused(serde_json::Value::Null), "no selector");
    }

    #[test]
    fn pool_numbers_are_bounded() {
        let pool = |mut spec: serde_json::Value| {
            spec["machineConfigSelector"] =
                serde_json::json!({"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}});
            causes_of(
                &crate::resources::MACHINE_CONFIG_POOL,
                serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                    "metadata": {"name": "worker"}, "spec": spec}),
            )
        };
        assert!(pool(serde_json::json!({"maxUnavailable": 2147483647, "rollout": {"canary": 2147483647,
            "soakSeconds": 31536000, "maxFailures": 0}, "drain": {"timeoutSeconds": 31536000,
            "hooks": [{"url": "http://x/", "timeoutSeconds": 3600}]}}))
        .is_empty());
        assert_eq!(
            pool(serde_json::json!({"rollout": {"soakSeconds": 9223372036854775807i64}})),
            ["spec.rollout.soakSeconds: Invalid value: 9223372036854775807: must be at most 31536000 (one year)"]
        );
        assert_eq!(
            pool(serde_json::json!({"maxUnavailable": 10000000000i64, "rollout": {"soakSeconds": 10000000000000i64,
                "canary": 10000000000i64, "maxFailures": -1},
                "drain": {"timeoutSeconds": 31536001, "hooks": [{"url": "http://x/", "timeoutSeconds": 3601}]}})),
            [
                "spec.drain.hooks[0].timeoutSeconds: Invalid value: 3601: must be at most 3600 (one hour)",
                "spec.drain.timeoutSeconds: Invalid value: 31536001: must be at most 31536000 (one year)",
                "spec.maxUnavailable: Invalid value: 10000000000: must be at most 2147483647",
                "spec.rollout.canary: Invalid value: 10000000000: must be at most 2147483647",
                "spec.rollout.maxFailures: Invalid value: -1: must be >= 0",
                "spec.rollout.soakSeconds: Invalid value: 10000000000000: must be at most 31536000 (one year)",
            ]
        );
        assert_eq!(
            pool(serde_json::json!({"drain": {"hooks": [{"timeoutSeconds": 5}, {"url": " "}]}})),
            ["spec.drain.hooks[0].url: Required value", "spec.drain.hooks[1].url: Required value"]
        );
        // Out of i64's range: refused, not wrapped.
        assert_eq!(pool(serde_json::json!({"rollout": {"soakSeconds": 18446744073709551615u64}})).len(), 1);
        for (v, shown) in [(serde_json::json!(1.5), "1.5"), (serde_json::json!(true), "true")] {
            assert_eq!(
                pool(serde_json::json!({"maxUnavailable": v})),
                [format!(
                    "spec.maxUnavailable: Invalid value: {shown}: must be an integer or a percentage like \"10%\""
                )]
            );
        }
    }

    #[test]
    fn labels_and_selectors_follow_kubernetes() {
        let node = |labels: serde_json::Value| {
            causes_of(
                &crate::resources::NODE,
                serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels}}),
            )
        };
        assert!(node(serde_json::json!({"node-role.kubernetes.io/worker": "", "zone": "a-1"})).is_empty());
        assert_eq!(
            node(serde_json::json!({"bad key!": "ok"})),
            ["metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, \
              '-', '_' or '.', and must start and end with an alphanumeric character"]
        );
        assert_eq!(node(serde_json::json!({"ok": "has space"})).len(), 1);
        assert_eq!(
            node(serde_json::json!({"ok": "v".repeat(100)})),
            [format!("metadata.labels: Invalid value: {:?}: must be no more than 63 characters", "v".repeat(100))]
        );
        let pool = causes_of(
            &crate::resources::MACHINE_CONFIG_POOL,
            serde_json::json!({"metadata": {"name": "w"}, "spec": {"nodeSelector": {"matchLabels": {"bad key!": "x y"}},
                "machineConfigSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}}),
        );
        let fields: Vec<&str> = pool.iter().map(|c| c.split(": ").next().unwrap()).collect();
        assert_eq!(
            fields,
            [
                "spec.machineConfigSelector.matchExpressions[0].values",
                "spec.nodeSelector.matchLabels",
                "spec.nodeSelector.matchLabels"
            ]
        );
        let ndb = causes_of(
            &crate::resources::NODE_DISRUPTION_BUDGET,
            serde_json::json!({"metadata": {"name": "b", "labels": {"a": "b c"}},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"bad key!": "db"}}}}),
        );
        let fields: Vec<&str> = ndb.iter().map(|c| c.split(": ").next().unwrap()).collect();
        assert_eq!(fields, ["metadata.labels", "spec.selector.matchLabels"]);
    }

    #[test]
    fn machine_configs_an_agent_would_refuse_are_refused() {
        let mc = |spec: serde_json::Value| {
            let fields: Vec<String> = causes_of(
                &crate::resources::MACHINE_CONFIG,
                serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                    "metadata": {"name": "x"}, "spec": spec}),
            )
            .into_iter()
            .map(|c| c.split(": ").next().unwrap().to_string())
            .collect();
            fields
        };
        let ign = |rest: serde_json::Value| {
            let mut c = serde_json::json!({"ignition": {"version": "3.2.0"}});
            c.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
            serde_json::json!({"config": c})
        };
        assert!(mc(ign(serde_json::json!({"systemd": {"units": [{"name": "a.service"}]},
            "storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:;base64,aGk="}}]}})))
        .is_empty());
        assert_eq!(
            mc(ign(serde_json::json!({"systemd": {"units": [{"name": "../../x.service"}]}}))),
            ["spec.config.systemd.units[0].name"]
        );
        assert_eq!(
            mc(ign(serde_json::json!({"storage": {"files": [
                {"path": "/etc/a", "contents": {"source": "data:;base64,!!!notbase64"}},
                {"path": "/etc/b", "contents": {"source": "http://evil/x"}}]}}))),
            ["spec.config.storage.files[0].contents.source", "spec.config.storage.files[1].contents.source"]
        );
        assert_eq!(mc(serde_json::json!({"kernelArguments": ["a b", ""]})), ["spec.kernelArguments[1]"]);
        // One cause per problem, saying what is wrong.
        let causes = |spec: serde_json::Value| {
            causes_of(
                &crate::resources::MACHINE_CONFIG,
                serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                    "metadata": {"name": "x"}, "spec": spec}),
            )
        };
        for (mode, shown) in [(0o100644, "33188"), (-1, "-1")] {
            let got = causes(ign(serde_json::json!({"storage": {"files": [
                {"path": "/etc/typebits", "contents": {"source": "data:,x"}, "mode": mode}]}})));
            assert_eq!(
                got,
                [format!(
                    "spec.config.storage.files[0].mode: {shown} is not a file mode (0 to 4095, i.e. 07777 octal; write it in decimal, e.g. 420 for 0644)"
                )]
            );
        }
        assert_eq!(
            causes(ign(serde_json::json!({"storage": {"files": [
                {"path": "/etc/z", "contents": {"source": "data:,x", "compression": "bzip2"}}]}}))),
            ["spec.config.storage.files[0].contents.compression: unsupported compression \"bzip2\": use \"gzip\" or leave it unset"]
        );
        // setuid is still refused, once.
        assert_eq!(
            mc(ign(serde_json::json!({"storage": {"files": [{"path": "/etc/s", "mode": 0o4755}]}}))),
            ["spec.config.storage.files[0].mode"]
        );
    }

    #[test]
    fn node_disruption_policies_an_agent_would_refuse_are_refused() {
        let mcfg = |policy: serde_json::Value| {
            causes_of(
                &crate::resources::MACHINE_CONFIGURATION,
                serde_json::json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                    "metadata": {"name": "cluster"}, "spec": {"nodeDisruptionPolicy": policy}}),
            )
        };
        assert_eq!(
            mcfg(serde_json::json!({"files": [{"path": "/etc/a", "actions": [{"type": "None"}]}],
                "units": [{"name": "a.service", "actions": [{"type": "Restart", "restart": {"serviceName": "a.service"}}]}]})),
            Vec::<String>::new()
        );
        assert_eq!(
            mcfg(serde_json::json!({"files": [{"path": "/etc/a", "actions": [{"type": "None"}]},
                {"path": "/etc/b", "actions": [{"type": "Restart"}]}]})),
            ["spec.nodeDisruptionPolicy.files[1].actions[0]: action Restart: serviceName is required"]
        );
        assert_eq!(
            mcfg(serde_json::json!({"units": [{"name": "a.service", "actions": [{"type": "Bogus"}]}]})),
            ["spec.nodeDisruptionPolicy.units[0].actions[0]: action type \"Bogus\" is not one of Reboot, None, Reload, Restart, DaemonReload, Drain, Special"]
        );
        assert_eq!(
            mcfg(serde_json::json!({"sshkey": {"actions": [{"type": "Reboot"}, {"type": "Drain"}]}})),
            ["spec.nodeDisruptionPolicy.sshkey.actions: Reboot must be the only action"]
        );
        // No policy at all is the defaults.
        let none = causes_of(
            &crate::resources::MACHINE_CONFIGURATION,
            serde_json::json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                "metadata": {"name": "cluster"}, "spec": {}}),
        );
        assert!(none.is_empty(), "{none:?}");
    }

    #[test]
    fn names() {
        for good in ["worker", "99-worker-ssh", "rendered-worker-0a1b", "a.b.c", "n1"] {
            assert!(name_causes(good).is_empty(), "{good}");
        }
        for bad in ["", "Worker", "-a", "a-", "a..b", "a_b", "a/b", "../etc", &"x".repeat(254)] {
            assert!(!name_causes(bad).is_empty(), "{bad}");
        }
    }
}
