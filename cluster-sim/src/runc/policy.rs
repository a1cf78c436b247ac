//! The kubelet's timing rules as pure functions: probe thresholds and schedule, restart
//! policy and crash-loop back-off.

use std::time::Duration;

use serde_json::Value;

/// First restart back-off (the kubelet's 10s).
pub(crate) const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// Longest restart back-off (the kubelet's 5 minutes).
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How long the kubelet waits before the `restarts`-th restart (1-based): 10s doubling up to
/// 5 minutes.
pub(crate) fn backoff(restarts: u32) -> Duration {
    let shift = restarts.saturating_sub(1).min(16);
    BACKOFF_INITIAL.saturating_mul(1 << shift).min(BACKOFF_MAX)
}

/// Whether a container that exited with `exit_code` is started again under `policy`.
pub(crate) fn restarts(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// The restart policy of an init container in a pod with `pod_policy`: it must complete, so
/// `Always` restarts it only on failure, as the kubelet does.
pub(crate) fn init_restart_policy(pod_policy: &str) -> &str {
    match pod_policy {
        "Never" => "Never",
        _ => "OnFailure",
    }
}

/// The `reason` of a terminated container.
pub(crate) fn exit_reason(exit_code: i32) -> &'static str {
    if exit_code == 0 { "Completed" } else { "Error" }
}

/// What a probe checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// `httpGet`: success is a status in 200..400.
    Http {
        /// Over TLS (not verified, as the kubelet does).
        https: bool,
        /// Host (default: the pod IP).
        host: Option<String>,
        /// Port number (named ports resolved).
        port: u16,
        /// Path.
        path: String,
    },
    /// `tcpSocket`: success is a connection.
    Tcp {
        /// Host (default: the pod IP).
        host: Option<String>,
        /// Port.
        port: u16,
    },
    /// `exec`: success is exit code 0, run in the container.
    Exec(Vec<String>),
}

/// A probe's spec with the API's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    /// What to check.
    pub(crate) check: Check,
    /// Wait after the container starts.
    pub(crate) initial_delay: Duration,
    /// Between checks.
    pub(crate) period: Duration,
    /// Per check.
    pub(crate) timeout: Duration,
    /// Consecutive successes to pass.
    pub(crate) success_threshold: u32,
    /// Consecutive failures to fail.
    pub(crate) failure_threshold: u32,
}

fn secs(v: &Value, field: &str, default: u64) -> u64 {
    v.get(field)
        .and_then(Value::as_u64)
        .filter(|s| *s > 0 || field == "initialDelaySeconds")
        .unwrap_or(default)
}

/// A port given as a number or a name of one of the container's ports.
fn port(p: Option<&Value>, container: &Value) -> Option<u16> {
    match p? {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(s) => s.parse().ok().or_else(|| {
            container
                .get("ports")
                .and_then(Value::as_array)?
                .iter()
                .find(|cp| cp.get("name").and_then(Value::as_str) == Some(s.as_str()))?
                .get("containerPort")?
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
        }),
        _ => None,
    }
}

impl Probe {
    /// The probe `field` (`readinessProbe`, ...) of `container`, if it has a handler this
    /// runtime runs (`grpc` is not one).
    pub(crate) fn of(container: &Value, field: &str) -> Option<Self> {
        let p = container.get(field)?;
        let host = |h: &Value| {
            h.get("host")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let check = if let Some(h) = p.get("httpGet") {
            Check::Http {
                https: h.get("scheme").and_then(Value::as_str) == Some("HTTPS"),
                host: host(h),
                port: port(h.get("port"), container)?,
                path: h
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("/")
                    .to_string(),
            }
        } else if let Some(t) = p.get("tcpSocket") {
            Check::Tcp {
                host: host(t),
                port: port(t.get("port"), container)?,
            }
        } else if let Some(e) = p.get("exec") {
            Check::Exec(
                e.get("command")
                    .and_then(Value::as_array)?
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
            )
        } else {
            return None;
        };
        let threshold = |f: &str, d: u64| u32::try_from(secs(p, f, d)).unwrap_or(u32::MAX);
        Some(Self {
            check,
            initial_delay: Duration::from_secs(secs(p, "initialDelaySeconds", 0)),
            period: Duration::from_secs(secs(p, "periodSeconds", 10)),
            timeout: Duration::from_secs(secs(p, "timeoutSeconds", 1)),
            success_threshold: threshold("successThreshold", 1),
            failure_threshold: threshold("failureThreshold", 3),
        })
    }
}

/// A probe's running tally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    successes: u32,
    failures: u32,
    /// The current result: `None` until a threshold is first reached.
    pub(crate) passing: Option<bool>,
}

