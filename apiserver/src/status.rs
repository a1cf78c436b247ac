//! `metav1.Status` errors: every failure a client sees is one of these, with a reason,
//! details and field causes, as Kubernetes clients expect.

use serde_json::{Value, json};

/// One field-level cause of an `Invalid` or `BadRequest` error.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Field path, e.g. `spec.replicas`.
    pub field: String,
}

/// An API error rendered as a `metav1.Status` body.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (the resource, or the kind for Invalid).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds`.
    pub retry_after: Option<u32>,
}

/// A resource named in messages: `deployments.apps`, or `services` for the core group.
pub fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            name: None,
            group: None,
            kind: None,
            causes: Vec::new(),
            retry_after: None,
        }
    }

    /// Names the object the error is about in its `details`, as upstream does.
    pub fn with_target(mut self, plural: &str, group: &str, name: &str) -> Self {
        self.kind = Some(plural.to_string());
        self.group = (!group.is_empty()).then(|| group.to_string());
        self.name = (!name.is_empty()).then(|| name.to_string());
        self
    }

    /// 404: the object does not exist.
    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(plural, group)),
        )
        .with_target(plural, group, name)
    }

    /// 404 for a URL that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409: create of a name that exists.
    pub fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(plural, group)),
        )
        .with_target(plural, group, name)
    }

    /// 409: optimistic-concurrency failure.
    pub fn conflict(plural: &str, group: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(plural, group)
            ),
        )
        .with_target(plural, group, name)
    }

    /// 409 with field causes and no target, as an apply's `FieldManagerConflict`s.
    pub fn conflict_causes(message: impl Into<String>, causes: Vec<Cause>) -> Self {
        let mut e = Self::new(409, "Conflict", message);
        e.causes = causes;
        e
    }

    /// The standard stale-resourceVersion conflict.
    pub fn stale(plural: &str, group: &str, name: &str) -> Self {
        Self::conflict(
            plural,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422: the object fails validation.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let list: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let what = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{what} \"{name}\" is invalid: {joined}"),
        )
        .with_target(kind, group, name);
        e.causes = causes;
        e
    }

    /// 400: malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 400 with field causes (strict field validation).
    pub fn bad_request_fields(message: impl Into<String>, causes: Vec<Cause>) -> Self {
        let mut e = Self::bad_request(message);
        e.causes = causes;
        e
    }

    /// 401: no or bad credentials.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403: authenticated but not allowed.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 403 about one object, worded as kube-apiserver's admission refusals:
    /// `namespaces "default" is forbidden: <why>`.
    pub fn forbidden_target(plural: &str, group: &str, name: &str, why: &str) -> Self {
        Self::forbidden(format!(
            "{} \"{name}\" is forbidden: {why}",
            qualified(plural, group)
        ))
        .with_target(plural, group, name)
    }

    /// 405: verb not supported on this resource.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 406: cannot produce the requested representation.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 410: the requested resourceVersion is older than the server keeps.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413: request body over the limit.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    /// 415: a body or patch type the server does not take.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 429: try again shortly.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        let mut e = Self::new(429, "TooManyRequests", message);
        e.retry_after = Some(1);
        e
    }

    /// 500: a bug or a storage failure; the message never carries secrets.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 504: storage did not answer in time.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `metav1.Status` object.
    pub fn to_status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.causes.is_empty() {
            details.insert(
                "causes".into(),
                Value::Array(
                    self.causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect(),
                ),
            );
        }
        if let Some(s) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(s));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// A successful `Status`, as returned by some deletes.
pub fn success(plural: &str, group: &str, name: &str, uid: &str) -> Value {
    let mut details = json!({"name": name, "kind": plural, "uid": uid});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_lists_every_cause() {
        let e = ApiError::invalid(
            "Deployment",
            "apps",
            "web",
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: -1: must be greater than or equal to 0".into(),
                field: "spec.replicas".into(),
            }],
        );
        assert_eq!(
            e.message,
            "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        );
        let s = e.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["details"]["causes"][0]["field"], "spec.replicas");
    }

    #[test]
    fn not_found_names_the_resource() {
        let e = ApiError::not_found("deployments", "apps", "web");
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        assert_eq!(e.to_status()["details"]["group"], "apps");
    }
}
