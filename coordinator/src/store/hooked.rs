//! A store for tests that lets a test slip its own writes in around the code's: a write of
//! another actor that lands between a controller's read and its write (the races the
//! controllers must survive), made on the inner store so the hook sees no writes of its own.

use super::{CasWrite, JsonListing, Key, Listing, Store, StoreError, Stored, WatchFilter, WatchStream};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

/// When the hook runs, around which write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Right after a create of the key succeeded.
    AfterCreate,
    /// Right before an update of the key.
    BeforeUpdate,
}

/// What a test runs at each [`Moment`]: the inner store, the moment and the key written.
pub type Hook = Box<dyn Fn(Arc<dyn Store>, Moment, Key) -> BoxFuture<'static, Result<(), StoreError>> + Send + Sync>;

/// The inner store, with `hook` run around its creates and updates; every other call passes
/// through.
pub struct Hooked {
    pub inner: Arc<dyn Store>,
    pub hook: Hook,
}

#[async_trait::async_trait]
impl Store for Hooked {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, StoreError> {
        self.inner.get(key).await
    }
    async fn list(&self, resource: &str, ns: Option<&str>) -> Result<Listing, StoreError> {
        self.inner.list(resource, ns).await
    }
    async fn list_json(&self, resource: &str, ns: Option<&str>) -> Result<JsonListing, StoreError> {
        self.inner.list_json(resource, ns).await
    }
    async fn create(&self, key: &Key, object: Value) -> Result<Stored, StoreError> {
        let created = self.inner.create(key, object).await?;
        (self.hook)(self.inner.clone(), Moment::AfterCreate, key.clone()).await?;
        Ok(created)
    }
    async fn update(&self, key: &Key, object: Value, expected: Option<u64>) -> Result<Stored, StoreError> {
        (self.hook)(self.inner.clone(), Moment::BeforeUpdate, key.clone()).await?;
        self.inner.update(key, object, expected).await
    }
    async fn delete(&self, key: &Key, expected: Option<u64>) -> Result<Stored, StoreError> {
        self.inner.delete(key, expected).await
    }
    async fn watch(&self, filter: WatchFilter, from: u64) -> Result<WatchStream, StoreError> {
        self.inner.watch(filter, from).await
    }
    async fn revision(&self) -> Result<u64, StoreError> {
        self.inner.revision().await
    }
    async fn check_writes(&self) -> Result<(), StoreError> {
        self.inner.check_writes().await
    }
    async fn update_in_order(
        &self,
        first: Vec<CasWrite>,
        then: Vec<CasWrite>,
    ) -> Result<Vec<Option<Stored>>, StoreError> {
        self.inner.update_in_order(first, then).await
    }
}
