//! The workload controller's finalizer: added before anything is pushed, and removed once
//! every member copy is gone (or the workload was orphaned).

use std::sync::Arc;

use fed_api::Placement;
use fed_api::names::WORKLOAD_FINALIZER;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use meridian_runtime::answer::{self, Written};
use meridian_runtime::events::EventType;
use serde_json::{Value, json};

use super::controller::Central;
use super::events;
use super::kinds::WorkloadKey;
use super::member::{Intent, MemberShared, Want};
use crate::fleet::{self, FedError};

impl Central {
    pub(super) async fn set_finalizers(
        &self,
        key: &WorkloadKey,
        fed: &Value,
        list: Vec<String>,
    ) -> Result<Written, FedError> {
        let api = answer::api(
            self.fed.clone(),
            Some(&key.namespace),
            &key.kind.api_resource(),
        );
        // resourceVersion makes it a compare-and-swap: a concurrent change is retried.
        let patch = json!({"metadata": {"finalizers": list, "resourceVersion": fed["metadata"]["resourceVersion"]}});
        self.timed(
            &format!("finalizers of {key}"),
            api.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }

    /// Whether the workload's Placement was orphaned: the API server's garbage collector
    /// handles `propagationPolicy=Orphan` by dropping dependents' owner references and then
    /// the `orphan` finalizer, possibly before this controller sees that finalizer. Read live,
    /// not from the cache, so the answer is not older than the workload's deletion.
    async fn placement_orphaned(&self, key: &WorkloadKey, uid: &str) -> Result<bool, FedError> {
        let api: Api<Placement> = Api::namespaced(self.fed.clone(), &key.namespace);
        let p = self
            .timed(
                &format!("reading placement {}", key.placement_name()),
                api.get_opt(&key.placement_name()),
            )
            .await?;
        Ok(p.is_some_and(|p| !p.owner_references().iter().any(|r| r.uid == uid)))
    }

    /// A deleting workload: orphaned → let go; else remove member copies, then the finalizer.
    pub(super) async fn finalize(
        &self,
        key: &WorkloadKey,
        fed: &Value,
        uid: &str,
        fins: &[String],
        members: &[Arc<MemberShared>],
    ) -> Result<(), FedError> {
        if !fins.iter().any(|f| f == WORKLOAD_FINALIZER) {
            return Ok(());
        }
        let orphan =
            fins.iter().any(|f| f == "orphan") || self.placement_orphaned(key, uid).await?;
        let pending = if orphan {
            Vec::new()
        } else {
            fleet::members::remove_copies(
                members.iter().map(|m| (m.name.as_str(), &**m)),
                |m| m.holds(key, uid),
                |m| {
                    m.set_intent(key, Intent::new(uid, Want::Absent), None);
                },
            )
        };
        if !pending.is_empty() {
            tracing::info!(%key, clusters = ?pending, "waiting for member copies to be removed");
            return Ok(());
        }
        let rest: Vec<String> = fins
            .iter()
            .filter(|f| *f != WORKLOAD_FINALIZER)
            .cloned()
            .collect();
        self.set_finalizers(key, fed, rest).await?;
        for m in members {
            m.forget(key);
        }
        let (reason, message) = fleet::members::cleaned(orphan, "member copies removed");
        self.recorder
            .record(events::build(key, uid, EventType::Normal, reason, message));
        Ok(())
    }
}

/// Whether the cached workload (at `cached_rv`) is the version our finalizer write was
/// `pinned` to: that write has not come back through the watch yet.
pub(super) fn finalizer_write_pending(pinned: Option<&str>, cached_rv: Option<&str>) -> bool {
    pinned.is_some() && pinned == cached_rv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finalizer_write_is_pending_while_the_cache_shows_the_version_it_was_pinned_to() {
        assert!(finalizer_write_pending(Some("7"), Some("7")));
        assert!(!finalizer_write_pending(Some("7"), Some("9")), "moved on");
        assert!(!finalizer_write_pending(None, Some("7")), "never written");
        assert!(!finalizer_write_pending(None, None));
    }
}
