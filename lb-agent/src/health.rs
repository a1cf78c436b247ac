//! Active health checks: a TCP connect to every local endpoint, an ICMP-refusal probe to
//! every local UDP endpoint and a peer `HEALTH` to every remote agent, each round
//! concurrently, flipping backends after consecutive results.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::agent::Shared;
use crate::backend::{Backend, BackendKey, PeerCounts};
use crate::serving;
use crate::table::apply_peer_counts;

/// Active check settings.
#[derive(Clone, Copy, Debug)]
pub struct HealthSettings {
    /// Time between rounds.
    pub interval: Duration,
    /// Time one check may take.
    pub timeout: Duration,
    /// Consecutive failures that mark a backend unhealthy.
    pub unhealthy_threshold: u32,
    /// Consecutive successes that mark it healthy again.
    pub healthy_threshold: u32,
}

impl Default for HealthSettings {
    /// A dead backend is out within interval × failures + timeout = 2.5 s.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            unhealthy_threshold: 2,
            healthy_threshold: 1,
        }
    }
}

impl HealthSettings {
    /// How long a `HEALTH` answer counts as current.
    pub fn peer_fresh(&self) -> Duration {
        self.interval * 3 + self.timeout
    }
}

async fn check(backend: Arc<Backend>, me: String, timeout: Duration) -> (Arc<Backend>, bool) {
    let ok = match &backend.key {
        BackendKey::Local(addr) => {
            matches!(
                tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await,
                Ok(Ok(_))
            )
        }
        BackendKey::LocalUdp(addr) => crate::udp::probe(*addr, timeout).await,
        BackendKey::Remote { peer, .. } => {
            match crate::peer::health_check(*peer, &me, timeout).await {
                Some(counts) => {
                    *backend
                        .peer_counts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(PeerCounts {
                        at: Instant::now(),
                        counts: Arc::new(counts),
                    });
                    true
                }
                None => false,
            }
        }
    };
    (backend, ok)
}

/// Runs check rounds forever.
pub async fn run(shared: Arc<Shared>) {
    let settings = shared.settings.health;
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let table = shared.table.borrow().clone();
        let mut round = JoinSet::new();
        for b in &table.backends {
            round.spawn(check(
                b.clone(),
                shared.settings.cluster.clone(),
                settings.timeout,
            ));
        }
        while let Some(done) = round.join_next().await {
            let Ok((backend, ok)) = done else { continue };
            if backend.record_check(ok, settings.unhealthy_threshold, settings.healthy_threshold) {
                tracing::info!(backend = %backend.label(), healthy = ok, "health changed");
            }
            if backend.cluster().is_some() && ok {
                apply_peer_counts(&table, &backend, settings.peer_fresh());
            }
            shared.metrics.set_upstream(
                backend.label(),
                backend.is_healthy() && !backend.is_ejected(),
            );
        }
        // Ejections expire with time, so the snapshot is recomputed every round.
        let current = shared.table.borrow().clone();
        serving::publish(
            &shared.serving_tx,
            serving::compute(&current, crate::backend::now_ms()),
        );
    }
}
