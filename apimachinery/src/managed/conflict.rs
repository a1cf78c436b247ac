//! Apply conflicts: fields another manager owns that an apply would change, reported
//! with upstream's wording so the API server can answer 409 with `FieldManagerConflict`
//! causes exactly as kube-apiserver does (and kubectl prints them the same way).

use std::fmt;

use super::entries::{Operation, Owner};
use super::path::Path;
use super::set::FieldSet;

/// The manager a conflicting field belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictManager {
    /// The field manager's name.
    pub manager: String,
    /// How it wrote the field.
    pub operation: Operation,
    /// The version it wrote with (updates only; appliers keep one entry across versions).
    pub api_version: String,
    /// The subresource it wrote through, `""` for the main resource.
    pub subresource: String,
}

impl ConflictManager {
    pub(crate) fn from_owner(o: &Owner<'_>) -> Self {
        ConflictManager {
            manager: o.manager.to_string(),
            operation: o.operation,
            api_version: if o.operation == Operation::Update {
                o.api_version.to_string()
            } else {
                String::new()
            },
            subresource: o.subresource.to_string(),
        }
    }

    fn identifier(&self) -> String {
        Owner {
            manager: &self.manager,
            operation: self.operation,
            api_version: &self.api_version,
            subresource: &self.subresource,
        }
        .identifier()
    }
}

impl fmt::Display for ConflictManager {
    /// `"kubectl"`, `"hpa" with subresource "scale"`, `"kube-controller-manager" using apps/v1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.manager)?;
        if !self.subresource.is_empty() {
            write!(f, " with subresource {:?}", self.subresource)?;
        }
        if self.operation == Operation::Update {
            write!(f, " using {}", self.api_version)?;
        }
        Ok(())
    }
}

/// One field another manager owns and an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Who owns the field.
    pub manager: ConflictManager,
    /// The field, e.g. `.spec.replicas`.
    pub path: Path,
}

/// A `FieldManagerConflict` cause of the 409 `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictCause {
    /// `conflict with "kubectl"`.
    pub message: String,
    /// The field, e.g. `.spec.replicas`.
    pub field: String,
}

/// The conflicts of one apply, ordered by manager then field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// Collects conflicts from each manager's set of conflicting fields.
    pub(crate) fn from_sets(sets: Vec<(ConflictManager, FieldSet)>) -> Self {
        let mut sets: Vec<(String, ConflictManager, FieldSet)> = sets
            .into_iter()
            .map(|(m, s)| (m.identifier(), m, s))
            .collect();
        sets.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::new();
        for (_, manager, set) in sets {
            set.for_each(|p| {
                out.push(Conflict {
                    manager: manager.clone(),
                    path: Path(p.to_vec()),
                })
            });
        }
        Conflicts(out)
    }

    /// The causes of the 409 `Status`, one per field.
    pub fn causes(&self) -> Vec<ConflictCause> {
        self.0
            .iter()
            .map(|c| ConflictCause {
                message: format!("conflict with {}", c.manager),
                field: c.path.to_string(),
            })
            .collect()
    }

    /// The conflicts on fields not in `allowed`.
    pub(crate) fn without(&self, allowed: &FieldSet) -> Conflicts {
        Conflicts(
            self.0
                .iter()
                .filter(|c| !allowed.has(&c.path.0))
                .cloned()
                .collect(),
        )
    }
}

impl fmt::Display for Conflicts {
    /// Upstream's `Status` message: `Apply failed with 1 conflict: conflict with
    /// "kubectl": .spec.replicas`, or one block per manager for several.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [only] = self.0.as_slice() {
            return write!(
                f,
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager, only.path
            );
        }
        write!(f, "Apply failed with {} conflicts: ", self.0.len())?;
        let mut current: Option<&ConflictManager> = None;
        let mut first = true;
        for c in &self.0 {
            if current != Some(&c.manager) {
                if !first {
                    f.write_str("\n")?;
                }
                write!(f, "conflicts with {}:", c.manager)?;
                current = Some(&c.manager);
                first = false;
            }
            write!(f, "\n- {}", c.path)?;
        }
        Ok(())
    }
}

impl std::error::Error for Conflicts {}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(name: &str, op: Operation) -> ConflictManager {
        ConflictManager {
            manager: name.into(),
            operation: op,
            api_version: if op == Operation::Update {
                "apps/v1".into()
            } else {
                String::new()
            },
            subresource: String::new(),
        }
    }

    #[test]
    fn messages_match_upstream() {
        let one = Conflicts::from_sets(vec![(
            manager("kubectl", Operation::Apply),
            [Path::fields(&["spec", "replicas"])].into_iter().collect(),
        )]);
        assert_eq!(
            one.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
        );
        assert_eq!(
            one.causes(),
            vec![ConflictCause {
                message: "conflict with \"kubectl\"".into(),
                field: ".spec.replicas".into(),
            }]
        );
        let many = Conflicts::from_sets(vec![
            (
                manager("kube-controller-manager", Operation::Update),
                [Path::fields(&["spec", "replicas"])].into_iter().collect(),
            ),
            (
                manager("helm", Operation::Apply),
                [
                    Path::fields(&["spec", "template", "spec", "hostname"]),
                    Path::fields(&["metadata", "labels", "app"]),
                ]
                .into_iter()
                .collect(),
            ),
        ]);
        assert_eq!(
            many.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"helm\":\n\
             - .metadata.labels.app\n\
             - .spec.template.spec.hostname\n\
             conflicts with \"kube-controller-manager\" using apps/v1:\n\
             - .spec.replicas"
        );
        let mut status = manager("hpa", Operation::Update);
        status.subresource = "scale".into();
        assert_eq!(
            status.to_string(),
            "\"hpa\" with subresource \"scale\" using apps/v1"
        );
    }
}
