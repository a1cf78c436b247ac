//! The override policies both copy paths (workloads and copies) read: one watch of
//! OverridePolicies and one of ClusterOverridePolicies per process, a snapshot the
//! decisions take, and a broadcast of what each change may affect, so a controller re-queues
//! the objects a policy selects or selected (no polling).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fed_api::overrides::apply::Policy;
use fed_api::policy::ResourceSelector;
use fed_api::{ClusterOverridePolicy, OverridePolicy};
use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use meridian_runtime::error::Report;
use meridian_runtime::lean::Lean;
use meridian_runtime::sync::lock;
use tokio::sync::{broadcast, watch};
use tokio_util::task::AbortOnDropHandle;

use super::watch::reflect;

/// How many changes a slow subscriber may fall behind before it re-queues everything.
const CHANGES_BOUND: usize = 256;

/// A policy by namespace (`None`: cluster-wide) and name.
type Key = (Option<String>, String);

/// What one policy's change may affect: objects its selectors named before or after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Changed {
    /// The namespace of an `OverridePolicy`; `None` for a `ClusterOverridePolicy`.
    pub namespace: Option<String>,
    /// Its selectors before and after the change.
    pub selectors: Vec<ResourceSelector>,
}

impl Changed {
    /// Whether an object of `api_version`/`kind` in `namespace` may have another copy now.
    pub fn may_affect(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> bool {
        (self.namespace.is_none() || self.namespace.as_deref() == namespace)
            && self
                .selectors
                .iter()
                .any(|s| s.api_version == api_version && s.kind == kind)
    }
}

/// The policies whose spec differs between `before` and `after`, as what they may affect.
pub fn changes(before: &BTreeMap<Key, Policy>, after: &BTreeMap<Key, Policy>) -> Vec<Changed> {
    let keys: std::collections::BTreeSet<&Key> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (b, a) = (before.get(k), after.get(k));
            if b.map(|p| &p.spec) == a.map(|p| &p.spec) {
                return None;
            }
            let selectors = b
                .into_iter()
                .chain(a)
                .flat_map(|p| p.spec.resource_selectors.iter().cloned())
                .collect();
            Some(Changed {
                namespace: k.0.clone(),
                selectors,
            })
        })
        .collect()
}

struct Inner {
    current: Mutex<Arc<Vec<Policy>>>,
    changes: broadcast::Sender<Changed>,
    ready: watch::Sender<bool>,
    task: Mutex<Option<AbortOnDropHandle<()>>>,
}

/// The override policies as last listed; clones share them.
#[derive(Clone)]
pub struct Overrides {
    inner: Arc<Inner>,
}

impl Overrides {
    fn empty() -> Self {
        Overrides {
            inner: Arc::new(Inner {
                current: Mutex::new(Arc::new(Vec::new())),
                changes: broadcast::channel(CHANGES_BOUND).0,
                ready: watch::channel(false).0,
                task: Mutex::new(None),
            }),
        }
    }

    /// Fixed policies, ready at once and never changing (tests, and processes that do not
    /// watch).
    pub fn fixed(policies: Vec<Policy>) -> Self {
        let o = Self::empty();
        *lock(&o.inner.current) = Arc::new(policies);
        o.inner.ready.send_replace(true);
        o
    }

    /// Starts the two watches on the federation `fed`; they run while a clone lives.
    pub fn start(fed: kube::Client) -> Self {
        let o = Self::empty();
        let inner = o.inner.clone();
        let task = tokio::spawn(async move {
            let cfg = watcher::Config::default;
            let (ops, mut op_events) =
                reflect(Api::<Lean<OverridePolicy>>::all(fed.clone()), cfg());
            let (cops, mut cop_events) =
                reflect(Api::<Lean<ClusterOverridePolicy>>::all(fed), cfg());
            let mut listed = (false, false);
            let mut seen: BTreeMap<Key, Policy> = BTreeMap::new();
            loop {
                // Whether the event changes what the caches hold as listed.
                let settled = tokio::select! {
                    ev = op_events.next() => settle(ev, &mut listed.0),
                    ev = cop_events.next() => settle(ev, &mut listed.1),
                };
                match settled {
                    None => return,
                    Some(false) => continue,
                    Some(true) if !(listed.0 && listed.1) => continue,
                    Some(true) => {}
                }
                let now: BTreeMap<Key, Policy> = ops
                    .state()
                    .iter()
                    .map(|p| Policy::from((**p).clone()))
                    .chain(cops.state().iter().map(|p| Policy::from((**p).clone())))
                    .map(|p| ((p.namespace.clone(), p.name.clone()), p))
                    .collect();
                let changed = changes(&seen, &now);
                *lock(&inner.current) = Arc::new(now.values().cloned().collect());
                seen = now;
                inner.ready.send_replace(true);
                for c in changed {
                    // No subscriber yet is fine: controllers read the snapshot when they start.
                    let _ = inner.changes.send(c);
                }
            }
        });
        *lock(&o.inner.task) = Some(AbortOnDropHandle::new(task));
        o
    }

