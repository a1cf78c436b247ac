//! The federated workloads whose pods Services select: one cache per backend kind (the
//! built-in [`BackendKind::ALL`], and the custom kinds of [`super::custom_kinds`]) keeping
//! only each object's pod-template labels, fed by a watch of the federation that reports
//! label changes as [`Input::Workload`]; and the watch of the federation's
//! CustomResourceDefinitions ([`Input::Definitions`]) that starts a custom kind's watch as
//! soon as the federation serves it.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, GroupVersionKind};
use meridian_runtime::error::Report;
use meridian_runtime::kind_retry::definition_changes;
use meridian_runtime::lean::Lean;

use super::backends::{BackendKind, template_labels};
use super::custom_kinds::{CustomKinds, Kind};
use super::inputs::{Input, Labels, workload_change};
use crate::dynamic::Decoded;
use crate::slim_cache::SlimCache;

/// The pod-template labels of one kind's federated objects.
pub(super) type LabelCache = SlimCache<Decoded, Labels>;

/// Every backend kind's cache; clones share them.
#[derive(Clone)]
pub(super) struct Workloads {
    builtin: Arc<[(BackendKind, LabelCache)]>,
    custom: Arc<CustomKinds>,
}

/// What is kept of an object of `kind`: its pod template's labels, all
/// [`super::controller::Central::backends`] reads of it (the rest of a StatefulSet or a
/// CronJob would be most of this controller's memory otherwise).
pub(super) fn labels_of(
    kind: BackendKind,
) -> impl Fn(&Decoded) -> Option<Labels> + Send + Sync + 'static {
    move |o| Some(template_labels(&o.0.data, &kind.template))
}

/// The cache of `kind`'s objects, each kept as [`labels_of`] it and found by its labels
/// ([`label_tags`]): a Service's pass looks up the workloads its selector picks, not every
/// workload of its namespace.
pub(super) fn label_cache(kind: BackendKind) -> LabelCache {
    SlimCache::with_tags(labels_of(kind), label_tags)
}

/// Labels as the tags of a [`LabelCache`]: [`label_tag`] each.
pub(super) fn label_tags(labels: &Labels) -> Vec<String> {
    labels.iter().map(|(k, v)| label_tag(k, v)).collect()
}

/// One label as a tag: `key=value` (a label key has no `=`).
pub(super) fn label_tag(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

fn api_resource(kind: &BackendKind) -> ApiResource {
    let (group, version) = kind
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &kind.api_version));
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, &kind.kind),
        &kind.plural,
    )
}

impl Workloads {
    /// The caches, and the watches of the federation that fill them (each to be polled;
    /// the custom kinds' watches run on their own and report through the last one).
    pub(super) fn watch(fed: &Client) -> (Self, Vec<BoxStream<'static, Input>>) {
        let mut caches = Vec::new();
        let mut streams = Vec::new();
        for kind in BackendKind::ALL {
            let cache = label_cache(kind.clone());
            let api: Api<Lean<Decoded>> = Api::all_with(fed.clone(), &api_resource(&kind));
            let k = kind.clone();
            streams.push(
                cache
                    .watch_with_previous(api)
                    .filter_map(move |e| {
                        let input = workload_change(labels_of(k.clone()), e);
                        async move { input }
                    })
                    .boxed(),
            );
            caches.push((kind, cache));
        }
        let (tx, rx) = futures::channel::mpsc::unbounded();
        streams.push(rx.boxed());
        streams.push(
            definition_changes(fed.clone())
                .filter_map(|ev| {
                    if let Err(error) = &ev {
                        tracing::warn!(error = %Report(error), "federation CustomResourceDefinition watch failed; retrying");
                    }
                    std::future::ready(ev.ok().map(|()| Input::Definitions))
                })
                .boxed(),
        );
        let workloads = Workloads {
            builtin: caches.into(),
            custom: Arc::new(CustomKinds::new(fed.clone(), tx)),
        };
        (workloads, streams)
    }

