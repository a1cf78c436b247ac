//! The sub-object each destination of a divided workload should hold: the federated object
//! with the member's share ([`desired::sub_object`]), then changed by the override
//! policies that select it for that cluster.
//!
//! Built lazily and shared: one copy per share for the clusters no rule targets (most of
//! them, usually all), one per cluster and share for those a rule does.
//!
//! The replica count is the scheduler's: overrides run after the share is set, and the
//! share (`spec.replicas`, a Job's parallelism and completions) is set back afterwards, so
//! a plaintext rule on `/spec/replicas` never moves a member away from its share (the federated status and
//! rollouts sum the shares; per-cluster counts are the placement's `weights` and
//! `clusters` bounds). Every other field is the policies' to change.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use fed_api::overrides::apply::{MemberCluster, OverrideError, Policy, changes_in};
use serde_json::Value;

use super::desired::{self, Share};
use super::kinds::Kind;
use crate::copies::member_copy::overridden;
use crate::copies::record;

/// Which copy a cluster gets: `None` for the plain one, `Some(cluster)` when a rule
/// targets it.
pub type Variant = Option<String>;

/// The wanted sub-objects of one workload in one reconcile.
pub struct Wants<'a> {
    fed: &'a Value,
    kind: Kind,
    uid: &'a str,
    selected: Vec<&'a Policy>,
    /// A digest of the selected policies (empty without any).
    digest: u64,
    built: HashMap<(Variant, Share), Result<Value, OverrideError>>,
}

impl<'a> Wants<'a> {
    /// The wants of `fed` (a `kind` with `uid`) under the `selected` override policies
    /// (in the order they apply).
    pub fn new(fed: &'a Value, kind: Kind, uid: &'a str, selected: Vec<&'a Policy>) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for p in &selected {
            hash_policy(p, &mut h);
        }
        Wants {
            fed,
            kind,
            uid,
            digest: if selected.is_empty() { 0 } else { h.finish() },
            selected,
            built: HashMap::new(),
        }
    }

    /// Whether any policy selects the workload: without one every cluster gets the plain
    /// copy and none needs looking up.
    pub fn any_policy(&self) -> bool {
        !self.selected.is_empty()
    }

    /// Which copy `cluster` (`None` when unknown) gets.
    pub fn variant(&self, cluster: Option<&MemberCluster<'_>>) -> Variant {
        let c = cluster?;
        (!self.selected.is_empty() && changes_in(&self.selected, c)).then(|| c.name.to_owned())
    }

    /// What the copy `cluster` gets with `share` is built from, beside the workload
    /// itself (`source`): the same digest, the same copy. A targeted cluster's own copy
    /// depends on its labels, region and zone too (they decide which rules apply there).
    pub fn source(&self, source: u64, cluster: Option<&MemberCluster<'_>>, share: Share) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (source, share).hash(&mut h);
        if let Some(c) = cluster.filter(|c| self.variant(Some(*c)).is_some()) {
            (c.name, c.labels, c.region, c.zone, self.digest).hash(&mut h);
        }
        h.finish()
    }

    /// The copy `cluster` gets with `share`, built on first use.
    pub fn get(
        &mut self,
        cluster: Option<&MemberCluster<'_>>,
        share: Share,
    ) -> &Result<Value, OverrideError> {
        let variant = self.variant(cluster);
        let (fed, kind, uid, selected) = (self.fed, self.kind, self.uid, &self.selected);
        self.built
            .entry((variant.clone(), share))
            .or_insert_with(|| {
                let plain = desired::sub_object(fed, kind, share, uid);
                match (variant, cluster) {
                    (Some(_), Some(c)) => {
                        let mut v = overridden(&plain, kind.as_str(), c, selected, uid)?;
                        if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
                            desired::set_share(spec, kind, share);
                        }
                        // The record describes the copy as pushed, share included.
                        record::stamp(&mut v);
                        Ok(v)
                    }
                    _ => Ok(plain),
                }
            })
    }
}

