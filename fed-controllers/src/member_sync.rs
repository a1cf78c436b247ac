//! Pieces every controller that writes into member clusters shares: the error of one
//! member sync, what a write did, and requests bounded by the sync timeout.

use std::future::Future;
use std::time::Duration;

use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use kube::api::{DeleteParams, DynamicObject, Preconditions};
use meridian_runtime::namespace::{self, Ensured};
use serde_json::Value;

/// Why syncing one object into one member failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The member holds the name and it is not Meridian's.
    #[error(
        "conflict: {kind} {namespace}/{name} exists in {cluster} and is not managed by Meridian"
    )]
    Conflict {
        /// Kind of the object.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Member.
        cluster: String,
    },
    /// No client yet: its watches have not started.
    #[error("not connected: member client not ready")]
    NotConnected,
    /// A member request failed.
    #[error("{op} in {cluster}")]
    Api {
        /// What was attempted.
        op: String,
        /// Member.
        cluster: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A member request took longer than the sync timeout.
    #[error("{op} in {cluster}: timed out")]
    Timeout {
        /// What was attempted.
        op: String,
        /// Member.
        cluster: String,
    },
    /// An object could not be converted.
    #[error("encoding {0}")]
    Encode(String, #[source] serde_json::Error),
}

impl SyncError {
    /// Whether the member holds the name and it is not Meridian's.
    pub fn is_conflict(&self) -> bool {
        matches!(self, SyncError::Conflict { .. })
    }

    /// Whether the member answered with HTTP status `code`.
    pub fn is_status(&self, code: u16) -> bool {
        matches!(self, SyncError::Api { source: kube::Error::Api(s), .. } if s.code == code)
    }
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The object did not exist and was created.
    Created,
    /// It existed and was changed.
    Updated,
    /// It was already as wanted.
    Unchanged,
}

/// Delete options that remove only the object with this `uid` (never a same-name object
/// created meanwhile); no precondition when the uid is unknown.
pub fn delete_only(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|u| Preconditions {
            uid: Some(u),
            resource_version: None,
        }),
        ..Default::default()
    }
}

/// Runs one member request with a deadline; the error names the operation and the member.
pub async fn timed<T>(
    cluster: &str,
    timeout: Duration,
    op: &str,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, SyncError> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(SyncError::Api {
            op: op.to_string(),
            cluster: cluster.to_string(),
            source,
        }),
        Err(_) => Err(SyncError::Timeout {
            op: op.to_string(),
            cluster: cluster.to_string(),
        }),
    }
}

/// Makes sure namespace `ns` exists in the member (see [`namespace::ensure`]), created as
/// Meridian's if missing. `record_create` hears the outcome (`ok`/`error`) and duration of
/// a create that made or failed to make it; one that found the namespace is not a create.
pub async fn ensure_namespace(
    client: &kube::Client,
    cluster: &str,
    timeout: Duration,
    ns: &str,
    record_create: impl FnOnce(&str, f64),
) -> Result<(), SyncError> {
    let start = std::time::Instant::now();
    let r = timed(
        cluster,
        timeout,
        &format!("creating namespace {ns}"),
        namespace::ensure(client, &member_namespace(ns)),
    )
    .await;
    match r {
        Ok(Ensured::Existed) => {}
        Ok(Ensured::Created) => record_create("ok", start.elapsed().as_secs_f64()),
        Err(_) => record_create("error", start.elapsed().as_secs_f64()),
    }
    r.map(drop)
}

/// A namespace Meridian creates in a member. Namespaces are shared with whatever else runs
/// in the member, so it carries only the managed-by label and Meridian never removes it.
pub fn member_namespace(ns: &str) -> k8s_openapi::api::core::v1::Namespace {
    namespace::named(ns, [(MANAGED_BY_LABEL, MANAGED_BY_VALUE)])
}

/// A JSON object as a kube dynamic object.
pub fn to_dynamic(v: &Value) -> Result<DynamicObject, SyncError> {
    serde_json::from_value(v.clone())
        .map_err(|e| SyncError::Encode(v["metadata"]["name"].to_string(), e))
}

