//! `federation-apiserver`: serves Meridian's Kubernetes-compatible federation API.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use anyhow::Context;
use clap::Parser;
use federation_apiserver::cli::{Args, start};
use meridian_runtime::shutdown::Shutdown;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    let args = Args::parse();
    meridian_runtime::telemetry::init(args.log.log_format, "info");
    let shutdown = Shutdown::on_signals().context("installing signal handlers")?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (started, store) = start(&args, rx).await?;
    tracing::info!(address = %started.addr, kubeconfig = %started.kubeconfig.display(), "serving");
    println!("federation-apiserver listening on https://{}", started.addr);
    println!("export KUBECONFIG={}", started.kubeconfig.display());
    shutdown.triggered().await;
    let _ = tx.send(true);
    drop(store);
    Ok(())
}
