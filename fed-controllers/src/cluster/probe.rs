//! Health-probe damping: turns a stream of probe outcomes into `Ready` / `Offline`.
//!
//! Pure: the member task feeds it outcomes and writes what it returns. Thresholds keep a
//! single lost probe from flipping a cluster (and from triggering failovers downstream).

use fed_api::common::Condition;
use jiff::Timestamp;

use super::conditions::{self, FALSE, OFFLINE, READY, TRUE, UNKNOWN, format_time};

/// Why a probe failed; each maps to the `reason` written on `Ready=False`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Connection refused, reset, DNS failure: nothing answered.
    Unreachable,
    /// No answer within the probe timeout.
    Timeout,
    /// The member answered, but not healthy (5xx, unexpected body).
    ProbeFailed,
    /// The member rejected our credentials (401/403).
    Unauthorized,
    /// The TLS handshake failed (certificate not signed by `spec.caBundle`, wrong name, ...).
    TlsError,
    /// We could not even build a client: missing Secret or token, bad CA bundle or endpoint.
    InvalidConfig,
}

impl FailureKind {
    /// The CamelCase reason used in conditions, events and metrics.
    pub fn reason(self) -> &'static str {
        match self {
            FailureKind::Unreachable => "Unreachable",
            FailureKind::Timeout => "Timeout",
            FailureKind::ProbeFailed => "ProbeFailed",
            FailureKind::Unauthorized => "Unauthorized",
            FailureKind::TlsError => "TLSError",
            FailureKind::InvalidConfig => "InvalidConfig",
        }
    }

    fn from_reason(reason: &str) -> Option<Self> {
        [
            FailureKind::Unreachable,
            FailureKind::Timeout,
            FailureKind::ProbeFailed,
            FailureKind::Unauthorized,
            FailureKind::TlsError,
            FailureKind::InvalidConfig,
        ]
        .into_iter()
        .find(|k| k.reason() == reason)
    }
}

/// The result of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `/readyz` (or `/healthz`) answered 200 and our credentials were accepted.
    Success,
    /// The probe failed; `message` says why, for humans (never contains credentials).
    Failure {
        /// Classification, becomes the condition reason.
        kind: FailureKind,
        /// Detail for the condition message.
        message: String,
    },
}

/// How many consecutive results it takes to change the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Consecutive failures before `Ready=False` and `Offline=True`.
    pub failure: u32,
    /// Consecutive successes before a not-Ready member is `Ready=True` again.
    pub success: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            failure: 3,
            success: 1,
        }
    }
}

/// The damped verdict on a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Never decided (a new cluster that has not reached a threshold yet).
    Unknown,
    /// Ready.
    Ready,
    /// Not ready: the failure threshold was crossed.
    NotReady,
}

/// Everything the damping needs to remember between probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeState {
    /// The current verdict.
    pub health: Health,
    /// Whether `Offline=True` (crossed the failure threshold and not recovered).
    pub offline: bool,
    /// Consecutive failures so far.
    pub failures: u32,
    /// Consecutive successes so far.
    pub successes: u32,
    /// The most recent failure, kept for messages while recovering.
    pub last_failure: Option<(FailureKind, String)>,
    /// When the last probe finished.
    pub last_probe: Option<Timestamp>,
}

impl Default for ProbeState {
    fn default() -> Self {
        ProbeState {
            health: Health::Unknown,
            offline: false,
            failures: 0,
            successes: 0,
            last_failure: None,
            last_probe: None,
        }
    }
}

/// Which conditions flipped status in a step (drives Events and the mass-failure guard).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transition {
    /// `Ready` changed status.
    pub ready: bool,
    /// `Offline` changed status.
    pub offline: bool,
}

impl ProbeState {
    /// Resumes from conditions already written (a restarted controller or member task
    /// must not reset a cluster to Unknown and flap it).
    pub fn from_conditions(conds: &[Condition]) -> Self {
        let mut state = ProbeState::default();
        if let Some(ready) = conditions::find(conds, READY) {
            state.health = match ready.status.as_str() {
                TRUE => Health::Ready,
                FALSE => Health::NotReady,
                _ => Health::Unknown,
            };
            if let Some(kind) = FailureKind::from_reason(&ready.reason) {
                state.last_failure = Some((kind, ready.message.clone()));
            }
        }
        state.offline = conditions::find(conds, OFFLINE).is_some_and(|c| c.status == TRUE);
        state
    }
}

