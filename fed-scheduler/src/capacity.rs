//! How many more pods of one shape a cluster can take: a simple, explainable estimate.
//!
//! The estimate is the minimum of four bounds, each easy to state in an Event:
//! - `cpu`:    free CPU (allocatable − allocated) ÷ the pod's CPU request;
//! - `memory`: free memory ÷ the pod's memory request;
//! - `pods`:   free pod slots;
//! - `largest free slot`: pods fitting in the largest free slot on one node, times the
//!   number of Ready nodes. No node has more room than the largest slot, so this caps
//!   fragmented clusters whose free resources are spread thinly over many nodes, and it is
//!   zero when no single node can host even one pod.
//!
//! Fields a cluster does not report do not bound the estimate; a resource the pod does
//! not request does not bound it either.

use crate::types::{PodRequests, Resources};

/// A capacity estimate and the bound that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Pods of this shape that fit.
    pub replicas: u64,
    /// Which bound was the smallest (`"unbounded"` when nothing bounds it).
    pub limited_by: &'static str,
}

/// Estimates how many pods with `req` fit into the free resources `r`.
pub(crate) fn estimate(r: &Resources, req: PodRequests) -> Estimate {
    let mut best = Estimate {
        replicas: u64::MAX,
        limited_by: "unbounded",
    };
    let mut bound = |replicas: u64, limited_by: &'static str| {
        if replicas < best.replicas {
            best = Estimate {
                replicas,
                limited_by,
            };
        }
    };
    let per = |free: Option<u64>, want: u64| free.filter(|_| want > 0).map(|f| f / want);

    if let Some(n) = per(r.free_cpu_milli, req.cpu_milli) {
        bound(n, "cpu");
    }
    if let Some(n) = per(r.free_memory, req.memory_bytes) {
        bound(n, "memory");
    }
    if let Some(p) = r.free_pods {
        bound(p, "pods");
    }
    let per_node = [
        per(r.largest_cpu_milli, req.cpu_milli),
        per(r.largest_memory, req.memory_bytes),
    ]
    .into_iter()
    .flatten()
    .min();
    if let (Some(per_node), Some(nodes)) = (per_node, r.ready_nodes) {
        bound(per_node.saturating_mul(nodes), "largest free slot");
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u64 = 1 << 30;

    fn res(cpu: u64, mem: u64, pods: u64, largest: Option<(u64, u64)>, nodes: u64) -> Resources {
        Resources {
            free_cpu_milli: Some(cpu),
            free_memory: Some(mem),
            free_pods: Some(pods),
            largest_cpu_milli: largest.map(|l| l.0),
            largest_memory: largest.map(|l| l.1),
            ready_nodes: Some(nodes),
        }
    }

    #[test]
    fn estimate_table() {
        let pod = PodRequests {
            cpu_milli: 500,
            memory_bytes: GI,
        };
        let cases: &[(&str, Resources, PodRequests, u64, &str)] = &[
            (
                "cpu bound",
                res(2000, 100 * GI, 100, None, 3),
                pod,
                4,
                "cpu",
            ),
            (
                "memory bound",
                res(100_000, 3 * GI, 100, None, 3),
                pod,
                3,
                "memory",
            ),
            (
                "pods bound",
                res(100_000, 100 * GI, 2, None, 3),
                pod,
                2,
                "pods",
            ),
            // 10 CPUs free in total but the biggest hole is 400m: nothing fits anywhere.
            (
                "fragmented",
                res(10_000, 100 * GI, 100, Some((400, 8 * GI)), 25),
                pod,
                0,
                "largest free slot",
            ),
            // Largest slot fits 2 pods (1000m), 3 nodes → at most 6 although cpu says 20.
            (
                "slot bound",
                res(10_000, 100 * GI, 100, Some((1000, 8 * GI)), 3),
                pod,
                6,
                "largest free slot",
            ),
            (
                "no requests",
                res(0, 0, 7, None, 3),
                PodRequests::default(),
                7,
                "pods",
            ),
            (
                "exact fit",
                res(500, GI, 1, Some((500, GI)), 1),
                pod,
                1,
                "cpu",
            ),
        ];
        for (name, r, req, want, by) in cases {
            let e = estimate(r, *req);
            assert_eq!((e.replicas, e.limited_by), (*want, *by), "{name}");
        }
    }

    #[test]
    fn unreported_fields_do_not_bound() {
        let r = Resources::default();
        let e = estimate(
            &r,
            PodRequests {
                cpu_milli: 100,
                memory_bytes: 1,
            },
        );
        assert_eq!(e.limited_by, "unbounded");
        assert_eq!(e.replicas, u64::MAX);
    }
}
