//! Reads of the objects a controller watches. They come from the
//! controller's reflector store: kube-runtime stores an event before it
//! emits it, so a reconcile sees what the event that woke it left. Only an
//! object the store does not hold is asked of the API server, once: one
//! created a moment ago whose event has not yet arrived on this watch
//! (another watch's event woke the reconcile first), where "not found"
//! would be a false alarm with a warning event. A steady state never
//! takes that path.

use std::fmt::Debug;
use std::sync::Arc;

use futures::FutureExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use serde::de::DeserializeOwned;

/// `name` in `namespace`, from `store` once its first list is in; from the
/// API server before that, or when the store does not hold it.
pub async fn get<K>(
    store: &Store<K>,
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> kube::Result<Option<Arc<K>>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    // Not waited for: kube-runtime's readiness signal wakes only the last
    // of several tasks waiting on it, and the others hang forever (seen as
    // a config never reconciled again in vmi_watch.rs). Before the first
    // list is in, the API server answers instead.
    let ready = matches!(store.wait_until_ready().now_or_never(), Some(Ok(())));
    if ready && let Some(object) = store.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some(object));
    }
    let fetched = Api::<K>::namespaced(client.clone(), namespace).get_opt(name).await?;
    Ok(fetched.map(Arc::new))
}

/// Waits until `store`'s first list is in; false when its watch is gone.
/// Looks every 50 ms rather than awaiting kube-runtime's readiness signal,
/// which wakes only the last of several tasks waiting on it.
pub async fn ready<K>(store: &Store<K>) -> bool
where
    K: Resource<DynamicType = ()> + Clone,
{
    loop {
        match store.wait_until_ready().now_or_never() {
            Some(result) => return result.is_ok(),
            None => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}
