//! JSON text held LZ4-compressed, for the caches that keep every object of a fleet in
//! memory: Kubernetes objects repeat their keys, so they pack to about half their text for
//! a few microseconds each way, well under the cost of parsing them.

use std::fmt;
use std::sync::Arc;

/// Immutable JSON text, compressed; cheap to clone, and equal exactly when the texts are.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PackedJson(Arc<[u8]>);

impl PackedJson {
    /// Packs `text`.
    pub fn pack(text: &[u8]) -> Self {
        // One input always compresses to the same bytes, so comparing and hashing the
        // packed form compares and hashes the text.
        Self(lz4_flex::block::compress_prepend_size(text).into())
    }

    /// The length of the text.
    pub fn text_len(&self) -> usize {
        lz4_flex::block::uncompressed_size(&self.0).map_or(0, |(n, _)| n)
    }

    /// What the text takes in memory.
    pub fn packed_len(&self) -> usize {
        self.0.len()
    }

    /// Appends the text to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        let Ok((len, block)) = lz4_flex::block::uncompressed_size(&self.0) else {
            return;
        };
        let start = out.len();
        out.resize(start + len, 0);
        // Only bytes compressed by `pack` are held, so they always decompress to `len`.
        let written = lz4_flex::block::decompress_into(block, &mut out[start..]).unwrap_or(0);
        out.truncate(start + written);
    }

    /// The text.
    pub fn unpack(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text_len());
        self.append_to(&mut out);
        out
    }
}

impl fmt::Debug for PackedJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.unpack()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn round_trip_equality_and_append() {
        let text = br#"{"metadata":{"name":"web"},"spec":{"replicas":3}}"#;
        let p = PackedJson::pack(text);
        assert_eq!(p.unpack(), text);
        assert_eq!(p.text_len(), text.len());
        assert_eq!(p, PackedJson::pack(text));
        assert_ne!(p, PackedJson::pack(br#"{"metadata":{"name":"web"}}"#));
        let mut out = b"{\"object\":".to_vec();
        p.append_to(&mut out);
        assert_eq!(out, [&b"{\"object\":"[..], text].concat());
        assert_eq!(PackedJson::pack(b"").unpack(), b"");
    }

    #[test]
    fn a_deployment_is_held_in_well_under_its_text() {
        let containers: Vec<Value> = (0..2)
            .map(|i| {
                json!({"name": format!("c{i}"), "image": "registry.example/web:1.27",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"})
            })
            .collect();
        let v = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop",
                "labels": {"app": "web", "federation.meridian.dev/managed-by": "meridian"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": containers, "restartPolicy": "Always",
                        "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}}}});
        let text = v.to_string();
        let p = PackedJson::pack(text.as_bytes());
        assert!(
            p.packed_len() * 10 < text.len() * 7,
            "{} of {}",
            p.packed_len(),
            text.len()
        );
        assert_eq!(p.unpack(), text.as_bytes());
    }
}
