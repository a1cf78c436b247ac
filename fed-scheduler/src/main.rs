//! `fed-scheduler`: decides where federated workloads run and writes their Placements,
//! until SIGINT or SIGTERM. With leader election on (the default) several replicas may
//! run: one writes, the others keep their caches warm; a replica that loses its Lease
//! exits with status 1 and is restarted as a standby.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use fed_scheduler::runtime;
use fed_scheduler::runtime::cli::{Args, LEASE_NAME};
use fed_scheduler::runtime::metrics::Metrics;
use meridian_runtime::endpoints::{Endpoints, Flag};
use meridian_runtime::shutdown::Shutdown;

fn main() -> anyhow::Result<()> {
    meridian_runtime::process::main(|a: &Args| a.federation.log.log_format, schedule)
}

async fn schedule(args: Args, shutdown: Shutdown) -> anyhow::Result<()> {
    let (config, metrics_addr) = args.validate()?;
    let client_config = args.federation.client_source()?.config().await?;
    let client = kube::Client::try_from(client_config.clone()).context("federation client")?;

    let metrics = Arc::new(Metrics::new());
    // Everything but the Lease goes through the gate, which refuses writes (Placements,
    // Events) unless this replica leads.
    let election =
        args.federation
            .election(&client_config, LEASE_NAME, metrics.election.clone())?;
    let gate = election.gate().clone();
    let ready = Arc::new(AtomicBool::new(false));
    Endpoints::new(
        metrics.clone(),
        gate.readiness(Flag::new(ready.clone(), "caches are not synced yet")),
    )
    .spawn(metrics_addr, &shutdown)
    .await?;

    tracing::info!(
        workers = config.workers,
        eviction_rate = %config.eviction_rate,
        eviction_burst = config.eviction_burst,
        "scheduler starting"
    );
    let writes = gate.client(client, "federation");
    let scheduler = async {
        let r = runtime::run(writes, config, metrics, ready, gate).await;
        r.context("scheduler")
    };
    election.run_to_end(&shutdown, scheduler).await
}
