//! What each destination member gets of a planned object, for `fedctl plan -o yaml`: the
//! controllers' own functions over the objects, ResourceInterpreters and OverridePolicies /
//! ClusterOverridePolicies read from the input files. A workload's is the workload
//! controller's (`fed_controllers::workload::wants::Wants`: the member's share, then the
//! override policies' changes for that cluster); any other kind's is the copy
//! controller's (`fed_controllers::copies::plan::member_object`: the copy with a divided
//! custom object's share, then `member_copy::overridden`).

use std::collections::BTreeMap;

use anyhow::Context as _;
use fed_api::copies::{Path, path};
use fed_api::governance::Subject;
use fed_api::interpreter::{ResourceInterpreterSpec, interpreter_for};
use fed_api::object::Cluster;
use fed_api::overrides::apply::{MemberCluster, Policy, labels_of, selecting};
use fed_api::workload::WorkloadKind;
use fed_controllers::copies::member_copy::overridden;
use fed_controllers::copies::plan::member_object;
use fed_controllers::workload::wants::Wants;
use fed_scheduler::TargetCluster;
use serde::Deserialize as _;
use serde_json::{Value, json};

/// The workloads and override policies of the input, as written.
#[derive(Default)]
pub struct Sources {
    /// Deployments and ReplicaSets by namespace, kind and name.
    workloads: BTreeMap<(String, String, String), Value>,
    /// Objects of the copied kinds by apiVersion, kind, namespace (empty when
    /// cluster-scoped) and name.
    copies: BTreeMap<(String, String, String, String), Value>,
    /// ResourceInterpreters by name.
    interpreters: BTreeMap<String, ResourceInterpreterSpec>,
    /// The override policies.
    policies: Vec<Policy>,
}

