//! When a client asks discovery again for a kind it needs but no server serves yet: at
//! once when the federation's CustomResourceDefinitions change (the usual way such a kind
//! appears, [`definition_changes`]), else on an exponential back-off, the fallback for what
//! no definition will bring (a typo in a policy) and for a definition event that came
//! before the kind was served. [`Retries`] is the pure decision for many kinds (the loop
//! passes the time in); [`until_served`] runs it for one kind.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher as watch_fn};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Report;

/// The fallback back-off between discovery attempts of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failed attempt.
    pub initial: Duration,
    /// The longest wait; each failure doubles the last one up to this.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    due: Instant,
    /// The wait that gave `due`; the next failure doubles it.
    delay: Duration,
}

/// The kinds whose discovery failed, and when each is tried again.
#[derive(Debug)]
pub struct Retries<K> {
    backoff: Backoff,
    pending: BTreeMap<K, Pending>,
}

impl<K: Ord + Clone> Retries<K> {
    /// No kind pending.
    pub fn new(backoff: Backoff) -> Self {
        Retries {
            backoff,
            pending: BTreeMap::new(),
        }
    }

    /// Whether `kind` may be tried at `now`: never tried, or its wait is over.
    pub fn ready(&self, kind: &K, now: Instant) -> bool {
        self.pending.get(kind).is_none_or(|p| p.due <= now)
    }

    /// Discovery of `kind` failed at `now`: its next attempt waits the initial delay, or
    /// twice the last one, at most the maximum.
    pub fn failed(&mut self, kind: K, now: Instant) {
        let delay = match self.pending.get(&kind) {
            Some(p) => p.delay.saturating_mul(2).min(self.backoff.max),
            None => self.backoff.initial.min(self.backoff.max),
        };
        self.pending.insert(
            kind,
            Pending {
                due: now + delay,
                delay,
            },
        );
    }

    /// Keeps only the kinds `wanted` holds: one found, or no longer named, is forgotten.
    pub fn retain(&mut self, mut wanted: impl FnMut(&K) -> bool) {
        self.pending.retain(|k, _| wanted(k));
    }

    /// Something that may serve a pending kind changed: every one is due at `now`. The
    /// delays are kept, so a kind still missing afterwards waits longer, not from scratch.
    pub fn expedite(&mut self, now: Instant) {
        for p in self.pending.values_mut() {
            p.due = p.due.min(now);
        }
    }

    /// When the next pending kind is due; `None` when none is pending.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.due).min()
    }

    /// Kinds waiting for another attempt.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no kind waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// One `Ok` per change of the federation's CustomResourceDefinitions (an initial list
/// counts as one): the moments a kind not served yet may have become served. A CRD is
/// served before its `Established` condition is written, so one of its events always
/// comes after discovery can find it. The watch retries with the default back-off; its
/// errors come through for the caller to count and log.
pub fn definition_changes(client: Client) -> impl Stream<Item = Result<(), watcher::Error>> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    watch_fn(api, watcher::Config::default())
        .default_backoff()
        .filter_map(|ev| {
            let out = match ev {
                Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => Some(Ok(())),
                Ok(Event::Init | Event::InitApply(_)) => None,
                Err(e) => Some(Err(e)),
            };
            std::future::ready(out)
        })
}

