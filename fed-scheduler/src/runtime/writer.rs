//! Placement writes against the federation API, each bounded by a timeout, with the
//! outcomes the reconciler acts on (409 and 404 mean "re-read and try again").

use std::time::Duration;

use fed_api::Placement;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// 409: the object changed (or already exists) since it was read.
    #[error("{0}: conflict")]
    Conflict(&'static str),
    /// 404: the object is gone.
    #[error("{0}: not found")]
    NotFound(&'static str),
    /// The API did not answer within the timeout.
    #[error("{0}: timed out")]
    Timeout(&'static str),
    /// Any other failure.
    #[error("{op}: {source}")]
    Api {
        /// The operation.
        op: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Writes Placements.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    timeout: Duration,
}

impl Writer {
    /// A writer using `client`, giving each request `timeout`.
    pub fn new(client: Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }

    fn api(&self, namespace: &str) -> Api<Placement> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn run<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        match tokio::time::timeout(self.timeout, f).await {
            Err(_) => Err(WriteError::Timeout(op)),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(WriteError::Conflict(op)),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(WriteError::NotFound(op)),
            Ok(Err(source)) => Err(WriteError::Api { op, source }),
        }
    }

    /// Creates a Placement (its status is ignored by the API; write it afterwards).
    pub async fn create(&self, p: &Placement) -> Result<Placement, WriteError> {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let api = self.api(&ns);
        self.run("create", api.create(&PostParams::default(), p))
            .await
    }

    /// Merge-patches metadata/spec (the scheduler owns both parts it patches).
    pub async fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Placement, WriteError> {
        let api = self.api(namespace);
        self.run(
            "patch",
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }

    /// Replaces the status subresource; `p.metadata.resourceVersion` guards against
    /// overwriting another writer's status.
    pub async fn replace_status(&self, p: &Placement) -> Result<Placement, WriteError> {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let api = self.api(&ns);
        self.run(
            "status",
            api.replace_status(&name, &PostParams::default(), p),
        )
        .await
    }
}
