//! Which serving clusters a Service name answers, in which order, under its traffic policy:
//! `nearest` all of them nearest to the asker first; `geo` only the nearest group; `failover`
//! only the first group of its order that serves; `weighted` those with a share, the first
//! chosen by share (seeded by the query ID, so the choice stays a pure function of the
//! query). Each answer comes with the SRV priority and weight that say the same.

use fed_api::lbconfig::PolicyKind;

use super::view::{ClusterId, DnsView, Locality, Scope, ServiceEntry};

/// Calls `f(cluster, priority, weight)` for every cluster answered for `s` in `scope`, in
/// answer order; returns whether the choice depended on where the asker is (for the EDNS
/// Client Subnet scope).
pub(crate) fn each_answer(
    view: &DnsView,
    s: &ServiceEntry,
    scope: Scope,
    asker: &Locality,
    seed: u16,
    mut f: impl FnMut(ClusterId, u16, u16),
) -> bool {
    let candidates = || {
        s.serving
            .iter()
            .copied()
            .filter(|&c| view.in_scope(scope, c))
    };
    match s.policy {
        PolicyKind::Nearest => {
            let mut n = 0;
            // Stable bucket pass: nearest rank first, cluster name order within a rank.
            for rank in 0..4 {
                for c in candidates().filter(|&c| view.rank(asker, c) == rank) {
                    f(c, u16::from(rank), 0);
                    n += 1;
                }
            }
            n > 1
        }
        PolicyKind::Geo => {
            let Some(best) = candidates().map(|c| view.rank(asker, c)).min() else {
                return false;
            };
            for c in candidates().filter(|&c| view.rank(asker, c) == best) {
                f(c, 0, 0);
            }
            true
        }
        PolicyKind::Failover => {
            let tier = |c: ClusterId| s.tiers.get(c as usize).copied().unwrap_or(u8::MAX);
            if let Some(best) = candidates().map(tier).min() {
                for c in candidates().filter(|&c| tier(c) == best) {
                    f(c, 0, 0);
                }
            }
            false
        }
        PolicyKind::Weighted => {
            let share = |c: ClusterId| s.shares.get(c as usize).copied().unwrap_or(0);
            let total: u64 = candidates().map(|c| u64::from(share(c))).sum();
            if total == 0 {
                // No listed cluster serves: every serving one, by name.
                for c in candidates() {
                    f(c, 0, 0);
                }
                return false;
            }
            let mut point = crate::policy::spread(u64::from(seed), total);
            let mut first = None;
            for c in candidates() {
                let w = u64::from(share(c));
                if point < w {
                    first = Some(c);
                    break;
                }
                point -= w;
            }
            let weight = |c| u16::try_from(share(c)).unwrap_or(u16::MAX);
            if let Some(c) = first {
                f(c, 0, weight(c));
            }
            for c in candidates().filter(|&c| share(c) > 0 && Some(c) != first) {
                f(c, 0, weight(c));
            }
            false
        }
    }
}
