//! Backend choice under the Service's traffic policy: the lowest policy tier that has an
//! available backend wins (local endpoints before remote agents of the same tier), weighted
//! least-requests within it (fewest in-flight per unit of weight); under `weighted` the
//! cluster is chosen by its share first. Also the passive-failure bookkeeping every proxy
//! path shares.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::agent::Shared;
use crate::backend::{Backend, now_ms};
use crate::table::PortRoute;

/// Backends already tried for one request (a retry goes elsewhere), by address: only
/// compared, never dereferenced. The first few live inline so a request that succeeds at
/// once allocates nothing.
#[derive(Debug, Default)]
pub struct Tried {
    inline: [usize; 4],
    len: usize,
    more: Vec<usize>,
}

impl Tried {
    /// Remembers `b`.
    pub fn add(&mut self, b: &Arc<Backend>) {
        let p = Arc::as_ptr(b) as usize;
        if self.len < self.inline.len() {
            self.inline[self.len] = p;
            self.len += 1;
        } else {
            self.more.push(p);
        }
    }

    fn has(&self, b: &Arc<Backend>) -> bool {
        let p = Arc::as_ptr(b) as usize;
        self.inline[..self.len].contains(&p) || self.more.contains(&p)
    }
}

/// One request's tries so far, kept alike by the HTTP/1 and the hyper request paths: where it
/// went, how often it failed after being sent, the last error, and whether a remote agent
/// said it reached no backend.
#[derive(Debug, Default)]
pub struct Attempts {
    /// Backends already tried.
    pub tried: Tried,
    /// Failures after the request was sent (these count against the retry budget).
    pub sent_failures: u32,
    /// Why the last try failed.
    pub last_error: Option<String>,
    /// A remote agent answered that its cluster had no backend.
    pub unserved: bool,
}

/// The agent's own answer when no backend is left to try.
#[derive(Debug, PartialEq, Eq)]
pub struct GiveUp {
    /// 502 when a backend failed, 503 when none was reachable.
    pub status: http::StatusCode,
    /// The body.
    pub text: String,
    /// The `x-meridian-error` value: `unserved` when nothing reached a backend.
    pub kind: &'static str,
}

impl Attempts {
    /// The next backend for the request (remembered as tried, a retry counted), or the
    /// answer to give when there is none.
    pub fn next<'a>(
        &mut self,
        shared: &Shared,
        route: &'a PortRoute,
        local_only: bool,
    ) -> Result<Choice<'a>, GiveUp> {
        let Some(choice) = pick(route, local_only, &self.tried, now_ms()) else {
            return Err(self.give_up(&route.service_key));
        };
        self.tried.add(choice.backend);
        if self.last_error.is_some() {
            shared.metrics.retries.inc();
        }
        Ok(choice)
    }

    /// A remote agent reached no backend: not that agent's failure, another cluster may
    /// take the request.
    pub fn remote_unserved(&mut self) {
        self.unserved = true;
        self.last_error
            .get_or_insert_with(|| "no backend in the other clusters".into());
    }

    fn give_up(&self, service_key: &str) -> GiveUp {
        // Nothing reached a backend unless an attempt failed after sending.
        let kind = if self.sent_failures == 0 {
            "unserved"
        } else {
            "failed"
        };
        let (status, text) = match &self.last_error {
            Some(e) if !self.unserved || self.sent_failures > 0 => (
                http::StatusCode::BAD_GATEWAY,
                format!("{service_key}: upstream failed: {e}\n"),
            ),
            _ => (
                http::StatusCode::SERVICE_UNAVAILABLE,
                format!("no healthy backend for {service_key}\n"),
            ),
        };
        GiveUp { status, text, kind }
    }
}

/// A chosen backend.
#[derive(Debug)]
pub struct Choice<'a> {
    /// The backend.
    pub backend: &'a Arc<Backend>,
    /// It is another cluster's lb-agent.
    pub remote: bool,
}

