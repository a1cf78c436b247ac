//! Kubernetes resource quantities (`500m`, `1.5Gi`, `1e3`) and their formatting.

use std::cmp::Ordering;
use std::fmt;

/// Errors from parsing a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The input is empty.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Empty,
    /// The input does not follow the quantity grammar.
    #[error("unable to parse quantity's suffix or number: {0:?}")]
    Invalid(String),
    /// The value is too large (or too precise) to represent.
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
}

/// How a quantity was written, which decides how it is re-rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Power-of-ten suffixes (`m`, `k`, `M`, ...) or none.
    DecimalSI,
    /// Power-of-two suffixes (`Ki`, `Mi`, ...).
    BinarySI,
    /// Scientific notation (`1e3`).
    DecimalExponent,
}

/// An exact quantity `num * 10^exp`, normalised so equal values compare equal.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    num: i128,
    exp: i32,
    format: Format,
}

/// Largest power of ten representable in i128.
const MAX_POW10: u32 = 38;

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// Rounds `num * 10^exp` to an integer away from zero, as upstream's
/// `RoundUp` does, so resource requests never round down to less than asked.
fn scaled_away_from_zero(num: i128, exp: i32) -> Option<i128> {
    if exp >= 0 {
        return num.checked_mul(pow10(exp.unsigned_abs())?);
    }
    let shift = exp.unsigned_abs();
    if shift > MAX_POW10 {
        return Some(num.signum());
    }
    let d = pow10(shift)?;
    let q = num / d;
    Some(if num % d == 0 { q } else { q + num.signum() })
}

/// Parses a Kubernetes quantity string.
pub fn parse_quantity(input: &str) -> Result<Quantity, QuantityError> {
    if input.is_empty() {
        return Err(QuantityError::Empty);
    }
    let invalid = || QuantityError::Invalid(input.to_string());
    let range = || QuantityError::OutOfRange(input.to_string());
    let bytes = input.as_bytes();
    let mut i = 0;
    let negative = match bytes[0] {
        b'-' => {
            i = 1;
            true
        }
        b'+' => {
            i = 1;
            false
        }
        _ => false,
    };
    let mut num: i128 = 0;
    let mut exp: i32 = 0;
    let mut digits = 0;
    let mut seen_dot = false;
    while i < bytes.len() {
        match bytes[i] {
            c @ b'0'..=b'9' => {
                digits += 1;
                // Leading zeros and trailing fractional zeros cost nothing; only
                // genuinely precise inputs can overflow.
                match num
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(i128::from(c - b'0')))
                {
                    Some(n) => {
                        num = n;
                        if seen_dot {
                            exp -= 1;
                        }
                    }
                    None if seen_dot => {} // drop excess precision below the mantissa
                    None => return Err(range()),
                }
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return Err(invalid());
    }
    let suffix = &input[i..];
    let format = match suffix {
        "" => Format::DecimalSI,
        "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => {
            exp += match suffix {
                "n" => -9,
                "u" => -6,
                "m" => -3,
                "k" => 3,
                "M" => 6,
                "G" => 9,
                "T" => 12,
                "P" => 15,
                _ => 18,
            };
            Format::DecimalSI
        }
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = match suffix {
                "Ki" => 10,
                "Mi" => 20,
                "Gi" => 30,
                "Ti" => 40,
                "Pi" => 50,
                _ => 60,
            };
            num = num.checked_mul(1i128 << power).ok_or_else(range)?;
            Format::BinarySI
        }
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| invalid())?;
            exp = exp.checked_add(e).ok_or_else(range)?;
            Format::DecimalExponent
        }
        _ => return Err(invalid()),
    };
    if negative {
        num = -num;
    }
    let q = Quantity::new(num, exp, format);
    // Reject values whose milli form cannot be represented, so accessors are total.
    if q.num != 0 && scaled_away_from_zero(q.num, q.exp.saturating_add(3)).is_none() {
        return Err(range());
    }
    Ok(q)
}

impl Quantity {
    fn new(mut num: i128, mut exp: i32, format: Format) -> Self {
        if num == 0 {
            exp = 0;
        }
        while num != 0 && num % 10 == 0 {
            num /= 10;
            exp += 1;
        }
        Quantity { num, exp, format }
    }

    /// A quantity from whole millis, rendered in decimal SI (CPU style).
    pub fn from_milli(milli: i64) -> Self {
        Quantity::new(i128::from(milli), -3, Format::DecimalSI)
    }

