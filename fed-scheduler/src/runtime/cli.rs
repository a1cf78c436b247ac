//! Command-line flags of `fed-scheduler` and their validation (every bad flag at once).

use std::net::SocketAddr;
use std::time::Duration;

use meridian_runtime::args::FederationArgs;
use meridian_runtime::flags::{FlagErrors, parse_duration};
use meridian_runtime::rate::Rate;

use super::controller::Config;
use meridian_runtime::kind_retry::Backoff;

/// `fed-scheduler`: decides where federated Deployments and ReplicaSets run.
#[derive(Debug, clap::Parser)]
#[command(name = "fed-scheduler", version, about)]
// Beside fed-controllers (8080) on one host.
#[command(mut_arg("metrics_bind_address", |a| a.default_value("127.0.0.1:8081")))]
pub struct Args {
    /// Workloads decided and written concurrently.
    #[arg(long, env = "MERIDIAN_SCHEDULER_WORKERS", default_value_t = 16)]
    pub workers: usize,
    /// Sustained rate of evictions (workloads, divided custom objects and copies moved off
    /// offline clusters): N/s, N/m, N/h.
    #[arg(long, env = "MERIDIAN_EVICTION_RATE", default_value = "100/s")]
    pub eviction_rate: String,
    /// Evictions allowed in one burst (default: one second's worth of the rate).
    #[arg(long, env = "MERIDIAN_EVICTION_BURST")]
    pub eviction_burst: Option<u32>,
    /// Sustained rate of Kubernetes Events (N/s, N/m, N/h); more are dropped and counted.
    #[arg(long, env = "MERIDIAN_EVENT_RATE", default_value = "50/s")]
    pub event_rate: String,
    /// Events allowed in one burst.
    #[arg(long, env = "MERIDIAN_EVENT_BURST", default_value_t = 500)]
    pub event_burst: u32,
    /// Deadline of each write to the federation API.
    #[arg(long, env = "MERIDIAN_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,
    /// Every workload is re-decided this often even without a change.
    #[arg(long, env = "MERIDIAN_RESYNC_PERIOD", default_value = "5m", value_parser = parse_duration)]
    pub resync_period: Duration,
    /// Distinct workloads the work queue holds at most.
    #[arg(long, env = "MERIDIAN_QUEUE_CAPACITY", default_value_t = 1_000_000)]
    pub queue_capacity: usize,
    /// First wait before a kind a policy names that is not served yet is looked up again
    /// (a change of the CustomResourceDefinitions looks at once); doubles per failure.
    #[arg(long, env = "MERIDIAN_KIND_RETRY_INITIAL", default_value = "1s", value_parser = parse_duration)]
    pub kind_retry_initial: Duration,
    /// Longest wait between two lookups of a kind that is not served yet.
    #[arg(long, env = "MERIDIAN_KIND_RETRY_MAX", default_value = "1m", value_parser = parse_duration)]
    pub kind_retry_max: Duration,
    /// The federation, `/metrics`, leader election, logging.
    #[command(flatten)]
    pub federation: FederationArgs,
}

/// The scheduler's Lease (`meridian-system/fed-scheduler` unless the flags say otherwise).
pub const LEASE_NAME: &str = "fed-scheduler";

