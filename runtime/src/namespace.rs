//! Making sure a namespace exists before something is put in it: create first, read only
//! when creating is forbidden.
//!
//! Creating first costs one request whether the namespace is there (409) or not, where
//! reading first costs two for a missing one, and a missing one is the usual case for the
//! first object a federation or a member receives in it. A client allowed to read
//! namespaces but not to create them still passes where the namespace exists.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// This call created the namespace.
    Created,
    /// The namespace was there already.
    Existed,
}

/// A namespace object named `name`, with `labels`.
pub fn named<'a>(name: &str, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Namespace {
    let labels: std::collections::BTreeMap<String, String> = labels
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: (!labels.is_empty()).then_some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// Makes sure `namespace` exists, creating it as given when missing. One created meanwhile
/// by someone else is fine: namespaces are shared. When creating is forbidden (403) and
/// the namespace is missing, the refusal is the error.
pub async fn ensure(client: &kube::Client, namespace: &Namespace) -> Result<Ensured, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.create(&PostParams::default(), namespace).await {
        Ok(_) => Ok(Ensured::Created),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Ensured::Existed),
        Err(forbidden @ kube::Error::Api(_)) if is_forbidden(&forbidden) => {
            let name = namespace.metadata.name.as_deref().unwrap_or_default();
            match api.get_opt(name).await? {
                Some(_) => Ok(Ensured::Existed),
                None => Err(forbidden),
            }
        }
        Err(e) => Err(e),
    }
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Answer, ScriptedApi};

    /// What `ensure` returns against an API answering creates with `create` and reads with
    /// `read`, and the requests it sent.
    async fn ensure_against(create: u16, read: u16) -> (Result<Ensured, kube::Error>, Vec<String>) {
        let api = ScriptedApi::new(move |req| {
            let code = if req.method == http::Method::POST {
                create
            } else {
                read
            };
            if code < 300 {
                Answer::json(
                    code,
                    serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": "shop"}}),
                )
            } else {
                Answer::failure(code)
            }
        });
        let r = ensure(&api.client(), &named("shop", [("a", "b")])).await;
        let seen = api
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        (r, seen)
    }

    #[tokio::test]
    async fn a_namespace_is_created_first_and_read_only_when_creating_is_forbidden() {
        const POST: &str = "POST /api/v1/namespaces";
        const GET: &str = "GET /api/v1/namespaces/shop";
        let (r, seen) = ensure_against(201, 500).await;
        assert_eq!(
            (r.ok(), seen),
            (Some(Ensured::Created), vec![POST.to_string()])
        );
        // It exists: one request.
        let (r, seen) = ensure_against(409, 500).await;
        assert_eq!(
            (r.ok(), seen),
            (Some(Ensured::Existed), vec![POST.to_string()])
        );
        // Not allowed to create, but there.
        let (r, seen) = ensure_against(403, 200).await;
        assert_eq!(
            (r.ok(), seen),
            (
                Some(Ensured::Existed),
                vec![POST.to_string(), GET.to_string()]
            )
        );
        // Not allowed to create, and missing: the refusal is the error.
        let (r, seen) = ensure_against(403, 404).await;
        assert!(r.as_ref().is_err_and(is_forbidden), "{r:?}");
        assert_eq!(seen, [POST, GET]);
        let (r, seen) = ensure_against(500, 200).await;
        assert!(
            matches!(&r, Err(kube::Error::Api(s)) if s.code == 500),
            "{r:?}"
        );
        assert_eq!(seen, [POST]);
    }

    #[tokio::test]
    async fn the_namespace_is_created_as_given() {
        let api = ScriptedApi::new(|req| Answer::json(201, req.body.clone()));
        ensure(&api.client(), &named("shop", [("managed-by", "meridian")]))
            .await
            .expect("created");
        let sent = &api.requests()[0].body;
        assert_eq!(sent["metadata"]["name"], "shop");
        assert_eq!(sent["metadata"]["labels"]["managed-by"], "meridian");
    }
}
