//! Service-account token authentication: a bearer token that matches the `token` of a
//! `kubernetes.io/service-account-token` Secret authenticates as that service account.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::Value;

use crate::auth::{TokenSource, UserInfo};
use crate::cache::Cache;

/// Secret type carrying service-account tokens.
pub const SA_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// Looks tokens up in the Secrets of one server's cache.
pub struct ServiceAccountTokens {
    cache: Arc<Cache>,
    /// token -> Secret key, rebuilt when Secrets changed since the last scan.
    index: Mutex<(u64, HashMap<String, Arc<str>>)>,
}

impl ServiceAccountTokens {
    /// A token source over the given cache.
    pub fn new(cache: Arc<Cache>) -> Self {
        Self {
            cache,
            index: Mutex::new((u64::MAX, HashMap::new())),
        }
    }

    fn secrets(&self) -> Option<Arc<crate::registry::ResourceDef>> {
        self.cache.registry().lookup("", "v1", "secrets").cloned()
    }

    fn rescan(&self, index: &mut HashMap<String, Arc<str>>) {
        index.clear();
        let Some(def) = self.secrets() else { return };
        let page = self
            .cache
            .resource(&def)
            .list(&def.prefix(), None, None, 0, |_| true);
        for c in page.items {
            // Cheap pre-check before parsing every Secret.
            if !c
                .bytes
                .windows(SA_TOKEN_TYPE.len())
                .any(|w| w == SA_TOKEN_TYPE.as_bytes())
            {
                continue;
            }
            let v = c.value();
            if let Some(t) = token_of(&v) {
                index.insert(t, c.key.clone());
            }
        }
    }
}

fn token_of(secret: &Value) -> Option<String> {
    if secret.get("type").and_then(Value::as_str) != Some(SA_TOKEN_TYPE) {
        return None;
    }
    let b64 = secret.pointer("/data/token")?.as_str()?;
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(raw).ok().filter(|t| !t.is_empty())
}

impl TokenSource for ServiceAccountTokens {
    fn authenticate(&self, token: &str) -> Option<UserInfo> {
        let def = self.secrets()?;
        let mut guard = self.index.lock().ok()?;
        let rev = self.cache.revision();
        if !guard.1.contains_key(token) && guard.0 != rev {
            self.rescan(&mut guard.1);
            guard.0 = rev;
        }
        let key = guard.1.get(token)?.clone();
        drop(guard);
        // The Secret must still exist and still hold this token (rotation, deletion).
        let secret = self.cache.resource(&def).get(&key)?.value();
        if token_of(&secret).as_deref() != Some(token) {
            return None;
        }
        let ns = crate::object::namespace(&secret).to_string();
        let sa = secret
            .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
            .and_then(Value::as_str)?
            .to_string();
        Some(UserInfo {
            name: format!("system:serviceaccount:{ns}:{sa}"),
            uid: secret
                .pointer("/metadata/annotations/kubernetes.io~1service-account.uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
        })
    }
}
