//! The server's credentials: a CA, an admin token and a token for each of Meridian's
//! components that several replicas can share from one directory (generated there on first
//! start, or only read when generation is off), and a serving certificate that is either
//! given or issued per replica by that CA.

use std::path::{Path, PathBuf};

use fed_api::names::{CONTROLLERS_USER, SCHEDULER_USER};
use meridian_apiserver::pki::{self, Authority, PkiError};

/// The components that get a credential of their own: the name of their token file
/// (`<name>.token` in the shared directory) and kubeconfig (`<name>.kubeconfig` in the data
/// directory), and the user they are (bound by [`crate::component_policy`]).
pub const COMPONENTS: [(&str, &str); 2] = [
    ("fed-scheduler", SCHEDULER_USER),
    ("fed-controllers", CONTROLLERS_USER),
];

/// One component's bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentToken {
    /// The component, as in [`COMPONENTS`].
    pub component: &'static str,
    /// The user the token authenticates as.
    pub user: &'static str,
    /// The token.
    pub token: String,
}

/// Where the credentials come from.
#[derive(Debug, Clone)]
pub struct CredentialOptions {
    /// The shared directory: `ca.crt`, `ca.key`, `admin.token` and the components' tokens.
    pub shared_dir: PathBuf,
    /// This replica's own directory, for a serving certificate it issues itself.
    pub own_dir: PathBuf,
    /// The admin token file; `None`: `admin.token` in the shared directory.
    pub admin_token_file: Option<PathBuf>,
    /// Whether missing CA and admin token are generated (and written) in the shared directory.
    /// Off, nothing is written there and every credential must already exist.
    pub generate: bool,
    /// A serving certificate and key given by files (`--tls-cert-file`, `--tls-private-key-file`).
    pub serving: Option<(PathBuf, PathBuf)>,
    /// Names and addresses the issued serving certificate covers besides loopback.
    pub serving_names: Vec<String>,
    /// The CA bundle of accepted client certificates (`--client-ca-file`).
    pub client_ca_file: Option<PathBuf>,
}

/// What start-up needs.
#[derive(Debug)]
pub struct Credentials {
    /// The serving certificate, PEM.
    pub cert_pem: String,
    /// Its key, PEM.
    pub key_pem: String,
    /// The CA bundle that signs accepted client certificates.
    pub client_ca_pem: Option<String>,
    /// The CA clients verify the serving certificate with, when this server issued it.
    pub ca_for_clients: Option<String>,
    /// The admin (`system:masters`) bearer token, if there is one.
    pub admin_token: Option<String>,
    /// The components' tokens that exist (all of them when generation is on).
    pub component_tokens: Vec<ComponentToken>,
}

/// Why the credentials could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// Generation is off and a file it would have made is missing.
    #[error(
        "{what} {} does not exist and --generate-credentials=false: {hint}",
        .path.display()
    )]
    Missing {
        /// What the file holds.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to provide it.
        hint: &'static str,
    },
    /// A token file is empty.
    #[error("token file {} is empty", .0.display())]
    EmptyToken(PathBuf),
    /// Reading, parsing, issuing or writing failed.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// A directory could not be created.
    #[error("creating {}", .path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

impl CredentialOptions {
    fn admin_token_path(&self) -> PathBuf {
        self.admin_token_file
            .clone()
            .unwrap_or_else(|| self.shared_dir.join("admin.token"))
    }
}

/// Loads the credentials, generating what is missing when `options.generate` says so.
pub fn load(options: &CredentialOptions) -> Result<Credentials, CredentialsError> {
    if options.generate {
        ensure_dir(&options.shared_dir)?;
    }
    let ca = authority(options)?;
    let (cert_pem, key_pem, ca_for_clients) = match (&options.serving, &ca) {
        (Some((cert, key)), _) => (pki::read(cert)?, pki::read(key)?, None),
        (None, Some(ca)) => {
            let issued = issue_serving(ca, &options.own_dir, &options.serving_names)?;
            (issued.0, issued.1, Some(ca.cert_pem.clone()))
        }
        (None, None) => {
            return Err(CredentialsError::Missing {
                what: "the CA key",
                path: options.shared_dir.join("ca.key"),
                hint: "give --tls-cert-file and --tls-private-key-file, or the CA (ca.crt, ca.key) in --credentials-dir",
            });
        }
    };
    let client_ca_pem = match (&options.client_ca_file, &ca) {
        (Some(path), _) => Some(pki::read(path)?),
        (None, Some(ca)) => Some(ca.cert_pem.clone()),
        (None, None) => None,
    };
    Ok(Credentials {
        cert_pem,
        key_pem,
        client_ca_pem,
        ca_for_clients,
        admin_token: admin_token(options)?,
        component_tokens: component_tokens(options)?,
    })
}

