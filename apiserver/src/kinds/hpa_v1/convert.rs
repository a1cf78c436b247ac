//! The `autoscaling/v1` ↔ `autoscaling/v2` HorizontalPodAutoscaler mapping, as
//! kube-apiserver's v1 conversion does it: one CPU utilization metric is
//! `targetCPUUtilizationPercentage` (and `currentCPUUtilizationPercentage` in status);
//! what v1 cannot express travels in annotations, so an object read and written back
//! through v1 keeps its other metrics, behavior, current metrics and conditions.
//!
//! The annotations hold what upstream writes: the other metrics and the current metrics
//! in the v1 (`v2beta1`-like) metric shapes, the conditions as they are, and the behavior
//! as upstream's internal type marshals (Go field names, `null` for unset fields). They
//! are written with upstream's field order; a nested label selector keeps its own.

use serde_json::{Map, Value, json};

/// Metrics other than the CPU utilization one, in v1 shapes.
pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// `status.currentMetrics`, all of them, in v1 shapes.
pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// `status.conditions`.
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// `spec.behavior`, as upstream's internal type marshals.
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// Every annotation the conversion writes: dropped from what v2 holds before they are
/// written anew, and lifted out again on the way back.
pub const ROUND_TRIP: [&str; 4] = [METRICS, CURRENT_METRICS, CONDITIONS, BEHAVIOR];

/// The annotations that carry status: a write of the main resource keeps the stored
/// ones, a write of `/status` takes the client's (as upstream's strategies keep the old
/// status, or the old spec).
pub const STATUS_ANNOTATIONS: &[&str] = &[CURRENT_METRICS, CONDITIONS];

