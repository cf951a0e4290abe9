//! Node disruption policy: what a config change costs the node (MCO's "rebootless updates").
//!
//! A reboot per change is the pain users report most (MCO #650): a 50-node pool at four minutes
//! per reboot takes hours. MCO's answer, kept here: some changes are known not to need one.
//! Changes to the OS image, kernel arguments, FIPS, kernel type or extensions always reboot.
//! Everything else is looked up in a policy: changed files by exact path or closest ancestor
//! directory (longest match on whole path components), changed units by exact name, SSH keys by
//! their one entry. ANY file or unit without a policy means Reboot, because the agent cannot
//! know what reads an arbitrary file. The actions found are None, Reload/Restart a service,
//! DaemonReload, Drain, Special (registries.conf: reload CRI-O, draining unless the change is
//! safe) or Reboot; one Reboot makes the whole result just Reboot.
//!
//! The policy is MCO's cluster defaults ([`Policy::mco_defaults`]) overridden entry by entry
//! with the coordinator's `spec.nodeDisruptionPolicy` of operator.openshift.io/v1
//! MachineConfiguration ([`NodeDisruptionPolicy`], same YAML/JSON shape), exactly as MCO merges
//! them into `status.nodeDisruptionPolicyStatus.clusterPolicies`.

use crate::host::ServiceManager;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The service MCO reloads for the Special action (registries.conf).
pub const CRIO_SERVICE: &str = "crio.service";

pub use aloft_api::disruption::{
    components, normalize, Action, ActionWire, FilePolicy, NodeDisruptionPolicy, PolicyError, ServiceRef, SshKeyPolicy,
    UnitPolicy, REGISTRIES_CONF,
};

/// The order rebootless actions run in: daemon-reload first (so reloads and restarts see
/// new unit files), then reloads (including Special's CRI-O reload), then restarts.
fn phase(a: &Action) -> u8 {
    match a {
        Action::Drain => 0,
        Action::DaemonReload => 1,
        Action::Reload { .. } | Action::Special => 2,
        Action::Restart { .. } => 3,
        Action::None | Action::Reboot => 4,
    }
}

/// The merged policy the agent decides with (MCO's `clusterPolicies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub files: Vec<FilePolicy>,
    pub units: Vec<UnitPolicy>,
    pub sshkey: SshKeyPolicy,
}

fn reload(s: &str) -> Action {
    Action::Reload { service: s.to_string() }
}

fn restart(s: &str) -> Action {
    Action::Restart { service: s.to_string() }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::mco_defaults()
    }
}

impl Policy {
    /// MCO's cluster defaults: the pull secret and nmstate's dir need nothing; image policy
    /// and signature configuration reload CRI-O; registries.conf is Special; the user CA bundle
    /// restarts coreos-update-ca-trust then CRI-O; SSH keys need nothing.
    pub fn mco_defaults() -> Self {
        let file = |path: &str, actions: Vec<Action>| FilePolicy { path: path.to_string(), actions };
        Policy {
            files: vec![
                file("/etc/mco/internal-registry-pull-secret.json", vec![Action::None]),
                file("/var/lib/kubelet/config.json", vec![Action::None]),
                file("/etc/machine-config-daemon/no-reboot/containers-gpg.pub", vec![reload(CRIO_SERVICE)]),
                file("/etc/containers/policy.json", vec![reload(CRIO_SERVICE)]),
                file(REGISTRIES_CONF, vec![Action::Special]),
                file("/etc/containers/registries.d", vec![reload(CRIO_SERVICE)]),
                file("/etc/nmstate/openshift", vec![Action::None]),
                file(
                    "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
                    vec![restart("coreos-update-ca-trust.service"), restart(CRIO_SERVICE)],
                ),
            ],
            units: Vec::new(),
            sshkey: SshKeyPolicy { actions: vec![Action::None] },
        }
    }

