//! A pod's `/etc/hosts`: the kubelet's lines (localhost, the pod's own name on its IP) and,
//! standing in for cluster DNS, one line per Service with a ClusterIP naming it the ways a
//! pod's resolver would find it through the cluster search path:
//! `<svc>.<ns>.svc.cluster.local`, `<svc>.<ns>.svc`, `<svc>.<ns>`, and `<svc>` for the pod's
//! own namespace. The supervisor rewrites the file in place as Services come and go.

use serde_json::Value;

use crate::controllers::util::str_at;

/// The cluster's DNS domain (what kubelets default `--cluster-domain` to).
pub(crate) const CLUSTER_DOMAIN: &str = "cluster.local";

/// The text of the hosts file of a pod in `namespace` named `hostname` at `pod_ip`, given
/// every Service of the cluster.
pub(crate) fn hosts_file(
    pod_ip: &str,
    hostname: &str,
    namespace: &str,
    services: &[Value],
) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file (cluster-sim: Services stand in for cluster DNS).\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    out.push_str(&format!("{pod_ip}\t{hostname}\n"));
    let mut lines: Vec<String> = services
        .iter()
        .filter_map(|s| {
            let ip =
                str_at(s, "/spec/clusterIP").filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())?;
            let name = str_at(s, "/metadata/name")?;
            let ns = str_at(s, "/metadata/namespace")?;
            let mut names = format!("{name}.{ns}.svc.{CLUSTER_DOMAIN} {name}.{ns}.svc {name}.{ns}");
            if ns == namespace {
                names.push(' ');
                names.push_str(name);
            }
            Some(format!("{ip}\t{names}\n"))
        })
        .collect();
    lines.sort();
    out.extend(lines);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn services_resolve_by_their_dns_names() {
        let services = vec![
            json!({"metadata": {"namespace": "meridian", "name": "api"}, "spec": {"clusterIP": "127.1.0.1"}}),
            json!({"metadata": {"namespace": "other", "name": "db"}, "spec": {"clusterIP": "127.1.0.2"}}),
            json!({"metadata": {"namespace": "meridian", "name": "headless"}, "spec": {"clusterIP": "None"}}),
            json!({"metadata": {"namespace": "meridian", "name": "pending"}, "spec": {}}),
        ];
        let text = hosts_file("127.10.0.5", "api-7d9f", "meridian", &services);
        assert_eq!(
            text.lines().skip(1).collect::<Vec<_>>(),
            vec![
                "127.0.0.1\tlocalhost",
                "::1\tlocalhost ip6-localhost ip6-loopback",
                "127.10.0.5\tapi-7d9f",
                "127.1.0.1\tapi.meridian.svc.cluster.local api.meridian.svc api.meridian api",
                "127.1.0.2\tdb.other.svc.cluster.local db.other.svc db.other",
            ]
        );
    }
}
