//! Tells the watch events that echo a member's own writes from edits made by others,
//! whichever comes first of a write's answer and its event (under load the event often
//! wins: both travel on the same connection, and different tasks read them).

use std::collections::HashMap;

/// An object in a member: kind, namespace, name.
pub type ObjectKey = (String, String, String);

/// What is known of the writes to one object and their events.
#[derive(Default)]
struct Echoes {
    /// Writes sent and not answered yet.
    in_flight: u32,
    /// resourceVersions of answered writes whose events have not come yet.
    awaited: Vec<u64>,
    /// resourceVersions of events seen while writes were in flight, not yet matched to an answer.
    unmatched: Vec<u64>,
}

impl Echoes {
    fn is_empty(&self) -> bool {
        self.in_flight == 0 && self.awaited.is_empty() && self.unmatched.is_empty()
    }
}

/// The writes of one member's workers and their echoes, by object.
#[derive(Default)]
pub struct Echo {
    objects: HashMap<ObjectKey, Echoes>,
}

/// What the event of an object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// It is a write of ours coming back, or may be one (a write is in flight: its answer
    /// decides, see [`Echo::answered`]).
    Own,
    /// Someone else changed the object.
    Other,
}

impl Echo {
    /// A write of the object is about to be sent.
    pub fn sending(&mut self, key: ObjectKey) {
        self.objects.entry(key).or_default().in_flight += 1;
    }

    /// The write answered with `rv` (`None`: it failed or the answer had none). True when
    /// an event seen while it was in flight was not a write of ours: the caller checks the
    /// object again, as it would have on that event.
    pub fn answered(&mut self, key: &ObjectKey, rv: Option<u64>) -> bool {
        let Some(e) = self.objects.get_mut(key) else {
            return false;
        };
        e.in_flight = e.in_flight.saturating_sub(1);
        if let Some(rv) = rv {
            match e.unmatched.iter().position(|u| *u == rv) {
                Some(i) => {
                    e.unmatched.swap_remove(i);
                }
                None => e.awaited.push(rv),
            }
        }
        let mut other = false;
        if e.in_flight == 0 {
            other = !e.unmatched.is_empty();
            e.unmatched.clear();
        }
        if e.is_empty() {
            self.objects.remove(key);
        }
        other
    }

    /// An event of the object at `rv` (`deleted`: it went away).
    pub fn event(&mut self, key: &ObjectKey, rv: Option<u64>, deleted: bool) -> Seen {
        let Some(e) = self.objects.get_mut(key) else {
            return Seen::Other;
        };
        let seen = match rv {
            _ if deleted => Seen::Other,
            Some(rv) if e.awaited.contains(&rv) => Seen::Own,
            Some(rv) if e.in_flight > 0 => {
                e.unmatched.push(rv);
                Seen::Own
            }
            _ => Seen::Other,
        };
        // Events of one object come in order: an answered write older than this event
        // will never be seen again.
        match rv {
            Some(rv) if !deleted => e.awaited.retain(|a| *a > rv),
            _ => e.awaited.clear(),
        }
        if e.is_empty() {
            self.objects.remove(key);
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ("Deployment".into(), "shop".into(), "web".into())
    }

    #[test]
    fn answer_first_then_its_event_is_own() {
        let mut e = Echo::default();
        e.sending(key());
        assert!(!e.answered(&key(), Some(5)));
        assert_eq!(e.event(&key(), Some(5), false), Seen::Own);
        assert!(e.objects.is_empty());
        // Nothing in flight or awaited: any later event is someone else's.
        assert_eq!(e.event(&key(), Some(6), false), Seen::Other);
    }

    #[test]
    fn event_first_then_its_answer_is_own() {
        let mut e = Echo::default();
        e.sending(key());
        assert_eq!(e.event(&key(), Some(5), false), Seen::Own);
        assert!(
            !e.answered(&key(), Some(5)),
            "the event was the write's own"
        );
        assert!(e.objects.is_empty());
    }

    #[test]
    fn an_edit_seen_during_a_write_is_reported_at_the_answer() {
        let mut e = Echo::default();
        e.sending(key());
        assert_eq!(e.event(&key(), Some(4), false), Seen::Own, "undecided yet");
        assert!(e.answered(&key(), Some(5)), "4 was not ours");
        assert_eq!(e.event(&key(), Some(5), false), Seen::Own);
        assert!(e.objects.is_empty());
    }

    #[test]
    fn a_failed_write_reports_what_was_seen() {
        let mut e = Echo::default();
        e.sending(key());
        assert!(!e.answered(&key(), None));
        assert!(e.objects.is_empty());
        e.sending(key());
        e.event(&key(), Some(7), false);
        assert!(e.answered(&key(), None));
        assert!(e.objects.is_empty());
    }

    #[test]
    fn overlapping_writes_settle_when_the_last_answers() {
        let mut e = Echo::default();
        e.sending(key());
        e.sending(key());
        assert_eq!(e.event(&key(), Some(8), false), Seen::Own);
        assert!(!e.answered(&key(), Some(9)), "one write still in flight");
        assert_eq!(e.event(&key(), Some(9), false), Seen::Own);
        assert!(!e.answered(&key(), Some(8)));
        assert!(e.objects.is_empty());
    }

    #[test]
    fn stale_answers_and_deletes_are_forgotten() {
        let mut e = Echo::default();
        e.sending(key());
        e.answered(&key(), Some(5));
        // The event of 5 was missed (a relist): a newer state is someone else's, and 5 is
        // dropped rather than kept forever.
        assert_eq!(e.event(&key(), Some(7), false), Seen::Other);
        assert!(e.objects.is_empty());
        e.sending(key());
        e.answered(&key(), Some(9));
        assert_eq!(e.event(&key(), Some(9), true), Seen::Other);
        assert!(e.objects.is_empty());
        assert_eq!(e.event(&key(), None, false), Seen::Other);
    }
}
