//! The election record a `coordination.k8s.io/v1` Lease holds, and the pure decision of
//! one acquire-or-renew step over what a candidate has observed (client-go's
//! `tryAcquireOrRenew`, without the I/O).
//!
//! Expiry is judged by the candidate's own monotonic clock: a record is valid until
//! `observed_at + leaseDurationSeconds`, where `observed_at` is when this process last saw
//! the record change. The holder's `renewTime` is never compared with the local clock, so
//! clock skew between machines does not matter (only a difference in clock *rate* would).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

/// What the Lease says about leadership. Two records are the same observation only when
/// every field is equal (client-go compares the whole record too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Who holds the lease; empty when nobody does (released).
    pub holder: String,
    /// How long, after a candidate sees this record, the lease is valid.
    pub lease_duration_seconds: i32,
    /// When the current holder acquired it (for people; not used to judge expiry).
    pub acquire_time: Option<Timestamp>,
    /// When the holder last renewed it (for people; not used to judge expiry).
    pub renew_time: Option<Timestamp>,
    /// How many times the lease changed hands.
    pub transitions: i32,
}

impl Record {
    /// The record in a Lease's spec (absent fields are empty or zero).
    pub fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(s) = spec else {
            return Self::default();
        };
        Self {
            holder: s.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: s.lease_duration_seconds.unwrap_or(0),
            acquire_time: s.acquire_time.as_ref().map(|t| t.0),
            renew_time: s.renew_time.as_ref().map(|t| t.0),
            transitions: s.lease_transitions.unwrap_or(0),
        }
    }

    /// The Lease spec holding this record.
    pub fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: (!self.holder.is_empty()).then(|| self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }

    /// How long the lease is valid after it was observed: its own duration when it names
    /// one (a released lease says 1 s), else `fallback`.
    pub fn duration_or(&self, fallback: Duration) -> Duration {
        u64::try_from(self.lease_duration_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map_or(fallback, Duration::from_secs)
    }

    /// The record of a clean release: nobody holds it, it expires a second after it is
    /// seen, and the transitions count stays (client-go's `release`).
    pub fn released(&self, now: Timestamp) -> Self {
        let now = micros(now);
        Self {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            transitions: self.transitions,
        }
    }
}

/// A record as stored, with the resourceVersion a write must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The record.
    pub record: Record,
    /// The Lease's `metadata.resourceVersion`.
    pub resource_version: String,
}

/// The last record a candidate saw, and when (by its own clock) it last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// What is stored.
    pub stored: Stored,
    /// When the record was first seen as it is now.
    pub at: Instant,
}

impl Observed {
    /// Folds a fresh read into the observation: the time moves only when the record
    /// changed; the resourceVersion always follows the read (a metadata-only change).
    pub fn update(previous: Option<Observed>, read: Option<Stored>, now: Instant) -> Option<Self> {
        let read = read?;
        match previous {
            Some(p) if p.stored.record == read.record => Some(Observed {
                stored: read,
                at: p.at,
            }),
            _ => Some(Observed {
                stored: read,
                at: now,
            }),
        }
    }

    /// When the observed lease expires by this process's clock, if someone holds it.
    pub fn expires_at(&self, fallback: Duration) -> Option<Instant> {
        (!self.stored.record.holder.is_empty())
            .then(|| self.at + self.stored.record.duration_or(fallback))
    }
}

/// What one acquire-or-renew step should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it holding this record.
    Create(Record),
    /// Replace the Lease (at `resource_version`, so a concurrent writer gets 409).
    Update {
        /// The new record.
        record: Record,
        /// The version read.
        resource_version: String,
    },
    /// Someone else holds a lease that has not expired yet.
    Wait {
        /// Who.
        holder: String,
        /// When it expires unless it changes again.
        until: Instant,
    },
}

/// Truncates to microseconds: what a Lease's MicroTime keeps, so the record read back
/// equals the record written.
fn micros(t: Timestamp) -> Timestamp {
    let us = t.as_microsecond();
    Timestamp::from_microsecond(us).unwrap_or(t)
}

