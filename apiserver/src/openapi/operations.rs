//! The operations of a served resource (collection, item, status and scale), described
//! once and rendered into both the v2 and the v3 documents.

use serde_json::Value;

use super::schemas::{definition_name, gvk};
use super::{PATCH_TYPES, SCALE, STATUS};
use crate::registry::ResourceDef;

/// A query or path parameter.
pub(super) struct Param {
    pub(super) name: &'static str,
    pub(super) location: &'static str,
    pub(super) type_: &'static str,
    pub(super) description: &'static str,
}

const fn query(name: &'static str, type_: &'static str, description: &'static str) -> Param {
    Param {
        name,
        location: "query",
        type_,
        description,
    }
}

const NAME: Param = Param {
    name: "name",
    location: "path",
    type_: "string",
    description: "name of the object",
};
const NAMESPACE: Param = Param {
    name: "namespace",
    location: "path",
    type_: "string",
    description: "object name and auth scope, such as for teams and projects",
};
const PRETTY: Param = query(
    "pretty",
    "string",
    "If 'true', the output is pretty printed.",
);
const DRY_RUN: Param = query(
    "dryRun",
    "string",
    "When present, modifications are not persisted. The only valid value is All.",
);
const FIELD_MANAGER: Param = query(
    "fieldManager",
    "string",
    "Name of the actor making these changes, recorded in managedFields.",
);
const FIELD_VALIDATION: Param = query(
    "fieldValidation",
    "string",
    "How unknown or duplicate fields in the body are treated: Ignore, Warn (the default) or Strict.",
);
const LABEL_SELECTOR: Param = query(
    "labelSelector",
    "string",
    "Restricts the objects returned by their labels. Defaults to everything.",
);
const FIELD_SELECTOR: Param = query(
    "fieldSelector",
    "string",
    "Restricts the objects returned by their fields. Defaults to everything.",
);
const LIMIT: Param = query(
    "limit",
    "integer",
    "Maximum number of objects to return; the rest is reachable with continue.",
);
const CONTINUE: Param = query(
    "continue",
    "string",
    "The continue token of the previous page of a limited list.",
);
const RESOURCE_VERSION: Param = query(
    "resourceVersion",
    "string",
    "Constrains which resource versions a list or watch may be served from.",
);
const RESOURCE_VERSION_MATCH: Param = query(
    "resourceVersionMatch",
    "string",
    "How resourceVersion applies to a list: Exact or NotOlderThan.",
);
const WATCH: Param = query(
    "watch",
    "boolean",
    "Watch for changes and stream add, update and remove notifications.",
);
const ALLOW_WATCH_BOOKMARKS: Param = query(
    "allowWatchBookmarks",
    "boolean",
    "Whether a watch may send BOOKMARK events.",
);
const TIMEOUT_SECONDS: Param = query(
    "timeoutSeconds",
    "integer",
    "Timeout of the list or watch call, regardless of activity.",
);
const GRACE_PERIOD: Param = query(
    "gracePeriodSeconds",
    "integer",
    "Seconds before the object is deleted; zero means immediately.",
);
const PROPAGATION_POLICY: Param = query(
    "propagationPolicy",
    "string",
    "Whether and how dependents are garbage collected: Orphan, Background or Foreground.",
);

const LIST_PARAMS: &[&Param] = &[
    &PRETTY,
    &ALLOW_WATCH_BOOKMARKS,
    &CONTINUE,
    &FIELD_SELECTOR,
    &LABEL_SELECTOR,
    &LIMIT,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &TIMEOUT_SECONDS,
    &WATCH,
];
// kubectl checks a kind's PATCH operations for fieldValidation to decide whether to
// ask the server for strict validation, so every write operation lists it.
const WRITE_PARAMS: &[&Param] = &[&PRETTY, &DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION];
const DELETE_PARAMS: &[&Param] = &[&PRETTY, &DRY_RUN, &GRACE_PERIOD, &PROPAGATION_POLICY];
const DELETE_COLLECTION_PARAMS: &[&Param] = &[
    &PRETTY,
    &CONTINUE,
    &DRY_RUN,
    &FIELD_SELECTOR,
    &GRACE_PERIOD,
    &LABEL_SELECTOR,
    &LIMIT,
    &PROPAGATION_POLICY,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &TIMEOUT_SECONDS,
];

