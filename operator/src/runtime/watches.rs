//! One watch and one store per kind that several controllers read
//! (VRouterTarget, VRouterConfig, VRouterStatus), instead of one of each
//! per controller: at 10,000 routers every store copy of a kind costs tens
//! of MiB, and each extra watch is a connection the API server serves.
//!
//! A subscriber gets the same events its own `watcher` followed by
//! `reflect` would give, in the same order, each sent after the shared
//! store holds it: a reconcile woken by an event still reads what that
//! event left in the store. Every subscriber joins before the watch runs,
//! so each sees the first list whole; joining later is a programming error
//! and panics rather than start a controller from half a list.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use futures::channel::mpsc::{self, UnboundedSender};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use vrouter_api::{VRouterConfig, VRouterStatus, VRouterTarget};

use crate::runtime::reconciler::{Scope, Shutdown};

/// The watch events a subscriber reads: what `watcher(..).reflect(..)`
/// yields, errors excepted (the shared watch logs them and backs off).
pub type Events<K> = futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// The kinds watched once for every controller.
pub struct Watches {
    pub targets: SharedWatch<VRouterTarget>,
    pub configs: SharedWatch<VRouterConfig>,
    pub statuses: SharedWatch<VRouterStatus>,
}

impl Watches {
    pub fn new(scope: &Scope) -> Watches {
        Watches {
            targets: SharedWatch::new(scope.api()),
            configs: SharedWatch::new(scope.api()),
            statuses: SharedWatch::new(scope.api()),
        }
    }

    /// The three stores, for the object gauges of `/metrics`.
    pub fn stores(&self) -> crate::runtime::object_gauges::Stores {
        crate::runtime::object_gauges::Stores {
            configs: self.configs.store(),
            targets: self.targets.store(),
            statuses: self.statuses.store(),
        }
    }

    /// Runs the three watches until `shutdown`.
    pub async fn run(&self, shutdown: Shutdown) {
        futures::join!(
            self.targets.run(shutdown.clone()),
            self.configs.run(shutdown.clone()),
            self.statuses.run(shutdown),
        );
    }
}

/// One kind's watch, its store, and the subscribers its events go to.
pub struct SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    /// Taken by `run`; subscribing holds this lock, so no subscriber can
    /// join a watch already running.
    start: Mutex<Option<(Api<K>, Writer<K>)>>,
    subscribers: Arc<Mutex<Vec<UnboundedSender<watcher::Event<K>>>>>,
}

impl<K> SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub fn new(api: Api<K>) -> SharedWatch<K> {
        let (store, writer) = reflector::store::<K>();
        SharedWatch {
            store,
            start: Mutex::new(Some((api, writer))),
            subscribers: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The store every subscriber reads.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Every event of the watch, from its first list on.
    ///
    /// # Panics
    /// When the watch already runs: call it while building the controllers,
    /// before [`Watches::run`].
    pub fn subscribe(&self) -> Events<K> {
        let start = lock(&self.start);
        assert!(
            start.is_some(),
            "a {} subscriber must join before the shared watch runs",
            K::kind(&())
        );
        let (sender, receiver) = mpsc::unbounded();
        lock(&self.subscribers).push(sender);
        receiver.map(Ok).boxed()
    }

    /// Watches until `shutdown`; a second call returns at once.
    pub async fn run(&self, shutdown: Shutdown) {
        let Some((api, writer)) = lock(&self.start).take() else {
            return;
        };
        let kind = K::kind(&());
        let subscribers = self.subscribers.clone();
        let watching = watcher(api, watcher::Config::default())
            .modify(drop_managed_fields)
            .default_backoff()
            .reflect(writer)
            .for_each(move |event| {
                match event {
                    // Sent after `reflect` stored it; a dropped subscriber
                    // is forgotten.
                    Ok(event) => lock(&subscribers).retain(|s| s.unbounded_send(event.clone()).is_ok()),
                    Err(error) => tracing::warn!(%kind, %error, "watch failed; retrying with backoff"),
                }
                std::future::ready(())
            });
        tokio::select! {
            _ = watching => {}
            _ = shutdown => {}
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops an object's managedFields before a store keeps it: no reconciler
/// reads them, and they are most of a small object's size.
pub fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use kube::{Client, Config};

    use super::*;

    /// A watch whose API server is nowhere (a closed loopback port): these
    /// tests never need an answer.
    fn watch() -> SharedWatch<VRouterTarget> {
        let config = Config::new("http://127.0.0.1:9".parse().unwrap());
        SharedWatch::new(Api::namespaced(Client::try_from(config).unwrap(), "ns"))
    }

    fn stopped() -> Shutdown {
        std::future::ready(()).boxed().shared()
    }

    #[tokio::test]
    #[should_panic(expected = "a VRouterTarget subscriber must join before the shared watch runs")]
    async fn subscribing_after_the_watch_ran_is_refused() {
        let watch = watch();
        let _early = watch.subscribe();
        watch.run(stopped()).await;
        let _late = watch.subscribe();
    }

    #[tokio::test]
    async fn a_second_run_returns_at_once() {
        let watch = watch();
        watch.run(stopped()).await;
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            watch.run(futures::future::pending().boxed().shared()),
        )
        .await
        .expect("the second run returns without waiting for shutdown");
    }
}