    /// A quantity from whole units in the given format (bytes use BinarySI).
    pub fn from_value(value: i64, format: Format) -> Self {
        Quantity::new(i128::from(value), 0, format)
    }

    /// The format the quantity was written in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// `ceil(value * 1000)` (away from zero), as upstream `MilliValue` for CPU.
    pub fn as_milli(&self) -> i128 {
        scaled_away_from_zero(self.num, self.exp.saturating_add(3)).unwrap_or(i128::MAX)
    }

    /// `ceil(value)` (away from zero), as upstream `Value` for bytes and counts.
    pub fn as_value_ceil(&self) -> i128 {
        scaled_away_from_zero(self.num, self.exp).unwrap_or(i128::MAX)
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.num == 0
    }

    /// Number of decimal digits of the mantissa's magnitude.
    fn magnitude(&self) -> i64 {
        let digits = self
            .num
            .unsigned_abs()
            .checked_ilog10()
            .map_or(0, |d| d + 1);
        i64::from(digits) + i64::from(self.exp)
    }

    fn cmp_abs(&self, other: &Self) -> Ordering {
        let (ma, mb) = (self.magnitude(), other.magnitude());
        if ma != mb {
            return ma.cmp(&mb);
        }
        // Same magnitude: rescale to the smaller exponent; both then have the
        // same digit count, so the rescaled mantissa fits.
        let (a, b) = (self.num.unsigned_abs(), other.num.unsigned_abs());
        let diff = self.exp.abs_diff(other.exp);
        let scale = 10u128.checked_pow(diff).unwrap_or(u128::MAX);
        if self.exp > other.exp {
            a.saturating_mul(scale).cmp(&b)
        } else {
            a.cmp(&b.saturating_mul(scale))
        }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        // Normalised (num, exp) is unique per value, whatever the format.
        self.num == other.num && self.exp == other.exp
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        match self.num.signum().cmp(&other.num.signum()) {
            Ordering::Equal if self.num == 0 => Ordering::Equal,
            Ordering::Equal if self.num > 0 => self.cmp_abs(other),
            Ordering::Equal => other.cmp_abs(self),
            o => o,
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_quantity(s)
    }
}

impl fmt::Display for Quantity {
    /// Canonical form: binary suffixes when written in binary and exact,
    /// otherwise the largest decimal suffix that keeps an integer mantissa.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num == 0 {
            return f.write_str("0");
        }
        if self.format == Format::BinarySI
            && self.exp >= 0
            && let Some(v) = scaled_away_from_zero(self.num, self.exp)
            && let Ok(v) = i64::try_from(v)
            && v.unsigned_abs() >= 1024
        {
            return f.write_str(&format_bytes(v));
        }
        // Below nano, upstream rounds up to the smallest representable unit.
        let (num, exp) = if self.exp < -9 {
            (
                scaled_away_from_zero(self.num, self.exp + 9).unwrap_or(0),
                -9,
            )
        } else {
            (self.num, self.exp)
        };
        let unit = (exp.div_euclid(3) * 3).min(18);
        let mantissa = num * pow10((exp - unit).unsigned_abs()).unwrap_or(1);
        if self.format == Format::DecimalExponent {
            return if unit == 0 {
                write!(f, "{mantissa}")
            } else {
                write!(f, "{mantissa}e{unit}")
            };
        }
        let suffix = match unit {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        };
        write!(f, "{mantissa}{suffix}")
    }
}

