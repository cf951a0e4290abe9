//! Finalizers, as Kubernetes' generic registry serves them ("Finalizers", "Using Finalizers to
//! Control Deletion"): a DELETE of an object whose `metadata.finalizers` is not empty does not
//! remove it but marks it as being deleted (`metadata.deletionTimestamp`,
//! `metadata.deletionGracePeriodSeconds: 0`), in one compare-and-swap write that watchers see as
//! MODIFIED. The object stays, readable and writable, until an update leaves it with no
//! finalizers; that update removes it (watchers see DELETED). Whoever put a finalizer there
//! (a user, another controller) is the one that removes it. aloft sets one only for a DELETE
//! with `propagationPolicy: Foreground` (`foregroundDeletion`); its garbage collector deletes
//! through the same rule ([`delete`]), and processes `foregroundDeletion` and `orphan` as
//! Kubernetes' does ([`crate::controllers::gc`]).
//!
//! The deletion fields are the server's: an update keeps the stored ones (kube-apiserver's
//! `BeforeUpdate`: "an update can never remove/change a deletion timestamp"), a create drops
//! them, and a terminating object takes no new finalizer (`ValidateNoNewFinalizers`), so that a
//! deletion once asked for always ends when the finalizers present then are done.

use super::error::cause;
use crate::store::{revision_of, Key, Store, StoreError, Stored};
use aloft_api::StatusCause;
use serde_json::Value;
use std::sync::Arc;

const FIELD: &str = "metadata.finalizers";

/// The finalizer names Kubernetes itself uses without a domain prefix; any other name without
/// one is accepted with a warning, as kube-apiserver does.
const STANDARD: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// The two fields a DELETE sets and only the server may write.
const DELETION_FIELDS: [&str; 2] = ["deletionTimestamp", "deletionGracePeriodSeconds"];

/// `metadata.finalizers` as strings; None when absent or null. Entries that are not strings are
/// left out (named by [`causes`]).
fn names(obj: &Value) -> Vec<&str> {
    super::objects::at(obj, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether `obj` has at least one finalizer.
pub fn has_finalizers(obj: &Value) -> bool {
    !names(obj).is_empty()
}

/// Whether `obj` is being deleted (has a `deletionTimestamp`); such an object still exists, for
/// the API and for every controller, until its finalizers are gone.
pub fn is_terminating(obj: &Value) -> bool {
    super::objects::at(obj, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null())
}

/// Why `next`'s finalizers are refused (422), and the warnings they earn. Each name must be a
/// qualified name (`IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 characters); a name without a prefix that is not one of Kubernetes' own is
/// accepted with kube-apiserver's warning, given only for names `stored` (the object before an
/// update) does not have already, so that every later write of the object does not repeat it.
pub fn causes(next: &Value, stored: Option<&Value>) -> (Vec<StatusCause>, Vec<String>) {
    let (mut out, mut warnings) = (Vec::new(), Vec::new());
    let Some(list) = super::objects::at(next, &["metadata", "finalizers"]) else { return (out, warnings) };
    let items = match list {
        Value::Null => return (out, warnings),
        Value::Array(items) => items,
        other => {
            out.push(cause(FIELD, "FieldValueInvalid", format!("Invalid value: {other}: must be a list of strings")));
            return (out, warnings);
        }
    };
    let had = stored.map(names).unwrap_or_default();
    // kube-apiserver's `ValidateFinalizers`: the two ways of propagating a deletion exclude each
    // other.
    let given: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
    if given.contains(&"orphan") && given.contains(&"foregroundDeletion") {
        out.push(cause(
            FIELD,
            "FieldValueInvalid",
            format!("Invalid value: {list}: finalizer orphan and foregroundDeletion cannot be both set"),
        ));
    }
    for (i, item) in items.iter().enumerate() {
        let field = format!("{FIELD}[{i}]");
        let Some(name) = item.as_str() else {
            out.push(cause(&field, "FieldValueInvalid", format!("Invalid value: {item}: must be a string")));
            continue;
        };
        for m in aloft_api::selector::label_key_errors(name) {
            out.push(cause(&field, "FieldValueInvalid", format!("Invalid value: {name:?}: {m}")));
        }
        if !name.contains('/') && !STANDARD.contains(&name) && !had.contains(&name) {
            warnings.push(format!(
                "{FIELD}: {name:?}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"
            ));
        }
    }
    (out, warnings)
}

/// The update `next` of `stored` with the stored deletion fields, whatever the client sent:
/// they cannot be set, changed or cleared by an update.
pub fn keep_deletion_fields(stored: &Value, next: &mut Value) {
    let stored_meta = stored.get("metadata");
    let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    for k in DELETION_FIELDS {
        match stored_meta.and_then(|m| m.get(k)) {
            Some(v) if meta.get(k) == Some(v) => {}
            Some(v) => {
                meta.insert(k.into(), v.clone());
            }
            None => {
                meta.remove(k);
            }
        }
    }
}

/// The 422 causes of an update that sets a deletion field on an object not being deleted (only a
/// DELETE starts a deletion: kube-apiserver's `ValidateObjectMetaUpdate`, "field is immutable"),
/// or changes the grace period of one being deleted. What else an update of an object being
/// deleted leaves out or changes of its deletion fields is put back by [`keep_deletion_fields`],
/// as kube-apiserver's `BeforeUpdate` does, without an error.
pub fn set_by_update(stored: &Value, next: &Value) -> Vec<StatusCause> {
    let field = |obj: &Value, k: &str| super::objects::at(obj, &["metadata", k]).filter(|v| !v.is_null()).cloned();
    DELETION_FIELDS
        .into_iter()
        .filter_map(|k| {
            let new = field(next, k)?;
            let refused = match field(stored, k) {
                None => true,
                // kube-apiserver's `BeforeUpdate` puts back a timestamp an update changes, and a
                // grace period it leaves out; a grace period it changes fails validation.
                Some(old) => k == "deletionGracePeriodSeconds" && old != new,
            };
            refused.then(|| {
                cause(
                    &format!("metadata.{k}"),
                    "FieldValueInvalid",
                    format!("Invalid value: {new}: field is immutable; may only be changed via deletion"),
                )
            })
        })
        .collect()
}

/// Drop the deletion fields of an object being created: a new object is not being deleted.
pub fn drop_deletion_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in DELETION_FIELDS {
            meta.remove(k);
        }
    }
}

