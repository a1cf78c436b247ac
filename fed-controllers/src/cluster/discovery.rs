//! Discovery of what a member serves: its Kubernetes version and `apiEnablements`
//! (`/api`, `/apis` and each group-version's resources).

use std::time::Duration;

use fed_api::cluster::ApiEnablement;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;

/// Errors from discovering a member's APIs.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// A discovery request failed.
    #[error("discovery request {path}")]
    Request {
        /// What was being fetched.
        path: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The whole refresh did not finish in time.
    #[error("discovery timed out after {0:?}")]
    Timeout(Duration),
}

/// What discovery found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// `/version` gitVersion.
    pub kubernetes_version: String,
    /// Served group-versions and their resources, sorted.
    pub api_enablements: Vec<ApiEnablement>,
}

/// Top-level resource names of a resource list, sorted (subresources like
/// `deployments/scale` are left out: they are not separately enabled).
pub fn resource_names(list: &APIResourceList) -> Vec<String> {
    let mut names: Vec<String> = list
        .resources
        .iter()
        .map(|r| r.name.clone())
        .filter(|n| !n.contains('/'))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Fetches version and all group-versions' resources, four requests at a time, within `deadline`.
pub async fn discover(client: &Client, deadline: Duration) -> Result<Discovered, DiscoveryError> {
    tokio::time::timeout(deadline, discover_inner(client))
        .await
        .map_err(|_| DiscoveryError::Timeout(deadline))?
}

async fn discover_inner(client: &Client) -> Result<Discovered, DiscoveryError> {
    let req = |path: &str| {
        let path = path.to_string();
        move |source| DiscoveryError::Request { path, source }
    };
    let version = client.apiserver_version().await.map_err(req("/version"))?;
    let core = client.list_core_api_versions().await.map_err(req("/api"))?;
    let groups = client.list_api_groups().await.map_err(req("/apis"))?;
    let mut gvs: Vec<String> = core.versions.clone();
    for g in &groups.groups {
        gvs.extend(g.versions.iter().map(|v| v.group_version.clone()));
    }
    gvs.sort();
    gvs.dedup();
    let mut api_enablements: Vec<ApiEnablement> = futures::stream::iter(gvs)
        .map(|gv| async move {
            let list = if gv.contains('/') {
                client.list_api_group_resources(&gv).await
            } else {
                client.list_core_api_resources(&gv).await
            };
            list.map(|l| ApiEnablement {
                group_version: gv.clone(),
                resources: resource_names(&l),
            })
            .map_err(|source| DiscoveryError::Request { path: gv, source })
        })
        .buffer_unordered(4)
        .try_collect()
        .await?;
    api_enablements.sort_by(|a, b| a.group_version.cmp(&b.group_version));
    Ok(Discovered {
        kubernetes_version: version.git_version,
        api_enablements,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    #[test]
    fn subresources_are_left_out_and_names_sorted() {
        let r = |n: &str| APIResource {
            name: n.into(),
            ..Default::default()
        };
        let list = APIResourceList {
            group_version: "apps/v1".into(),
            resources: vec![
                r("replicasets"),
                r("deployments/scale"),
                r("deployments"),
                r("deployments/status"),
            ],
        };
        assert_eq!(resource_names(&list), vec!["deployments", "replicasets"]);
    }
}
