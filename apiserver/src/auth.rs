//! Authentication: bearer tokens from a kube-apiserver style token file, and client
//! certificates signed by the cluster CA (CN = user, O = groups).

use std::path::Path;

use http::HeaderMap;

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// User uid (may be empty).
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// Errors loading a token file.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("reading token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `token,user,uid[,"group1,group2"]`.
    #[error("token file {path} line {line}: expected token,user,uid[,\"groups\"]")]
    Malformed {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
    },
}

/// Static bearer tokens.
#[derive(Clone, Default)]
pub struct TokenAuthenticator {
    tokens: Vec<(String, UserInfo)>,
}

impl std::fmt::Debug for TokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        write!(f, "TokenAuthenticator({} tokens)", self.tokens.len())
    }
}

/// Splits one CSV line, honouring double quotes.
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

impl TokenAuthenticator {
    /// Parses the kube-apiserver `--token-auth-file` format.
    pub fn parse(path: &str, text: &str) -> Result<Self, AuthError> {
        let mut tokens = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f = csv_fields(line);
            if f.len() < 3 || f[0].is_empty() || f[1].is_empty() {
                return Err(AuthError::Malformed {
                    path: path.into(),
                    line: i + 1,
                });
            }
            let groups = f
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            tokens.push((
                f[0].clone(),
                UserInfo {
                    name: f[1].clone(),
                    uid: f[2].clone(),
                    groups,
                },
            ));
        }
        Ok(Self { tokens })
    }

    /// Loads a token file.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Adds one token.
    pub fn add(&mut self, token: String, user: UserInfo) {
        self.tokens.push((token, user));
    }

    /// The user a token belongs to.
    pub fn authenticate(&self, token: &str) -> Option<UserInfo> {
        // Compare against every token in constant time so timing reveals nothing.
        let mut found = None;
        for (t, u) in &self.tokens {
            if constant_time_eq(t.as_bytes(), token.as_bytes()) {
                found = Some(u.clone());
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The identity in a verified client certificate (DER).
pub fn identity_from_cert(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(UserInfo {
        name,
        uid: String::new(),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_with_quoted_groups() {
        let a = TokenAuthenticator::parse("t", "# comment\nabc,alice,1,\"dev,ops\"\nxyz,bob,2\n")
            .unwrap();
        let u = a.authenticate("abc").unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, vec!["dev", "ops"]);
        assert_eq!(a.authenticate("xyz").unwrap().groups, Vec::<String>::new());
        assert!(a.authenticate("nope").is_none());
    }

    #[test]
    fn malformed_line_is_reported() {
        let e = TokenAuthenticator::parse("t", "onlytoken\n").unwrap_err();
        assert!(e.to_string().contains("line 1"));
    }

    #[test]
    fn client_certificate_names_user_and_groups() {
        let ca = crate::pki::Authority::generate().unwrap();
        let c = ca.client_cert("admin", &["system:masters"]).unwrap();
        let der = rustls_pemfile::certs(&mut c.cert_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let u = identity_from_cert(&der).unwrap();
        assert_eq!(u.name, "admin");
        assert_eq!(u.groups, vec!["system:masters"]);
    }
}

/// A source of identities for bearer tokens beyond the static token file.
pub trait TokenSource: Send + Sync {
    /// The user a token belongs to, if it is valid.
    fn authenticate(&self, token: &str) -> Option<UserInfo>;
}

/// What a request wants to do, as an authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// API group (empty for core).
    pub group: String,
    /// Resource plural; empty for non-resource requests.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: String,
    /// Namespace, empty for cluster-scoped or all-namespace requests.
    pub namespace: String,
    /// Object name, when the request names one.
    pub name: String,
    /// The URL path, for non-resource requests.
    pub path: String,
}

/// Decides whether a user may do something.
pub trait Authorizer: Send + Sync {
    /// `Ok` to allow, `Err(reason)` to deny.
    fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Result<(), String>;
}

/// The Kubernetes wording of a denial.
pub fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    if a.resource.is_empty() {
        return format!(
            "forbidden: User \"{}\" cannot {} path \"{}\"",
            user.name, a.verb, a.path
        );
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let what = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let named = if a.name.is_empty() {
        what
    } else {
        format!("{what} \"{}\"", a.name)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    format!(
        "{named} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, a.verb, a.group
    )
}
