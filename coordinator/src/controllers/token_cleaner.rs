//! Expired tokens are deleted, as kube-controller-manager's tokencleaner deletes the Secret of a
//! bootstrap token once its `expiration` has passed. An expired token already fails every
//! request (the store checks the expiry on each lookup); deleting it keeps `token list` to the
//! tokens that work and frees its name. Bootstrap tokens expire after 24 h by default, so a fleet
//! that enrolls a few hosts a day left a row for each, for good.

use crate::store::Tokens;
use std::sync::Arc;
use std::time::Duration;

/// How often to look: an expired token is listed (as expired) at most this long.
pub const PERIOD: Duration = Duration::from_secs(60);

/// Purge every [`PERIOD`] forever, the first time at once.
pub async fn run(store: Arc<dyn Tokens>) {
    loop {
        match store.purge_expired_tokens(chrono::Utc::now()).await {
            Ok(names) => {
                for name in names {
                    tracing::info!(token = %name, "expired token deleted");
                }
            }
            Err(e) => tracing::warn!(error = %e, "deleting expired tokens failed; trying again later"),
        }
        tokio::time::sleep(PERIOD).await;
    }
}
