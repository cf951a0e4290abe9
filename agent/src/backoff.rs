//! Retry waits spread at random: the client's (a 429's wait and the agent's own retries draw
//! from the same spread).

pub use aloft_client::backoff::jittered;