    /// These defaults overridden by `user`: an entry for the same path (compared after
    /// normalization) or unit name replaces the default; new entries are added; `sshkey`
    /// replaces the default SSH entry.
    pub fn with_overrides(mut self, user: &NodeDisruptionPolicy) -> Self {
        for f in &user.files {
            let key = normalize(&f.path);
            let entry = FilePolicy { path: key.clone(), actions: f.actions.clone() };
            match self.files.iter_mut().find(|d| normalize(&d.path) == key) {
                Some(d) => *d = entry,
                None => self.files.push(entry),
            }
        }
        for u in &user.units {
            match self.units.iter_mut().find(|d| d.name == u.name) {
                Some(d) => *d = u.clone(),
                None => self.units.push(u.clone()),
            }
        }
        if let Some(s) = &user.sshkey {
            self.sshkey = s.clone();
        }
        self
    }

    /// MCO's defaults with the coordinator's `spec.nodeDisruptionPolicy` applied.
    pub fn from_user(user: &NodeDisruptionPolicy) -> Self {
        Self::mco_defaults().with_overrides(user)
    }

    /// The policy entry for a changed path: an exact match, else the entry for its closest
    /// ancestor directory (the longest match on whole path components: `/etc/ab` is not under
    /// `/etc/a`).
    pub fn file_policy(&self, path: &str) -> Option<&FilePolicy> {
        let target: Vec<&str> = components(path).collect();
        self.files
            .iter()
            .filter_map(|f| {
                let p: Vec<&str> = components(&f.path).collect();
                (!p.is_empty() && target.starts_with(&p)).then_some((p.len(), f))
            })
            // max_by_key keeps the last of equals; entries are unique per path after merging.
            .max_by_key(|(len, _)| *len)
            .map(|(_, f)| f)
    }

    /// The policy entry for a changed unit (exact name).
    pub fn unit_policy(&self, unit: &str) -> Option<&UnitPolicy> {
        self.units.iter().find(|u| u.name == unit)
    }
}

/// What changed between the current and the desired config, as the policy sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Paths added, changed or removed.
    pub files: Vec<String>,
    /// Units added, changed or removed.
    pub units: Vec<String>,
    pub os_update: bool,
    pub kernel_arguments: bool,
    pub fips: bool,
    pub kernel_type: bool,
    pub extensions: bool,
    /// The core user's SSH keys (or password) changed.
    pub ssh_keys: bool,
    /// registries.conf changed only in ways MCO deems safe (e.g. mirrors added), so the
    /// Special action needs no drain. Unknown -> false: drain.
    pub registries_safe: bool,
}

/// Why an action is in the plan: which change and which policy entry asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `file "/etc/foo"`, `unit "x.service"`, `SSH keys`, `kernel arguments`, ...
    pub change: String,
    /// What the policy said: `no node disruption policy`, `policy /etc/containers: Reload
    /// crio.service`, `always reboots`.
    pub why: String,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.change, self.why)
    }
}

/// The post-config action for a change: the actions in the order they run, and whether the
/// node reboots and must be drained first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `[Reboot]`, `[None]`, or the rebootless actions in execution order (Drain first, then
    /// DaemonReload, reloads and Special, restarts), duplicates removed.
    pub actions: Vec<Action>,
    pub reboot: bool,
    pub drain: bool,
    /// For a reboot: every change that forced it. Otherwise: every change that asked for an
    /// action other than None.
    pub causes: Vec<Cause>,
}

impl Plan {
    /// A forced repair (the config written again over a hand edit): no reboot and no service
    /// restarted, as for MCO's update from a config to itself; a daemon-reload when the config
    /// has units, so that a repaired unit file or drop-in is the one systemd runs.
    pub fn repair(units: bool) -> Plan {
        let cause = Cause { change: "the force file".into(), why: "the current config written again".into() };
        let actions = if units { vec![Action::DaemonReload] } else { vec![Action::None] };
        Plan { actions, reboot: false, drain: false, causes: vec![cause] }
    }

