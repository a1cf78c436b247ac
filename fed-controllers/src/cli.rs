//! Command-line flags of `fed-controllers` and their validation (every bad flag reported at once).

use std::net::SocketAddr;
use std::time::Duration;

use meridian_runtime::args::FederationArgs;
use meridian_runtime::flags::{FlagErrors, parse_duration};

use crate::cluster::ControllerConfig;
use crate::cluster::controller::member_limits;
use crate::cluster::member::Settings;
use crate::cluster::probe::Thresholds;
use crate::member_client::MemberClients;

/// `fed-controllers`: runs Meridian's controllers against the federation API.
#[derive(Debug, clap::Parser)]
#[command(name = "fed-controllers", version, about)]
pub struct Args {
    /// Time between member health probes.
    #[arg(long, env = "MERIDIAN_PROBE_PERIOD", default_value = "10s", value_parser = parse_duration)]
    pub probe_period: Duration,
    /// Deadline of one probe.
    #[arg(long, env = "MERIDIAN_PROBE_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub probe_timeout: Duration,
    /// Consecutive failed probes before Ready=False and Offline=True.
    #[arg(long, env = "MERIDIAN_FAILURE_THRESHOLD", default_value_t = 3)]
    pub failure_threshold: u32,
    /// Consecutive successful probes before a not-Ready member is Ready again.
    #[arg(long, env = "MERIDIAN_SUCCESS_THRESHOLD", default_value_t = 1)]
    pub success_threshold: u32,
    /// Mass failure when more than this share of members (and at least two) is Offline.
    #[arg(long, env = "MERIDIAN_MASS_FAILURE_SHARE", default_value_t = 0.5)]
    pub mass_failure_share: f64,
    /// Refresh period of members' version and served APIs (also refreshed on becoming Ready).
    #[arg(long, env = "MERIDIAN_DISCOVERY_PERIOD", default_value = "5m", value_parser = parse_duration)]
    pub discovery_period: Duration,
    /// At most one status write per cluster per this interval.
    #[arg(long, env = "MERIDIAN_STATUS_MIN_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub status_min_interval: Duration,
    /// How often an unchanged member's `Ready` condition gets a new `lastProbeTime` (a
    /// Cluster status write); liveness is each member's Lease in `meridian-cluster-lease`,
    /// renewed by successful probes.
    #[arg(long, env = "MERIDIAN_STATUS_REPORT_PERIOD", default_value = "5m", value_parser = parse_duration)]
    pub status_report_period: Duration,
    /// Objects per page when listing a member's nodes and pods (initial list and re-lists);
    /// smaller pages bound the memory one list needs while it is decoded.
    #[arg(long, env = "MERIDIAN_MEMBER_LIST_PAGE_SIZE", default_value_t = 100)]
    pub member_list_page_size: u32,
    /// Members listing their nodes or pods at the same time (process-wide); bounds the
    /// memory a fleet-wide (re-)list needs at once.
    #[arg(long, env = "MERIDIAN_MEMBER_CONCURRENT_LISTS", default_value_t = 32)]
    pub member_concurrent_lists: usize,
    /// Member syncs (one object brought up to date in one member) in progress at once,
    /// process-wide, over every member and controller; member probes take none of them, so
    /// a burst of writes never delays a health check behind it.
    #[arg(long, env = "MERIDIAN_MEMBER_CONCURRENT_SYNCS", default_value_t = crate::fleet::settings::CONCURRENT_SYNCS)]
    pub member_concurrent_syncs: usize,
    /// Deadline of one workload-controller request to a member or the federation.
    #[arg(long, env = "MERIDIAN_WORKLOAD_SYNC_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub workload_sync_timeout: Duration,
    /// Longest retry delay after a failed workload sync (retries back off exponentially).
    #[arg(long, env = "MERIDIAN_WORKLOAD_BACKOFF_MAX", default_value = "30s", value_parser = parse_duration)]
    pub workload_backoff_max: Duration,
    /// How long a member's workload status report waits for the reports that follow it
    /// before the federated status is written (one write for a burst of reports); a
    /// workload over more than 25 clusters waits up to four times as long (one pass over
    /// its destinations per burst).
    #[arg(long, env = "MERIDIAN_WORKLOAD_STATUS_DELAY", default_value = "100ms", value_parser = parse_duration)]
    pub workload_status_delay: Duration,
    /// How long a workload's status waits for the scheduler's answer to a scale, or for a
    /// member to act on a new copy, before it is written without it.
    #[arg(long, env = "MERIDIAN_WORKLOAD_STATUS_HOLD", default_value = "2s", value_parser = parse_duration)]
    pub workload_status_hold: Duration,
    /// How long a workload Event waits for more members reporting the same outcome after
    /// the last one (one Event naming every cluster; open 5 s at most).
    #[arg(long, env = "MERIDIAN_WORKLOAD_EVENT_WINDOW", default_value = "250ms", value_parser = parse_duration)]
    pub workload_event_window: Duration,
    /// Shortest time between two writes of a Placement's per-cluster status while only the
    /// members' counts move (its Propagated condition, errors and conflicts are written at
    /// once); `0s` writes every change.
    #[arg(long, env = "MERIDIAN_PLACEMENT_STATUS_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub placement_status_interval: Duration,
    /// DNS zone the lb-agents are authoritative for.
    #[arg(
        long,
        env = "MERIDIAN_DNS_ZONE",
        default_value = "global.meridian.test"
    )]
    pub dns_zone: String,
    /// Ports the lb-agents' per-Service listeners are allocated from (`first-last`).
    #[arg(long, env = "MERIDIAN_LB_PORT_RANGE", default_value = "30000-32767")]
    pub lb_port_range: String,
    /// TTL of the lb-agents' DNS answers (whole seconds).
    #[arg(long, env = "MERIDIAN_LB_TTL", default_value = "5s", value_parser = parse_duration)]
    pub lb_ttl: Duration,
    /// The federation, `/metrics`, leader election, logging.
    #[command(flatten)]
    pub federation: FederationArgs,
}

