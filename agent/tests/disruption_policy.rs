//! The node disruption policy end to end: MCO's own MachineConfiguration fixture read as the
//! coordinator would hand it over, and rebootless plans executed against the test systemd on a
//! private bus.

mod support;

use aloft_agent::disruption::{execute, plan, Action, Changes, NodeDisruptionPolicy, Policy};
use aloft_agent::systemd::SystemdDbus;
use aloft_agent::testing::{FakeSystemd, TestBus};

fn files(paths: &[&str]) -> Changes {
    Changes { files: paths.iter().map(|s| s.to_string()).collect(), ..Default::default() }
}

#[test]
fn mco_fixture_policy_makes_its_path_rebootless() {
    let text = support::mco_fixture("e2e-templates/machineconfigurations/nodedisruptionpolicy-rebootless-path.yaml");
    let template = support::yaml_to_json(&text);
    let mc = &template["objects"][0];
    assert_eq!(mc["kind"], "MachineConfiguration");
    let user = NodeDisruptionPolicy::from_machine_configuration(mc).unwrap();
    let policy = Policy::from_user(&user);
    let p = plan(&files(&["/home/core/test"]), &policy);
    assert_eq!((p.actions.clone(), p.reboot, p.drain), (vec![Action::None], false, false), "{}", p.reason());
    // The defaults still apply next to the user's entry, and anything else still reboots.
    let p = plan(&files(&["/home/core/test", "/etc/containers/policy.json"]), &policy);
    assert_eq!(p.actions, vec![Action::Reload { service: "crio.service".into() }]);
    let p = plan(&files(&["/home/core/test", "/home/core/other"]), &policy);
    assert!(p.reboot, "{}", p.reason());
    assert!(p.reason().contains("\"/home/core/other\""), "{}", p.reason());
}

#[tokio::test]
async fn rebootless_actions_run_over_dbus_in_order() {
    let root = tempfile::tempdir().unwrap();
    let bus = TestBus::start().unwrap();
    let fake = FakeSystemd::serve(&bus, root.path()).await.unwrap();
    let services = SystemdDbus::connect(bus.address()).await.unwrap();
    let user: NodeDisruptionPolicy = serde_json::from_value(serde_json::json!({
        "units": [{"name": "chronyd.service", "actions": [
            {"type": "Restart", "restart": {"serviceName": "chronyd.service"}}, {"type": "DaemonReload"}]}]}))
    .unwrap();
    let changes = Changes {
        units: vec!["chronyd.service".into()],
        ..files(&[
            "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
            "/etc/containers/registries.d/quay.io.yaml",
        ])
    };
    let p = plan(&changes, &Policy::from_user(&user));
    assert!(!p.reboot && !p.drain, "{}", p.reason());
    execute(&p, &services).await.unwrap();
    assert_eq!(
        fake.call_strings(),
        vec![
            "Reload()",
            "ReloadUnit(crio.service, replace)",
            "RestartUnit(coreos-update-ca-trust.service, replace)",
            "RestartUnit(crio.service, replace)",
            "RestartUnit(chronyd.service, replace)",
        ]
    );

    // A failing restart stops the sequence, and the error names the action and the unit.
    fake.clear_calls();
    fake.fail_jobs_of("coreos-update-ca-trust.service", "failed");
    // As the Degraded reason quotes it: the action, then systemd's error once.
    let err = format!("{:#}", anyhow::Error::from(execute(&p, &services).await.unwrap_err()));
    assert!(err.starts_with("rebootless action Restart coreos-update-ca-trust.service failed: "), "{err}");
    assert_eq!(err.matches("result \"failed\"").count(), 1, "{err}");
    assert_eq!(err.matches("coreos-update-ca-trust.service").count(), 1, "the unit named once: {err}");
    assert_eq!(fake.calls().len(), 3, "nothing after the failure: {:?}", fake.call_strings());
    assert!(fake.reboots().is_empty());
}