impl Tally {
    /// Counts one check; returns the result when it changes.
    pub(crate) fn record(&mut self, ok: bool, probe: &Probe) -> Option<bool> {
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let now = if self.successes >= probe.success_threshold {
            Some(true)
        } else if self.failures >= probe.failure_threshold {
            Some(false)
        } else {
            self.passing
        };
        let changed = now != self.passing;
        self.passing = now;
        changed.then_some(now).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backoff_doubles_to_five_minutes() {
        for (n, want) in [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (40, 300)] {
            assert_eq!(backoff(n), Duration::from_secs(want), "{n}");
        }
    }

    #[test]
    fn restart_policy() {
        for (policy, code, want) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 2, true),
            ("Never", 1, false),
        ] {
            assert_eq!(restarts(policy, code), want, "{policy} {code}");
        }
        assert_eq!(exit_reason(0), "Completed");
        assert_eq!(exit_reason(137), "Error");
        for (pod, want) in [
            ("Always", "OnFailure"),
            ("OnFailure", "OnFailure"),
            ("Never", "Never"),
        ] {
            assert_eq!(init_restart_policy(pod), want, "{pod}");
        }
    }

    #[test]
    fn probes_parse_with_defaults_and_named_ports() {
        let c = json!({
            "ports": [{"name": "https", "containerPort": 8443}],
            "readinessProbe": {"httpGet": {"scheme": "HTTPS", "port": "https", "path": "/readyz"}, "periodSeconds": 2},
            "livenessProbe": {"tcpSocket": {"port": 8443}, "failureThreshold": 1},
            "startupProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": 3},
        });
        let r = Probe::of(&c, "readinessProbe").unwrap();
        assert_eq!(
            r.check,
            Check::Http {
                https: true,
                host: None,
                port: 8443,
                path: "/readyz".into()
            }
        );
        assert_eq!(
            (
                r.period,
                r.timeout,
                r.success_threshold,
                r.failure_threshold
            ),
            (Duration::from_secs(2), Duration::from_secs(1), 1, 3)
        );
        let l = Probe::of(&c, "livenessProbe").unwrap();
        assert_eq!(
            l.check,
            Check::Tcp {
                host: None,
                port: 8443
            }
        );
        assert_eq!(l.failure_threshold, 1);
        let s = Probe::of(&c, "startupProbe").unwrap();
        assert_eq!(s.check, Check::Exec(vec!["true".into()]));
        assert_eq!(s.initial_delay, Duration::from_secs(3));
        assert!(Probe::of(&c, "other").is_none());
        let unknown_port = json!({"readinessProbe": {"tcpSocket": {"port": "nope"}}});
        assert!(Probe::of(&unknown_port, "readinessProbe").is_none());
    }

    #[test]
    fn tally_needs_consecutive_results() {
        let p = Probe {
            check: Check::Exec(vec![]),
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let mut t = Tally::default();
        let steps = [
            (true, None),
            (true, Some(true)),
            (false, None),
            (false, None),
            (true, None),
            (false, None),
            (false, None),
            (false, Some(false)),
            (true, None),
            (true, Some(true)),
        ];
        for (i, (ok, want)) in steps.into_iter().enumerate() {
            assert_eq!(t.record(ok, &p), want, "step {i}");
        }
    }
}
