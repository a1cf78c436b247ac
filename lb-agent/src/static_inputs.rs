//! Inputs from a JSON file instead of the API, for running an agent without a cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::Context as _;
use fed_api::lbconfig::LbConfig;

use crate::inputs::{Inputs, LocalEndpoints, validate};

#[derive(serde::Deserialize)]
struct File {
    config: LbConfig,
    #[serde(default)]
    endpoints: BTreeMap<String, Vec<SocketAddr>>,
}

/// Reads and validates the file for cluster `me`.
pub fn load(path: &std::path::Path, me: &str) -> anyhow::Result<Inputs> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: File =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    validate(&file.config, me)?;
    let mut local = LocalEndpoints::new();
    for (key, addrs) in file.endpoints {
        let mut parts = key.splitn(3, '/');
        let (Some(ns), Some(svc)) = (parts.next(), parts.next()) else {
            anyhow::bail!("endpoint key {key:?} is not ns/svc/port-name");
        };
        let port = parts.next().unwrap_or_default();
        local.insert(
            (ns.to_string(), svc.to_string(), port.to_string()),
            addrs.into_iter().collect(),
        );
    }
    Ok(Inputs::fixed(file.config, local))
}