    /// A human sentence: `reboot: file "/etc/foo" (no node disruption policy); kernel
    /// arguments (always reboots)`, or `no reboot: Reload crio.service (file
    /// "/etc/containers/policy.json": policy /etc/containers/policy.json)`.
    pub fn reason(&self) -> String {
        let causes: Vec<String> = self.causes.iter().map(ToString::to_string).collect();
        if self.reboot {
            return format!("reboot: {}", causes.join("; "));
        }
        let actions: Vec<String> = self.actions.iter().map(ToString::to_string).collect();
        let mut s = format!("no reboot: {}", actions.join(", "));
        if self.drain {
            s.push_str(" (after a drain)");
        }
        if !causes.is_empty() {
            s.push_str(&format!("; because of {}", causes.join("; ")));
        }
        s
    }

    /// The actions that run after the files are written (neither Drain nor None nor Reboot).
    pub fn rebootless_actions(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| !matches!(a, Action::Drain | Action::None | Action::Reboot))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason())
    }
}

fn reboot_plan(causes: Vec<Cause>) -> Plan {
    Plan { actions: vec![Action::Reboot], reboot: true, drain: true, causes }
}

/// Decide the post-config action for `changes` under `policy` (MCO's
/// calculatePostConfigChangeNodeDisruptionAction).
pub fn plan(changes: &Changes, policy: &Policy) -> Plan {
    let forced = [
        (changes.os_update, "OS image"),
        (changes.kernel_arguments, "kernel arguments"),
        (changes.fips, "FIPS"),
        (changes.kernel_type, "kernel type"),
        (changes.extensions, "extensions"),
    ];
    let always: Vec<Cause> = forced
        .iter()
        .filter(|(changed, _)| *changed)
        .map(|(_, what)| Cause { change: what.to_string(), why: "always reboots".into() })
        .collect();
    if !always.is_empty() {
        return reboot_plan(always);
    }
    if changes.files.is_empty() && changes.units.is_empty() && !changes.ssh_keys {
        return Plan { actions: vec![Action::None], reboot: false, drain: false, causes: Vec::new() };
    }

    // Every (action, cause) the policy asks for, and every change that forces a reboot.
    let mut found: Vec<(Action, Cause)> = Vec::new();
    let mut reboots: Vec<Cause> = Vec::new();
    let mut add = |change: String, entry: Option<(String, &[Action])>| match entry {
        None => reboots.push(Cause { change, why: "no node disruption policy".into() }),
        Some((name, actions)) => {
            for a in actions {
                let cause = Cause { change: change.clone(), why: format!("policy {name}: {}", a.label()) };
                if *a == Action::Reboot {
                    reboots.push(cause);
                } else {
                    found.push((a.clone(), cause));
                }
            }
        }
    };
    for path in &changes.files {
        add(format!("file {path:?}"), policy.file_policy(path).map(|f| (f.path.clone(), f.actions.as_slice())));
    }
    for unit in &changes.units {
        add(format!("unit {unit:?}"), policy.unit_policy(unit).map(|u| (u.name.clone(), u.actions.as_slice())));
    }
    if changes.ssh_keys {
        add("SSH keys".to_string(), Some(("sshkey".to_string(), policy.sshkey.actions.as_slice())));
    }
    if !reboots.is_empty() {
        return reboot_plan(reboots);
    }

    // None is redundant next to anything else; duplicates run once; then execution order.
    let mut actions: Vec<Action> = Vec::new();
    let mut causes = Vec::new();
    for (a, cause) in found {
        if a == Action::None {
            continue;
        }
        causes.push(cause);
        if !actions.contains(&a) {
            actions.push(a);
        }
    }
    actions.sort_by_key(phase);
    if actions.is_empty() {
        actions.push(Action::None);
    }
    let drain = actions.iter().any(|a| match a {
        Action::Drain | Action::Reboot => true,
        Action::Special => !changes.registries_safe,
        _ => false,
    });
    Plan { actions, reboot: false, drain, causes }
}

