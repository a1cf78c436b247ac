//! Small helpers the loops share: stable hashing and name suffixes, timestamps, conditions,
//! owner references, resource quantities and address arithmetic.

use std::net::{IpAddr, Ipv4Addr};

use serde_json::{Map, Value, json};

use super::SimError;

pub(crate) use meridian_runtime::sync::lock;

/// Kubernetes' `generateName` alphabet (no vowels, no look-alikes).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// 32-bit FNV-1a: the hash Kubernetes uses for `pod-template-hash`.
pub(crate) fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Writes `v` with object keys sorted, so the hash of a value does not depend on key order.
fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            out.push(b'{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::from(k.as_str()).to_string().as_bytes());
                out.push(b':');
                write_canonical(&m[k], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// A stable hash of a JSON value.
pub(crate) fn hash_value(v: &Value) -> u32 {
    let mut buf = Vec::new();
    write_canonical(v, &mut buf);
    fnv32a(&buf)
}

/// Kubernetes' `SafeEncodeString` of the decimal hash: e.g. `5d59d67564`.
pub(crate) fn safe_encode_hash(h: u32) -> String {
    h.to_string()
        .bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// Five characters from the safe alphabet derived from `seed` (a stable name suffix).
pub(crate) fn suffix5(seed: &str) -> String {
    let mut h = u64::from(fnv32a(seed.as_bytes())) | (u64::from(fnv32a(&[seed.len() as u8])) << 32);
    // Mix so nearby seeds ("rs#1", "rs#2") do not share prefixes.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    let n = SAFE_ALPHABET.len() as u64;
    (0..5)
        .map(|i| SAFE_ALPHABET[((h >> (i * 12)) % n) as usize] as char)
        .collect()
}

/// RFC 3339 at second precision, as Kubernetes writes timestamps.
pub(crate) fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses a Kubernetes timestamp.
pub(crate) fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

/// A string at a JSON pointer.
pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// An integer at a JSON pointer.
pub(crate) fn i64_at(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// The condition of type `ty` in `status.conditions`.
pub(crate) fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

/// Whether condition `ty` has status `True`.
pub(crate) fn condition_true(obj: &Value, ty: &str) -> bool {
    condition(obj, ty)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

/// A condition with `lastTransitionTime` (and, when `with_update`, `lastUpdateTime`) carried
/// over from `old` unless its status (resp. anything) changed.
pub(crate) fn merge_condition(
    old: Option<&Value>,
    ty: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: &str,
    with_update: bool,
) -> Value {
    let mut c = Map::new();
    c.insert("type".into(), Value::from(ty));
    c.insert("status".into(), Value::from(status));
    if let Some(r) = reason {
        c.insert("reason".into(), Value::from(r));
    }
    if let Some(m) = message {
        c.insert("message".into(), Value::from(m));
    }
    let old_str = |f: &str| old.and_then(|o| o.get(f)).and_then(Value::as_str);
    let same_status = old_str("status") == Some(status);
    let transition = match old_str("lastTransitionTime") {
        Some(t) if same_status => t.to_string(),
        _ => now.to_string(),
    };
    c.insert("lastTransitionTime".into(), Value::from(transition));
    if with_update {
        let unchanged = same_status && old_str("reason") == reason && old_str("message") == message;
        let update = match old_str("lastUpdateTime") {
            Some(t) if unchanged => t.to_string(),
            _ => now.to_string(),
        };
        c.insert("lastUpdateTime".into(), Value::from(update));
    }
    Value::Object(c)
}

/// The controller owner reference of `obj` if it has the given kind: its name.
pub(crate) fn controller_of<'a>(obj: &'a Value, kind: &str) -> Option<(&'a str, &'a str)> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some(kind)
        })
        .and_then(|r| Some((r.get("name")?.as_str()?, r.get("uid")?.as_str()?)))
}

/// The metadata of a child an owner makes from its `template` (a pod template): `name`, the
/// owner's namespace, `labels`, the template's annotations and a controller reference to the
/// owner (`api_version`, `kind`).
pub(crate) fn child_metadata(
    owner: &Value,
    api_version: &str,
    kind: &str,
    name: &str,
    template: &Value,
    labels: serde_json::Map<String, Value>,
) -> serde_json::Map<String, Value> {
    let mut meta = serde_json::Map::new();
    meta.insert("name".into(), Value::from(name));
    meta.insert(
        "namespace".into(),
        Value::from(str_at(owner, "/metadata/namespace").unwrap_or("")),
    );
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = template.pointer("/metadata/annotations") {
        meta.insert("annotations".into(), a.clone());
    }
    meta.insert(
        "ownerReferences".into(),
        Value::Array(vec![owner_ref(api_version, kind, owner)]),
    );
    meta
}

/// A controller owner reference to `owner`.
pub(crate) fn owner_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": str_at(owner, "/metadata/name").unwrap_or(""),
        "uid": str_at(owner, "/metadata/uid").unwrap_or(""),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Whether the object carries a `deletionTimestamp`.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// CPU in millicores from a quantity value (absent or malformed: zero).
pub(crate) fn cpu_milli(v: Option<&Value>) -> i64 {
    quantity(v, |q| q.as_milli())
}

/// Memory (or any count) in whole units, rounded up.
pub(crate) fn whole_units(v: Option<&Value>) -> i64 {
    quantity(v, |q| q.as_value_ceil())
}

fn quantity(v: Option<&Value>, f: impl Fn(&apimachinery::quantity::Quantity) -> i128) -> i64 {
    let q = match v {
        Some(Value::String(s)) => apimachinery::quantity::parse_quantity(s).ok(),
        Some(Value::Number(n)) => apimachinery::quantity::parse_quantity(&n.to_string()).ok(),
        _ => None,
    };
    q.map_or(0, |q| i64::try_from(f(&q)).unwrap_or(i64::MAX))
}

/// IPv4 address plus an offset.
pub(crate) fn ipv4_add(base: Ipv4Addr, offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base).wrapping_add(offset))
}

