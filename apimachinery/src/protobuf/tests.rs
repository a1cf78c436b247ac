//! Decoding tests against protobuf bytes built field by field, as Go's
//! encoder lays them out, with the vendored schema table.

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// The table the server embeds, parsed once per test binary.
fn schema() -> &'static ProtoSchema {
    static SCHEMA: OnceLock<ProtoSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let text = include_str!("../../../apiserver/openapi/k8s-protobuf.json");
        let table = serde_json::from_str(text).expect("table is valid JSON");
        ProtoSchema::from_json(&table).expect("table is a valid schema")
    })
}

/// apiVersion/kind to definition name for the groups the table covers.
fn definition_for(api_version: &str, kind: &str) -> Option<String> {
    let (group, version) = api_version
        .rsplit_once('/')
        .unwrap_or(("core", api_version));
    let group = group.split('.').next()?;
    let prefix = match group {
        "core" => format!("io.k8s.api.core.{version}"),
        "meta" => format!("io.k8s.apimachinery.pkg.apis.meta.{version}"),
        _ => format!("io.k8s.api.{group}.{version}"),
    };
    let name = format!("{prefix}.{kind}");
    schema().contains(&name).then_some(name)
}

fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    decode_envelope(body, schema(), definition_for)
}

/// A protobuf message under construction, written the way Go's encoder does.
#[derive(Default, Clone)]
struct Enc(Vec<u8>);

impl Enc {
    fn new() -> Self {
        Enc::default()
    }

    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, tag: u32, wire_type: u8) {
        self.raw_varint(u64::from(tag) << 3 | u64::from(wire_type));
    }

    fn int(mut self, tag: u32, v: i64) -> Self {
        self.key(tag, 0);
        self.raw_varint(v as u64);
        self
    }

    fn bool(self, tag: u32, v: bool) -> Self {
        self.int(tag, i64::from(v))
    }

    fn double(mut self, tag: u32, v: f64) -> Self {
        self.key(tag, 1);
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
        self
    }

    fn bytes(mut self, tag: u32, v: &[u8]) -> Self {
        self.key(tag, 2);
        self.raw_varint(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }

    fn str(self, tag: u32, v: &str) -> Self {
        self.bytes(tag, v.as_bytes())
    }

    fn msg(self, tag: u32, v: Enc) -> Self {
        self.bytes(tag, &v.0)
    }

    /// One `map<string, string>` entry.
    fn entry(self, tag: u32, k: &str, v: &str) -> Self {
        self.msg(tag, Enc::new().str(1, k).str(2, v))
    }

    /// One `map<string, bytes>` entry.
    fn entry_bytes(self, tag: u32, k: &str, v: &[u8]) -> Self {
        self.msg(tag, Enc::new().str(1, k).bytes(2, v))
    }

    /// One `map<string, Message>` entry.
    fn entry_msg(self, tag: u32, k: &str, v: Enc) -> Self {
        self.msg(tag, Enc::new().str(1, k).msg(2, v))
    }
}

fn envelope(api_version: &str, kind: &str, raw: Enc) -> Vec<u8> {
    let unknown = Enc::new()
        .msg(1, Enc::new().str(1, api_version).str(2, kind))
        .msg(2, raw);
    [MAGIC.as_slice(), &unknown.0].concat()
}

fn time(seconds: i64) -> Enc {
    Enc::new().int(1, seconds)
}

fn quantity(s: &str) -> Enc {
    Enc::new().str(1, s)
}

fn int_or_string_int(v: i32) -> Enc {
    Enc::new().int(1, 0).int(2, i64::from(v))
}

fn int_or_string_str(v: &str) -> Enc {
    Enc::new().int(1, 1).str(3, v)
}

/// 2024-01-02T03:04:05Z.
const JAN_2_2024: i64 = 1_704_164_645;