/// The 422 cause of an update that adds a finalizer to a terminating object: the deletion must
/// not wait for something that was not there when it was asked for.
pub fn added_while_terminating(stored: &Value, next: &Value) -> Option<StatusCause> {
    if !is_terminating(stored) {
        return None;
    }
    let had = names(stored);
    let mut added: Vec<&str> = names(next).into_iter().filter(|n| !had.contains(n)).collect();
    if added.is_empty() {
        return None;
    }
    added.sort_unstable();
    added.dedup();
    Some(cause(
        FIELD,
        "FieldValueForbidden",
        format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
        ),
    ))
}

/// Whether the update result `next` is to be removed instead of written: it is being deleted and
/// its last finalizer is gone.
pub fn finished(next: &Value) -> bool {
    is_terminating(next) && !has_finalizers(next)
}

/// What a DELETE made of `stored` would be: None when it is removed, else the object marked
/// as being deleted (the same object when it is already marked).
pub fn marked(stored: &Value) -> Option<Value> {
    if !has_finalizers(stored) {
        return None;
    }
    if is_terminating(stored) {
        return Some(stored.clone());
    }
    let mut next = stored.clone();
    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("deletionTimestamp".into(), super::objects::now().into());
        meta.insert("deletionGracePeriodSeconds".into(), 0.into());
        // As kube-apiserver marks an object for deletion: its generation moves once, so a
        // controller that acts only on generation changes (controller-runtime's
        // GenerationChangedPredicate) sees the deletion and can remove its finalizer.
        if let Some(g) = meta.get("generation").and_then(Value::as_i64).filter(|g| *g > 0) {
            meta.insert("generation".into(), (g + 1).into());
        }
    }
    Some(next)
}

/// What [`delete`] did.
#[derive(Debug)]
pub enum Deleted {
    /// Removed from the store: it had no finalizers. The last state.
    Removed(Stored),
    /// Marked as being deleted now: it stays until its finalizers are gone.
    Marked(Stored),
    /// Already being deleted: nothing written.
    AlreadyTerminating(Stored),
}

impl Deleted {
    /// The object to answer with: the removed one's last state, or the one that stays.
    pub fn object(self) -> Stored {
        match self {
            Deleted::Removed(s) | Deleted::Marked(s) | Deleted::AlreadyTerminating(s) => s,
        }
    }
}

