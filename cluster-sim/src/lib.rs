//! The simulated member-cluster fleet: filled by the "cluster-sim" issue.