/// A v2 object (the stored form) in its v1 form. `apiVersion` is the caller's.
pub fn to_v1(o: &mut Value) {
    let Some(obj) = o.as_object_mut() else {
        return;
    };
    let mut annotations = take_annotations(obj);
    for k in ROUND_TRIP {
        annotations.remove(k);
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let metrics = take_array(spec, "metrics");
        // The first CPU metric decides, as upstream's loop breaks there.
        if let Some(u) = metrics
            .iter()
            .find(|m| is_cpu(m, "resource"))
            .and_then(|m| m.pointer("/resource/target/averageUtilization"))
        {
            spec.insert("targetCPUUtilizationPercentage".into(), u.clone());
        }
        let others: Vec<J> = metrics
            .iter()
            .filter(|m| !is_cpu_utilization(m, "target"))
            .map(metric_spec_to_v1)
            .collect();
        if !others.is_empty() {
            annotations.insert(METRICS.into(), Value::from(J::Arr(others).text()));
        }
        if let Some(b) = spec.remove("behavior").filter(|b| !b.is_null()) {
            annotations.insert(BEHAVIOR.into(), Value::from(behavior_text(&b)));
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let current = take_array(status, "currentMetrics");
        // Every CPU utilization reading is looked at: the last one shows.
        if let Some(u) = current
            .iter()
            .filter(|m| is_cpu_utilization(m, "current"))
            .filter_map(|m| m.pointer("/resource/current/averageUtilization"))
            .next_back()
        {
            status.insert("currentCPUUtilizationPercentage".into(), u.clone());
        }
        if !current.is_empty() {
            let list = current.iter().map(metric_status_to_v1).collect();
            annotations.insert(CURRENT_METRICS.into(), Value::from(J::Arr(list).text()));
        }
        let conditions = take_array(status, "conditions");
        if !conditions.is_empty() {
            let list = conditions.iter().map(condition_to_v1).collect();
            annotations.insert(CONDITIONS.into(), Value::from(J::Arr(list).text()));
        }
    }
    put_annotations(obj, annotations);
}

/// A v1 object in its v2 form (the stored one). Annotations that do not parse are left
/// out, as upstream ignores them ([`annotation_errors`] reports them before a write).
pub fn to_v2(o: &mut Value) {
    let Some(obj) = o.as_object_mut() else {
        return;
    };
    let mut annotations = take_annotations(obj);
    let parsed = |k: &str| -> Option<Value> {
        annotations
            .get(k)
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str(s).ok())
    };
    let others = parsed(METRICS).and_then(as_list);
    let behavior = parsed(BEHAVIOR).and_then(|b| behavior_from_text(&b));
    let current = parsed(CURRENT_METRICS).and_then(as_list);
    let conditions = parsed(CONDITIONS).and_then(as_list);
    for k in ROUND_TRIP {
        annotations.remove(k);
    }

    let adds_to_spec = others.is_some() || behavior.is_some();
    if adds_to_spec && !obj.get("spec").is_some_and(Value::is_object) {
        obj.insert("spec".into(), Value::Object(Map::new()));
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let cpu = spec
            .remove("targetCPUUtilizationPercentage")
            .filter(|t| !t.is_null())
            .map(|t| {
                json!({"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": t}}})
            });
        // The annotation's metrics come first, the CPU one after them, as upstream.
        let mut metrics: Vec<Value> = others
            .unwrap_or_default()
            .iter()
            .map(metric_spec_to_v2)
            .collect();
        metrics.extend(cpu);
        if !metrics.is_empty() {
            spec.insert("metrics".into(), Value::Array(metrics));
        }
        if let Some(b) = behavior {
            spec.insert("behavior".into(), b);
        }
    }

    let has_status = obj.get("status").is_some_and(Value::is_object);
    let non_empty = |l: &Option<Vec<Value>>| l.as_ref().is_some_and(|l| !l.is_empty());
    if has_status || non_empty(&current) || non_empty(&conditions) {
        let status = obj
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(status) = status.as_object_mut() {
            let cpu = status
                .remove("currentCPUUtilizationPercentage")
                .filter(|c| !c.is_null())
                .map(|c| {
                    json!([{"type": "Resource", "resource": {"name": "cpu",
                        "current": {"averageUtilization": c}}}])
                });
            // The annotation holds every reading, the CPU one too.
            let current = match current {
                Some(list) => Some(Value::Array(list.iter().map(metric_status_to_v2).collect())),
                None => cpu,
            };
            if let Some(c) = current.filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
                status.insert("currentMetrics".into(), c);
            }
            if let Some(list) = conditions.filter(|l| !l.is_empty()) {
                let list = list.iter().map(without_nulls).collect();
                status.insert("conditions".into(), Value::Array(list));
            }
        }
    }
    put_annotations(obj, annotations);
}

/// The round-trip annotations of a v1 object that cannot be read: (annotation, why).
/// Upstream's conversion fails on these (the behavior aside, which it ignores).
pub fn annotation_errors(o: &Value) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let annotations = o.pointer("/metadata/annotations");
    for (key, what) in [
        (
            METRICS,
            "must be a JSON list of autoscaling/v1 metric specs",
        ),
        (
            CURRENT_METRICS,
            "must be a JSON list of autoscaling/v1 metric statuses",
        ),
        (CONDITIONS, "must be a JSON list of conditions"),
    ] {
        let Some(text) = annotations.and_then(|a| a.get(key)) else {
            continue;
        };
        let list = text
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .and_then(as_list);
        if !list.is_some_and(|l| l.iter().all(Value::is_object)) {
            out.push((key, what));
        }
    }
    out
}