/// The shared CA: read, generated, or absent (generation off, no CA files: the serving
/// certificate and client CA must then come from their own flags).
fn authority(options: &CredentialOptions) -> Result<Option<Authority>, CredentialsError> {
    let crt = options.shared_dir.join("ca.crt");
    let key = options.shared_dir.join("ca.key");
    match (crt.exists(), key.exists()) {
        (true, true) => Ok(Some(Authority::from_pem(
            &pki::read(&crt)?,
            &pki::read(&key)?,
        )?)),
        _ if options.generate => {
            let ca = Authority::generate()?;
            pki::write_private(&key, &ca.key_pem())?;
            pki::write_private(&crt, &ca.cert_pem)?;
            Ok(Some(ca))
        }
        (true, false) => Err(CredentialsError::Missing {
            what: "the CA key",
            path: key,
            hint: "a CA certificate without its key cannot issue this replica's serving certificate",
        }),
        (false, true) => Err(CredentialsError::Missing {
            what: "the CA certificate",
            path: crt,
            hint: "put ca.crt beside ca.key",
        }),
        (false, false) => Ok(None),
    }
}

/// A serving certificate for this replica in `dir`, issued again when the names change.
fn issue_serving(
    ca: &Authority,
    dir: &Path,
    names: &[String],
) -> Result<(String, String), CredentialsError> {
    ensure_dir(dir)?;
    let (crt, key, names_file) = (
        dir.join("apiserver.crt"),
        dir.join("apiserver.key"),
        dir.join("apiserver.sans"),
    );
    let wanted = names.join(",");
    let current = std::fs::read_to_string(&names_file).unwrap_or_default();
    // A certificate issued by another CA (the shared one replaced an earlier own one) is
    // issued again too: clients verify against the shared CA.
    let issuer = std::fs::read_to_string(dir.join("apiserver.ca")).unwrap_or_default();
    if !(crt.exists() && key.exists()) || current != wanted || issuer != ca.cert_pem {
        let issued = ca.serving_cert(names)?;
        pki::write_private(&key, &issued.key_pem)?;
        pki::write_private(&crt, &issued.cert_pem)?;
        pki::write_private(&names_file, &wanted)?;
        pki::write_private(&dir.join("apiserver.ca"), &ca.cert_pem)?;
    }
    Ok((pki::read(&crt)?, pki::read(&key)?))
}

/// The admin token: read from its file; generated into it when generation is on; absent
/// when generation is off and the file was neither named nor present (the tokens then
/// come from `--token-auth-file` alone).
fn admin_token(options: &CredentialOptions) -> Result<Option<String>, CredentialsError> {
    let path = options.admin_token_path();
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_owned())),
        Ok(_) if !options.generate => Err(CredentialsError::EmptyToken(path)),
        Err(_) if !options.generate && options.admin_token_file.is_some() => {
            Err(CredentialsError::Missing {
                what: "the admin token file",
                path,
                hint: "write the shared token there, or leave --admin-token-file out to serve only --token-auth-file's tokens",
            })
        }
        Err(_) if !options.generate => Ok(None),
        _ => {
            let token = random_token();
            pki::write_private(&path, &token)?;
            Ok(Some(token))
        }
    }
}

/// The components' tokens: read from the shared directory, generated there when generation
/// is on. With generation off a missing one is left out: the component's token then comes
/// from `--token-auth-file`, as the chart gives it.
fn component_tokens(options: &CredentialOptions) -> Result<Vec<ComponentToken>, CredentialsError> {
    let mut tokens = Vec::new();
    for (component, user) in COMPONENTS {
        let path = options.shared_dir.join(format!("{component}.token"));
        let token = match std::fs::read_to_string(&path) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
            Ok(_) if !options.generate => return Err(CredentialsError::EmptyToken(path)),
            Err(_) if !options.generate => continue,
            _ => {
                let token = random_token();
                pki::write_private(&path, &token)?;
                token
            }
        };
        tokens.push(ComponentToken {
            component,
            user,
            token,
        });
    }
    Ok(tokens)
}

