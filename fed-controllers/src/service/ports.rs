//! lb-agent listen ports: one per federated Service port, the same in every cluster,
//! kept in the federation ConfigMap `meridian-system/meridian-lb-ports` under
//! `<namespace>.<service>.<port>`. These are the pure decisions; the controller writes the
//! ConfigMap with compare-and-swap on its resourceVersion, so allocations are durable and
//! survive restarts, and two writers never hand out the same port.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// An inclusive range of ports, `30000-32767`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

/// Why a port range could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRangeError {
    /// No `first-last` shape.
    #[error("{0:?} is not a port range like 30000-32767")]
    Shape(String),
    /// An end is not a port.
    #[error("{range:?}: {port:?} is not a port (1-65535)")]
    Port {
        /// The range as written.
        range: String,
        /// The end that is not a port.
        port: String,
    },
    /// The ends are the wrong way round.
    #[error("{0:?}: the first port is above the last")]
    Reversed(String),
}

impl FromStr for PortRange {
    type Err = PortRangeError;

    fn from_str(s: &str) -> Result<Self, PortRangeError> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| PortRangeError::Shape(s.to_string()))?;
        let parse = |p: &str| {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| PortRangeError::Port {
                    range: s.to_string(),
                    port: p.to_string(),
                })
        };
        let (first, last) = (parse(a)?, parse(b)?);
        if first > last {
            return Err(PortRangeError::Reversed(s.to_string()));
        }
        Ok(PortRange { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl PortRange {
    fn contains(&self, p: u16) -> bool {
        (self.first..=self.last).contains(&p)
    }
}

/// The allocation key of one Service port.
pub fn key(namespace: &str, service: &str, port: &str) -> String {
    format!("{namespace}.{service}.{port}")
}

/// Namespaces and Service names are DNS labels (no dots), so the prefix is unambiguous.
fn prefix(namespace: &str, service: &str) -> String {
    format!("{namespace}.{service}.")
}

/// What a change of the allocations (`old` → `new`, the ConfigMap's data) means for the
/// Services: the `(namespace, name)`s whose allocations differ, and whether any port was
/// freed (a Service waiting for a port may get one now).
pub fn changed_services(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> (BTreeSet<(String, String)>, bool) {
    let service = |k: &str| {
        let mut parts = k.splitn(3, '.');
        Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
    };
    let mut changed = BTreeSet::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            changed.extend(service(k));
        }
    }
    let mut freed = false;
    for k in old.keys().filter(|k| !new.contains_key(*k)) {
        freed = true;
        changed.extend(service(k));
    }
    (changed, freed)
}

/// The ConfigMap's data as allocations; values that are not ports are dropped (and so
/// reallocated), never trusted.
pub fn parse(data: &BTreeMap<String, String>) -> BTreeMap<String, u16> {
    data.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.trim().parse::<u16>().ok()?)))
        .collect()
}

/// The allocations of one version of the ConfigMap, as parsed once for every Service that
/// reads that version.
#[derive(Debug, Default, PartialEq)]
pub struct Allocations {
    /// Service port key → listen port.
    pub ports: BTreeMap<String, u16>,
    /// Ports held by more than one key (a hand edit): [`assign`] moves them.
    shared: BTreeSet<u16>,
}

impl Allocations {
    /// The ConfigMap's data parsed (see [`parse`]).
    pub fn parse(data: &BTreeMap<String, String>) -> Self {
        Self::of(parse(data))
    }

    /// Allocations as [`assign`] returns them.
    pub fn of(ports: BTreeMap<String, u16>) -> Self {
        let mut seen = BTreeSet::new();
        let shared = ports
            .values()
            .filter(|p| !seen.insert(**p))
            .copied()
            .collect();
        Self { ports, shared }
    }

    /// Whether the Service holds exactly `ids`, each on a port of `range` that no other key
    /// holds: what [`assign`] leaves as it is, found without copying the allocations.
    pub fn holds(&self, namespace: &str, service: &str, ids: &[String], range: PortRange) -> bool {
        let pre = prefix(namespace, service);
        let wanted: BTreeSet<String> = ids.iter().map(|p| key(namespace, service, p)).collect();
        let held = self
            .ports
            .range(pre.clone()..)
            .take_while(|(k, _)| k.starts_with(&pre))
            .count();
        held == wanted.len()
            && wanted.iter().all(|k| {
                self.ports
                    .get(k)
                    .is_some_and(|p| range.contains(*p) && !self.shared.contains(p))
            })
    }
}

/// The listen port of one Service port, if allocated.
pub fn lookup(
    alloc: &BTreeMap<String, u16>,
    namespace: &str,
    service: &str,
    port: &str,
) -> Option<u16> {
    alloc.get(&key(namespace, service, port)).copied()
}

/// The pool ran dry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no free lb-agent listen port left in {0}")]
pub struct Exhausted(pub PortRange);

