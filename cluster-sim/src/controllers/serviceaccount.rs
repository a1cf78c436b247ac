//! Service accounts and their tokens: every namespace gets a `default` ServiceAccount, every
//! ServiceAccount without one a `{sa}-token-{5 chars}` Secret of type `kubernetes.io/service-account-token`, and
//! any Secret of that type naming an existing ServiceAccount but lacking `data.token` gets
//! `token`, `ca.crt` and `namespace` filled in (what join tools rely on since Kubernetes 1.24,
//! when they create such a Secret themselves).
//!
//! Issued tokens are indexed in memory ([`TokenIndex`], one entry per token Secret) so the API
//! server can authenticate them with [`authenticate_token`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use meridian_apiserver::cache::Cached;
use meridian_apiserver::engine::{Target, WriteOptions};
use rand::RngCore;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::util::{self, lock, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, split_key};

/// The Secret type of service-account tokens.
pub const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Annotation naming a token Secret's ServiceAccount.
pub const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// Annotation with the ServiceAccount's uid.
pub const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// Random bytes in a token (48 URL-safe characters).
const TOKEN_BYTES: usize = 36;

/// Who a service-account token authenticates as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountIdentity {
    /// `system:serviceaccount:{namespace}:{name}`.
    pub username: String,
    /// The ServiceAccount's uid.
    pub uid: String,
    /// `system:serviceaccounts`, `system:serviceaccounts:{namespace}`, `system:authenticated`.
    pub groups: Vec<String>,
}

#[derive(Clone)]
struct TokenOwner {
    namespace: String,
    service_account: String,
    secret: String,
}

/// Tokens issued in one cluster → the Secret and ServiceAccount they belong to.
#[derive(Default)]
pub struct TokenIndex {
    tokens: Mutex<HashMap<String, TokenOwner>>,
}

/// Authenticates a bearer token against the cluster's token Secrets: the Secret must still
/// exist with that token and its ServiceAccount must exist (with the recorded uid).
pub fn authenticate_token(sim: &Sim, token: &str) -> Option<ServiceAccountIdentity> {
    let owner = lock(&sim.tokens.tokens).get(token).cloned()?;
    let k = &sim.kinds;
    let secret = sim
        .cache(&k.secrets)
        .get(&k.secrets.key(&owner.namespace, &owner.secret))?
        .value();
    if secret_token(&secret).as_deref() != Some(token) {
        return None;
    }
    let sa = sim.cache(&k.service_accounts).get(
        &k.service_accounts
            .key(&owner.namespace, &owner.service_account),
    )?;
    let recorded = annotation(&secret, SA_UID_ANNOTATION);
    if recorded.is_some_and(|u| u != &*sa.uid) {
        return None;
    }
    Some(ServiceAccountIdentity {
        username: format!(
            "system:serviceaccount:{}:{}",
            owner.namespace, owner.service_account
        ),
        uid: sa.uid.to_string(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", owner.namespace),
            "system:authenticated".into(),
        ],
    })
}

fn annotation<'a>(obj: &'a Value, name: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(name)?.as_str()
}

/// The decoded `data.token` of a Secret.
/// Whether a cached Secret is a service-account token, by the cache's `type` field.
fn is_token_secret(secret: &Cached) -> bool {
    secret.field("type") == Some(TOKEN_SECRET_TYPE)
}

fn secret_token(secret: &Value) -> Option<String> {
    let b = STANDARD.decode(str_at(secret, "/data/token")?).ok()?;
    String::from_utf8(b).ok().filter(|t| !t.is_empty())
}

fn new_token() -> String {
    let mut b = [0u8; TOKEN_BYTES];
    rand::rng().fill_bytes(&mut b);
    URL_SAFE_NO_PAD.encode(b)
}

/// The service-account token controller of one cluster.
pub(crate) struct ServiceAccountController {
    sim: Arc<Sim>,
    /// Keys: `n/{namespace}`, `s/{ns}/{sa}`, `t/{ns}/{secret}` (namespaces sort first).
    queue: Arc<WorkQueue<String>>,
}

impl ServiceAccountController {
    fn on_namespace(&self, seen: Seen<'_>) {
        if let Seen::Upsert { obj, .. } = seen {
            self.queue.add(format!("n/{}", obj.name()));
        }
    }

    fn on_service_account(&self, seen: Seen<'_>) {
        if let Seen::Upsert { obj, .. } = seen {
            self.queue
                .add(format!("s/{}/{}", obj.namespace(), obj.name()));
        }
    }

    fn on_secret(&self, seen: Seen<'_>) {
        let index = &self.sim.tokens.tokens;
        match seen {
            Seen::Reset => lock(index).clear(),
            Seen::Synced => {}
            Seen::Deleted { obj } => {
                if is_token_secret(obj)
                    && let Some(t) = secret_token(&obj.value())
                {
                    lock(index).remove(&t);
                }
            }
            Seen::Upsert { obj, prev } => {
                if !is_token_secret(obj) {
                    return;
                }
                let secret = obj.value();
                if str_at(&secret, "/type") != Some(TOKEN_SECRET_TYPE) {
                    return;
                }
                let mut idx = lock(index);
                if let Some(p) = prev
                    && let Some(t) = secret_token(&p.value())
                {
                    idx.remove(&t);
                }
                match (
                    secret_token(&secret),
                    annotation(&secret, SA_NAME_ANNOTATION),
                ) {
                    (Some(t), Some(sa)) => {
                        idx.insert(
                            t,
                            TokenOwner {
                                namespace: obj.namespace().to_string(),
                                service_account: sa.to_string(),
                                secret: obj.name().to_string(),
                            },
                        );
                    }
                    (None, Some(_)) => {
                        self.queue
                            .add(format!("t/{}/{}", obj.namespace(), obj.name()))
                    }
                    _ => {}
                }
            }
        }
    }

