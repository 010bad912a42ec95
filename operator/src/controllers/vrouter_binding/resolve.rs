//! Reading what a binding references from the binding controller's
//! watches, in the order `vrouter_api::compose::render_configs` takes it.

use std::fmt::Debug;

use futures::FutureExt;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use serde::de::DeserializeOwned;
use vrouter_api::validate::{CrossNamespace, same_namespace_references};
use vrouter_api::{NameRef, ReferencedKind, VRouterBinding, VRouterParams, VRouterTarget, VRouterTemplate};

use super::render_cache::Version;
use crate::runtime::stores;

/// The watches (templates, params, targets) that wake a binding, and that
/// its references are read from.
pub struct Referents {
    pub templates: Store<VRouterTemplate>,
    pub params: Store<VRouterParams>,
    pub targets: Store<VRouterTarget>,
}

impl Referents {
    /// No watches: every reference is read from the API server (for the
    /// `diff` command, which reads once and watches nothing). The stores'
    /// writers are dropped, so [`stores::get`] never waits on them.
    pub fn unwatched() -> Self {
        Referents {
            templates: reflector::store().0,
            params: reflector::store().0,
            targets: reflector::store().0,
        }
    }
}

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

/// Reads every reference of `binding` from its own namespace. A reference
/// into another namespace is refused before anything is read.
pub async fn references(
    client: &kube::Client,
    referents: &Referents,
    binding: &VRouterBinding,
) -> Result<Referenced, ResolveError> {
    same_namespace_references(binding)?;
    let namespace = binding.namespace().unwrap_or_default();
    let refs = |kind: ReferencedKind| -> Vec<&NameRef> { binding.spec.refs_of(kind).collect() };
    let target_refs: Vec<NameRef> = super::select::resolve(client, &referents.targets, binding)
        .await?
        .into_iter()
        .map(NameRef::new)
        .collect();
    let read = Reader { client, namespace };
    Ok(Referenced {
        templates: read
            .each(
                &referents.templates,
                &refs(ReferencedKind::Template),
                ReferencedKind::Template,
            )
            .await?,
        params: read
            .each(&referents.params, &refs(ReferencedKind::Params), ReferencedKind::Params)
            .await?,
        targets: read
            .each(
                &referents.targets,
                &target_refs.iter().collect::<Vec<_>>(),
                ReferencedKind::Target,
            )
            .await?,
    })
}

/// The uid and generation of every reference of `binding` as the watches
/// hold them, templates, params then targets in reference order (what
/// [`super::render_cache`] keys a render by); `None` when a store is not
/// filled yet or lacks one of them (a render read the long way).
pub fn versions(referents: &Referents, binding: &VRouterBinding) -> Option<Vec<Version>> {
    let namespace = binding.namespace().unwrap_or_default();
    let mut out = Vec::new();
    collect(
        &referents.templates,
        binding,
        ReferencedKind::Template,
        &namespace,
        &mut out,
    )?;
    collect(&referents.params, binding, ReferencedKind::Params, &namespace, &mut out)?;
    // The selected targets are part of the key: one joining or leaving
    // changes it, though no object's generation moved.
    let targets = super::select::from_store(&referents.targets, binding)?;
    collect_named(
        &referents.targets,
        targets.iter().map(String::as_str),
        &namespace,
        &mut out,
    )?;
    Some(out)
}

fn collect<K>(
    store: &Store<K>,
    binding: &VRouterBinding,
    kind: ReferencedKind,
    namespace: &str,
    out: &mut Vec<Version>,
) -> Option<()>
where
    K: kube::Resource<DynamicType = ()> + Clone,
{
    collect_named(
        store,
        binding.spec.refs_of(kind).map(|r| r.name.as_str()),
        namespace,
        out,
    )
}

fn collect_named<'a, K>(
    store: &Store<K>,
    names: impl Iterator<Item = &'a str>,
    namespace: &str,
    out: &mut Vec<Version>,
) -> Option<()>
where
    K: kube::Resource<DynamicType = ()> + Clone,
{
    store.wait_until_ready().now_or_never()?.ok()?;
    for name in names {
        let object = store.get(&ObjectRef::new(name).within(namespace))?;
        let meta = object.meta();
        out.push((meta.uid.clone()?, meta.generation.unwrap_or(0)));
    }
    Some(())
}

struct Reader<'a> {
    client: &'a kube::Client,
    namespace: String,
}

impl Reader<'_> {
    async fn each<K>(&self, store: &Store<K>, refs: &[&NameRef], kind: ReferencedKind) -> Result<Vec<K>, ResolveError>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        let mut out = Vec::with_capacity(refs.len());
        for r in refs {
            let object = stores::get(store, self.client, &self.namespace, &r.name)
                .await?
                .ok_or_else(|| ResolveError::NotFound {
                    kind,
                    name: r.name.clone(),
                })?;
            out.push((*object).clone());
        }
        Ok(out)
    }
}