/// The first success of `look` (a discovery of one kind): tried at once, then again as
/// soon as `changes` says the definitions changed, or when the back-off after the last
/// failure ends (the fallback; it alone drives the retries once `changes` is closed).
/// `what` names the kind in the log of each failure.
pub async fn until_served<T, E, F, Fut>(
    what: &str,
    backoff: Backoff,
    mut changes: watch::Receiver<()>,
    mut look: F,
) -> T
where
    E: std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut retries = Retries::new(backoff);
    let mut open = true;
    loop {
        // Marked seen before the look: a change after this wakes the wait below rather
        // than being lost.
        changes.borrow_and_update();
        let error = match look().await {
            Ok(t) => return t,
            Err(e) => e,
        };
        retries.failed((), Instant::now());
        let due = retries.next_due().unwrap_or_else(Instant::now);
        tracing::debug!(kind = what, error = %Report(&error), retry_in = ?due.saturating_duration_since(Instant::now()), "kind not served yet");
        tokio::select! {
            changed = changes.changed(), if open => match changed {
                Ok(()) => retries.expedite(Instant::now()),
                Err(_) => {
                    open = false;
                    tokio::time::sleep_until(due).await;
                }
            },
            () = tokio::time::sleep_until(due) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn retries() -> Retries<&'static str> {
        Retries::new(Backoff {
            initial: S,
            max: 4 * S,
        })
    }

    #[test]
    fn a_new_kind_is_ready_and_failures_back_off_to_the_cap() {
        let t0 = Instant::now();
        let mut r = retries();
        assert!(r.ready(&"Widget", t0), "never tried: at once");
        assert_eq!(r.next_due(), None);
        let mut at = t0;
        for want in [1u32, 2, 4, 4, 4] {
            r.failed("Widget", at);
            let due = r.next_due().expect("pending");
            assert_eq!(due - at, want * S);
            assert!(!r.ready(&"Widget", due - Duration::from_millis(1)));
            assert!(r.ready(&"Widget", due));
            at = due;
        }
        assert!(r.ready(&"Gadget", t0), "another kind is not held back");
    }

    #[test]
    fn a_definition_change_makes_every_pending_kind_due_at_once() {
        let t0 = Instant::now();
        let mut r = retries();
        r.failed("Widget", t0);
        r.failed("Widget", t0 + S);
        r.failed("Gadget", t0 + S);
        let t = t0 + S + Duration::from_millis(10);
        assert!(!r.ready(&"Widget", t) && !r.ready(&"Gadget", t));
        r.expedite(t);
        assert!(r.ready(&"Widget", t) && r.ready(&"Gadget", t));
        assert_eq!(r.next_due(), Some(t));
        // Still not served: the back-off goes on from where it was.
        r.failed("Widget", t);
        r.failed("Gadget", t);
        assert!(r.ready(&"Widget", t + 4 * S) && !r.ready(&"Widget", t + 3 * S));
        assert!(r.ready(&"Gadget", t + 2 * S) && !r.ready(&"Gadget", t + S));
        // A kind already due stays due (expedite never delays).
        r.expedite(t + 10 * S);
        assert_eq!(r.next_due(), Some(t + 2 * S));
    }

    #[test]
    fn kinds_found_or_no_longer_named_are_forgotten() {
        let t0 = Instant::now();
        let mut r = retries();
        r.failed("Widget", t0);
        r.failed("Gadget", t0);
        assert_eq!(r.len(), 2);
        r.retain(|k| *k == "Gadget");
        assert_eq!(r.len(), 1);
        assert!(
            r.ready(&"Widget", t0),
            "forgotten: tried at once when named again"
        );
        r.retain(|_| false);
        assert!(r.is_empty());
        assert_eq!(r.next_due(), None);
    }

    /// A discovery that fails until `served` is set, counting its attempts.
    #[derive(Clone, Default)]
    struct Lookup {
        served: std::sync::Arc<std::sync::atomic::AtomicBool>,
        attempts: std::sync::Arc<std::sync::atomic::AtomicU32>,
    }

    impl Lookup {
        async fn look(&self) -> Result<&'static str, std::io::Error> {
            use std::sync::atomic::Ordering::SeqCst;
            self.attempts.fetch_add(1, SeqCst);
            if self.served.load(SeqCst) {
                Ok("widgets")
            } else {
                Err(std::io::Error::other("not served"))
            }
        }

        fn attempts(&self) -> u32 {
            self.attempts.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn serve(&self) {
            self.served.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Lets the spawned task run up to its next wait without moving the paused clock.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn until_served_looks_again_at_once_when_definitions_change() {
        let lookup = Lookup::default();
        let (tx, rx) = watch::channel(());
        let backoff = Backoff {
            initial: S,
            max: 30 * S,
        };
        let l = lookup.clone();
        let task =
            tokio::spawn(async move { until_served("Widget", backoff, rx, || l.look()).await });
        // Not served: the back-off drives the looks (1 s, then 2 s, 4 s ...).
        settle().await;
        assert_eq!(lookup.attempts(), 1, "the first look is at once");
        tokio::time::advance(S).await;
        settle().await;
        assert_eq!(lookup.attempts(), 2, "again after the initial delay");
        tokio::time::advance(S).await;
        settle().await;
        assert_eq!(lookup.attempts(), 2, "the next wait is twice as long");
        // A definition arrives mid-wait: looked up at once, without the clock moving.
        let started = Instant::now();
        lookup.serve();
        tx.send_replace(());
        let got = tokio::time::timeout(Duration::from_millis(1), task)
            .await
            .expect("found without waiting out the back-off")
            .expect("task");
        assert_eq!(got, "widgets");
        assert_eq!(lookup.attempts(), 3);
        assert!(Instant::now() - started < S);
    }

    #[tokio::test(start_paused = true)]
    async fn until_served_falls_back_on_the_back_off_without_definition_events() {
        let lookup = Lookup::default();
        let (tx, rx) = watch::channel(());
        // No definition watch at all: the back-off alone finds the kind.
        drop(tx);
        let backoff = Backoff {
            initial: S,
            max: 2 * S,
        };
        let t0 = Instant::now();
        let l = lookup.clone();
        let task =
            tokio::spawn(async move { until_served("Widget", backoff, rx, || l.look()).await });
        // Looks at 0, 1 s, 3 s, 5 s ... (the cap is 2 s).
        for (at, want) in [(0, 1), (1, 2), (2, 2), (3, 3), (4, 3), (5, 4)] {
            tokio::time::advance((t0 + at * S).saturating_duration_since(Instant::now())).await;
            settle().await;
            assert_eq!(lookup.attempts(), want, "at {at} s");
        }
        lookup.serve();
        tokio::time::advance(2 * S).await;
        settle().await;
        assert_eq!(task.await.expect("task"), "widgets");
        assert_eq!(lookup.attempts(), 5);
    }
}
