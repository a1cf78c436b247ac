//! The leader-election flags, named as kube-controller-manager and kube-scheduler name
//! them, and their validation (client-go's rules).

use std::time::Duration;

use clap::ArgAction;

use super::elector::{JITTER, Settings};
use crate::flags::{FlagErrors, parse_duration};

/// Where a component's Lease lives unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "meridian-system";

/// The flags every elected component takes (`#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderElectionArgs {
    /// Take a coordination.k8s.io/v1 Lease before writing anything, so only one of several
    /// replicas writes (`--leader-elect=false`: write from the start; one replica only).
    #[arg(
        long = "leader-elect",
        env = "MERIDIAN_LEADER_ELECT",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub leader_elect: bool,
    /// How long candidates wait after last seeing the Lease renewed before taking it over.
    #[arg(long, env = "MERIDIAN_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps writing while its renewals fail (counted from the start
    /// of its last successful renewal); then it stops writing and exits.
    #[arg(long, env = "MERIDIAN_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// Time between the leader's renewals and between candidates' reads of the Lease.
    #[arg(long, env = "MERIDIAN_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// Namespace of the Lease.
    #[arg(long, env = "MERIDIAN_LEADER_ELECT_RESOURCE_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub leader_elect_resource_namespace: String,
    /// Name of the Lease (default: the component's name).
    #[arg(long, env = "MERIDIAN_LEADER_ELECT_RESOURCE_NAME")]
    pub leader_elect_resource_name: Option<String>,
    /// This replica's name in the Lease; must differ between replicas (default: the host
    /// name and a random suffix).
    #[arg(long, env = "MERIDIAN_LEADER_ELECT_IDENTITY")]
    pub leader_elect_identity: Option<String>,
}

/// A DNS-1123 label (a namespace name).
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain (a Lease name).
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

impl LeaderElectionArgs {
    /// Notes every bad election flag in `errors` (only when the election is on).
    pub fn check(&self, errors: &mut FlagErrors) {
        if !self.leader_elect {
            return;
        }
        let (lease, renew, retry) = (
            self.leader_elect_lease_duration,
            self.leader_elect_renew_deadline,
            self.leader_elect_retry_period,
        );
        if retry.is_zero() {
            errors.push("--leader-elect-retry-period must be positive");
        }
        if lease <= renew {
            errors.push(format!(
                "--leader-elect-lease-duration {lease:?} must be longer than --leader-elect-renew-deadline {renew:?}"
            ));
        }
        if renew <= retry.mul_f64(JITTER) {
            errors.push(format!(
                "--leader-elect-renew-deadline {renew:?} must be longer than 1.2 × --leader-elect-retry-period {retry:?}"
            ));
        }
        if lease < Duration::from_secs(1) {
            errors.push("--leader-elect-lease-duration must be at least 1s");
        }
        if !dns_label(&self.leader_elect_resource_namespace) {
            errors.push(format!(
                "--leader-elect-resource-namespace {:?} is not a namespace name",
                self.leader_elect_resource_namespace
            ));
        }
        if let Some(name) = &self.leader_elect_resource_name
            && !dns_subdomain(name)
        {
            errors.push(format!(
                "--leader-elect-resource-name {name:?} is not a valid object name"
            ));
        }
        if self
            .leader_elect_identity
            .as_deref()
            .is_some_and(|i| i.trim().is_empty())
        {
            errors.push("--leader-elect-identity must not be empty");
        }
    }

    /// The election's settings (`None` when it is off), once [`Self::check`] passed;
    /// `component` names the Lease by default.
    pub fn settings(&self, component: &str) -> Option<Settings> {
        self.leader_elect.then(|| Settings {
            identity: self
                .leader_elect_identity
                .clone()
                .unwrap_or_else(default_identity),
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self
                .leader_elect_resource_name
                .clone()
                .unwrap_or_else(|| component.to_string()),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
            jitter: JITTER,
        })
    }
}

/// `<hostname>_<random uuid>`, as kube-controller-manager names itself: the host says
/// where the leader runs, the suffix keeps two processes on one host apart.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        leader: LeaderElectionArgs,
    }

    fn parse(args: &[&str]) -> LeaderElectionArgs {
        let mut all = vec!["x"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).expect("parse").leader
    }

    #[test]
    fn defaults_follow_client_go() {
        let a = parse(&[]);
        let mut errors = FlagErrors::new();
        a.check(&mut errors);
        assert!(errors.is_empty(), "{errors}");
        let s = a.settings("fed-scheduler").expect("on by default");
        assert_eq!(
            (s.lease_duration, s.renew_deadline, s.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert_eq!(
            (s.namespace.as_str(), s.name.as_str()),
            ("meridian-system", "fed-scheduler")
        );
        let (host, suffix) = s.identity.rsplit_once('_').expect("host_suffix");
        assert!(!host.is_empty() && suffix.len() == 36, "{}", s.identity);
        assert_ne!(
            a.settings("x").expect("on").identity,
            s.identity,
            "two processes never share a default identity"
        );
    }

    #[test]
    fn on_off_and_overrides() {
        assert!(parse(&["--leader-elect=false"]).settings("c").is_none());
        assert!(parse(&["--leader-elect"]).settings("c").is_some());
        assert!(parse(&["--leader-elect=true"]).settings("c").is_some());
        let s = parse(&[
            "--leader-elect-resource-namespace",
            "kube-system",
            "--leader-elect-resource-name",
            "sched",
            "--leader-elect-identity",
            "replica-a",
        ])
        .settings("c")
        .expect("on");
        assert_eq!(
            (s.namespace.as_str(), s.name.as_str(), s.identity.as_str()),
            ("kube-system", "sched", "replica-a")
        );
    }

    #[test]
    fn reports_every_bad_flag() {
        let a = parse(&[
            "--leader-elect-lease-duration",
            "10s",
            "--leader-elect-renew-deadline",
            "2s",
            "--leader-elect-retry-period",
            "2s",
            "--leader-elect-resource-namespace",
            "Bad_NS",
            "--leader-elect-resource-name=-x",
            "--leader-elect-identity",
            " ",
        ]);
        let mut errors = FlagErrors::new();
        a.check(&mut errors);
        assert_eq!(errors.0.len(), 4, "{errors}");
        let a = parse(&[
            "--leader-elect-lease-duration",
            "10s",
            "--leader-elect-renew-deadline",
            "10s",
        ]);
        let mut errors = FlagErrors::new();
        a.check(&mut errors);
        assert!(
            errors.0[0].contains("--leader-elect-lease-duration"),
            "{errors}"
        );
        // Off: nothing else is checked.
        let mut errors = FlagErrors::new();
        parse(&[
            "--leader-elect=false",
            "--leader-elect-renew-deadline",
            "1h",
        ])
        .check(&mut errors);
        assert!(errors.is_empty());
    }
}
