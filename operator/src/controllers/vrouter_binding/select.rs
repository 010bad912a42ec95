//! Which targets a binding configures: its `targetRefs`, and the targets of
//! its namespace its `targetSelector` matches (`VRouterBindingSpec::target_names`
//! decides; this reads the candidates), and which bindings a target's
//! change concerns.

use std::collections::{BTreeMap, BTreeSet};

use futures::FutureExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use vrouter_api::constants::LABEL_BINDING;
use vrouter_api::{VRouterBinding, VRouterConfig, VRouterTarget};

/// The targets `binding` configures, selected from the target watch's
/// store once its first list is in; `None` before that.
pub fn from_store(targets: &Store<VRouterTarget>, binding: &VRouterBinding) -> Option<Vec<String>> {
    if binding.spec.target_selector.is_none() {
        return Some(binding.spec.target_names([]));
    }
    targets.wait_until_ready().now_or_never()?.ok()?;
    let namespace = binding.namespace().unwrap_or_default();
    let in_namespace: Vec<_> = targets
        .state()
        .into_iter()
        .filter(|t| t.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .collect();
    Some(names_among(binding, &in_namespace))
}

/// The targets `binding` configures: from the store when it is filled,
/// else from one LIST of the namespace's targets.
pub async fn resolve(
    client: &kube::Client,
    targets: &Store<VRouterTarget>,
    binding: &VRouterBinding,
) -> kube::Result<Vec<String>> {
    if let Some(names) = from_store(targets, binding) {
        return Ok(names);
    }
    let namespace = binding.namespace().unwrap_or_default();
    let listed = Api::<VRouterTarget>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await?;
    Ok(names_among(binding, &listed.items))
}

fn names_among<T: std::borrow::Borrow<VRouterTarget>>(binding: &VRouterBinding, targets: &[T]) -> Vec<String> {
    let empty = BTreeMap::new();
    binding.spec.target_names(targets.iter().map(|t| {
        let meta = t.borrow().meta();
        (
            meta.name.as_deref().unwrap_or_default(),
            meta.labels.as_ref().unwrap_or(&empty),
        )
    }))
}

/// The bindings a change of `target` concerns: those that name it, those
/// whose selector matches it now (it may have joined), and those that own
/// a config of it (it may have left: a label removed or changed).
pub fn concerned(
    bindings: &Store<VRouterBinding>,
    configs: &Store<VRouterConfig>,
    target: &VRouterTarget,
) -> Vec<ObjectRef<VRouterBinding>> {
    let namespace = target.namespace().unwrap_or_default();
    let name = target.name_any();
    let empty = BTreeMap::new();
    let labels = target.metadata.labels.as_ref().unwrap_or(&empty);
    let mut out: BTreeSet<String> = bindings
        .state()
        .into_iter()
        .filter(|b| b.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|b| {
            b.spec.target_refs.iter().any(|r| r.name == name)
                || b.spec.target_selector.as_ref().is_some_and(|s| s.matches(labels))
        })
        .map(|b| b.name_any())
        .collect();
    out.extend(
        configs
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(namespace.as_str()) && c.spec.target_ref.name == name)
            .filter_map(|c| c.labels().get(LABEL_BINDING).cloned()),
    );
    out.into_iter().map(|b| ObjectRef::new(&b).within(&namespace)).collect()
}
