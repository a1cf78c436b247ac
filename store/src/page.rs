//! Pages of a listing, and listings at an older revision rebuilt from the event history (embedded and memory backends).
//!
//! A backend keeping only the newest value of each key can still list an older revision `r`:
//! the first retained event after `r` for a key carries, as its previous value, what the key
//! held at `r` (nothing, for a create). Laying those values over the present state gives the
//! state at `r`.

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::sync::Arc;

use crate::{Event, KeyValue, Result};

/// What each key changed by `changes` (events after some revision, in revision order) held
/// at that revision: `None` if it was absent.
pub(crate) fn state_before(changes: &[Event]) -> BTreeMap<Arc<str>, Option<KeyValue>> {
    let mut then = BTreeMap::new();
    for event in changes {
        then.entry(event.kv.key.clone())
            .or_insert_with(|| event.prev.clone());
    }
    then
}

/// One page of a listing: the keys of `current` (the present keys under the prefix that come
/// after `after_key`, sorted) with `then` (older values of some keys under the prefix) laid
/// over them. Returns at most `limit` items (`0`: all) and whether more follow.
pub(crate) fn page(
    current: impl Iterator<Item = Result<KeyValue>>,
    then: BTreeMap<Arc<str>, Option<KeyValue>>,
    after_key: Option<&str>,
    limit: usize,
) -> Result<(Vec<KeyValue>, bool)> {
    let mut current = current.peekable();
    let mut then = then
        .into_iter()
        .filter(|(key, _)| after_key.is_none_or(|after| &**key > after))
        .peekable();
    let mut items = Vec::new();
    loop {
        let Some(next) = next_merged(&mut current, &mut then)? else {
            return Ok((items, false));
        };
        let Some(kv) = next else {
            // The key did not exist at the listed revision.
            continue;
        };
        if limit != 0 && items.len() == limit {
            return Ok((items, true));
        }
        items.push(kv);
    }
}

/// The next key of the merge, in key order: `Some(None)` for a key absent at the listed
/// revision, `None` once both sides are exhausted.
fn next_merged<C, T>(
    current: &mut Peekable<C>,
    then: &mut Peekable<T>,
) -> Result<Option<Option<KeyValue>>>
where
    C: Iterator<Item = Result<KeyValue>>,
    T: Iterator<Item = (Arc<str>, Option<KeyValue>)>,
{
    let current_key = match current.peek() {
        None => None,
        Some(Ok(kv)) => Some(kv.key.clone()),
        // Hand the read failure on.
        Some(Err(_)) => return current.next().transpose().map(|_| None),
    };
    let then_key = then.peek().map(|(key, _)| key.clone());
    Ok(match (current_key, then_key) {
        (None, None) => None,
        (Some(_), None) => current.next().transpose()?.map(Some),
        (None, Some(_)) => then.next().map(|(_, old)| old),
        (Some(c), Some(t)) if c < t => current.next().transpose()?.map(Some),
        (Some(c), Some(t)) if t < c => then.next().map(|(_, old)| old),
        (Some(_), Some(_)) => {
            // The key changed after the listed revision: its older value wins.
            current.next();
            then.next().map(|(_, old)| old)
        }
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::EventKind;

    fn kv(key: &str, value: &str, revision: u64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: revision,
            mod_revision: revision,
        }
    }

    fn event(kind: EventKind, now: KeyValue, prev: Option<KeyValue>) -> Event {
        Event {
            kind,
            kv: now,
            prev,
        }
    }

    fn keys(items: &[KeyValue]) -> Vec<(&str, &[u8])> {
        items.iter().map(|kv| (&*kv.key, &kv.value[..])).collect()
    }

    #[test]
    fn older_values_are_laid_over_the_present() {
        // At revision 3: /a=a1, /b=b1, /c=c1. Then: 4 updates /a, 5 deletes /b, 6 creates /d.
        let changes = [
            event(EventKind::Put, kv("/a", "a2", 4), Some(kv("/a", "a1", 1))),
            event(
                EventKind::Delete,
                kv("/b", "b1", 5),
                Some(kv("/b", "b1", 2)),
            ),
            event(EventKind::Put, kv("/d", "d1", 6), None),
            event(EventKind::Put, kv("/a", "a3", 7), Some(kv("/a", "a2", 4))),
        ];
        let present = [kv("/a", "a3", 7), kv("/c", "c1", 3), kv("/d", "d1", 6)];
        let then = state_before(&changes);
        let (items, more) = page(present.iter().cloned().map(Ok), then, None, 0).unwrap();
        assert_eq!(
            keys(&items),
            [("/a", &b"a1"[..]), ("/b", b"b1"), ("/c", b"c1")]
        );
        assert!(!more);
    }

    #[test]
    fn pages_cut_at_the_limit_and_say_whether_more_follow() {
        let present: Vec<KeyValue> = (0..5).map(|i| kv(&format!("/k{i}"), "v", 1)).collect();
        let (items, more) =
            page(present.iter().cloned().map(Ok), BTreeMap::new(), None, 2).unwrap();
        assert_eq!(items.len(), 2);
        assert!(more);
        // The last page is exactly full: nothing follows.
        let rest = present[3..].iter().cloned().map(Ok);
        let (items, more) = page(rest, BTreeMap::new(), Some("/k2"), 2).unwrap();
        assert_eq!(keys(&items), [("/k3", &b"v"[..]), ("/k4", b"v")]);
        assert!(!more);
    }

    #[test]
    fn a_page_full_before_keys_that_did_not_exist_yet_has_no_more() {
        // /b was created after the listed revision: the page ends at /a with nothing more.
        let present = [kv("/a", "a", 1), kv("/b", "b", 5)];
        let changes = [event(EventKind::Put, kv("/b", "b", 5), None)];
        let then = state_before(&changes);
        let (items, more) = page(present.iter().cloned().map(Ok), then, None, 1).unwrap();
        assert_eq!(keys(&items), [("/a", &b"a"[..])]);
        assert!(!more);
    }

    #[test]
    fn older_values_before_the_continue_key_are_skipped() {
        let changes = [event(
            EventKind::Delete,
            kv("/a", "a", 5),
            Some(kv("/a", "a", 1)),
        )];
        let present = [kv("/c", "c", 2)];
        let then = state_before(&changes);
        let (items, _) = page(present.iter().cloned().map(Ok), then, Some("/b"), 0).unwrap();
        assert_eq!(keys(&items), [("/c", &b"c"[..])]);
    }

    #[test]
    fn a_read_failure_fails_the_page() {
        let failing = [Err(crate::StoreError::Closed)].into_iter();
        assert!(page(failing, BTreeMap::new(), None, 0).is_err());
    }
}
