//! Rate limiting: a rate such as `100/s` and the token bucket that enforces it (evictions
//! and Events are limited this way).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;

/// Why a rate could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RateError {
    /// Not `N/s`, `N/m`, `N/h` or a bare `N` (per second) with `N > 0`.
    #[error("{0:?} is not a rate like 100/s, 30/m or 2/h")]
    Malformed(String),
}

/// Events per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    per_second: f64,
}

impl Rate {
    /// A rate of `n` per second.
    pub fn per_second(n: f64) -> Self {
        Self { per_second: n }
    }

    /// Events per second.
    pub fn as_per_second(self) -> f64 {
        self.per_second
    }
}

impl FromStr for Rate {
    type Err = RateError;
    fn from_str(s: &str) -> Result<Self, RateError> {
        let bad = || RateError::Malformed(s.to_owned());
        let (n, unit) = s.trim().split_once('/').unwrap_or((s.trim(), "s"));
        let n: f64 = n.trim().parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        if !n.is_finite() || n <= 0.0 {
            return Err(bad());
        }
        Ok(Self {
            per_second: n / secs,
        })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.per_second)
    }
}

/// A token bucket: `burst` tokens at most, refilled at `rate`; one token per action.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate: rate.per_second,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes a token, or says how long until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.rate;
            // Round up to a millisecond so the retry never arrives a hair too early.
            Err(Duration::from_millis((wait * 1000.0).ceil() as u64).max(Duration::from_millis(1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates() {
        for (s, per_s) in [
            ("100/s", 100.0),
            ("30/m", 0.5),
            ("7200/h", 2.0),
            ("5", 5.0),
            (" 2 / s ", 2.0),
        ] {
            assert_eq!(s.parse::<Rate>(), Ok(Rate::per_second(per_s)), "{s}");
        }
        for s in ["", "/s", "0/s", "-1/s", "10/d", "x/s", "inf/s"] {
            assert!(s.parse::<Rate>().is_err(), "{s}");
        }
    }

    #[test]
    fn bucket_allows_burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate::per_second(10.0), 3, t0);
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        assert_eq!(b.try_take(t0), Err(Duration::from_millis(100)));
        // 50 ms later half a token has accrued: 50 ms more to wait.
        let t1 = t0 + Duration::from_millis(50);
        assert_eq!(b.try_take(t1), Err(Duration::from_millis(50)));
        let t2 = t0 + Duration::from_millis(100);
        assert_eq!(b.try_take(t2), Ok(()));
        // A long pause refills only up to the burst.
        let t3 = t2 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.try_take(t3), Ok(()));
        }
        assert!(b.try_take(t3).is_err());
    }
}
