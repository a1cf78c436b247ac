//! The federated workload being placed: identity, labels, replicas and pod shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use fed_api::interpreter::{InterpretError, ResourceInterpreterSpec};
use fed_api::quantity::{self, QuantityError};

/// Why a workload object could not be read.
#[derive(Debug, Error)]
pub enum WorkloadError {
    /// A required field was missing or had the wrong type.
    #[error("workload field {0} is missing or malformed")]
    Field(&'static str),
    /// A custom kind's object does not say what its interpreter says it does.
    #[error(transparent)]
    Interpreted(#[from] InterpretError),
    /// A resource request is not a valid quantity.
    #[error("container {container:?} request {resource}")]
    Quantity {
        /// Container name.
        container: String,
        /// `cpu` or `memory`.
        resource: &'static str,
        /// Parse failure.
        #[source]
        source: QuantityError,
    },
}

/// Requests of one pod of the workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRequests {
    /// Milli-CPU.
    pub cpu_milli: u64,
    /// Bytes.
    pub memory_bytes: u64,
}

/// A federated workload (Deployment, ReplicaSet, StatefulSet, Job), reduced to what
/// placement needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels, for policy label selectors.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations (Federation v1 preferences live here).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Desired total replicas (a Job's `parallelism`).
    pub replicas: u32,
    /// Requests of one pod.
    #[serde(default)]
    pub requests: PodRequests,
}

/// One container's requests as its spec writes them (Kubernetes quantities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerRequests<'a> {
    /// Container name, for errors.
    pub name: &'a str,
    /// `resources.requests.cpu`.
    pub cpu: Option<&'a str>,
    /// `resources.requests.memory`.
    pub memory: Option<&'a str>,
}

impl PodRequests {
    /// The requests of one pod of `template` (a pod template: `{metadata, spec}`).
    pub fn of_template(template: &serde_json::Value) -> Result<Self, WorkloadError> {
        let pod = &template["spec"];
        let containers = |list: &'static str| {
            pod[list]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    let req = &c["resources"]["requests"];
                    ContainerRequests {
                        name: c["name"].as_str().unwrap_or_default(),
                        cpu: req["cpu"].as_str(),
                        memory: req["memory"].as_str(),
                    }
                })
        };
        Self::of_pod(containers("containers"), containers("initContainers"))
    }

    /// From Kubernetes quantity strings.
    pub fn parse(cpu: &str, memory: &str) -> Result<Self, QuantityError> {
        Ok(Self {
            cpu_milli: quantity::cpu_milli(cpu)?,
            memory_bytes: quantity::units(memory)?,
        })
    }

    /// The requests of one pod: the sum over its containers, or the largest init container
    /// where that is bigger (as kube-scheduler counts them).
    pub fn of_pod<'a>(
        containers: impl IntoIterator<Item = ContainerRequests<'a>>,
        init_containers: impl IntoIterator<Item = ContainerRequests<'a>>,
    ) -> Result<Self, WorkloadError> {
        let read = |c: &ContainerRequests<'_>| -> Result<(u64, u64), WorkloadError> {
            let parse = |resource: &'static str,
                         v: Option<&str>,
                         f: fn(&str) -> Result<u64, QuantityError>| {
                v.map_or(Ok(0), |s| {
                    f(s).map_err(|source| WorkloadError::Quantity {
                        container: c.name.to_owned(),
                        resource,
                        source,
                    })
                })
            };
            Ok((
                parse("cpu", c.cpu, quantity::cpu_milli)?,
                parse("memory", c.memory, quantity::units)?,
            ))
        };
        let mut main = Self::default();
        for c in containers {
            let (cpu, mem) = read(&c)?;
            main.cpu_milli += cpu;
            main.memory_bytes += mem;
        }
        for c in init_containers {
            let (cpu, mem) = read(&c)?;
            main.cpu_milli = main.cpu_milli.max(cpu);
            main.memory_bytes = main.memory_bytes.max(mem);
        }
        Ok(main)
    }
}

