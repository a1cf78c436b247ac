//! The eviction budget both placement loops share: a decision that takes replicas (or
//! copies) away from clusters offline beyond their toleration spends a token, so a wide
//! outage moves workloads, divided custom objects and copies at one rate, not each loop at
//! its own.

use std::sync::Mutex;
use std::time::Duration;

use meridian_runtime::rate::TokenBucket;
use meridian_runtime::sync::lock;

use super::metrics::Metrics;

/// The shared token bucket, and the counter of what it allowed and held back.
pub struct Evictions {
    bucket: Mutex<TokenBucket>,
    metrics: std::sync::Arc<Metrics>,
}

impl Evictions {
    /// A budget drawing on `bucket`.
    pub fn new(bucket: TokenBucket, metrics: std::sync::Arc<Metrics>) -> Self {
        Self {
            bucket: Mutex::new(bucket),
            metrics,
        }
    }

    /// Takes a token for a decision that evicts, or says how long until one is due; the
    /// caller then decides as if evictions were paused and comes back after that wait.
    pub fn admit(&self) -> Result<(), Duration> {
        let taken = lock(&self.bucket).try_take(tokio::time::Instant::now());
        self.metrics.eviction(if taken.is_ok() {
            "allowed"
        } else {
            "throttled"
        });
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_runtime::rate::Rate;

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_says_when_the_next_token_is_due() {
        let now = tokio::time::Instant::now();
        let rate = Rate::per_second(1.0);
        let e = Evictions::new(
            TokenBucket::new(rate, 1, now),
            std::sync::Arc::new(Metrics::new()),
        );
        assert_eq!(e.admit(), Ok(()));
        let wait = e.admit().expect_err("the one token is spent");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        tokio::time::advance(wait).await;
        assert_eq!(e.admit(), Ok(()));
    }
}
