//! Kubernetes-style conditions: set one in a list while keeping transition times honest.

use fed_api::common::Condition;
use jiff::Timestamp;

/// The member answers its health probes.
pub const READY: &str = "Ready";
/// The member has failed enough consecutive probes to be treated as gone.
pub const OFFLINE: &str = "Offline";

/// `True`, as conditions spell it.
pub const TRUE: &str = "True";
/// `False`, as conditions spell it.
pub const FALSE: &str = "False";
/// `Unknown`, as conditions spell it.
pub const UNKNOWN: &str = "Unknown";

/// Renders a timestamp the way `metav1.Time` does: RFC 3339 in UTC, whole seconds.
pub fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Puts `new` into `conditions` (replacing the one of the same type) and says whether
/// anything changed.
///
/// `lastTransitionTime` moves to `now` only when `status` changes (or the condition is
/// new): consumers such as failover timers measure "Offline for how long" from it, so a
/// reason or message update must not reset it. `lastProbeTime` comes from `new`, or is
/// kept when `new` has none.
pub fn set(conditions: &mut Vec<Condition>, mut new: Condition, now: Timestamp) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            new.last_transition_time =
                if old.status == new.status && old.last_transition_time.is_some() {
                    old.last_transition_time.clone()
                } else {
                    Some(format_time(now))
                };
            if new.last_probe_time.is_none() {
                new.last_probe_time = old.last_probe_time.clone();
            }
            if *old == new {
                return false;
            }
            *old = new;
            true
        }
        None => {
            new.last_transition_time = Some(format_time(now));
            conditions.push(new);
            true
        }
    }
}

/// Whether `new` should carry its fresh `lastProbeTime` rather than the one `old` (the
/// condition last set) holds: only when the condition otherwise changes (status, reason or
/// message), when `old` has no readable probe time, or when that time is `report_period` old
/// (or ahead of `now`: a clock moved back). Liveness lives in the member's Lease
/// ([`super::lease`]); moving the probe time at every probe would rewrite the whole Cluster
/// status, and send it to every Cluster watcher, at every probe.
pub fn probe_time_due(
    old: Option<&Condition>,
    new: &Condition,
    now: Timestamp,
    report_period: std::time::Duration,
) -> bool {
    let Some(old) = old else {
        return true;
    };
    if old.status != new.status || old.reason != new.reason || old.message != new.message {
        return true;
    }
    let Some(last) = old
        .last_probe_time
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
    else {
        return true;
    };
    let age = now.duration_since(last);
    age.is_negative() || age.unsigned_abs() >= report_period
}

/// The condition of the given type, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(status: &str, reason: &str, probe: Option<&str>) -> Condition {
        Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_probe_time: probe.map(str::to_string),
            last_transition_time: None,
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("valid timestamp")
    }

    #[test]
    fn transition_times_move_only_on_status_change() {
        // (previous status, new status, new reason, expect changed, expect transition moved)
        let cases = [
            ("True", "True", "ProbeSucceeded", false, false),
            ("True", "True", "Other", true, false),
            ("True", "False", "Timeout", true, true),
            ("False", "Unknown", "Probing", true, true),
        ];
        for (prev, next, reason, changed, moved) in cases {
            let mut list = Vec::new();
            assert!(set(&mut list, cond(prev, "ProbeSucceeded", None), at(0)));
            let got = set(&mut list, cond(next, reason, None), at(60));
            assert_eq!(got, changed, "{prev}->{next} {reason}");
            let expected = if moved {
                format_time(at(60))
            } else {
                format_time(at(0))
            };
            assert_eq!(
                list[0].last_transition_time.as_deref(),
                Some(expected.as_str())
            );
            assert_eq!(list.len(), 1);
        }
    }

    #[test]
    fn probe_time_updates_without_transition() {
        let mut list = Vec::new();
        set(
            &mut list,
            cond("True", "ProbeSucceeded", Some("2025-01-01T00:00:00Z")),
            at(0),
        );
        assert!(set(
            &mut list,
            cond("True", "ProbeSucceeded", Some("2025-01-01T00:00:10Z")),
            at(10)
        ));
        assert_eq!(
            list[0].last_probe_time.as_deref(),
            Some("2025-01-01T00:00:10Z")
        );
        assert_eq!(list[0].last_transition_time, Some(format_time(at(0))));
        // No probe time given: the old one stays, nothing changed.
        assert!(!set(
            &mut list,
            cond("True", "ProbeSucceeded", None),
            at(20)
        ));
        assert_eq!(
            list[0].last_probe_time.as_deref(),
            Some("2025-01-01T00:00:10Z")
        );
    }

    #[test]
    fn probe_time_moves_on_change_or_after_the_report_period() {
        let period = std::time::Duration::from_secs(300);
        let written = |probe: Option<&str>| {
            let mut c = cond("True", "ProbeSucceeded", probe);
            c.message = "ok".into();
            c
        };
        let fresh = |status: &str, reason: &str, message: &str| {
            let mut c = cond(status, reason, Some(&format_time(at(0))));
            c.message = message.into();
            c
        };
        let old = written(Some(&format_time(at(-60))));
        // (case, old, new, now, due)
        let cases = [
            (
                "no condition yet",
                None,
                fresh("True", "ProbeSucceeded", "ok"),
                at(0),
                true,
            ),
            (
                "unchanged, recent",
                Some(&old),
                fresh("True", "ProbeSucceeded", "ok"),
                at(0),
                false,
            ),
            (
                "unchanged, just under the period",
                Some(&old),
                fresh("True", "ProbeSucceeded", "ok"),
                at(239),
                false,
            ),
            (
                "unchanged, period reached",
                Some(&old),
                fresh("True", "ProbeSucceeded", "ok"),
                at(240),
                true,
            ),
            (
                "status changed",
                Some(&old),
                fresh("False", "ProbeSucceeded", "ok"),
                at(0),
                true,
            ),
            (
                "reason changed",
                Some(&old),
                fresh("True", "Other", "ok"),
                at(0),
                true,
            ),
            (
                "message changed",
                Some(&old),
                fresh("True", "ProbeSucceeded", "1 of 3"),
                at(0),
                true,
            ),
            (
                "clock moved back",
                Some(&old),
                fresh("True", "ProbeSucceeded", "ok"),
                at(-120),
                true,
            ),
        ];
        for (name, old, new, now, due) in cases {
            assert_eq!(probe_time_due(old, &new, now, period), due, "{name}");
        }
        let unreadable = [written(None), written(Some("yesterday"))];
        for old in &unreadable {
            let new = fresh("True", "ProbeSucceeded", "ok");
            assert!(probe_time_due(Some(old), &new, at(0), period), "{old:?}");
        }
    }

    #[test]
    fn other_condition_types_are_kept() {
        let mut list = vec![Condition {
            type_: "Custom".into(),
            status: TRUE.into(),
            ..Default::default()
        }];
        set(&mut list, cond("True", "ProbeSucceeded", None), at(0));
        assert_eq!(list.len(), 2);
        assert_eq!(
            find(&list, "Custom").map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn formats_like_metav1_time() {
        assert_eq!(
            format_time(Timestamp::from_second(0).expect("epoch")),
            "1970-01-01T00:00:00Z"
        );
    }
}