/// The request body of an operation.
pub(super) enum Body {
    /// A whole object of the named definition.
    Object(String),
    /// A patch in one of these content types.
    Patch(&'static [&'static str]),
    /// Optional DeleteOptions.
    Delete,
}

/// One operation, rendered into both the v2 and the v3 documents.
pub(super) struct Op {
    /// `api/v1` or `apis/{group}/{version}`: the v3 document it belongs to.
    pub(super) gv_path: String,
    pub(super) path: String,
    pub(super) method: &'static str,
    pub(super) action: &'static str,
    pub(super) id: String,
    pub(super) description: String,
    pub(super) gvk: Value,
    pub(super) tag: String,
    pub(super) params: Vec<&'static Param>,
    pub(super) body: Option<Body>,
    /// Definition of the response body and the success codes.
    pub(super) response: String,
    pub(super) codes: &'static [&'static str],
}

/// `AppsV1`, `CoreV1`, `CoordinationV1`, `FederationMeridianDevV1alpha1`: the
/// group-version part of operation ids, spelled as upstream does.
pub(super) fn id_part(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let group = group.strip_suffix(".k8s.io").unwrap_or(group);
    group
        .split(['.', '-'])
        .chain(std::iter::once(version))
        .map(capitalize)
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// The request body a verb takes.
#[derive(Clone, Copy)]
enum BodyKind {
    None,
    Object,
    Patch,
    Delete,
}

/// The response body a verb returns.
#[derive(Clone, Copy)]
enum Response {
    Object,
    List,
    Status,
}

/// What an operation does, whatever resource it is applied to.
struct Verb {
    method: &'static str,
    action: &'static str,
    /// First word of the operation id.
    id: &'static str,
    description: &'static str,
    params: &'static [&'static Param],
    body: BodyKind,
    response: Response,
    codes: &'static [&'static str],
}

const LIST: Verb = Verb {
    method: "get",
    action: "list",
    id: "list",
    description: "list or watch objects of kind",
    params: LIST_PARAMS,
    body: BodyKind::None,
    response: Response::List,
    codes: &["200"],
};
const CREATE: Verb = Verb {
    method: "post",
    action: "post",
    id: "create",
    description: "create a",
    params: WRITE_PARAMS,
    body: BodyKind::Object,
    response: Response::Object,
    codes: &["200", "201", "202"],
};
const DELETE_COLLECTION: Verb = Verb {
    method: "delete",
    action: "deletecollection",
    id: "deleteCollection",
    description: "delete collection of",
    params: DELETE_COLLECTION_PARAMS,
    body: BodyKind::Delete,
    response: Response::Status,
    codes: &["200"],
};
const READ: Verb = Verb {
    method: "get",
    action: "get",
    id: "read",
    description: "read the specified",
    params: &[&PRETTY],
    body: BodyKind::None,
    response: Response::Object,
    codes: &["200"],
};
const REPLACE: Verb = Verb {
    method: "put",
    action: "put",
    id: "replace",
    description: "replace the specified",
    params: WRITE_PARAMS,
    body: BodyKind::Object,
    response: Response::Object,
    codes: &["200", "201"],
};
const PATCH_VERB: Verb = Verb {
    method: "patch",
    action: "patch",
    id: "patch",
    description: "partially update the specified",
    params: WRITE_PARAMS,
    body: BodyKind::Patch,
    response: Response::Object,
    codes: &["200", "201"],
};
const DELETE: Verb = Verb {
    method: "delete",
    action: "delete",
    id: "delete",
    description: "delete a",
    params: DELETE_PARAMS,
    body: BodyKind::Delete,
    response: Response::Status,
    codes: &["200", "202"],
};

