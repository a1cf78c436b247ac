//! The namespaces kube-apiserver creates at start (`default`, `kube-system`,
//! `kube-public`, `kube-node-lease`), and which of them can never be deleted.

use serde_json::json;

use crate::engine::{Engine, WriteOptions};
use crate::status::ApiError;

/// The namespaces every server has from its first start.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The namespaces no delete may take away, as kube-apiserver's NamespaceLifecycle
/// admission keeps them (`kube-node-lease` is created at start but may be deleted).
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// The 403 a delete of an immortal namespace answers, or `None` when `name` may go.
pub fn refuse_delete(name: &str) -> Option<ApiError> {
    IMMORTAL_NAMESPACES.contains(&name).then(|| {
        ApiError::forbidden_target("namespaces", "", name, "this namespace may not be deleted")
    })
}

/// Creates the system namespaces that do not exist yet (on every start: a store restored
/// from before they existed gains them too). A namespace that appears meanwhile is fine.
pub async fn ensure(engine: &Engine) -> Result<(), ApiError> {
    let Some(def) = engine.registry().lookup("", "v1", "namespaces").cloned() else {
        // A registry without namespaces has nothing to create.
        return Ok(());
    };
    for name in SYSTEM_NAMESPACES {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match engine.create(&def, "", ns, &WriteOptions::default()).await {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