/// What one choice of a backend goes by: the request's round-robin turn (where the walk over
/// equally loaded backends starts), the backends it already tried, and the time.
struct Turn<'t> {
    start: usize,
    tried: &'t Tried,
    now: u64,
}

impl Turn<'_> {
    /// The least loaded of this cluster's own endpoints.
    fn local<'a>(&self, route: &'a PortRoute) -> Option<Choice<'a>> {
        let local = route.local.iter().map(|b| (b, 1));
        self.least_loaded(local, route.local.len(), false)
    }

    /// The least loaded remote agent of policy tier `tier` (of any tier when `None`).
    fn remote_in<'a>(&self, route: &'a PortRoute, tier: Option<u8>) -> Option<Choice<'a>> {
        let remote = route.remote.iter().map(|e| {
            let w = if tier.is_none_or(|t| t == e.tier) {
                e.weight.load(Ordering::Relaxed)
            } else {
                0
            };
            (&e.backend, w)
        });
        self.least_loaded(remote, route.remote.len(), true)
    }

    /// `weighted`: a cluster by share among those with an available backend and a share,
    /// then a backend within it; `None` when no cluster with a share can take the request.
    fn by_share<'a>(&self, route: &'a PortRoute) -> Option<Choice<'a>> {
        let usable = |b: &Arc<Backend>| b.available(self.now) && !self.tried.has(b);
        let local_share = if route.local.iter().any(usable) {
            u64::from(route.local_share)
        } else {
            0
        };
        let share = |e: &crate::table::RemoteEntry| {
            if e.weight.load(Ordering::Relaxed) > 0 && usable(&e.backend) {
                u64::from(e.share)
            } else {
                0
            }
        };
        let total = local_share + route.remote.iter().map(share).sum::<u64>();
        if total == 0 {
            return None;
        }
        let mut point = crate::policy::spread(self.start as u64, total);
        if point < local_share {
            return self.local(route);
        }
        point -= local_share;
        for e in &route.remote {
            let s = share(e);
            if point < s {
                return Some(Choice {
                    backend: &e.backend,
                    remote: true,
                });
            }
            point -= s;
        }
        None
    }

    /// The available, untried candidate with the fewest in-flight requests per unit of
    /// weight (weight 0: not a candidate), ties going to the first from this turn's start;
    /// `remote` says whether the candidates are other clusters' agents.
    fn least_loaded<'a>(
        &self,
        candidates: impl Iterator<Item = (&'a Arc<Backend>, u32)> + Clone,
        len: usize,
        remote: bool,
    ) -> Option<Choice<'a>> {
        if len == 0 {
            return None;
        }
        let offset = self.start % len;
        let rotated = candidates
            .clone()
            .skip(offset)
            .chain(candidates.take(offset));
        let mut best: Option<(&Arc<Backend>, u64, u64)> = None;
        for (b, weight) in rotated {
            if weight == 0 || !b.available(self.now) || self.tried.has(b) {
                continue;
            }
            let load = u64::from(b.active()) + 1;
            let weight = u64::from(weight);
            // load/weight < best_load/best_weight without division.
            match best {
                Some((_, bl, bw)) if load * bw >= bl * weight => {}
                _ => best = Some((b, load, weight)),
            }
        }
        best.map(|(backend, _, _)| Choice { backend, remote })
    }
}

/// Chooses where the next request of `route` goes; `local_only` for forwarded traffic.
pub fn pick<'a>(
    route: &'a PortRoute,
    local_only: bool,
    tried: &Tried,
    now: u64,
) -> Option<Choice<'a>> {
    let turn = Turn {
        start: route.rr.fetch_add(1, Ordering::Relaxed),
        tried,
        now,
    };
    if local_only {
        return turn.local(route);
    }
    if route.weighted
        && let Some(c) = turn.by_share(route)
    {
        return Some(c);
    }
    for &tier in &route.tiers {
        if route.local_tier == tier
            && let Some(c) = turn.local(route)
        {
            return Some(c);
        }
        if let Some(c) = turn.remote_in(route, Some(tier)) {
            return Some(c);
        }
    }
    None
}

