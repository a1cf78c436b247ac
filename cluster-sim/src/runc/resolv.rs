//! A pod's `/etc/resolv.conf`, as the kubelet writes it from the pod's `dnsPolicy` and
//! `dnsConfig`:
//!
//! - `ClusterFirst` (the default) and `ClusterFirstWithHostNet`: the cluster DNS
//!   ([`super::dns`]), searching `<ns>.svc.cluster.local svc.cluster.local cluster.local`,
//!   `options ndots:5`; a `hostNetwork` pod with `ClusterFirst` falls back to `Default`;
//! - `Default`: the node's resolver. There is none to inherit here (the sandboxed pods
//!   reach only their cluster and the host), so it names no nameserver, only what
//!   `dnsConfig` adds;
//! - `None`: only `dnsConfig`.
//!
//! `dnsConfig` is merged as the kubelet does: its nameservers and searches appended to the
//! policy's without duplicates, its options replacing those of the same name.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::Value;

use super::dns::CLUSTER_DOMAIN;
use crate::controllers::util::str_at;

/// The kubelet's limits: nameservers a resolver reads, search domains it passes on.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

fn push_unique(list: &mut Vec<String>, items: Vec<String>) {
    for i in items {
        if !list.contains(&i) {
            list.push(i);
        }
    }
}

/// The text of the `resolv.conf` of `pod`, whose cluster DNS server is at `dns` (`None`
/// only for a cluster without a pod network, which the fleet's validation rules out).
pub(crate) fn resolv_conf(pod: &Value, dns: Option<Ipv4Addr>) -> String {
    let ns = str_at(pod, "/metadata/namespace").unwrap_or("default");
    let host_network = pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true);
    let policy = match str_at(pod, "/spec/dnsPolicy").unwrap_or("ClusterFirst") {
        "ClusterFirst" if host_network => "Default",
        p => p,
    };
    let mut nameservers = Vec::new();
    let mut searches = Vec::new();
    // name → value ("" for a bare option).
    let mut options: BTreeMap<String, String> = BTreeMap::new();
    if matches!(policy, "ClusterFirst" | "ClusterFirstWithHostNet") {
        nameservers.extend(dns.map(|d| d.to_string()));
        searches = vec![
            format!("{ns}.svc.{CLUSTER_DOMAIN}"),
            format!("svc.{CLUSTER_DOMAIN}"),
            CLUSTER_DOMAIN.to_string(),
        ];
        options.insert("ndots".into(), "5".into());
    }
    if let Some(cfg) = pod.pointer("/spec/dnsConfig") {
        push_unique(&mut nameservers, strings(cfg.get("nameservers")));
        push_unique(&mut searches, strings(cfg.get("searches")));
        for o in cfg
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = str_at(o, "/name") {
                options.insert(name.into(), str_at(o, "/value").unwrap_or("").into());
            }
        }
    }
    nameservers.truncate(MAX_NAMESERVERS);
    searches.truncate(MAX_SEARCHES);
    let mut out = String::new();
    for n in &nameservers {
        out.push_str(&format!("nameserver {n}\n"));
    }
    if !searches.is_empty() {
        out.push_str(&format!("search {}\n", searches.join(" ")));
    }
    if !options.is_empty() {
        let opts: Vec<String> = options
            .iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    k.clone()
                } else {
                    format!("{k}:{v}")
                }
            })
            .collect();
        out.push_str(&format!("options {}\n", opts.join(" ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DNS: Option<Ipv4Addr> = Some(Ipv4Addr::new(100, 65, 255, 10));

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"namespace": "shop", "name": "web"}, "spec": spec})
    }

    #[test]
    fn resolv_conf_follows_the_dns_policy_and_config() {
        let cluster_first = "nameserver 100.65.255.10\n\
            search shop.svc.cluster.local svc.cluster.local cluster.local\n\
            options ndots:5\n";
        let cases = [
            ("no policy", json!({}), cluster_first),
            (
                "ClusterFirst",
                json!({"dnsPolicy": "ClusterFirst"}),
                cluster_first,
            ),
            (
                "ClusterFirstWithHostNet on the host network",
                json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true}),
                cluster_first,
            ),
            (
                "ClusterFirst on the host network falls back to Default",
                json!({"hostNetwork": true}),
                "",
            ),
            (
                "Default: no node resolver to inherit",
                json!({"dnsPolicy": "Default"}),
                "",
            ),
            (
                "None: dnsConfig only",
                json!({"dnsPolicy": "None", "dnsConfig": {
                    "nameservers": ["192.0.2.53"], "searches": ["example.test"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}),
                "nameserver 192.0.2.53\nsearch example.test\noptions edns0 ndots:2\n",
            ),
            (
                "ClusterFirst merged with dnsConfig",
                json!({"dnsConfig": {
                    "nameservers": ["100.65.255.10", "192.0.2.53", "192.0.2.54", "192.0.2.55"],
                    "searches": ["svc.cluster.local", "example.test"],
                    "options": [{"name": "ndots", "value": "1"}, {"name": "single-request"}]}}),
                "nameserver 100.65.255.10\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n\
                 search shop.svc.cluster.local svc.cluster.local cluster.local example.test\n\
                 options ndots:1 single-request\n",
            ),
        ];
        for (what, spec, want) in cases {
            assert_eq!(resolv_conf(&pod(spec), DNS), want, "{what}");
        }
    }
}
