//! The caches in front of TokenReview and SubjectAccessReview.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a successful TokenReview is trusted without asking the API server again.
pub(super) const TOKEN_TTL: Duration = Duration::from_secs(30);
/// How long a granted permission is reused; short, so a revoked Role applies quickly.
pub(super) const DECISION_TTL: Duration = Duration::from_secs(10);
/// Upper bound of each cache, so a flood of distinct tokens cannot grow memory without bound.
pub(super) const CACHE_CAPACITY: usize = 1024;

/// A small map whose entries expire after `ttl`, holding at most `capacity` entries.
pub(super) struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub(super) fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        // A panic while holding the lock leaves a map that is still valid; keep using it.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some((at, value)) if at.elapsed() < self.ttl => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub(super) fn insert(&self, key: K, value: V) {
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if entries.len() >= self.capacity {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    entries.remove(&oldest);
                }
            }
        }
        entries.insert(key, (Instant::now(), value));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_expires_entries_and_stays_bounded() {
        let cache = TtlCache::new(Duration::from_millis(50), 2);
        cache.insert(1, "a");
        assert_eq!(cache.get(&1), Some("a"));
        std::thread::sleep(Duration::from_millis(2));
        cache.insert(2, "b");
        std::thread::sleep(Duration::from_millis(2));
        cache.insert(3, "c");
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&1), None, "the oldest entry is evicted first");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(&3), None, "expired");
    }
}
