//! Meridian controllers (cluster, workload, service): filled by the "Cluster membership" and "Workload propagation" issues.
