//! Each member's heartbeat: a `coordination.k8s.io/v1` Lease per Cluster, renewed by
//! successful probes, as kubelets renew their node Leases (KEP-589). Liveness so costs one
//! small write per member per probe period at most, while the big Cluster status is written
//! only when it changes (see [`super::conditions::probe_time_due`]).
//!
//! The Lease is named after the Cluster, in [`NAMESPACE`], held by the Cluster's name, and
//! owned by the Cluster (uid): the federation's garbage collector deletes it with its
//! Cluster, whether or not a controller runs then.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use meridian_runtime::leader::record::Record;
use tokio::time::Instant;

use crate::fleet::{FedError, timed};

/// Where the members' Leases live (`kubectl get leases -n meridian-cluster-lease`).
pub const NAMESPACE: &str = "meridian-cluster-lease";

/// `leaseDurationSeconds` for a probe period: four periods (a member is presumed gone
/// after about as many probes as the default failure threshold allows, plus one), rounded
/// up to whole seconds, at least 1.
pub fn duration_seconds(probe_period: Duration) -> i32 {
    let millis = probe_period.as_millis().saturating_mul(4);
    i32::try_from(millis.div_ceil(1000).max(1)).unwrap_or(i32::MAX)
}

/// The shortest time between two renewals: a quarter of the Lease's duration (the kubelet
/// renews its 40 s node Lease every 10 s), so a reader sees several renewals per duration
/// and one lost write does not expire the Lease.
pub fn renew_interval(duration_seconds: i32) -> Duration {
    Duration::from_millis(u64::try_from(duration_seconds.max(1)).unwrap_or(1) * 250)
}

/// Whether the probe that succeeded at `probe_at` renews the Lease, whose last renewal by
/// this task came from the probe at `last` (`None`: none yet). Probe times are the probe
/// ticker's scheduled instants, so a renewal interval of one probe period renews at every
/// probe rather than every other one when probe latencies vary.
pub fn renew_due(last: Option<Instant>, probe_at: Instant, interval: Duration) -> bool {
    last.is_none_or(|l| probe_at.saturating_duration_since(l) >= interval)
}

/// The owner reference to the Cluster, which the garbage collector follows (the kubelet's
/// node Lease refers to its Node the same way).
fn owner(cluster: &str, uid: Option<&str>) -> Vec<OwnerReference> {
    uid.map(|uid| OwnerReference {
        api_version: fed_api::API_VERSION.to_string(),
        kind: "Cluster".to_string(),
        name: cluster.to_string(),
        uid: uid.to_string(),
        ..OwnerReference::default()
    })
    .into_iter()
    .collect()
}

