//! Failover time of the elected components. With two schedulers and two controllers
//! running against one federation of two simulated clusters, each run kills the leader of
//! each component with SIGKILL, scales the app at that moment, and times the next
//! decision written: the Placement for the scheduler, the members' copies for the
//! controllers. Each kill comes at a random point of the leader's renewal cycle. The
//! killed replica is replaced by a fresh standby before the next run. Prints every run,
//! then the median, p99 (nearest rank: with few runs, the largest) and the takeover alone
//! (kill to the survivor's `acquireTime`).
//!
//! ```sh
//! cargo build -p federation-apiserver -p cluster-sim -p fed-scheduler -p fed-controllers -p fedctl
//! cargo run -p meridian-e2e --example failover_bench -- --runs 10
//! ```

use std::time::Duration;

use anyhow::Context as _;
use meridian_e2e::ha::{Component, Ha, poll, quantile};

/// The defaults' retry period: the leader renews this often.
const RETRY: Duration = Duration::from_secs(2);

/// A delay in `[0, within)` drawn from the clock's nanoseconds (enough spread for a
/// few runs; no generator needed).
fn phase(within: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    within.mul_f64(f64::from(nanos) / 1e9)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut runs = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => {
                runs = args
                    .next()
                    .context("--runs needs a number")?
                    .parse()
                    .context("--runs")?;
            }
            other => anyhow::bail!("unknown argument {other:?} (--runs N)"),
        }
    }
    let mut ha = Ha::start(4).await;
    println!(
        "defaults: --leader-elect-lease-duration 15s --leader-elect-renew-deadline 10s --leader-elect-retry-period 2s"
    );
    let mut results: Vec<(Component, Vec<Duration>, Vec<Duration>)> = vec![
        (Component::Scheduler, Vec::new(), Vec::new()),
        (Component::Controllers, Vec::new(), Vec::new()),
    ];
    let mut replicas = 4;
    for run in 1..=runs {
        for (c, decided, took) in &mut results {
            replicas = if replicas == 4 { 6 } else { 4 };
            // Kill at a random point of the leader's renewal cycle: a run's steps would
            // otherwise keep the same phase from run to run and sample one case only.
            tokio::time::sleep(phase(RETRY)).await;
            let (f, dead) = ha.kill_leader(*c, replicas, Duration::from_secs(60)).await;
            println!(
                "run {run:>2} {:<15} killed {dead}: taken over after {:>6.2}s, decision written after {:>6.2}s",
                c.binary(),
                (f.took_over - f.killed).as_secs_f64(),
                f.latency().as_secs_f64()
            );
            decided.push(f.latency());
            took.push(f.took_over - f.killed);
            // A fresh standby, answering, before the next kill.
            let identity = ha.spawn(*c);
            let fresh = ha
                .replicas(*c)
                .iter()
                .find(|r| r.identity == identity)
                .context("spawned")?;
            poll(
                "the new standby answers",
                Duration::from_secs(60),
                || async {
                    fresh
                        .get("/readyz")
                        .filter(|(_, b)| b.starts_with("ok: standby"))
                },
            )
            .await;
        }
    }
    println!();
    println!(
        "component        runs  kill→decision median  p99     max    | kill→takeover median  max"
    );
    for (c, decided, took) in &results {
        println!(
            "{:<15} {:>5}  {:>20.2}s {:>6.2}s {:>6.2}s | {:>20.2}s {:>6.2}s",
            c.binary(),
            decided.len(),
            quantile(decided, 0.5).as_secs_f64(),
            quantile(decided, 0.99).as_secs_f64(),
            quantile(decided, 1.0).as_secs_f64(),
            quantile(took, 0.5).as_secs_f64(),
            quantile(took, 1.0).as_secs_f64(),
        );
    }
    Ok(())
}
