//! Tiny parser for Kubernetes resource quantities ("500m", "4Gi", "1.5", "2e3"), enough for capacity math.
//!
//! Kept private and small on purpose: the scheduler only needs milli-CPU, bytes and pod
//! counts, rounded up the way Kubernetes rounds requests (a request never shrinks).

use thiserror::Error;

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// The string was empty.
    #[error("empty quantity")]
    Empty,
    /// The number part was missing or malformed.
    #[error("quantity {0:?} has no valid number")]
    BadNumber(String),
    /// The suffix is not one Kubernetes knows.
    #[error("quantity {0:?} has an unknown suffix")]
    BadSuffix(String),
    /// Negative quantities make no sense for capacity.
    #[error("quantity {0:?} is negative")]
    Negative(String),
    /// The value does not fit in 64 bits after scaling.
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// Parses `s` and returns its value times 1000, rounded up (milli-units).
pub fn parse_milli(s: &str) -> Result<u64, QuantityError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    if s.starts_with('-') {
        return Err(QuantityError::Negative(s.to_owned()));
    }
    let body = s.strip_prefix('+').unwrap_or(s);
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    let overflow = || QuantityError::Overflow(s.to_owned());

    // The number as an integer mantissa and a count of fraction digits.
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(QuantityError::BadNumber(s.to_owned()));
    }
    let mut mantissa: u128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(b - b'0')))
            .ok_or_else(overflow)?;
    }
    // value = mantissa * num_scale / den_scale
    let mut num_scale: u128 = 1000;
    let mut den_scale: u128 = 10u128
        .checked_pow(u32::try_from(frac_part.len()).map_err(|_| overflow())?)
        .ok_or_else(overflow)?;

    match suffix {
        "" => {}
        "n" => den_scale = den_scale.checked_mul(1_000_000_000).ok_or_else(overflow)?,
        "u" => den_scale = den_scale.checked_mul(1_000_000).ok_or_else(overflow)?,
        "m" => den_scale = den_scale.checked_mul(1000).ok_or_else(overflow)?,
        "k" => num_scale *= 1000,
        "M" => num_scale *= 1000u128.pow(2),
        "G" => num_scale *= 1000u128.pow(3),
        "T" => num_scale *= 1000u128.pow(4),
        "P" => num_scale *= 1000u128.pow(5),
        "E" => num_scale *= 1000u128.pow(6),
        "Ki" => num_scale <<= 10,
        "Mi" => num_scale <<= 20,
        "Gi" => num_scale <<= 30,
        "Ti" => num_scale <<= 40,
        "Pi" => num_scale <<= 50,
        "Ei" => num_scale <<= 60,
        exp if exp.starts_with(['e', 'E']) && exp.len() > 1 => {
            let digits = &exp[1..];
            let (neg, digits) = match digits.as_bytes()[0] {
                b'-' => (true, &digits[1..]),
                b'+' => (false, &digits[1..]),
                _ => (false, digits),
            };
            let e: u32 = digits
                .parse()
                .map_err(|_| QuantityError::BadSuffix(s.to_owned()))?;
            let p = 10u128.checked_pow(e).ok_or_else(overflow)?;
            if neg {
                den_scale = den_scale.checked_mul(p).ok_or_else(overflow)?;
            } else {
                num_scale = num_scale.checked_mul(p).ok_or_else(overflow)?;
            }
        }
        _ => return Err(QuantityError::BadSuffix(s.to_owned())),
    }
    let numerator = mantissa.checked_mul(num_scale).ok_or_else(overflow)?;
    let value = numerator.div_ceil(den_scale);
    u64::try_from(value).map_err(|_| overflow())
}

/// CPU in milli-cores, rounded up.
pub fn parse_cpu_milli(s: &str) -> Result<u64, QuantityError> {
    parse_milli(s)
}

/// Memory (or any count) in whole units, rounded up.
pub fn parse_units(s: &str) -> Result<u64, QuantityError> {
    Ok(parse_milli(s)?.div_ceil(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table() {
        let cases: &[(&str, u64)] = &[
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
        for (s, want) in cases {
            assert_eq!(parse_milli(s).unwrap(), *want, "{s}");
        }
    }

    #[test]
    fn units_round_up() {
        assert_eq!(parse_units("4Gi").unwrap(), 4 << 30);
        assert_eq!(parse_units("640Gi").unwrap(), 640 << 30);
        assert_eq!(parse_units("1M").unwrap(), 1_000_000);
        assert_eq!(parse_units("2200").unwrap(), 2200);
        assert_eq!(parse_units("1500m").unwrap(), 2);
        assert_eq!(parse_units("128974848").unwrap(), 128_974_848);
        assert_eq!(parse_units("129e6").unwrap(), 129_000_000);
        assert_eq!(parse_units("123Mi").unwrap(), 123 * 1024 * 1024);
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "-1",
            "abc",
            "1Qi",
            "1..2",
            ".",
            "1e",
            "99999999999999999999Ei",
        ] {
            assert!(parse_milli(s).is_err(), "{s} should fail");
        }
    }
}
