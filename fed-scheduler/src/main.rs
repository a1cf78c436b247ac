//! `fed-scheduler`: decides where federated workloads run and writes their Placements,
//! until Ctrl-C.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Parser;
use fed_scheduler::runtime;
use fed_scheduler::runtime::cli::Args;
use fed_scheduler::runtime::metrics::Metrics;
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
    let client = kube::Client::try_from(client_config).context("federation client")?;

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
                not_ready: "caches are not synced yet",
            },
        ));
    }

    tracing::info!(
        workers = config.workers,
        eviction_rate = %config.eviction_rate,
        eviction_burst = config.eviction_burst,
        "scheduler starting"
    );
    tokio::select! {
        r = runtime::run(client, config, metrics, ready) => r.context("scheduler")?,
        s = tokio::signal::ctrl_c() => {
            s.context("waiting for Ctrl-C")?;
            tracing::info!("interrupted; stopping");
        }
    }
    Ok(())
}
