//! Retry waits spread at random. Every agent of a fleet sees a coordinator go away (or answer
//! 429) at the same moment and, with the same back-off, came back at the same instants: 10,000
//! TLS handshakes and watches within a millisecond of each other, each retry round. A wait
//! stretched by a random part of itself (client-go's `wait.Jitter`) spreads each round over
//! half its length.

use std::hash::BuildHasher;
use std::time::Duration;

/// How much of a wait may be added to it at random.
const FACTOR: f64 = 0.5;

/// `d` plus a random part of it, up to [`FACTOR`]: in `[d, 1.5 d)`.
pub fn jittered(d: Duration) -> Duration {
    d + d.mul_f64(FACTOR * unit_random())
}

/// A number in `[0, 1)`. std's `RandomState` is seeded from the OS and keyed anew for each
/// instance: enough to spread waits, with no generator to carry around.
fn unit_random() -> f64 {
    let bits = std::collections::hash_map::RandomState::new().hash_one(0u8);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_within_half_again_and_differ() {
        let d = Duration::from_secs(10);
        let waits: Vec<Duration> = (0..200).map(|_| jittered(d)).collect();
        assert!(waits.iter().all(|w| *w >= d && *w < d.mul_f64(1.5)), "{waits:?}");
        let mut distinct = waits.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() > 150, "{} distinct of 200", distinct.len());
        // Spread over the range, not bunched at one end.
        let (low, high) = waits.iter().partition::<Vec<&Duration>, _>(|w| **w < d.mul_f64(1.25));
        assert!(low.len() > 40 && high.len() > 40, "{} low, {} high", low.len(), high.len());
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
