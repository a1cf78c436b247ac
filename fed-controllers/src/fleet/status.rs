//! What both controllers read back from the per-cluster entries of a Placement's status.

use fed_api::placement::ClusterWorkloadStatus;

/// Every member's error, as `cluster: error`, in entry order.
pub fn member_errors(entries: &[ClusterWorkloadStatus]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| !e.error.is_empty())
        .map(|e| format!("{}: {}", e.cluster, e.error))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_members_with_an_error_are_named() {
        let entry = |cluster: &str, error: &str| ClusterWorkloadStatus {
            cluster: cluster.into(),
            error: error.into(),
            ..Default::default()
        };
        let entries = [entry("a", ""), entry("b", "boom"), entry("c", "no route")];
        assert_eq!(member_errors(&entries), ["b: boom", "c: no route"]);
    }
}
