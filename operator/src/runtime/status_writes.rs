//! Status writes every controller makes: skipped when nothing changed,
//! conditional on the object's resourceVersion, and as merge patches that
//! carry only what changed.

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The API of `object`'s own namespace.
pub(crate) fn namespaced_api<K>(client: &kube::Client, object: &K) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(client.clone(), &object.namespace().unwrap_or_default())
}

/// A namespaced object whose status is written here (every custom resource
/// of the operator).
pub trait StatusObject:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug
{
}

impl<K> StatusObject for K where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// Writes `status` when it differs from `current`. The write carries the
/// object's resourceVersion, so a status changed meanwhile by someone else
/// (drift detection resetting a phase) is a conflict to retry, not a
/// silently lost update. Returns the object as written, when a write was
/// made.
pub async fn patch_status<K, S>(
    client: &kube::Client,
    object: &K,
    current: Option<&S>,
    status: &S,
) -> Result<Option<K>, kube::Error>
where
    K: StatusObject,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(None);
    }
    write_status(client, object, current, status).await.map(Some)
}

/// Like [`patch_status`], for a status that records something only this
/// write can keep: an exec's exit (qemu-ga reports it once) or a new exec
/// handle. A write lost to a conflict would lose the result and start the
/// apply again. So on a conflict the object is read again, and when its
/// status is still `current` (only metadata or the spec moved, as a label
/// or a new generation does) the same status goes over the new
/// resourceVersion. A status someone else changed is still a conflict.
pub async fn patch_status_keeping_result<K, S>(
    client: &kube::Client,
    object: &K,
    current: &S,
    status: &S,
) -> Result<Option<K>, kube::Error>
where
    K: StatusObject + Serialize,
    S: Serialize + DeserializeOwned + PartialEq + Default,
{
    let conflict = match patch_status(client, object, Some(current), status).await {
        Err(kube::Error::Api(e)) if e.code == 409 => e,
        other => return other,
    };
    let fresh = namespaced_api(client, object).get(&object.name_any()).await?;
    let stored: S = match serde_json::to_value(&fresh)
        .map_err(kube::Error::SerdeError)?
        .get("status")
    {
        Some(value) if !value.is_null() => serde_json::from_value(value.clone()).map_err(kube::Error::SerdeError)?,
        _ => S::default(),
    };
    // `current` may be a status built in memory (the one written just
    // before a dispatch), with times finer than the whole seconds the
    // server stores: compare it as the server would have stored it.
    let current_as_stored: S = serde_json::to_value(current)
        .and_then(serde_json::from_value)
        .map_err(kube::Error::SerdeError)?;
    if stored != current_as_stored {
        return Err(kube::Error::Api(conflict));
    }
    write_status(client, &fresh, Some(current), status).await.map(Some)
}

/// Writes `status` even when it equals `current`, so that the write's
/// resourceVersion precondition proves `object` was not a stale read. Used
/// right before an apply is dispatched: a watch cache one event behind must
/// never make the same apply start twice.
pub async fn write_status<K: StatusObject, S: Serialize>(
    client: &kube::Client,
    object: &K,
    current: Option<&S>,
    status: &S,
) -> Result<K, kube::Error> {
    let old = current.map(|c| serde_json::to_value(c).expect("status serializes"));
    let new = serde_json::to_value(status).expect("status serializes");
    let body = match old {
        Some(old) => merge_patch(&old, &new),
        None => new,
    };
    let patch = json!({"metadata": {"resourceVersion": object.resource_version()}, "status": body});
    // The API server answers with the object as stored: callers continue
    // from it instead of reading it again.
    namespaced_api(client, object)
        .patch_status(
            &object.name_any(),
            &crate::runtime::context::patch_params(),
            &Patch::Merge(patch),
        )
        .await
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: keys `new`
/// no longer has become `null`, so a field the status cleared (an exec
/// handle, a start time) is removed on the server too.
pub fn merge_patch(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = serde_json::Map::new();
            for (key, value) in n {
                let patched = match o.get(key) {
                    Some(previous) if previous == value => continue,
                    Some(previous) => merge_patch(previous, value),
                    None => value.clone(),
                };
                out.insert(key.clone(), patched);
            }
            for key in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(key.clone(), Value::Null);
            }
            Value::Object(out)
        }
        _ => new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_nulls_removed_keys_and_keeps_only_changes() {
        let old =
            json!({"phase": "Applying", "execPID": 7, "conditions": [{"type": "Applied"}], "nested": {"a": 1, "b": 2}});
        let new = json!({"phase": "Applied", "conditions": [{"type": "Applied"}], "nested": {"a": 1}});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"phase": "Applied", "execPID": null, "nested": {"b": null}})
        );
    }

    #[test]
    fn merge_patch_replaces_arrays_and_scalars_whole() {
        let old = json!({"conditions": [{"type": "A"}, {"type": "B"}]});
        let new = json!({"conditions": [{"type": "A"}]});
        assert_eq!(merge_patch(&old, &new), new);
    }
}
