//! Meridian's controllers. The cluster controller ([`cluster`]) probes member clusters,
//! tracks their capacity and writes `Cluster.status`; workload and service controllers
//! join this crate later, sharing [`metrics`] and [`serve`].

pub mod cli;
pub mod cluster;
pub mod metrics;
pub mod serve;
