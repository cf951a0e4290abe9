//! PackageManifests as OLM's package server shows them: a namespace's own, then those of the
//! global catalog namespace (`--olm-global-namespace`), each shown in the namespace asked about.
//!
//! OLM's users find what a catalog offers with `kubectl get packagemanifests -n <their
//! namespace>`; on OpenShift that lists `openshift-marketplace`'s catalogs in every namespace.
//! The stored objects stay one per package and catalog namespace (written by the OLM
//! controller); a list, get or watch of another namespace adds the global namespace's, moved
//! into the namespace asked about (as OLM's package server sets it, "to stop clients from
//! complaining about a namespace mismatch"), without their owner reference (the CatalogSource it
//! names is not in that namespace; `status.catalogSourceNamespace` says where it is). A
//! namespace whose own catalog has a package the global one also has lists both, its own first,
//! and a get answers its own, as OLM's does; the `catalog` label tells them apart. (Those two
//! share a namespace and name in the view: a watch with a label selector tracks what it sent by
//! namespace and name, so for such a package it may say one left when the other did.)

use super::request::ResourcePath;
use super::Ctx;
use crate::resources::PACKAGE_MANIFEST;
use crate::store::{JsonListing, Key, Listing, Store, StoreError, Stored};
use serde_json::Value;
use std::sync::Arc;

/// The view of one namespace's PackageManifests that also holds the global namespace's.
#[derive(Debug, Clone)]
pub struct GlobalPackages {
    /// The namespace asked about.
    pub namespace: String,
    /// The global catalog namespace.
    pub global: String,
}

/// What a stored PackageManifest is in a [`GlobalPackages`] view.
#[derive(Debug)]
pub enum Seen {
    /// The namespace's own: as stored.
    Own,
    /// The global namespace's: this copy, moved into the namespace.
    Global(Value),
    /// Neither.
    Out,
}

impl GlobalPackages {
    /// The view a request on `path` has, if any: PackageManifests of one namespace, not the
    /// global one, with a global namespace set.
    pub fn of(ctx: &Ctx, path: &ResourcePath) -> Option<Self> {
        let global = ctx.global_catalog_namespace.as_deref()?;
        let namespace = path.namespace.as_deref()?;
        (path.rt.kind == PACKAGE_MANIFEST.kind && path.rt.group == PACKAGE_MANIFEST.group && namespace != global)
            .then(|| GlobalPackages { namespace: namespace.to_string(), global: global.to_string() })
    }

    /// Where `obj` (a stored PackageManifest of any namespace) stands in the view.
    pub fn see(&self, obj: &Value) -> Seen {
        match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
            Some(ns) if ns == self.namespace => Seen::Own,
            Some(ns) if ns == self.global => Seen::Global(self.moved(obj)),
            _ => Seen::Out,
        }
    }

    /// A global PackageManifest as shown in the namespace.
    fn moved(&self, obj: &Value) -> Value {
        let mut copy = obj.clone();
        if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("namespace".into(), Value::String(self.namespace.clone()));
            meta.remove("ownerReferences");
        }
        copy
    }

    /// The namespace's PackageManifests, then the global namespace's moved into it, from one
    /// reading of the store (one revision), as the stored text where it is the namespace's own.
    pub async fn list_json(&self, store: &dyn Store) -> Result<JsonListing, StoreError> {
        let all = store.list_json(&PACKAGE_MANIFEST.store_key(), None).await?;
        let (mut own, mut global) = (Vec::new(), Vec::new());
        for text in all.items {
            // Only the namespace is read to sort the namespace's own out; the global ones are
            // parsed whole, to move them.
            match namespace_of(&text)?.as_str() {
                ns if ns == self.namespace => own.push(text),
                ns if ns == self.global => {
                    let obj: Value = serde_json::from_str(&text).map_err(|e| StoreError::Backend(e.to_string()))?;
                    let moved =
                        serde_json::to_string(&self.moved(&obj)).map_err(|e| StoreError::Backend(e.to_string()))?;
                    global.push(Arc::<str>::from(moved));
                }
                _ => {}
            }
        }
        own.extend(global);
        Ok(JsonListing { items: own, revision: all.revision })
    }

    /// [`GlobalPackages::list_json`], parsed.
    pub async fn list(&self, store: &dyn Store) -> Result<Listing, StoreError> {
        let all = store.list(&PACKAGE_MANIFEST.store_key(), None).await?;
        let (mut own, mut global) = (Vec::new(), Vec::new());
        for obj in all.items {
            match self.see(&obj) {
                Seen::Own => own.push(obj),
                Seen::Global(moved) => global.push(moved),
                Seen::Out => {}
            }
        }
        own.extend(global);
        Ok(Listing { items: own, revision: all.revision })
    }

    /// The PackageManifest `name` of the view: the namespace's own, else the global one's.
    pub async fn get(&self, store: &dyn Store, name: &str) -> Result<Option<Stored>, StoreError> {
        let key = |ns: &str| Key::new(&PACKAGE_MANIFEST.store_key(), ns, name);
        if let Some(own) = store.get(&key(&self.namespace)).await? {
            return Ok(Some(own));
        }
        Ok(store.get(&key(&self.global)).await?.map(|g| Stored::new(self.moved(&g))))
    }
}

/// The `metadata.namespace` of a stored object's JSON text, without building the rest.
fn namespace_of(text: &str) -> Result<String, StoreError> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        namespace: String,
    }
    serde_json::from_str::<Object>(text).map(|o| o.metadata.namespace).map_err(|e| StoreError::Backend(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_global_package_is_shown_in_the_namespace_asked_about_without_its_owner() {
        let view = GlobalPackages { namespace: "team-a".into(), global: "olm".into() };
        let pm = |ns: &str| {
            json!({"metadata": {"name": "etcd", "namespace": ns, "labels": {"catalog": "fleet"},
                "ownerReferences": [{"kind": "CatalogSource", "name": "fleet"}]},
                "status": {"catalogSourceNamespace": ns}})
        };
        assert!(matches!(view.see(&pm("team-a")), Seen::Own));
        assert!(matches!(view.see(&pm("team-b")), Seen::Out));
        let Seen::Global(moved) = view.see(&pm("olm")) else { panic!("a global package is in the view") };
        assert_eq!(moved["metadata"]["namespace"], "team-a");
        assert_eq!(moved["status"]["catalogSourceNamespace"], "olm", "where it comes from stays said");
        assert!(moved["metadata"].get("ownerReferences").is_none(), "{moved}");
        assert_eq!(moved["metadata"]["labels"]["catalog"], "fleet");
        assert_eq!(namespace_of(&pm("olm").to_string()).unwrap(), "olm");
        assert_eq!(namespace_of(r#"{"metadata": {"name": "x"}}"#).unwrap(), "");
        assert!(namespace_of("not json").is_err());
    }
}
