//! `lb-agent`: the load balancer of one member cluster, fed by that cluster's API.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use lb_agent::cli::Args;
use lb_agent::metrics::Metrics;
use lb_agent::{Agent, Inputs};
use meridian_runtime::shutdown::Shutdown;
use tokio::sync::watch;

fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    let args = Args::parse();
    meridian_runtime::telemetry::init(args.log.log_format, "info");
    // One worker: a current-thread runtime does the same work without cross-thread wake-ups.
    let mut runtime = if args.workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if args.workers > 1 {
        runtime.worker_threads(args.workers);
    }
    runtime.enable_all().build()?.block_on(run(args))
}

async fn client(args: &Args) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let options = kube::config::KubeConfigOptions {
                context: args.context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .context("member kubeconfig")?
        }
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig and no in-cluster or default kubeconfig")?,
    };
    kube::Client::try_from(config).context("member client")
}

async fn run(args: Args) -> anyhow::Result<()> {
    let (settings, metrics_addr) = args.validate()?;
    let shutdown = Shutdown::on_signals().context("installing signal handlers")?;
    let metrics = Arc::new(Metrics::default());
    let (inputs_tx, inputs_rx) = watch::channel(Inputs::default());
    let source = match &args.static_inputs {
        Some(path) => {
            inputs_tx.send_replace(lb_agent::static_inputs::load(path, &args.cluster)?);
            None
        }
        None => {
            let client = client(&args).await?;
            Some(tokio::spawn(lb_agent::source::run(
                client,
                args.cluster.clone(),
                inputs_tx,
            )))
        }
    };
    let agent = Agent::start(settings, inputs_rx, metrics.clone())
        .await
        .context("starting listeners")?;
    lb_agent::status::endpoints(metrics.clone(), agent.status.clone())
        .spawn(metrics_addr, &shutdown)
        .await
        .with_context(|| format!("serving metrics on {metrics_addr:?}"))?;
    let dns_addr = std::net::SocketAddr::new(args.bind, args.dns_port);
    // One UDP socket per runtime worker.
    let udp_sockets = match args.workers {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let _dns = lb_agent::dns_feed::start(
        dns_addr,
        udp_sockets,
        agent.serving.clone(),
        metrics.clone(),
    )
    .await
    .with_context(|| format!("binding DNS on {dns_addr}"))?;
    tracing::info!(%dns_addr, "answering DNS for the federation zone");

    shutdown.triggered().await;
    drop(source);
    drop(agent);
    Ok(())
}
