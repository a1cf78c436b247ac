//! The flags every elected component of the federation takes (`fed-scheduler`,
//! `fed-controllers`): where the federation API is, where its endpoints are served, leader
//! election and logging, checked the same way everywhere.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::client::{ClientError, Source};
use crate::flags::{FlagErrors, bind_address};
use crate::leader::{Election, ElectionMetrics, LeaderElectionArgs};
use crate::telemetry::LogArgs;

/// `#[command(flatten)]` into a component's flags. The metrics address defaults to
/// `127.0.0.1:8080`; a second component on the same host picks another port with
/// `#[command(mut_arg("metrics_bind_address", |a| a.default_value("127.0.0.1:8081")))]`.
#[derive(Debug, Clone, clap::Args)]
pub struct FederationArgs {
    /// Kubeconfig of the federation API server (default: the pod's service account).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig (default: its current context).
    #[arg(long, env = "MERIDIAN_CONTEXT")]
    pub context: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (plain HTTP); `off` disables.
    #[arg(
        long,
        env = "MERIDIAN_METRICS_BIND_ADDRESS",
        default_value = "127.0.0.1:8080"
    )]
    pub metrics_bind_address: String,
    /// Leader election (several replicas, one writing).
    #[command(flatten)]
    pub leader: LeaderElectionArgs,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl FederationArgs {
    /// Where the federation client's configuration comes from.
    pub fn client_source(&self) -> Result<Source, ClientError> {
        Source::from_flags(self.kubeconfig.as_deref(), self.context.as_deref())
    }

    /// The component's election over its Lease (`name` unless the flags say otherwise),
    /// on a federation connection of its own built from `config`, so the component's
    /// traffic (watches, writes) never holds up a renewal.
    pub fn election(
        &self,
        config: &kube::Config,
        name: &str,
        metrics: ElectionMetrics,
    ) -> Result<Election, ClientError> {
        let client = kube::Client::try_from(config.clone()).map_err(ClientError::Build)?;
        Ok(Election::kube(self.leader.settings(name), client, metrics))
    }

    /// Notes what is wrong with these flags in `errors`; the metrics address (`None`: off,
    /// or not valid).
    pub fn check(&self, errors: &mut FlagErrors) -> Option<SocketAddr> {
        self.leader.check(errors);
        bind_address(&self.metrics_bind_address).unwrap_or_else(|e| {
            errors.push(format!(
                "--metrics-bind-address {:?}: {e}",
                self.metrics_bind_address
            ));
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    #[command(mut_arg("metrics_bind_address", |a| a.default_value("127.0.0.1:8081")))]
    struct Other {
        #[command(flatten)]
        federation: FederationArgs,
    }

    #[derive(Debug, clap::Parser)]
    struct Default {
        #[command(flatten)]
        federation: FederationArgs,
    }

    #[test]
    fn defaults_per_component_and_every_problem_noted() {
        let mut errors = FlagErrors::new();
        let d = Default::try_parse_from(["d", "--kubeconfig", "k"]).expect("flags");
        assert_eq!(
            d.federation.check(&mut errors),
            Some("127.0.0.1:8080".parse().expect("addr"))
        );
        let o = Other::try_parse_from(["o", "--kubeconfig", "k"]).expect("flags");
        assert_eq!(
            o.federation.check(&mut errors),
            Some("127.0.0.1:8081".parse().expect("addr"))
        );
        assert!(errors.is_empty(), "{errors}");

        let bad = Default::try_parse_from([
            "d",
            "--metrics-bind-address",
            "nope",
            "--leader-elect-retry-period",
            "0s",
        ])
        .expect("flags");
        assert_eq!(bad.federation.check(&mut errors), None);
        assert_eq!(errors.0.len(), 2, "{errors}");
        assert!(
            errors
                .0
                .iter()
                .any(|e| e.contains("--metrics-bind-address"))
        );
    }
}
