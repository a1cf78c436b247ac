//! Flag helpers for the binaries' clap parsers: durations like `500ms`, listen addresses
//! that can be switched off, and [`FlagErrors`], which gathers every bad flag so a user
//! fixes them in one go rather than one per run.

use std::net::{AddrParseError, SocketAddr};
use std::time::Duration;

/// Every problem found in a command line, one line each.
#[derive(Debug, Default, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid flags:\n  {}", .0.join("\n  "))]
pub struct FlagErrors(pub Vec<String>);

impl FlagErrors {
    /// No problem yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes a problem; it should name the flag (`--workers 0 must be in 1..=1024`).
    pub fn push(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }

    /// Whether nothing was noted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(value())` when nothing was noted, else every problem.
    pub fn finish<T>(self, value: impl FnOnce() -> T) -> Result<T, Self> {
        if self.is_empty() {
            Ok(value())
        } else {
            Err(self)
        }
    }
}

/// Why a duration flag could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// No number where one was expected.
    #[error("{0:?} is not a duration like 500ms, 10s, 5m")]
    Malformed(String),
    /// A unit other than `ms`, `s`, `m`, `h`.
    #[error("{input:?}: unknown unit {unit:?} (ms, s, m, h)")]
    Unit {
        /// The flag's value.
        input: String,
        /// The unit found.
        unit: String,
    },
    /// Too large to represent.
    #[error("{0:?} is too long a duration")]
    Overflow(String),
}

/// Parses `500ms`, `10s`, `1.5s`, `5m`, `1h`; a bare number is seconds. Usable as a clap
/// `value_parser`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| DurationError::Malformed(s.to_string()))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(DurationError::Unit {
                input: s.to_string(),
                unit: unit.to_string(),
            });
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| DurationError::Overflow(s.to_string()))
}

/// A listen address flag: `off`, empty or `0` turn the listener off.
pub fn bind_address(s: &str) -> Result<Option<SocketAddr>, AddrParseError> {
    match s.trim() {
        "off" | "" | "0" => Ok(None),
        a => a.parse().map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (s, ms) in [
            ("500ms", 500),
            ("10s", 10_000),
            ("3", 3000),
            ("1.5s", 1500),
            (" 2s ", 2000),
            ("5m", 300_000),
            ("1h", 3_600_000),
        ] {
            assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
        }
        for bad in ["", "s", "10x", "-1s", "1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            parse_duration("10x"),
            Err(DurationError::Unit { unit, .. }) if unit == "x"
        ));
        assert!(matches!(
            parse_duration("1e400"),
            Err(DurationError::Unit { .. } | DurationError::Overflow(_))
        ));
    }

    #[test]
    fn addresses_and_gathered_errors() {
        assert_eq!(bind_address("off"), Ok(None));
        assert_eq!(bind_address(""), Ok(None));
        assert_eq!(
            bind_address("127.0.0.1:8080"),
            Ok(Some("127.0.0.1:8080".parse().expect("addr")))
        );
        assert!(bind_address("nope").is_err());

        let mut errors = FlagErrors::new();
        assert_eq!(errors.clone().finish(|| 1), Ok(1));
        errors.push("--a must be positive");
        errors.push("--b is not an address");
        let err = errors.finish(|| 1).expect_err("two problems");
        assert_eq!(
            err.to_string(),
            "invalid flags:\n  --a must be positive\n  --b is not an address"
        );
    }
}
