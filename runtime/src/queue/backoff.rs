//! Exponential retry delays with a cap, optionally with full jitter.

use std::time::Duration;

/// How retry delays grow with consecutive failures of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay (and the shortest).
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Whether a delay is drawn uniformly between `base` and its ceiling, so many keys
    /// failing together (a member going away) do not retry in lockstep.
    pub jitter: bool,
}

impl Default for Backoff {
    /// 50 ms doubling up to a minute, without jitter.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(50),
            max: Duration::from_secs(60),
            jitter: false,
        }
    }
}

impl Backoff {
    /// `base` doubling per failure up to `max`, with full jitter.
    pub fn jittered(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            jitter: true,
        }
    }

    /// The delay ceiling before retry number `attempt` (1-based):
    /// `min(max, base * 2^(attempt-1))`, never below `base`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.base
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.max)
            .max(self.base)
    }

    /// The delay before retry number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        if !self.jitter {
            return ceiling;
        }
        let span = ceiling.saturating_sub(self.base);
        self.base + span.mul_f64(rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff::default();
        let ms = |n| b.delay(n).as_millis();
        assert_eq!((ms(1), ms(2), ms(3)), (50, 100, 200));
        assert_eq!(ms(100), 60_000);
        assert_eq!(ms(0), 50, "attempt 0 reads as the first");
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let b = Backoff::jittered(Duration::from_millis(500), Duration::from_secs(30));
        for (attempt, ceiling) in [(1, 500), (2, 1000), (3, 2000), (8, 30_000), (40, 30_000)] {
            for _ in 0..50 {
                let d = b.delay(attempt);
                assert!(
                    d >= b.base && d <= Duration::from_millis(ceiling),
                    "attempt {attempt}: {d:?}"
                );
            }
        }
    }
}
