//! The finalizer the controllers put on objects whose deletion they must
//! see: added before the first change they make, removed when they are done.

use kube::api::Patch;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::runtime::status_writes::namespaced_api;

/// Adds `finalizer` if missing. Returns whether a write was made.
pub async fn ensure_finalizer<K>(client: &kube::Client, object: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    if object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    // The resourceVersion makes this a compare-and-swap: a concurrent change
    // to the list is a conflict, retried, never overwritten.
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}});
    namespaced_api(client, object)
        .patch(
            &object.name_any(),
            &crate::runtime::context::patch_params(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(true)
}

/// Removes `finalizer` if present.
pub async fn remove_finalizer<K>(client: &kube::Client, object: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    if !object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let finalizers: Vec<&String> = object.finalizers().iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}});
    match namespaced_api(client, object)
        .patch(
            &object.name_any(),
            &crate::runtime::context::patch_params(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