#[test]
fn the_vendored_table_loads() {
    let schema = schema();
    // The generator's roots (tools/gen-k8s-definitions.py) and what they reach.
    assert_eq!(schema.len(), 358);
    assert!(schema.contains("io.k8s.api.apps.v1.Deployment"));
    assert!(schema.contains("io.k8s.api.apps.v1.StatefulSet"));
    assert!(schema.contains("io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler"));
    assert!(schema.contains("io.k8s.api.core.v1.VolumeSource"));
    assert!(
        schema
            .definitions()
            .any(|d| d == "io.k8s.api.core.v1.Secret")
    );
}

#[test]
fn configmap() {
    let metadata = Enc::new()
        .str(1, "settings")
        .str(3, "team-a")
        .entry(11, "app", "web")
        .entry(11, "tier", "frontend");
    let raw = Enc::new()
        .msg(1, metadata)
        .entry(2, "mode", "fast")
        .entry(2, "empty", "")
        .entry_bytes(3, "blob", b"\x00\x01\x02\xff");
    let body = envelope("v1", "ConfigMap", raw);
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": "team-a",
                "labels": {"app": "web", "tier": "frontend"}
            },
            "data": {"mode": "fast", "empty": ""},
            "binaryData": {"blob": "AAEC/w=="}
        })
    );
}

/// client-go's typed `AutoscalingV1()` client sends v1 HorizontalPodAutoscalers as
/// protobuf; their round-trip annotations are plain strings.
#[test]
fn autoscaling_v1_horizontal_pod_autoscaler() {
    let metadata = Enc::new().str(1, "web").str(3, "shop").entry(
        12,
        "autoscaling.alpha.kubernetes.io/metrics",
        r#"[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}}]"#,
    );
    let target = Enc::new()
        .str(1, "Deployment")
        .str(2, "web")
        .str(3, "apps/v1");
    let spec = Enc::new().msg(1, target).int(2, 2).int(3, 6).int(4, 65);
    let status = Enc::new().int(3, 2).int(4, 3).int(5, 40);
    let raw = Enc::new().msg(1, metadata).msg(2, spec).msg(3, status);
    let body = envelope("autoscaling/v1", "HorizontalPodAutoscaler", raw);
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "autoscaling/v1",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop", "annotations": {
                "autoscaling.alpha.kubernetes.io/metrics":
                    r#"[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}}]"#}},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                "minReplicas": 2, "maxReplicas": 6, "targetCPUUtilizationPercentage": 65,
            },
            "status": {"currentReplicas": 2, "desiredReplicas": 3,
                "currentCPUUtilizationPercentage": 40},
        })
    );
}

#[test]
fn secret_bytes_are_base64() {
    let raw = Enc::new()
        .msg(1, Enc::new().str(1, "creds"))
        .entry_bytes(2, "password", b"hunter2")
        .entry_bytes(2, "empty", b"")
        .str(3, "Opaque")
        .bool(5, true);
    let body = envelope("v1", "Secret", raw);
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "data": {"password": "aHVudGVyMg==", "empty": ""},
            "type": "Opaque",
            "immutable": true
        })
    );
}

fn deployment() -> Enc {
    let container = Enc::new()
        .str(1, "nginx")
        .str(2, "nginx:1.27")
        .msg(6, Enc::new().int(3, 80))
        .msg(8, Enc::new().entry_msg(1, "cpu", quantity("500m")));
    let template = Enc::new()
        .msg(1, Enc::new().entry(11, "app", "web").msg(8, Enc::new()))
        .msg(2, Enc::new().msg(2, container));
    let strategy = Enc::new().str(1, "RollingUpdate").msg(
        2,
        Enc::new()
            .msg(1, int_or_string_int(1))
            .msg(2, int_or_string_str("25%")),
    );
    let spec = Enc::new()
        .int(1, 3)
        .msg(2, Enc::new().entry(1, "app", "web"))
        .msg(3, template)
        .msg(4, strategy);
    let metadata = Enc::new()
        .str(1, "web")
        .str(3, "default")
        .msg(8, time(JAN_2_2024))
        .entry(11, "app", "web");
    Enc::new().msg(1, metadata).msg(2, spec).msg(3, Enc::new())
}

