//! Micro benchmark of the embedded backend: durable create throughput and paced write latency.
//!
//! Run with `cargo run --release -p meridian-store --example store_bench`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use meridian_store::{EmbeddedStore, Storage};
use tokio::time::MissedTickBehavior;

const WRITERS: usize = 64;
const WRITES_PER_WRITER: usize = 500;
const VALUE_SIZE: usize = 1024;
const PACED_RATE: u64 = 1_000;
const PACED_SECONDS: u64 = 3;

type BenchResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn main() -> BenchResult {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> BenchResult {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(EmbeddedStore::open(dir.path())?);
    let value = Bytes::from(vec![0x5a; VALUE_SIZE]);

    // A point read of a key written beforehand, repeated while the writers run, shows whether
    // reads wait for group commits.
    store.create("/bench/read-probe", value.clone()).await?;
    let reading = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = {
        let store = Arc::clone(&store);
        let reading = Arc::clone(&reading);
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            // Paced, so the probe measures reads rather than competing for the two cores.
            let mut ticks = tokio::time::interval(Duration::from_millis(1));
            while reading.load(std::sync::atomic::Ordering::Relaxed) {
                ticks.tick().await;
                let started = Instant::now();
                store.get("/bench/read-probe").await?;
                latencies.push(started.elapsed());
            }
            Ok::<_, meridian_store::StoreError>(latencies)
        })
    };

    // Throughput: every writer issues its next create as soon as the previous one is durable.
    let started = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            let value = value.clone();
            tokio::spawn(async move {
                for i in 0..WRITES_PER_WRITER {
                    store
                        .create(&format!("/bench/throughput/{w:02}/{i:05}"), value.clone())
                        .await?;
                }
                Ok::<_, meridian_store::StoreError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    reading.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut reads = reader.await??;
    let writes = WRITERS * WRITES_PER_WRITER;
    println!(
        "throughput: {writes} durable creates of {VALUE_SIZE} B from {WRITERS} writers in {:.2} s = {:.0} creates/s ({} commits, {:.1} writes/commit)",
        elapsed.as_secs_f64(),
        writes as f64 / elapsed.as_secs_f64(),
        store.commit_count(),
        store.write_count() as f64 / store.commit_count().max(1) as f64,
    );

    reads.sort_unstable();
    println!(
        "reads during the throughput run: {} gets, median {:.3} ms, p99 {:.3} ms",
        reads.len(),
        quantile(&reads, 0.5).as_secs_f64() * 1e3,
        quantile(&reads, 0.99).as_secs_f64() * 1e3,
    );

    // Latency at a fixed rate, measured from each write's scheduled start so a stall also
    // counts against the writes that should have started during it.
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / PACED_RATE));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let total = PACED_RATE * PACED_SECONDS;
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let scheduled = ticks.tick().await;
        let store = Arc::clone(&store);
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            store
                .create(&format!("/bench/paced/{i:06}"), value)
                .await
                .map(|_| scheduled.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    for task in tasks {
        latencies.push(task.await??);
    }
    latencies.sort_unstable();
    let at = |q: f64| quantile(&latencies, q);
    println!(
        "latency at {PACED_RATE} creates/s for {PACED_SECONDS} s: median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
    );
    store.close().await?;
    Ok(())
}

/// The `q` quantile of sorted durations (zero if there are none).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}