impl Workload {
    /// The divided count as written at `field` (`spec.replicas`, a Job's
    /// `spec.parallelism`): absent is 1 (the API's default for both), negative is an error.
    pub fn replicas_of(written: Option<i64>, field: &'static str) -> Result<u32, WorkloadError> {
        written.map_or(Ok(1), |r| {
            u32::try_from(r).map_err(|_| WorkloadError::Field(field))
        })
    }

    /// The field holding the divided count of `kind`.
    pub fn count_field(kind: &str) -> &'static str {
        match fed_api::workload::WorkloadKind::parse(kind) {
            Some(fed_api::workload::WorkloadKind::Job) => "spec.parallelism",
            _ => "spec.replicas",
        }
    }

    /// Reads a workload object's JSON (as `fedctl plan` gets it from files).
    pub fn from_object(obj: &serde_json::Value) -> Result<Self, WorkloadError> {
        let str_field = |v: &serde_json::Value, f: &'static str| {
            v.as_str().map(str::to_owned).ok_or(WorkloadError::Field(f))
        };
        let meta = &obj["metadata"];
        let map = |v: &serde_json::Value,
                   f: &'static str|
         -> Result<BTreeMap<String, String>, WorkloadError> {
            if v.is_null() {
                return Ok(BTreeMap::new());
            }
            serde_json::from_value(v.clone()).map_err(|_| WorkloadError::Field(f))
        };
        let field = Self::count_field(obj["kind"].as_str().unwrap_or_default());
        let replicas = match obj.pointer(&format!("/{}", field.replace('.', "/"))) {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or(WorkloadError::Field(field))?),
        };
        Ok(Self {
            api_version: str_field(&obj["apiVersion"], "apiVersion")?,
            kind: str_field(&obj["kind"], "kind")?,
            namespace: meta["namespace"].as_str().unwrap_or_default().to_owned(),
            name: str_field(&meta["name"], "metadata.name")?,
            labels: map(&meta["labels"], "metadata.labels")?,
            annotations: map(&meta["annotations"], "metadata.annotations")?,
            replicas: Self::replicas_of(replicas, field)?,
            requests: PodRequests::of_template(&obj["spec"]["template"])?,
        })
    }

    /// Reads an object of a custom kind as its `ResourceInterpreter` says: the replica
    /// count at its `replicas` path, one pod's requests from the template at its
    /// `podTemplate` path (none named or found: a pod that requests nothing). `None` when
    /// the interpreter names no replicas (the kind is only ever copied whole).
    pub fn from_interpreted(
        obj: &serde_json::Value,
        interpreter: &ResourceInterpreterSpec,
    ) -> Option<Result<Self, WorkloadError>> {
        let replicas = match interpreter.replicas_of(obj)? {
            Ok(n) => n,
            Err(e) => return Some(Err(e.into())),
        };
        let requests = match interpreter.pod_template_of(obj) {
            None => PodRequests::default(),
            Some(t) => match PodRequests::of_template(t) {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            },
        };
        let meta = &obj["metadata"];
        let map = |v: &serde_json::Value| -> BTreeMap<String, String> {
            serde_json::from_value(v.clone()).unwrap_or_default()
        };
        Some(Ok(Self {
            api_version: interpreter.target.api_version.clone(),
            kind: interpreter.target.kind.clone(),
            namespace: meta["namespace"].as_str().unwrap_or_default().to_owned(),
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            labels: map(&meta["labels"]),
            annotations: map(&meta["annotations"]),
            replicas,
            requests,
        }))
    }

    /// `namespace/name`, the key Federation v1 hashed for its tie-break.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_deployment() {
        let obj = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"replicas": 4, "template": {"spec": {
                "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}},
                    {"name": "c"}
                ]}}}
        });
        let w = Workload::from_object(&obj).unwrap();
        assert_eq!(w.replicas, 4);
        assert_eq!(
            w.requests,
            PodRequests {
                cpu_milli: 2000,
                memory_bytes: 1536 << 20
            }
        );
        assert_eq!(w.key(), "shop/web");
        assert_eq!(w.labels["app"], "web");

        let bad = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"template": {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "x"}}}]}}}});
        assert!(matches!(
            Workload::from_object(&bad),
            Err(WorkloadError::Quantity { .. })
        ));
        let no_replicas = serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "x"}});
        assert_eq!(Workload::from_object(&no_replicas).unwrap().replicas, 1);
    }

    #[test]
    fn a_jobs_count_is_its_parallelism() {
        let job = |spec: serde_json::Value| {
            serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "crunch", "namespace": "b"}, "spec": spec})
        };
        let cases = [
            (
                serde_json::json!({"parallelism": 3, "completions": 6}),
                Some(3),
            ),
            (serde_json::json!({"completions": 6}), Some(1)),
            (serde_json::json!({"replicas": 9}), Some(1)),
            (serde_json::json!({"parallelism": -1}), None),
        ];
        for (spec, want) in cases {
            let got = Workload::from_object(&job(spec.clone()));
            match want {
                Some(n) => assert_eq!(got.unwrap().replicas, n, "{spec}"),
                None => assert!(
                    matches!(got, Err(WorkloadError::Field("spec.parallelism"))),
                    "{spec}"
                ),
            }
        }
        let sts = serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db"}, "spec": {"replicas": 3}});
        assert_eq!(Workload::from_object(&sts).unwrap().replicas, 3);
    }

    #[test]
    fn reads_an_interpreted_object() {
        let interpreter: ResourceInterpreterSpec = serde_json::from_value(serde_json::json!({
            "target": {"apiVersion": "example.com/v1", "kind": "Rollout"},
            "replicas": {"path": ".spec.replicas"},
            "podTemplate": {"path": ".spec.template"}
        }))
        .unwrap();
        let rollout = |spec: serde_json::Value| {
            serde_json::json!({"apiVersion": "example.com/v1", "kind": "Rollout",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
                "spec": spec})
        };
        let template = serde_json::json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
        ]}});
        let w = Workload::from_interpreted(
            &rollout(serde_json::json!({"replicas": 6, "template": template})),
            &interpreter,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (w.kind.as_str(), w.namespace.as_str(), w.name.as_str()),
            ("Rollout", "shop", "web")
        );
        assert_eq!(w.replicas, 6);
        assert_eq!(w.labels["app"], "web");
        assert_eq!(
            w.requests,
            PodRequests {
                cpu_milli: 500,
                memory_bytes: 64 << 20
            }
        );
        // No template: a pod that requests nothing.
        let bare =
            Workload::from_interpreted(&rollout(serde_json::json!({"replicas": 2})), &interpreter)
                .unwrap()
                .unwrap();
        assert_eq!((bare.replicas, bare.requests), (2, PodRequests::default()));
        // Errors, never a default.
        for spec in [
            serde_json::json!({}),
            serde_json::json!({"replicas": "many"}),
        ] {
            assert!(
                matches!(
                    Workload::from_interpreted(&rollout(spec.clone()), &interpreter),
                    Some(Err(WorkloadError::Interpreted(_)))
                ),
                "{spec}"
            );
        }
        let bad_request = rollout(
            serde_json::json!({"replicas": 1, "template": {"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}}}),
        );
        assert!(matches!(
            Workload::from_interpreted(&bad_request, &interpreter),
            Some(Err(WorkloadError::Quantity { .. }))
        ));
        // An interpreter that names no replicas: the kind is copied whole.
        let copied = ResourceInterpreterSpec {
            replicas: None,
            ..interpreter
        };
        assert!(
            Workload::from_interpreted(&rollout(serde_json::json!({"replicas": 6})), &copied)
                .is_none()
        );
    }
}
