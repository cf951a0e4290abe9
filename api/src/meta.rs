//! Kubernetes object metadata, the parts aloft reads and writes.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Unknown fields of an object, kept so that a read-modify-write loses nothing.
pub type Extra = BTreeMap<String, Value>;

/// `metadata` of every object. `resource_version` is a decimal string on the wire, as in
/// Kubernetes; clients must treat it as opaque, the coordinator compares it as an integer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    /// Set by a DELETE of an object a finalizer holds: it is being deleted. Controllers that act
    /// on the object (MCO's render and node controllers for a pool) stop acting on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Points from a generated object to the object it belongs to (a rendered config to its pool).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// A foreground deletion of the owner waits for this object to be gone first (Kubernetes'
    /// garbage collector; MCO's rendered configs set it, as `metav1.NewControllerRef` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// A reference by kind and name, as in a pool's `spec.configuration.source`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A status condition in the Kubernetes shape (`type`, `status` "True"/"False"/"Unknown", ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Condition {
    /// A condition with no transition time yet: [`set_condition`] stamps it when it lands.
    pub fn new(type_: &str, status: &str, reason: &str, message: impl Into<String>) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// Find a condition by type.
pub fn find_condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// Set a condition, keeping `lastTransitionTime` unless the status changes, as Kubernetes
/// controllers do; returns true when anything changed so callers can skip no-op writes.
pub fn set_condition(conds: &mut Vec<Condition>, new: Condition, now: &str) -> bool {
    match conds.iter_mut().find(|c| c.type_ == new.type_) {
        Some(c) => {
            let changed = c.status != new.status || c.reason != new.reason || c.message != new.message;
            if c.status != new.status {
                c.last_transition_time = Some(now.to_string());
            }
            c.status = new.status;
            c.reason = new.reason;
            c.message = new.message;
            changed
        }
        None => {
            let mut new = new;
            new.last_transition_time = Some(now.to_string());
            conds.push(new);
            true
        }
    }
}

/// `maxUnavailable`: an absolute count or a percentage string such as "10%".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    String(String),
}

/// Read by hand rather than as an untagged enum, whose error ("data did not match any variant of
/// untagged enum IntOrString") says nothing a user can act on.
impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn refuse<E: serde::de::Error>(shown: impl std::fmt::Display) -> E {
            E::custom(format!("Invalid value: {shown}: must be an integer or a percentage like \"10%\""))
        }
        impl serde::de::Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer or a percentage like \"10%\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IntOrString, E> {
                Ok(IntOrString::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i64::try_from(v).map(IntOrString::Int).map_err(|_| refuse(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<IntOrString, E> {
                // Shown as a float (`2.0`, not `2`): as Kubernetes' IntOrString, a number written
                // with a fraction or an exponent is not an integer here.
                Err(refuse(format!("{v:?}")))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<IntOrString, E> {
                Err(refuse(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::String(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<IntOrString, E> {
                Err(refuse("null"))
            }
        }
        d.deserialize_any(V)
    }
}
