//! `fed-scheduler`: decides where federated workloads run and writes their Placements,
//! until SIGINT or SIGTERM.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Parser;
use fed_scheduler::runtime;
use fed_scheduler::runtime::cli::Args;
use fed_scheduler::runtime::metrics::Metrics;
use meridian_runtime::endpoints::{Endpoints, Flag};
use meridian_runtime::shutdown::Shutdown;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    let args = Args::parse();
    meridian_runtime::telemetry::init(args.log.log_format, "info");
    let (config, metrics_addr) = args.validate()?;
    let client = args.client_source()?.client().await?;
    let shutdown = Shutdown::on_signals().context("installing signal handlers")?;

    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    Endpoints::new(
        metrics.clone(),
        Flag::new(ready.clone(), "caches are not synced yet"),
    )
    .spawn(metrics_addr, &shutdown)
    .await
    .with_context(|| format!("serving metrics on {metrics_addr:?}"))?;

    tracing::info!(
        workers = config.workers,
        eviction_rate = %config.eviction_rate,
        eviction_burst = config.eviction_burst,
        "scheduler starting"
    );
    if let Some(r) = shutdown
        .run_until(runtime::run(client, config, metrics, ready))
        .await
    {
        r.context("scheduler")?;
    }
    Ok(())
}