/// 32 random bytes, hex.
fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ensure_dir(path: &Path) -> Result<(), CredentialsError> {
    crate::cli::ensure_dir(path).map_err(|source| CredentialsError::Dir {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn options(shared: &Path, own: &Path, generate: bool) -> CredentialOptions {
        CredentialOptions {
            shared_dir: shared.to_owned(),
            own_dir: own.to_owned(),
            admin_token_file: None,
            generate,
            serving: None,
            serving_names: Vec::new(),
            client_ca_file: None,
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn replicas_share_the_ca_and_token_and_issue_their_own_serving_certificates() {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("shared");
        let first = load(&options(&shared, &root.path().join("a"), true)).unwrap();
        assert_eq!(
            files(&shared),
            [
                "admin.token",
                "ca.crt",
                "ca.key",
                "fed-controllers.token",
                "fed-scheduler.token"
            ]
        );
        let users: Vec<&str> = first.component_tokens.iter().map(|t| t.user).collect();
        assert_eq!(users, [SCHEDULER_USER, CONTROLLERS_USER]);
        let before = files(&shared)
            .iter()
            .map(|f| std::fs::read(shared.join(f)).unwrap())
            .collect::<Vec<_>>();

        let second = load(&options(&shared, &root.path().join("b"), false)).unwrap();
        assert_eq!(second.admin_token, first.admin_token);
        assert_eq!(second.component_tokens, first.component_tokens);
        assert_eq!(second.client_ca_pem, first.client_ca_pem);
        assert_eq!(second.ca_for_clients, first.ca_for_clients);
        assert_ne!(
            second.cert_pem, first.cert_pem,
            "each replica has its own key"
        );
        // Reading the shared directory left it as it was.
        let after = files(&shared)
            .iter()
            .map(|f| std::fs::read(shared.join(f)).unwrap())
            .collect::<Vec<_>>();
        assert_eq!(after, before);
    }

    #[test]
    fn without_generation_nothing_is_written_and_missing_files_are_named() {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("shared");
        let err = load(&options(&shared, &root.path().join("a"), false)).unwrap_err();
        assert!(
            matches!(&err, CredentialsError::Missing { path, .. } if path.ends_with("ca.key")),
            "{err}"
        );
        assert!(err.to_string().contains("--tls-cert-file"), "{err}");
        assert!(!shared.exists(), "the shared directory was created");

        // Only the certificate: the key is named.
        std::fs::create_dir_all(&shared).unwrap();
        let ca = Authority::generate().unwrap();
        std::fs::write(shared.join("ca.crt"), &ca.cert_pem).unwrap();
        let err = load(&options(&shared, &root.path().join("a"), false)).unwrap_err();
        assert!(
            matches!(&err, CredentialsError::Missing { path, .. } if path.ends_with("ca.key")),
            "{err}"
        );
        assert_eq!(files(&shared), ["ca.crt"]);

        // A named admin token file must exist.
        std::fs::write(shared.join("ca.key"), ca.key_pem()).unwrap();
        let mut named = options(&shared, &root.path().join("a"), false);
        named.admin_token_file = Some(root.path().join("token"));
        let err = load(&named).unwrap_err();
        assert!(
            matches!(&err, CredentialsError::Missing { path, .. } if path.ends_with("token")),
            "{err}"
        );
        std::fs::write(root.path().join("token"), "\n").unwrap();
        assert!(matches!(
            load(&named).unwrap_err(),
            CredentialsError::EmptyToken(_)
        ));
        std::fs::write(root.path().join("token"), "s3cret\n").unwrap();
        assert_eq!(load(&named).unwrap().admin_token.as_deref(), Some("s3cret"));
        assert_eq!(files(&shared), ["ca.crt", "ca.key"]);
    }

    #[test]
    fn given_serving_files_need_no_ca_and_no_admin_token() {
        let root = tempfile::tempdir().unwrap();
        let ca = Authority::generate().unwrap();
        let serving = ca.serving_cert(&["meridian.example".into()]).unwrap();
        let (crt, key, client_ca) = (
            root.path().join("tls.crt"),
            root.path().join("tls.key"),
            root.path().join("client-ca.crt"),
        );
        std::fs::write(&crt, &serving.cert_pem).unwrap();
        std::fs::write(&key, &serving.key_pem).unwrap();
        std::fs::write(&client_ca, &ca.cert_pem).unwrap();
        let shared = root.path().join("shared");
        let mut o = options(&shared, &root.path().join("own"), false);
        o.serving = Some((crt, key));
        o.client_ca_file = Some(client_ca);
        let loaded = load(&o).unwrap();
        assert_eq!(loaded.cert_pem, serving.cert_pem);
        assert_eq!(loaded.client_ca_pem.as_deref(), Some(ca.cert_pem.as_str()));
        assert_eq!(loaded.admin_token, None);
        assert_eq!(loaded.component_tokens, [], "none generated, none read");
        assert!(!shared.exists() && !root.path().join("own").exists());
    }

    #[test]
    fn a_serving_certificate_follows_its_names_and_its_issuer() {
        let root = tempfile::tempdir().unwrap();
        let (shared, own) = (root.path().join("shared"), root.path().join("own"));
        let first = load(&options(&shared, &own, true)).unwrap();
        assert_eq!(
            load(&options(&shared, &own, true)).unwrap().cert_pem,
            first.cert_pem,
            "reissued without a change"
        );
        let mut named = options(&shared, &own, true);
        named.serving_names = vec!["10.0.0.7".into()];
        let renamed = load(&named).unwrap();
        assert_ne!(renamed.cert_pem, first.cert_pem);
        // A new shared CA: the replica's certificate is issued again by it.
        let mut moved = options(&root.path().join("other"), &own, true);
        moved.serving_names = named.serving_names.clone();
        let moved = load(&moved).unwrap();
        assert_ne!(moved.cert_pem, renamed.cert_pem);
        assert_ne!(moved.ca_for_clients, first.ca_for_clients);
    }
}
