//! Text forms Kubernetes' JSON uses for values protobuf carries as numbers or
//! bytes: base64, RFC 3339 timestamps and Go duration strings.

use super::ProtoError;

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding: Go's encoding/json form of `[]byte`.
pub(crate) fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Unix seconds of 0001-01-01T00:00:00Z, Go's zero `time.Time`, which
/// `metav1.Time` writes as JSON `null`.
const GO_ZERO_TIME: i64 = -62_135_596_800;
/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: RFC 3339 has four-digit years.
const MIN_SECONDS: i64 = -62_167_219_200;
const MAX_SECONDS: i64 = 253_402_300_799;

/// The JSON form of a `metav1.Time` (`micros: false`, whole seconds, which is
/// all Kubernetes keeps) or `metav1.MicroTime` (`micros: true`, six
/// fractional digits, truncated as Go's formatter does). Nanoseconds outside
/// 0..1e9 carry into the seconds, as Go's `time.Unix` does.
pub(crate) fn timestamp(
    seconds: i64,
    nanos: i32,
    micros: bool,
) -> Result<Option<String>, ProtoError> {
    let total = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    let seconds = i64::try_from(total.div_euclid(1_000_000_000))
        .map_err(|_| ProtoError::TimeOutOfRange { seconds })?;
    let nanos = if micros {
        total.rem_euclid(1_000_000_000) as u32
    } else {
        0
    };
    if seconds == GO_ZERO_TIME && nanos == 0 {
        return Ok(None);
    }
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
        return Err(ProtoError::TimeOutOfRange { seconds });
    }
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let secs = seconds.rem_euclid(86_400);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}");
    if micros {
        out.push_str(&format!(".{:06}", nanos / 1000));
    }
    out.push('Z');
    Ok(Some(out))
}

/// Proleptic Gregorian date of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Go's `time.Duration.String()`, the JSON form of `metav1.Duration`:
/// `1h0m0s`, `1.5s`, `250ms`, `0s`.
pub(crate) fn go_duration(nanos: i64) -> String {
    let mut u = nanos.unsigned_abs();
    let sign = if nanos < 0 { "-" } else { "" };
    if u == 0 {
        return "0s".to_owned();
    }
    if u < 1_000_000_000 {
        // Below a second Go switches to the largest unit that keeps an
        // integer part: ns, µs or ms.
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let frac = fraction(&mut u, prec);
        return format!("{sign}{u}{frac}{unit}");
    }
    let frac = fraction(&mut u, 9);
    let (h, m, s) = (u / 3600, u / 60 % 60, u % 60);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}{frac}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}{frac}s")
    } else {
        format!("{sign}{s}{frac}s")
    }
}

/// Splits off the last `prec` decimal digits of `u` as ".ddd" without
/// trailing zeros (empty when they are all zero), leaving the integer part.
fn fraction(u: &mut u64, prec: u32) -> String {
    let scale = 10u64.pow(prec);
    let frac = *u % scale;
    *u /= scale;
    if frac == 0 {
        return String::new();
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    format!(".{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff, 0xfe]), "+//+");
    }

    #[test]
    fn timestamps_format_as_rfc3339() {
        let t = |s, n, micro| timestamp(s, n, micro).unwrap();
        assert_eq!(t(0, 0, false).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            t(1_704_164_645, 999, false).as_deref(),
            Some("2024-01-02T03:04:05Z")
        );
        assert_eq!(
            t(1_704_164_645, 123_456_789, true).as_deref(),
            Some("2024-01-02T03:04:05.123456Z")
        );
        assert_eq!(
            t(951_782_400, 0, false).as_deref(),
            Some("2000-02-29T00:00:00Z")
        );
        assert_eq!(t(-1, 0, false).as_deref(), Some("1969-12-31T23:59:59Z"));
        // Negative nanoseconds borrow from the seconds.
        assert_eq!(
            t(1, -1000, true).as_deref(),
            Some("1970-01-01T00:00:00.999999Z")
        );
        assert_eq!(
            t(MAX_SECONDS, 0, false).as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(
            t(MIN_SECONDS, 0, false).as_deref(),
            Some("0000-01-01T00:00:00Z")
        );
        assert_eq!(t(GO_ZERO_TIME, 0, false), None);
        assert!(timestamp(MAX_SECONDS + 1, 0, false).is_err());
        assert!(timestamp(i64::MIN, i32::MIN, true).is_err());
    }

    #[test]
    fn durations_match_go() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1), "1ns");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(250_000_000), "250ms");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(90 * 1_000_000_000), "1m30s");
        assert_eq!(go_duration(3600 * 1_000_000_000), "1h0m0s");
        assert_eq!(go_duration(-61_000_000_001), "-1m1.000000001s");
        assert_eq!(go_duration(i64::MIN), "-2562047h47m16.854775808s");
    }
}