/// Advances the damping by one probe outcome.
pub fn next_state(
    prev: &ProbeState,
    outcome: &Outcome,
    thresholds: Thresholds,
    now: Timestamp,
) -> (ProbeState, Transition) {
    let mut next = prev.clone();
    next.last_probe = Some(now);
    match outcome {
        Outcome::Success => {
            next.failures = 0;
            next.successes = next.successes.saturating_add(1);
            if next.health != Health::Ready && next.successes >= thresholds.success.max(1) {
                next.health = Health::Ready;
                next.offline = false;
                next.last_failure = None;
            }
        }
        Outcome::Failure { kind, message } => {
            next.successes = 0;
            next.failures = next.failures.saturating_add(1);
            next.last_failure = Some((*kind, message.clone()));
            if next.failures >= thresholds.failure.max(1) {
                next.health = Health::NotReady;
                next.offline = true;
            }
        }
    }
    let transition = Transition {
        ready: next.health != prev.health,
        offline: next.offline != prev.offline,
    };
    (next, transition)
}

/// The `Ready` and `Offline` conditions the state calls for (transition times are left
/// to [`conditions::set`]).
pub fn conditions_for(state: &ProbeState, thresholds: Thresholds) -> [Condition; 2] {
    let probe_time = state.last_probe.map(format_time);
    let failure = state.last_failure.as_ref();
    let failure_reason = failure.map_or("ProbeFailed", |(k, _)| k.reason());
    let failure_message = failure.map_or("", |(_, m)| m.as_str());
    let (status, reason, message) = match state.health {
        Health::Ready if state.failures > 0 => (
            TRUE,
            "ProbeSucceeded".to_string(),
            format!(
                "{} of {} allowed consecutive probe failures: {failure_message}",
                state.failures, thresholds.failure
            ),
        ),
        Health::Ready => (TRUE, "ProbeSucceeded".to_string(), String::new()),
        Health::NotReady if state.successes > 0 => (
            FALSE,
            failure_reason.to_string(),
            format!(
                "recovering: {} of {} consecutive successful probes needed; last failure: {failure_message}",
                state.successes, thresholds.success
            ),
        ),
        Health::NotReady => (
            FALSE,
            failure_reason.to_string(),
            failure_message.to_string(),
        ),
        Health::Unknown => (
            UNKNOWN,
            "Probing".to_string(),
            match failure {
                Some(_) if state.failures > 0 => format!(
                    "{} of {} consecutive probe failures: {failure_message}",
                    state.failures, thresholds.failure
                ),
                _ => "waiting for probe results".to_string(),
            },
        ),
    };
    let ready = Condition {
        type_: READY.into(),
        status: status.into(),
        reason,
        message,
        last_probe_time: probe_time.clone(),
        last_transition_time: None,
    };
    let (status, reason, message) = match (state.offline, state.health) {
        (true, _) => (
            TRUE,
            failure_reason.to_string(),
            format!("failure threshold crossed: {failure_message}"),
        ),
        (false, Health::Unknown) => (UNKNOWN, "Probing".to_string(), String::new()),
        (false, _) => (FALSE, "ProbeSucceeded".to_string(), String::new()),
    };
    let offline = Condition {
        type_: OFFLINE.into(),
        status: status.into(),
        reason,
        message,
        last_probe_time: probe_time,
        last_transition_time: None,
    };
    [ready, offline]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(kind: FailureKind) -> Outcome {
        Outcome::Failure {
            kind,
            message: format!("{} happened", kind.reason()),
        }
    }

    fn run(
        start: ProbeState,
        outcomes: &[Outcome],
        th: Thresholds,
    ) -> Vec<(Health, bool, Transition)> {
        let mut state = start;
        let mut out = Vec::new();
        for (i, o) in outcomes.iter().enumerate() {
            let now = Timestamp::from_second(1_700_000_000 + 10 * i as i64).expect("ts");
            let (next, t) = next_state(&state, o, th, now);
            out.push((next.health, next.offline, t));
            state = next;
        }
        out
    }

    fn ready() -> ProbeState {
        ProbeState {
            health: Health::Ready,
            ..Default::default()
        }
    }

    const S: Outcome = Outcome::Success;
    const NONE: Transition = Transition {
        ready: false,
        offline: false,
    };
    const BOTH: Transition = Transition {
        ready: true,
        offline: true,
    };

    #[test]
    fn damping_table() {
        let th = Thresholds::default();
        let t = fail(FailureKind::Timeout);
        type Case = (
            &'static str,
            ProbeState,
            Vec<Outcome>,
            Thresholds,
            (Health, bool),
        );
        let cases: Vec<Case> = vec![
            (
                "single dropped probe keeps Ready",
                ready(),
                vec![t.clone(), S],
                th,
                (Health::Ready, false),
            ),
            (
                "two failures keep Ready",
                ready(),
                vec![t.clone(), t.clone()],
                th,
                (Health::Ready, false),
            ),
            (
                "three failures go Offline",
                ready(),
                vec![t.clone(), t.clone(), t.clone()],
                th,
                (Health::NotReady, true),
            ),
            (
                "interleaved successes reset the count",
                ready(),
                vec![t.clone(), t.clone(), S, t.clone(), t.clone()],
                th,
                (Health::Ready, false),
            ),
            (
                "recovery with success threshold 1",
                ready(),
                vec![t.clone(), t.clone(), t.clone(), S],
                th,
                (Health::Ready, false),
            ),
            (
                "recovery needs success threshold 2",
                ready(),
                vec![t.clone(), t.clone(), t.clone(), S],
                Thresholds {
                    failure: 3,
                    success: 2,
                },
                (Health::NotReady, true),
            ),
            (
                "two successes recover with threshold 2",
                ready(),
                vec![t.clone(), t.clone(), t.clone(), S, S],
                Thresholds {
                    failure: 3,
                    success: 2,
                },
                (Health::Ready, false),
            ),
            (
                "new cluster becomes Ready on first success",
                ProbeState::default(),
                vec![S],
                th,
                (Health::Ready, false),
            ),
            (
                "new cluster stays Unknown below threshold",
                ProbeState::default(),
                vec![t.clone()],
                th,
                (Health::Unknown, false),
            ),
            (
                "new dead cluster goes Offline at threshold",
                ProbeState::default(),
                vec![t.clone(), t.clone(), t],
                th,
                (Health::NotReady, true),
            ),
            (
                "failure threshold 1 flips at once",
                ready(),
                vec![fail(FailureKind::Unreachable)],
                Thresholds {
                    failure: 1,
                    success: 1,
                },
                (Health::NotReady, true),
            ),
        ];
        for (name, start, outcomes, th, want) in cases {
            let got = run(start, &outcomes, th);
            let last = got.last().expect("non-empty");
            assert_eq!((last.0, last.1), want, "{name}");
        }
    }

    #[test]
    fn transitions_are_reported_once() {
        let t = fail(FailureKind::Unreachable);
        let got = run(
            ready(),
            &[t.clone(), t.clone(), t.clone(), t, S],
            Thresholds::default(),
        );
        let transitions: Vec<Transition> = got.iter().map(|g| g.2).collect();
        assert_eq!(transitions, vec![NONE, NONE, BOTH, NONE, BOTH]);
    }

    #[test]
    fn reason_follows_latest_failure_while_not_ready() {
        let th = Thresholds::default();
        let mut state = ready();
        let now = Timestamp::from_second(1_700_000_000).expect("ts");
        for kind in [
            FailureKind::Timeout,
            FailureKind::Timeout,
            FailureKind::Timeout,
            FailureKind::Unauthorized,
        ] {
            state = next_state(&state, &fail(kind), th, now).0;
        }
        let [ready_c, offline_c] = conditions_for(&state, th);
        assert_eq!(
            (ready_c.status.as_str(), ready_c.reason.as_str()),
            ("False", "Unauthorized")
        );
        assert!(ready_c.message.contains("Unauthorized happened"));
        assert_eq!(
            (offline_c.status.as_str(), offline_c.reason.as_str()),
            ("True", "Unauthorized")
        );
        assert_eq!(
            ready_c.last_probe_time.as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
    }

    #[test]
    fn conditions_for_each_health() {
        let th = Thresholds::default();
        let [r, o] = conditions_for(&ready(), th);
        assert_eq!(
            (r.status.as_str(), r.reason.as_str(), o.status.as_str()),
            ("True", "ProbeSucceeded", "False")
        );
        let [r, o] = conditions_for(&ProbeState::default(), th);
        assert_eq!(
            (r.status.as_str(), r.reason.as_str(), o.status.as_str()),
            ("Unknown", "Probing", "Unknown")
        );
    }

    #[test]
    fn resumes_from_written_conditions() {
        let th = Thresholds::default();
        let mut state = ready();
        let now = Timestamp::from_second(1_700_000_000).expect("ts");
        for _ in 0..3 {
            state = next_state(&state, &fail(FailureKind::TlsError), th, now).0;
        }
        let mut conds = Vec::new();
        for c in conditions_for(&state, th) {
            conditions::set(&mut conds, c, now);
        }
        let resumed = ProbeState::from_conditions(&conds);
        assert_eq!(resumed.health, Health::NotReady);
        assert!(resumed.offline);
        assert_eq!(
            resumed.last_failure.map(|f| f.0),
            Some(FailureKind::TlsError)
        );
        assert_eq!(ProbeState::from_conditions(&[]).health, Health::Unknown);
    }
}
