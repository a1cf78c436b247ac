//! Minimal RFC 3339 reader for condition timestamps, so the core needs no date crate.

use thiserror::Error;

/// Why a timestamp could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimeError {
    /// Not of the form `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
    #[error("timestamp {0:?} is not RFC 3339")]
    Malformed(String),
}

/// Seconds since the Unix epoch for an RFC 3339 timestamp (fractions truncated).
pub fn parse_rfc3339(s: &str) -> Result<i64, TimeError> {
    let bad = || TimeError::Malformed(s.to_owned());
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, TimeError> {
        let part = s.get(r).ok_or_else(bad)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse::<i64>().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let h = num_in(rest, 1..3).ok_or_else(bad)?;
            let m = num_in(rest, 4..6).ok_or_else(bad)?;
            let off = h * 3600 + m * 60;
            if rest.starts_with('-') { -off } else { off }
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(year, month, day);
    Ok(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

fn num_in(s: &str, r: std::ops::Range<usize>) -> Option<i64> {
    let part = s.get(r)?;
    part.bytes()
        .all(|c| c.is_ascii_digit())
        .then(|| part.parse().ok())?
}

/// Days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table() {
        let cases: &[(&str, i64)] = &[
            ("1970-01-01T00:00:00Z", 0),
            ("2000-03-01T00:00:00Z", 951_868_800),
            ("2024-02-29T12:34:56Z", 1_709_210_096),
            ("2024-02-29T12:34:56.789Z", 1_709_210_096),
            ("2024-02-29T14:34:56+02:00", 1_709_210_096),
            ("2024-02-29T10:04:56-02:30", 1_709_210_096),
        ];
        for (s, want) in cases {
            assert_eq!(parse_rfc3339(s).unwrap(), *want, "{s}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56",
            "2024-02-29T12:34:56.Z",
            "2024-02-29T1a:34:56Z",
        ] {
            assert!(parse_rfc3339(s).is_err(), "{s}");
        }
    }
}
