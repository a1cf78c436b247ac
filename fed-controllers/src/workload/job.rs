//! What is particular to a divided Job: its completions split in proportion to the
//! parallelism shares, the fields of its spec a member's API server generates (and so must
//! not come from the federation), and the one field a member's Job may change after
//! creation.
//!
//! A member's API server gives each new Job a selector on the Job's own uid and puts that
//! uid in the pod template's labels; kube-apiserver refuses a Job that brings a selector
//! without `manualSelector: true`, and both are immutable afterwards. So the copy goes
//! without them and the member makes its own. Of the rest, only `parallelism` is compared
//! and written after creation: completions, template and selector are fixed once the Job
//! exists, and `suspend`, `podReplacementPolicy` and the like are the member's to default.

use serde_json::{Map, Value};

/// Template (and Job) labels a member's API server sets from the member Job's own uid.
pub const GENERATED_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];

/// Whether `o` is a `batch/v1` Job.
pub fn is_job(o: &Value) -> bool {
    o.get("kind").and_then(Value::as_str) == Some("Job")
        && o.get("apiVersion").and_then(Value::as_str) == Some("batch/v1")
}

/// Divides `completions` over members in proportion to their parallelism `shares`, by
/// largest remainder (ties to the earlier member), so the parts sum to `completions`.
/// A member with a share gets at least one completion while there are enough to go round
/// (taken from the member with the most); with fewer completions than members holding a
/// share, the later ones get 0 (a Job of 0 completions completes at once, without pods).
/// A member without a share gets none. Where completions are at least the parallelism,
/// every member's part is at least its share, so none of its pods waits for work.
pub fn split_completions(completions: i32, shares: &[i32]) -> Vec<i32> {
    let completions = i64::from(completions.max(0));
    let total: i64 = shares.iter().map(|s| i64::from((*s).max(0))).sum();
    if total == 0 {
        return vec![0; shares.len()];
    }
    let exact: Vec<(i64, i64)> = shares
        .iter()
        .map(|s| {
            let n = completions * i64::from((*s).max(0));
            (n / total, n % total)
        })
        .collect();
    let mut parts: Vec<i64> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = completions - parts.iter().sum::<i64>();
    let mut order: Vec<usize> = (0..shares.len()).filter(|i| shares[*i] > 0).collect();
    // Stable: equal remainders keep member order. Each remainder is below one part, so
    // fewer parts are left than members with a share: one round gives them all out.
    order.sort_by_key(|i| std::cmp::Reverse(exact[*i].1));
    for i in order {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    // At least one each, in member order, from the member with the most.
    for i in 0..shares.len() {
        if shares[i] <= 0 || parts[i] > 0 {
            continue;
        }
        let donor = (0..shares.len())
            .filter(|j| parts[*j] > 1)
            .max_by_key(|j| (parts[*j], std::cmp::Reverse(*j)));
        let Some(d) = donor else {
            break;
        };
        parts[d] -= 1;
        parts[i] += 1;
    }
    parts
        .into_iter()
        .map(|p| i32::try_from(p).unwrap_or(i32::MAX))
        .collect()
}

/// Whether the Job's selector is the user's own (`manualSelector: true`): then it and the
/// template's labels travel as they are.
fn manual_selector(spec: &Map<String, Value>) -> bool {
    spec.get("manualSelector").and_then(Value::as_bool) == Some(true)
}

/// Removes [`GENERATED_LABELS`] from a label map.
pub fn strip_generated_labels(labels: &mut Map<String, Value>) {
    for l in GENERATED_LABELS {
        labels.remove(l);
    }
}

/// Makes a federated Job's `spec` a member's: its `completions` part (`None`: left as
/// the federated spec says, absent or not), and without the selector and template labels
/// the federation's API server generated for the federated Job.
pub fn member_spec(spec: &mut Map<String, Value>, completions: Option<i32>) {
    if let Some(c) = completions {
        spec.insert("completions".into(), c.into());
    }
    if manual_selector(spec) {
        return;
    }
    spec.remove("selector");
    let labels = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("metadata"))
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut);
    if let Some(labels) = labels {
        strip_generated_labels(labels);
    }
}

/// Whether a member Job's spec holds what Meridian may still change in it: its
/// parallelism.
pub fn spec_in_sync(actual: &Value, desired: &Value) -> bool {
    desired
        .pointer("/spec/parallelism")
        .is_none_or(Value::is_null)
        || actual.pointer("/spec/parallelism") == desired.pointer("/spec/parallelism")
}

