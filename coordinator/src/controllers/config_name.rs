//! Rendered config names as the controllers hold them: interned, so that two names are equal
//! exactly when they share one allocation.
//!
//! Why: a node controller pass asks of every node of the fleet whether it is on its pool's
//! target, whether it is moving, whether it runs what its neighbour runs. Names are ~80 bytes
//! (`rendered-worker-` and a SHA-256) and the equal ones, the common case, had to be compared to
//! the last byte: at 10,000 nodes those comparisons were a quarter of the controllers' thread.
//! Interned, each is a pointer comparison.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

/// Past this many names, the next new one first drops those no [`ConfigName`] holds any more
/// (rendered configs come and go with every change of a pool's MachineConfigs).
const PRUNE_AT: usize = 4096;

static NAMES: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Default::default);

/// An interned rendered config name (or the empty name: none).
#[derive(Clone)]
pub struct ConfigName(Arc<str>);

impl ConfigName {
    /// The one shared allocation for `name`: looked up under a lock, once per name a node
    /// event carries, so that the comparisons of every pass after it are free.
    pub fn new(name: &str) -> Self {
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.get(name) {
            return ConfigName(n.clone());
        }
        if names.len() >= PRUNE_AT {
            // Only the set holds these: no live name can be equal to one made again later.
            names.retain(|n| Arc::strong_count(n) > 1);
        }
        let n: Arc<str> = Arc::from(name);
        names.insert(n.clone());
        ConfigName(n)
    }

    /// The name as text, for messages, writes and lookups by name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A number equal for equal names and different for different ones, for as long as both are
    /// held (names are interned: this is the shared copy's address). Eight bytes to compare
    /// without following a pointer, for tables that must stay small (see `pools::NodeHot`).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as *const u8 as usize
    }
}

impl Default for ConfigName {
    fn default() -> Self {
        ConfigName::new("")
    }
}

impl PartialEq for ConfigName {
    /// One allocation per distinct name (see [`ConfigName::new`]): equal names are the same one.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ConfigName {}

impl PartialEq<str> for ConfigName {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for ConfigName {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl std::ops::Deref for ConfigName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ConfigName {
    fn from(s: &str) -> Self {
        ConfigName::new(s)
    }
}

impl From<String> for ConfigName {
    fn from(s: String) -> Self {
        ConfigName::new(&s)
    }
}

impl std::fmt::Display for ConfigName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for ConfigName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_are_one_allocation_and_compare_equal() {
        let a = ConfigName::new("rendered-worker-0123");
        let b = ConfigName::from(String::from("rendered-worker-0123"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, b);
        assert_ne!(a, ConfigName::new("rendered-worker-0124"));
        assert_eq!(a, "rendered-worker-0123");
        assert_eq!(ConfigName::default(), ConfigName::new(""));
        assert!(ConfigName::default().is_empty());
    }

    #[test]
    fn names_no_one_holds_are_dropped_and_made_again_equal() {
        let kept = ConfigName::new("rendered-kept");
        for i in 0..PRUNE_AT + 10 {
            let _ = ConfigName::new(&format!("rendered-gone-{i}"));
        }
        // The set was pruned on the way (it holds no more than the live names and the new).
        assert!(NAMES.lock().unwrap().len() < PRUNE_AT + 10);
        assert_eq!(kept, ConfigName::new("rendered-kept"), "a held name survives the pruning");
        let again = ConfigName::new("rendered-gone-1");
        assert_eq!(again, ConfigName::new("rendered-gone-1"));
    }
}
