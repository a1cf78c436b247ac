//! `federation-apiserver`: serves Meridian's Kubernetes-compatible federation API.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use federation_apiserver::cli::{Args, start};
use meridian_runtime::shutdown::Shutdown;

fn main() -> anyhow::Result<()> {
    meridian_runtime::process::main(|a: &Args| a.log.log_format, serve)
}

async fn serve(args: Args, shutdown: Shutdown) -> anyhow::Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (started, store) = start(&args, rx).await?;
    tracing::info!(address = %started.addr, "serving");
    println!("federation-apiserver listening on https://{}", started.addr);
    match &started.kubeconfig {
        Some(path) => println!("export KUBECONFIG={}", path.display()),
        // Said so that nobody waits for a line that will not come.
        None => println!("# no admin kubeconfig: no admin token (credentials from files)"),
    }
    shutdown.triggered().await;
    let _ = tx.send(true);
    drop(store);
    Ok(())
}