/// The allocations after giving the Service exactly `ports` (its port ids): existing valid
/// allocations are kept, new ports take the lowest free port of the range, ports the
/// Service no longer has are freed. `None` when nothing changes.
pub fn assign(
    alloc: &BTreeMap<String, u16>,
    namespace: &str,
    service: &str,
    ports: &[String],
    range: PortRange,
) -> Result<Option<BTreeMap<String, u16>>, Exhausted> {
    let pre = prefix(namespace, service);
    let wanted: BTreeSet<String> = ports.iter().map(|p| key(namespace, service, p)).collect();
    let mut next: BTreeMap<String, u16> = alloc
        .iter()
        .filter(|(k, _)| !k.starts_with(&pre) || wanted.contains(*k))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    // A port held twice (a hand edit) or outside the range is reallocated for this Service.
    let mut used: BTreeSet<u16> = BTreeSet::new();
    for (k, v) in alloc {
        if !k.starts_with(&pre) {
            used.insert(*v);
        }
    }
    for k in &wanted {
        match next.get(k) {
            Some(p) if range.contains(*p) && used.insert(*p) => {}
            _ => {
                next.remove(k);
            }
        }
    }
    for k in &wanted {
        if next.contains_key(k) {
            continue;
        }
        let free = (range.first..=range.last)
            .find(|p| !used.contains(p))
            .ok_or(Exhausted(range))?;
        used.insert(free);
        next.insert(k.clone(), free);
    }
    Ok((next != *alloc).then_some(next))
}

/// One Service's port ids, as [`assign`] takes them.
pub struct Request<'a> {
    /// The Service's namespace.
    pub namespace: &'a str,
    /// The Service's name.
    pub service: &'a str,
    /// Its port ids.
    pub ports: &'a [String],
}

/// The allocations after [`assign`]ing every request in turn, so that one write carries
/// them all; a request the pool cannot satisfy is left out (its Service finds out when it
/// asks on its own). `None` when nothing changes.
pub fn assign_all<'a>(
    alloc: &BTreeMap<String, u16>,
    requests: impl IntoIterator<Item = Request<'a>>,
    range: PortRange,
) -> Option<BTreeMap<String, u16>> {
    let mut next: Option<BTreeMap<String, u16>> = None;
    for r in requests {
        let current = next.as_ref().unwrap_or(alloc);
        if let Ok(Some(n)) = assign(current, r.namespace, r.service, r.ports, range) {
            next = Some(n);
        }
    }
    next.filter(|n| n != alloc)
}

/// The allocations without the Service's ports; `None` when it held none.
pub fn release(
    alloc: &BTreeMap<String, u16>,
    namespace: &str,
    service: &str,
) -> Option<BTreeMap<String, u16>> {
    let pre = prefix(namespace, service);
    let next: BTreeMap<String, u16> = alloc
        .iter()
        .filter(|(k, _)| !k.starts_with(&pre))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    (next.len() != alloc.len()).then_some(next)
}

