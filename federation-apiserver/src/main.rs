//! `federation-apiserver`: serves Meridian's Kubernetes-compatible federation API.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use clap::Parser;
use federation_apiserver::cli::{Args, start};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    meridian_alloc::disable_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (started, store) = start(&args, rx).await?;
    tracing::info!(address = %started.addr, kubeconfig = %started.kubeconfig.display(), "serving");
    println!("federation-apiserver listening on https://{}", started.addr);
    println!("export KUBECONFIG={}", started.kubeconfig.display());
    wait_for_signal().await;
    tracing::info!("shutting down");
    let _ = tx.send(true);
    drop(store);
    Ok(())
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