/// Feeds what a selected policy contributes to a copy (its name and spec) into a digest of
/// the inputs a copy is built from.
pub fn hash_policy(p: &Policy, h: &mut impl Hasher) {
    (
        p.to_string(),
        serde_json::to_string(&p.spec).unwrap_or_default(),
    )
        .hash(h);
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;
    use fed_api::{Cluster, ClusterSpec};

    fn fed() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
            "spec": {"replicas": 10, "template": {"spec": {"containers": [
                {"name": "web", "image": "ghcr.io/shop/web:1", "args": ["--port=80"]}
            ]}}}
        })
    }

    /// A Cluster in `region`.
    pub(in crate::workload) fn cluster(name: &str, region: &str) -> Cluster {
        Cluster::new(
            name,
            ClusterSpec {
                api_endpoint: "https://x".into(),
                region: Some(region.into()),
                ..Default::default()
            },
        )
    }

    fn policy(rules: Value) -> Policy {
        Policy {
            namespace: Some("shop".into()),
            name: "p".into(),
            spec: serde_json::from_value(json!({
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                "overrideRules": rules,
            }))
            .unwrap(),
        }
    }

    #[test]
    fn targeted_clusters_get_their_own_copy_with_the_share_kept() {
        let p = policy(json!([
            {"targetCluster": {"regions": ["cn"]}, "overriders": {
                "imageOverrider": [{"component": "Registry", "operator": "replace", "value": "registry.cn.example"}],
                "plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 99}]
            }},
            {"targetCluster": {"clusterNames": ["eu-2"]}, "overriders": {
                "argsOverrider": [{"containerName": "web", "operator": "add", "value": ["--eu"]}]
            }}
        ]));
        let f = fed();
        let mut w = Wants::new(&f, Kind::Deployment, "u", vec![&p]);
        let (cn, eu1, eu2) = (
            cluster("cn-1", "cn"),
            cluster("eu-1", "eu"),
            cluster("eu-2", "eu"),
        );
        let (cn, eu1, eu2) = (
            MemberCluster::of(&cn),
            MemberCluster::of(&eu1),
            MemberCluster::of(&eu2),
        );
        assert_eq!(w.variant(Some(&cn)), Some("cn-1".to_owned()));
        assert_eq!(w.variant(Some(&eu1)), None);
        assert_eq!(w.variant(None), None);
        let got = w.get(Some(&cn), Share::replicas(3)).clone().unwrap();
        let c = &got["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.cn.example/shop/web:1");
        assert_eq!(
            got["spec"]["replicas"], 3,
            "the share wins over a plaintext rule"
        );
        assert_eq!(
            got["metadata"]["labels"]["federation.meridian.dev/owner-uid"],
            "u"
        );
        let plain = w.get(Some(&eu1), Share::replicas(3)).clone().unwrap();
        assert_eq!(
            plain,
            desired::sub_object(&f, Kind::Deployment, Share::replicas(3), "u")
        );
        let eu = w.get(Some(&eu2), Share::replicas(3)).clone().unwrap();
        assert_eq!(
            eu["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["--port=80", "--eu"])
        );
        // Sources: the plain copy's does not depend on the policies; a targeted one's does.
        let none = Wants::new(&f, Kind::Deployment, "u", vec![]);
        assert_eq!(
            w.source(7, Some(&eu1), Share::replicas(3)),
            none.source(7, Some(&eu1), Share::replicas(3))
        );
        assert_eq!(
            w.source(7, Some(&eu1), Share::replicas(3)),
            w.source(7, None, Share::replicas(3))
        );
        assert_ne!(
            w.source(7, Some(&cn), Share::replicas(3)),
            none.source(7, Some(&cn), Share::replicas(3))
        );
        assert_ne!(
            w.source(7, Some(&cn), Share::replicas(3)),
            w.source(7, Some(&cn), Share::replicas(4))
        );
        // A relabelled cluster that stays targeted may now get other rules: another source.
        let mut relabelled = cluster("cn-1", "cn");
        relabelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("tier".into(), "edge".into());
        let relabelled = MemberCluster::of(&relabelled);
        assert_ne!(
            w.source(7, Some(&cn), Share::replicas(3)),
            w.source(7, Some(&relabelled), Share::replicas(3))
        );
    }

    #[test]
    fn a_failing_rule_fails_only_the_clusters_it_targets() {
        let p = policy(
            json!([{"targetCluster": {"regions": ["cn"]}, "overriders": {
                "plaintext": [{"path": "/spec/nothing", "operator": "remove"}]
            }}]),
        );
        let f = fed();
        let mut w = Wants::new(&f, Kind::Deployment, "u", vec![&p]);
        let (cn, eu) = (cluster("cn-1", "cn"), cluster("eu-1", "eu"));
        let err = w
            .get(Some(&MemberCluster::of(&cn)), Share::replicas(2))
            .clone()
            .unwrap_err();
        assert_eq!(
            (err.policy.as_str(), err.rule),
            ("OverridePolicy shop/p", 0)
        );
        assert!(
            w.get(Some(&MemberCluster::of(&eu)), Share::replicas(2))
                .is_ok()
        );
    }
}
