//! The `DedicatedAddressAllocated` condition of a federated Service that asks for dedicated
//! addresses: whether every cluster with an lb-agent address pool gave it one, and if not,
//! which clusters did not and why. Events about the same problems expire after an hour;
//! the condition stays on the object (`kubectl get svc -o yaml`, `kubectl wait
//! --for=condition=DedicatedAddressAllocated`) for as long as the state lasts.
//!
//! Pure: [`decide`] turns one reconcile's allocation outcome into a verdict, and
//! [`conditions`] says what `status.conditions` becomes, or that it stays as it is (so the
//! controller writes only on a change).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::addresses::OptInError;

/// The condition's type.
pub const CONDITION_TYPE: &str = "DedicatedAddressAllocated";
/// Reason when every cluster with a pool gave the Service an address.
pub const ALLOCATED_REASON: &str = "Allocated";
/// Reason (and Event reason) when a cluster's pool has no free address for the Service.
pub const EXHAUSTED_REASON: &str = "AddressPoolExhausted";
/// Reason (and Event reason) for an unusable opt-in annotation or pool.
pub const INVALID_REASON: &str = "InvalidDedicatedAddress";
/// Reason when no member's lb-agent has an address pool at all.
pub const NO_POOL_REASON: &str = "NoAddressPool";

/// What the Service's dedicated addresses came to in one reconcile.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// The opt-in annotation as read.
    pub opt_in: &'a Result<bool, OptInError>,
    /// The Service's address per cluster.
    pub addresses: &'a BTreeMap<String, String>,
    /// Clusters whose pool had no free address for it.
    pub exhausted: &'a [String],
    /// Clusters whose lb-agent lists a pool of which no entry is usable.
    pub unusable: &'a [String],
}

/// The condition a Service should carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `True` or `False`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Which clusters, which addresses, and why.
    pub message: String,
}

impl Verdict {
    fn falsy(reason: &'static str, message: String) -> Self {
        Verdict {
            status: "False",
            reason,
            message,
        }
    }
}

/// The verdict for one outcome; `None` when the Service has not opted in (it carries no
/// condition then). An exhausted pool comes first: it is the one a freed address resolves
/// without anyone editing configuration.
pub fn decide(o: Outcome<'_>) -> Option<Verdict> {
    match o.opt_in {
        Ok(false) => return None,
        Err(e) => {
            return Some(Verdict::falsy(
                INVALID_REASON,
                format!("{e}; no dedicated addresses"),
            ));
        }
        Ok(true) => {}
    }
    // One line per cluster without an address, in cluster order.
    let mut missing: BTreeMap<&str, &str> = BTreeMap::new();
    for c in o.unusable {
        missing.insert(c, "no usable entry in its lb-agent's address pool");
    }
    for c in o.exhausted {
        missing.insert(c, "no free address in its lb-agent's address pool");
    }
    if !missing.is_empty() {
        let reason = if o.exhausted.is_empty() {
            INVALID_REASON
        } else {
            EXHAUSTED_REASON
        };
        let clusters: Vec<String> = missing
            .iter()
            .map(|(c, why)| format!("{c}: {why}"))
            .collect();
        return Some(Verdict::falsy(
            reason,
            format!(
                "no dedicated address in {} of {} clusters with an address pool ({}); the Service is reached there only at the lb-agent's listen ports",
                missing.len(),
                missing.len() + o.addresses.len(),
                clusters.join("; ")
            ),
        ));
    }
    if o.addresses.is_empty() {
        return Some(Verdict::falsy(
            NO_POOL_REASON,
            format!(
                "no member cluster's lb-agent has an address pool (annotation {} on its {}/{} Service)",
                fed_api::names::LB_ADDRESS_POOL_ANNOTATION,
                fed_api::names::SYSTEM_NAMESPACE,
                fed_api::names::LB_AGENT_SERVICE,
            ),
        ));
    }
    let addresses: Vec<String> = o
        .addresses
        .iter()
        .map(|(c, a)| format!("{c}: {a}"))
        .collect();
    Some(Verdict {
        status: "True",
        reason: ALLOCATED_REASON,
        message: addresses.join(", "),
    })
}

