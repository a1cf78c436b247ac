//! One upstream the agent can send traffic to (a local endpoint or a remote lb-agent) and
//! its shared state: in-flight count, active-check health, passive outlier ejection,
//! draining and its idle upstream connections.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::upstream::Pools;

/// Milliseconds since the process's first call: a cheap clock for atomics.
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Where a backend is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BackendKey {
    /// A ready endpoint of a local pod (TCP).
    Local(SocketAddr),
    /// A ready UDP endpoint of a local pod: no active check can reach it, so only passive
    /// failures (ICMP port unreachable, silence) count.
    LocalUdp(SocketAddr),
    /// Another member's lb-agent.
    Remote {
        /// Its cluster.
        cluster: String,
        /// Its http listener.
        http: SocketAddr,
        /// Its peer listener.
        peer: SocketAddr,
    },
}

/// Passive outlier-ejection settings.
#[derive(Clone, Copy, Debug)]
pub struct OutlierSettings {
    /// Consecutive connect failures or 5xx answers that eject a backend.
    pub consecutive: u32,
    /// First ejection period; doubled on each ejection in a row, up to 8×.
    pub base_ejection: Duration,
    /// Most backends of one tier ejected at once, in percent (Envoy's
    /// `max_ejection_percent`); one may always be.
    pub max_ejection_percent: u32,
}

impl Default for OutlierSettings {
    fn default() -> Self {
        Self {
            consecutive: 5,
            base_ejection: Duration::from_secs(5),
            max_ejection_percent: 50,
        }
    }
}

impl OutlierSettings {
    /// Whether one more of `len` backends may be ejected while `ejected` already are.
    pub fn may_eject(&self, ejected: usize, len: usize) -> bool {
        let cap = (len * self.max_ejection_percent.min(100) as usize / 100).max(1);
        ejected < cap
    }
}

/// The last `HEALTH` answer of a remote agent: ready endpoints per `ns/svc`.
#[derive(Clone, Debug)]
pub struct PeerCounts {
    /// When it was received.
    pub at: Instant,
    /// `ns/svc` → ready local endpoints there.
    pub counts: Arc<HashMap<String, u32>>,
}

/// Shared state of one backend.
pub struct Backend {
    /// Where it is.
    pub key: BackendKey,
    /// Requests or connections in flight.
    active: AtomicU32,
    /// Passes active health checks (starts healthy: the API says it is ready).
    healthy: AtomicBool,
    check_failures: AtomicU32,
    check_successes: AtomicU32,
    consecutive_errors: AtomicU32,
    ejected_until: AtomicU64,
    ejections_in_row: AtomicU32,
    draining: AtomicBool,
    killed: watch::Sender<bool>,
    /// Idle upstream connections.
    pub pools: Pools,
    /// Remote agents: the last `HEALTH` answer.
    pub peer_counts: Mutex<Option<PeerCounts>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("key", &self.key)
            .field("active", &self.active())
            .field("healthy", &self.is_healthy())
            .finish()
    }
}

