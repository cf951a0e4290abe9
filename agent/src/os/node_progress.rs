//! A long download's progress on the Node (`aloft.dev/progress`), for an update's pull and a
//! pre-stage alike: `aloftctl get nodes` and `kubectl get nodes` show it, where the agent's own
//! status is read only on the node.

use std::time::Duration;

/// The download's progress as the Node shows it ([`aloft_api::annotations::PROGRESS`]): written
/// once the download has run `every`, then every `every`, each write in the background (the
/// download goes on meanwhile, and a coordinator out of reach does not hold it up), and taken
/// off when the download ends. Each write waits for the one before, and the last is waited for
/// before the removal, so the Node never shows a progress after its download ended.
pub struct NodeProgress {
    every: Duration,
    next: Option<tokio::time::Instant>,
    written: Option<tokio::task::JoinHandle<()>>,
}

impl NodeProgress {
    pub fn new(every: Duration, started: tokio::time::Instant) -> Self {
        NodeProgress { every, next: (!every.is_zero()).then(|| started + every), written: None }
    }

    /// Whether a write is due at `now` (and none is still under way).
    /// The next is due `every` after the time this one was due (not after `now`): a caller that
    /// looks every `every` writes every time, not every other time. After a stall longer than
    /// that, `every` from now.
    pub fn due(&mut self, now: tokio::time::Instant) -> bool {
        let Some(t) = self.next else { return false };
        let due = now >= t && self.written.as_ref().is_none_or(|w| w.is_finished());
        if due {
            let next = t + self.every;
            self.next = Some(if next <= now { now + self.every } else { next });
        }
        due
    }

    pub fn write(&mut self, api: &crate::coordinator::NodeApi, text: String) {
        let api = api.clone();
        self.written = Some(tokio::spawn(async move {
            if let Err(e) = api.annotate(&[(aloft_api::annotations::PROGRESS, Some(&text))]).await {
                tracing::debug!(error = %format!("{e:#}"), "the download's progress did not reach the Node");
            }
        }));
    }

    /// Take the progress off the Node, if it was put there.
    pub async fn end(self, api: &crate::coordinator::NodeApi) {
        let Some(last) = self.written else { return };
        let _ = last.await;
        if let Err(e) = api.annotate(&[(aloft_api::annotations::PROGRESS, None)]).await {
            // The Done or failure report that follows takes it off too.
            tracing::debug!(error = %format!("{e:#}"), "the download's progress is still on the Node");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_due_every_period_from_the_first_and_never_with_a_period_of_zero() {
        let every = Duration::from_secs(30);
        let t0 = tokio::time::Instant::now();
        let mut p = NodeProgress::new(every, t0);
        assert!(!p.due(t0 + Duration::from_secs(29)), "not before the first period");
        assert!(p.due(t0 + Duration::from_secs(30)));
        assert!(!p.due(t0 + Duration::from_secs(31)), "not twice in a period");
        // Looked at a little late, every period: due every time.
        assert!(p.due(t0 + Duration::from_millis(60_050)));
        assert!(p.due(t0 + Duration::from_millis(90_010)));
        // A stall of several periods: one write, then the next a period later.
        assert!(p.due(t0 + Duration::from_secs(300)));
        assert!(!p.due(t0 + Duration::from_secs(329)));
        assert!(p.due(t0 + Duration::from_secs(330)));
        let mut never = NodeProgress::new(Duration::ZERO, t0);
        assert!(!never.due(t0 + Duration::from_secs(3600)));
    }
}
