//! A short-lived cache in front of the provider factory's object lookups.
//!
//! Every call for a Proxmox target's provider reads the ProxmoxCluster and
//! its credentials Secret (to build the provider, or to see that the one
//! kept still fits: `kept_providers`): without a cache a rollout spends a
//! large share of its API requests on these two reads, repeated for every
//! target (docs/benchmarks.md counts the requests). Entries live for `ttl`,
//! so a changed endpoint list or a rotated credential takes effect within
//! that time. Entries are shared (`Arc`), never copied per call.
//!
//! Misses are read one at a time per object: the reconciles that miss one
//! object together (a rollout's first wave, or all of them when an entry
//! expires) wait for one read instead of each making it, while a read of
//! another object goes on beside it. Every lookup, its wait for a read of
//! the same object included, ends within the cache's deadline: a read that
//! hangs (an API server connection that silently died) fails the lookups
//! of its own object, and only those, with [`ProviderError::Timeout`].

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::ProviderError;
use crate::factory::ObjectLookup;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use vrouter_api::ProxmoxCluster;

/// How long a looked-up object is reused.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long one lookup may take, its wait for another reconcile's read of
/// the same object included. Shorter than the client's request deadline
/// (`api_client::ApiTimeouts::request`): a provider build is a step of a
/// reconcile, which fails and is retried rather than wait on one read.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

type Key = (String, String);

struct Entries<T> {
    map: Mutex<HashMap<Key, (Instant, Option<T>)>>,
    /// One lock per object being read; held while it is read. An entry
    /// goes when no lookup holds or waits for it.
    reads: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl<T: Clone> Entries<T> {
    fn new() -> Self {
        Entries {
            map: Mutex::new(HashMap::new()),
            reads: Mutex::new(HashMap::new()),
        }
    }

    /// The read lock of `key`, shared by every lookup of it now.
    fn read_lock(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        reads.retain(|_, lock| Arc::strong_count(lock) > 1);
        reads.entry(key.clone()).or_default().clone()
    }

    fn fresh(&self, key: &Key, ttl: Duration) -> Option<Option<T>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, value)| value.clone())
    }

    fn store(&self, key: Key, value: Option<T>, ttl: Duration) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Expired entries go on each store, so the map holds at most what
        // was read within one ttl.
        map.retain(|_, (at, _)| at.elapsed() < ttl);
        map.insert(key, (Instant::now(), value));
    }
}

/// `object` without its managed fields, which no provider reads: they are
/// most of a cached object's size.
fn without_managed_fields<K: kube::Resource + Clone>(object: Arc<K>) -> Arc<K> {
    let mut object = Arc::unwrap_or_clone(object);
    object.meta_mut().managed_fields = None;
    Arc::new(object)
}

/// Wraps another lookup; errors are never cached.
pub struct CachedLookup<L> {
    inner: L,
    ttl: Duration,
    secrets: Entries<Arc<Secret>>,
    clusters: Entries<Arc<ProxmoxCluster>>,
    namespaces: Entries<BTreeMap<String, String>>,
    deadline: Duration,
}

