//! `org.aloft.Agent1` on a private bus, read with a zbus client: properties, the Status()
//! JSON, and PropertiesChanged on updates.

use aloft_agent::dbus_status::{fetch, Agent1ClientProxy, AgentStatus, StatusService, AGENT_BUS_NAME};
use aloft_agent::testing::TestBus;
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

fn working() -> AgentStatus {
    let mut s = AgentStatus {
        state: "Working".into(),
        current_config: "rendered-worker-1".into(),
        desired_config: "rendered-worker-2".into(),
        reason: String::new(),
        progress: "writing files and units".into(),
        updated_at: String::new(),
        os: json!({"booted": "abc123"}),
        version: "0.1.0 (commit 1a2b3c4d5e6f, clean tree, 2026-11-30T19:00:00Z)".into(),
    };
    s.touch();
    s
}

#[tokio::test]
async fn properties_and_status_json() {
    let bus = TestBus::start().unwrap();
    let service = StatusService::serve_at_address(bus.address(), working()).await.unwrap();
    let client = bus.connect().await.unwrap();
    let proxy = Agent1ClientProxy::new(&client).await.unwrap();
    assert_eq!(proxy.state().await.unwrap(), "Working");
    assert_eq!(proxy.current_config().await.unwrap(), "rendered-worker-1");
    assert_eq!(proxy.desired_config().await.unwrap(), "rendered-worker-2");
    assert_eq!(proxy.last_error().await.unwrap(), "");
    assert_eq!(proxy.progress().await.unwrap(), "writing files and units");
    assert_eq!(proxy.version().await.unwrap(), "0.1.0 (commit 1a2b3c4d5e6f, clean tree, 2026-11-30T19:00:00Z)");
    let v: serde_json::Value = serde_json::from_str(&proxy.status().await.unwrap()).unwrap();
    assert_eq!(v["version"], "0.1.0 (commit 1a2b3c4d5e6f, clean tree, 2026-11-30T19:00:00Z)");
    assert_eq!(v["state"], "Working");
    assert_eq!(v["currentConfig"], "rendered-worker-1");
    assert_eq!(v["os"]["booted"], "abc123");
    assert!(v["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(fetch(Some(bus.address())).await.unwrap(), service.current().await.unwrap());
    let dbus = zbus::fdo::DBusProxy::new(&client).await.unwrap();
    let name = zbus::names::BusName::try_from(AGENT_BUS_NAME).unwrap();
    assert!(dbus.name_has_owner(name).await.unwrap(), "the well-known name is owned");
    // The status an agent from before the version field wrote (its status file, or its
    // Status()) still reads, with no version.
    let mut old = v.clone();
    old.as_object_mut().unwrap().remove("version");
    let read: AgentStatus = serde_json::from_value(old).unwrap();
    assert_eq!((read.state.as_str(), read.version.as_str()), ("Working", ""));
}

#[tokio::test]
async fn updates_emit_properties_changed() {
    let bus = TestBus::start().unwrap();
    let service = StatusService::serve_at_address(bus.address(), working()).await.unwrap();
    let client = bus.connect().await.unwrap();
    let proxy = Agent1ClientProxy::new(&client).await.unwrap();
    assert_eq!(proxy.state().await.unwrap(), "Working", "prime the property cache");
    let mut states = proxy.receive_state_changed().await;
    let mut errors = proxy.receive_last_error_changed().await;
    let _ = states.next().await; // the current value comes first

    let mut degraded = working();
    degraded.state = "Degraded".into();
    degraded.reason = "restart crio.service failed: systemd job finished with result \"failed\"".into();
    service.update(degraded.clone()).await.unwrap();

    let changed = tokio::time::timeout(Duration::from_secs(5), states.next()).await.unwrap().unwrap();
    assert_eq!(changed.get().await.unwrap(), "Degraded");
    let mut last_error = String::new();
    while last_error.is_empty() {
        let e = tokio::time::timeout(Duration::from_secs(5), errors.next()).await.unwrap().unwrap();
        last_error = e.get().await.unwrap();
    }
    assert!(last_error.contains("crio.service"), "{last_error}");
    assert_eq!(proxy.state().await.unwrap(), "Degraded", "the cache follows the signals");
    assert_eq!(service.current().await.unwrap(), degraded);
}

#[tokio::test]
async fn follows_a_watch_channel() {
    let bus = TestBus::start().unwrap();
    let service = StatusService::serve_at_address(bus.address(), AgentStatus::default()).await.unwrap();
    let (tx, rx) = tokio::sync::watch::channel(working());
    let task = service.clone().follow(rx);
    let mut done = working();
    done.state = "Done".into();
    done.current_config = "rendered-worker-2".into();
    done.progress.clear();
    tx.send(done.clone()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while fetch(Some(bus.address())).await.unwrap() != done {
        assert!(tokio::time::Instant::now() < deadline, "status never reached Done");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tx);
    tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
}
