//! Where the election record lives: the [`LeaseStore`] the elector reads and writes, and
//! [`KubeLeases`], a `coordination.k8s.io/v1` Lease through the API.
//!
//! Every write names what it read (create only when absent, replace at the
//! resourceVersion read), so of two candidates racing for the same version one gets 409
//! and stays a candidate.

use std::future::Future;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};

use super::record::{Record, Stored};

/// Why a Lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// 409: the Lease changed (or was created) since it was read.
    #[error("the Lease changed since it was read")]
    Conflict,
    /// 404 on a replace: the Lease was deleted since it was read.
    #[error("the Lease was deleted since it was read")]
    Gone,
    /// The store did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    /// Any other failure of the API.
    #[error("Lease API")]
    Api(#[source] kube::Error),
    /// A failure of an in-process store (tests: a partition).
    #[error("{0}")]
    Unavailable(String),
}

/// Reads and writes one election record.
pub trait LeaseStore: Send + Sync + 'static {
    /// The record and its version; `None` when there is no Lease.
    fn get(&self) -> impl Future<Output = Result<Option<Stored>, StoreError>> + Send;
    /// Creates the Lease holding `record`; [`StoreError::Conflict`] when it exists.
    fn create(&self, record: &Record) -> impl Future<Output = Result<Stored, StoreError>> + Send;
    /// Replaces the record of the Lease at `resource_version`; [`StoreError::Conflict`]
    /// when the Lease is at another version.
    fn update(
        &self,
        record: &Record,
        resource_version: &str,
    ) -> impl Future<Output = Result<Stored, StoreError>> + Send;
    /// The Lease each time it changes (`None`: deleted), best effort: a candidate uses it
    /// to see renewals the moment they happen rather than at its next poll, and polls
    /// regardless.
    fn changes(&self) -> BoxStream<'static, Option<Stored>>;
    /// `namespace/name`, for logs.
    fn describe(&self) -> String;
}

/// The election record in a Lease `namespace/name` of the API server.
#[derive(Clone)]
pub struct KubeLeases {
    client: kube::Client,
    namespace: String,
    name: String,
}

impl KubeLeases {
    /// The Lease `namespace/name`, through `client` (which must not be gated by the
    /// election it serves: see [`super::gate`]).
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn lease(&self, record: &Record, resource_version: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                resource_version: resource_version.map(str::to_string),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec()),
        }
    }

    /// Creates the namespace the Lease lives in: `meridian-system` does not exist in a
    /// fresh federation until something puts an object there.
    async fn ensure_namespace(&self) -> Result<(), StoreError> {
        let ns = crate::namespace::named(&self.namespace, []);
        crate::namespace::ensure(&self.client, &ns)
            .await
            .map(drop)
            .map_err(StoreError::Api)
    }
}

fn stored(lease: &Lease) -> Stored {
    Stored {
        record: Record::from_spec(lease.spec.as_ref()),
        resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
    }
}

fn classify(e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(s) if s.code == 409 => StoreError::Conflict,
        kube::Error::Api(s) if s.code == 404 => StoreError::Gone,
        e => StoreError::Api(e),
    }
}

impl LeaseStore for KubeLeases {
    async fn get(&self) -> Result<Option<Stored>, StoreError> {
        self.api()
            .get_opt(&self.name)
            .await
            .map(|l| l.as_ref().map(stored))
            .map_err(StoreError::Api)
    }

    async fn create(&self, record: &Record) -> Result<Stored, StoreError> {
        let lease = self.lease(record, None);
        match self.api().create(&PostParams::default(), &lease).await {
            Ok(l) => Ok(stored(&l)),
            // The namespace does not exist yet.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.ensure_namespace().await?;
                self.api()
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|l| stored(&l))
                    .map_err(classify)
            }
            Err(e) => Err(classify(e)),
        }
    }

    async fn update(&self, record: &Record, resource_version: &str) -> Result<Stored, StoreError> {
        let lease = self.lease(record, Some(resource_version));
        self.api()
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|l| stored(&l))
            .map_err(classify)
    }

    fn changes(&self) -> BoxStream<'static, Option<Stored>> {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        watcher::watcher(self.api(), config)
            .default_backoff()
            .filter_map(|ev| async move {
                match ev {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                        Some(Some(stored(&l)))
                    }
                    Ok(watcher::Event::Delete(_)) => Some(None),
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                    Err(error) => {
                        tracing::debug!(%error, "Lease watch");
                        None
                    }
                }
            })
            .boxed()
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
