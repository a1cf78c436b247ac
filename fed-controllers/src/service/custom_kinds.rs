//! Custom kinds that back Services: those whose ResourceInterpreter names a pod template.
//! Which they are is [`wanted`] (pure); [`CustomKinds`] keeps one watch and template-label
//! cache per such kind, started when its interpreter appears (once the federation serves
//! the kind: looked up again as soon as the federation's CustomResourceDefinitions change,
//! [`meridian_runtime::kind_retry`]) and dropped when the interpreter goes or moves its
//! template.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use fed_api::copies::{Path, path};
use fed_api::interpreter::{ResourceInterpreterSpec, interpreter_for};
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::Client;
use kube::api::{Api, GroupVersionKind};
use meridian_runtime::kind_retry::{Backoff, until_served};
use meridian_runtime::lean::Lean;
use meridian_runtime::sync::lock;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use super::backends::BackendKind;
use super::inputs::{Input, workload_change};
use super::workloads::{LabelCache, label_cache, labels_of};
use crate::dynamic::Decoded;

/// A custom kind: `(apiVersion, kind)`.
pub type Kind = (String, String);

/// The custom kinds that back Services, each with where its pod template is, from the
/// ResourceInterpreters `all` as (name, spec): the kind's interpreter (the first by name,
/// as everywhere) must name a pod template. Built-in kinds and Services are never custom:
/// their own readers stand.
pub fn wanted<'a>(
    all: impl IntoIterator<Item = (&'a str, &'a ResourceInterpreterSpec)>,
) -> BTreeMap<Kind, String> {
    let all: Vec<(&str, &ResourceInterpreterSpec)> = all.into_iter().collect();
    let mut out = BTreeMap::new();
    for (_, spec) in &all {
        let (api_version, kind) = (&spec.target.api_version, &spec.target.kind);
        if path(api_version, kind) != Path::Copy || BackendKind::of(api_version, kind).is_some() {
            continue;
        }
        let chosen = interpreter_for(all.iter().copied(), api_version, kind);
        if let Some(template) = chosen.and_then(|s| s.pod_template.as_ref()) {
            out.insert((api_version.clone(), kind.clone()), template.path.clone());
        }
    }
    out
}

/// One watched custom kind.
struct Watch {
    kind: BackendKind,
    cache: LabelCache,
    _task: AbortOnDropHandle<()>,
}

/// The watches of the custom kinds that back Services.
pub(super) struct CustomKinds {
    fed: Client,
    /// Where the watches' label changes go (the controller's inputs).
    inputs: UnboundedSender<Input>,
    watches: Mutex<BTreeMap<Kind, Watch>>,
    /// Ticks when the federation's CustomResourceDefinitions change: a kind not served yet
    /// is looked up again then.
    definitions: watch::Sender<()>,
}

/// The waits between two looks for a kind the federation does not serve yet when no
/// definition changes (the fallback: a definition's arrival wakes the look at once).
const DISCOVERY_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(30),
};

impl CustomKinds {
    pub(super) fn new(fed: Client, inputs: UnboundedSender<Input>) -> Self {
        CustomKinds {
            fed,
            inputs,
            watches: Mutex::default(),
            definitions: watch::Sender::new(()),
        }
    }

    /// The federation's CustomResourceDefinitions changed: every kind not served yet is
    /// looked up again at once.
    pub(super) fn definitions_changed(&self) {
        self.definitions.send_replace(());
    }

    /// Watches exactly the `wanted` kinds: starts the new ones, drops those no longer
    /// wanted or whose template moved (restarted, so every object is read again). Whether
    /// a kind was dropped (its objects back no Service any more).
    pub(super) fn sync(&self, wanted: &BTreeMap<Kind, String>) -> bool {
        let mut watches = lock(&self.watches);
        let before = watches.len();
        watches.retain(|k, w| wanted.get(k).is_some_and(|t| *t == w.kind.template));
        let dropped = watches.len() != before;
        for ((api_version, kind), template) in wanted {
            let key = (api_version.clone(), kind.clone());
            if let std::collections::btree_map::Entry::Vacant(e) = watches.entry(key) {
                e.insert(self.start(BackendKind::custom(api_version, kind, template)));
            }
        }
        dropped
    }

    /// A watch of `kind`, once the federation serves it: each object's template labels
    /// into its cache, their changes into the controller's inputs.
    fn start(&self, kind: BackendKind) -> Watch {
        let cache = label_cache(kind.clone());
        let (fed, inputs, c, k) = (
            self.fed.clone(),
            self.inputs.clone(),
            cache.clone(),
            kind.clone(),
        );
        let definitions = self.definitions.subscribe();
        let task = tokio::spawn(async move {
            let (group, version) = k
                .api_version
                .rsplit_once('/')
                .unwrap_or(("", &k.api_version));
            let gvk = GroupVersionKind::gvk(group, version, &k.kind);
            let (ar, _) = until_served(&k.kind, DISCOVERY_BACKOFF, definitions, || {
                kube::discovery::pinned_kind(&fed, &gvk)
            })
            .await;
            let api: Api<Lean<Decoded>> = Api::all_with(fed, &ar);
            let mut events = c.watch_with_previous(api);
            while let Some(e) = events.next().await {
                if let Some(input) = workload_change(labels_of(k.clone()), e)
                    && inputs.unbounded_send(input).is_err()
                {
                    return;
                }
            }
        });
        Watch {
            kind,
            cache,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// Each watched kind and its cache.
    pub(super) fn caches(&self) -> Vec<(BackendKind, LabelCache)> {
        lock(&self.watches)
            .values()
            .map(|w| (w.kind.clone(), w.cache.clone()))
            .collect()
    }

    /// The cache of `kind` in `api_version`, if watched.
    pub(super) fn cache(&self, api_version: &str, kind: &str) -> Option<LabelCache> {
        lock(&self.watches)
            .get(&(api_version.to_owned(), kind.to_owned()))
            .map(|w| w.cache.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interpreter(
        api_version: &str,
        kind: &str,
        template: Option<&str>,
    ) -> ResourceInterpreterSpec {
        serde_json::from_value(serde_json::json!({
            "target": {"apiVersion": api_version, "kind": kind},
            "podTemplate": template.map(|p| serde_json::json!({"path": p})),
        }))
        .expect("interpreter")
    }

    #[test]
    fn kinds_whose_interpreter_names_a_pod_template() {
        let rollout = interpreter("example.com/v1", "Rollout", Some(".spec.template"));
        let rollout_later = interpreter("example.com/v1", "Rollout", Some(".spec.other"));
        let monitor = interpreter("monitoring.coreos.com/v1", "ServiceMonitor", None);
        let builtin = interpreter("apps/v1", "DaemonSet", Some(".spec.template"));
        let workload = interpreter("apps/v1", "Deployment", Some(".spec.template"));
        let service = interpreter("v1", "Service", Some(".spec"));
        let got = wanted([
            ("b-rollout", &rollout_later),
            ("a-rollout", &rollout),
            ("monitor", &monitor),
            ("ds", &builtin),
            ("deploy", &workload),
            ("svc", &service),
        ]);
        assert_eq!(
            got,
            BTreeMap::from([(
                ("example.com/v1".to_string(), "Rollout".to_string()),
                ".spec.template".to_string()
            )]),
            "the first interpreter by name decides; no template, built-in kinds and \
             Services give none"
        );
        // The first by name names no template: the kind backs nothing.
        let bare = interpreter("example.com/v1", "Rollout", None);
        assert!(wanted([("a", &bare), ("b", &rollout)]).is_empty());
        assert!(wanted([]).is_empty());
    }
}
