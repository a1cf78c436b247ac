//! `fed-controllers`: runs the cluster, workload and service controllers against the
//! federation until SIGINT or SIGTERM. With leader election on (the default) several
//! replicas may run: one runs the controllers, the others wait for its Lease; a replica
//! that loses its Lease exits with status 1 and is restarted as a standby.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use fed_controllers::cli::{Args, LEASE_NAME};
use fed_controllers::member_client::{self, Limits, MemberClients};
use fed_controllers::metrics::Metrics;
use fed_controllers::{cluster, copies, fleet, service, workload};
use meridian_runtime::endpoints::{Endpoints, Flag};
use meridian_runtime::events::{self, Recorder};
use meridian_runtime::shutdown::Shutdown;

fn main() -> anyhow::Result<()> {
    meridian_runtime::process::main(|a: &Args| a.federation.log.log_format, control)
}

async fn control(args: Args, shutdown: Shutdown) -> anyhow::Result<()> {
    let (mut config, metrics_addr) = args.validate()?;
    let service_settings = args.service_settings()?;
    let client_config = args.federation.client_source()?.config().await?;
    let metrics = Arc::new(Metrics::new());
    let election =
        args.federation
            .election(&client_config, LEASE_NAME, metrics.election.clone())?;
    // One multiplexed connection to the federation, whatever the number of members.
    let fed = member_client::federation_client(client_config, Limits::federation())
        .context("federation client")?;
    let gate = election.gate().clone();
    // Every write, to the federation (Events included) or to a member, passes the gate:
    // refused unless this replica leads.
    let fed = gate.client(fed, "federation");
    config.clients = MemberClients::gated(config.clients.limits(), gate.clone());
    let ready = Arc::new(AtomicBool::new(false));
    Endpoints::new(
        metrics.clone(),
        gate.readiness(Flag::new(ready.clone(), "the federation is not listed yet")),
    )
    .spawn(metrics_addr, &shutdown)
    .await?;
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
    // One set of member clients for all controllers (one connection per member), and one
    // budget of member syncs.
    let mut workload_settings = args.workload_settings();
    workload_settings.fleet.clients = config.clients.clone();
    let mut service_settings = service_settings;
    service_settings.fleet = workload_settings.fleet.clone();
    let copy_settings = workload_settings.fleet.clone();
    // The controllers start when this replica leads (a standby lists nothing: its
    // member connections and caches would double the load on every member).
    let controllers = async {
        gate.leading().await;
        tracing::info!("leading: starting the controllers");
        // One watch of the override policies for the copy, workload and service paths.
        let overrides = fleet::Overrides::start(fed.clone());
        // Which of the copy and workload paths writes each dependency object.
        let writers = Arc::new(fed_controllers::dep_writers::DepWriters::default());
        tokio::select! {
            r = cluster::run(fed.clone(), config, metrics.clone(), recorder.clone(), ready) => r.context("cluster controller"),
            r = workload::run(fed.clone(), workload_settings, metrics.workload.clone(), recorder.clone(), overrides.clone(), writers.clone()) => r.context("workload controller"),
            r = copies::controller::run(fed.clone(), copy_settings, overrides.clone(), writers) => r.context("copy controller"),
            r = service::run(fed, service_settings, metrics, recorder, overrides) => r.context("service controller"),
        }
    };
    election.run_to_end(&shutdown, controllers).await
}