/// Most addresses one CIDR in an address pool may contribute (a /16 of IPv4).
const MAX_POOL_CIDR: u32 = 65_536;

/// Parses LoadBalancer pool entries: single addresses or IPv4 CIDRs (whose usable host
/// addresses are added in order).
pub fn parse_address_pool<S: AsRef<str>>(entries: &[S]) -> Result<Vec<IpAddr>, SimError> {
    let mut out = Vec::new();
    for e in entries {
        let e = e.as_ref().trim();
        match e.split_once('/') {
            None => out.push(
                e.parse::<IpAddr>()
                    .map_err(|err| SimError::Invalid(format!("pool address {e:?}: {err}")))?,
            ),
            Some((addr, bits)) => {
                let base: Ipv4Addr = addr
                    .parse()
                    .map_err(|err| SimError::Invalid(format!("pool CIDR {e:?}: {err}")))?;
                let bits: u32 = bits
                    .parse()
                    .ok()
                    .filter(|b| *b <= 32)
                    .ok_or_else(|| SimError::Invalid(format!("pool CIDR {e:?}: bad prefix")))?;
                let size = 1u64 << (32 - bits);
                let mask = if bits == 0 {
                    0
                } else {
                    u32::MAX << (32 - bits)
                };
                let net = Ipv4Addr::from(u32::from(base) & mask);
                // Network and broadcast addresses are not usable for /30 and larger.
                let (first, count) = if size >= 4 { (1, size - 2) } else { (0, size) };
                let count = u32::try_from(count).unwrap_or(u32::MAX).min(MAX_POOL_CIDR);
                out.extend((0..count).map(|i| IpAddr::V4(ipv4_add(net, first + i))));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_ignore_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":2,"d":[1,2]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"d":[1,2],"c":2},"a":1}"#).unwrap();
        assert_eq!(hash_value(&a), hash_value(&b));
        assert_ne!(hash_value(&a), hash_value(&json!({"a": 2})));
        let s = safe_encode_hash(hash_value(&a));
        assert!(!s.is_empty() && s.len() <= 10);
    }

    #[test]
    fn suffixes_are_stable_and_safe() {
        assert_eq!(suffix5("web#0"), suffix5("web#0"));
        assert_ne!(suffix5("web#0"), suffix5("web#1"));
        assert!(suffix5("x").bytes().all(|b| SAFE_ALPHABET.contains(&b)));
    }

    #[test]
    fn pools_expand_cidrs() {
        let p = parse_address_pool(&["192.0.2.10", "198.51.100.0/30"]).unwrap();
        let s: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert_eq!(s, ["192.0.2.10", "198.51.100.1", "198.51.100.2"]);
        assert!(parse_address_pool(&["nope"]).is_err());
    }

    #[test]
    fn conditions_keep_times_until_they_change() {
        let old = json!({"type": "Ready", "status": "True", "lastTransitionTime": "t0", "lastUpdateTime": "t0"});
        let same = merge_condition(Some(&old), "Ready", "True", None, None, "t1", true);
        assert_eq!(same["lastTransitionTime"], "t0");
        assert_eq!(same["lastUpdateTime"], "t0");
        let flip = merge_condition(Some(&old), "Ready", "False", None, None, "t1", true);
        assert_eq!(flip["lastTransitionTime"], "t1");
    }

    #[test]
    fn quantities() {
        assert_eq!(cpu_milli(Some(&json!("250m"))), 250);
        assert_eq!(cpu_milli(Some(&json!(2))), 2000);
        assert_eq!(whole_units(Some(&json!("1Gi"))), 1 << 30);
        assert_eq!(whole_units(None), 0);
    }
}
