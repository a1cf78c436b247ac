//! Property tests of server-side apply over generated Deployments: sequences of applies
//! (forced or not) and updates by a few managers, checked after every step.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{Server, deployment_type};
use crate::managed::model::{Shape, TypeId, TypeModel};
use crate::managed::path::{PathElement, values_equal};
use crate::managed::typed;
use crate::managed::updater::NEVER_OWNED;

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(items)
}

fn labels() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(pick(&["a", "b", "c"]), pick(&["x", "y"]), 1..3).prop_map(|m| {
        Value::Object(
            m.into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect(),
        )
    })
}

fn container() -> impl Strategy<Value = Value> {
    (
        pick(&["a", "b", "c"]),
        proptest::option::of(pick(&["i1", "i2"])),
        proptest::collection::btree_map(
            (pick(&[80, 81]), proptest::option::of(pick(&["TCP", "UDP"]))),
            Just(()),
            0..3,
        ),
        proptest::collection::btree_map(pick(&["e1", "e2"]), pick(&["v1", "v2"]), 0..2),
    )
        .prop_map(|(name, image, ports, env)| {
            let mut c = Map::new();
            c.insert("name".into(), json!(name));
            if let Some(image) = image {
                c.insert("image".into(), json!(image));
            }
            // Ports are keyed by port and protocol, TCP when left out: keep keys unique.
            let mut seen = Vec::new();
            let ports: Vec<Value> = ports
                .into_keys()
                .filter(|(port, proto)| {
                    let key = (*port, proto.unwrap_or("TCP"));
                    let fresh = !seen.contains(&key);
                    seen.push(key);
                    fresh
                })
                .map(|(port, proto)| match proto {
                    Some(p) => json!({"containerPort": port, "protocol": p}),
                    None => json!({"containerPort": port}),
                })
                .collect();
            if !ports.is_empty() {
                c.insert("ports".into(), Value::Array(ports));
            }
            if !env.is_empty() {
                let env: Vec<Value> = env
                    .into_iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect();
                c.insert("env".into(), Value::Array(env));
            }
            Value::Object(c)
        })
}

/// A Deployment configuration setting some of: labels, finalizers, replicas, paused,
/// the (atomic) selector, and containers with ports and env. Maps and lists are never
/// empty: an applier that sets `labels: {}` owns `.metadata.labels` while pruning may
/// leave none (upstream stores null there, which a typed object reads as absent).
fn config() -> impl Strategy<Value = Value> {
    (
        proptest::option::of(labels()),
        proptest::collection::btree_set(pick(&["f/1", "f/2", "f/3"]), 0..3),
        proptest::option::of(1..4u32),
        proptest::option::of(any::<bool>()),
        proptest::option::of(pick(&["x", "y"])),
        proptest::collection::btree_map(pick(&["a", "b", "c"]), container(), 0..3),
    )
        .prop_map(|(labels, finalizers, replicas, paused, selector, containers)| {
            let mut meta = Map::new();
            meta.insert("name".into(), json!("d"));
            if let Some(l) = labels {
                meta.insert("labels".into(), l);
            }
            if !finalizers.is_empty() {
                meta.insert("finalizers".into(), json!(finalizers));
            }
            let mut spec = Map::new();
            if let Some(r) = replicas {
                spec.insert("replicas".into(), json!(r));
            }
            if let Some(p) = paused {
                spec.insert("paused".into(), json!(p));
            }
            if let Some(s) = selector {
                spec.insert("selector".into(), json!({"matchLabels": {"app": s}}));
            }
            if !containers.is_empty() {
                // Keyed by name: rename each to its map key so names stay unique.
                let containers: Vec<Value> = containers
                    .into_iter()
                    .map(|(name, mut c)| {
                        c["name"] = json!(name);
                        c
                    })
                    .collect();
                spec.insert("template".into(), json!({"spec": {"containers": containers}}));
            }
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec})
        })
}

