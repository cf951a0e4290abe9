//! Pre-staging: download the OS commit of a config before it is this node's turn to update, so the
//! update itself (node drained, capacity reduced) does not wait for the download.
//!
//! Protocol (agreed with the coordinator): the coordinator sets `aloft.dev/prestageConfig:
//! <rendered config>` on a node waiting for its turn; the agent reads that config, pulls its
//! `osImageURL` commit (verified, not deployed) in the background, then sets
//! `aloft.dev/prestagedConfig: <name>` on its Node — or `aloft.dev/prestageError: <message>`.
//! A config without an OS commit, or whose commit is already here, is reported prestaged at once.
//!
//! The download gives way to any other OS write ([`OsHandle::run_background`]): cancelled, it
//! reports nothing (the request stays on the Node) and the daemon starts it again once idle.

use super::denylist::Denylist;
use super::node_progress::NodeProgress;
use super::{OsError, OsHandle};
use crate::coordinator::NodeApi;
use crate::host::Root;
use aloft_api::osimage;
use std::time::Duration;

/// The coordinator's request (a rendered config to download ahead of time) and the agent's answer.
pub use aloft_api::annotations::{PRESTAGED_CONFIG, PRESTAGE_CONFIG};
/// Set by the agent when the download failed, with the reason.
pub const PRESTAGE_ERROR: &str = "aloft.dev/prestageError";

/// Why a pre-stage did not finish.
#[derive(Debug, PartialEq, Eq)]
pub enum NotStaged {
    /// Another OS call needed the helper, or a newer pre-stage replaced it; nothing to report.
    Cancelled,
    /// The message for `prestageError`.
    Failed(String),
}

/// Download `name`'s OS commit; returns whether anything was downloaded. A download that runs
/// longer than `progress_report` shows its progress on the Node ([`NodeProgress`]), as an
/// update's does: a pre-stage of a large image over a slow link takes minutes, before the node's
/// turn, and was visible only on the node.
pub async fn download(
    api: &NodeApi,
    os: &OsHandle,
    root: &Root,
    name: &str,
    progress_report: Duration,
) -> Result<bool, NotStaged> {
    let failed = |e: String| NotStaged::Failed(e);
    let mc = api.machine_config(name).await.map_err(|e| failed(format!("{e:#}")))?;
    let Some(image) = osimage::parse(&mc.spec.os_image_url).map_err(|e| failed(e.to_string()))? else {
        return Ok(false);
    };
    if let Some(entry) = Denylist::load(root).map_err(|e| failed(e.to_string()))?.find(&image.checksum) {
        return Err(failed(format!("OS commit {} failed on this node before: {}", image.checksum, entry.reason)));
    }
    let checksum = image.checksum.clone();
    let pull = os.run_background(name, &checksum, move |b, cancel| b.pull_cancellable(&image, cancel));
    let report = showing_progress(
        api,
        os,
        &format!("pre-staging OS commit {checksum} for {name}"),
        &checksum,
        progress_report,
        pull,
    )
    .await
    .map_err(|e| match e {
        OsError::Cancelled { .. } => NotStaged::Cancelled,
        e => failed(e.to_string()),
    })?;
    Ok(!report.already_present)
}

/// Run `pull` of `checksum`; once it has run `every`, and every `every` after, put the helper's
/// word on how far it is on the Node (`<what>: 212 of 1480 objects, 31.4 MB in 42 s`), and take
/// it off when the pull ends, however it ends.
async fn showing_progress<T>(
    api: &NodeApi,
    os: &OsHandle,
    what: &str,
    checksum: &str,
    every: Duration,
    pull: impl std::future::Future<Output = T>,
) -> T {
    if every.is_zero() {
        return pull.await;
    }
    let started = tokio::time::Instant::now();
    let mut node = NodeProgress::new(every, started);
    let mut tick = tokio::time::interval_at(started + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(pull);
    let result = loop {
        tokio::select! {
            result = &mut pull => break result,
            _ = tick.tick() => {
                // The status is read beside the pull (it does not wait for it); one the helper
                // cannot give now does not stop the download.
                let Ok(status) = os.run_read(|b| b.status()).await else { continue };
                let Some(download) = status.download.filter(|d| d.checksum == checksum) else { continue };
                if node.due(tokio::time::Instant::now()) {
                    node.write(api, format!("{what}: {download}"));
                }
            }
        }
    };
    node.end(api).await;
    result
}

/// Download and report on the Node. Runs as a background task; never fails the daemon.
pub async fn run(api: NodeApi, os: OsHandle, root: Root, name: String, progress_report: Duration) {
    let started = std::time::Instant::now();
    let result = download(&api, &os, &root, &name, progress_report).await;
    let annotated = match &result {
        Ok(downloaded) => {
            tracing::info!(config = %name, downloaded, elapsed_ms = started.elapsed().as_millis() as u64, "pre-staged");
            api.annotate(&[(PRESTAGED_CONFIG, Some(&name)), (PRESTAGE_ERROR, None)]).await
        }
        Err(NotStaged::Cancelled) => {
            tracing::info!(config = %name, "pre-stage cancelled: another OS call needed the helper (started again once the node is idle), or a newer pre-stage replaced it");
            return;
        }
        Err(NotStaged::Failed(e)) => {
            tracing::warn!(config = %name, error = %e, "pre-stage failed");
            api.annotate(&[(PRESTAGE_ERROR, Some(e))]).await
        }
    };
    if let Err(e) = annotated {
        tracing::warn!(error = %format!("{e:#}"), "cannot report the pre-stage result on the Node");
    }
}