    /// `data` of a populated token Secret.
    fn token_data(&self, ns: &str) -> Value {
        json!({
            "token": STANDARD.encode(new_token()),
            "ca.crt": STANDARD.encode(&self.sim.config.ca_pem),
            "namespace": STANDARD.encode(ns),
        })
    }

    async fn ensure_default_sa(&self, ns: &str) -> Result<(), SimError> {
        let k = &self.sim.kinds;
        let Some(n) = self.sim.cache(&k.namespaces).get(&k.namespaces.key("", ns)) else {
            return Ok(());
        };
        if n.deleting
            || self
                .sim
                .cache(&k.service_accounts)
                .get(&k.service_accounts.key(ns, "default"))
                .is_some()
        {
            return Ok(());
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
        match self
            .sim
            .engine
            .create(
                &k.service_accounts,
                ns,
                sa,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await
        {
            // Exists already, or the namespace is going away.
            Err(e) if ![403, 404, 409].contains(&e.code) => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn ensure_token_secret(&self, ns: &str, name: &str) -> Result<(), SimError> {
        let k = &self.sim.kinds;
        let Some(sa) = self
            .sim
            .cache(&k.service_accounts)
            .get(&k.service_accounts.key(ns, name))
        else {
            return Ok(());
        };
        let sa = sa.value();
        if util::is_deleting(&sa) {
            return Ok(());
        }
        let secrets = self.sim.cache(&k.secrets);
        // Token Secrets created by others (a join tool) for this account, possibly before it
        // existed: fill them in; any token Secret for the account makes ours unnecessary.
        let mut has_secret = false;
        for c in secrets
            .list(&k.secrets.namespace_prefix(Some(ns)), None, None, 0, |c| {
                is_token_secret(c)
            })
            .items
        {
            let v = c.value();
            if annotation(&v, SA_NAME_ANNOTATION) == Some(name) {
                has_secret = true;
                if secret_token(&v).is_none() {
                    self.queue.add(format!("t/{ns}/{}", c.name()));
                }
            }
        }
        if has_secret {
            return Ok(());
        }
        // `{sa}-token-{5 chars}`, as Kubernetes before 1.24 named them: a join tool creating
        // its own `{sa}-token` must not collide with ours.
        let secret_name = format!("{name}-token-{}", util::suffix5(&format!("{ns}/{name}")));
        let uid = str_at(&sa, "/metadata/uid").unwrap_or("");
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": TOKEN_SECRET_TYPE,
            "metadata": {
                "name": secret_name,
                "namespace": ns,
                "annotations": {SA_NAME_ANNOTATION: name, SA_UID_ANNOTATION: uid},
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ServiceAccount", "name": name, "uid": uid,
                }],
            },
            "data": self.token_data(ns),
        });
        match self
            .sim
            .engine
            .create(
                &k.secrets,
                ns,
                secret,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await
        {
            Err(e) if ![403, 404, 409].contains(&e.code) => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn populate(&self, ns: &str, name: &str) -> Result<(), SimError> {
        let k = &self.sim.kinds;
        let Some(c) = self.sim.cache(&k.secrets).get(&k.secrets.key(ns, name)) else {
            return Ok(());
        };
        let mut secret = c.value();
        if str_at(&secret, "/type") != Some(TOKEN_SECRET_TYPE)
            || secret_token(&secret).is_some()
            || util::is_deleting(&secret)
        {
            return Ok(());
        }
        let Some(sa_name) = annotation(&secret, SA_NAME_ANNOTATION).map(String::from) else {
            return Ok(());
        };
        let Some(sa) = self
            .sim
            .cache(&k.service_accounts)
            .get(&k.service_accounts.key(ns, &sa_name))
        else {
            // Populated once the account appears (its event re-queues this Secret).
            return Ok(());
        };
        if annotation(&secret, SA_UID_ANNOTATION).is_some_and(|u| !u.is_empty() && u != &*sa.uid) {
            // Meant for an earlier account of the same name.
            return Ok(());
        }
        secret["metadata"]["annotations"][SA_UID_ANNOTATION] = Value::from(&*sa.uid);
        let data = self.token_data(ns);
        if !secret.get("data").is_some_and(Value::is_object) {
            secret["data"] = json!({});
        }
        if let (Some(d), Some(new)) = (secret["data"].as_object_mut(), data.as_object()) {
            for (k, v) in new {
                d.insert(k.clone(), v.clone());
            }
        }
        match self
            .sim
            .engine
            .update(
                &k.secrets,
                ns,
                name,
                secret,
                Target::Main,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Reconciler<String> for ServiceAccountController {
    const NAME: &'static str = "serviceaccount";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        match key.split_once('/') {
            Some(("n", ns)) => self.ensure_default_sa(ns).await?,
            Some(("s", rest)) => {
                let (ns, name) = split_key(rest);
                self.ensure_token_secret(ns, name).await?;
            }
            Some(("t", rest)) => {
                let (ns, name) = split_key(rest);
                self.populate(ns, name).await?;
            }
            _ => {}
        }
        Ok(Requeue::No)
    }
}

/// Spawns the service-account controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(ServiceAccountController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let (a, b, d) = (c.clone(), c.clone(), c.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.namespaces), move |e| a.on_namespace(e)),
        super::spawn_watch(sim.cache(&sim.kinds.service_accounts), move |e| {
            b.on_service_account(e)
        }),
        super::spawn_watch(sim.cache(&sim.kinds.secrets), move |e| d.on_secret(e)),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}
