//! `metadata.managedFields`: one entry per manager, operation, (for updates) apiVersion
//! and subresource, each with the set of fields it owns and when it last changed them.

use serde_json::{Map, Value};

use super::fields_v1::{self, FieldsV1Error, write_go_json};
use super::raw::{self, Trie};
use super::set::FieldSet;

/// The bucket the oldest update entries are merged into beyond [`MAX_UPDATE_ENTRIES`].
pub const ANCIENT_CHANGES: &str = "ancient-changes";
/// How many `Update` entries an object keeps (upstream's `DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_ENTRIES: usize = 10;

/// `operation` of an entry: the write was an apply, or any other write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Create, update or a non-apply patch.
    Update,
}

impl Operation {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedEntry {
    /// The field manager.
    pub manager: String,
    /// Whether the fields were applied or written otherwise.
    pub operation: Operation,
    /// The version the fields are named in.
    pub api_version: String,
    /// `""` for the main resource, else e.g. `status`.
    pub subresource: String,
    /// When the entry's fields last changed, in whole seconds.
    pub time: Option<jiff::Timestamp>,
    /// The fields owned.
    pub fields: FieldSet,
}

/// Who owns an entry: entries are merged and replaced by this identity. An applier's
/// identity leaves out the version, so it keeps one entry across versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owner<'a> {
    pub manager: &'a str,
    pub operation: Operation,
    pub api_version: &'a str,
    pub subresource: &'a str,
}

impl ManagedEntry {
    #[cfg(test)]
    pub(crate) fn owner(&self) -> Owner<'_> {
        Owner {
            manager: &self.manager,
            operation: self.operation,
            api_version: &self.api_version,
            subresource: &self.subresource,
        }
    }
}

impl Owner<'_> {
    /// Upstream's manager identifier: the entry as JSON without fields and time (and
    /// without the version for appliers). Conflict messages sort managers by it.
    pub(crate) fn identifier(&self) -> String {
        let mut s = String::from("{\"manager\":");
        write_go_json(&mut s, &Value::String(self.manager.to_string()));
        s.push_str(",\"operation\":\"");
        s.push_str(self.operation.as_str());
        s.push('"');
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            s.push_str(",\"apiVersion\":");
            write_go_json(&mut s, &Value::String(self.api_version.to_string()));
        }
        if !self.subresource.is_empty() {
            s.push_str(",\"subresource\":");
            write_go_json(&mut s, &Value::String(self.subresource.to_string()));
        }
        s.push('}');
        s
    }
}

/// Errors from reading `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedFieldsError {
    /// `managedFields` or one of its entries has the wrong JSON type.
    #[error("managedFields entry {index}: {reason}")]
    Malformed {
        /// Position of the entry (0 when the list itself is wrong).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An entry's `fieldsV1` could not be read.
    #[error("managedFields entry {index}: {source}")]
    Fields {
        /// Position of the entry.
        index: usize,
        /// The decoding error.
        #[source]
        source: FieldsV1Error,
    },
}

/// One entry as the write paths hold it: its identity and time parsed, its fields left
/// as the stored `FieldsV1` trie, and the stored JSON kept for reuse while unchanged.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub subresource: String,
    pub time: Option<jiff::Timestamp>,
    /// The stored entry, `fieldsV1` (always an object) inside.
    item: Map<String, Value>,
    /// Something besides `fieldsV1` changed since the entry was read.
    dirty: bool,
}

impl Entry {
    /// A new entry owning `fields`.
    pub fn new(owner: &Owner<'_>, time: Option<jiff::Timestamp>, fields: Trie) -> Self {
        let mut item = Map::new();
        item.insert("fieldsV1".into(), Value::Object(fields));
        Entry {
            manager: owner.manager.to_string(),
            operation: owner.operation,
            api_version: owner.api_version.to_string(),
            subresource: owner.subresource.to_string(),
            time,
            item,
            dirty: true,
        }
    }

    pub fn is(&self, o: &Owner<'_>) -> bool {
        self.manager == o.manager
            && self.operation == o.operation
            && self.subresource == o.subresource
            && (self.operation == Operation::Apply || self.api_version == o.api_version)
    }