#[derive(Debug, Clone)]
enum Op {
    Apply {
        manager: &'static str,
        config: Value,
        force: bool,
    },
    /// A write of the live object with `config` merged in and, when `drop_spec`, its
    /// spec replaced by the configuration's.
    Update {
        manager: &'static str,
        config: Value,
        drop_spec: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (pick(&["m1", "m2", "m3"]), config(), any::<bool>()).prop_map(
            |(manager, config, force)| Op::Apply {
                manager,
                config,
                force
            }
        ),
        (pick(&["u1", "u2"]), config(), any::<bool>()).prop_map(|(manager, config, drop_spec)| {
            Op::Update {
                manager,
                config,
                drop_spec,
            }
        }),
    ]
}

/// Runs `op` on the server.
fn run(s: &mut Server, op: &Op) {
    match op {
        Op::Apply {
            manager,
            config,
            force,
        } => {
            // Conflicts are a legal outcome; the harness checks they leave no trace.
            let _ = s.try_apply(manager, config, *force);
        }
        Op::Update {
            manager,
            config,
            drop_spec,
        } => {
            if s.obj.is_none() {
                let mut new = config.clone();
                new["metadata"]["name"] = json!("d");
                s.create(manager, new);
                return;
            }
            let ty = deployment_type();
            let config = config.clone();
            let drop_spec = *drop_spec;
            s.update(manager, move |live| {
                let mut merged =
                    typed::merge(&ty.model, ty.root, Some(live), Some(&config)).unwrap();
                if drop_spec {
                    merged["spec"] = config["spec"].clone();
                }
                *live = merged;
            });
        }
    }
}

/// Whether `path` names something in `v`: a field set, a list item with that key or
/// value, an index in range.
fn resolves(model: &TypeModel, ty: TypeId, v: &Value, path: &[PathElement]) -> bool {
    let Some((pe, rest)) = path.split_first() else {
        return true;
    };
    match (pe, model.shape(ty, v)) {
        (PathElement::Field(name), Shape::Map(t, Some(m))) => m
            .get(name.as_ref())
            .is_some_and(|child| resolves(model, t.type_of(name), child, rest)),
        (PathElement::Index(i), Shape::List(t, Some(items))) => items
            .get(*i as usize)
            .is_some_and(|child| resolves(model, t.elem, child, rest)),
        (pe, Shape::List(t, Some(items))) => items.iter().any(|item| {
            typed::item_element(model, t, item).is_ok_and(|named| &named == pe)
                && resolves(model, t.elem, item, rest)
        }),
        _ => false,
    }
}

