//! The copy controller's writes to the federation: a Placement's `Propagated` condition
//! and per-member entries, the federated object's combined `status`, its cleanup finalizer,
//! and the one-off labelling of Placements written before the copy label. The decisions
//! they carry out are made in [`super::controller`] (from [`super::report`],
//! [`super::status`] and [`super::plan`]).

use fed_api::Placement;
use fed_api::copies::{CopyKey, Path, path};
use fed_api::names::WORKLOAD_FINALIZER;
use kube::api::{Api, ApiResource, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use meridian_runtime::answer;
use serde_json::Value;

use super::controller::{Central, CopyError, FedKind, now};
use super::packed::PackedObject;
use super::status_writes;

impl Central {
    /// Writes the Placement's `Propagated` condition and per-cluster `entries` when they
    /// changed.
    pub(super) async fn write_status(
        &self,
        key: &CopyKey,
        p: &Placement,
        entries: Vec<fed_api::placement::ClusterWorkloadStatus>,
        mut cond: fed_api::common::Condition,
    ) -> Result<(), CopyError> {
        let old = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == cond.type_));
        // Entries without their sync times, so a resync that changed nothing writes nothing.
        let strip = |v: &[fed_api::placement::ClusterWorkloadStatus]| {
            v.iter()
                .map(|e| fed_api::placement::ClusterWorkloadStatus {
                    last_sync_time: e.last_sync_time.as_ref().map(|_| String::new()),
                    ..e.clone()
                })
                .collect::<Vec<_>>()
        };
        let wanted = strip(&entries);
        let same_entries = p
            .status
            .as_ref()
            .is_some_and(|s| strip(&s.clusters) == wanted);
        let same_cond = old.is_some_and(|c| {
            c.status == cond.status && c.reason == cond.reason && c.message == cond.message
        });
        if same_entries && same_cond {
            return Ok(());
        }
        let sent = status_writes::digest(&(
            serde_json::to_string(&wanted).unwrap_or_default(),
            (&cond.status, &cond.reason, &cond.message),
        ));
        let cached_rv = p.metadata.resource_version.as_deref();
        if self.placement_written.already(key, sent, cached_rv) {
            return Ok(());
        }
        cond.last_transition_time = match old {
            Some(c) if c.status == cond.status => c.last_transition_time.clone(),
            _ => Some(now()),
        };
        let patch = serde_json::json!({
            "status": {"conditions": [cond.patch_entry()], "clusters": entries}
        });
        let api = answer::api(
            self.fed.clone(),
            p.namespace().as_deref(),
            &ApiResource::erase::<Placement>(&()),
        );
        let answer = tokio::time::timeout(
            self.settings.sync_timeout,
            api.patch_status(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            ),
        )
        .await
        .map_err(|_| CopyError::Timeout("Placement status"))?
        .map_err(|source| CopyError::Federation {
            what: "Placement status",
            source,
        })?;
        self.placement_written
            .wrote(key, sent, answer.resource_version());
        Ok(())
    }

    /// Writes the federated object's `status` (through `/status`) as its members' copies
    /// report it, when it differs from what the object carries: a merge patch of the
    /// difference, so nothing else of the status is touched.
    pub(super) async fn write_fed_status(
        &self,
        fk: &FedKind,
        key: &CopyKey,
        fed: &Value,
        status: Value,
    ) -> Result<(), CopyError> {
        let current = match &fed["status"] {
            Value::Null => Value::Object(serde_json::Map::new()),
            s => s.clone(),
        };
        let Some(diff) = apimachinery::merge_patch_diff(&current, &status) else {
            return Ok(());
        };
        let sent = status_writes::digest(&status.to_string());
        if self
            .status_written
            .already(key, sent, fed["metadata"]["resourceVersion"].as_str())
        {
            return Ok(());
        }
        let ns = key.namespace.as_deref().filter(|_| fk.namespaced);
        let api = answer::api(self.fed.clone(), ns, &fk.ar);
        let patch = serde_json::json!({ "status": diff });
        match tokio::time::timeout(
            self.settings.sync_timeout,
            api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        {
            Err(_) => Err(CopyError::Timeout("status")),
            Ok(Ok(answer)) => {
                self.status_written
                    .wrote(key, sent, answer.resource_version());
                Ok(())
            }
            // Deleted meanwhile: its watch event brings the cleanup.
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            Ok(Err(source)) => Err(CopyError::Federation {
                what: "status",
                source,
            }),
        }
    }

    pub(super) async fn set_finalizer(
        &self,
        fk: &FedKind,
        key: &CopyKey,
        o: &PackedObject,
        add: bool,
    ) -> Result<(), CopyError> {
        let mut list: Vec<String> = o
            .finalizers()
            .iter()
            .filter(|f| *f != WORKLOAD_FINALIZER)
            .cloned()
            .collect();
        if add {
            list.push(WORKLOAD_FINALIZER.to_owned());
        }
        // Pinned to the version read, so a finalizer someone added meanwhile is not lost.
        let patch = serde_json::json!({
            "metadata": {"finalizers": list, "resourceVersion": o.resource_version()}
        });
        let ns = key.namespace.as_deref().filter(|_| fk.namespaced);
        let api = answer::api(self.fed.clone(), ns, &fk.ar);
        match api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(CopyError::Federation {
                what: "finalizer",
                source,
            }),
        }
    }
}

/// Labels the copied objects' Placements written before they carried
/// [`fed_api::copies::COPY_PLACEMENT_LABEL`] (by an earlier scheduler). Runs once before the
/// label-selected watch starts: a copy whose Placement that watch cannot see would look
/// unplaced, and its member copies would be removed.
pub(super) async fn label_earlier_placements(fed: &Client) -> Result<usize, CopyError> {
    use fed_api::copies::{COPY_PLACEMENT_LABEL, COPY_PLACEMENT_VALUE};
    let all: Api<Placement> = Api::all(fed.clone());
    let mut labelled = 0;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = all
            .list(&params)
            .await
            .map_err(|source| CopyError::Federation {
                what: "the Placement list",
                source,
            })?;
        for p in &page.items {
            let r = &p.spec.resource;
            if path(&r.api_version, &r.kind) != Path::Copy
                || p.labels().get(COPY_PLACEMENT_LABEL).map(String::as_str)
                    == Some(COPY_PLACEMENT_VALUE)
            {
                continue;
            }
            let api: Api<Placement> =
                Api::namespaced(fed.clone(), &p.namespace().unwrap_or_default());
            let patch = serde_json::json!({"metadata": {"labels": {COPY_PLACEMENT_LABEL: COPY_PLACEMENT_VALUE}}});
            match api
                .patch(
                    &p.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => labelled += 1,
                // Deleted meanwhile: nothing to keep.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    return Err(CopyError::Federation {
                        what: "a Placement's copy label",
                        source,
                    });
                }
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(labelled),
        }
    }
}
