//! Command-line flags of the `lb-agent` binary and their validation.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use meridian_runtime::flags::{FlagErrors, bind_address, parse_duration};
use meridian_runtime::telemetry::LogArgs;

use crate::agent::Settings;
use crate::backend::OutlierSettings;
use crate::health::HealthSettings;

/// Meridian lb-agent: the load balancer of one member cluster.
#[derive(Debug, Parser)]
#[command(name = "lb-agent", version)]
pub struct Args {
    /// Kubeconfig of this member cluster (default: in-cluster config, else $KUBECONFIG).
    #[arg(long, env = "LB_AGENT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long)]
    pub context: Option<String>,
    /// Name of this member cluster (must match `cluster` in the configuration).
    #[arg(long, env = "LB_AGENT_CLUSTER")]
    pub cluster: String,
    /// Address every listener binds.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: IpAddr,
    /// HTTP listener port.
    #[arg(long, default_value_t = 8080)]
    pub http_port: u16,
    /// HTTPS listener port: TLS routed by SNI, passed through.
    #[arg(long, default_value_t = 8443)]
    pub https_port: u16,
    /// Peer listener port (TCP and UDP).
    #[arg(long, default_value_t = 8081)]
    pub peer_port: u16,
    /// DNS listener port (UDP and TCP).
    #[arg(long, default_value_t = 5353)]
    pub dns_port: u16,
    /// Where /metrics, /healthz and /readyz are served (empty: not served).
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_addr: String,
    /// Time between active health-check rounds.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub health_interval: Duration,
    /// Time one health check may take.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub health_timeout: Duration,
    /// Consecutive failed checks that take a backend out.
    #[arg(long, default_value_t = 2)]
    pub unhealthy_threshold: u32,
    /// Consecutive passed checks that put it back.
    #[arg(long, default_value_t = 1)]
    pub healthy_threshold: u32,
    /// Consecutive connect failures or 5xx that eject a backend.
    #[arg(long, default_value_t = 5)]
    pub outlier_consecutive: u32,
    /// First ejection period (doubles on repeated ejections, up to 8×).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub outlier_ejection: Duration,
    /// Most local endpoints (or remote agents) of a Service ejected at once, in percent;
    /// one may always be.
    #[arg(long, default_value_t = 50)]
    pub outlier_max_ejection_percent: u32,
    /// Largest HTTP/1 request head in bytes (431 beyond).
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_header_bytes: usize,
    /// Most header fields in an HTTP/1 request (431 beyond).
    #[arg(long, default_value_t = 100)]
    pub max_headers: usize,
    /// Longest HTTP/1 request line in bytes (414 beyond).
    #[arg(long, default_value_t = 8 * 1024)]
    pub max_request_line: usize,
    /// Client connections idle between requests longer than this are closed.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub client_idle_timeout: Duration,
    /// Most client connections open at once (further ones are closed on accept).
    #[arg(long, default_value_t = 16_384)]
    pub max_connections: usize,
    /// UDP flows idle longer than this are closed.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub udp_idle_timeout: Duration,
    /// Upstream connect timeout.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// How long a removed backend may finish in-flight requests and connections.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Retries of idempotent HTTP requests that failed after being sent.
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// Runtime worker threads (0: one per core; 1: a single-threaded runtime).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Read configuration and local endpoints from this JSON file instead of the API
    /// (`{"config": LbConfig, "endpoints": {"ns/svc/port-name": ["ip:port", ...]}}`);
    /// for running without a cluster.
    #[arg(long)]
    pub static_inputs: Option<PathBuf>,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl Args {
    /// Checks the flags together; every problem is reported at once.
    pub fn validate(&self) -> Result<(Settings, Option<SocketAddr>), FlagErrors> {
        let mut problems = FlagErrors::new();
        if self.cluster.is_empty() {
            problems.push("--cluster must not be empty");
        }
        if self.health_timeout >= self.health_interval {
            problems.push("--health-timeout must be shorter than --health-interval");
        }
        if self.unhealthy_threshold == 0 || self.healthy_threshold == 0 {
            problems.push("health thresholds must be at least 1");
        }
        if self.outlier_consecutive == 0 {
            problems.push("--outlier-consecutive must be at least 1");
        }
        if self.outlier_max_ejection_percent > 100 {
            problems.push("--outlier-max-ejection-percent must be at most 100");
        }
        if !(1024..=crate::h1::codec::MAX_HEAD).contains(&self.max_header_bytes) {
            problems.push(format!(
                "--max-header-bytes must be between 1024 and {}",
                crate::h1::codec::MAX_HEAD
            ));
        }
        if !(1..=crate::h1::codec::MAX_HEADERS).contains(&self.max_headers) {
            problems.push(format!(
                "--max-headers must be between 1 and {}",
                crate::h1::codec::MAX_HEADERS
            ));
        }
        if self.max_request_line < 64 || self.max_connections == 0 {
            problems
                .push("--max-request-line must be at least 64 and --max-connections at least 1");
        }
        let metrics_addr = bind_address(&self.metrics_addr).unwrap_or_else(|_| {
            problems.push(format!(
                "--metrics-addr {:?} is not ip:port",
                self.metrics_addr
            ));
            None
        });
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut s = Settings::new(&self.cluster, self.bind);
        s.http_port = self.http_port;
        s.https_port = self.https_port;
        s.peer_port = self.peer_port;
        s.health = HealthSettings {
            interval: self.health_interval,
            timeout: self.health_timeout,
            unhealthy_threshold: self.unhealthy_threshold,
            healthy_threshold: self.healthy_threshold,
        };
        s.outlier = OutlierSettings {
            consecutive: self.outlier_consecutive,
            base_ejection: self.outlier_ejection,
            max_ejection_percent: self.outlier_max_ejection_percent,
        };
        s.limits = crate::agent::Limits {
            max_head: self.max_header_bytes,
            max_headers: self.max_headers,
            max_request_line: self.max_request_line,
            idle_timeout: self.client_idle_timeout,
            max_connections: self.max_connections,
            ..s.limits
        };
        s.udp.idle_timeout = self.udp_idle_timeout;
        s.connect_timeout = self.connect_timeout;
        s.drain_timeout = self.drain_timeout;
        s.retries = self.retries;
        Ok((s, metrics_addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_reports_every_problem() {
        let a = Args::parse_from([
            "lb-agent",
            "--cluster",
            "",
            "--health-timeout",
            "2s",
            "--metrics-addr",
            "nope",
        ]);
        let e = a.validate().unwrap_err().to_string();
        for needle in ["--cluster", "--health-timeout", "--metrics-addr"] {
            assert!(e.contains(needle), "{e}");
        }
    }
}