    /// Each kind and its cache, built-in kinds first.
    pub(super) fn all(&self) -> Vec<(BackendKind, LabelCache)> {
        let mut out = self.builtin.to_vec();
        out.extend(self.custom.caches());
        out
    }

    fn cache(&self, api_version: &str, kind: &str) -> Option<LabelCache> {
        self.builtin
            .iter()
            .find(|(k, _)| k.api_version == api_version && k.kind == kind)
            .map(|(_, c)| c.clone())
            .or_else(|| self.custom.cache(api_version, kind))
    }

    /// The pod-template labels of the object `namespace/name` of `kind` in `api_version`,
    /// if it is a backend kind and the object is cached.
    pub(super) fn labels(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Labels>> {
        self.cache(api_version, kind)?.get(namespace, name)
    }

    /// Watches exactly the `wanted` custom kinds ([`super::custom_kinds::wanted`]);
    /// whether one was dropped.
    pub(super) fn sync_custom(&self, wanted: &BTreeMap<Kind, String>) -> bool {
        self.custom.sync(wanted)
    }

    /// The federation's CustomResourceDefinitions changed: custom kinds not served yet are
    /// looked up again at once.
    pub(super) fn definitions_changed(&self) {
        self.custom.definitions_changed();
    }

    /// Waits for every built-in kind's first list (a custom kind's comes when the
    /// federation serves it, perhaps never).
    pub(super) async fn ready(&self) {
        for (_, c) in self.builtin.iter() {
            c.ready().wait().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;

    fn decoded(v: serde_json::Value) -> Decoded {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn objects_are_kept_as_their_pod_template_labels() {
        let sts = BackendKind::of("apps/v1", "StatefulSet").expect("kind");
        let cache = label_cache(sts.clone());
        let db = decoded(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "shop", "labels": {"owner": "x"},
                         "annotations": {"big": "x"}},
            "spec": {"replicas": 3, "serviceName": "db",
                     "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db", "tier": "data"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 3}
        }));
        assert_eq!(cache.apply(&Event::Apply(db)), None);
        assert_eq!(
            cache.get("shop", "db").as_deref(),
            Some(&Labels::from([
                ("app".into(), "db".into()),
                ("tier".into(), "data".into())
            ])),
            "the pod template's labels, not the StatefulSet's"
        );
        let cron = BackendKind::of("batch/v1", "CronJob").expect("kind");
        let cache = label_cache(cron);
        let backup = decoded(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "backup", "namespace": "shop"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                "metadata": {"labels": {"app": "backup"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}}
        }));
        cache.apply(&Event::Apply(backup));
        assert_eq!(
            cache.get("shop", "backup").expect("cached")["app"],
            "backup"
        );
        let bare = decoded(json!({"apiVersion": "batch/v1", "kind": "CronJob",
                                  "metadata": {"name": "bare", "namespace": "shop"}}));
        cache.apply(&Event::Apply(bare));
        assert_eq!(cache.get("shop", "bare").as_deref(), Some(&Labels::new()));
    }

    #[test]
    fn api_resources() {
        let ar = api_resource(&BackendKind::of("batch/v1", "CronJob").expect("kind"));
        assert_eq!(
            (
                ar.group.as_str(),
                ar.version.as_str(),
                ar.api_version.as_str()
            ),
            ("batch", "v1", "batch/v1")
        );
        assert_eq!(
            (ar.kind.as_str(), ar.plural.as_str()),
            ("CronJob", "cronjobs")
        );
        let ar = api_resource(&BackendKind::of("apps/v1", "DaemonSet").expect("kind"));
        assert_eq!(
            (
                ar.group.as_str(),
                ar.api_version.as_str(),
                ar.plural.as_str()
            ),
            ("apps", "apps/v1", "daemonsets")
        );
    }
}
