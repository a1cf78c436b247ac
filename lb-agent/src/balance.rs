//! Backend choice: local ready endpoints first, remote lb-agents second, weighted
//! least-requests within a tier (fewest in-flight per unit of weight).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::backend::Backend;
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

/// A chosen backend.
#[derive(Debug)]
pub struct Choice<'a> {
    /// The backend.
    pub backend: &'a Arc<Backend>,
    /// It is another cluster's lb-agent.
    pub remote: bool,
}

/// Chooses where the next request of `route` goes; `local_only` for forwarded traffic.
pub fn pick<'a>(
    route: &'a PortRoute,
    local_only: bool,
    tried: &Tried,
    now: u64,
) -> Option<Choice<'a>> {
    let start = route.rr.fetch_add(1, Ordering::Relaxed);
    let local = least_loaded(
        route.local.iter().map(|b| (b, 1)),
        route.local.len(),
        start,
        tried,
        now,
    );
    if let Some(backend) = local {
        return Some(Choice {
            backend,
            remote: false,
        });
    }
    if local_only {
        return None;
    }
    least_loaded(
        route
            .remote
            .iter()
            .map(|e| (&e.backend, e.weight.load(Ordering::Relaxed))),
        route.remote.len(),
        start,
        tried,
        now,
    )
    .map(|backend| Choice {
        backend,
        remote: true,
    })
}

fn least_loaded<'a>(
    candidates: impl Iterator<Item = (&'a Arc<Backend>, u32)> + Clone,
    len: usize,
    start: usize,
    tried: &Tried,
    now: u64,
) -> Option<&'a Arc<Backend>> {
    if len == 0 {
        return None;
    }
    let offset = start % len;
    let rotated = candidates
        .clone()
        .skip(offset)
        .chain(candidates.take(offset));
    let mut best: Option<(&Arc<Backend>, u64, u64)> = None;
    for (b, weight) in rotated {
        if weight == 0 || !b.available(now) || tried.has(b) {
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
    best.map(|(b, _, _)| b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendKey, now_ms};
    use crate::inputs::{Inputs, LocalEndpoints};
    use crate::metrics::Metrics;
    use crate::table::{Registry, build};
    use std::time::Duration;

    fn route(locals: &[&str]) -> (crate::table::Table, Registry) {
        let mut local = LocalEndpoints::new();
        local.insert(
            ("shop".into(), "web".into(), "http".into()),
            locals.iter().map(|a| a.parse().unwrap()).collect(),
        );
        let config: fed_api::lbconfig::LbConfig = serde_json::from_value(serde_json::json!({
            "dnsZone": "g.test", "cluster": "a",
            "clusters": [
                {"name": "a", "address": "127.0.1.1", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "b", "address": "127.0.1.2", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "c", "address": "127.0.1.3", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true}
            ],
            "services": [{"namespace": "shop", "name": "web",
                "ports": [{"name": "http", "port": 80, "protocol": "http", "listenPort": 30000}],
                "backends": {"b": 1, "c": 3}}]
        }))
        .unwrap();
        let inputs = Inputs {
            config: Some(Arc::new(config)),
            local: Arc::new(local),
            config_error: None,
            synced: true,
        };
        let mut reg = Registry::default();
        let (t, _) = build(
            &inputs,
            &mut reg,
            &Metrics::default(),
            Duration::from_secs(3),
        );
        (t, reg)
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

    #[test]
    fn unavailable_backends_are_skipped() {
        let (t, _reg) = route(&["10.0.0.1:80"]);
        let r = &t.listen[&30000];
        r.local[0].record_check(false, 1, 1);
        let c = pick(r, false, &Tried::default(), now_ms()).unwrap();
        assert!(c.remote);
    }
}
