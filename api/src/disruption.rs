//! MachineConfiguration/cluster `spec.nodeDisruptionPolicy` (operator.openshift.io/v1): the
//! wire types and MCO's API validation. Shared so that the API server refuses at admission exactly
//! what an agent would refuse when it reads the policy (an invalid policy stored unchecked would
//! degrade every node that updates). What the agent does with a policy is in the agent.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One action of a policy, in MCO's wire shape:
/// `{type: Restart, restart: {serviceName: crio.service}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ActionWire", into = "ActionWire")]
pub enum Action {
    /// Nothing to do: the change takes effect as written.
    None,
    /// Reload a service (`systemctl reload`).
    Reload { service: String },
    /// Restart a service (`systemctl restart`).
    Restart { service: String },
    /// `systemctl daemon-reload`.
    DaemonReload,
    /// Drain the node before applying (the drain itself happens before the files are written).
    Drain,
    /// MCO's special handling of /etc/containers/registries.conf: reload CRI-O, and drain
    /// unless the change is known to be safe.
    Special,
    /// Reboot the node.
    Reboot,
}

impl Action {
    /// MCO's `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Action::None => "None",
            Action::Reload { .. } => "Reload",
            Action::Restart { .. } => "Restart",
            Action::DaemonReload => "DaemonReload",
            Action::Drain => "Drain",
            Action::Special => "Special",
            Action::Reboot => "Reboot",
        }
    }

    /// `Reload crio.service`, `DaemonReload`, ...
    pub fn label(&self) -> String {
        match self {
            Action::Reload { service } => format!("Reload {service}"),
            Action::Restart { service } => format!("Restart {service}"),
            other => other.type_name().to_string(),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// `{serviceName: ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    pub service_name: String,
}

/// The serialized form of [`Action`], as MCO's API has it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionWire {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload: Option<ServiceRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<ServiceRef>,
}

/// Why a policy is refused. Names the entry and field, so the coordinator can report it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("action type {0:?} is not one of Reboot, None, Reload, Restart, DaemonReload, Drain, Special")]
    UnknownType(String),
    #[error("action {type_}: {field} is required")]
    Missing { type_: String, field: &'static str },
    #[error("action {type_}: {field} is only allowed with type {allowed}")]
    NotAllowed { type_: String, field: &'static str, allowed: &'static str },
    #[error("{0}")]
    Invalid(String),
    /// Any of the above, at a field of the MachineConfiguration (`spec.nodeDisruptionPolicy...`).
    #[error("{field}: {message}")]
    Field { field: String, message: String },
}

impl TryFrom<ActionWire> for Action {
    type Error = PolicyError;

    fn try_from(w: ActionWire) -> Result<Self, PolicyError> {
        let ty = w.type_.clone();
        if w.reload.is_some() && ty != "Reload" {
            return Err(PolicyError::NotAllowed { type_: ty, field: "reload", allowed: "Reload" });
        }
        if w.restart.is_some() && ty != "Restart" {
            return Err(PolicyError::NotAllowed { type_: ty, field: "restart", allowed: "Restart" });
        }
        let service = |r: Option<ServiceRef>| -> Result<String, PolicyError> {
            let name = r.ok_or(PolicyError::Missing { type_: ty.clone(), field: "serviceName" })?.service_name;
            crate::content::check_unit_name(&name)
                .map_err(|e| PolicyError::Invalid(format!("action {ty}: serviceName: {e}")))?;
            Ok(name)
        };
        Ok(match w.type_.as_str() {
            "None" => Action::None,
            "Reboot" => Action::Reboot,
            "Drain" => Action::Drain,
            "DaemonReload" => Action::DaemonReload,
            "Special" => Action::Special,
            "Reload" => Action::Reload { service: service(w.reload)? },
            "Restart" => Action::Restart { service: service(w.restart)? },
            _ => return Err(PolicyError::UnknownType(w.type_)),
        })
    }
}

impl From<Action> for ActionWire {
    fn from(a: Action) -> Self {
        let type_ = a.type_name().to_string();
        match a {
            Action::Reload { service } => {
                ActionWire { type_, reload: Some(ServiceRef { service_name: service }), restart: None }
            }
            Action::Restart { service } => {
                ActionWire { type_, reload: None, restart: Some(ServiceRef { service_name: service }) }
            }
            _ => ActionWire { type_, reload: None, restart: None },
        }
    }
}

/// `files[]` entry: actions for a path (a file, or a directory covering everything below it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePolicy {
    pub path: String,
    pub actions: Vec<Action>,
}

/// `units[]` entry: actions for a unit name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitPolicy {
    pub name: String,
    pub actions: Vec<Action>,
}

/// `sshkey`: actions for a change of the core user's SSH keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshKeyPolicy {
    pub actions: Vec<Action>,
}

/// `spec.nodeDisruptionPolicy` of MachineConfiguration (operator.openshift.io/v1): the admin's
/// entries, each overriding the default for the same path, unit, or the SSH key entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDisruptionPolicy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FilePolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<UnitPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sshkey: Option<SshKeyPolicy>,
}

/// The registries file MCO gives the Special action.
pub const REGISTRIES_CONF: &str = "/etc/containers/registries.conf";

/// MCO's API limits: 50 file and unit entries, 10 actions per entry.
const MAX_ENTRIES: usize = 50;
const MAX_ACTIONS: usize = 10;