/// Decrements a backend's in-flight count when dropped.
#[derive(Debug)]
pub struct InFlight(pub Arc<Backend>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Backend {
    /// A fresh backend.
    pub fn new(key: BackendKey) -> Arc<Self> {
        Arc::new(Self {
            key,
            active: AtomicU32::new(0),
            healthy: AtomicBool::new(true),
            check_failures: AtomicU32::new(0),
            check_successes: AtomicU32::new(0),
            consecutive_errors: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            ejections_in_row: AtomicU32::new(0),
            draining: AtomicBool::new(false),
            killed: watch::channel(false).0,
            pools: Pools::default(),
            peer_counts: Mutex::new(None),
        })
    }

    /// The address traffic of `tcp` kind goes to: the endpoint, or the remote's peer port.
    pub fn tcp_addr(&self) -> SocketAddr {
        match &self.key {
            BackendKey::Local(a) | BackendKey::LocalUdp(a) => *a,
            BackendKey::Remote { peer, .. } => *peer,
        }
    }

    /// The address HTTP goes to: the endpoint, or the remote's http port.
    pub fn http_addr(&self) -> SocketAddr {
        match &self.key {
            BackendKey::Local(a) | BackendKey::LocalUdp(a) => *a,
            BackendKey::Remote { http, .. } => *http,
        }
    }

    /// Remote agent's cluster name.
    pub fn cluster(&self) -> Option<&str> {
        match &self.key {
            BackendKey::Local(_) | BackendKey::LocalUdp(_) => None,
            BackendKey::Remote { cluster, .. } => Some(cluster),
        }
    }

    /// A label for logs and metrics.
    pub fn label(&self) -> String {
        match &self.key {
            BackendKey::Local(a) => a.to_string(),
            BackendKey::LocalUdp(a) => format!("udp/{a}"),
            BackendKey::Remote { cluster, .. } => format!("cluster/{cluster}"),
        }
    }

    /// In-flight requests and connections.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    /// Counts one request or connection until the guard is dropped.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.active.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Passes active health checks.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// May take new traffic at `now` (ms of [`now_ms`]).
    pub fn available(&self, now: u64) -> bool {
        self.is_healthy()
            && !self.draining.load(Ordering::Relaxed)
            && self.ejected_until.load(Ordering::Relaxed) <= now
    }

    /// Records an active check; returns whether the healthy flag changed.
    pub fn record_check(&self, ok: bool, unhealthy_after: u32, healthy_after: u32) -> bool {
        if ok {
            self.check_failures.store(0, Ordering::Relaxed);
            let n = self.check_successes.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= healthy_after && !self.healthy.swap(true, Ordering::AcqRel) {
                // A backend that passes checks again starts with a clean outlier record.
                self.ejected_until.store(0, Ordering::Relaxed);
                self.consecutive_errors.store(0, Ordering::Relaxed);
                return true;
            }
        } else {
            self.check_successes.store(0, Ordering::Relaxed);
            let n = self.check_failures.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= unhealthy_after && self.healthy.swap(false, Ordering::AcqRel) {
                self.pools.clear();
                return true;
            }
        }
        false
    }

    /// A request or connection succeeded.
    pub fn record_success(&self) {
        if self.consecutive_errors.load(Ordering::Relaxed) != 0 {
            self.consecutive_errors.store(0, Ordering::Relaxed);
        }
        if self.ejections_in_row.load(Ordering::Relaxed) != 0
            && self.ejected_until.load(Ordering::Relaxed) <= now_ms()
        {
            self.ejections_in_row.store(0, Ordering::Relaxed);
        }
    }

    /// A connect failure or 5xx; returns true when this ejects the backend. `may_eject`
    /// is asked only when the failure would eject: false keeps it in (the ejection cap).
    pub fn record_failure(
        &self,
        settings: &OutlierSettings,
        may_eject: impl FnOnce() -> bool,
    ) -> bool {
        let n = self.consecutive_errors.fetch_add(1, Ordering::AcqRel) + 1;
        if n < settings.consecutive.max(1) {
            return false;
        }
        if !may_eject() {
            // Kept at the threshold: it is ejected at its next failure once room is made.
            self.consecutive_errors
                .store(settings.consecutive.max(1) - 1, Ordering::Relaxed);
            return false;
        }
        self.consecutive_errors.store(0, Ordering::Relaxed);
        let row = self.ejections_in_row.fetch_add(1, Ordering::AcqRel).min(3);
        let period = settings.base_ejection * (1u32 << row);
        self.ejected_until
            .store(now_ms() + period.as_millis() as u64, Ordering::Relaxed);
        self.pools.clear();
        true
    }

    /// Currently ejected by outlier detection.
    pub fn is_ejected(&self) -> bool {
        self.ejected_until.load(Ordering::Relaxed) > now_ms()
    }

    /// Left the configuration: its connections are not pooled any more.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Takes the backend out of rotation for good (it left the configuration).
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.pools.clear();
    }

    /// Ends the remaining connections of a drained backend.
    pub fn kill(&self) {
        self.killed.send_replace(true);
        self.pools.clear();
    }

    /// Resolves when [`Backend::kill`] is called.
    pub fn killed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.killed.subscribe();
        async move {
            let _ = rx.wait_for(|k| *k).await;
        }
    }

    /// The `ns/svc` ready count of the last `HEALTH` answer if it is younger than `fresh`.
    pub fn peer_count(&self, service: &str, fresh: Duration) -> Option<u32> {
        let guard = self.peer_counts.lock().unwrap_or_else(|e| e.into_inner());
        let pc = guard.as_ref()?;
        (pc.at.elapsed() <= fresh).then(|| pc.counts.get(service).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_checks_flip_after_thresholds() {
        let b = Backend::new(BackendKey::Local("127.0.0.1:1".parse().unwrap()));
        assert!(b.is_healthy());
        assert!(!b.record_check(false, 2, 1));
        assert!(b.is_healthy());
        assert!(b.record_check(false, 2, 1));
        assert!(!b.is_healthy() && !b.available(now_ms()));
        assert!(b.record_check(true, 2, 1));
        assert!(b.available(now_ms()));
    }

    #[test]
    fn consecutive_failures_eject_and_success_resets() {
        let s = OutlierSettings {
            consecutive: 3,
            base_ejection: Duration::from_secs(60),
            max_ejection_percent: 50,
        };
        let b = Backend::new(BackendKey::Local("127.0.0.1:1".parse().unwrap()));
        let yes = || true;
        assert!(!b.record_failure(&s, yes));
        assert!(!b.record_failure(&s, yes));
        b.record_success();
        assert!(!b.record_failure(&s, yes));
        assert!(!b.record_failure(&s, yes));
        // At the cap the backend stays in, and goes at its next failure once allowed.
        assert!(!b.record_failure(&s, || false));
        assert!(!b.is_ejected());
        assert!(b.record_failure(&s, yes));
        assert!(b.is_ejected() && !b.available(now_ms()));
    }

    #[test]
    fn ejection_cap_allows_a_share_and_always_one() {
        let s = OutlierSettings::default();
        assert!(s.may_eject(0, 1));
        assert!(!s.may_eject(1, 1));
        assert!(s.may_eject(1, 4) && !s.may_eject(2, 4));
        assert!(s.may_eject(4, 10) && !s.may_eject(5, 10));
        let none = OutlierSettings {
            max_ejection_percent: 0,
            ..s
        };
        assert!(none.may_eject(0, 10) && !none.may_eject(1, 10));
    }

    #[test]
    fn in_flight_guard_counts() {
        let b = Backend::new(BackendKey::Local("127.0.0.1:1".parse().unwrap()));
        let g1 = b.start();
        let g2 = b.start();
        assert_eq!(b.active(), 2);
        drop(g1);
        drop(g2);
        assert_eq!(b.active(), 0);
    }
}