/// A rebootless action that failed: names the action, so the Degraded reason says which, and
/// then systemd's answer. The service error's own operation is left out where the action
/// already names it (`Restart crio.service`); a Special action says what it ran (`reload
/// crio.service`).
#[derive(Debug, thiserror::Error)]
#[error("rebootless action {} failed: {}", describe(action, error), error.message())]
pub struct ExecuteError {
    pub action: Action,
    pub error: crate::host::ServiceError,
}

fn describe(action: &Action, error: &crate::host::ServiceError) -> String {
    match action {
        Action::Special => format!("{action} ({})", error.operation()),
        other => other.to_string(),
    }
}

/// Run a rebootless plan's actions in order: DaemonReload, reloads (Special reloads CRI-O, as
/// MCO does), restarts. Stops at the first failure, which the caller rolls back and reports as
/// Degraded. A reboot plan is not executed here: rebooting is the daemon's step, after it has
/// persisted that it asked for one.
pub async fn execute(plan: &Plan, services: &dyn ServiceManager) -> Result<(), ExecuteError> {
    // Special is a CRI-O reload: next to an explicit `Reload crio.service` it runs once.
    let mut done: Vec<Action> = Vec::new();
    for action in plan.rebootless_actions() {
        let effective = match action {
            Action::Special => reload(CRIO_SERVICE),
            other => other.clone(),
        };
        if done.contains(&effective) {
            continue;
        }
        tracing::info!(action = %action, "running rebootless action");
        let result = match &effective {
            Action::DaemonReload => services.daemon_reload().await,
            Action::Reload { service } => services.reload_unit(service).await,
            Action::Restart { service } => services.restart_unit(service).await,
            Action::None | Action::Drain | Action::Reboot | Action::Special => Ok(()),
        };
        result.map_err(|error| ExecuteError { action: action.clone(), error })?;
        done.push(effective);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ServiceError;
    use serde_json::json;

    fn files(paths: &[&str]) -> Changes {
        Changes { files: paths.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    fn run(c: &Changes) -> Plan {
        plan(c, &Policy::mco_defaults())
    }

    // MCO's TestCalculatePostConfigChangeAction, case by case, under the default policy.
    #[test]
    fn a_normal_file_change_reboots() {
        let p = run(&files(&["/etc/random-reboot-file"]));
        assert_eq!(p.actions, vec![Action::Reboot]);
        assert!(p.reboot && p.drain);
        assert!(p.reason().contains("file \"/etc/random-reboot-file\" (no node disruption policy)"), "{}", p.reason());
    }

    #[test]
    fn pull_secret_and_ssh_keys_need_nothing() {
        let p = run(&files(&["/var/lib/kubelet/config.json"]));
        assert_eq!((p.actions.clone(), p.reboot, p.drain), (vec![Action::None], false, false));
        let p = run(&Changes { ssh_keys: true, ..Default::default() });
        assert_eq!((p.actions.clone(), p.reboot, p.drain), (vec![Action::None], false, false));
    }

    #[test]
    fn registries_conf_is_special() {
        let p = run(&files(&["/etc/containers/registries.conf", "/var/lib/kubelet/config.json"]));
        assert_eq!(p.actions, vec![Action::Special]);
        assert!(!p.reboot && p.drain, "Special drains unless the change is safe");
        let safe = Changes { registries_safe: true, ..files(&["/etc/containers/registries.conf"]) };
        assert!(!run(&safe).drain);
    }

    #[test]
    fn an_os_or_karg_change_overrides_everything() {
        let mut c = files(&["/etc/containers/registries.conf"]);
        c.ssh_keys = true;
        c.os_update = true;
        let p = run(&c);
        assert_eq!(p.actions, vec![Action::Reboot]);
        assert_eq!(p.reason(), "reboot: OS image (always reboots)");
        for f in [
            |c: &mut Changes| c.kernel_arguments = true,
            |c: &mut Changes| c.fips = true,
            |c: &mut Changes| c.kernel_type = true,
            |c: &mut Changes| c.extensions = true,
        ] {
            let mut c = files(&["/var/lib/kubelet/config.json"]);
            f(&mut c);
            assert!(run(&c).reboot);
        }
    }

    #[test]
    fn policy_json_and_gpg_reload_crio() {
        for path in ["/etc/containers/policy.json", "/etc/machine-config-daemon/no-reboot/containers-gpg.pub"] {
            let p = run(&files(&[path]));
            assert_eq!(p.actions, vec![reload(CRIO_SERVICE)], "{path}");
            assert!(!p.drain);
        }
        let p = run(&files(&["/etc/containers/registries.d/quay.yaml"]));
        assert_eq!(p.actions, vec![reload(CRIO_SERVICE)], "directory policy covers files below it");
    }

    #[test]
    fn user_ca_bundle_restarts_update_ca_trust_then_crio_and_merges_with_reload() {
        let ca = "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt";
        let p = run(&files(&[ca]));
        assert_eq!(p.actions, vec![restart("coreos-update-ca-trust.service"), restart(CRIO_SERVICE)]);
        // With a gpg key change too: reloads run before restarts.
        let p = run(&files(&[ca, "/etc/machine-config-daemon/no-reboot/containers-gpg.pub"]));
        assert_eq!(
            p.actions,
            vec![reload(CRIO_SERVICE), restart("coreos-update-ca-trust.service"), restart(CRIO_SERVICE)]
        );
        assert!(p.reason().starts_with("no reboot: Reload crio.service, Restart"), "{}", p.reason());
    }

    #[test]
    fn unmatched_units_reboot_and_matched_units_act() {
        let c = Changes { units: vec!["auditd.service".into()], ..Default::default() };
        assert!(run(&c).reboot);
        let user: NodeDisruptionPolicy = serde_json::from_value(json!({"units": [{"name": "auditd.service",
            "actions": [{"type": "Drain"}, {"type": "Restart", "restart": {"serviceName": "crio.service"}},
                        {"type": "DaemonReload"}, {"type": "Reload", "reload": {"serviceName": "crio.service"}}]}]}))
        .unwrap();
        let p = plan(&c, &Policy::from_user(&user));
        assert_eq!(p.actions, vec![Action::Drain, Action::DaemonReload, reload(CRIO_SERVICE), restart(CRIO_SERVICE)]);
        assert!(p.drain && !p.reboot);
    }

    #[test]
    fn any_reboot_action_makes_it_just_reboot() {
        let user: NodeDisruptionPolicy = serde_json::from_value(json!({"files": [
            {"path": "/etc/a", "actions": [{"type": "Reboot"}]},
            {"path": "/etc/b", "actions": [{"type": "None"}]}]}))
        .unwrap();
        let p = plan(&files(&["/etc/b", "/etc/a", "/etc/containers/policy.json"]), &Policy::from_user(&user));
        assert_eq!(p.actions, vec![Action::Reboot]);
        assert_eq!(p.reason(), "reboot: file \"/etc/a\" (policy /etc/a: Reboot)");
    }

    #[test]
    fn user_entries_override_defaults() {
        let user: NodeDisruptionPolicy = serde_json::from_value(json!({
            "files": [{"path": "/etc/containers/registries.conf", "actions": [{"type": "None"}]},
                      {"path": "/etc/chrony.conf", "actions": [{"type": "Restart", "restart": {"serviceName": "chronyd.service"}}]}],
            "sshkey": {"actions": [{"type": "Drain"}]}}))
        .unwrap();
        user.validate().unwrap();
        let pol = Policy::from_user(&user);
        assert_eq!(pol.files.len(), Policy::mco_defaults().files.len() + 1);
        let p = plan(&files(&["/etc/containers/registries.conf", "/etc/chrony.conf"]), &pol);
        assert_eq!((p.actions.clone(), p.drain), (vec![restart("chronyd.service")], false));
        let p = plan(&Changes { ssh_keys: true, ..Default::default() }, &pol);
        assert_eq!((p.actions.clone(), p.drain), (vec![Action::Drain], true));
    }

    // MCO's TestFindClosestFilePolicyPathMatch.
    #[test]
    fn closest_file_policy_path_match() {
        let pol = |entries: &[(&str, Action)]| Policy {
            files: entries.iter().map(|(p, a)| FilePolicy { path: p.to_string(), actions: vec![a.clone()] }).collect(),
            units: vec![],
            sshkey: SshKeyPolicy { actions: vec![Action::None] },
        };
        let found = |p: &Policy, path: &str| p.file_policy(path).map(|f| f.actions[0].clone());
        assert_eq!(found(&pol(&[("/etc/example", Action::None)]), "/etc/mco/test"), None);
        let two = pol(&[("/etc/mco/test1", Action::None), ("/etc/mco/test2", Action::Reboot)]);
        assert_eq!(found(&two, "/etc/mco/test1"), Some(Action::None));
        let nested = pol(&[
            ("/etc/mco/f1", Action::None),
            ("/etc/mco/f1/f2", Action::Reboot),
            ("/etc/mco/f1/f2/f3", reload(CRIO_SERVICE)),
        ]);
        assert_eq!(found(&nested, "/etc/mco/f1/f2/example"), Some(Action::Reboot), "closest ancestor");
        assert_eq!(found(&nested, "/etc/mco/f1/f2/f3"), Some(reload(CRIO_SERVICE)), "exact match wins");
        let siblings = pol(&[
            ("/etc/mco/f1/test", Action::None),
            ("/etc/mco/f1/f2/test", Action::Reboot),
            ("/etc/mco/f1/f2/f3/f4", Action::None),
        ]);
        assert_eq!(found(&siblings, "/etc/mco/f1/f2/f3"), None, "no partial directory match");
        // Whole components, not string prefixes; trailing slashes and doubled slashes are the same path.
        let dir = pol(&[("/etc/a/", Action::None)]);
        assert_eq!(found(&dir, "/etc/ab"), None);
        assert_eq!(found(&dir, "/etc//a/x"), Some(Action::None));
    }

    #[test]
    fn reads_the_mco_shape_and_validates_it() {
        let mc = json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster"},
            "spec": {"nodeDisruptionPolicy": {"files": [{"path": "/home/core/test", "actions": [{"type": "None"}]}]}}});
        let p = NodeDisruptionPolicy::from_machine_configuration(&mc).unwrap();
        assert_eq!(p.files[0].actions, vec![Action::None]);
        let none = NodeDisruptionPolicy::from_machine_configuration(&json!({"spec": {}})).unwrap();
        assert_eq!(none, NodeDisruptionPolicy::default());
        // Round trip keeps MCO's wire shape.
        let a = restart("chronyd.service");
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"type": "Restart", "restart": {"serviceName": "chronyd.service"}})
        );
        let bad = [
            (json!({"files": [{"path": "/x", "actions": [{"type": "Reload"}]}]}), "serviceName is required"),
            (json!({"files": [{"path": "/x", "actions": [{"type": "Bounce"}]}]}), "not one of"),
            (
                json!({"files": [{"path": "/x", "actions": [{"type": "None", "restart": {"serviceName": "a.service"}}]}]}),
                "only allowed with type Restart",
            ),
            (json!({"files": [{"path": "x", "actions": [{"type": "None"}]}]}), "must be absolute"),
            (
                json!({"files": [{"path": "/x", "actions": [{"type": "Reboot"}, {"type": "Drain"}]}]}),
                "Reboot must be the only action",
            ),
            (json!({"files": [{"path": "/x", "actions": [{"type": "Special"}]}]}), "Special is reserved"),
            (json!({"units": [{"name": "a/b.service", "actions": [{"type": "None"}]}]}), "contains '/'"),
            (json!({"sshkey": {"actions": []}}), "must not be empty"),
        ];
        // Duplicate keys: refused by admission (`check_unique`), taken by the agent (the last
        // entry wins), so that a policy stored before the check does not fail every update.
        let dup = json!({"spec": {"nodeDisruptionPolicy": {"files": [
            {"path": "/etc/x", "actions": [{"type": "None"}]}, {"path": "/etc//x", "actions": [{"type": "Reboot"}]}],
            "units": [{"name": "a.service", "actions": [{"type": "None"}]}, {"name": "a.service", "actions": [{"type": "None"}]}]}}});
        let mut read = NodeDisruptionPolicy::from_machine_configuration(&dup).expect("the agent reads it");
        let err = read.check_unique().unwrap_err().to_string();
        assert!(err.contains("files[1].path: Duplicate value: \"/etc//x\" (files[0] has it)"), "{err}");
        read.files.truncate(1);
        let err = read.check_unique().unwrap_err().to_string();
        assert!(err.contains("units[1].name: Duplicate value: \"a.service\""), "{err}");
        for (policy, want) in bad {
            let err =
                NodeDisruptionPolicy::from_machine_configuration(&json!({"spec": {"nodeDisruptionPolicy": policy}}))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }

    /// Records what `execute` asks for; fails the unit it is told to.
    #[derive(Default)]
    struct Recorder {
        calls: std::sync::Mutex<Vec<String>>,
        fail: Option<String>,
    }

    #[async_trait::async_trait]
    impl ServiceManager for Recorder {
        async fn daemon_reload(&self) -> Result<(), ServiceError> {
            self.calls.lock().unwrap().push("daemon-reload".into());
            Ok(())
        }
        async fn enable_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn disable_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn mask_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn unmask_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn preset_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn reload_unit(&self, unit: &str) -> Result<(), ServiceError> {
            self.job("reload", unit)
        }
        async fn restart_unit(&self, unit: &str) -> Result<(), ServiceError> {
            self.job("restart", unit)
        }
        async fn start_unit(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn stop_unit(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn wants(&self, _: &str) -> Result<Vec<String>, ServiceError> {
            unreachable!()
        }
        async fn reboot(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!("execute never reboots")
        }
    }

    impl Recorder {
        fn job(&self, verb: &str, unit: &str) -> Result<(), ServiceError> {
            self.calls.lock().unwrap().push(format!("{verb} {unit}"));
            if self.fail.as_deref() == Some(unit) {
                return Err(ServiceError::Call { operation: format!("{verb} {unit}"), message: "job failed".into() });
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn execute_runs_daemon_reload_then_reloads_then_restarts() {
        let user: NodeDisruptionPolicy = serde_json::from_value(json!({"units": [{"name": "a.service", "actions": [
            {"type": "Restart", "restart": {"serviceName": "a.service"}}, {"type": "DaemonReload"}]}]}))
        .unwrap();
        let c = Changes {
            units: vec!["a.service".into()],
            registries_safe: true,
            ..files(&["/etc/containers/registries.conf", "/etc/containers/policy.json"])
        };
        let p = plan(&c, &Policy::from_user(&user));
        let rec = Recorder::default();
        execute(&p, &rec).await.unwrap();
        assert_eq!(
            *rec.calls.lock().unwrap(),
            vec!["daemon-reload", "reload crio.service", "restart a.service"],
            "Special and the policy.json reload are one crio reload"
        );
        let none = run(&files(&["/var/lib/kubelet/config.json"]));
        let rec = Recorder::default();
        execute(&none, &rec).await.unwrap();
        assert!(rec.calls.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn execute_names_the_failing_action() {
        let ca = "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt";
        let rec = Recorder { fail: Some("coreos-update-ca-trust.service".into()), ..Default::default() };
        let err = execute(&run(&files(&[ca])), &rec).await.unwrap_err();
        assert_eq!(err.action, restart("coreos-update-ca-trust.service"));
        assert!(
            err.to_string().starts_with("rebootless action Restart coreos-update-ca-trust.service failed"),
            "{err}"
        );
        assert_eq!(*rec.calls.lock().unwrap(), vec!["restart coreos-update-ca-trust.service"], "stops at the failure");
    }
}