fn deployment_json() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "creationTimestamp": "2024-01-02T03:04:05Z",
            "labels": {"app": "web"}
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                "spec": {
                    "containers": [{
                        "name": "nginx",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": "500m"}}
                    }]
                }
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}
            }
        },
        "status": {}
    })
}

#[test]
fn deployment_with_special_types() {
    let body = envelope("apps/v1", "Deployment", deployment());
    assert_eq!(decode(&body).unwrap(), deployment_json());
}

#[test]
fn empty_strings_are_dropped_and_other_zero_values_kept() {
    // Go writes non-pointer fields even when empty. Empty strings are dropped so that
    // defaulting sees them as unset; numeric zeros may be meaningful (pointer fields
    // such as `replicas: 0`) and stay.
    let metadata = Enc::new()
        .str(1, "ns1")
        .str(2, "")
        .int(7, 0)
        .msg(8, Enc::new());
    let body = envelope("v1", "Namespace", Enc::new().msg(1, metadata));
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "ns1", "generation": 0, "creationTimestamp": null}
        })
    );
}

#[test]
fn inline_structs_are_spliced_into_the_parent() {
    let probe = Enc::new()
        .msg(
            1,
            Enc::new().msg(
                2,
                Enc::new()
                    .str(1, "/healthz")
                    .msg(2, int_or_string_str("http")),
            ),
        )
        .int(4, 10);
    let container = Enc::new().str(1, "app").msg(10, probe).msg(
        19,
        Enc::new().msg(2, Enc::new().msg(1, Enc::new().str(1, "env"))),
    );
    let volume = Enc::new().str(1, "config").msg(
        2,
        Enc::new().msg(
            19,
            Enc::new().msg(1, Enc::new().str(1, "settings")).int(3, 420),
        ),
    );
    let pod = Enc::new().msg(2, Enc::new().msg(1, volume).msg(2, container));
    assert_eq!(
        decode(&envelope("v1", "Pod", pod)).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": {
                "volumes": [{"name": "config", "configMap": {"name": "settings", "defaultMode": 420}}],
                "containers": [{
                    "name": "app",
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                    "envFrom": [{"configMapRef": {"name": "env"}}]
                }]
            }
        })
    );
}

#[test]
fn repeated_scalars_packed_and_unpacked_agree() {
    let unpacked = Enc::new().int(4, 1000).int(4, -1);
    let mut packed_items = Enc::new();
    packed_items.raw_varint(1000);
    packed_items.raw_varint(-1i64 as u64);
    let packed = Enc::new().bytes(4, &packed_items.0);
    let expected = json!({"supplementalGroups": [1000, -1]});
    for security_context in [unpacked, packed] {
        let raw = Enc::new().msg(2, Enc::new().msg(14, security_context));
        let pod = decode(&envelope("v1", "Pod", raw)).unwrap();
        assert_eq!(pod["spec"]["securityContext"], expected);
    }
    // Strings are never packed: each occurrence is one element.
    let raw = Enc::new().msg(1, Enc::new().str(14, "a").str(14, "b"));
    let ns = decode(&envelope("v1", "Namespace", raw)).unwrap();
    assert_eq!(ns["metadata"]["finalizers"], json!(["a", "b"]));
}

#[test]
fn unknown_fields_are_skipped_and_repeats_follow_protobuf() {
    let raw = Enc::new()
        .msg(
            1,
            Enc::new()
                .str(1, "first")
                .str(15, "zzz-deprecated-cluster-name"),
        )
        .int(99, 7)
        .double(98, 1.5)
        .msg(1, Enc::new().str(3, "ns").str(1, "second"));
    let mut fixed32 = Enc::new();
    fixed32.key(97, 5);
    fixed32.0.extend_from_slice(&[1, 2, 3, 4]);
    let raw = Enc([raw.0, fixed32.0].concat());
    // The two metadata occurrences merge; within them the last name wins.
    assert_eq!(
        decode(&envelope("v1", "ConfigMap", raw)).unwrap(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "second", "namespace": "ns"}})
    );
}

