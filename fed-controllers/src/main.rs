//! `fed-controllers`: runs the cluster, workload and service controllers against the
//! federation until SIGINT or SIGTERM.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Parser;
use fed_controllers::cli::Args;
use fed_controllers::member_client::{self, Limits};
use fed_controllers::metrics::Metrics;
use fed_controllers::{cluster, service, workload};
use meridian_runtime::endpoints::{Endpoints, Flag};
use meridian_runtime::events::{self, Recorder};
use meridian_runtime::shutdown::Shutdown;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    let args = Args::parse();
    meridian_runtime::telemetry::init(args.log.log_format, "info");
    let (config, metrics_addr) = args.validate()?;
    let service_settings = args.service_settings()?;
    let client_config = args.client_source()?.config().await?;
    // One multiplexed connection to the federation, whatever the number of members.
    let fed = member_client::federation_client(client_config, Limits::federation())
        .context("federation client")?;
    let shutdown = Shutdown::on_signals().context("installing signal handlers")?;

    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    Endpoints::new(
        metrics.clone(),
        Flag::new(ready.clone(), "the federation is not listed yet"),
    )
    .spawn(metrics_addr, &shutdown)
    .await
    .with_context(|| format!("serving metrics on {metrics_addr:?}"))?;
    // One Event buffer and writer for the three controllers (each names itself).
    let recorder = Recorder::spawn(
        fed.clone(),
        cluster::events::COMPONENT,
        events::Settings {
            concurrency: 32,
            ..events::Settings::default()
        },
        metrics.events.clone(),
    );

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
        ..service_settings
    };
    let controllers = async {
        tokio::select! {
            r = cluster::run(fed.clone(), config, metrics.clone(), recorder.clone(), ready) => r.context("cluster controller"),
            r = workload::run(fed.clone(), workload_settings, metrics.workload.clone(), recorder.clone()) => r.context("workload controller"),
            r = service::run(fed, service_settings, metrics, recorder) => r.context("service controller"),
        }
    };
    if let Some(r) = shutdown.run_until(controllers).await {
        r?;
    }
    Ok(())
}
