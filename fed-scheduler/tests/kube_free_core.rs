//! The pure core (everything but `src/runtime/` and `src/main.rs`) names no kube or
//! k8s-openapi item and none of fed-api's kube wrappers: it decides over `fed_api::object`
//! and the plain spec and status types, which build without kube (`fed-api` without its
//! `kube` feature).

use std::path::Path;

/// Crates the core must not name.
const CRATES: [&str; 2] = ["kube::", "k8s_openapi::"];
/// fed-api's kube wrappers (`fed_api::object` has the core's envelopes).
const WRAPPERS: [&str; 7] = [
    "Cluster",
    "PropagationPolicy",
    "ClusterPropagationPolicy",
    "Placement",
    "OverridePolicy",
    "ClusterOverridePolicy",
    "ResourceInterpreter",
];

/// Whether `code` names a forbidden crate or wrapper (`fed_api::Placement`, but not
/// `fed_api::PlacementSpec`).
fn forbidden(code: &str) -> bool {
    CRATES.iter().any(|c| code.contains(c))
        || WRAPPERS.iter().any(|w| {
            let path = format!("fed_api::{w}");
            code.match_indices(&path).any(|(i, _)| {
                !code[i + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
        })
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_check_tells_wrappers_from_specs() {
    assert!(forbidden("use fed_api::Placement;"));
    assert!(forbidden("let c: fed_api::Cluster = x;"));
    assert!(forbidden("use kube::Api;"));
    assert!(!forbidden("use fed_api::PlacementSpec;"));
    assert!(!forbidden("use fed_api::object::Cluster;"));
}

#[test]
fn the_core_names_nothing_of_kube() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let core: Vec<_> = files
        .into_iter()
        .filter(|p| !p.starts_with(src.join("runtime")) && *p != src.join("main.rs"))
        .collect();
    assert!(core.len() > 10, "the core's files were not found: {core:?}");
    let mut found = Vec::new();
    for path in &core {
        let text = std::fs::read_to_string(path).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if forbidden(code) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "kube in the core:\n{}", found.join("\n"));
}