/// The controllers' Lease (`meridian-system/fed-controllers` unless the flags say
/// otherwise).
pub const LEASE_NAME: &str = "fed-controllers";

impl Args {
    /// What the workload and service controllers' member fleets share.
    fn fleet_settings(&self) -> crate::fleet::Settings {
        crate::fleet::Settings {
            sync_timeout: self.workload_sync_timeout,
            backoff_max: self.workload_backoff_max,
            syncs: std::sync::Arc::new(tokio::sync::Semaphore::new(self.member_concurrent_syncs)),
            ..Default::default()
        }
    }

    /// The workload controller's settings (valid once [`Args::validate`] passed).
    pub fn workload_settings(&self) -> crate::workload::Settings {
        crate::workload::Settings {
            fleet: self.fleet_settings(),
            status_delay: self.workload_status_delay,
            status_hold: self.workload_status_hold,
            event_window: self.workload_event_window,
            placement_status_interval: self.placement_status_interval,
            ..Default::default()
        }
    }

    /// The service controller's settings; each error names its bad flag.
    pub fn service_settings(&self) -> Result<crate::service::Settings, FlagErrors> {
        let mut errors = FlagErrors::new();
        let zone = self.dns_zone.trim_end_matches('.');
        if zone.is_empty()
            || zone
                .split('.')
                .any(|l| apimachinery::validation::dns1123_label(l).is_err())
        {
            errors.push(format!(
                "--dns-zone {:?} must be a DNS name like global.meridian.test",
                self.dns_zone
            ));
        }
        let port_range = self
            .lb_port_range
            .parse()
            .map_err(|e| errors.push(format!("--lb-port-range: {e}")))
            .ok();
        let secs = self.lb_ttl.as_secs_f64();
        if secs < 1.0 || secs.fract() != 0.0 || secs > f64::from(u32::MAX) {
            errors.push(format!(
                "--lb-ttl {:?} must be a whole number of seconds, at least 1s",
                self.lb_ttl
            ));
        }
        let Some(port_range) = port_range.filter(|_| errors.is_empty()) else {
            return Err(errors);
        };
        Ok(crate::service::Settings {
            dns_zone: zone.to_string(),
            port_range,
            ttl_seconds: secs as u32,
            fleet: self.fleet_settings(),
        })
    }