/// Where the policy lives in a MachineConfiguration; every field of a [`PolicyError::Field`]
/// starts with it.
pub const POLICY_FIELD: &str = "spec.nodeDisruptionPolicy";

fn field_error(field: String, message: String) -> PolicyError {
    PolicyError::Field { field, message }
}

/// `field` is the entry's `actions` list; `what` names the entry (its path or unit, which the
/// field's index does not say), or is empty for the SSH key entry.
fn check_actions(field: String, what: &str, actions: &[Action], special_ok: bool) -> Result<(), PolicyError> {
    let what = if what.is_empty() { String::new() } else { format!("{what}: ") };
    if actions.is_empty() {
        return Err(field_error(field, format!("{what}actions must not be empty")));
    }
    if actions.len() > MAX_ACTIONS {
        return Err(field_error(field, format!("{what}at most {MAX_ACTIONS} actions")));
    }
    for standalone in [Action::Reboot, Action::None] {
        if actions.contains(&standalone) && actions.len() > 1 {
            return Err(field_error(field, format!("{what}{} must be the only action", standalone.type_name())));
        }
    }
    if !special_ok && actions.contains(&Action::Special) {
        return Err(field_error(field, format!("{what}Special is reserved for {REGISTRIES_CONF}")));
    }
    Ok(())
}

impl NodeDisruptionPolicy {
    /// Read `spec.nodeDisruptionPolicy` out of a MachineConfiguration object (JSON), or the
    /// policy object itself, and validate it ([`Self::validate`]). A missing policy is the empty
    /// policy (defaults only). Errors are [`PolicyError::Field`], naming the field at fault.
    pub fn from_machine_configuration(obj: &serde_json::Value) -> Result<Self, PolicyError> {
        let policy = obj.pointer("/spec/nodeDisruptionPolicy").unwrap_or(obj);
        if policy.is_null() {
            return Ok(Self::default());
        }
        let p: Self = serde_path_to_error::deserialize(policy).map_err(|e| {
            let at = e.path().to_string();
            let field = if at == "." { POLICY_FIELD.to_string() } else { format!("{POLICY_FIELD}.{at}") };
            field_error(field, crate::json_words::in_json_terms(&e.into_inner().to_string()))
        })?;
        p.validate()?;
        Ok(p)
    }

    /// MCO's API validation: absolute clean paths, valid unit names, at most 50 entries and 10
    /// actions each, Reboot and None standalone, Special only for registries.conf.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.files.len() > MAX_ENTRIES {
            return Err(field_error(format!("{POLICY_FIELD}.files"), format!("at most {MAX_ENTRIES} entries")));
        }
        if self.units.len() > MAX_ENTRIES {
            return Err(field_error(format!("{POLICY_FIELD}.units"), format!("at most {MAX_ENTRIES} entries")));
        }
        for (i, f) in self.files.iter().enumerate() {
            let at = format!("{POLICY_FIELD}.files[{i}]");
            let what = f.path.as_str();
            if !f.path.starts_with('/') || components(&f.path).any(|c| c == "..") {
                return Err(field_error(format!("{at}.path"), format!("{what:?}: must be absolute, without ..")));
            }
            check_actions(format!("{at}.actions"), what, &f.actions, normalize(&f.path) == REGISTRIES_CONF)?;
        }
        for (i, u) in self.units.iter().enumerate() {
            let at = format!("{POLICY_FIELD}.units[{i}]");
            let what = u.name.as_str();
            crate::content::check_unit_name(&u.name).map_err(|e| field_error(format!("{at}.name"), e))?;
            check_actions(format!("{at}.actions"), what, &u.actions, false)?;
        }
        if let Some(s) = &self.sshkey {
            check_actions(format!("{POLICY_FIELD}.sshkey.actions"), "", &s.actions, false)?;
        }
        Ok(())
    }
}

impl NodeDisruptionPolicy {
    /// Admission's check of the two lists keyed by path and by unit name (`listType: map` in
    /// MCO's CRD): a second entry for one key is refused, where the last one silently won. Not
    /// part of [`Self::validate`], which the agent also runs on what it reads: a policy stored
    /// before this check must not fail every update (the agent takes the last entry, as before).
    pub fn check_unique(&self) -> Result<(), PolicyError> {
        for (i, f) in self.files.iter().enumerate() {
            if let Some(j) = self.files[..i].iter().position(|g| normalize(&g.path) == normalize(&f.path)) {
                return Err(field_error(
                    format!("{POLICY_FIELD}.files[{i}].path"),
                    format!("Duplicate value: {:?} (files[{j}] has it)", f.path),
                ));
            }
        }
        for (i, u) in self.units.iter().enumerate() {
            if let Some(j) = self.units[..i].iter().position(|v| v.name == u.name) {
                return Err(field_error(
                    format!("{POLICY_FIELD}.units[{i}].name"),
                    format!("Duplicate value: {:?} (units[{j}] has it)", u.name),
                ));
            }
        }
        Ok(())
    }
}

/// Path components, ignoring empty ones and `.` (so `/etc//a/./b` is `etc, a, b`).
pub fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// `path` with empty and `.` components dropped.
pub fn normalize(path: &str) -> String {
    let parts: Vec<&str> = components(path).collect();
    format!("/{}", parts.join("/"))
}
