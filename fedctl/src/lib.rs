//! The `fedctl` CLI: filled by the "Cluster membership" and "Workload propagation" issues.
