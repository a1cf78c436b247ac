//! The service-account credentials a pod finds at
//! `/var/run/secrets/kubernetes.io/serviceaccount` (`token`, `ca.crt`, `namespace`), which
//! in-cluster clients (client-go, kube-rs) read: what kube-apiserver's ServiceAccount
//! admission plugin adds to a pod as its `kube-api-access-<suffix>` projected volume and
//! mounts into every container. cluster-sim's API server does not run that plugin, so the
//! runtime adds the volume to its own view of the pod when it runs it (the pod in the API is
//! left as written).

use serde_json::{Value, json};

/// Where the credentials are mounted.
pub(crate) const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Adds the `kube-api-access` volume and its read-only mount to every container and init
/// container of `pod`, as the admission plugin does: not when the pod sets
/// `automountServiceAccountToken: false`, nor when a container already mounts something at
/// [`MOUNT_PATH`] (then none is added anywhere, as upstream skips a pod that carries its own).
pub(crate) fn add(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("automountServiceAccountToken") == Some(&Value::Bool(false)) {
        return;
    }
    let lists = ["initContainers", "containers"];
    let mounted = lists
        .iter()
        .filter_map(|l| spec.get(*l).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("volumeMounts").and_then(Value::as_array))
        .flatten()
        .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH));
    if mounted {
        return;
    }
    // Upstream picks 5 random characters; a fixed name is as unique within one pod.
    let name = "kube-api-access-msim";
    let volume = json!({"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}});
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(v) => v.push(volume),
        None => {
            spec.insert("volumes".into(), json!([volume]));
        }
    }
    for l in lists {
        for c in spec
            .get_mut(l)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let mount = json!({"name": name, "mountPath": MOUNT_PATH, "readOnly": true});
            match c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                Some(m) => m.push(mount),
                None => c["volumeMounts"] = json!([mount]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts(pod: &Value, list: &str) -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["volumeMounts"].as_array().cloned().unwrap_or_default())
            .map(|m| {
                format!(
                    "{}:{}",
                    m["name"].as_str().unwrap(),
                    m["mountPath"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn every_container_gets_the_credentials_unless_the_pod_opts_out() {
        let mut pod = json!({"spec": {
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
            "volumes": [{"name": "d", "emptyDir": {}}],
        }});
        add(&mut pod);
        let want = format!("kube-api-access-msim:{MOUNT_PATH}");
        assert_eq!(mounts(&pod, "initContainers"), std::slice::from_ref(&want));
        assert_eq!(mounts(&pod, "containers"), ["d:/d".to_string(), want]);
        let vols = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 2);
        assert_eq!(
            vols[1]["projected"]["sources"][0]["serviceAccountToken"]["path"],
            "token"
        );
        // Once is enough: the pod now mounts the path.
        let again = pod.clone();
        add(&mut pod);
        assert_eq!(pod, again);

        for spec in [
            json!({"automountServiceAccountToken": false, "containers": [{"name": "a"}]}),
            json!({"containers": [{"name": "a", "volumeMounts": [{"name": "own", "mountPath": MOUNT_PATH}]}]}),
        ] {
            let mut pod = json!({"spec": spec});
            let before = pod.clone();
            add(&mut pod);
            assert_eq!(pod, before);
        }
    }
}