/// One step for candidate `me`, with `observed` the latest observation (None: no Lease),
/// `now` the local clock and `wall` the wall clock (only written, for people).
/// `lease_duration` is what this process writes as the lease's duration.
pub fn decide(
    observed: Option<&Observed>,
    me: &str,
    now: Instant,
    wall: Timestamp,
    lease_duration: Duration,
) -> Step {
    let wall = micros(wall);
    let seconds = i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    let Some(o) = observed else {
        return Step::Create(Record {
            holder: me.to_string(),
            lease_duration_seconds: seconds,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: 0,
        });
    };
    let old = &o.stored.record;
    let mine = old.holder == me;
    if let Some(until) = o.expires_at(lease_duration)
        && !mine
        && now < until
    {
        return Step::Wait {
            holder: old.holder.clone(),
            until,
        };
    }
    let record = Record {
        holder: me.to_string(),
        lease_duration_seconds: seconds,
        // A renewal keeps when the term began; a takeover starts a new one.
        acquire_time: if mine {
            old.acquire_time.or(Some(wall))
        } else {
            Some(wall)
        },
        renew_time: Some(wall),
        transitions: if mine {
            old.transitions
        } else {
            old.transitions.saturating_add(1)
        },
    };
    Step::Update {
        record,
        resource_version: o.stored.resource_version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn wall() -> Timestamp {
        "2026-01-02T03:04:05.123456789Z".parse().expect("timestamp")
    }

    fn held(holder: &str, transitions: i32, at: Instant) -> Observed {
        Observed {
            stored: Stored {
                record: Record {
                    holder: holder.into(),
                    lease_duration_seconds: 15,
                    acquire_time: Some(wall()),
                    renew_time: Some(wall()),
                    transitions,
                },
                resource_version: "7".into(),
            },
            at,
        }
    }

    #[test]
    fn spec_round_trip_and_release() {
        let r = held("a", 3, Instant::now()).stored.record;
        assert_eq!(Record::from_spec(Some(&r.to_spec())), r);
        assert_eq!(Record::from_spec(None), Record::default());
        let released = r.released(wall());
        assert_eq!(released.holder, "");
        assert_eq!(released.transitions, 3, "a release is not a transition");
        assert_eq!(released.lease_duration_seconds, 1);
        assert_eq!(released.to_spec().holder_identity, None);
        assert_eq!(
            released.renew_time.map(|t| t.subsec_nanosecond() % 1000),
            Some(0),
            "kept to microseconds, as MicroTime stores it"
        );
    }

    #[test]
    fn decisions() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // (observation, now, expected)
        let create = decide(None, "me", t0, wall(), LEASE);
        assert!(
            matches!(&create, Step::Create(r) if r.holder == "me" && r.transitions == 0 && r.lease_duration_seconds == 15),
            "{create:?}"
        );

        let other = held("other", 2, t0);
        // Valid by our clock: wait until observed + duration, whatever renewTime says.
        assert_eq!(
            decide(Some(&other), "me", t0 + s(14), wall(), LEASE),
            Step::Wait {
                holder: "other".into(),
                until: t0 + s(15)
            }
        );
        // Expired: a takeover is a transition and a new acquire time.
        let Step::Update {
            record,
            resource_version,
        } = decide(Some(&other), "me", t0 + s(15), wall(), LEASE)
        else {
            panic!("takeover expected");
        };
        assert_eq!(
            (
                record.holder.as_str(),
                record.transitions,
                resource_version.as_str()
            ),
            ("me", 3, "7")
        );

        // Our own lease is renewed at any time, keeping acquire time and transitions.
        let mut mine = held("me", 4, t0);
        let earlier: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        mine.stored.record.acquire_time = Some(earlier);
        let Step::Update { record, .. } = decide(Some(&mine), "me", t0, wall(), LEASE) else {
            panic!("renewal expected");
        };
        assert_eq!(
            (record.transitions, record.acquire_time),
            (4, Some(earlier))
        );

        // Released (no holder): taken at once, counted as a transition.
        let mut free = held("", 5, t0);
        free.stored.record.lease_duration_seconds = 1;
        let Step::Update { record, .. } = decide(Some(&free), "me", t0, wall(), LEASE) else {
            panic!("acquisition expected");
        };
        assert_eq!(record.transitions, 6);

        // A holder that wrote a longer duration is waited for that long.
        let mut long = held("other", 0, t0);
        long.stored.record.lease_duration_seconds = 60;
        assert!(matches!(
            decide(Some(&long), "me", t0 + s(30), wall(), LEASE),
            Step::Wait { until, .. } if until == t0 + s(60)
        ));
    }

    #[test]
    fn observation_time_moves_only_when_the_record_changes() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let first = held("other", 0, t0);
        let mut same = first.stored.clone();
        same.resource_version = "8".into();
        let o = Observed::update(Some(first.clone()), Some(same), t0 + s(5)).expect("some");
        assert_eq!((o.at, o.stored.resource_version.as_str()), (t0, "8"));
        let mut renewed = first.stored.clone();
        renewed.record.renew_time = Some(Timestamp::from_second(1).expect("ts"));
        let o = Observed::update(Some(o), Some(renewed), t0 + s(6)).expect("some");
        assert_eq!(o.at, t0 + s(6));
        assert_eq!(Observed::update(Some(o), None, t0 + s(7)), None);
    }
}
