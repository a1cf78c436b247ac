//! Pieces every controller that writes into member clusters shares: the error of one
//! member sync, what a write did, and requests bounded by the sync timeout.

use std::future::Future;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Preconditions};
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

/// Makes sure namespace `ns` exists in the member (created as Meridian's if missing; one
/// created meanwhile by someone else is fine, namespaces are shared). `record_create` hears
/// the outcome (`ok`/`error`) and duration of a create that made or failed to make it.
///
/// It creates first and reads only when not allowed to create: a workload's first copy in a
/// member usually meets no namespace (a read first would cost a thousand members two
/// requests each), and an existing one answers the create with 409 as cheaply as a read.
/// A member that lets Meridian read namespaces but not create them still passes where the
/// namespace exists.
pub async fn ensure_namespace(
    client: &kube::Client,
    cluster: &str,
    timeout: Duration,
    ns: &str,
    record_create: impl FnOnce(&str, f64),
) -> Result<(), SyncError> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let api: Api<Namespace> = Api::all(client.clone());
    let obj = serde_json::from_value(crate::workload::desired::namespace(ns))
        .map_err(|e| SyncError::Encode(ns.into(), e))?;
    let start = std::time::Instant::now();
    let created = timed(
        cluster,
        timeout,
        &format!("creating namespace {ns}"),
        api.create(&PostParams::default(), &obj),
    )
    .await;
    match created {
        Ok(_) => {
            record_create("ok", start.elapsed().as_secs_f64());
            Ok(())
        }
        // It exists already.
        Err(e) if e.is_status(409) => Ok(()),
        Err(e) if e.is_status(403) => {
            let read = timed(
                cluster,
                timeout,
                &format!("reading namespace {ns}"),
                api.get_opt(ns),
            )
            .await?;
            match read {
                Some(_) => Ok(()),
                None => Err(e),
            }
        }
        Err(e) => {
            record_create("error", start.elapsed().as_secs_f64());
            Err(e)
        }
    }
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
    use std::sync::{Arc, Mutex};

    /// A member that answers namespace creates with `create` and reads with `read`, and
    /// keeps each request's method and path.
    #[derive(Clone)]
    struct FakeMember {
        create: u16,
        read: u16,
        seen: Arc<Mutex<Vec<String>>>,
    }

    impl tower_service::Service<http::Request<kube::client::Body>> for FakeMember {
        type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
            let code = if req.method() == http::Method::POST {
                self.create
            } else {
                self.read
            };
            self.seen
                .lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri().path()));
            let body = if code < 300 {
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": "shop"}})
            } else {
                let reason = match code {
                    403 => "Forbidden",
                    404 => "NotFound",
                    409 => "AlreadyExists",
                    _ => "InternalError",
                };
                serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                   "code": code, "reason": reason, "message": format!("answered {code}")})
            };
            std::future::ready(Ok(http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(body.to_string().into())
                .unwrap()))
        }
    }

    /// What `ensure_namespace` returns against a member answering creates with `create` and
    /// reads with `read`; the requests it sent; the outcomes it recorded.
    async fn ensure(create: u16, read: u16) -> (Result<(), SyncError>, Vec<String>, Vec<String>) {
        let member = FakeMember {
            create,
            read,
            seen: Arc::default(),
        };
        let client = kube::Client::new(member.clone(), "default");
        let mut recorded = Vec::new();
        let r = ensure_namespace(
            &client,
            "m1",
            Duration::from_secs(5),
            "shop",
            |result, _| recorded.push(result.to_string()),
        )
        .await;
        let seen = member.seen.lock().unwrap().clone();
        (r, seen, recorded)
    }

    #[tokio::test]
    async fn a_namespace_is_created_first_and_read_only_when_creating_is_forbidden() {
        const POST: &str = "POST /api/v1/namespaces";
        const GET: &str = "GET /api/v1/namespaces/shop";
        let (r, seen, recorded) = ensure(201, 500).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            (seen, recorded),
            (vec![POST.to_string()], vec!["ok".to_string()])
        );
        // It exists: one request, and no create recorded.
        let (r, seen, recorded) = ensure(409, 500).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!((seen, recorded.len()), (vec![POST.to_string()], 0));
        // Not allowed to create, but there.
        let (r, seen, _) = ensure(403, 200).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(seen, [POST, GET]);
        // Not allowed to create, and missing: the refusal is the error.
        let (r, seen, _) = ensure(403, 404).await;
        assert!(r.as_ref().is_err_and(|e| e.is_status(403)), "{r:?}");
        assert_eq!(seen, [POST, GET]);
        let (r, _, recorded) = ensure(500, 200).await;
        assert!(r.as_ref().is_err_and(|e| e.is_status(500)), "{r:?}");
        assert_eq!(recorded, ["error"]);
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
