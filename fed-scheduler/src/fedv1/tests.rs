//! Tests of the Federation v1 planner: the cases are rows of `cases.txt`, read by one
//! checker, so a new case is a line of data rather than another block of code.

use super::*;

/// One row of `cases.txt`.
struct Case {
    line: usize,
    preferences: Preferences,
    replicas: i64,
    clusters: Vec<String>,
    current: HashMap<String, i64>,
    capacity: HashMap<String, i64>,
    plan: BTreeMap<String, i64>,
    overflow: BTreeMap<String, i64>,
}

const CASES: &str = include_str!("cases.txt");

/// `a=1 b=2`, or `-` for none.
fn counts<C: FromIterator<(String, i64)>>(field: &str) -> C {
    field
        .split_whitespace()
        .filter(|w| *w != "-")
        .map(|w| {
            let (name, n) = w.split_once('=').expect("cluster=replicas");
            (name.to_owned(), n.parse().expect("replicas"))
        })
        .collect()
}

/// `keep|rebalance cluster=weight/min/max ...`.
fn preferences(field: &str) -> Preferences {
    let mut words = field.split_whitespace();
    let rebalance = match words.next() {
        Some("rebalance") => true,
        Some("keep") => false,
        other => panic!("preferences start with keep or rebalance, not {other:?}"),
    };
    let clusters = words
        .map(|w| {
            let (name, numbers) = w.split_once('=').expect("cluster=weight/min/max");
            let n: Vec<&str> = numbers.split('/').collect();
            let [weight, min, max] = n[..] else {
                panic!("{w}: weight/min/max");
            };
            let entry = ClusterPreferences {
                weight: weight.parse().expect("weight"),
                min_replicas: min.parse().expect("minReplicas"),
                max_replicas: (max != "-").then(|| max.parse().expect("maxReplicas")),
            };
            (name.to_owned(), entry)
        })
        .collect();
    Preferences {
        rebalance,
        clusters,
    }
}

/// The rows of one `[section]` of `cases.txt`.
fn cases(section: &str) -> Vec<Case> {
    let header = format!("[{section}]");
    let mut rows = CASES
        .lines()
        .enumerate()
        .skip_while(|(_, l)| l.trim() != header)
        .skip(1)
        .take_while(|(_, l)| !l.starts_with('['))
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .peekable();
    assert!(rows.peek().is_some(), "no cases under {header}");
    rows.map(|(i, l)| {
        let f: Vec<&str> = l.split('|').map(str::trim).collect();
        let [prefs, replicas, clusters, current, capacity, plan, overflow] = f[..] else {
            panic!("cases.txt:{}: seven fields expected", i + 1);
        };
        Case {
            line: i + 1,
            preferences: preferences(prefs),
            replicas: replicas.parse().expect("replicas"),
            clusters: clusters
                .split_whitespace()
                .filter(|c| *c != "-")
                .map(str::to_owned)
                .collect(),
            current: counts(current),
            capacity: counts(capacity),
            plan: counts(plan),
            overflow: counts(overflow),
        }
    })
    .collect()
}

fn borrowed(m: &HashMap<String, i64>) -> HashMap<&str, i64> {
    m.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

fn check(section: &str) {
    for case in cases(section) {
        let clusters: Vec<&str> = case.clusters.iter().map(String::as_str).collect();
        let got = plan(
            &case.preferences,
            case.replicas,
            &clusters,
            &borrowed(&case.current),
            &borrowed(&case.capacity),
            "",
        );
        assert_eq!(got.plan, case.plan, "cases.txt:{}: plan", case.line);
        assert_eq!(
            got.overflow, case.overflow,
            "cases.txt:{}: overflow",
            case.line
        );
    }
}

/// The sections the tests below run; a section of `cases.txt` missing here would never run.
const SECTIONS: [&str; 4] = [
    "equal_weights_hash_ordered",
    "rebalance_false_keeps_current",
    "capacity_and_overflow",
    "min_max_weight",
];

#[test]
fn every_section_is_run() {
    let mut headers: Vec<&str> = CASES
        .lines()
        .filter_map(|l| l.trim().strip_prefix('[')?.strip_suffix(']'))
        .collect();
    headers.sort_unstable();
    let mut known = SECTIONS.to_vec();
    known.sort_unstable();
    assert_eq!(headers, known);
}

#[test]
fn equal_weights_hash_ordered() {
    check("equal_weights_hash_ordered");
}

#[test]
fn rebalance_false_keeps_current() {
    check("rebalance_false_keeps_current");
}

#[test]
fn capacity_and_overflow() {
    check("capacity_and_overflow");
}

#[test]
fn min_max_weight() {
    check("min_max_weight");
}

#[test]
fn hash_uses_workload_key() {
    // Single replica over equal weights goes to the smallest FNV-1(name + key): the key
    // changes which cluster that is, spreading single-replica workloads around.
    let p = preferences("keep *=1/0/-");
    let winners: std::collections::BTreeSet<String> = (0..20)
        .map(|i| {
            let got = plan(
                &p,
                1,
                &["A", "B", "C", "D"],
                &HashMap::new(),
                &HashMap::new(),
                &format!("ns/app-{i}"),
            );
            got.plan.into_iter().find(|(_, v)| *v == 1).unwrap().0
        })
        .collect();
    assert!(winners.len() > 1, "{winners:?}");
    assert_eq!(fnv1_32(&[b""]), 0x811c_9dc5);
    assert_eq!(fnv1_32(&[b"a"]), 0x050c_5d7e);
}

#[test]
fn parse_annotation() {
    let p = Preferences::parse(r#"{"rebalance": true, "clusters": {"eu-west-1": {"weight": 2, "minReplicas": 1}, "*": {"weight": 1, "maxReplicas": 20}}}"#).unwrap();
    assert!(p.rebalance);
    assert_eq!(p.for_cluster("eu-west-1").unwrap().weight, 2);
    assert_eq!(p.for_cluster("other").unwrap().max_replicas, Some(20));
    assert!(Preferences::parse("{").is_err());
    assert!(matches!(
        Preferences::parse(r#"{"clusters": {"a": {"weight": -1}}}"#),
        Err(PreferencesError::Negative { .. })
    ));
}
