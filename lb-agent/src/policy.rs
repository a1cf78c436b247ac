//! Traffic policies as plain functions over the configuration: the tier each cluster falls
//! in for a Service (lower tiers are tried first) and its share under `weighted`. The proxy's
//! backend choice and the DNS answers both decide from these, so they follow one policy.

use fed_api::lbconfig::{PolicyKind, TrafficPolicy};

/// Where a cluster is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place<'a> {
    /// Cluster name.
    pub cluster: &'a str,
    /// Region (may be empty).
    pub region: &'a str,
    /// Zone (may be empty).
    pub zone: &'a str,
}

/// Nearest-first rank of `c` for an asker at `me`: 0 the same cluster, 1 the same zone, 2
/// the same region, 3 the rest (an empty zone or region matches nothing).
pub fn nearness(me: &Place<'_>, c: &Place<'_>) -> u8 {
    let same = |a: &str, b: &str| !a.is_empty() && a.eq_ignore_ascii_case(b);
    if !me.cluster.is_empty() && me.cluster == c.cluster {
        0
    } else if same(me.region, c.region) && same(me.zone, c.zone) {
        1
    } else if same(me.region, c.region) {
        2
    } else {
        3
    }
}

/// Most tiers a failover order may name; later entries share the last tier.
pub const MAX_FAILOVER_TIERS: usize = 250;

/// The failover tier of `c`: the index of the first entry of `order` that is its cluster,
/// zone or region name; clusters named by no entry come after all of them.
pub fn failover_tier(order: &[String], c: &Place<'_>) -> u8 {
    let same = |a: &str, b: &str| !b.is_empty() && a.eq_ignore_ascii_case(b);
    let i = order
        .iter()
        .position(|e| e == c.cluster || same(e, c.zone) || same(e, c.region))
        .unwrap_or(order.len());
    i.min(MAX_FAILOVER_TIERS) as u8
}

/// The tier of cluster `c` for the proxy of the agent in cluster `me`: `nearest` and `geo`
/// put this cluster first and every other cluster in one tier after it (spread by their
/// ready endpoints, so a nearby cluster is not flooded with everyone's overflow; DNS is
/// what steers clients to the nearest cluster), `failover` follows its order, `weighted`
/// puts every cluster in one tier.
pub fn tier(policy: &TrafficPolicy, me: &Place<'_>, c: &Place<'_>) -> u8 {
    match policy.kind {
        PolicyKind::Nearest | PolicyKind::Geo => u8::from(me.cluster != c.cluster),
        PolicyKind::Failover => failover_tier(&policy.order, c),
        PolicyKind::Weighted => 0,
    }
}

/// The `weighted` share of a cluster (0 for other policies and unlisted clusters).
pub fn share(policy: &TrafficPolicy, cluster: &str) -> u32 {
    match policy.kind {
        PolicyKind::Weighted => policy.weights.get(cluster).copied().unwrap_or(0),
        _ => 0,
    }
}

/// A point in `0..total` for the `n`-th choice: the golden-ratio sequence, so that any run
/// of consecutive choices splits close to the shares (no shared random state, no lock).
pub fn spread(n: u64, total: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    let frac = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((u128::from(frac) * u128::from(total)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place<'a>(cluster: &'a str, region: &'a str, zone: &'a str) -> Place<'a> {
        Place {
            cluster,
            region,
            zone,
        }
    }

    #[test]
    fn nearness_ranks_cluster_zone_region_rest() {
        let me = place("a", "eu", "eu-1");
        assert_eq!(nearness(&me, &place("a", "eu", "eu-1")), 0);
        assert_eq!(nearness(&me, &place("b", "eu", "eu-1")), 1);
        assert_eq!(nearness(&me, &place("c", "eu", "eu-2")), 2);
        assert_eq!(nearness(&me, &place("d", "us", "eu-1")), 3);
        // Empty localities match nothing.
        assert_eq!(nearness(&place("a", "", ""), &place("b", "", "")), 3);
        assert_eq!(nearness(&place("", "eu", ""), &place("b", "EU", "")), 2);
    }

    #[test]
    fn failover_follows_the_order_by_cluster_zone_or_region() {
        let order: Vec<String> = ["sim-2", "eu-1", "us"].map(String::from).to_vec();
        assert_eq!(failover_tier(&order, &place("sim-2", "us", "us-1")), 0);
        assert_eq!(failover_tier(&order, &place("x", "eu", "eu-1")), 1);
        assert_eq!(failover_tier(&order, &place("y", "us", "us-2")), 2);
        assert_eq!(failover_tier(&order, &place("z", "asia", "")), 3);
        // An empty zone never matches an entry.
        assert_eq!(failover_tier(&[String::new()], &place("z", "", "")), 1);
        let long: Vec<String> = (0..300).map(|i| format!("c{i}")).collect();
        assert_eq!(
            failover_tier(&long, &place("c299", "", "")),
            MAX_FAILOVER_TIERS as u8
        );
    }

    #[test]
    fn tiers_and_shares_per_policy() {
        let me = place("a", "eu", "eu-1");
        let far = place("b", "us", "us-1");
        let near = place("c", "eu", "eu-1");
        let mut p = TrafficPolicy::default();
        assert_eq!(
            (
                tier(&p, &me, &me),
                tier(&p, &me, &near),
                tier(&p, &me, &far)
            ),
            (0, 1, 1)
        );
        p.kind = PolicyKind::Failover;
        p.order = vec!["us".into()];
        assert_eq!((tier(&p, &me, &me), tier(&p, &me, &far)), (1, 0));
        p.kind = PolicyKind::Weighted;
        p.weights = [("a".to_string(), 9), ("b".to_string(), 1)].into();
        assert_eq!((tier(&p, &me, &me), tier(&p, &me, &far)), (0, 0));
        assert_eq!((share(&p, "a"), share(&p, "b"), share(&p, "c")), (9, 1, 0));
        p.kind = PolicyKind::Geo;
        assert_eq!(share(&p, "a"), 0);
    }

    #[test]
    fn spread_splits_runs_close_to_the_shares() {
        for total in [2u64, 3, 10, 100] {
            let mut counts = vec![0u64; total as usize];
            for n in 0..1000 {
                let p = spread(n, total);
                assert!(p < total);
                counts[p as usize] += 1;
            }
            let expect = 1000 / total;
            for c in counts {
                assert!(c.abs_diff(expect) <= expect / 5 + 2, "{total}: {c}");
            }
        }
        assert_eq!(spread(5, 0), 0);
    }
}