const COLLECTION_VERBS: &[&Verb] = &[&LIST, &CREATE, &DELETE_COLLECTION];
const ITEM_VERBS: &[&Verb] = &[&READ, &REPLACE, &PATCH_VERB, &DELETE];
const SUBRESOURCE_VERBS: &[&Verb] = &[&READ, &REPLACE, &PATCH_VERB];

/// A URL of a resource and the object served there.
struct Target {
    path: String,
    /// Has a `{name}` segment.
    named: bool,
    /// Has a `{namespace}` segment.
    namespaced: bool,
    /// Operation-id words around the kind: `Namespaced` before, `Status` after.
    scope: &'static str,
    suffix: &'static str,
    /// Human name in descriptions, e.g. `Deployment` or `Deployment's scale`.
    what: String,
    object: String,
    gvk: Value,
    verbs: &'static [&'static Verb],
}

/// Every operation of one resource: collection, item and subresources.
pub(super) fn operations(d: &ResourceDef) -> Vec<Op> {
    let gv_path = if d.group.is_empty() {
        format!("api/{}", d.version)
    } else {
        format!("apis/{}/{}", d.group, d.version)
    };
    let ns = if d.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("/{gv_path}{ns}/{}", d.plural);
    let item = format!("{collection}/{{name}}");
    let kind_def = definition_name(d);
    let kind_gvk = gvk(d.group, d.version, d.kind);
    let target = |path: String, named, suffix, what: String, verbs| Target {
        path,
        named,
        namespaced: d.namespaced,
        scope: if d.namespaced { "Namespaced" } else { "" },
        suffix,
        what,
        object: kind_def.clone(),
        gvk: kind_gvk.clone(),
        verbs,
    };
    let mut targets = vec![
        target(collection, false, "", d.kind.into(), COLLECTION_VERBS),
        target(item.clone(), true, "", d.kind.into(), ITEM_VERBS),
    ];
    if d.namespaced {
        targets.push(Target {
            namespaced: false,
            scope: "",
            ..target(
                format!("/{gv_path}/{}", d.plural),
                false,
                "ForAllNamespaces",
                d.kind.into(),
                &[&LIST],
            )
        });
    }
    if d.status_subresource {
        let what = format!("{}'s status", d.kind);
        targets.push(target(
            format!("{item}/status"),
            true,
            "Status",
            what,
            SUBRESOURCE_VERBS,
        ));
    }
    if d.scale_subresource {
        let what = format!("{}'s scale", d.kind);
        targets.push(Target {
            object: SCALE.into(),
            gvk: gvk("autoscaling", "v1", "Scale"),
            ..target(
                format!("{item}/scale"),
                true,
                "Scale",
                what,
                SUBRESOURCE_VERBS,
            )
        });
    }

    let patch_types = PATCH_TYPES;
    let id_gv = id_part(d.group, d.version);
    let tag = gv_path
        .trim_start_matches("apis/")
        .trim_start_matches("api/")
        .replace(['/', '.'], "_");
    let mut ops = Vec::new();
    for t in &targets {
        for v in t.verbs {
            let mut params: Vec<&'static Param> = Vec::new();
            if t.named {
                params.push(&NAME);
            }
            if t.namespaced {
                params.push(&NAMESPACE);
            }
            params.extend_from_slice(v.params);
            ops.push(Op {
                gv_path: gv_path.clone(),
                path: t.path.clone(),
                method: v.method,
                action: v.action,
                id: format!("{}{id_gv}{}{}{}", v.id, t.scope, d.kind, t.suffix),
                description: format!("{} {}", v.description, t.what),
                gvk: t.gvk.clone(),
                tag: tag.clone(),
                params,
                body: match v.body {
                    BodyKind::None => None,
                    BodyKind::Object => Some(Body::Object(t.object.clone())),
                    BodyKind::Patch => Some(Body::Patch(patch_types)),
                    BodyKind::Delete => Some(Body::Delete),
                },
                response: match v.response {
                    Response::Object => t.object.clone(),
                    Response::List => format!("{}List", t.object),
                    Response::Status => STATUS.into(),
                },
                codes: v.codes,
            });
        }
    }
    ops
}