#[test]
fn times_raw_json_and_lists() {
    let micro = Enc::new().int(1, JAN_2_2024).int(2, 123_456_789);
    let event = Enc::new()
        .msg(1, Enc::new().str(1, "ev"))
        .msg(6, time(0))
        .msg(10, micro)
        .int(8, 2);
    assert_eq!(
        decode(&envelope("v1", "Event", event)).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "ev"},
            "firstTimestamp": "1970-01-01T00:00:00Z",
            "eventTime": "2024-01-02T03:04:05.123456Z",
            "count": 2
        })
    );

    let managed = Enc::new()
        .str(1, "kubectl")
        .msg(4, time(JAN_2_2024))
        .str(6, "FieldsV1")
        .msg(7, Enc::new().bytes(1, br#"{"f:data":{}}"#));
    let raw = Enc::new().msg(1, Enc::new().msg(17, managed));
    let cm = decode(&envelope("v1", "ConfigMap", raw)).unwrap();
    assert_eq!(
        cm["metadata"]["managedFields"],
        json!([{"manager": "kubectl", "time": "2024-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}])
    );

    let verbs = Enc::new().str(1, "get").str(1, "list");
    let resource = Enc::new().str(1, "pods").bool(2, true).msg(4, verbs);
    assert_eq!(
        decode_message(
            &resource.0,
            schema(),
            "io.k8s.apimachinery.pkg.apis.meta.v1.APIResource"
        )
        .unwrap(),
        json!({"name": "pods", "namespaced": true, "verbs": ["get", "list"]})
    );
}

#[test]
fn raw_extensions_hold_json_or_a_nested_envelope() {
    let json_object = Enc::new()
        .str(1, "ADDED")
        .msg(2, Enc::new().bytes(1, br#"{"a":1}"#));
    assert_eq!(
        decode(&envelope("meta.k8s.io/v1", "WatchEvent", json_object)).unwrap(),
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "WatchEvent", "type": "ADDED", "object": {"a": 1}})
    );
    let nested = envelope("apps/v1", "Deployment", deployment());
    let event = Enc::new()
        .str(1, "MODIFIED")
        .msg(2, Enc::new().bytes(1, &nested));
    assert_eq!(
        decode(&envelope("meta.k8s.io/v1", "WatchEvent", event)).unwrap()["object"],
        deployment_json()
    );
    // An envelope whose raw is JSON.
    let unknown = Enc::new()
        .msg(1, Enc::new().str(1, "example.com/v1").str(2, "Widget"))
        .bytes(2, br#"{"spec":{"size":3}}"#)
        .str(4, "application/json");
    let body = [MAGIC.as_slice(), &unknown.0].concat();
    assert_eq!(
        decode(&body).unwrap(),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"size": 3}})
    );
}

#[test]
fn errors_are_reported_not_panicked() {
    assert_eq!(decode(b"{}"), Err(ProtoError::BadMagic));
    let body = envelope("v1", "Widget", Enc::new());
    assert_eq!(
        decode(&body),
        Err(ProtoError::UnknownType {
            api_version: "v1".into(),
            kind: "Widget".into()
        })
    );
    let mut truncated = envelope("apps/v1", "Deployment", deployment());
    truncated.truncate(truncated.len() - 3);
    assert!(matches!(
        decode(&truncated),
        Err(ProtoError::Truncated { .. })
    ));

    let bad_utf8 = envelope(
        "v1",
        "ConfigMap",
        Enc::new().msg(1, Enc::new().bytes(1, b"\xff")),
    );
    assert_eq!(
        decode(&bad_utf8),
        Err(ProtoError::InvalidUtf8 {
            field: "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.name".into()
        })
    );
    let wrong_wire = envelope("v1", "ConfigMap", Enc::new().int(1, 5));
    assert!(matches!(
        decode(&wrong_wire),
        Err(ProtoError::WireTypeMismatch { wire_type: 0, .. })
    ));

    let port = Enc::new().str(1, "p").msg(4, Enc::new().int(1, 2));
    let raw = Enc::new().msg(2, Enc::new().msg(1, port));
    assert_eq!(
        decode(&envelope("v1", "Service", raw)),
        Err(ProtoError::InvalidIntOrString(2))
    );

    let gzip = Enc::new()
        .msg(1, Enc::new().str(1, "v1").str(2, "Pod"))
        .str(3, "gzip");
    assert!(matches!(
        decode(&[MAGIC.as_slice(), &gzip.0].concat()),
        Err(ProtoError::UnsupportedEnvelope {
            what: "contentEncoding",
            ..
        })
    ));
    let bad_json = Enc::new().str(1, "ADDED").msg(2, Enc::new().bytes(1, b"{"));
    assert!(matches!(
        decode(&envelope("meta.k8s.io/v1", "WatchEvent", bad_json)),
        Err(ProtoError::InvalidJson { .. })
    ));
}

#[test]
fn nesting_is_bounded() {
    // Watch events wrapping watch events: each level is a nested envelope.
    let mut body = envelope("v1", "ConfigMap", Enc::new());
    for _ in 0..60 {
        body = envelope(
            "meta.k8s.io/v1",
            "WatchEvent",
            Enc::new().msg(2, Enc::new().bytes(1, &body)),
        );
    }
    assert_eq!(decode(&body), Err(ProtoError::TooDeep));
}

#[test]
fn malformed_tables_are_rejected() {
    let table = |defs: Value| ProtoSchema::from_json(&json!({"definitions": defs}));
    assert!(matches!(
        ProtoSchema::from_json(&json!({})),
        Err(ProtoError::InvalidSchema(_))
    ));
    let missing =
        json!({"A": {"fields": [{"tag": 1, "json": "b", "kind": "message", "type": "B"}]}});
    assert!(table(missing).is_err());
    let duplicate = json!({"A": {"fields": [
        {"tag": 1, "json": "a", "kind": "string"}, {"tag": 1, "json": "b", "kind": "string"}
    ]}});
    assert!(table(duplicate).is_err());
    assert!(table(json!({"A": {"fields": [{"tag": 1, "json": "a", "kind": "float"}]}})).is_err());
    let mislabeled = json!({"io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"special": "quantity"}});
    assert!(table(mislabeled).is_err());
    let inline_scalar = json!({"A": {"fields": [{"tag": 1, "inline": true, "kind": "string"}]}});
    assert!(table(inline_scalar).is_err());
    let ok = json!({"A": {"fields": [{"tag": 2, "json": "m", "kind": "map", "key": "string", "value": "int64"}]}});
    let schema = table(ok).unwrap();
    let entry = Enc::new().msg(2, Enc::new().str(1, "k").int(2, -5));
    assert_eq!(
        decode_message(&entry.0, &schema, "A").unwrap(),
        json!({"m": {"k": -5}})
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
        let _ = decode(&[MAGIC.as_slice(), &bytes].concat());
        for definition in [
            "io.k8s.api.apps.v1.Deployment",
            "io.k8s.api.core.v1.Pod",
            "io.k8s.api.core.v1.Secret",
            "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
        ] {
            let _ = decode_message(&bytes, schema(), definition);
        }
    }

    #[test]
    fn mangled_valid_bodies_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut body = envelope("apps/v1", "Deployment", deployment());
        for (at, byte) in edits {
            let i = at.index(body.len());
            body[i] = byte;
        }
        let _ = decode(&body);
        body.truncate(cut.index(body.len() + 1));
        let _ = decode(&body);
    }
}