/// The Lease a member gets on its first successful probe: acquired and renewed `now`.
pub fn new_lease(cluster: &str, uid: Option<&str>, seconds: i32, now: jiff::Timestamp) -> Lease {
    let record = Record {
        holder: cluster.to_string(),
        lease_duration_seconds: seconds,
        acquire_time: Some(now),
        renew_time: Some(now),
        transitions: 0,
    };
    Lease {
        metadata: ObjectMeta {
            name: Some(cluster.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            owner_references: Some(owner(cluster, uid)).filter(|o| !o.is_empty()),
            ..ObjectMeta::default()
        },
        spec: Some(record.to_spec()),
    }
}

/// The merge patch of a renewal. It also restates holder, duration and owner, so a Lease
/// left by an earlier Cluster of the same name, or written with another probe period, is
/// put right; `acquireTime` is kept.
pub fn renewal(
    cluster: &str,
    uid: Option<&str>,
    seconds: i32,
    now: jiff::Timestamp,
) -> serde_json::Value {
    let spec = LeaseSpec {
        holder_identity: Some(cluster.to_string()),
        lease_duration_seconds: Some(seconds),
        renew_time: Some(MicroTime(now)),
        ..LeaseSpec::default()
    };
    let mut patch = serde_json::json!({ "spec": spec });
    let owners = owner(cluster, uid);
    if !owners.is_empty() {
        patch["metadata"] = serde_json::json!({ "ownerReferences": owners });
    }
    patch
}

fn api(fed: &Client) -> Api<Lease> {
    Api::namespaced(fed.clone(), NAMESPACE)
}

fn not_found(e: &FedError) -> bool {
    matches!(e, FedError::Api { source: kube::Error::Api(s), .. } if s.code == 404)
}

/// Renews the member's Lease at `now`, creating it when missing (and its namespace, when
/// that is missing too). Each request is bounded by `deadline`.
pub async fn renew(
    fed: &Client,
    cluster: &str,
    uid: Option<&str>,
    seconds: i32,
    now: jiff::Timestamp,
    deadline: Duration,
) -> Result<(), FedError> {
    let api = api(fed);
    let patch = renewal(cluster, uid, seconds, now);
    let patched = timed(
        deadline,
        "renew the member's Lease",
        api.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    match patched {
        Err(e) if not_found(&e) => {}
        r => return r.map(drop),
    }
    let lease = new_lease(cluster, uid, seconds, now);
    let create = "create the member's Lease";
    let created = timed(deadline, create, api.create(&PostParams::default(), &lease)).await;
    match created {
        Err(e) if not_found(&e) => {
            super::events::ensure_namespace(fed.clone(), NAMESPACE).await;
            timed(deadline, create, api.create(&PostParams::default(), &lease))
                .await
                .map(drop)
        }
        r => r.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_is_four_periods_in_whole_seconds() {
        let ms = Duration::from_millis;
        let cases = [
            (ms(10_000), 40, ms(10_000)),
            (ms(1_000), 4, ms(1_000)),
            (ms(1_200), 5, ms(1_250)),
            (ms(100), 1, ms(250)),
            (ms(0), 1, ms(250)),
        ];
        for (period, seconds, interval) in cases {
            assert_eq!(duration_seconds(period), seconds, "{period:?}");
            assert_eq!(renew_interval(seconds), interval, "{period:?}");
        }
    }

    #[test]
    fn renewal_is_due_once_per_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let interval = s(10);
        // (last renewal's probe, this probe, due)
        let cases = [
            ("first success", None, t0, true),
            ("next probe, one interval on", Some(t0), t0 + s(10), true),
            ("sooner than an interval", Some(t0), t0 + s(9), false),
            ("same probe again", Some(t0), t0, false),
            ("after failed probes", Some(t0), t0 + s(30), true),
            ("clock order inverted", Some(t0 + s(5)), t0, false),
        ];
        for (name, last, at, due) in cases {
            assert_eq!(renew_due(last, at, interval), due, "{name}");
        }
    }

    #[test]
    fn lease_and_renewal_shapes() {
        let now: jiff::Timestamp = "2026-01-02T03:04:05.123456Z".parse().expect("ts");
        let lease = new_lease("sim-1", Some("u-1"), 40, now);
        let spec = lease.spec.clone().unwrap_or_default();
        assert_eq!(
            (
                spec.holder_identity.as_deref(),
                spec.lease_duration_seconds,
                spec.acquire_time.map(|t| t.0),
                spec.renew_time.map(|t| t.0),
            ),
            (Some("sim-1"), Some(40), Some(now), Some(now))
        );
        let owners = lease.metadata.owner_references.unwrap_or_default();
        assert_eq!(
            (
                owners.len(),
                owners[0].kind.as_str(),
                owners[0].uid.as_str()
            ),
            (1, "Cluster", "u-1")
        );
        assert_eq!(lease.metadata.namespace.as_deref(), Some(NAMESPACE));

        let patch = renewal("sim-1", Some("u-1"), 40, now);
        assert_eq!(patch["spec"]["renewTime"], "2026-01-02T03:04:05.123456Z");
        assert_eq!(patch["spec"]["holderIdentity"], "sim-1");
        assert!(
            patch["spec"].get("acquireTime").is_none(),
            "a renewal keeps acquireTime"
        );
        assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert!(renewal("sim-1", None, 40, now).get("metadata").is_none());
        assert!(
            new_lease("sim-1", None, 40, now)
                .metadata
                .owner_references
                .is_none()
        );
    }
}
