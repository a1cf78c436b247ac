//! A deduplicating work queue: a key waits at most once, so the queue is bounded by the
//! number of distinct keys and producers never block (level-triggered: the worker reads the
//! latest state when it pops a key, however many changes were coalesced).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Keys waiting for a worker.
pub struct Queue<K> {
    inner: Mutex<(VecDeque<K>, HashSet<K>)>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            inner: Mutex::new((VecDeque::new(), HashSet::new())),
            notify: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    fn lock(&self) -> MutexGuard<'_, (VecDeque<K>, HashSet<K>)> {
        // The data stays consistent across a panicking holder: each operation is one step.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a key unless it already waits.
    pub fn push(&self, key: K) {
        let mut g = self.lock();
        if g.1.insert(key.clone()) {
            g.0.push_back(key);
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Takes the next key without waiting.
    pub fn try_pop(&self) -> Option<K> {
        let mut g = self.lock();
        let k = g.0.pop_front()?;
        g.1.remove(&k);
        Some(k)
    }

    /// Waits for the next key.
    pub async fn pop(&self) -> K {
        loop {
            let notified = self.notify.notified();
            if let Some(k) = self.try_pop() {
                return k;
            }
            notified.await;
        }
    }

    /// Keys waiting.
    pub fn len(&self) -> usize {
        self.lock().0.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedups_and_keeps_order() {
        let q = Queue::default();
        for k in [1, 2, 1, 3, 2] {
            q.push(k);
        }
        assert_eq!(q.len(), 3);
        assert_eq!((q.pop().await, q.pop().await, q.pop().await), (1, 2, 3));
        assert!(q.is_empty());
        q.push(1);
        assert_eq!(q.try_pop(), Some(1));
        assert_eq!(q.try_pop(), None);
    }
}
