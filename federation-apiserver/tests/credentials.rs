//! Credentials from files (`--generate-credentials=false`), as a Helm chart or a replica
//! after the first gives them: the server serves with them and generates or writes nothing.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use common::Server;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use meridian_apiserver::pki::Authority;

#[tokio::test]
async fn credentials_from_files_are_used_and_nothing_is_generated() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::generate().unwrap();
    let serving = ca.serving_cert(&[]).unwrap();
    let files = dir.path().join("secret");
    std::fs::create_dir_all(&files).unwrap();
    let path = |name: &str| files.join(name).display().to_string();
    std::fs::write(path("tls.crt"), &serving.cert_pem).unwrap();
    std::fs::write(path("tls.key"), &serving.key_pem).unwrap();
    std::fs::write(path("ca.crt"), &ca.cert_pem).unwrap();
    std::fs::write(
        path("tokens.csv"),
        "ops-token-0123456789,ops,ops,system:masters\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_in(
        &data,
        &[
            "--generate-credentials=false",
            &format!("--tls-cert-file={}", path("tls.crt")),
            &format!("--tls-private-key-file={}", path("tls.key")),
            &format!("--client-ca-file={}", path("ca.crt")),
            &format!("--token-auth-file={}", path("tokens.csv")),
        ],
    );
    // No CA, serving certificate, admin token or admin kubeconfig of its own.
    let mut written: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["store"], "the server wrote {written:?}");
    // And it says so, rather than pointing at a kubeconfig that does not exist.
    assert_eq!(server.written_kubeconfig, None);

    // The given certificate and token serve.
    let kubeconfig = federation_apiserver::cli::kubeconfig(
        &server.url,
        Some(&ca.cert_pem),
        "ops-token-0123456789",
        "meridian",
    );
    let kc: kube::config::Kubeconfig = serde_yaml_ng::from_str(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let nss: Api<Namespace> = Api::all(kube::Client::try_from(config).unwrap());
    assert!(nss.get_opt("default").await.unwrap().is_some());
}

#[test]
fn a_missing_shared_credential_stops_start_up_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_federation-apiserver"))
        .arg("--secure-port=0")
        .arg(format!("--data-dir={}", dir.path().join("data").display()))
        .arg(format!("--credentials-dir={}", shared.display()))
        .arg("--generate-credentials=false")
        .arg("--storage-backend=memory")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&shared.join("ca.key").display().to_string())
            && stderr.contains("--generate-credentials=false"),
        "{stderr}"
    );
    assert!(!shared.exists());
}
