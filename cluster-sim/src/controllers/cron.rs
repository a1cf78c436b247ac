//! Standard cron schedules as Kubernetes' CronJob controller reads them (robfig/cron's
//! standard parser): five fields `minute hour day-of-month month day-of-week` with `*`, `?`,
//! lists, ranges, steps and English month and day names, or the descriptors `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly`, evaluated in a
//! time zone. When both day fields are restricted a day matches either, as cron does.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Most days a search for the next run looks ahead (a `30 2 29 2 *` schedule runs only in
/// leap years; eight years cover every case but dates that never exist).
const SEARCH_DAYS: i32 = 8 * 366;

/// A parsed schedule: one bit per allowed value of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// The day-of-month field was `*` or `?` (possibly with a step).
    any_day: bool,
    /// The day-of-week field was `*` or `?` (possibly with a step).
    any_weekday: bool,
}

/// Why a schedule cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// Not five fields and not a known descriptor.
    #[error("expected exactly 5 fields or a descriptor such as @daily, found {0:?}")]
    Shape(String),
    /// A field has a value out of range or that cannot be read.
    #[error("bad {field} field {value:?}")]
    Field {
        /// Which field.
        field: &'static str,
        /// What it said.
        value: String,
    },
}

/// The range and names of one field.
struct Spec {
    field: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Spec = Spec {
    field: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Spec = Spec {
    field: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Spec = Spec {
    field: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Spec = Spec {
    field: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const WEEKDAY: Spec = Spec {
    field: "day-of-week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Spec {
    fn bad(&self, value: &str) -> CronError {
        CronError::Field {
            field: self.field,
            value: value.to_string(),
        }
    }

    fn value(&self, s: &str, whole: &str) -> Result<u32, CronError> {
        let lower = s.to_ascii_lowercase();
        let v = match self.names.iter().position(|n| *n == lower) {
            Some(i) => self.min + i as u32,
            None => s.parse().map_err(|_| self.bad(whole))?,
        };
        if v < self.min || v > self.max {
            return Err(self.bad(whole));
        }
        Ok(v)
    }

    /// The bits of a field, and whether it was `*`/`?`.
    fn parse(&self, field: &str) -> Result<(u64, bool), CronError> {
        let mut bits = 0u64;
        let mut star = false;
        for part in field.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s.parse().map_err(|_| self.bad(field))?;
                    if step == 0 {
                        return Err(self.bad(field));
                    }
                    (r, Some(step))
                }
                None => (part, None),
            };
            let (lo, hi) = if range == "*" || range == "?" {
                star = true;
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                (self.value(a, field)?, self.value(b, field)?)
            } else {
                let v = self.value(range, field)?;
                // `a/n` runs from `a` to the end of the range.
                (v, if step.is_some() { self.max } else { v })
            };
            if lo > hi {
                return Err(self.bad(field));
            }
            let step = step.unwrap_or(1);
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step;
            }
        }
        Ok((bits, star))
    }
}

impl Schedule {
    /// Parses a schedule.
    pub fn parse(s: &str) -> Result<Self, CronError> {
        let s = s.trim();
        let expanded = match s {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let &[minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(CronError::Shape(s.to_string()));
        };
        let (minutes, _) = MINUTE.parse(minute)?;
        let (hours, _) = HOUR.parse(hour)?;
        let (days, any_day) = DAY.parse(day)?;
        let (months, _) = MONTH.parse(month)?;
        let (weekdays, any_weekday) = WEEKDAY.parse(weekday)?;
        Ok(Self {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            any_day,
            any_weekday,
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.any_day || self.any_weekday {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first run strictly after `after`, in time zone `tz` (a wall-clock time a
    /// daylight-saving change skips runs at the same offset later, as jiff's compatible
    /// disambiguation places it).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(tz.clone()).date();
        for offset in 0..SEARCH_DAYS {
            let day = start.checked_add(offset.days()).ok()?;
            if !self.day_matches(day) {
                continue;
            }
            for hour in (0i8..24).filter(|h| self.hours & (1 << *h) != 0) {
                for minute in (0i8..60).filter(|m| self.minutes & (1 << *m) != 0) {
                    let at = day
                        .at(hour, minute, 0, 0)
                        .to_zoned(tz.clone())
                        .ok()?
                        .timestamp();
                    if at > after {
                        return Some(at);
                    }
                }
            }
        }
        None
    }

    /// The latest run in `(after, until]`, and how many runs that span holds (counting stops
    /// at `limit`, past which upstream gives up on a CronJob's missed runs).
    pub fn latest_between(
        &self,
        after: Timestamp,
        until: Timestamp,
        tz: &TimeZone,
        limit: usize,
    ) -> (Option<Timestamp>, usize) {
        let mut latest = None;
        let mut count = 0;
        let mut t = after;
        while let Some(next) = self.next_after(t, tz) {
            if next > until || count >= limit {
                break;
            }
            latest = Some(next);
            count += 1;
            t = next;
        }
        (latest, count)
    }
}

/// The time zone of a CronJob: `spec.timeZone` (an IANA name), else the controller's, which
/// for the simulation is UTC.
pub fn time_zone(name: Option<&str>) -> Result<TimeZone, CronError> {
    match name {
        None | Some("UTC" | "Etc/UTC") => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|_| CronError::Field {
            field: "timeZone",
            value: n.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn next_runs() {
        let utc = TimeZone::UTC;
        let cases = [
            // schedule, after, next
            (
                "*/15 * * * *",
                "2026-03-01T10:07:00Z",
                "2026-03-01T10:15:00Z",
            ),
            (
                "*/15 * * * *",
                "2026-03-01T10:15:00Z",
                "2026-03-01T10:30:00Z",
            ),
            ("0 3 * * *", "2026-03-01T10:00:00Z", "2026-03-02T03:00:00Z"),
            ("@hourly", "2026-03-01T10:00:30Z", "2026-03-01T11:00:00Z"),
            ("@daily", "2026-12-31T23:59:00Z", "2027-01-01T00:00:00Z"),
            ("@weekly", "2026-03-04T00:00:00Z", "2026-03-08T00:00:00Z"),
            ("@monthly", "2026-03-04T00:00:00Z", "2026-04-01T00:00:00Z"),
            ("@yearly", "2026-03-04T00:00:00Z", "2027-01-01T00:00:00Z"),
            (
                "30 9 * * mon-fri",
                "2026-03-06T10:00:00Z",
                "2026-03-09T09:30:00Z",
            ),
            (
                "0 0 1 jan,JUL *",
                "2026-03-01T00:00:00Z",
                "2026-07-01T00:00:00Z",
            ),
            (
                "5-10/5 * * * *",
                "2026-03-01T10:06:00Z",
                "2026-03-01T10:10:00Z",
            ),
            (
                "10/20 * * * *",
                "2026-03-01T10:31:00Z",
                "2026-03-01T10:50:00Z",
            ),
            // Both day fields restricted: either matches (the 13th, or a Friday).
            ("0 0 13 * 5", "2026-03-01T00:00:00Z", "2026-03-06T00:00:00Z"),
            // Day of week starred with a step: both must match.
            (
                "0 0 13 * */1",
                "2026-03-01T00:00:00Z",
                "2026-03-13T00:00:00Z",
            ),
            ("0 0 29 2 *", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"),
        ];
        for (schedule, after, want) in cases {
            let s = Schedule::parse(schedule).unwrap();
            assert_eq!(s.next_after(t(after), &utc), Some(t(want)), "{schedule}");
        }
    }

    #[test]
    fn time_zones() {
        let tz = time_zone(Some("Europe/Berlin")).unwrap();
        let s = Schedule::parse("0 3 * * *").unwrap();
        // 03:00 in Berlin is 02:00 UTC in winter.
        assert_eq!(
            s.next_after(t("2026-01-10T12:00:00Z"), &tz),
            Some(t("2026-01-11T02:00:00Z"))
        );
        assert!(time_zone(Some("Mars/Olympus")).is_err());
        assert!(time_zone(Some("Etc/UTC")).is_ok() && time_zone(None).is_ok());
    }

    #[test]
    fn bad_schedules() {
        for bad in [
            "every day",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "*/0 * * * *",
            "5-1 * * * *",
            "@every 1h",
            "* * * foo *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn latest_between_counts_missed_runs() {
        let s = Schedule::parse("*/10 * * * *").unwrap();
        let (latest, n) = s.latest_between(
            t("2026-03-01T10:00:00Z"),
            t("2026-03-01T10:35:00Z"),
            &TimeZone::UTC,
            100,
        );
        assert_eq!((latest, n), (Some(t("2026-03-01T10:30:00Z")), 3));
        let (none, zero) = s.latest_between(
            t("2026-03-01T10:00:00Z"),
            t("2026-03-01T10:09:59Z"),
            &TimeZone::UTC,
            100,
        );
        assert_eq!((none, zero), (None, 0));
    }
}
