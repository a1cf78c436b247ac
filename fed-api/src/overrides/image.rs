//! Container image references (`[registry/]repository[:tag][@digest]`) taken apart and put
//! back together, and the check of the parts an `imageOverrider` may write.
//!
//! The grammar is the distribution reference one, simplified where Kubernetes does not
//! care: the first path component is a registry when it holds a `.` or a `:` or is
//! `localhost`; everything else before the tag is the repository, as written (no implied
//! `docker.io/library/`, so an override changes only what the user wrote).

use super::{ImageComponent, OverrideOperator};

/// An image reference in its parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageRef {
    /// `registry.example:5000`, if written.
    pub registry: Option<String>,
    /// `team/web`.
    pub repository: String,
    /// `1.2`, if written.
    pub tag: Option<String>,
    /// `sha256:…`, if written.
    pub digest: Option<String>,
}

/// Why an image or an image part is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The reference has no repository.
    #[error("image {0:?} has no repository")]
    NoRepository(String),
    /// A part is not of its component's form.
    #[error("{value:?} is not a valid {component}: {why}")]
    InvalidPart {
        /// The component.
        component: &'static str,
        /// The value.
        value: String,
        /// The rule it breaks.
        why: &'static str,
    },
    /// An image always has a repository: it cannot be removed.
    #[error("the repository of an image cannot be removed")]
    RemoveRepository,
    /// `add` and `replace` need the new part.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
}

impl ImageComponent {
    /// The name as written in a policy.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageComponent::Registry => "Registry",
            ImageComponent::Repository => "Repository",
            ImageComponent::Tag => "Tag",
            ImageComponent::Digest => "Digest",
        }
    }
}

