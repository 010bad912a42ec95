//! Reading what a binding references from the API server, in the order
//! `vrouter_api::compose::render_configs` takes it.

use std::collections::HashMap;

use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use vrouter_api::validate::{CrossNamespace, same_namespace_references};
use vrouter_api::{NameRef, ReferencedKind, VRouterBinding, VRouterParams, VRouterTarget, VRouterTemplate};

/// The binding's references, read.
pub struct Referenced {
    pub templates: Vec<VRouterTemplate>,
    pub params: Vec<VRouterParams>,
    pub targets: Vec<VRouterTarget>,
}

/// Why the references could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The binding cannot be rendered as it stands; a person must act.
    #[error(transparent)]
    CrossNamespace(#[from] CrossNamespace),
    #[error("{} {name:?} not found", kind.as_str())]
    NotFound { kind: ReferencedKind, name: String },
    /// The API server did not answer; the reconcile is retried.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Above this many targets one LIST of the namespace's targets replaces a
/// GET per target: the GETs would be most of a large rollout's requests,
/// repeated on every reconcile (docs/benchmarks.md measures both).
const LIST_TARGETS_ABOVE: usize = 8;

/// Reads every reference of `binding` from its own namespace. A reference
/// into another namespace is refused before anything is read.
pub async fn references(client: &kube::Client, binding: &VRouterBinding) -> Result<Referenced, ResolveError> {
    same_namespace_references(binding)?;
    let namespace = binding.namespace().unwrap_or_default();
    let of = |kind: ReferencedKind| -> Vec<&NameRef> { binding.spec.refs_of(kind).collect() };
    let templates = get_each(
        &Api::<VRouterTemplate>::namespaced(client.clone(), &namespace),
        &of(ReferencedKind::Template),
        ReferencedKind::Template,
    )
    .await?;
    let params = get_each(
        &Api::<VRouterParams>::namespaced(client.clone(), &namespace),
        &of(ReferencedKind::Params),
        ReferencedKind::Params,
    )
    .await?;
    let targets = get_targets(
        &Api::<VRouterTarget>::namespaced(client.clone(), &namespace),
        &of(ReferencedKind::Target),
    )
    .await?;
    Ok(Referenced {
        templates,
        params,
        targets,
    })
}

async fn get_each<K>(api: &Api<K>, refs: &[&NameRef], kind: ReferencedKind) -> Result<Vec<K>, ResolveError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        let object = api.get_opt(&r.name).await?.ok_or_else(|| ResolveError::NotFound {
            kind,
            name: r.name.clone(),
        })?;
        out.push(object);
    }
    Ok(out)
}

async fn get_targets(api: &Api<VRouterTarget>, refs: &[&NameRef]) -> Result<Vec<VRouterTarget>, ResolveError> {
    if refs.len() <= LIST_TARGETS_ABOVE {
        return get_each(api, refs, ReferencedKind::Target).await;
    }
    let by_name: HashMap<String, VRouterTarget> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|t| (t.name_any(), t))
        .collect();
    refs.iter()
        .map(|r| {
            by_name.get(&r.name).cloned().ok_or_else(|| ResolveError::NotFound {
                kind: ReferencedKind::Target,
                name: r.name.clone(),
            })
        })
        .collect()
}