fn check_owned_fields_exist(s: &Server) -> Result<(), TestCaseError> {
    let Some(obj) = &s.obj else { return Ok(()) };
    let ty = deployment_type();
    for e in s.entries() {
        for p in e.fields.paths() {
            prop_assert!(
                resolves(&ty.model, ty.root, obj, &p.0),
                "{} owns {p}, absent from {obj}",
                e.manager
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Every field any manager owns is in the object.
    #[test]
    fn managers_own_only_fields_that_exist(ops in proptest::collection::vec(op(), 1..7)) {
        let mut s = Server::deployments();
        for op in &ops {
            run(&mut s, op);
            check_owned_fields_exist(&s)?;
        }
    }

    /// Applying a configuration again right after it succeeded changes nothing at all.
    #[test]
    fn reapplying_is_a_no_op(ops in proptest::collection::vec(op(), 0..5), last in config(), m in pick(&["m1", "m2"])) {
        let mut s = Server::deployments();
        for op in &ops {
            run(&mut s, op);
        }
        if s.try_apply(m, &last, true).is_ok() {
            let before = s.obj.clone();
            let again = s.try_apply(m, &last, false).unwrap();
            prop_assert!(!again.changed);
            prop_assert_eq!(&s.obj, &before);
        }
    }

    /// An update never conflicts: its writer owns every field it changed, and no one else
    /// owns any of them afterwards.
    #[test]
    fn updates_take_what_they_change(ops in proptest::collection::vec(op(), 1..5), config in config(), u in pick(&["u1", "u2"])) {
        let mut s = Server::deployments();
        for op in &ops {
            run(&mut s, op);
        }
        let Some(live) = s.obj.clone() else { return Ok(()) };
        if live["metadata"].get("managedFields").is_none() {
            // Untracked objects stay untracked through updates.
            return Ok(());
        }
        run(&mut s, &Op::Update { manager: u, config, drop_spec: false });
        let ty = deployment_type();
        let new = s.obj().clone();
        let diff = typed::compare(&ty.model, ty.root, Some(&live), Some(&new), false);
        let changed = diff.modified.union(&diff.added);
        for e in s.entries() {
            for p in changed.paths() {
                if NEVER_OWNED.has(&p.0) {
                    continue;
                }
                if e.manager == u {
                    prop_assert!(e.fields.has(&p.0), "{u} should own {p}");
                } else {
                    prop_assert!(!e.fields.has(&p.0), "{} still owns {p}, changed by {u}", e.manager);
                }
            }
        }
        // Equal objects never differ (the reverse fails only for reordered items).
        if values_equal(&strip(&live), &strip(&new)) {
            prop_assert!(diff.modified.is_empty() && diff.added.is_empty() && diff.removed.is_empty());
        }
    }
}

proptest! {
    /// The fields an apply configuration sets, written straight as a trie, are the fields
    /// the generic walk finds.
    #[test]
    fn applied_fields_match_the_generic_walk(config in config()) {
        let ty = deployment_type();
        let direct = typed::applied_fields(&ty.model, ty.root, &config).unwrap();
        let generic = crate::managed::entries::trie(&typed::to_set(&ty.model, ty.root, &config));
        prop_assert_eq!(direct, generic);
    }
}

proptest! {
    /// The fields a create sets, written straight as a trie, are what the generic
    /// comparison with no previous object finds added or modified.
    #[test]
    fn created_fields_match_the_generic_compare(object in config()) {
        let ty = deployment_type();
        let direct = typed::created_fields(&ty.model, ty.root, &object);
        let diff = typed::compare(&ty.model, ty.root, None, Some(&object), true);
        prop_assert!(diff.removed.is_empty());
        let generic = crate::managed::entries::trie(&diff.modified.union(&diff.added));
        prop_assert_eq!(direct, generic);
    }
}

/// `old` with the parts `mask` picks taken from `other` (labels, finalizers, replicas,
/// paused, selector, containers), and, with `dup`, its first container named twice.
fn blend(old: &Value, other: &Value, mask: u8, dup: bool) -> Value {
    let parts: [&[&str]; 6] = [
        &["metadata", "labels"],
        &["metadata", "finalizers"],
        &["spec", "replicas"],
        &["spec", "paused"],
        &["spec", "selector"],
        &["spec", "template"],
    ];
    let mut out = old.clone();
    for (i, path) in parts.iter().enumerate() {
        if mask & (1 << i) == 0 {
            continue;
        }
        let (parent, key) = (path[0], path[1]);
        let taken = other[parent].get(key).cloned();
        let m = out[parent].as_object_mut().unwrap();
        match taken {
            Some(v) => m.insert(key.into(), v),
            None => m.remove(key),
        };
    }
    if dup
        && let Some(cs) = out
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
    {
        let mut twin = cs[0].clone();
        twin["image"] = json!("twin");
        cs.push(twin);
    }
    out
}

proptest! {
    /// The changes of an update, written straight as tries in one walk of both objects,
    /// are what the generic comparison finds: for independent objects and for objects
    /// that differ in a few parts, with items named twice appearing and going.
    #[test]
    fn changed_fields_match_the_generic_compare(
        old in config(),
        other in config(),
        mask in 0..64u8,
        dup in (any::<bool>(), any::<bool>()),
    ) {
        let ty = deployment_type();
        let old = blend(&old, &old, 0, dup.0);
        for new in [other.clone(), blend(&old, &other, mask, dup.1)] {
            let direct = typed::changed_fields(&ty.model, ty.root, &old, &new);
            let diff = typed::compare(&ty.model, ty.root, Some(&old), Some(&new), false);
            let trie = crate::managed::entries::trie;
            prop_assert_eq!(&direct.changed, &trie(&diff.modified.union(&diff.added)));
            prop_assert_eq!(&direct.removed, &trie(&diff.removed));
        }
    }
}

/// The object without its managed fields.
fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}
