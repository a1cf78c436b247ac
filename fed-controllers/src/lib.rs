//! Meridian's controllers. The cluster controller ([`cluster`]) probes member clusters,
//! tracks their capacity and writes `Cluster.status`; the workload controller ([`workload`])
//! pushes federated Deployments/ReplicaSets and what they reference into members and
//! aggregates their status; the service controller ([`service`]) makes federated Services
//! reachable across members through their lb-agents. They share [`credentials`] and
//! [`metrics`], and the process's work queues and Event recorder come from
//! `meridian_runtime`; [`member_client`] builds member clients that multiplex everything on
//! one connection per member. [`copies`] decides the copies of every other kind (Duplicated).
//! What the controllers keep of many objects they keep [`compact`] (packed JSON text).

pub mod cli;
pub mod cluster;
pub mod compact;
pub mod copies;
pub mod credentials;
pub mod dep_writers;
pub mod dynamic;
pub mod fleet;
pub mod member_client;
pub mod member_sync;
pub mod member_watch;
pub mod metrics;
pub mod name_index;
pub mod service;
pub mod slim_cache;
pub mod workload;