/// The ConfigMap data for allocations.
pub fn to_data(alloc: &BTreeMap<String, u16>) -> BTreeMap<String, String> {
    alloc
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: PortRange = PortRange {
        first: 30000,
        last: 30003,
    };

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ranges_parse_and_reject_nonsense() {
        assert_eq!(
            "30000-32767".parse::<PortRange>(),
            Ok(PortRange {
                first: 30000,
                last: 32767
            })
        );
        for bad in ["", "30000", "2-1", "0-5", "a-b", "1-70000"] {
            assert!(bad.parse::<PortRange>().is_err(), "{bad}");
        }
        assert_eq!(RANGE.to_string(), "30000-30003");
    }

    #[test]
    fn many_requests_are_assigned_in_turn_and_one_the_pool_cannot_hold_is_left_out() {
        fn req<'a>(service: &'a str, ports: &'a [String]) -> Request<'a> {
            Request {
                namespace: "shop",
                service,
                ports,
            }
        }
        let (web, api, big) = (ids(&["http"]), ids(&["http", "grpc"]), ids(&["a", "b"]));
        let next = assign_all(
            &BTreeMap::new(),
            [req("web", &web), req("big", &big), req("api", &api)],
            RANGE,
        )
        .unwrap();
        // One at a time from the lowest free port: web, then big (two), then api finds
        // one port left for two ids and is left out.
        assert_eq!(next.len(), 3);
        assert_eq!(lookup(&next, "shop", "web", "http"), Some(30000));
        assert_eq!(lookup(&next, "shop", "big", "a"), Some(30001));
        assert_eq!(lookup(&next, "shop", "big", "b"), Some(30002));
        assert_eq!(lookup(&next, "shop", "api", "http"), None);
        // The same as asking one by one.
        let one = assign(&BTreeMap::new(), "shop", "web", &web, RANGE)
            .unwrap()
            .unwrap();
        let two = assign(&one, "shop", "big", &big, RANGE).unwrap().unwrap();
        assert_eq!(next, two);
        // Nothing to do: None.
        assert_eq!(assign_all(&next, [req("web", &web)], RANGE), None);
        assert_eq!(assign_all(&next, [], RANGE), None);
    }

    #[test]
    fn assigns_lowest_free_ports_and_keeps_existing_ones() {
        let a = assign(
            &BTreeMap::new(),
            "shop",
            "web",
            &ids(&["http", "grpc"]),
            RANGE,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.get("shop.web.grpc"), Some(&30000));
        assert_eq!(a.get("shop.web.http"), Some(&30001));
        // Stable: asking again changes nothing.
        assert_eq!(
            assign(&a, "shop", "web", &ids(&["http", "grpc"]), RANGE),
            Ok(None)
        );
        // Another Service gets the next free one; a removed port is freed and reused.
        let b = assign(&a, "shop", "api", &ids(&["80"]), RANGE)
            .unwrap()
            .unwrap();
        assert_eq!(b.get("shop.api.80"), Some(&30002));
        let c = assign(&b, "shop", "web", &ids(&["http"]), RANGE)
            .unwrap()
            .unwrap();
        assert_eq!(c.get("shop.web.grpc"), None);
        assert_eq!(c.get("shop.web.http"), Some(&30001));
        let d = assign(&c, "other", "web", &ids(&["x"]), RANGE)
            .unwrap()
            .unwrap();
        assert_eq!(d.get("other.web.x"), Some(&30000));
        assert_eq!(
            assign(&d, "other", "db", &ids(&["a", "b"]), RANGE),
            Err(Exhausted(RANGE))
        );
    }

    #[test]
    fn invalid_or_duplicate_allocations_are_redone() {
        let mut alloc = BTreeMap::from([
            ("shop.api.80".to_string(), 30000),
            ("shop.web.http".to_string(), 30000),
            ("shop.web.grpc".to_string(), 9),
        ]);
        let next = assign(&alloc, "shop", "web", &ids(&["http", "grpc"]), RANGE)
            .unwrap()
            .unwrap();
        assert_eq!(next.get("shop.api.80"), Some(&30000));
        let mine: BTreeSet<u16> = [next["shop.web.http"], next["shop.web.grpc"]].into();
        assert_eq!(mine, BTreeSet::from([30001, 30002]));
        alloc = next;
        assert_eq!(
            parse(&to_data(&alloc)),
            alloc,
            "round trip through ConfigMap data"
        );
        assert_eq!(
            parse(&BTreeMap::from([("x.y.z".to_string(), "nope".to_string())])),
            BTreeMap::new()
        );
    }

    #[test]
    fn release_frees_only_that_service() {
        let alloc = BTreeMap::from([
            ("shop.web.http".to_string(), 30000),
            ("shop.web2.http".to_string(), 30001),
        ]);
        let next = release(&alloc, "shop", "web").unwrap();
        assert_eq!(
            next,
            BTreeMap::from([("shop.web2.http".to_string(), 30001)])
        );
        assert_eq!(release(&next, "shop", "web"), None);
        assert_eq!(lookup(&next, "shop", "web2", "http"), Some(30001));
    }

    #[test]
    fn changed_services_names_only_what_moved() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let old = data(&[("shop.web.http", "30000"), ("shop.api.grpc", "30001")]);
        let svc = |ns: &str, n: &str| (ns.to_owned(), n.to_owned());
        // One Service allocated a port: only it.
        let new = data(&[
            ("shop.web.http", "30000"),
            ("shop.api.grpc", "30001"),
            ("blog.front.http", "30002"),
        ]);
        assert_eq!(
            changed_services(&old, &new),
            (BTreeSet::from([svc("blog", "front")]), false)
        );
        // A port moved and one was freed.
        let new = data(&[("shop.web.http", "30005")]);
        assert_eq!(
            changed_services(&old, &new),
            (
                BTreeSet::from([svc("shop", "api"), svc("shop", "web")]),
                true
            )
        );
        assert_eq!(changed_services(&old, &old), (BTreeSet::new(), false));
    }

    proptest::proptest! {
        /// `holds` says exactly when `assign` has nothing to do, whatever the ConfigMap
        /// holds (hand edits: ports shared, out of range, stray keys).
        #[test]
        fn holds_is_assign_with_nothing_to_do(
            entries in proptest::collection::btree_map(
                (0..3usize, 0..3usize), 29_998u16..30_006, 0..8),
            ids in proptest::collection::vec(0..3usize, 0..3),
            service in 0..3usize,
        ) {
            let services = ["web", "api", "db"];
            let id_names = ["http", "grpc", "admin"];
            let alloc: BTreeMap<String, u16> = entries
                .iter()
                .map(|((s, i), p)| (key("shop", services[*s], id_names[*i]), *p))
                .collect();
            let ids: Vec<String> = ids.iter().map(|i| id_names[*i].to_string()).collect();
            let a = Allocations::of(alloc.clone());
            let nothing_to_do = matches!(assign(&alloc, "shop", services[service], &ids, RANGE), Ok(None));
            proptest::prop_assert_eq!(a.holds("shop", services[service], &ids, RANGE), nothing_to_do);
        }
    }
}
