//! `cluster-sim`: run a fleet of simulated Kubernetes clusters, or inject faults into one.

// The fleet stands in for many API servers at once; mimalloc keeps their allocation cheap.
#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use clap::Parser;
use cluster_sim::cli::{Cli, Command, ctl, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    let cli = Cli::parse();
    meridian_runtime::telemetry::init(cli.run.log.log_format, "warn");
    match cli.command {
        Some(Command::Ctl(c)) => ctl(c).await,
        None => run(cli.run).await,
    }
}