impl ImageRef {
    /// Takes `image` apart.
    pub fn parse(image: &str) -> Result<Self, ImageError> {
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, Some(d.to_owned())),
            None => (image, None),
        };
        // A `:` after the last `/` starts the tag; one before it is a registry's port.
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], Some(rest[slash + i + 1..].to_owned())),
            None => (rest, None),
        };
        let (registry, repository) = match name.split_once('/') {
            Some((first, repo))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (Some(first.to_owned()), repo)
            }
            _ => (None, name),
        };
        if repository.is_empty() {
            return Err(ImageError::NoRepository(image.to_owned()));
        }
        Ok(ImageRef {
            registry,
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// The optional part `component` names (`None` for the repository, always there).
    fn part_mut(&mut self, component: ImageComponent) -> Option<&mut Option<String>> {
        match component {
            ImageComponent::Registry => Some(&mut self.registry),
            ImageComponent::Tag => Some(&mut self.tag),
            ImageComponent::Digest => Some(&mut self.digest),
            ImageComponent::Repository => None,
        }
    }

    /// Applies one operator to one part: `add` sets a part the image lacks (an image that
    /// has it keeps it), `remove` drops it, `replace` sets it whether or not it was there.
    pub fn change(
        &mut self,
        component: ImageComponent,
        operator: OverrideOperator,
        value: Option<&str>,
    ) -> Result<(), ImageError> {
        let value = match operator {
            OverrideOperator::Remove => None,
            _ => {
                let v = value
                    .filter(|v| !v.is_empty())
                    .ok_or(ImageError::MissingValue(component.as_str()))?;
                check_part(component, v)?;
                Some(v.to_owned())
            }
        };
        let Some(part) = self.part_mut(component) else {
            // The repository: always there, so `add` leaves it.
            match (operator, value) {
                (OverrideOperator::Remove, _) => return Err(ImageError::RemoveRepository),
                (OverrideOperator::Replace, Some(v)) => self.repository = v,
                _ => {}
            }
            return Ok(());
        };
        if operator != OverrideOperator::Add || part.is_none() {
            *part = value;
        }
        Ok(())
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(r) = &self.registry {
            write!(f, "{r}/")?;
        }
        f.write_str(&self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Whether `value` is of `component`'s form: a registry is a host with an optional port,
/// a repository lowercase path components, a tag up to 128 word characters, dots and
/// dashes (not first), a digest `algorithm:hex` of at least 32 characters.
pub fn check_part(component: ImageComponent, value: &str) -> Result<(), ImageError> {
    let bad = |why| {
        Err(ImageError::InvalidPart {
            component: component.as_str(),
            value: value.to_owned(),
            why,
        })
    };
    match component {
        ImageComponent::Registry => {
            let (host, port) = match value.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (value, None),
            };
            if host.is_empty()
                || !host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                || host.starts_with(['.', '-'])
                || host.ends_with(['.', '-'])
            {
                return bad("must be a host name, optionally with a port");
            }
            if port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
                return bad("the port must be a number");
            }
        }
        ImageComponent::Repository => {
            let component_ok = |c: &str| {
                !c.is_empty()
                    && c.chars().all(|ch| {
                        ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch)
                    })
                    && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
                    && c.ends_with(|ch: char| ch.is_ascii_alphanumeric())
            };
            if !value.split('/').all(component_ok) {
                return bad(
                    "must be lowercase path components of letters, digits and separators (._-)",
                );
            }
        }
        ImageComponent::Tag => {
            let first_ok = value
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if !first_ok
                || value.len() > 128
                || !value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            {
                return bad(
                    "must be up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
                );
            }
        }
        ImageComponent::Digest => {
            let ok = value.split_once(':').is_some_and(|(alg, hex)| {
                !alg.is_empty()
                    && alg
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+._-".contains(c))
                    && hex.len() >= 32
                    && hex
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "=_-".contains(c))
            });
            if !ok {
                return bad("must be algorithm:encoded, e.g. sha256: and 64 hex digits");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ImageComponent::*;
    use OverrideOperator::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parse_and_print_round_trip() {
        let cases = [
            ("nginx", None, "nginx", None, None),
            ("nginx:1.27", None, "nginx", Some("1.27"), None),
            ("team/web:2", None, "team/web", Some("2"), None),
            (
                "registry.example:5000/team/web:2",
                Some("registry.example:5000"),
                "team/web",
                Some("2"),
                None,
            ),
            ("localhost/web", Some("localhost"), "web", None, None),
            (
                "localhost:5000/web",
                Some("localhost:5000"),
                "web",
                None,
                None,
            ),
        ];
        for (image, registry, repository, tag, digest) in cases {
            let r = ImageRef::parse(image).unwrap();
            assert_eq!(
                (
                    r.registry.as_deref(),
                    r.repository.as_str(),
                    r.tag.as_deref(),
                    r.digest.as_deref()
                ),
                (registry, repository, tag, digest),
                "{image}"
            );
            assert_eq!(r.to_string(), image);
        }
        let pinned = format!("ghcr.io/team/web:1@{DIGEST}");
        let r = ImageRef::parse(&pinned).unwrap();
        assert_eq!(r.digest.as_deref(), Some(DIGEST));
        assert_eq!(r.tag.as_deref(), Some("1"));
        assert_eq!(r.to_string(), pinned);
        assert!(ImageRef::parse("").is_err());
        assert!(ImageRef::parse("registry.example/").is_err());
    }

    #[test]
    fn change_table() {
        // (image, component, operator, value, expected image or None for an error)
        type Case = (
            &'static str,
            ImageComponent,
            OverrideOperator,
            Option<&'static str>,
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            (
                "nginx",
                Registry,
                Replace,
                Some("registry.cn.example"),
                Some("registry.cn.example/nginx"),
            ),
            (
                "docker.io/nginx:1",
                Registry,
                Replace,
                Some("mirror.example:5000"),
                Some("mirror.example:5000/nginx:1"),
            ),
            (
                "nginx",
                Registry,
                Add,
                Some("mirror.example"),
                Some("mirror.example/nginx"),
            ),
            (
                "quay.io/nginx",
                Registry,
                Add,
                Some("mirror.example"),
                Some("quay.io/nginx"),
            ),
            (
                "quay.io/team/nginx:1",
                Registry,
                Remove,
                None,
                Some("team/nginx:1"),
            ),
            (
                "quay.io/team/nginx:1",
                Repository,
                Replace,
                Some("other/app"),
                Some("quay.io/other/app:1"),
            ),
            (
                "quay.io/team/nginx:1",
                Repository,
                Add,
                Some("other/app"),
                Some("quay.io/team/nginx:1"),
            ),
            ("quay.io/team/nginx:1", Repository, Remove, None, None),
            ("nginx:1", Tag, Replace, Some("2"), Some("nginx:2")),
            ("nginx", Tag, Add, Some("2"), Some("nginx:2")),
            ("nginx:1", Tag, Add, Some("2"), Some("nginx:1")),
            ("nginx:1", Tag, Remove, None, Some("nginx")),
            ("nginx:1", Tag, Replace, Some("-bad"), None),
            ("nginx:1", Tag, Replace, None, None),
            ("nginx", Registry, Replace, Some("has/slash"), None),
            ("nginx", Digest, Replace, Some("sha256:short"), None),
            ("nginx", Repository, Replace, Some("Upper/Case"), None),
        ];
        for (image, component, operator, value, want) in cases {
            let mut r = ImageRef::parse(image).unwrap();
            let got = r
                .change(*component, *operator, *value)
                .map(|()| r.to_string());
            assert_eq!(
                got.ok().as_deref(),
                *want,
                "{image} {component:?} {operator:?} {value:?}"
            );
        }
        let mut r = ImageRef::parse("nginx:1").unwrap();
        r.change(Digest, Add, Some(DIGEST)).unwrap();
        assert_eq!(r.to_string(), format!("nginx:1@{DIGEST}"));
        r.change(Digest, Remove, None).unwrap();
        assert_eq!(r.to_string(), "nginx:1");
    }
}