/// A value written in a chosen field order (the serializer sorts object keys).
enum J {
    V(Value),
    Obj(Vec<(&'static str, J)>),
    Arr(Vec<J>),
}

impl J {
    fn text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            J::V(v) => out.push_str(&v.to_string()),
            J::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            J::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(*k).to_string());
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// Builds an object from fields, leaving out the `None` ones (Go's `omitempty`).
fn obj(fields: Vec<(&'static str, Option<J>)>) -> J {
    J::Obj(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect(),
    )
}

/// The non-null value at `pointer`.
fn at(v: &Value, pointer: &str) -> Option<Value> {
    v.pointer(pointer).filter(|x| !x.is_null()).cloned()
}

fn some(v: Option<Value>) -> Option<J> {
    v.map(J::V)
}

/// A field always written: its value, or Go's zero value `zero` when unset.
fn or_zero(v: Option<Value>, zero: Value) -> Option<J> {
    Some(J::V(v.unwrap_or(zero)))
}

/// A label selector, in `LabelSelector`'s field order.
fn selector(v: Option<Value>) -> Option<J> {
    let v = v?;
    let exprs = v
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(|l| {
            J::Arr(
                l.iter()
                    .map(|e| {
                        obj(vec![
                            ("key", or_zero(at(e, "/key"), json!(""))),
                            ("operator", or_zero(at(e, "/operator"), json!(""))),
                            ("values", some(at(e, "/values"))),
                        ])
                    })
                    .collect(),
            )
        });
    Some(obj(vec![
        ("matchLabels", some(at(&v, "/matchLabels"))),
        ("matchExpressions", exprs),
    ]))
}

/// An object reference (`CrossVersionObjectReference`), in its field order.
fn reference(v: Option<Value>) -> Option<J> {
    let v = v.unwrap_or_else(|| json!({}));
    Some(obj(vec![
        ("kind", or_zero(at(&v, "/kind"), json!(""))),
        ("name", or_zero(at(&v, "/name"), json!(""))),
        ("apiVersion", some(at(&v, "/apiVersion"))),
    ]))
}

/// Whether `m` is a `Resource` metric on `cpu`.
fn is_cpu(m: &Value, source: &str) -> bool {
    m.get("type").and_then(Value::as_str) == Some("Resource")
        && m.pointer(&format!("/{source}/name"))
            .and_then(Value::as_str)
            == Some("cpu")
}

/// Whether `m` is a `Resource` metric on `cpu` with an average utilization in its
/// `target` (a spec) or `current` (a status) part.
fn is_cpu_utilization(m: &Value, part: &str) -> bool {
    is_cpu(m, "resource") && at(m, &format!("/resource/{part}/averageUtilization")).is_some()
}

fn metric_spec_to_v1(m: &Value) -> J {
    let src = |k: &str| m.get(k).filter(|s| !s.is_null());
    let object = src("object").map(|s| {
        obj(vec![
            ("target", reference(at(s, "/describedObject"))),
            ("metricName", or_zero(at(s, "/metric/name"), json!(""))),
            ("targetValue", or_zero(at(s, "/target/value"), json!("0"))),
            ("selector", selector(at(s, "/metric/selector"))),
            ("averageValue", some(at(s, "/target/averageValue"))),
        ])
    });
    let pods = src("pods").map(|s| {
        obj(vec![
            ("metricName", or_zero(at(s, "/metric/name"), json!(""))),
            (
                "targetAverageValue",
                or_zero(at(s, "/target/averageValue"), json!("0")),
            ),
            ("selector", selector(at(s, "/metric/selector"))),
        ])
    });
    let resource = |s: &Value, container: bool| {
        let mut fields = vec![
            ("name", or_zero(at(s, "/name"), json!(""))),
            (
                "targetAverageUtilization",
                some(at(s, "/target/averageUtilization")),
            ),
            ("targetAverageValue", some(at(s, "/target/averageValue"))),
        ];
        if container {
            fields.push(("container", or_zero(at(s, "/container"), json!(""))));
        }
        obj(fields)
    };
    let external = src("external").map(|s| {
        obj(vec![
            ("metricName", or_zero(at(s, "/metric/name"), json!(""))),
            ("metricSelector", selector(at(s, "/metric/selector"))),
            ("targetValue", some(at(s, "/target/value"))),
            ("targetAverageValue", some(at(s, "/target/averageValue"))),
        ])
    });
    obj(vec![
        ("type", or_zero(at(m, "/type"), json!(""))),
        ("object", object),
        ("pods", pods),
        ("resource", src("resource").map(|s| resource(s, false))),
        (
            "containerResource",
            src("containerResource").map(|s| resource(s, true)),
        ),
        ("external", external),
    ])
}

fn metric_status_to_v1(m: &Value) -> J {
    let src = |k: &str| m.get(k).filter(|s| !s.is_null());
    let object = src("object").map(|s| {
        obj(vec![
            ("target", reference(at(s, "/describedObject"))),
            ("metricName", or_zero(at(s, "/metric/name"), json!(""))),
            ("currentValue", or_zero(at(s, "/current/value"), json!("0"))),
            ("selector", selector(at(s, "/metric/selector"))),
            ("averageValue", some(at(s, "/current/averageValue"))),
        ])
    });
    let pods = src("pods").map(|s| {
        obj(vec![
            ("metricName", or_zero(at(s, "/metric/name"), json!(""))),
            (
                "currentAverageValue",
                or_zero(at(s, "/current/averageValue"), json!("0")),
            ),
            ("selector", selector(at(s, "/metric/selector"))),
        ])
    });
    let resource = |s: &Value, container: bool| {
        let mut fields = vec![
            ("name", or_zero(at(s, "/name"), json!(""))),
            (
                "currentAverageUtilization",
                some(at(s, "/current/averageUtilization")),
            ),
            (
                "currentAverageValue",
                or_zero(at(s, "/current/averageValue"), json!("0")),
            ),
        ];
        if container {
            fields.push(("container", or_zero(at(s, "/container"), json!(""))));
        }
        obj(fields)
    };
    let external = src("external").map(|s| {
        obj(vec![
            ("metricName", or_zero(at(s, "/metric/name"), json!(""))),
            ("metricSelector", selector(at(s, "/metric/selector"))),
            ("currentValue", or_zero(at(s, "/current/value"), json!("0"))),
            ("currentAverageValue", some(at(s, "/current/averageValue"))),
        ])
    });
    obj(vec![
        ("type", or_zero(at(m, "/type"), json!(""))),
        ("object", object),
        ("pods", pods),
        ("resource", src("resource").map(|s| resource(s, false))),
        (
            "containerResource",
            src("containerResource").map(|s| resource(s, true)),
        ),
        ("external", external),
    ])
}

fn condition_to_v1(c: &Value) -> J {
    obj(vec![
        ("type", or_zero(at(c, "/type"), json!(""))),
        ("status", or_zero(at(c, "/status"), json!(""))),
        // A struct in Go: never left out, `null` when unset.
        (
            "lastTransitionTime",
            or_zero(at(c, "/lastTransitionTime"), Value::Null),
        ),
        ("reason", some(at(c, "/reason").filter(|r| r != ""))),
        ("message", some(at(c, "/message").filter(|m| m != ""))),
    ])
}

/// `spec.behavior` as upstream's internal type marshals: Go field names, every field
/// present, `null` where unset.
fn behavior_text(b: &Value) -> String {
    let rules = |dir: &str| -> J {
        let Some(r) = b.get(dir).filter(|r| r.is_object()) else {
            return J::V(Value::Null);
        };
        let policies = r.get("policies").and_then(Value::as_array).map(|l| {
            J::Arr(
                l.iter()
                    .map(|p| {
                        obj(vec![
                            ("Type", or_zero(at(p, "/type"), json!(""))),
                            ("Value", or_zero(at(p, "/value"), json!(0))),
                            ("PeriodSeconds", or_zero(at(p, "/periodSeconds"), json!(0))),
                        ])
                    })
                    .collect(),
            )
        });
        let null = || Value::Null;
        obj(vec![
            (
                "StabilizationWindowSeconds",
                or_zero(at(r, "/stabilizationWindowSeconds"), null()),
            ),
            ("SelectPolicy", or_zero(at(r, "/selectPolicy"), null())),
            ("Policies", Some(policies.unwrap_or(J::V(null())))),
            ("Tolerance", or_zero(at(r, "/tolerance"), null())),
        ])
    };
    obj(vec![
        ("ScaleUp", Some(rules("scaleUp"))),
        ("ScaleDown", Some(rules("scaleDown"))),
    ])
    .text()
}

/// A field of an object read from an annotation, its name matched as Go's decoder
/// matches it (exactly, else without regard to case); `null` counts as unset.
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let m = v.as_object()?;
    m.get(name)
        .or_else(|| {
            m.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .filter(|x| !x.is_null())
}

/// `field(v, name)` cloned into `out` as `key`, when set.
fn put(out: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(v) = v {
        out.insert(key.into(), v.clone());
    }
}

/// The behavior an annotation describes, in v2 form; `None` when it sets neither
/// direction (upstream then keeps no behavior).
fn behavior_from_text(b: &Value) -> Option<Value> {
    let rules = |dir: &str| -> Option<Value> {
        let r = field(b, dir)?;
        r.as_object()?;
        let mut out = Map::new();
        put(
            &mut out,
            "stabilizationWindowSeconds",
            field(r, "StabilizationWindowSeconds"),
        );
        put(&mut out, "selectPolicy", field(r, "SelectPolicy"));
        if let Some(l) = field(r, "Policies").and_then(Value::as_array) {
            let policies = l
                .iter()
                .map(|p| {
                    let mut q = Map::new();
                    put(&mut q, "type", field(p, "Type"));
                    put(&mut q, "value", field(p, "Value"));
                    put(&mut q, "periodSeconds", field(p, "PeriodSeconds"));
                    Value::Object(q)
                })
                .collect();
            out.insert("policies".into(), Value::Array(policies));
        }
        put(&mut out, "tolerance", field(r, "Tolerance"));
        Some(Value::Object(out))
    };
    let mut out = Map::new();
    put(&mut out, "scaleUp", rules("ScaleUp").as_ref());
    put(&mut out, "scaleDown", rules("ScaleDown").as_ref());
    (!out.is_empty()).then_some(Value::Object(out))
}

/// A metric identifier from a v1 source's name and selector.
fn identifier(name: Option<&Value>, selector: Option<&Value>) -> Value {
    let mut out = Map::new();
    out.insert(
        "name".into(),
        name.cloned().unwrap_or_else(|| Value::from("")),
    );
    put(&mut out, "selector", selector);
    Value::Object(out)
}

fn metric_spec_to_v2(m: &Value) -> Value {
    let mut out = Map::new();
    put(&mut out, "type", field(m, "type"));
    if let Some(s) = field(m, "object") {
        // Without an average value the object's value is the target, as upstream says.
        let average = field(s, "averageValue");
        let mut target = Map::new();
        let ty = if average.is_some() {
            "AverageValue"
        } else {
            "Value"
        };
        target.insert("type".into(), ty.into());
        let value = field(s, "targetValue").cloned().unwrap_or(json!("0"));
        target.insert("value".into(), value);
        put(&mut target, "averageValue", average);
        let described = field(s, "target").cloned().unwrap_or_else(|| json!({}));
        out.insert(
            "object".into(),
            json!({"describedObject": without_nulls(&described),
                "metric": identifier(field(s, "metricName"), field(s, "selector")),
                "target": target}),
        );
    }
    if let Some(s) = field(m, "pods") {
        let average = field(s, "targetAverageValue")
            .cloned()
            .unwrap_or(json!("0"));
        out.insert(
            "pods".into(),
            json!({"metric": identifier(field(s, "metricName"), field(s, "selector")),
                "target": {"type": "AverageValue", "averageValue": average}}),
        );
    }
    for key in ["resource", "containerResource"] {
        let Some(s) = field(m, key) else {
            continue;
        };
        let utilization = field(s, "targetAverageUtilization");
        let mut target = Map::new();
        let ty = if utilization.is_some() {
            "Utilization"
        } else {
            "AverageValue"
        };
        target.insert("type".into(), ty.into());
        put(&mut target, "averageUtilization", utilization);
        put(&mut target, "averageValue", field(s, "targetAverageValue"));
        let mut src = Map::new();
        src.insert(
            "name".into(),
            field(s, "name").cloned().unwrap_or_else(|| json!("")),
        );
        if key == "containerResource" {
            src.insert(
                "container".into(),
                field(s, "container").cloned().unwrap_or_else(|| json!("")),
            );
        }
        src.insert("target".into(), Value::Object(target));
        out.insert(key.into(), Value::Object(src));
    }
    if let Some(s) = field(m, "external") {
        let value = field(s, "targetValue");
        let mut target = Map::new();
        let ty = if value.is_some() {
            "Value"
        } else {
            "AverageValue"
        };
        target.insert("type".into(), ty.into());
        put(&mut target, "value", value);
        put(&mut target, "averageValue", field(s, "targetAverageValue"));
        out.insert(
            "external".into(),
            json!({"metric": identifier(field(s, "metricName"), field(s, "metricSelector")),
                "target": target}),
        );
    }
    Value::Object(out)
}

fn metric_status_to_v2(m: &Value) -> Value {
    let mut out = Map::new();
    put(&mut out, "type", field(m, "type"));
    let zero = || json!("0");
    if let Some(s) = field(m, "object") {
        let mut current = Map::new();
        current.insert(
            "value".into(),
            field(s, "currentValue").cloned().unwrap_or_else(zero),
        );
        put(&mut current, "averageValue", field(s, "averageValue"));
        let described = field(s, "target").cloned().unwrap_or_else(|| json!({}));
        out.insert(
            "object".into(),
            json!({"metric": identifier(field(s, "metricName"), field(s, "selector")),
                "current": current,
                "describedObject": without_nulls(&described)}),
        );
    }
    if let Some(s) = field(m, "pods") {
        let average = field(s, "currentAverageValue")
            .cloned()
            .unwrap_or_else(zero);
        out.insert(
            "pods".into(),
            json!({"metric": identifier(field(s, "metricName"), field(s, "selector")),
                "current": {"averageValue": average}}),
        );
    }
    for key in ["resource", "containerResource"] {
        let Some(s) = field(m, key) else {
            continue;
        };
        let mut current = Map::new();
        current.insert(
            "averageValue".into(),
            field(s, "currentAverageValue")
                .cloned()
                .unwrap_or_else(zero),
        );
        put(
            &mut current,
            "averageUtilization",
            field(s, "currentAverageUtilization"),
        );
        let mut src = Map::new();
        src.insert(
            "name".into(),
            field(s, "name").cloned().unwrap_or_else(|| json!("")),
        );
        if key == "containerResource" {
            src.insert(
                "container".into(),
                field(s, "container").cloned().unwrap_or_else(|| json!("")),
            );
        }
        src.insert("current".into(), Value::Object(current));
        out.insert(key.into(), Value::Object(src));
    }
    if let Some(s) = field(m, "external") {
        let mut current = Map::new();
        current.insert(
            "value".into(),
            field(s, "currentValue").cloned().unwrap_or_else(zero),
        );
        put(
            &mut current,
            "averageValue",
            field(s, "currentAverageValue"),
        );
        out.insert(
            "external".into(),
            json!({"metric": identifier(field(s, "metricName"), field(s, "metricSelector")),
                "current": current}),
        );
    }
    Value::Object(out)
}

/// An object without its `null` fields (Go's zero values read back as unset).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), x.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn as_list(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(a) => Some(a),
        // Go reads `null` as an empty list.
        Value::Null => Some(Vec::new()),
        _ => None,
    }
}

fn take_array(m: &mut Map<String, Value>, key: &str) -> Vec<Value> {
    match m.remove(key) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    }
}

fn take_annotations(obj: &mut Map<String, Value>) -> Map<String, Value> {
    obj.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("annotations"))
        .and_then(|a| match a {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default()
}

fn put_annotations(obj: &mut Map<String, Value>, annotations: Map<String, Value>) {
    if annotations.is_empty() {
        return;
    }
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