/// Delete `stored` (the object at `key` as read), compare-and-swap on its revision: removed when
/// it has no finalizers, else marked as being deleted. One write either way; a Conflict when
/// it changed since it was read. The API's DELETE and the garbage collector both come here.
pub async fn delete(store: &Arc<dyn Store>, key: &Key, stored: Stored) -> Result<Deleted, StoreError> {
    let rev = revision_of(&stored);
    match marked(&stored) {
        None => Ok(Deleted::Removed(store.delete(key, rev).await?)),
        Some(_) if is_terminating(&stored) => Ok(Deleted::AlreadyTerminating(stored)),
        Some(next) => Ok(Deleted::Marked(store.update(key, next, rev).await?)),
    }
}

/// `stored` with `name` among its finalizers (once). `orphan` and `foregroundDeletion` exclude
/// each other: adding one drops the other, as kube-apiserver's DELETE does for the propagation
/// it is asked for.
pub fn with_finalizer(stored: &Value, name: &str) -> Value {
    let other = match name {
        "orphan" => Some("foregroundDeletion"),
        "foregroundDeletion" => Some("orphan"),
        _ => None,
    };
    let mut next = stored.clone();
    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
        let list = meta.entry("finalizers").or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        if let Some(items) = list.as_array_mut() {
            items.retain(|v| other.is_none_or(|o| v != o));
            if !items.iter().any(|v| v == name) {
                items.push(name.into());
            }
        }
    }
    next
}

/// [`delete`] with the finalizer `name` added first (a foreground deletion's
/// `foregroundDeletion`): always marked, in the same one write. An object being deleted already
/// takes no new finalizer, and is left as it is.
pub async fn delete_adding(
    store: &Arc<dyn Store>,
    key: &Key,
    stored: Stored,
    name: &str,
) -> Result<Deleted, StoreError> {
    if is_terminating(&stored) {
        return Ok(Deleted::AlreadyTerminating(stored));
    }
    let rev = revision_of(&stored);
    let next = marked(&with_finalizer(&stored, name)).unwrap_or_else(|| with_finalizer(&stored, name));
    Ok(Deleted::Marked(store.update(key, next, rev).await?))
}

/// A DELETE with a propagation policy of an object being deleted already: its `orphan` and
/// `foregroundDeletion` finalizers become what the policy asks (`want`: the one to have, None
/// for background), as kube-apiserver sets them again on every DELETE; the object goes when no
/// finalizer is left. Unchanged: nothing written.
pub async fn propagate_again(
    store: &Arc<dyn Store>,
    key: &Key,
    stored: Stored,
    want: Option<&str>,
) -> Result<Deleted, StoreError> {
    let have = names(&stored);
    let mut next_names: Vec<&str> =
        have.iter().copied().filter(|n| *n != "orphan" && *n != "foregroundDeletion").collect();
    next_names.extend(want);
    if next_names == have {
        return Ok(Deleted::AlreadyTerminating(stored));
    }
    let rev = revision_of(&stored);
    if next_names.is_empty() {
        return Ok(Deleted::Removed(store.delete(key, rev).await?));
    }
    let mut next = (*stored.object).clone();
    next["metadata"]["finalizers"] = next_names.into_iter().map(Value::from).collect::<Vec<_>>().into();
    Ok(Deleted::AlreadyTerminating(store.update(key, next, rev).await?))
}

