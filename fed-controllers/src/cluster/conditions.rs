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
