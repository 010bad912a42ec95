//! The finalizer the controllers put on objects whose deletion they must
//! see: added before the first change they make, removed when they are done.
//! [`follow_up`] is the one rule for what a reconcile does after either
//! step; [`ensure`] and [`release`] apply it, so every controller follows it.

use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::runtime::status_writes::namespaced_api;

/// What a reconcile found or did about its finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The finalizer was there already: nothing written.
    Present,
    /// The finalizer was just added.
    Added,
    /// The object is being deleted; its finalizer is gone now.
    Released,
}

/// What follows `step`: `None` when the reconcile goes on with the object.
/// After a write the reconcile ends and waits for the object to change:
/// the write's own watch event brings the object as written, whereas a
/// requeue now would read the cache from before it, and the next write
/// from that stale copy would be a conflict. A released object has nothing
/// left to reconcile.
pub fn follow_up(step: Step) -> Option<Action> {
    match step {
        Step::Present => None,
        Step::Added | Step::Released => Some(Action::await_change()),
    }
}

/// Adds `finalizer` if missing; `Some` is what the reconcile returns then
/// ([`follow_up`]), `None` that it goes on.
pub async fn ensure<K>(client: &kube::Client, object: &K, finalizer: &str) -> Result<Option<Action>, kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let step = match ensure_finalizer(client, object, finalizer).await? {
        true => Step::Added,
        false => Step::Present,
    };
    Ok(follow_up(step))
}

/// Removes `finalizer` from an object being deleted; returns what the
/// reconcile returns then ([`follow_up`]).
pub async fn release<K>(client: &kube::Client, object: &K, finalizer: &str) -> Result<Action, kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    remove_finalizer(client, object, finalizer).await?;
    Ok(follow_up(Step::Released).unwrap_or_else(Action::await_change))
}

/// Adds `finalizer` if missing. Returns whether a write was made.
async fn ensure_finalizer<K>(client: &kube::Client, object: &K, finalizer: &str) -> Result<bool, kube::Error>
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
async fn remove_finalizer<K>(client: &kube::Client, object: &K, finalizer: &str) -> Result<(), kube::Error>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_goes_on_only_when_its_finalizer_was_there() {
        let cases = [
            (Step::Present, None),
            (Step::Added, Some(Action::await_change())),
            (Step::Released, Some(Action::await_change())),
        ];
        for (step, want) in cases {
            assert_eq!(follow_up(step), want, "{step:?}");
        }
    }
}