/// Remove the finalizer `name` from `stored` (the object at `key` as read; compare-and-swap on
/// its revision): the collector's part once it has done what the finalizer asked. Removes the
/// object when it is being deleted and that was its last finalizer (true), as an update that
/// takes the last finalizer does.
pub async fn remove_finalizer(
    store: &Arc<dyn Store>,
    key: &Key,
    stored: Stored,
    name: &str,
) -> Result<bool, StoreError> {
    let rev = revision_of(&stored);
    let mut next = (*stored.object).clone();
    if let Some(items) = next.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
        items.retain(|v| v != name);
        if items.is_empty() {
            if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("finalizers");
            }
        }
    }
    if finished(&next) {
        store.delete(key, rev).await?;
        return Ok(true);
    }
    store.update(key, next, rev).await?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(c: &[StatusCause]) -> Vec<&str> {
        c.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn names_are_qualified_names_and_unprefixed_ones_warn() {
        let obj = json!({"metadata": {"finalizers": ["example.com/keep", "kubernetes", "mine", "Bad/x", "a/b/c", 3]}});
        let (found, warnings) = super::causes(&obj, None);
        assert_eq!(fields(&found), ["metadata.finalizers[3]", "metadata.finalizers[4]", "metadata.finalizers[5]"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("\"mine\": prefer a domain-qualified finalizer name"), "{warnings:?}");
        // An update that keeps "mine" is not warned again.
        let (found, warnings) = super::causes(&json!({"metadata": {"finalizers": ["mine"]}}), Some(&obj));
        assert!(found.is_empty() && warnings.is_empty(), "{found:?} {warnings:?}");
        let (found, _) = super::causes(&json!({"metadata": {"finalizers": "x"}}), None);
        assert_eq!(fields(&found), ["metadata.finalizers"]);
        // Orphaning and foreground deletion exclude each other, as kube-apiserver has it.
        let (found, _) = super::causes(&json!({"metadata": {"finalizers": ["orphan", "foregroundDeletion"]}}), None);
        assert_eq!(fields(&found), ["metadata.finalizers"]);
        assert!(found[0].message.contains("cannot be both set"), "{found:?}");
    }

    #[test]
    fn an_update_cannot_start_a_deletion() {
        let live = json!({"metadata": {"name": "a"}});
        let set = json!({"metadata": {"name": "a", "deletionTimestamp": "2030-01-01T00:00:00Z"}});
        let causes = set_by_update(&live, &set);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "metadata.deletionTimestamp");
        assert!(causes[0].message.contains("field is immutable"), "{}", causes[0].message);
        let grace = json!({"metadata": {"deletionGracePeriodSeconds": 30}});
        assert_eq!(set_by_update(&live, &grace).len(), 1);
        // null is "not set"; a terminating object's own fields, sent back or left out, are fine.
        assert!(set_by_update(&live, &json!({"metadata": {"deletionTimestamp": null}})).is_empty());
        let dying = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0}});
        assert!(set_by_update(&dying, &dying).is_empty());
        assert!(set_by_update(&dying, &live).is_empty());
        assert!(set_by_update(&dying, &set).is_empty(), "a changed timestamp is put back, not refused");
        let longer =
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}});
        let causes = set_by_update(&dying, &longer);
        assert_eq!(causes.len(), 1, "a changed grace period is refused: {causes:?}");
        assert_eq!(causes[0].field, "metadata.deletionGracePeriodSeconds");
    }

    #[test]
    fn deletion_fields_are_the_servers() {
        let stored =
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0}});
        let mut next = json!({"metadata": {"deletionTimestamp": null}});
        keep_deletion_fields(&stored, &mut next);
        assert_eq!(next, stored);
        let mut next =
            json!({"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}});
        keep_deletion_fields(&json!({"metadata": {}}), &mut next);
        assert_eq!(next, json!({"metadata": {}}));
    }

    #[test]
    fn a_terminating_object_takes_no_new_finalizer_and_goes_with_its_last() {
        let stored = json!({"metadata": {"finalizers": ["a/x"], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let more = json!({"metadata": {"finalizers": ["a/x", "a/y"], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let c = added_while_terminating(&stored, &more).map(|c| c.message).unwrap_or_default();
        assert!(c.contains("no new finalizers can be added if the object is being deleted"), "{c}");
        assert!(added_while_terminating(&json!({"metadata": {"finalizers": ["a/x"]}}), &more).is_none());
        let none = json!({"metadata": {"finalizers": [], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(added_while_terminating(&stored, &none).is_none());
        assert!(finished(&none) && !finished(&stored) && !finished(&json!({"metadata": {}})));
    }

    #[test]
    fn a_delete_marks_what_has_finalizers() {
        assert!(marked(&json!({"metadata": {"finalizers": []}})).is_none());
        let m = marked(&json!({"metadata": {"finalizers": ["a/x"]}})).unwrap_or_default();
        assert!(is_terminating(&m) && m["metadata"]["deletionGracePeriodSeconds"] == 0, "{m}");
        let ts = m["metadata"]["deletionTimestamp"].as_str().unwrap_or_default();
        assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");
        assert_eq!(marked(&m), Some(m.clone()), "a second DELETE changes nothing");
    }
}