/// `status.conditions` with `verdict` in place of the Service's `DedicatedAddressAllocated`
/// (removed when `None`), other conditions untouched; `None` when nothing changes.
/// `lastTransitionTime` moves to `now` only when the status does (Kubernetes' rule), and
/// `observedGeneration` is the Service's `generation`.
pub fn conditions(
    current: &[Condition],
    verdict: Option<&Verdict>,
    generation: Option<i64>,
    now: &Time,
) -> Option<Vec<Condition>> {
    let old = current.iter().position(|c| c.type_ == CONDITION_TYPE);
    let Some(v) = verdict else {
        let i = old?;
        let mut next = current.to_vec();
        next.remove(i);
        return Some(next);
    };
    let previous = old.map(|i| &current[i]);
    let cond = Condition {
        type_: CONDITION_TYPE.to_string(),
        status: v.status.to_string(),
        reason: v.reason.to_string(),
        message: v.message.clone(),
        observed_generation: generation,
        last_transition_time: match previous {
            Some(p) if p.status == v.status => p.last_transition_time.clone(),
            _ => now.clone(),
        },
    };
    if previous == Some(&cond) {
        return None;
    }
    let mut next = current.to_vec();
    match old {
        Some(i) => next[i] = cond,
        None => next.push(cond),
    }
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn addrs(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter()
            .map(|(c, a)| (c.to_string(), a.to_string()))
            .collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// One row: the allocation outcome, and the condition it must give.
    struct Case {
        name: &'static str,
        opt_in: Result<bool, OptInError>,
        addresses: &'static [(&'static str, &'static str)],
        exhausted: &'static [&'static str],
        unusable: &'static [&'static str],
        /// `(status, reason, words the message holds)`; `None` = no condition.
        want: Option<(&'static str, &'static str, &'static [&'static str])>,
    }

    #[test]
    fn verdict_table() {
        let bad = OptInError {
            annotation: fed_api::names::DEDICATED_ADDRESS_ANNOTATION,
            value: "yes".into(),
        };
        let cases = [
            Case {
                name: "not opted in: no condition",
                opt_in: Ok(false),
                addresses: &[],
                exhausted: &[],
                unusable: &[],
                want: None,
            },
            Case {
                name: "every cluster with a pool gave an address",
                opt_in: Ok(true),
                addresses: &[("sim-1", "127.2.1.1"), ("sim-2", "127.2.2.1")],
                exhausted: &[],
                unusable: &[],
                want: Some((
                    "True",
                    ALLOCATED_REASON,
                    &["sim-1: 127.2.1.1, sim-2: 127.2.2.1"],
                )),
            },
            Case {
                name: "a full pool names its cluster, not the others",
                opt_in: Ok(true),
                addresses: &[("sim-1", "127.2.1.1"), ("sim-2", "127.2.2.1")],
                exhausted: &["sim-3"],
                unusable: &[],
                want: Some((
                    "False",
                    EXHAUSTED_REASON,
                    &["1 of 3 clusters", "sim-3: no free address"],
                )),
            },
            Case {
                name: "every pool full",
                opt_in: Ok(true),
                addresses: &[],
                exhausted: &["sim-1", "sim-2"],
                unusable: &[],
                want: Some((
                    "False",
                    EXHAUSTED_REASON,
                    &["2 of 2 clusters", "sim-1: no free", "sim-2: no free"],
                )),
            },
            Case {
                name: "an invalid opt-in value",
                opt_in: Err(bad),
                addresses: &[],
                exhausted: &[],
                unusable: &[],
                want: Some(("False", INVALID_REASON, &["\"yes\"", "dedicated-address"])),
            },
            Case {
                name: "a pool with no usable entry",
                opt_in: Ok(true),
                addresses: &[("sim-1", "127.2.1.1")],
                exhausted: &[],
                unusable: &["sim-2"],
                want: Some((
                    "False",
                    INVALID_REASON,
                    &["1 of 2 clusters", "sim-2: no usable entry"],
                )),
            },
            Case {
                name: "a full pool and an unusable one: exhausted first, both named",
                opt_in: Ok(true),
                addresses: &[],
                exhausted: &["sim-2"],
                unusable: &["sim-1"],
                want: Some((
                    "False",
                    EXHAUSTED_REASON,
                    &["sim-1: no usable entry", "sim-2: no free"],
                )),
            },
            Case {
                name: "opted in where no lb-agent has a pool",
                opt_in: Ok(true),
                addresses: &[],
                exhausted: &[],
                unusable: &[],
                want: Some(("False", NO_POOL_REASON, &["address-pool"])),
            },
        ];
        for c in cases {
            let addresses = addrs(c.addresses);
            let (exhausted, unusable) = (names(c.exhausted), names(c.unusable));
            let got = decide(Outcome {
                opt_in: &c.opt_in,
                addresses: &addresses,
                exhausted: &exhausted,
                unusable: &unusable,
            });
            match (got, c.want) {
                (None, None) => {}
                (Some(v), Some((status, reason, words))) => {
                    assert_eq!((v.status, v.reason), (status, reason), "{}", c.name);
                    for w in words {
                        assert!(v.message.contains(w), "{}: {:?}", c.name, v.message);
                    }
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?}", c.name),
            }
        }
    }

    /// A full pool, then another Service lets go of its address: the allocation and the
    /// verdict together, as a reconcile runs them.
    #[test]
    fn recovers_when_an_address_is_freed() {
        use super::super::addresses::{assign, release};
        use std::collections::BTreeSet;
        use std::net::Ipv4Addr;
        let pools = BTreeMap::from([
            ("sim-1".to_string(), vec![Ipv4Addr::new(127, 2, 1, 1)]),
            ("sim-2".to_string(), vec![Ipv4Addr::new(127, 2, 2, 1)]),
        ]);
        let none = BTreeSet::new();
        let taken = assign(&BTreeMap::new(), "shop", "db", &pools, &none)
            .next
            .expect("db takes both");
        let verdict_of = |alloc| {
            let a = assign(alloc, "shop", "web", &pools, &none);
            decide(Outcome {
                opt_in: &Ok(true),
                addresses: &a.addresses,
                exhausted: &a.exhausted,
                unusable: &[],
            })
            .expect("opted in")
        };
        let full = verdict_of(&taken);
        assert_eq!((full.status, full.reason), ("False", EXHAUSTED_REASON));
        assert!(full.message.contains("2 of 2"), "{}", full.message);
        let freed = release(&taken, "shop", "db").expect("db held addresses");
        let ok = verdict_of(&freed);
        assert_eq!((ok.status, ok.reason), ("True", ALLOCATED_REASON));
        assert_eq!(ok.message, "sim-1: 127.2.1.1, sim-2: 127.2.2.1");
    }

    fn verdict(status: &'static str, reason: &'static str, message: &str) -> Verdict {
        Verdict {
            status,
            reason,
            message: message.into(),
        }
    }

    fn other() -> Condition {
        Condition {
            type_: "Other".into(),
            status: "True".into(),
            reason: "Fine".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at("2026-01-01T00:00:00Z"),
        }
    }

    #[test]
    fn the_condition_is_written_on_change_only_and_keeps_its_transition_time() {
        let (t1, t2, t3, t4) = (
            at("2026-01-01T00:00:01Z"),
            at("2026-01-01T00:00:02Z"),
            at("2026-01-01T00:00:03Z"),
            at("2026-01-01T00:00:04Z"),
        );
        let full = verdict("False", EXHAUSTED_REASON, "sim-3: no free address");

        // Opting in with a full pool: the condition appears beside the others.
        let s1 = conditions(&[other()], Some(&full), Some(1), &t1).expect("added");
        assert_eq!(s1.len(), 2);
        assert_eq!(s1[0], other(), "another condition is left alone");
        let c = &s1[1];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (CONDITION_TYPE, "False", EXHAUSTED_REASON)
        );
        assert_eq!(
            (c.observed_generation, &c.last_transition_time),
            (Some(1), &t1)
        );

        // The same verdict on the next reconcile: no write.
        assert_eq!(conditions(&s1, Some(&full), Some(1), &t2), None);

        // Same status, another message (a second cluster fills up): written, time kept.
        let fuller = verdict("False", EXHAUSTED_REASON, "sim-2, sim-3: no free address");
        let s2 = conditions(&s1, Some(&fuller), Some(1), &t2).expect("message changed");
        assert_eq!(s2[1].message, fuller.message);
        assert_eq!(s2[1].last_transition_time, t1);

        // A new generation of the Service is recorded, time kept.
        let s3 = conditions(&s2, Some(&fuller), Some(2), &t3).expect("generation changed");
        assert_eq!(
            (s3[1].observed_generation, &s3[1].last_transition_time),
            (Some(2), &t1)
        );

        // An address is freed and the Service gets one: True, and the time moves.
        let ok = verdict("True", ALLOCATED_REASON, "sim-3: 127.2.3.1");
        let s4 = conditions(&s3, Some(&ok), Some(2), &t4).expect("recovered");
        assert_eq!(
            (s4[1].status.as_str(), &s4[1].last_transition_time),
            ("True", &t4)
        );
        assert_eq!(conditions(&s4, Some(&ok), Some(2), &t4), None);

        // Opting out removes it, and only it; then there is nothing left to remove.
        let s5 = conditions(&s4, None, Some(2), &t4).expect("removed");
        assert_eq!(s5, vec![other()]);
        assert_eq!(conditions(&s5, None, Some(2), &t4), None);
        assert_eq!(conditions(&[], None, None, &t4), None);
    }
}
