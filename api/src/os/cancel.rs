//! Cancelling a long OS call from another thread.
//!
//! Why: an OS download can run for an hour, and everything else that writes the repository or
//! the sysroot waits for it (a pull and a stage must not interleave). A pre-stage download is
//! only a head start, so an update, a rollback or the drop of a stray staged deployment must not
//! queue behind it; and a pull whose client went away (an agent restarted, a call that timed
//! out) must not keep the helper's write lock for nobody, as `rpm-ostree cancel` stops a
//! transaction. What is cancelled depends on the side: the agent's client shuts its connection
//! to the helper, the helper kills the pull's worker process. This type knows neither:
//! it runs whatever each side registered, once. Pure `std`, so the agent does not link GLib.

use std::sync::{Arc, Mutex, PoisonError};

type Hook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    cancelled: bool,
    hooks: Vec<Hook>,
}

/// A cancellation shared by the caller and the call: clones are the same token.
#[derive(Clone, Default)]
pub struct Cancel(Arc<Mutex<State>>);

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl Cancel {
    /// A token nobody has cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancel: runs every hook registered so far (each once, on this thread), and any registered
    /// later at once. Cancelling twice does nothing more.
    pub fn cancel(&self) {
        let hooks = {
            let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            s.cancelled = true;
            std::mem::take(&mut s.hooks)
        };
        // Outside the lock: a hook may take time (a shutdown) or look at this token.
        for hook in hooks {
            hook();
        }
    }

    /// Whether [`Self::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).cancelled
    }

    /// Run `hook` when this token is cancelled, or now if it already is.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if s.cancelled {
            drop(s);
            hook();
        } else {
            s.hooks.push(Box::new(hook));
        }
    }

    /// Whether `self` and `other` are the same token.
    pub fn same(&self, other: &Cancel) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn hooks_run_once_when_cancelled_and_at_once_when_late() {
        let c = Cancel::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        c.on_cancel(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert!(!c.is_cancelled());
        assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing runs before the cancel");
        c.clone().cancel();
        assert!(c.is_cancelled(), "a clone cancels the same token");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        c.cancel();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "a second cancel runs nothing again");
        let r = runs.clone();
        c.on_cancel(move || {
            r.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 11, "a hook registered after the cancel runs at once");
    }

    #[test]
    fn a_hook_may_look_at_its_token() {
        let c = Cancel::new();
        let seen = Arc::new(Mutex::new(None));
        let (c2, s) = (c.clone(), seen.clone());
        c.on_cancel(move || *s.lock().unwrap() = Some(c2.is_cancelled()));
        c.cancel();
        assert_eq!(*seen.lock().unwrap(), Some(true));
        assert!(c.same(&c.clone()) && !c.same(&Cancel::new()));
    }
}