    pub fn owner(&self) -> Owner<'_> {
        Owner {
            manager: &self.manager,
            operation: self.operation,
            api_version: &self.api_version,
            subresource: &self.subresource,
        }
    }

    /// The owned fields, as stored.
    pub fn fields(&self) -> &Trie {
        match self.item.get("fieldsV1") {
            Some(Value::Object(m)) => m,
            _ => unreachable!("entries always hold a fieldsV1 object"),
        }
    }

    /// The owned fields, to change.
    pub fn fields_mut(&mut self) -> &mut Trie {
        match self.item.get_mut("fieldsV1") {
            Some(Value::Object(m)) => m,
            _ => unreachable!("entries always hold a fieldsV1 object"),
        }
    }

    /// The owned fields, decoded. Keys that do not parse are left out (stored entries are
    /// written by API servers, so there are none).
    pub fn set(&self) -> FieldSet {
        fields_v1::decode_lenient(self.fields())
    }

    pub fn set_fields(&mut self, fields: Trie) {
        *self.fields_mut() = fields;
    }

    /// Marks identity, version or time as changed, to be written out again.
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    fn unix_seconds(&self) -> i64 {
        self.time.map_or(0, |t| t.as_second())
    }

    /// The public, decoded view.
    pub fn view(&self) -> ManagedEntry {
        ManagedEntry {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: self.api_version.clone(),
            subresource: self.subresource.clone(),
            time: self.time,
            fields: self.set(),
        }
    }

    fn into_value(mut self) -> Value {
        if self.dirty {
            let m = &mut self.item;
            m.insert("manager".into(), Value::String(self.manager));
            m.insert(
                "operation".into(),
                Value::String(self.operation.as_str().into()),
            );
            m.insert("apiVersion".into(), Value::String(self.api_version));
            match self.time {
                Some(t) => m.insert("time".into(), Value::String(format_time(t))),
                None => m.remove("time"),
            };
            m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            if self.subresource.is_empty() {
                m.remove("subresource");
            } else {
                m.insert("subresource".into(), Value::String(self.subresource));
            }
        }
        Value::Object(self.item)
    }
}

/// Reads stored `metadata.managedFields` (absent or null: none), taking the JSON over.
/// With `trusted`, the tries are taken as written by an API server (canonical, and
/// decoded only if a write needs them); otherwise every trie is decoded, checked and
/// rewritten canonically, as for entries a client sends. Of entries with the same
/// identity the last wins, as upstream's decoding into a map does.
pub(crate) fn read(value: Option<Value>, trusted: bool) -> Result<Vec<Entry>, ManagedFieldsError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ManagedFieldsError::Malformed {
                index: 0,
                reason: "managedFields must be a list".into(),
            });
        }
    };
    let mut out: Vec<Entry> = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let entry = read_entry(index, item, trusted)?;
        match out.iter_mut().find(|e| e.is(&entry.owner())) {
            Some(existing) => *existing = entry,
            None => out.push(entry),
        }
    }
    Ok(out)
}

fn read_entry(index: usize, item: Value, trusted: bool) -> Result<Entry, ManagedFieldsError> {
    let bad = |reason: &str| ManagedFieldsError::Malformed {
        index,
        reason: reason.to_string(),
    };
    let Value::Object(mut m) = item else {
        return Err(bad("an entry must be an object"));
    };
    let text = |m: &Map<String, Value>, key: &str| -> Result<String, ManagedFieldsError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(&format!("{key} must be a string"))),
        }
    };
    let operation = match text(&m, "operation")?.as_str() {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return Err(bad("operation must be `Apply` or `Update`")),
    };
    let api_version = text(&m, "apiVersion")?;
    if api_version.is_empty() {
        return Err(bad("apiVersion must not be empty"));
    }
    match text(&m, "fieldsType")?.as_str() {
        "FieldsV1" => {}
        "" => return Err(bad("missing fieldsType")),
        other => return Err(bad(&format!("invalid fieldsType {other:?}"))),
    }
    let time = match text(&m, "time")?.as_str() {
        "" => None,
        t => Some(
            t.parse::<jiff::Timestamp>()
                .map_err(|_| bad("time must be RFC 3339"))?,
        ),
    };
    let mut dirty = false;
    match m.get("fieldsV1") {
        None | Some(Value::Null) => {
            m.insert("fieldsV1".into(), Value::Object(Map::new()));
            dirty = true;
        }
        Some(v) if trusted => {
            if !v.is_object() {
                return Err(ManagedFieldsError::Fields {
                    index,
                    source: FieldsV1Error::NotAnObject { key: String::new() },
                });
            }
        }
        Some(v) => {
            let set = fields_v1::decode(v)
                .map_err(|source| ManagedFieldsError::Fields { index, source })?;
            m.insert("fieldsV1".into(), fields_v1::encode(&set));
            dirty = true;
        }
    }
    Ok(Entry {
        manager: text(&m, "manager")?,
        operation,
        api_version,
        subresource: text(&m, "subresource")?,
        time,
        item: m,
        dirty,
    })
}

