//! `fed-controllers`: runs the cluster, workload and service controllers against the federation until Ctrl-C.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Parser;
use fed_controllers::cli::Args;
use fed_controllers::metrics::Metrics;
use fed_controllers::{cluster, service, workload};
use kube::config::{KubeConfigOptions, Kubeconfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let (config, metrics_addr) = args.validate()?;

    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let client_config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .context("federation kubeconfig")?;
    // One multiplexed connection to the federation, whatever the number of members.
    let fed = fed_controllers::member_client::federation_client(
        client_config,
        fed_controllers::member_client::Limits::federation(),
    )
    .context("federation client")?;

    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
        tokio::spawn(meridian_endpoints::serve(
            listener,
            meridian_endpoints::State {
                metrics: metrics.clone(),
                ready: ready.clone(),
                not_ready: "the federation is not listed yet",
            },
        ));
    }

    tracing::info!(
        probe_period = ?config.settings.probe_period,
        probe_timeout = ?config.settings.probe_timeout,
        failure_threshold = config.settings.thresholds.failure,
        success_threshold = config.settings.thresholds.success,
        mass_failure_share = config.mass_failure_share,
        "cluster controller starting"
    );
    // One set of member clients for all controllers: one connection per member.
    let workload_settings = workload::Settings {
        clients: config.clients.clone(),
        ..args.workload_settings()
    };
    let service_settings = service::Settings {
        clients: config.clients.clone(),
        ..args.service_settings().map_err(anyhow::Error::msg)?
    };
    tokio::select! {
        r = cluster::run(fed.clone(), config, metrics.clone(), ready) => r.context("cluster controller")?,
        r = workload::run(fed.clone(), workload_settings, metrics.workload.clone()) => r.context("workload controller")?,
        r = service::run(fed, service_settings, metrics) => r.context("service controller")?,
        s = tokio::signal::ctrl_c() => {
            s.context("waiting for Ctrl-C")?;
            tracing::info!("interrupted; stopping");
        }
    }
    Ok(())
}
