//! charts/meridian installed with Helm into a cluster-sim host cluster (its pods stay
//! simulated): the objects it makes, credentials kept across upgrades, the serving certificate
//! re-issued by the same CA when its names change or its expiry nears, the member mode, and `helm uninstall` leaving nothing behind.

use std::time::{Duration, Instant};

use meridian_e2e::Env;
use meridian_e2e::helm::Helm;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/meridian");

#[test]
fn helm4_installs_the_chart_into_a_simulated_host_and_member() {
    chart_lifecycle(4);
}

#[test]
fn helm3_installs_the_chart_into_a_simulated_host_and_member() {
    chart_lifecycle(3);
}

fn chart_lifecycle(major: u8) {
    let env = Env::start(&["--clusters=1", "--nodes=2", "--ready-delay=0s"]);
    let helm = Helm::new(major, &env.merged);
    let kubectl = |args: &[&str]| {
        let mut all = vec!["--context", "sim-1"];
        all.extend_from_slice(args);
        env.ok("kubectl", &all)
    };
    let secret_key = |ns: &str, name: &str, key: &str| {
        let jsonpath = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
        kubectl(&["get", "secret", name, "-n", ns, "-o", &jsonpath])
    };
    let helm_in = |ns: &str, args: &[&str]| {
        let mut all = vec!["--kube-context", "sim-1", "--namespace", ns];
        all.extend_from_slice(args);
        helm.ok(&all)
    };

    // cluster-sim serves neither PersistentVolumeClaims nor PodDisruptionBudgets: the API
    // server on etcd (its data dir an emptyDir) and one replica of each component.
    helm_in(
        "meridian",
        &[
            "install",
            "meridian",
            CHART,
            "--create-namespace",
            "--wait",
            "--timeout=120s",
            "--set",
            "apiserver.storage.backend=etcd",
            "--set",
            "apiserver.storage.etcd.servers={https://etcd.example:2379}",
            "--set",
            "apiserver.externalAddress=fed.example.com",
        ],
    );
    for d in [
        "meridian-apiserver",
        "meridian-scheduler",
        "meridian-controllers",
    ] {
        let ready = kubectl(&[
            "get",
            "deploy",
            d,
            "-n",
            "meridian",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ]);
        assert_eq!(ready, "1", "{d}");
    }
    let kubeconfig = secret_key("meridian", "meridian-admin-kubeconfig", "kubeconfig");
    let kubeconfig = String::from_utf8(decode(&kubeconfig)).expect("utf-8 kubeconfig");
    assert!(
        kubeconfig.contains("server: https://fed.example.com:443"),
        "{kubeconfig}"
    );
    assert!(
        kubeconfig.contains("certificate-authority-data: "),
        "{kubeconfig}"
    );
    let ca = secret_key("meridian", "meridian-pki", "ca.crt");
    let cert = secret_key("meridian", "meridian-pki", "tls.crt");
    let token = secret_key("meridian", "meridian-tokens", "admin");
    assert!(!ca.is_empty() && !cert.is_empty() && !token.is_empty());

    // A changed value: the credentials stay as they are.
    helm_in(
        "meridian",
        &[
            "upgrade",
            "meridian",
            CHART,
            "--reuse-values",
            "--wait",
            "--timeout=120s",
            "--set",
            "controllers.dnsZone=fed.example",
        ],
    );
    let args = kubectl(&[
        "get",
        "deploy",
        "meridian-controllers",
        "-n",
        "meridian",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(args.contains("--dns-zone=fed.example"), "{args}");
    assert_eq!(secret_key("meridian", "meridian-pki", "ca.crt"), ca);
    assert_eq!(secret_key("meridian", "meridian-pki", "tls.crt"), cert);
    assert_eq!(secret_key("meridian", "meridian-tokens", "admin"), token);
    let checksum = || {
        kubectl(&[
            "get",
            "deploy",
            "meridian-apiserver",
            "-n",
            "meridian",
            "-o",
            "jsonpath={.spec.template.metadata.annotations.checksum/credentials}",
        ])
    };
    let before = checksum();

    // Another name for the certificate: re-issued by the same CA, and the API server rolls.
    helm_in(
        "meridian",
        &[
            "upgrade",
            "meridian",
            CHART,
            "--reuse-values",
            "--wait",
            "--timeout=120s",
            "--set",
            "apiserver.extraSANs={meridian.internal.example}",
        ],
    );
    assert_eq!(secret_key("meridian", "meridian-pki", "ca.crt"), ca);
    assert_ne!(secret_key("meridian", "meridian-pki", "tls.crt"), cert);
    assert_eq!(secret_key("meridian", "meridian-tokens", "admin"), token);
    assert_ne!(checksum(), before);

    // Within renewBeforeDays of expiry (here: always), an upgrade re-issues it too.
    let cert = secret_key("meridian", "meridian-pki", "tls.crt");
    helm_in(
        "meridian",
        &[
            "upgrade",
            "meridian",
            CHART,
            "--reuse-values",
            "--set",
            "certificates.renewBeforeDays=400",
        ],
    );
    assert_eq!(secret_key("meridian", "meridian-pki", "ca.crt"), ca);
    assert_ne!(secret_key("meridian", "meridian-pki", "tls.crt"), cert);

    helm_in(
        "meridian",
        &["uninstall", "meridian", "--wait", "--timeout=120s"],
    );
    assert_namespace_empty(&kubectl, "meridian");

    // Member mode. One replica: no PodDisruptionBudget in cluster-sim.
    helm_in(
        "meridian-system",
        &[
            "install",
            "meridian-member",
            CHART,
            "--create-namespace",
            "--wait",
            "--timeout=120s",
            "--set",
            "installMode=member",
            "--set",
            "lbAgent.cluster=sim-1",
            "--set",
            "lbAgent.replicas=1",
        ],
    );
    let svc = kubectl(&[
        "get",
        "svc",
        "meridian-lb-agent",
        "-n",
        "meridian-system",
        "-o",
        "jsonpath={.spec.type}",
    ]);
    assert_eq!(svc, "LoadBalancer");
    let roles = kubectl(&[
        "get",
        "clusterroles,clusterrolebindings",
        "-l",
        "app.kubernetes.io/instance=meridian-member",
        "-o",
        "name",
    ]);
    assert_eq!(roles.lines().count(), 2, "{roles}");
    helm_in(
        "meridian-system",
        &["uninstall", "meridian-member", "--wait", "--timeout=120s"],
    );
    assert_namespace_empty(&kubectl, "meridian-system");
    let roles = kubectl(&[
        "get",
        "clusterroles,clusterrolebindings",
        "-l",
        "app.kubernetes.io/instance=meridian-member",
        "-o",
        "name",
    ]);
    assert!(roles.is_empty(), "{roles}");
}

/// The bundled etcd's certificates are the chart's like the API server's: kept across an
/// upgrade, issued again by the same CA when their expiry nears (the members roll), and gone
/// with `helm uninstall`. One member: cluster-sim serves no PodDisruptionBudgets; no `--wait`:
/// the StatefulSet's pods are not the point here.
#[test]
fn helm4_keeps_the_bundled_etcds_certificates_across_upgrades() {
    let env = Env::start(&["--clusters=1", "--nodes=2", "--ready-delay=0s"]);
    let helm = Helm::new(4, &env.merged);
    let kubectl = |args: &[&str]| {
        let mut all = vec!["--context", "sim-1"];
        all.extend_from_slice(args);
        env.ok("kubectl", &all)
    };
    let key = |name: &str, key: &str| {
        let jsonpath = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
        kubectl(&["get", "secret", name, "-n", "meridian", "-o", &jsonpath])
    };
    let upgrade = |set: &str| {
        helm.ok(&[
            "--kube-context",
            "sim-1",
            "--namespace",
            "meridian",
            "upgrade",
            "meridian",
            CHART,
            "--reuse-values",
            "--set",
            set,
        ])
    };
    let checksum = || {
        kubectl(&[
            "get",
            "statefulset",
            "meridian-etcd",
            "-n",
            "meridian",
            "-o",
            "jsonpath={.spec.template.metadata.annotations.checksum/certificates}",
        ])
    };
    helm.ok(&[
        "--kube-context",
        "sim-1",
        "--namespace",
        "meridian",
        "install",
        "meridian",
        CHART,
        "--create-namespace",
        "--set",
        "apiserver.storage.backend=bundledEtcd",
        "--set",
        "etcd.replicas=1",
    ]);
    let ca = key("meridian-etcd-pki", "ca.crt");
    let server = key("meridian-etcd-pki", "tls.crt");
    let client = key("meridian-etcd-client", "tls.crt");
    assert!(!ca.is_empty() && !server.is_empty() && !client.is_empty());
    assert_eq!(key("meridian-etcd-client", "ca.crt"), ca);
    let before = checksum();

    upgrade("controllers.dnsZone=fed.example");
    assert_eq!(key("meridian-etcd-pki", "ca.crt"), ca);
    assert_eq!(key("meridian-etcd-pki", "tls.crt"), server);
    assert_eq!(key("meridian-etcd-client", "tls.crt"), client);
    assert_eq!(checksum(), before, "the members restarted for nothing");

    // Within renewBeforeDays of expiry (here: always): both issued again by the same CA.
    upgrade("etcd.renewBeforeDays=400");
    assert_eq!(key("meridian-etcd-pki", "ca.crt"), ca);
    assert_ne!(key("meridian-etcd-pki", "tls.crt"), server);
    assert_ne!(key("meridian-etcd-client", "tls.crt"), client);
    assert_eq!(key("meridian-etcd-client", "ca.crt"), ca);
    assert_ne!(checksum(), before);

    helm.ok(&[
        "--kube-context",
        "sim-1",
        "--namespace",
        "meridian",
        "uninstall",
        "meridian",
        "--wait",
        "--timeout=120s",
    ]);
    assert_namespace_empty(&kubectl, "meridian");
}

/// Polls (garbage collection of ReplicaSets and pods runs in the background) until `ns`
/// holds only what a namespace has of its own.
fn assert_namespace_empty(kubectl: &impl Fn(&[&str]) -> String, ns: &str) {
    // The namespace's own: its default ServiceAccount, that one's token Secret (cluster-sim
    // makes one, as the legacy token controller did) and the root CA ConfigMap.
    let own = |l: &&str| {
        ["configmap/kube-root-ca.crt", "serviceaccount/default"].contains(l)
            || l.starts_with("secret/default-token-")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let all = kubectl(&[
            "get",
            "deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,roles,rolebindings",
            "-n",
            ns,
            "-o",
            "name",
        ]);
        let left: Vec<&str> = all.lines().filter(|l| !own(l)).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left in {ns} after helm uninstall: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn decode(b64: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .expect("base64")
}
