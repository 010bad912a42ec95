//! One watch and one store per kind that several controllers read
//! (VRouterTarget, VRouterConfig, VRouterStatus), instead of one of each
//! per controller: at 10,000 routers every store copy of a kind costs tens
//! of MiB, and each extra watch is a connection the API server serves.
//!
//! A subscriber gets the same events its own `watcher` followed by
//! `reflect` would give, in the same order, each sent after the shared
//! store holds it: a reconcile woken by an event still reads what that
//! event left in the store. A subscriber that joins after the watch has
//! started gets the store's content as a list of its own (`Init`, one
//! `InitApply` per object, `InitDone`), and one that joins during a list
//! gets it when that list is done, so none starts from half a list.

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

use crate::reconciler::{Scope, Shutdown};

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
    start: Mutex<Option<(Api<K>, Writer<K>)>>,
    subscribers: Arc<Mutex<Subscribers<K>>>,
}

struct Subscribers<K> {
    live: Vec<UnboundedSender<watcher::Event<K>>>,
    /// Joined while a list was under way: sent the store once it is done.
    after_list: Vec<UnboundedSender<watcher::Event<K>>>,
    listing: bool,
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
            subscribers: Arc::new(Mutex::new(Subscribers {
                live: Vec::new(),
                after_list: Vec::new(),
                listing: false,
            })),
        }
    }

    /// The store every subscriber reads.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The events from now on, as a watch of the subscriber's own would
    /// give them (see the module's comment for a late subscriber).
    pub fn subscribe(&self) -> Events<K> {
        let (sender, receiver) = mpsc::unbounded();
        let mut subscribers = lock(&self.subscribers);
        if subscribers.listing {
            subscribers.after_list.push(sender);
        } else {
            if is_ready(&self.store) {
                send_store(&sender, &self.store);
            }
            subscribers.live.push(sender);
        }
        receiver.map(Ok).boxed()
    }

    /// Watches until `shutdown`; a second call returns at once.
    pub async fn run(&self, shutdown: Shutdown) {
        let Some((api, writer)) = lock(&self.start).take() else {
            return;
        };
        let kind = K::kind(&());
        let (store, subscribers) = (self.store.clone(), self.subscribers.clone());
        let watching = watcher(api, watcher::Config::default())
            .modify(drop_managed_fields)
            .default_backoff()
            .reflect(writer)
            .for_each(move |event| {
                match event {
                    Ok(event) => lock(&subscribers).dispatch(event, &store),
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

impl<K> Subscribers<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Sends `event`, already in `store`, to every subscriber still there.
    fn dispatch(&mut self, event: watcher::Event<K>, store: &Store<K>) {
        match &event {
            watcher::Event::Init => self.listing = true,
            watcher::Event::InitDone => self.listing = false,
            _ => {}
        }
        self.live.retain(|s| s.unbounded_send(event.clone()).is_ok());
        if matches!(event, watcher::Event::InitDone) {
            for sender in std::mem::take(&mut self.after_list) {
                if send_store(&sender, store) {
                    self.live.push(sender);
                }
            }
        }
    }
}

/// Sends `store`'s content as one list; false when the subscriber is gone.
fn send_store<K>(sender: &UnboundedSender<watcher::Event<K>>, store: &Store<K>) -> bool
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    std::iter::once(watcher::Event::Init)
        .chain(store.state().iter().map(|o| watcher::Event::InitApply(K::clone(o))))
        .chain(std::iter::once(watcher::Event::InitDone))
        .all(|event| sender.unbounded_send(event).is_ok())
}

fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops an object's managedFields before a store keeps it: no reconciler
/// reads them, and they are most of a small object's size.
pub fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}