/// A connect failure, upstream error or 5xx of `backend` on `route`: counted towards its
/// ejection, which the route's ejection cap may hold back.
pub fn failed(shared: &Shared, route: &PortRoute, backend: &Arc<Backend>) {
    let settings = &shared.settings.outlier;
    if backend.record_failure(settings, || route.may_eject(backend, settings)) {
        shared.metrics.ejections.inc();
        tracing::info!(backend = %backend.label(), "ejected after consecutive failures");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendKey, now_ms};
    use crate::inputs::{Inputs, LocalEndpoints};
    use crate::table::Registry;

    /// The table of `config` (an `LbConfig` as JSON) with `locals` as shop/web's local
    /// endpoints.
    fn table(config: serde_json::Value, locals: &[&str]) -> (crate::table::Table, Registry) {
        let mut local = LocalEndpoints::new();
        local.insert(
            ("shop".into(), "web".into(), "http".into()),
            locals.iter().map(|a| a.parse().unwrap()).collect(),
        );
        let config: fed_api::lbconfig::LbConfig = serde_json::from_value(config).unwrap();
        crate::table::build_fresh(&Inputs::fixed(config, local))
    }

    fn route(locals: &[&str]) -> (crate::table::Table, Registry) {
        table(
            serde_json::json!({
            "dnsZone": "g.test", "cluster": "a",
            "clusters": [
                {"name": "a", "address": "127.0.1.1", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "b", "address": "127.0.1.2", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "c", "address": "127.0.1.3", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true}
            ],
            "services": [{"namespace": "shop", "name": "web",
                "ports": [{"name": "http", "port": 80, "protocol": "http", "listenPort": 30000}],
                "backends": {"b": 1, "c": 3}}]
            }),
            locals,
        )
    }

    #[test]
    fn local_first_then_remote_then_nothing() {
        let (t, _reg) = route(&["10.0.0.1:80"]);
        let r = &t.listen[&30000];
        let c = pick(r, false, &Tried::default(), now_ms()).unwrap();
        assert!(!c.remote);
        let mut tried = Tried::default();
        tried.add(c.backend);
        let c = pick(r, false, &tried, now_ms()).unwrap();
        assert!(c.remote);
        assert!(pick(r, true, &tried, now_ms()).is_none());
    }

    #[test]
    fn least_requests_among_locals() {
        let (t, _reg) = route(&["10.0.0.1:80", "10.0.0.2:80"]);
        let r = &t.listen[&30000];
        let busy = r.local[0].clone();
        let _g = busy.start();
        for _ in 0..4 {
            let c = pick(r, false, &Tried::default(), now_ms()).unwrap();
            assert!(!Arc::ptr_eq(c.backend, &busy));
        }
    }

    #[test]
    fn remote_weight_follows_endpoint_count() {
        let (t, _reg) = route(&[]);
        let r = &t.listen[&30000];
        let b = r
            .remote
            .iter()
            .find(|e| e.backend.cluster() == Some("b"))
            .unwrap();
        let c = r
            .remote
            .iter()
            .find(|e| e.backend.cluster() == Some("c"))
            .unwrap();
        // b: 1 endpoint, c: 3. With one request on each, c (2/3) beats b (2/1).
        let _gb = b.backend.start();
        let _gc = c.backend.start();
        let mut counts = [0, 0];
        let mut guards = Vec::new();
        for _ in 0..40 {
            let choice = pick(r, false, &Tried::default(), now_ms()).unwrap();
            counts[usize::from(choice.backend.cluster() == Some("c"))] += 1;
            guards.push(choice.backend.start());
        }
        // In-flight ends at b:1+x, c:1+y with (1+x)/1 ≈ (1+y)/3 (42 in all: ≈ 10.5 and 31.5).
        assert!((9..=11).contains(&counts[0]), "{counts:?}");
        assert_eq!(counts[0] + counts[1], 40);
        assert!(matches!(b.backend.key, BackendKey::Remote { .. }));
    }

    #[test]
    fn tried_spills_past_the_inline_slots() {
        let (t, _reg) = route(&[
            "10.0.0.1:80",
            "10.0.0.2:80",
            "10.0.0.3:80",
            "10.0.0.4:80",
            "10.0.0.5:80",
            "10.0.0.6:80",
        ]);
        let r = &t.listen[&30000];
        let mut tried = Tried::default();
        for _ in 0..6 {
            let c = pick(r, true, &tried, now_ms()).unwrap();
            assert!(!c.remote);
            tried.add(c.backend);
        }
        assert!(pick(r, true, &tried, now_ms()).is_none());
    }

    fn routed(policy: serde_json::Value, locals: &[&str]) -> (crate::table::Table, Registry) {
        table(
            serde_json::json!({
            "dnsZone": "g.test", "cluster": "a",
            "clusters": [
                {"name": "a", "region": "eu", "zone": "eu-1", "address": "127.0.1.1", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "b", "region": "eu", "zone": "eu-2", "address": "127.0.1.2", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "c", "region": "us", "zone": "us-1", "address": "127.0.1.3", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true}
            ],
            "services": [{"namespace": "shop", "name": "web",
                "ports": [{"name": "http", "port": 80, "protocol": "http", "listenPort": 30000}],
                "backends": {"a": 1, "b": 1, "c": 1}, "policy": policy}]
            }),
            locals,
        )
    }

    /// The clusters a request tries in turn while each one fails (`-` for local).
    fn order(r: &crate::table::PortRoute) -> Vec<String> {
        let mut tried = Tried::default();
        let mut out = Vec::new();
        while let Some(c) = pick(r, false, &tried, now_ms()) {
            out.push(c.backend.cluster().unwrap_or("-").to_string());
            tried.add(c.backend);
        }
        out
    }

    #[test]
    fn nearest_goes_local_then_to_every_other_cluster_alike() {
        let (t, _reg) = routed(serde_json::json!({}), &["10.0.0.1:80"]);
        let r = &t.listen[&30000];
        assert_eq!(order(r)[0], "-");
        // Past the local endpoints, b (same region) and c take turns: one tier.
        r.local[0].record_check(false, 1, 1);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            let c = pick(r, false, &Tried::default(), now_ms()).unwrap();
            seen.insert(c.backend.cluster().unwrap().to_string());
        }
        assert_eq!(seen, ["b".to_string(), "c".to_string()].into());
    }

    #[test]
    fn failover_follows_the_order_even_past_local_endpoints() {
        let (t, _reg) = routed(
            serde_json::json!({"type": "failover", "order": ["us", "a"]}),
            &["10.0.0.1:80"],
        );
        assert_eq!(order(&t.listen[&30000]), ["c", "-", "b"]);
        // Forwarded traffic still stays local.
        let c = pick(&t.listen[&30000], true, &Tried::default(), now_ms()).unwrap();
        assert!(!c.remote);
    }

    #[test]
    fn weighted_splits_new_requests_by_share() {
        let (t, _reg) = routed(
            serde_json::json!({"type": "weighted", "weights": {"a": 1, "b": 3, "c": 0}}),
            &["10.0.0.1:80"],
        );
        let r = &t.listen[&30000];
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..400 {
            let c = pick(r, false, &Tried::default(), now_ms()).unwrap();
            *counts
                .entry(c.backend.cluster().unwrap_or("-").to_string())
                .or_insert(0) += 1;
        }
        assert_eq!(counts.get("c"), None, "{counts:?}");
        assert!((90..=110).contains(&counts["-"]), "{counts:?}");
        assert!((290..=310).contains(&counts["b"]), "{counts:?}");
        // Once every cluster with a share failed, the others still serve.
        assert_eq!(order(r).last().map(String::as_str), Some("c"));
    }

    #[test]
    fn unavailable_backends_are_skipped() {
        let (t, _reg) = route(&["10.0.0.1:80"]);
        let r = &t.listen[&30000];
        r.local[0].record_check(false, 1, 1);
        let c = pick(r, false, &Tried::default(), now_ms()).unwrap();
        assert!(c.remote);
    }
}