    /// The validated controller configuration and metrics address.
    pub fn validate(&self) -> Result<(ControllerConfig, Option<SocketAddr>), FlagErrors> {
        let mut errors = FlagErrors::new();
        if self.probe_period < Duration::from_millis(100) {
            errors.push(format!(
                "--probe-period {:?} must be at least 100ms",
                self.probe_period
            ));
        }
        if self.probe_timeout.is_zero() || self.probe_timeout > self.probe_period {
            errors.push(format!(
                "--probe-timeout {:?} must be positive and at most --probe-period {:?}",
                self.probe_timeout, self.probe_period
            ));
        }
        if self.failure_threshold == 0 {
            errors.push("--failure-threshold must be at least 1");
        }
        if self.success_threshold == 0 {
            errors.push("--success-threshold must be at least 1");
        }
        if !(0.0..1.0).contains(&self.mass_failure_share) {
            errors.push(format!(
                "--mass-failure-share {} must be in [0, 1)",
                self.mass_failure_share
            ));
        }
        if self.discovery_period < self.probe_period {
            errors.push("--discovery-period must be at least --probe-period");
        }
        if self.status_report_period < self.probe_period {
            errors.push("--status-report-period must be at least --probe-period");
        }
        let metrics = self.federation.check(&mut errors);
        if self.workload_sync_timeout.is_zero() {
            errors.push("--workload-sync-timeout must be positive");
        }
        if self.workload_backoff_max < Duration::from_millis(500) {
            errors.push("--workload-backoff-max must be at least 500ms");
        }
        if self.workload_status_delay > Duration::from_secs(5) {
            errors.push("--workload-status-delay must be at most 5s");
        }
        if self.workload_event_window > Duration::from_secs(60) {
            errors.push("--workload-event-window must be at most 60s");
        }
        if self.placement_status_interval > Duration::from_secs(60) {
            errors.push("--placement-status-interval must be at most 60s");
        }
        if let Err(e) = self.service_settings() {
            errors.0.extend(e.0);
        }
        if self.member_list_page_size == 0 {
            errors.push("--member-list-page-size must be at least 1");
        }
        if self.member_concurrent_lists == 0 {
            errors.push("--member-concurrent-lists must be at least 1");
        }
        if self.member_concurrent_syncs == 0 {
            errors.push("--member-concurrent-syncs must be at least 1");
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let settings = Settings {
            probe_period: self.probe_period,
            probe_timeout: self.probe_timeout,
            thresholds: Thresholds {
                failure: self.failure_threshold,
                success: self.success_threshold,
            },
            discovery_period: self.discovery_period,
            status_min_interval: self.status_min_interval,
            status_report_period: self.status_report_period,
            list_page_size: self.member_list_page_size,
            concurrent_lists: self.member_concurrent_lists,
            ..Settings::default()
        };
        Ok((
            ControllerConfig {
                clients: MemberClients::new(member_limits(&settings)),
                settings,
                mass_failure_share: self.mass_failure_share,
            },
            metrics,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn defaults_and_validation() {
        let args = Args::try_parse_from(["fed-controllers", "--kubeconfig", "k"]).expect("parse");
        let (cfg, metrics) = args.validate().expect("valid");
        assert_eq!(cfg.settings.probe_period, Duration::from_secs(10));
        assert_eq!(cfg.settings.probe_timeout, Duration::from_secs(3));
        assert_eq!(
            cfg.settings.thresholds,
            Thresholds {
                failure: 3,
                success: 1
            }
        );
        assert_eq!(cfg.mass_failure_share, 0.5);
        assert_eq!(cfg.settings.list_page_size, 100);
        assert_eq!(cfg.settings.concurrent_lists, 32);
        assert_eq!(cfg.settings.status_report_period, Duration::from_secs(300));
        assert_eq!(metrics, Some("127.0.0.1:8080".parse().expect("addr")));
        // How a Lease is named is meridian-runtime's (tested there); which Lease is ours.
        assert_eq!(LEASE_NAME, "fed-controllers");
        let svc = args.service_settings().expect("service settings");
        assert_eq!(svc.dns_zone, "global.meridian.test");
        assert_eq!(svc.port_range.to_string(), "30000-32767");
        assert_eq!(svc.ttl_seconds, 5);
        let wl = args.workload_settings();
        assert_eq!(wl.status_delay, Duration::from_millis(100));
        assert_eq!(wl.event_window, Duration::from_millis(250));
        assert_eq!(wl.placement_status_interval, Duration::from_secs(1));
        assert_eq!(wl.fleet.syncs.available_permits(), 256);

        let args = Args::try_parse_from([
            "fed-controllers",
            "--kubeconfig",
            "k",
            "--probe-timeout",
            "20s",
            "--failure-threshold",
            "0",
            "--mass-failure-share",
            "1.5",
            "--metrics-bind-address",
            "nope",
            "--lb-port-range",
            "40000-30000",
            "--member-list-page-size",
            "0",
            "--member-concurrent-lists",
            "0",
            "--member-concurrent-syncs",
            "0",
            "--leader-elect-retry-period",
            "0s",
        ])
        .expect("parse");
        let err = args.validate().expect_err("invalid");
        assert_eq!(err.0.len(), 9, "{err}");
        for bad in [
            ["--dns-zone", "bad_zone.test"],
            ["--lb-ttl", "1500ms"],
            ["--lb-port-range", "30000"],
            ["--workload-status-delay", "6s"],
            ["--workload-event-window", "2m"],
            ["--placement-status-interval", "2m"],
            ["--status-report-period", "5s"],
        ] {
            let args =
                Args::try_parse_from(["fed-controllers", "--kubeconfig", "k", bad[0], bad[1]])
                    .expect("parse");
            let err = args.validate().expect_err("invalid");
            assert!(err.to_string().contains(bad[0]), "{err}");
        }
    }
}