/// Renders CPU millis: whole cores as `2`, otherwise `500m`.
pub fn format_cpu_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Renders a byte count with the largest exact binary suffix (`1Gi`, `1536Mi`),
/// or as a plain integer when no suffix divides it.
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes != 0 {
        let b = i128::from(bytes);
        for (suffix, shift) in SUFFIXES {
            let unit = 1i128 << shift;
            if b % unit == 0 {
                return format!("{}{suffix}", b / unit);
            }
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_table() {
        // (input, milli, value_ceil, canonical)
        let cases: &[(&str, i128, i128, &str)] = &[
            ("0", 0, 0, "0"),
            ("1", 1000, 1, "1"),
            ("100m", 100, 1, "100m"),
            ("0.5", 500, 1, "500m"),
            (".5", 500, 1, "500m"),
            ("5.", 5000, 5, "5"),
            ("1.5", 1500, 2, "1500m"),
            ("250m", 250, 1, "250m"),
            ("1000m", 1000, 1, "1"),
            ("1k", 1_000_000, 1000, "1k"),
            ("1M", 1_000_000_000, 1_000_000, "1M"),
            ("1G", 1_000_000_000_000, 1_000_000_000, "1G"),
            ("1T", 10i128.pow(15), 10i128.pow(12), "1T"),
            ("1P", 10i128.pow(18), 10i128.pow(15), "1P"),
            ("1E", 10i128.pow(21), 10i128.pow(18), "1E"),
            ("1Ki", 1_024_000, 1024, "1Ki"),
            ("1Mi", 1_048_576_000, 1_048_576, "1Mi"),
            ("1.5Gi", 1_610_612_736_000, 1_610_612_736, "1536Mi"),
            (
                "1Ei",
                1_152_921_504_606_846_976_000,
                1_152_921_504_606_846_976,
                "1Ei",
            ),
            ("128974848", 128_974_848_000, 128_974_848, "128974848"),
            ("129e6", 129_000_000_000, 129_000_000, "129e6"),
            ("1e3", 1_000_000, 1000, "1e3"),
            ("1E3", 1_000_000, 1000, "1e3"),
            ("1e-3", 1, 1, "1e-3"),
            ("100u", 1, 1, "100u"),
            ("1n", 1, 1, "1n"),
            ("-1", -1000, -1, "-1"),
            ("-100m", -100, -1, "-100m"),
            ("+2", 2000, 2, "2"),
            ("0.0001", 1, 1, "100u"),
            ("1.0", 1000, 1, "1"),
            ("007", 7000, 7, "7"),
        ];
        for &(input, milli, value, canonical) in cases {
            let q = parse_quantity(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.as_milli(), milli, "{input} milli");
            assert_eq!(q.as_value_ceil(), value, "{input} value");
            assert_eq!(q.to_string(), canonical, "{input} canonical");
        }
    }

    #[test]
    fn parse_errors_table() {
        for input in [
            "", "a", "1K", "1Kb", "1 ", " 1", "1.2.3", "--1", "1e", "1ee3", "m", "1mi", "1.5Gi5",
            "1e3.5", "1Z", ".", "1e+-3",
        ] {
            assert!(parse_quantity(input).is_err(), "{input:?}");
        }
        assert!(matches!(
            parse_quantity("1e40"),
            Err(QuantityError::OutOfRange(_))
        ));
    }

    #[test]
    fn ordering_and_equality() {
        let q = |s| parse_quantity(s).unwrap();
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(q("0.5"), q("500m"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("100m") < q("1"));
        assert!(q("-1") < q("0"));
        assert!(q("-2") < q("-1"));
        assert!(q("999m") < q("1"));
        assert!(q("1e-9") > q("0"));
    }

    #[test]
    fn format_helpers_table() {
        for (milli, want) in [
            (500, "500m"),
            (2000, "2"),
            (0, "0"),
            (1500, "1500m"),
            (-250, "-250m"),
        ] {
            assert_eq!(format_cpu_milli(milli), want);
        }
        for (bytes, want) in [
            (0, "0"),
            (1000, "1000"),
            (1024, "1Ki"),
            (1_048_576, "1Mi"),
            (1_073_741_824, "1Gi"),
            (1_610_612_736, "1536Mi"),
            (1_099_511_627_776, "1Ti"),
            (1_536, "1536"),
            (3_072, "3Ki"),
            (-2048, "-2Ki"),
        ] {
            assert_eq!(format_bytes(bytes), want, "{bytes}");
        }
    }

    proptest! {
        #[test]
        fn cpu_format_roundtrips(milli in -10_000_000i64..10_000_000) {
            let q = parse_quantity(&format_cpu_milli(milli)).unwrap();
            prop_assert_eq!(q.as_milli(), i128::from(milli));
        }

        #[test]
        fn bytes_format_roundtrips(bytes in any::<i64>()) {
            let q = parse_quantity(&format_bytes(bytes)).unwrap();
            prop_assert_eq!(q.as_value_ceil(), i128::from(bytes));
        }

        #[test]
        fn display_roundtrips(n in -1_000_000_000i64..1_000_000_000, s in 0usize..4) {
            let suffix = ["", "m", "Ki", "k"][s];
            let q = parse_quantity(&format!("{n}{suffix}")).unwrap();
            let again = parse_quantity(&q.to_string()).unwrap();
            prop_assert_eq!(again, q);
        }

        #[test]
        fn ordering_matches_milli(a in -1_000_000i64..1_000_000, b in -1_000_000i64..1_000_000) {
            let (qa, qb) = (Quantity::from_milli(a), Quantity::from_milli(b));
            prop_assert_eq!(qa.cmp(&qb), a.cmp(&b));
        }
    }
}
