//! Exponential backoff with full jitter, for retries of our own writes.

use std::time::Duration;

/// The delay before retry number `attempt` (1-based): a uniformly random duration
/// between `base` and `min(max, base * 2^(attempt-1))`, so many members failing
/// together do not retry in lockstep.
pub fn delay(attempt: u32, base: Duration, max: Duration) -> Duration {
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
        .min(max)
        .max(base);
    let span = ceiling.saturating_sub(base);
    base + span.mul_f64(rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_bounds() {
        let base = Duration::from_millis(500);
        let max = Duration::from_secs(30);
        for (attempt, ceiling) in [(1, 500), (2, 1000), (3, 2000), (8, 30_000), (40, 30_000)] {
            for _ in 0..50 {
                let d = delay(attempt, base, max);
                assert!(
                    d >= base && d <= Duration::from_millis(ceiling),
                    "attempt {attempt}: {d:?}"
                );
            }
        }
    }
}