impl<L> CachedLookup<L> {
    pub fn new(inner: L, ttl: Duration) -> Self {
        CachedLookup {
            inner,
            ttl,
            secrets: Entries::new(),
            clusters: Entries::new(),
            namespaces: Entries::new(),
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// The lookup behind the cache.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The same cache with each lookup bounded by `deadline`.
    pub fn with_deadline(self, deadline: Duration) -> Self {
        CachedLookup { deadline, ..self }
    }

    /// `key` from `entries` while fresh, else from `read`, within the
    /// deadline. One read of `key` at a time: a reconcile that waited finds
    /// what the one before it read.
    async fn read_through<T, F, Fut>(
        &self,
        entries: &Entries<T>,
        what: &str,
        key: Key,
        read: F,
    ) -> Result<Option<T>, ProviderError>
    where
        T: Clone,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<T>, ProviderError>>,
    {
        if let Some(hit) = entries.fresh(&key, self.ttl) {
            return Ok(hit);
        }
        let lookup = async {
            let lock = entries.read_lock(&key);
            let _reading = lock.lock().await;
            if let Some(hit) = entries.fresh(&key, self.ttl) {
                return Ok(hit);
            }
            let value = read().await?;
            entries.store(key.clone(), value.clone(), self.ttl);
            Ok(value)
        };
        tokio::time::timeout(self.deadline, lookup).await.unwrap_or_else(|_| {
            Err(ProviderError::Timeout {
                operation: format!("looking up {what} {}", display(&key)),
                after: self.deadline,
            })
        })
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn display((namespace, name): &Key) -> String {
    match namespace.is_empty() {
        true => name.clone(),
        false => format!("{namespace}/{name}"),
    }
}

#[async_trait]
impl<L: ObjectLookup> ObjectLookup for CachedLookup<L> {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Arc<Secret>>, ProviderError> {
        let key = (namespace.to_owned(), name.to_owned());
        self.read_through(&self.secrets, "Secret", key, || async {
            Ok(self.inner.secret(namespace, name).await?.map(without_managed_fields))
        })
        .await
    }

    async fn proxmox_cluster(&self, namespace: &str, name: &str) -> Result<Option<Arc<ProxmoxCluster>>, ProviderError> {
        let key = (namespace.to_owned(), name.to_owned());
        self.read_through(&self.clusters, "ProxmoxCluster", key, || async {
            Ok(self
                .inner
                .proxmox_cluster(namespace, name)
                .await?
                .map(without_managed_fields))
        })
        .await
    }

    /// A withdrawn grant takes effect within `ttl`.
    async fn namespace_annotations(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, ProviderError> {
        let key = (String::new(), name.to_owned());
        self.read_through(&self.namespaces, "Namespace", key, || {
            self.inner.namespace_annotations(name)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts reads and answers with a Secret named after the read count,
    /// so a test can tell a cached answer from a fresh one.
    #[derive(Default)]
    struct Counting {
        reads: AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl ObjectLookup for Counting {
        async fn secret(&self, _namespace: &str, name: &str) -> Result<Option<Arc<Secret>>, ProviderError> {
            let n = self.reads.fetch_add(1, Ordering::SeqCst);
            // Like the API server, answer after other tasks had a turn.
            tokio::task::yield_now().await;
            if name == "hangs" {
                // A request on a connection that silently died.
                futures::future::pending::<()>().await;
            }
            if self.fail.load(Ordering::SeqCst) {
                return Err(ProviderError::InvalidTarget {
                    target: name.into(),
                    reason: "unreachable".into(),
                });
            }
            let mut secret = Secret::default();
            secret.metadata.name = Some(format!("{name}-{n}"));
            secret.metadata.managed_fields = Some(vec![Default::default()]);
            Ok((name != "missing").then_some(Arc::new(secret)))
        }

        async fn proxmox_cluster(
            &self,
            _namespace: &str,
            _name: &str,
        ) -> Result<Option<Arc<ProxmoxCluster>>, ProviderError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(None)
        }
    }

    fn name(secret: Option<Arc<Secret>>) -> String {
        secret.and_then(|s| s.metadata.name.clone()).unwrap_or_default()
    }

    #[tokio::test]
    async fn a_read_within_the_ttl_is_served_from_the_cache_per_object() {
        let cache = CachedLookup::new(Counting::default(), Duration::from_secs(60));
        assert_eq!(name(cache.secret("ns", "a").await.unwrap()), "a-0");
        assert_eq!(name(cache.secret("ns", "a").await.unwrap()), "a-0");
        assert_eq!(name(cache.secret("other", "a").await.unwrap()), "a-1");
        assert_eq!(name(cache.secret("ns", "b").await.unwrap()), "b-2");
        assert!(cache.secret("ns", "missing").await.unwrap().is_none());
        assert!(cache.secret("ns", "missing").await.unwrap().is_none());
        assert!(cache.proxmox_cluster("ns", "a").await.unwrap().is_none());
        assert!(cache.proxmox_cluster("ns", "a").await.unwrap().is_none());
        assert_eq!(
            cache.inner.reads.load(Ordering::SeqCst),
            5,
            "one read per distinct object"
        );
    }

    #[tokio::test]
    async fn cached_objects_leave_their_managed_fields_behind() {
        let cache = CachedLookup::new(Counting::default(), Duration::from_secs(60));
        for _ in 0..2 {
            let secret = cache.secret("ns", "a").await.unwrap().unwrap();
            assert_eq!(secret.metadata.name.as_deref(), Some("a-0"));
            assert_eq!(secret.metadata.managed_fields, None);
        }
    }

    #[tokio::test]
    async fn reconciles_that_miss_together_share_one_read() {
        let cache = CachedLookup::new(Counting::default(), Duration::from_secs(60));
        let names = futures::future::join_all((0..32).map(|_| cache.secret("ns", "a"))).await;
        assert!(names.into_iter().all(|n| name(n.unwrap()) == "a-0"));
        assert_eq!(cache.inner.reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_expired_entry_is_read_again() {
        let cache = CachedLookup::new(Counting::default(), Duration::ZERO);
        assert_eq!(name(cache.secret("ns", "a").await.unwrap()), "a-0");
        assert_eq!(name(cache.secret("ns", "a").await.unwrap()), "a-1");
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let cache = CachedLookup::new(Counting::default(), Duration::from_secs(60));
        cache.inner.fail.store(true, Ordering::SeqCst);
        assert!(cache.secret("ns", "a").await.is_err());
        cache.inner.fail.store(false, Ordering::SeqCst);
        assert_eq!(name(cache.secret("ns", "a").await.unwrap()), "a-1");
    }

    fn timed_out(result: Result<Option<Arc<Secret>>, ProviderError>) -> String {
        match result {
            Err(e @ ProviderError::Timeout { .. }) => e.to_string(),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_hangs_fails_its_own_lookups_at_the_deadline_and_blocks_no_other() {
        let cache =
            CachedLookup::new(Counting::default(), Duration::from_secs(60)).with_deadline(Duration::from_secs(10));
        let started = tokio::time::Instant::now();
        let (hung, waited, others) = tokio::join!(
            cache.secret("ns", "hangs"),
            cache.secret("ns", "hangs"),
            // Bounded, so that a lookup blocked behind the hung read fails
            // this test instead of hanging it.
            tokio::time::timeout(Duration::from_secs(3600), async {
                tokio::task::yield_now().await;
                (cache.secret("ns", "a").await, cache.secret("other", "hangs-not").await)
            }),
        );
        let (a, other) = others.expect("lookups of other objects finish while one read hangs");
        assert_eq!(name(a.unwrap()), "a-1");
        assert_eq!(name(other.unwrap()), "hangs-not-2");
        // The hung read and the lookup that waited for it: one request, both
        // failed at the deadline, naming the object.
        let message = timed_out(hung);
        assert!(
            message.contains("Secret ns/hangs") && message.contains("10s"),
            "{message}"
        );
        timed_out(waited);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert_eq!(cache.inner.reads.load(Ordering::SeqCst), 3, "one read per object");
        // The next lookup reads again (a failure is not cached).
        timed_out(cache.secret("ns", "hangs").await);
        assert_eq!(cache.inner.reads.load(Ordering::SeqCst), 4);
    }
}