/// Now, RFC 3339 to the second (as `lastSyncTime` is written).
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

/// Sets the `Propagated` condition among a Placement's `conditions`; an unchanged one keeps
/// its transition time (so a steady state writes nothing), a changed one gets `now`.
pub fn set_propagated(
    conditions: &mut Vec<fed_api::common::Condition>,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) {
    let old = conditions.iter().position(|c| c.type_ == "Propagated");
    if let Some(i) = old {
        let c = &conditions[i];
        if c.status == status && c.reason == reason && c.message == message {
            return;
        }
    }
    let cond = fed_api::common::Condition {
        type_: "Propagated".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_probe_time: None,
        last_transition_time: Some(now.into()),
    };
    match old {
        Some(i) => conditions[i] = cond,
        None => conditions.push(cond),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ensure_namespace` records against a member answering creates with `create`
    /// and reads with `read`.
    async fn recorded(create: u16, read: u16) -> (Result<(), SyncError>, Vec<String>) {
        use meridian_runtime::testing::{Answer, ScriptedApi};
        let member = ScriptedApi::new(move |req| match req.method {
            http::Method::POST if create < 300 => Answer::json(create, req.body.clone()),
            http::Method::POST => Answer::failure(create),
            _ if read < 300 => {
                Answer::json(read, serde_json::json!({"metadata": {"name": "shop"}}))
            }
            _ => Answer::failure(read),
        });
        let mut recorded = Vec::new();
        let r = ensure_namespace(
            &member.client(),
            "m1",
            Duration::from_secs(5),
            "shop",
            |result, _| recorded.push(result.to_string()),
        )
        .await;
        if create < 300 {
            let sent = &member.requests()[0].body;
            assert_eq!(
                sent["metadata"]["labels"][MANAGED_BY_LABEL],
                MANAGED_BY_VALUE
            );
        }
        (r, recorded)
    }

    #[tokio::test]
    async fn only_a_create_that_made_or_failed_to_make_the_namespace_is_recorded() {
        let (r, rec) = recorded(201, 500).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(rec, ["ok"]);
        let (r, rec) = recorded(409, 500).await;
        assert!(r.is_ok(), "{r:?}");
        assert!(rec.is_empty(), "{rec:?}");
        let (r, rec) = recorded(403, 200).await;
        assert!(r.is_ok(), "{r:?}");
        assert!(rec.is_empty(), "{rec:?}");
        // Forbidden and missing, or failed: the error names the member, and is recorded.
        let (r, rec) = recorded(403, 404).await;
        assert!(r.as_ref().is_err_and(|e| e.is_status(403)), "{r:?}");
        assert_eq!(rec, ["error"]);
        let (r, rec) = recorded(500, 200).await;
        assert!(r.as_ref().is_err_and(|e| e.is_status(500)), "{r:?}");
        assert_eq!(rec, ["error"]);
    }

    #[tokio::test]
    async fn a_slow_request_times_out_naming_the_member() {
        let r: Result<(), _> = timed(
            "m1",
            Duration::from_millis(1),
            "reading x",
            std::future::pending(),
        )
        .await;
        assert_eq!(r.unwrap_err().to_string(), "reading x in m1: timed out");
    }

    #[test]
    fn propagated_condition_keeps_its_time_while_unchanged() {
        let mut cs = Vec::new();
        set_propagated(&mut cs, "False", "Progressing", "waiting", "t1");
        set_propagated(&mut cs, "False", "Progressing", "waiting", "t2");
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].last_transition_time.as_deref(), Some("t1"));
        set_propagated(&mut cs, "True", "InSync", "", "t3");
        assert_eq!(cs.len(), 1);
        assert_eq!(
            (cs[0].status.as_str(), cs[0].reason.as_str()),
            ("True", "InSync")
        );
        assert_eq!(cs[0].last_transition_time.as_deref(), Some("t3"));
    }
}
