//! The VRouterBinding controller: composes one VRouterConfig per target
//! (`vrouter_api::compose`) and writes them, with an optional serial
//! rollout (spec §7.1). `decide` holds the pure decisions, `resolve` reads
//! the references, `writes` writes the configs, `reconcile` runs the steps.

pub mod decide;
mod reconcile;
pub mod resolve;
mod writes;

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller, watcher};
use vrouter_api::{ReferencedKind, VRouterBinding, VRouterConfig, VRouterParams, VRouterTarget, VRouterTemplate};

use crate::context::Context;
use crate::reconciler::{self, Scope, Shutdown};

pub use reconcile::CONTROLLER;

/// Runs the VRouterBinding controller until `shutdown`. Templates, params
/// and targets wake the bindings that reference them; an owned config
/// wakes its binding, so WaitForApplied sees an apply finish at once
/// instead of at the next poll.
pub async fn run(ctx: Arc<Context>, scope: &Scope, shutdown: Shutdown) {
    let wc = watcher::Config::default();
    let controller = Controller::new(scope.api::<VRouterBinding>(), wc.clone())
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.bindings));
    let bindings = controller.store();
    let (by_template, by_params, by_target) = (bindings.clone(), bindings.clone(), bindings);
    let controller = controller
        .owns(scope.api::<VRouterConfig>(), wc.clone())
        .watches(scope.api::<VRouterTemplate>(), wc.clone(), move |t| {
            referencing(
                &by_template,
                ReferencedKind::Template,
                &t.namespace().unwrap_or_default(),
                &t.name_any(),
            )
        })
        .watches(scope.api::<VRouterParams>(), wc.clone(), move |p| {
            referencing(
                &by_params,
                ReferencedKind::Params,
                &p.namespace().unwrap_or_default(),
                &p.name_any(),
            )
        })
        .watches(scope.api::<VRouterTarget>(), wc, move |t| {
            referencing(
                &by_target,
                ReferencedKind::Target,
                &t.namespace().unwrap_or_default(),
                &t.name_any(),
            )
        });
    reconciler::run::<reconcile::BindingReconciler>(controller, ctx, shutdown).await;
}

/// The bindings in `namespace` that reference the `kind` object `name`.
fn referencing(
    bindings: &Store<VRouterBinding>,
    kind: ReferencedKind,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<VRouterBinding>> {
    bindings
        .state()
        .into_iter()
        .filter(|b| b.namespace().as_deref() == Some(namespace) && b.spec.refs_of(kind).any(|r| r.name == name))
        .map(|b| ObjectRef::from_obj(&*b))
        .collect()
}
