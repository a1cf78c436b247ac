//! `fed-scheduler`: decides where federated workloads run and writes their Placements,
//! until SIGINT or SIGTERM. With leader election on (the default) several replicas may
//! run: one writes, the others keep their caches warm; a replica that loses its Lease
//! exits with status 1 and is restarted as a standby.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Parser;
use fed_scheduler::runtime;
use fed_scheduler::runtime::cli::{Args, LEASE_NAME};
use fed_scheduler::runtime::metrics::Metrics;
use meridian_runtime::endpoints::{Endpoints, Flag};
use meridian_runtime::leader::{Election, RunError};
use meridian_runtime::shutdown::Shutdown;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    let args = Args::parse();
    meridian_runtime::telemetry::init(args.log.log_format, "info");
    let (config, metrics_addr) = args.validate()?;
    let source = args.client_source()?;
    let client = source.client().await?;
    // The Lease has a client of its own, so the scheduler's traffic never holds up a
    // renewal.
    let lease_client = source.client().await?;
    let shutdown = Shutdown::on_signals().context("installing signal handlers")?;

    let metrics = Arc::new(Metrics::new());
    // Everything but the Lease goes through the gate, which refuses writes (Placements,
    // Events) unless this replica leads.
    let election = Election::kube(
        args.leader.settings(LEASE_NAME),
        lease_client,
        metrics.election.clone(),
    );
    let gate = election.gate().clone();
    let ready = Arc::new(AtomicBool::new(false));
    Endpoints::new(
        metrics.clone(),
        gate.readiness(Flag::new(ready.clone(), "caches are not synced yet")),
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
    let writes = gate.client(client, "federation");
    let scheduler = runtime::run(writes, config, metrics, ready, gate);
    match election.run(&shutdown, scheduler).await {
        Ok(_) => Ok(()),
        Err(RunError::Lost(lost)) => Err(lost.into()),
        Err(RunError::Work(e)) => Err(anyhow::Error::new(e).context("scheduler")),
    }
}