/// Sets a member Job's parallelism to the desired one, leaving the rest of its spec (what
/// the member generated and what is fixed since creation) as the member has it.
pub fn merge_spec(out: &mut Value, desired: &Value) {
    if let Some(p) = desired
        .pointer("/spec/parallelism")
        .filter(|p| !p.is_null())
        && let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("parallelism".into(), p.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn completions_split_table() {
        // (completions, parallelism shares, parts)
        let cases: [(i32, &[i32], &[i32]); 11] = [
            (6, &[1, 1, 1], &[2, 2, 2]),
            (7, &[1, 1, 1], &[3, 2, 2]),
            (8, &[1, 1, 1], &[3, 3, 2]),
            (6, &[5, 1], &[5, 1]),
            (10, &[2, 1], &[7, 3]),
            (4, &[3, 1], &[3, 1]),
            // Fewer completions than parallelism: still one each.
            (3, &[5, 1, 1], &[1, 1, 1]),
            (4, &[5, 1, 1], &[2, 1, 1]),
            // Fewer than the members holding a share: the later ones get none.
            (2, &[1, 1, 1], &[1, 1, 0]),
            // No share, no completions.
            (6, &[2, 0, 1], &[4, 0, 2]),
            (5, &[0, 0], &[0, 0]),
        ];
        for (completions, shares, want) in cases {
            let got = split_completions(completions, shares);
            assert_eq!(got, want, "{completions} over {shares:?}");
            if shares.iter().any(|s| *s > 0) {
                assert_eq!(got.iter().sum::<i32>(), completions, "{shares:?}");
            }
        }
    }

    #[test]
    fn parts_cover_shares_when_completions_cover_parallelism() {
        for completions in 1..40 {
            for shares in [[1, 2, 3], [4, 0, 1], [7, 7, 1], [1, 1, 1]] {
                let total: i32 = shares.iter().sum();
                let parts = split_completions(completions, &shares);
                assert_eq!(parts.iter().sum::<i32>(), completions);
                for (s, p) in shares.iter().zip(&parts) {
                    if *s == 0 {
                        assert_eq!(*p, 0);
                    }
                    if completions >= total {
                        assert!(p >= s, "{completions} over {shares:?}: {parts:?}");
                    }
                }
            }
        }
    }

    fn spec() -> Map<String, Value> {
        json!({
            "parallelism": 3, "completions": 6, "backoffLimit": 6,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "fed-uid"}},
            "template": {"metadata": {"labels": {
                "app": "crunch", "controller-uid": "fed-uid",
                "batch.kubernetes.io/controller-uid": "fed-uid",
                "batch.kubernetes.io/job-name": "crunch", "job-name": "crunch"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
        })
        .as_object()
        .cloned()
        .unwrap_or_default()
    }

    #[test]
    fn member_spec_drops_generated_selector_and_labels() {
        let mut s = spec();
        member_spec(&mut s, Some(2));
        assert_eq!(s["completions"], 2);
        assert!(s.get("selector").is_none());
        assert_eq!(
            s["template"]["metadata"]["labels"],
            json!({"app": "crunch", "batch.kubernetes.io/job-name": "crunch", "job-name": "crunch"})
        );
        let mut absent = spec();
        absent.remove("completions");
        member_spec(&mut absent, None);
        assert!(absent.get("completions").is_none());
    }

    #[test]
    fn a_manual_selector_travels() {
        let mut s = spec();
        s.insert("manualSelector".into(), true.into());
        s.insert("selector".into(), json!({"matchLabels": {"app": "crunch"}}));
        let before = s.clone();
        member_spec(&mut s, None);
        assert_eq!(s, before);
    }

    #[test]
    fn only_parallelism_is_compared_and_written() {
        let desired = json!({"apiVersion": "batch/v1", "kind": "Job",
            "spec": {"parallelism": 2, "completions": 4, "template": {"metadata": {"labels": {"app": "x"}}}}});
        // As the member has it: its own selector and labels, completions fixed at creation.
        let mut actual = json!({"apiVersion": "batch/v1", "kind": "Job",
            "spec": {"parallelism": 2, "completions": 3, "suspend": false,
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "m"}},
                     "template": {"metadata": {"labels": {"app": "x", "controller-uid": "m"}}}}});
        assert!(is_job(&desired));
        assert!(spec_in_sync(&actual, &desired));
        actual["spec"]["parallelism"] = json!(1);
        assert!(!spec_in_sync(&actual, &desired));
        let mut out = actual.clone();
        merge_spec(&mut out, &desired);
        assert_eq!(out["spec"]["parallelism"], 2);
        assert_eq!(out["spec"]["completions"], 3);
        assert_eq!(out["spec"]["selector"], actual["spec"]["selector"]);
        assert!(spec_in_sync(&out, &desired));
        assert!(!is_job(
            &json!({"apiVersion": "apps/v1", "kind": "Deployment"})
        ));
    }
}
