//! A watch as a store serves it from memory: the writes it missed, read back from the store's
//! history, then the live ones from the [`Hub`], with progress notes in between.
//!
//! Shared by the SQLite store (whose history is its `log` table) and the watch cache in front
//! of etcd (whose history is a window of recent events in memory): both publish every commit to
//! a hub and can say what a filter wants after a revision, so the subtle part, that nothing
//! committed between the history's last page and the live queue is lost or sent twice, is
//! written once.

use super::hub::{Hub, Subscription};
use super::{Event, ProgressSchedule, ProgressStream, StoreError, WatchFilter, WatchItem, WatchStream};
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::VecDeque;
use std::sync::Arc;

/// What a watch reads before it follows the hub.
#[async_trait]
pub(crate) trait History: Send + Sync + 'static {
    /// Where this store publishes its commits.
    fn hub(&self) -> &Arc<Hub>;
    /// Events `filter` wants with revisions after `after`, oldest first, in whole revisions, a
    /// page at most; empty when there are none (up to what was published when it was called).
    /// Gone when the history no longer reaches back to `after`.
    async fn after(&self, filter: &WatchFilter, after: u64) -> Result<Vec<Event>, StoreError>;
}

enum Phase {
    /// Reading the store's history after `last`.
    Replay,
    /// Following the hub.
    Live,
    Done,
}

struct WatchState<H> {
    history: H,
    filter: WatchFilter,
    last: u64,
    sub: Subscription,
    phase: Phase,
    buf: VecDeque<Event>,
    /// Progress notes: when ([`ProgressSchedule`]), when the next falls due (None: no more),
    /// and whether it is due, waiting for the events queued before it.
    progress: Option<ProgressSchedule>,
    note_at: Option<tokio::time::Instant>,
    note_due: bool,
}

/// A watch of `filter` from `from` over `history`, with notes on `progress` when given. `sub`
/// must have been subscribed before `from` was checked against the history, so that nothing
/// committed in between is missed.
fn state<H: History>(
    history: H,
    filter: WatchFilter,
    from: u64,
    sub: Subscription,
    progress: Option<ProgressSchedule>,
) -> WatchState<H> {
    WatchState {
        history,
        filter,
        last: from,
        sub,
        phase: Phase::Replay,
        buf: VecDeque::new(),
        progress,
        note_at: progress.and_then(|p| p.next(tokio::time::Instant::now())),
        note_due: false,
    }
}

/// The watch's events (no notes).
pub(crate) fn events<H: History>(history: H, filter: WatchFilter, from: u64, sub: Subscription) -> WatchStream {
    let state = state(history, filter, from, sub, None);
    Box::pin(futures::stream::unfold(state, WatchState::next).filter_map(|r| {
        futures::future::ready(match r {
            Ok(WatchItem::Event(e)) => Some(Ok(e)),
            Ok(WatchItem::Progress(_)) => None,
            Err(e) => Some(Err(e)),
        })
    }))
}

/// The watch's events and its progress notes on `schedule`.
pub(crate) fn with_progress<H: History>(
    history: H,
    filter: WatchFilter,
    from: u64,
    sub: Subscription,
    schedule: ProgressSchedule,
) -> ProgressStream {
    Box::pin(futures::stream::unfold(state(history, filter, from, sub, Some(schedule)), WatchState::next))
}

impl<H: History> WatchState<H> {
    /// The next event, or progress note. A note is given only while following the hub with
    /// nothing queued: every event the watch wants up to the hub's head has been yielded.
    async fn next(mut self) -> Option<(Result<WatchItem, StoreError>, Self)> {
        loop {
            if let Some(e) = self.buf.pop_front() {
                self.last = e.revision;
                return Some((Ok(WatchItem::Event(e)), self));
            }
            if self.note_due && matches!(self.phase, Phase::Live) {
                if let Some(head) = self.sub.caught_up() {
                    self.note_due = false;
                    self.note_at = self.progress.and_then(|p| p.next(tokio::time::Instant::now()));
                    let at = head.max(self.last);
                    return Some((Ok(WatchItem::Progress(at)), self));
                }
            }
            match self.phase {
                Phase::Done => return None,
                Phase::Replay if self.last >= self.sub.head() => {
                    // Everything after `last` reaches the subscription: no history to read.
                    self.phase = Phase::Live;
                }
                Phase::Replay => match self.history.after(&self.filter, self.last).await {
                    Ok(events) => {
                        if events.is_empty() {
                            // Caught up. `last` stays what it is: the history may have gained a
                            // write since it was read; its copy in the subscription is newer
                            // than `last`, so it is delivered, and anything older than `last`
                            // was delivered from the history already.
                            self.phase = Phase::Live;
                        }
                        self.buf.extend(events);
                    }
                    Err(e) => {
                        self.phase = Phase::Done;
                        return Some((Err(e), self));
                    }
                },
                Phase::Live => match self.receive().await {
                    Received::NoteDue => self.note_due = true,
                    Received::Event(Some(ev)) => {
                        if ev.revision > self.last && self.filter.wants(&ev) {
                            // The last watch to take it takes it without a copy.
                            self.buf.push_back(Arc::unwrap_or_clone(ev));
                        }
                    }
                    Received::Event(None) if self.sub.lagged() => {
                        // Subscribe again before reading the history, so nothing falls in
                        // between. The queue held whole commits, so `last` ends one.
                        self.sub = self.history.hub().subscribe(self.filter.clone());
                        self.phase = Phase::Replay;
                    }
                    Received::Event(None) => self.phase = Phase::Done,
                },
            }
        }
    }

    /// The next queued event, or the next progress note's time coming first. Without notes (a
    /// fleet's agents' watches) nothing but the queue is waited on.
    async fn receive(&mut self) -> Received {
        match self.note_at.filter(|_| !self.note_due) {
            None => Received::Event(self.sub.recv().await),
            Some(at) => tokio::select! {
                // Cancel-safe: an event is taken only when it is returned.
                ev = self.sub.recv() => Received::Event(ev),
                _ = tokio::time::sleep_until(at) => Received::NoteDue,
            },
        }
    }
}

enum Received {
    Event(Option<Arc<Event>>),
    NoteDue,
}