impl Sources {
    /// Adds the documents of one YAML text (a `kind: List` item by item).
    pub fn add_yaml(&mut self, source_name: &str, text: &str) -> anyhow::Result<()> {
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let v = Value::deserialize(doc)
                .with_context(|| format!("{source_name}: document {}", i + 1))?;
            if v["kind"] == "List" {
                for item in v["items"].as_array().into_iter().flatten() {
                    self.add(item, source_name)?;
                }
            } else {
                self.add(&v, source_name)?;
            }
        }
        Ok(())
    }

    fn add(&mut self, v: &Value, source_name: &str) -> anyhow::Result<()> {
        let api_version = v["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kind = v["kind"].as_str().unwrap_or_default();
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let namespace = v
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let spec = || -> anyhow::Result<fed_api::OverridePolicySpec> {
            serde_json::from_value(v["spec"].clone())
                .with_context(|| format!("{source_name}: {kind} {name}"))
        };
        match (group, kind) {
            (g, k) if WorkloadKind::of_group(g, k).is_some() => {
                self.workloads.insert(
                    (namespace.to_owned(), kind.to_owned(), name.to_owned()),
                    v.clone(),
                );
            }
            (fed_api::GROUP, "OverridePolicy") => self.policies.push(Policy {
                namespace: Some(namespace.to_owned()),
                name: name.to_owned(),
                spec: spec()?,
            }),
            (fed_api::GROUP, "ClusterOverridePolicy") => self.policies.push(Policy {
                namespace: None,
                name: name.to_owned(),
                spec: spec()?,
            }),
            (fed_api::GROUP, "ResourceInterpreter") => {
                let spec = serde_json::from_value(v["spec"].clone())
                    .with_context(|| format!("{source_name}: {kind} {name}"))?;
                self.interpreters.insert(name.to_owned(), spec);
            }
            _ if path(api_version, kind) == Path::Copy && !name.is_empty() => {
                let namespace = fed_scheduler::offline::copy_namespace(v).unwrap_or_default();
                self.copies.insert(
                    (
                        api_version.to_owned(),
                        kind.to_owned(),
                        namespace.to_owned(),
                        name.to_owned(),
                    ),
                    v.clone(),
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Per destination in `dest` of the object `apiVersion, namespace, kind, name`
    /// (namespace empty when cluster-scoped), `{cluster, replicas, object}` (the object as
    /// pushed) or `{cluster, replicas, error}` (the override that fails there: nothing is
    /// pushed).
    pub fn members(
        &self,
        (api_version, namespace, kind, name): (&str, &str, &str, &str),
        dest: &[TargetCluster],
        clusters: &[Cluster],
    ) -> Vec<Value> {
        if path(api_version, kind) == Path::Copy {
            return self.copy_members((api_version, namespace, kind, name), dest, clusters);
        }
        let key = (namespace.to_owned(), kind.to_owned(), name.to_owned());
        let (Some(fed), Some(kind)) = (self.workloads.get(&key), WorkloadKind::parse(kind)) else {
            return Vec::new();
        };
        let uid = fed
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let labels = labels_of(fed);
        let subject = Subject {
            api_version: kind.api_version(),
            kind: kind.as_str(),
            namespace: Some(namespace),
            name,
            labels: &labels,
        };
        let mut wants = Wants::new(fed, kind, uid, selecting(&subject, &self.policies));
        let replicas: Vec<(String, i32)> = dest
            .iter()
            .map(|t| {
                (
                    t.cluster.clone(),
                    i32::try_from(t.replicas).unwrap_or(i32::MAX),
                )
            })
            .collect();
        let shares = fed_controllers::workload::desired::shares(kind, fed, &replicas);
        dest.iter()
            .zip(shares)
            .map(|(t, share)| {
                let c = clusters.iter().find(|c| c.metadata.name == t.cluster);
                let member = c.map(|c| MemberCluster::new(&c.metadata.name, &c.metadata.labels, &c.spec));
                match wants.get(member.as_ref(), share) {
                    Ok(object) => json!({"cluster": t.cluster, "replicas": t.replicas, "object": object}),
                    Err(e) => json!({"cluster": t.cluster, "replicas": t.replicas, "error": format!("OverrideFailed: {e}")}),
                }
            })
            .collect()
    }

    /// [`Sources::members`] for an object of a copied kind, as the copy controller
    /// builds it.
    fn copy_members(
        &self,
        (api_version, namespace, kind, name): (&str, &str, &str, &str),
        dest: &[TargetCluster],
        clusters: &[Cluster],
    ) -> Vec<Value> {
        let key = (
            api_version.to_owned(),
            kind.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        );
        let Some(fed) = self.copies.get(&key) else {
            return Vec::new();
        };
        let uid = fed
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let interpreter = interpreter_for(
            self.interpreters.iter().map(|(n, s)| (n.as_str(), s)),
            api_version,
            kind,
        );
        let labels = labels_of(fed);
        let subject = Subject {
            api_version,
            kind,
            namespace: (!namespace.is_empty()).then_some(namespace),
            name,
            labels: &labels,
        };
        let selected = selecting(&subject, &self.policies);
        dest.iter()
            .map(|t| {
                let copy = member_object(fed, uid, t, interpreter);
                let c = clusters.iter().find(|c| c.metadata.name == t.cluster);
                // As the copy controller: overrides apply where the cluster is known.
                let out = match c {
                    Some(c) if !selected.is_empty() => overridden(
                        &copy,
                        kind,
                        &MemberCluster::new(&c.metadata.name, &c.metadata.labels, &c.spec),
                        &selected,
                        uid,
                    ),
                    _ => Ok(copy),
                };
                match out {
                    Ok(object) => json!({"cluster": t.cluster, "replicas": t.replicas, "object": object}),
                    Err(e) => json!({"cluster": t.cluster, "replicas": t.replicas, "error": format!("OverrideFailed: {e}")}),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INPUT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: u-1}
spec:
  replicas: 4
  template:
    spec:
      containers: [{name: web, image: "ghcr.io/shop/web:1"}]
---
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {name: regions, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  overrideRules:
  - targetCluster: {regions: [us]}
    overriders:
      imageOverrider: [{component: Registry, operator: replace, value: mirror.example}]
  - targetCluster: {clusterNames: [c]}
    overriders:
      plaintext: [{path: /spec/absent, operator: remove}]
"#;

    fn cluster(name: &str, region: &str) -> Cluster {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"apiEndpoint": "https://x", "region": region}
        }))
        .unwrap()
    }

    #[test]
    fn each_destination_gets_its_copy_or_its_error() {
        let mut s = Sources::default();
        s.add_yaml("in.yaml", INPUT).unwrap();
        let dest = [
            TargetCluster::new("a", 1),
            TargetCluster::new("b", 2),
            TargetCluster::new("c", 1),
        ];
        let clusters = [cluster("a", "eu"), cluster("b", "us"), cluster("c", "eu")];
        let got = s.members(("apps/v1", "shop", "Deployment", "web"), &dest, &clusters);
        assert!(
            s.members(("apps/v1", "shop", "Deployment", "other"), &dest, &clusters)
                .is_empty()
        );
        let image =
            |v: &Value| v["object"]["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        assert_eq!(image(&got[0]), "ghcr.io/shop/web:1");
        assert_eq!(got[0]["object"]["spec"]["replicas"], 1);
        assert_eq!(image(&got[1]), "mirror.example/shop/web:1");
        assert_eq!(got[1]["object"]["spec"]["replicas"], 2);
        assert_eq!(
            got[1]["object"]["metadata"]["labels"]["federation.meridian.dev/owner-uid"],
            "u-1"
        );
        let err = got[2]["error"].as_str().unwrap();
        assert!(
            err.starts_with("OverrideFailed: OverridePolicy shop/regions rule 1"),
            "{err}"
        );
        assert!(got[2].get("object").is_none());
    }
}