    /// The policies as last listed.
    pub fn snapshot(&self) -> Arc<Vec<Policy>> {
        lock(&self.inner.current).clone()
    }

    /// The changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Changed> {
        self.inner.changes.subscribe()
    }

    /// The changes as a stream for a controller's input loop: `Some` per change, `None` when
    /// the subscriber fell behind and changes were missed (re-queue everything then).
    pub fn changes(&self) -> futures::stream::BoxStream<'static, Option<Changed>> {
        futures::stream::unfold(self.subscribe(), |mut rx| async move {
            match rx.recv().await {
                Ok(c) => Some((Some(c), rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((None, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
        .boxed()
    }

    /// Waits until both kinds have been listed once.
    pub async fn ready(&self) {
        let mut rx = self.inner.ready.subscribe();
        // The sender lives in `inner`, which `self` holds: the wait cannot fail.
        let _ = rx.wait_for(|r| *r).await;
    }
}

/// Reads one watch event: `None` when the stream ended, `Some(true)` when the cache changed
/// or a listing completed (setting `listed`), `Some(false)` otherwise.
fn settle<K>(ev: Option<Result<Event<K>, watcher::Error>>, listed: &mut bool) -> Option<bool> {
    match ev? {
        Ok(Event::InitDone) => {
            *listed = true;
            Some(true)
        }
        Ok(Event::Apply(_) | Event::Delete(_)) => Some(true),
        Ok(Event::Init | Event::InitApply(_)) => Some(false),
        Err(e) => {
            tracing::warn!(error = %Report(&e), "override policy watch failed; retrying");
            Some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fed_api::overrides::OverridePolicySpec;

    fn policy(ns: Option<&str>, name: &str, kinds: &[&str]) -> Policy {
        Policy {
            namespace: ns.map(str::to_owned),
            name: name.into(),
            spec: OverridePolicySpec {
                resource_selectors: kinds
                    .iter()
                    .map(|k| ResourceSelector {
                        api_version: "v1".into(),
                        kind: (*k).into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    fn keyed(ps: &[Policy]) -> BTreeMap<Key, Policy> {
        ps.iter()
            .map(|p| ((p.namespace.clone(), p.name.clone()), p.clone()))
            .collect()
    }

    #[test]
    fn a_change_names_old_and_new_selectors() {
        let before = keyed(&[
            policy(Some("shop"), "a", &["ConfigMap"]),
            policy(None, "b", &["Secret"]),
        ]);
        let after = keyed(&[
            policy(Some("shop"), "a", &["ServiceAccount"]),
            policy(None, "b", &["Secret"]),
            policy(None, "c", &["Role"]),
        ]);
        let got = changes(&before, &after);
        assert_eq!(got.len(), 2, "{got:?}");
        let a = got.iter().find(|c| c.namespace.is_some()).unwrap();
        assert!(a.may_affect("v1", "ConfigMap", Some("shop")));
        assert!(a.may_affect("v1", "ServiceAccount", Some("shop")));
        assert!(!a.may_affect("v1", "ConfigMap", Some("other")));
        assert!(!a.may_affect("v1", "Secret", Some("shop")));
        let c = got.iter().find(|c| c.namespace.is_none()).unwrap();
        assert!(c.may_affect("v1", "Role", Some("any")) && c.may_affect("v1", "Role", None));
        // A deletion affects what it selected; nothing changed, nothing to say.
        assert_eq!(changes(&after, &BTreeMap::new()).len(), 3);
        assert!(changes(&after, &after).is_empty());
    }

    #[tokio::test]
    async fn fixed_policies_are_ready() {
        let o = Overrides::fixed(vec![policy(None, "x", &["Role"])]);
        o.ready().await;
        assert_eq!(o.snapshot().len(), 1);
    }
}
