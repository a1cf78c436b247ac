//! Meridian's controllers. The cluster controller ([`cluster`]) probes member clusters,
//! tracks their capacity and writes `Cluster.status`; the workload controller ([`workload`])
//! pushes federated Deployments/ReplicaSets and what they reference into members and
//! aggregates their status. Both share [`credentials`] and [`metrics`];
//! [`member_client`] builds member clients that multiplex everything on one connection.

pub mod cli;
pub mod cluster;
pub mod credentials;
pub mod member_client;
pub mod metrics;
pub mod workload;