impl Args {
    /// The validated loop configuration and metrics address.
    pub fn validate(&self) -> Result<(Config, Option<SocketAddr>), FlagErrors> {
        let mut errors = FlagErrors::new();
        if self.workers == 0 || self.workers > 1024 {
            errors.push(format!("--workers {} must be in 1..=1024", self.workers));
        }
        let rate = match self.eviction_rate.parse::<Rate>() {
            Ok(r) => Some(r),
            Err(e) => {
                errors.push(format!("--eviction-rate: {e}"));
                None
            }
        };
        let event_rate = match self.event_rate.parse::<Rate>() {
            Ok(r) => r,
            Err(e) => {
                errors.push(format!("--event-rate: {e}"));
                Rate::per_second(1.0)
            }
        };
        if self.event_burst == 0 {
            errors.push("--event-burst must be at least 1");
        }
        if self.eviction_burst == Some(0) {
            errors.push("--eviction-burst must be at least 1");
        }
        if self.write_timeout < Duration::from_millis(100) {
            errors.push(format!(
                "--write-timeout {:?} must be at least 100ms",
                self.write_timeout
            ));
        }
        if self.resync_period < Duration::from_secs(1) {
            errors.push(format!(
                "--resync-period {:?} must be at least 1s",
                self.resync_period
            ));
        }
        if self.queue_capacity == 0 {
            errors.push("--queue-capacity must be at least 1");
        }
        if self.kind_retry_initial < Duration::from_millis(100) {
            errors.push(format!(
                "--kind-retry-initial {:?} must be at least 100ms",
                self.kind_retry_initial
            ));
        }
        if self.kind_retry_max < self.kind_retry_initial {
            errors.push(format!(
                "--kind-retry-max {:?} must be at least --kind-retry-initial {:?}",
                self.kind_retry_max, self.kind_retry_initial
            ));
        }
        let metrics = self.federation.check(&mut errors);
        let Some(rate) = rate.filter(|_| errors.is_empty()) else {
            return Err(errors);
        };
        let burst = self.eviction_burst.unwrap_or_else(|| {
            // One second's worth, at least one.
            rate.as_per_second().ceil().clamp(1.0, f64::from(u32::MAX)) as u32
        });
        Ok((
            Config {
                workers: self.workers,
                eviction_rate: rate,
                eviction_burst: burst,
                write_timeout: self.write_timeout,
                resync_period: self.resync_period,
                queue_capacity: self.queue_capacity,
                event_rate,
                event_burst: self.event_burst,
                kind_retry: Backoff {
                    initial: self.kind_retry_initial,
                    max: self.kind_retry_max,
                },
                ..Config::default()
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
    fn defaults() {
        let args = Args::try_parse_from(["fed-scheduler", "--kubeconfig", "k"]).expect("parse");
        let (cfg, metrics) = args.validate().expect("valid");
        assert_eq!(cfg.workers, 16);
        assert_eq!(cfg.eviction_rate, Rate::per_second(100.0));
        assert_eq!(cfg.eviction_burst, 100);
        assert_eq!(cfg.write_timeout, Duration::from_secs(10));
        assert_eq!(cfg.kind_retry, Backoff::default());
        assert_eq!(metrics, Some("127.0.0.1:8081".parse().expect("addr")));
        // How a Lease is named is meridian-runtime's (tested there); which Lease is ours.
        assert_eq!(LEASE_NAME, "fed-scheduler");

        let args = Args::try_parse_from([
            "fed-scheduler",
            "--kubeconfig",
            "k",
            "--eviction-rate",
            "30/m",
            "--metrics-bind-address",
            "off",
        ])
        .expect("parse");
        let (cfg, metrics) = args.validate().expect("valid");
        assert_eq!(
            (cfg.eviction_rate, cfg.eviction_burst),
            (Rate::per_second(0.5), 1)
        );
        assert_eq!(metrics, None);
    }

    #[test]
    fn reports_every_bad_flag() {
        let args = Args::try_parse_from([
            "fed-scheduler",
            "--kubeconfig",
            "k",
            "--workers",
            "0",
            "--eviction-rate",
            "fast",
            "--eviction-burst",
            "0",
            "--write-timeout",
            "1ms",
            "--metrics-bind-address",
            "nope",
            "--event-rate",
            "0/s",
            "--leader-elect-renew-deadline",
            "20s",
            "--kind-retry-initial",
            "10s",
            "--kind-retry-max",
            "1s",
        ])
        .expect("parse");
        let err = args.validate().expect_err("invalid");
        assert_eq!(err.0.len(), 8, "{err}");
    }
}
