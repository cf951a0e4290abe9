//! The agent's side of the coordinator protocol: its own Node (get, watch, MCO annotations,
//! Ready condition) and the rendered MachineConfigs it is told to apply. Only calls a node
//! credential is allowed to make.

use aloft_api::annotations as ann;
use aloft_api::{MachineConfig, Node};
use aloft_client::{resource_path, Client, ResourceRef};
use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

const NODES: ResourceRef<'static> = ResourceRef { group: "", version: "v1", plural: "nodes", namespaced: false };
const MACHINE_CONFIGS: ResourceRef<'static> =
    ResourceRef { group: aloft_api::MCO_GROUP, version: "v1", plural: "machineconfigs", namespaced: false };

const MACHINE_CONFIGURATIONS: ResourceRef<'static> =
    ResourceRef { group: "operator.openshift.io", version: "v1", plural: "machineconfigurations", namespaced: false };

/// MCO's `reason` annotation is cut at this length.
pub const MAX_REASON: usize = 2000;

/// This node, as the coordinator sees it.
#[derive(Clone)]
pub struct NodeApi {
    client: Client,
    name: String,
}

/// A Node and the revision it was read at.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub node: Node,
    pub revision: String,
}

impl NodeView {
    pub fn annotation(&self, key: &str) -> &str {
        self.node.annotation(key).unwrap_or("")
    }
}

fn view(v: Value) -> Result<NodeView> {
    let revision = v.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("0").to_string();
    Ok(NodeView { node: serde_json::from_value(v).context("the coordinator returned a malformed Node")?, revision })
}

impl NodeApi {
    pub fn new(client: Client, name: &str) -> Self {
        NodeApi { client, name: name.to_string() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub async fn get(&self) -> Result<NodeView> {
        let v = self.client.get(&resource_path(NODES, None, Some(&self.name))).await?.into_result()?;
        view(v)
    }

    /// Set (or, with `None`, remove) MCO annotations in one merge patch.
    pub async fn annotate(&self, values: &[(&str, Option<&str>)]) -> Result<NodeView> {
        let mut a = serde_json::Map::new();
        for (k, v) in values {
            let v = v.map(|s| if s.len() > MAX_REASON { &s[..s.floor_char_boundary(MAX_REASON)] } else { s });
            a.insert(k.to_string(), v.map(Value::from).unwrap_or(Value::Null));
        }
        let patch = json!({"metadata": {"annotations": a}});
        let v = self
            .client
            .patch(&resource_path(NODES, None, Some(&self.name)), "application/merge-patch+json", &patch)
            .await?
            .into_result()
            .context("updating the node's annotations")?;
        view(v)
    }

    /// Report MCO state: state, reason, and currentConfig when given.
    pub async fn report(&self, state: &str, reason: &str, current: Option<&str>) -> Result<NodeView> {
        let mut values = vec![(ann::STATE, Some(state)), (ann::REASON, Some(reason))];
        if let Some(c) = current {
            values.push((ann::CURRENT_CONFIG, Some(c)));
        }
        self.annotate(&values).await
    }

    /// Set the Ready condition (the node controller counts a node as available only when Ready).
    pub async fn set_ready(&self, ready: bool, message: &str) -> Result<()> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let cond = json!({"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "AloftAgentReady",
                          "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now});
        let path = format!("{}/status", resource_path(NODES, None, Some(&self.name)));
        self.client
            .patch(&path, "application/merge-patch+json", &json!({"status": {"conditions": [cond]}}))
            .await?
            .into_result()?;
        Ok(())
    }

    /// Fetch a rendered config by name.
    pub async fn machine_config(&self, name: &str) -> Result<MachineConfig> {
        let reply = self.client.get(&resource_path(MACHINE_CONFIGS, None, Some(name))).await?;
        if reply.code == 404 {
            bail!("rendered config {name:?} does not exist on the coordinator");
        }
        let v = reply.into_result().with_context(|| format!("fetching rendered config {name:?}"))?;
        serde_json::from_value(v).with_context(|| format!("rendered config {name:?} is malformed"))
    }

    /// The cluster's node disruption policy (`MachineConfiguration/cluster`, as in OpenShift)
    /// over MCO's defaults; the defaults alone when the coordinator has none.
    pub async fn disruption_policy(&self) -> Result<crate::disruption::Policy> {
        let reply = self.client.get(&resource_path(MACHINE_CONFIGURATIONS, None, Some("cluster"))).await?;
        if reply.code == 404 {
            return Ok(crate::disruption::Policy::mco_defaults());
        }
        let v = reply.into_result().context("reading MachineConfiguration/cluster")?;
        let user = crate::disruption::NodeDisruptionPolicy::from_machine_configuration(&v)
            .context("MachineConfiguration/cluster spec.nodeDisruptionPolicy is invalid")?;
        Ok(crate::disruption::Policy::from_user(&user))
    }

    /// Wait until the Node changes after `revision` (or `timeout` passes); returns the newest view.
    pub async fn wait_change(&self, revision: &str, timeout: Duration) -> Result<Option<NodeView>> {
        let q = format!(
            "{}?watch=true&resourceVersion={revision}&fieldSelector=metadata.name%3D{}&timeoutSeconds={}",
            resource_path(NODES, None, None),
            self.name,
            timeout.as_secs().max(1)
        );
        let resp = match self.client.watch(&q, None).await {
            Ok(r) => r,
            // Gone or anything else: the caller re-reads the Node.
            Err(e) => {
                tracing::debug!(error = %e, "watch failed; re-reading the node");
                return Ok(None);
            }
        };
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        let deadline = tokio::time::sleep(timeout + Duration::from_secs(1));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return Ok(None),
                chunk = stream.next() => {
                    let Some(chunk) = chunk else { return Ok(None) };
                    buf.extend_from_slice(&chunk?);
                    if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                        let ev: Value = serde_json::from_slice(&buf[..pos]).context("malformed watch event")?;
                        if ev.get("type").and_then(Value::as_str) == Some("ERROR") {
                            return Ok(None);
                        }
                        let obj = ev.get("object").cloned().ok_or_else(|| anyhow!("watch event without object"))?;
                        return view(obj).map(Some);
                    }
                }
            }
        }
    }

    /// Ask the drain controller for `request` (`drain-<cfg>` / `uncordon-<cfg>`) and wait until it
    /// answers with the same value in `lastAppliedDrain`.
    pub async fn drain_handshake(&self, request: &str, timeout: Duration) -> Result<()> {
        let mut node = self.annotate(&[(ann::DESIRED_DRAIN, Some(request))]).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if node.annotation(ann::LAST_APPLIED_DRAIN) == request {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                bail!(
                    "failed to drain node: {} after {}: the coordinator did not acknowledge {request}",
                    self.name,
                    humanize(timeout)
                );
            }
            node = match self.wait_change(&node.revision, left.min(Duration::from_secs(60))).await? {
                Some(n) => n,
                None => self.get().await?,
            };
        }
    }
}

/// `1 hour`, `90 seconds`, as MCO words drain timeouts.
pub fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        let h = s / 3600;
        format!("{h} hour{}", if h == 1 { "" } else { "s" })
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{} minutes", s / 60)
    } else {
        format!("{s} seconds")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_mco() {
        assert_eq!(humanize(Duration::from_secs(3600)), "1 hour");
        assert_eq!(humanize(Duration::from_secs(7200)), "2 hours");
        assert_eq!(humanize(Duration::from_secs(600)), "10 minutes");
        assert_eq!(humanize(Duration::from_secs(5)), "5 seconds");
    }
}
