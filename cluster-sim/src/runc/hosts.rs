//! A pod's `/etc/hosts`, as the kubelet writes it: localhost lines, the pod's own hostname
//! on its IP (fully qualified first when it has a `subdomain`), and its `hostAliases`.
//! Services are found through the cluster DNS ([`super::dns`]), not here.

use serde_json::Value;

use super::dns::CLUSTER_DOMAIN;
use crate::controllers::util::str_at;

/// The hostname of `pod`'s containers: `spec.hostname`, else its name (at most 63 bytes,
/// a label, as the kubelet truncates it).
pub(crate) fn pod_hostname(pod: &Value) -> String {
    let name = str_at(pod, "/spec/hostname")
        .filter(|h| !h.is_empty())
        .or_else(|| str_at(pod, "/metadata/name"))
        .unwrap_or("");
    let mut h = name.chars().take(63).collect::<String>();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// The text of the hosts file of `pod` at `pod_ip`.
pub(crate) fn hosts_file(pod: &Value, pod_ip: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    let hostname = pod_hostname(pod);
    let ns = str_at(pod, "/metadata/namespace").unwrap_or("default");
    match str_at(pod, "/spec/subdomain").filter(|s| !s.is_empty()) {
        Some(sub) => out.push_str(&format!(
            "{pod_ip}\t{hostname}.{sub}.{ns}.svc.{CLUSTER_DOMAIN}\t{hostname}\n"
        )),
        None => out.push_str(&format!("{pod_ip}\t{hostname}\n")),
    }
    let aliases: Vec<String> = pod
        .pointer("/spec/hostAliases")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let ip = str_at(a, "/ip")?;
            let names: Vec<&str> = a
                .get("hostnames")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            Some(format!("{ip}\t{}\n", names.join("\t")))
        })
        .collect();
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        out.extend(aliases);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const KUBELET_HEAD: &str = "# Kubernetes-managed hosts file.\n\
        127.0.0.1\tlocalhost\n\
        ::1\tlocalhost ip6-localhost ip6-loopback\n\
        fe00::0\tip6-localnet\n\
        fe00::0\tip6-mcastprefix\n\
        fe00::1\tip6-allnodes\n\
        fe00::2\tip6-allrouters\n";

    #[test]
    fn hosts_file_is_the_kubelets() {
        let plain = json!({"metadata": {"namespace": "shop", "name": "web-7d9f"}, "spec": {}});
        assert_eq!(
            hosts_file(&plain, "100.65.0.5"),
            format!("{KUBELET_HEAD}100.65.0.5\tweb-7d9f\n")
        );
        let stateful = json!({"metadata": {"namespace": "shop", "name": "db-0"},
            "spec": {"hostname": "db-0", "subdomain": "db",
                "hostAliases": [{"ip": "192.0.2.7", "hostnames": ["a.test", "b.test"]}]}});
        assert_eq!(
            hosts_file(&stateful, "100.65.0.6"),
            format!(
                "{KUBELET_HEAD}100.65.0.6\tdb-0.db.shop.svc.cluster.local\tdb-0\n\
                 \n# Entries added by HostAliases.\n192.0.2.7\ta.test\tb.test\n"
            )
        );
        // No Service is named here any more: the cluster DNS answers for them.
        assert!(!hosts_file(&plain, "100.65.0.5").contains(".svc."));
        let long = json!({"metadata": {"name": format!("{}-x", "a".repeat(62))}, "spec": {}});
        assert_eq!(pod_hostname(&long), "a".repeat(62));
    }
}