/// The entries of a `metadata.managedFields` value, decoded (absent or null: none).
pub fn decode(value: Option<&Value>) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    Ok(read(value.cloned(), false)?
        .iter()
        .map(Entry::view)
        .collect())
}

/// Whether a written `managedFields` asks for them to be cleared: `[]` or `[{}]`.
pub fn is_reset(value: Option<&Value>) -> bool {
    match value {
        Some(Value::Array(items)) => match items.as_slice() {
            [] => true,
            [Value::Object(m)] => m.is_empty(),
            _ => false,
        },
        _ => false,
    }
}

/// The `metadata.managedFields` value for `entries`, in upstream's order (appliers
/// first, then oldest first); `None` when there are none.
pub(crate) fn write(mut entries: Vec<Entry>) -> Option<Value> {
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|p, q| {
        p.operation
            .cmp(&q.operation)
            .then_with(|| p.unix_seconds().cmp(&q.unix_seconds()))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
    Some(Value::Array(
        entries.into_iter().map(Entry::into_value).collect(),
    ))
}

/// The `metadata.managedFields` value for decoded entries.
#[cfg(test)]
pub fn encode(entries: &[ManagedEntry]) -> Option<Value> {
    write(
        entries
            .iter()
            .map(|e| Entry::new(&e.owner(), e.time, trie(&e.fields)))
            .collect(),
    )
}

/// A set as a trie.
pub(crate) fn trie(set: &FieldSet) -> Trie {
    match fields_v1::encode(set) {
        Value::Object(m) => m,
        _ => unreachable!("FieldsV1 is an object"),
    }
}

/// RFC 3339 in UTC with whole seconds, as `metav1.Time` is written.
pub(crate) fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Keeps at most `max` update entries by merging the oldest, per version, into an
/// `ancient-changes` entry (upstream's `capManagers`).
pub(crate) fn cap_update_entries(entries: &mut Vec<Entry>, max: usize) {
    let count = entries
        .iter()
        .filter(|e| e.operation == Operation::Update)
        .count();
    if count <= max {
        return;
    }
    let mut order: Vec<(i64, String, usize)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.operation == Operation::Update)
        .map(|(i, e)| (e.unix_seconds(), e.owner().identifier(), i))
        .collect();
    order.sort();
    // Entries are only marked during the pass, so indexes stay valid; they go at the end.
    let mut gone = vec![false; entries.len()];
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut length = order.len();
    for (_, _, i) in order {
        if length <= max {
            break;
        }
        let version = entries[i].api_version.clone();
        let bucket_owner = Owner {
            manager: ANCIENT_CHANGES,
            operation: Operation::Update,
            api_version: &version,
            subresource: "",
        };
        if entries[i].is(&bucket_owner) {
            // Never merge the bucket into itself.
            continue;
        }
        let Some(&(_, first)) = first_of_version.iter().find(|(v, _)| *v == version) else {
            first_of_version.push((version, i));
            continue;
        };
        let bucket = match (0..entries.len()).find(|&b| !gone[b] && entries[b].is(&bucket_owner)) {
            Some(b) => b,
            None => {
                // The first entry of this version becomes the bucket.
                let e = &mut entries[first];
                e.manager = ANCIENT_CHANGES.to_string();
                e.subresource.clear();
                e.touch();
                first
            }
        };
        let merged = entries[i].fields().clone();
        let time = entries[i].time;
        let b = &mut entries[bucket];
        raw::union(b.fields_mut(), &merged);
        b.time = time;
        b.touch();
        gone[i] = true;
        length -= 1;
    }
    let mut idx = 0;
    entries.retain(|_| {
        let keep = !gone[idx];
        idx += 1;
        keep
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managed::path::Path;
    use serde_json::json;

    fn entry(manager: &str, op: Operation, secs: i64, field: &str) -> Entry {
        let owner = Owner {
            manager,
            operation: op,
            api_version: "apps/v1",
            subresource: "",
        };
        let fields: FieldSet = [Path::fields(&["spec", field])].into_iter().collect();
        Entry::new(
            &owner,
            Some(jiff::Timestamp::from_second(secs).unwrap()),
            trie(&fields),
        )
    }

    #[test]
    fn decode_encode_round_trip_in_upstream_order() {
        let value = json!([
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
             "time": "2024-05-01T10:00:05Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:replicas": {}}}, "subresource": "status"},
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
             "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}}
        ]);
        let entries = decode(Some(&value)).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].subresource, "status");
        let encoded = encode(&entries).unwrap();
        // Appliers sort first.
        assert_eq!(encoded[0]["manager"], "kubectl");
        assert_eq!(encoded[1], value[0]);
        assert_eq!(encoded[0], value[1]);
        assert!(encode(&[]).is_none());
    }

    #[test]
    fn decode_rejects_what_upstream_rejects() {
        let cases = [
            json!({"operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"}),
            json!({"operation": "Update", "fieldsType": "FieldsV1"}),
            json!({"operation": "Update", "apiVersion": "v1"}),
            json!({"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV2"}),
            json!({"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:a": 1}}),
            json!({"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "time": "yesterday"}),
        ];
        for c in cases {
            assert!(decode(Some(&json!([c]))).is_err(), "{c}");
        }
        assert!(decode(Some(&json!({}))).is_err());
        assert_eq!(decode(None).unwrap(), vec![]);
        assert!(is_reset(Some(&json!([]))) && is_reset(Some(&json!([{}]))));
        assert!(!is_reset(None) && !is_reset(Some(&json!([{}, {}]))));
    }

    #[test]
    fn identifiers_match_upstream_json() {
        let apply = Owner {
            manager: "kubectl",
            operation: Operation::Apply,
            api_version: "apps/v1",
            subresource: "",
        };
        assert_eq!(
            apply.identifier(),
            r#"{"manager":"kubectl","operation":"Apply"}"#
        );
        let update = Owner {
            manager: "a<b",
            operation: Operation::Update,
            api_version: "apps/v1",
            subresource: "status",
        };
        assert_eq!(
            update.identifier(),
            r#"{"manager":"a\u003cb","operation":"Update","apiVersion":"apps/v1","subresource":"status"}"#
        );
    }

    #[test]
    fn cap_merges_oldest_updates_into_ancient_changes() {
        let mut entries: Vec<Entry> = (0..12)
            .map(|i| {
                entry(
                    &format!("m{i:02}"),
                    Operation::Update,
                    100 + i,
                    &format!("f{i}"),
                )
            })
            .collect();
        entries.push(entry("applier", Operation::Apply, 1, "a"));
        cap_update_entries(&mut entries, MAX_UPDATE_ENTRIES);
        let updates: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.operation == Operation::Update)
            .collect();
        assert_eq!(updates.len(), MAX_UPDATE_ENTRIES);
        let bucket = updates
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES)
            .unwrap();
        // The three oldest went into the bucket, with the newest of their times.
        assert_eq!(bucket.set().len(), 3);
        assert_eq!(bucket.time.unwrap().as_second(), 102);
        assert!(entries.iter().any(|e| e.manager == "applier"));
        assert!(
            !entries
                .iter()
                .any(|e| ["m00", "m01", "m02"].contains(&e.manager.as_str()))
        );
        // Under the cap nothing changes.
        let before: Vec<ManagedEntry> = entries.iter().map(Entry::view).collect();
        cap_update_entries(&mut entries, MAX_UPDATE_ENTRIES);
        assert_eq!(entries.iter().map(Entry::view).collect::<Vec<_>>(), before);
    }
}
