//! The caches in front of TokenReview and SubjectAccessReview: a hit saves the API server a
//! review on every call, and the TTLs bound how long a revoked token or Role is still honoured.

use std::time::Duration;

use moka::{policy::EvictionPolicy, sync::Cache};

use super::{Permission, TokenKey, UserInfo};

/// How long a successful TokenReview is trusted without asking the API server again.
const TOKEN_TTL: Duration = Duration::from_secs(30);
/// How long a granted permission is reused; short, so a revoked Role applies quickly.
const GRANT_TTL: Duration = Duration::from_secs(10);
/// Upper bound of each cache, so a flood of distinct tokens cannot grow memory without bound.
const CACHE_CAPACITY: u64 = 1024;

pub(super) struct Caches {
    /// The user each token was reviewed as, by its digest.
    pub(super) users: Cache<TokenKey, UserInfo>,
    /// What each identity CSR says, by name (every proof is still checked against it).
    pub(super) csrs: Cache<String, std::sync::Arc<super::proof::CsrFacts>>,
    /// The permissions the API server granted. Refusals are not kept: a caller who was just
    /// given a Role must not be turned away for the rest of the TTL.
    pub(super) grants: Cache<(UserInfo, Permission), ()>,
}

impl Caches {
    pub(super) fn new(user_ttl: Duration, grant_ttl: Duration, capacity: u64) -> Self {
        Self {
            users: ttl_cache(user_ttl, capacity),
            csrs: ttl_cache(user_ttl, capacity),
            grants: ttl_cache(grant_ttl, capacity),
        }
    }
}

impl Default for Caches {
    fn default() -> Self {
        Self::new(TOKEN_TTL, GRANT_TTL, CACHE_CAPACITY)
    }
}

fn ttl_cache<K, V>(ttl: Duration, capacity: u64) -> Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    Cache::builder()
        .time_to_live(ttl)
        .max_capacity(capacity)
        // Every caller just reviewed is kept, the least recently seen making room: TinyLFU
        // (moka's default) would turn new callers away while the cache is full, and each of
        // their calls would cost a review until they had called often enough.
        .eviction_policy(EvictionPolicy::lru())
        .build()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::{super::BearerToken, *};

    const LONG: Duration = Duration::from_secs(3600);

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: name.into(),
            ..UserInfo::default()
        }
    }

    /// Waits for `present` to turn false: a bounded wait for an expiry, not a measured one,
    /// failing only when the entry outlives a deadline far past its TTL.
    fn expires(what: &str, mut present: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while present() {
            assert!(Instant::now() < deadline, "{what} outlived its TTL");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_grant_is_reused_within_its_ttl_and_then_expires() {
        let key = (user("alice"), Permission::agent_status("ns"));
        let caches = Caches::new(LONG, LONG, 16);
        caches.grants.insert(key.clone(), ());
        assert!(caches.grants.get(&key).is_some());
        let other = (user("bob"), Permission::agent_status("ns"));
        assert!(caches.grants.get(&other).is_none(), "grants are per user");

        let caches = Caches::new(LONG, Duration::from_millis(1), 16);
        caches.grants.insert(key.clone(), ());
        expires("the grant", || caches.grants.get(&key).is_some());
    }

    #[test]
    fn a_reviewed_user_expires_after_its_ttl() {
        let key = BearerToken::new("t").cache_key();
        let caches = Caches::new(Duration::from_millis(1), LONG, 16);
        caches.users.insert(key, user("alice"));
        expires("the user", || caches.users.get(&key).is_some());
    }

    #[test]
    fn each_cache_stays_bounded_and_the_least_recent_goes_first() {
        let caches = Caches::new(LONG, LONG, 10);
        let keys: Vec<TokenKey> = (0..100)
            .map(|i| BearerToken::new(format!("token-{i}")).cache_key())
            .collect();
        for key in &keys {
            caches.users.insert(*key, user("alice"));
        }
        // moka applies evictions in batches; this applies the pending ones now.
        caches.users.run_pending_tasks();
        assert_eq!(caches.users.entry_count(), 10);
        assert_eq!(caches.users.get(&keys[0]), None, "the first in is evicted");
        assert_eq!(caches.users.get(&keys[99]), Some(user("alice")));
    }
}
