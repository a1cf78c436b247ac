//! The one codec for the resource quantities in Meridian's objects: the cluster controller
//! writes `Cluster.status.resourceSummary` with it and the scheduler reads it back with it,
//! both through `apimachinery::quantity` (Kubernetes notation: `500m`, `4Gi`, `1e3`).
//!
//! Amounts are unsigned: capacity and requests are never negative, so a negative quantity
//! is an error here rather than a number to clamp. Reading rounds up, as Kubernetes rounds
//! requests (`1500m` memory is 2 bytes): a request never shrinks.

use apimachinery::quantity::{self as q, parse_quantity};

/// Why a quantity string cannot be read as an amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a Kubernetes quantity.
    #[error("{input:?} is not a quantity")]
    Syntax {
        /// The text read.
        input: String,
        /// What the parser said.
        #[source]
        source: q::QuantityError,
    },
    /// Below zero.
    #[error("quantity {0:?} is negative")]
    Negative(String),
    /// Does not fit in 64 bits in the unit asked for.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

fn read(input: &str, scaled: fn(&q::Quantity) -> i128) -> Result<u64, QuantityError> {
    let parsed = parse_quantity(input).map_err(|source| QuantityError::Syntax {
        input: input.to_owned(),
        source,
    })?;
    let v = scaled(&parsed);
    if v < 0 {
        return Err(QuantityError::Negative(input.to_owned()));
    }
    u64::try_from(v).map_err(|_| QuantityError::TooLarge(input.to_owned()))
}

/// CPU in millicores, rounded up (`"1.5"` → 1500, `"1n"` → 1).
pub fn cpu_milli(input: &str) -> Result<u64, QuantityError> {
    read(input, q::Quantity::as_milli)
}

/// Bytes, or any count, in whole units rounded up (`"4Gi"` → 4 << 30, `"2200"` → 2200).
pub fn units(input: &str) -> Result<u64, QuantityError> {
    read(input, q::Quantity::as_value_ceil)
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Millicores as Kubernetes writes CPU: whole cores as `2`, otherwise `500m`.
pub fn format_cpu_milli(milli: u64) -> String {
    q::format_cpu_milli(clamp(milli))
}

/// Bytes with the largest exact binary suffix (`1Gi`, `1536Mi`), else a plain integer.
pub fn format_bytes(bytes: u64) -> String {
    q::format_bytes(clamp(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_table() {
        let cpu: &[(&str, u64)] = &[
            ("500m", 500),
            ("1", 1000),
            ("1.5", 1500),
            ("41500m", 41_500),
            ("160", 160_000),
            ("0.1", 100),
            (".5", 500),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("2e3", 2_000_000),
            ("1P", 1_000_000_000_000_000_000),
            ("1n", 1),
            ("+3", 3000),
        ];
        for (s, want) in cpu {
            assert_eq!(cpu_milli(s), Ok(*want), "{s}");
        }
        let unit: &[(&str, u64)] = &[
            ("4Gi", 4 << 30),
            ("640Gi", 640 << 30),
            ("1M", 1_000_000),
            ("2200", 2200),
            ("1500m", 2),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("123Mi", 123 * 1024 * 1024),
        ];
        for (s, want) in unit {
            assert_eq!(units(s), Ok(*want), "{s}");
        }
    }

    #[test]
    fn rejects_table() {
        for s in ["", "abc", "1Qi", "1..2", ".", "1e", " 1", "1K"] {
            assert!(
                matches!(cpu_milli(s), Err(QuantityError::Syntax { .. })),
                "{s}"
            );
        }
        assert_eq!(cpu_milli("-1"), Err(QuantityError::Negative("-1".into())));
        assert_eq!(units("-1Gi"), Err(QuantityError::Negative("-1Gi".into())));
        assert!(matches!(
            cpu_milli("99999999999999999999Ei"),
            Err(QuantityError::Syntax { .. } | QuantityError::TooLarge(_))
        ));
        assert_eq!(units("100E"), Err(QuantityError::TooLarge("100E".into())));
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        for milli in [0, 1, 250, 1000, 41_500, 7_910, 160_000, u64::from(u32::MAX)] {
            assert_eq!(cpu_milli(&format_cpu_milli(milli)), Ok(milli), "{milli}");
        }
        for bytes in [0, 1000, 1024, 1536, 3 << 10, 31 << 30, 640 << 30, 1 << 62] {
            assert_eq!(units(&format_bytes(bytes)), Ok(bytes), "{bytes}");
        }
    }
}
