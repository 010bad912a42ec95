//! The VRouterBinding controller: composes one VRouterConfig per target
//! (`vrouter_api::compose`) and writes them, with an optional serial
//! rollout (spec §7.1). `decide` holds the pure decisions, `resolve` reads
//! the references, `writes` writes the configs, `reconcile` runs the steps.

pub mod decide;
mod error;
mod pause;
mod reconcile;
pub mod render_cache;
pub mod resolve;
mod rollback_hold;
mod select;
mod status;
pub mod wake;
mod waves;
mod writes;

use std::sync::Arc;

use futures::TryStreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use vrouter_api::{ReferencedKind, VRouterBinding, VRouterConfig, VRouterParams, VRouterTemplate};

use crate::runtime::context::Context;
use crate::runtime::controller_context::Ctx;
use crate::runtime::own_writes::OwnWrites;
use crate::runtime::reconciler::{self, Scope, Shutdown};
use crate::runtime::watches::{Events, Watches};
use render_cache::RenderCache;

pub use reconcile::CONTROLLER;
pub use resolve::{Referents, ResolveError, references};

/// What the binding reconciler reads besides the binding: the shared
/// [`Context`], the templates, params and targets as the watches that wake
/// it have them, the configs as its watch of the configs has them, and the
/// versions its own config writes produced (until their echoes are in, the
/// config store is behind them).
pub type BindingContext = Ctx<BindingOwn>;

/// What only this controller's reconciles read (see [`BindingContext`]).
pub struct BindingOwn {
    referents: Referents,
    configs: Store<VRouterConfig>,
    config_writes: Arc<OwnWrites>,
    /// The binding's own status writes: a reconcile handed a binding one of
    /// them replaced waits for the newer one.
    status_writes: OwnWrites,
    /// Each binding's last render, reused while its inputs are unchanged.
    renders: RenderCache,
}

/// Runs the VRouterBinding controller until `shutdown`. Templates, params
/// and targets wake the bindings that reference them, and are read from
/// those same watches; an owned config wakes its binding when it changed
/// what the binding's reconcile reads of it ([`wake`]), so WaitForApplied
/// sees an apply finish at once instead of at the next poll.
pub async fn run(ctx: Arc<Context>, scope: &Scope, watches: &Watches, shutdown: Shutdown) {
    let wc = watcher::Config::default();
    let controller = Controller::new(scope.api::<VRouterBinding>(), wc.clone())
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.bindings));
    let bindings = controller.store();
    let (by_template, by_params, by_target) = (bindings.clone(), bindings.clone(), bindings.clone());
    let (templates, template_events) = reflected::<VRouterTemplate>(scope, &wc);
    let (params, params_events) = reflected::<VRouterParams>(scope, &wc);
    let (targets, target_events) = (watches.targets.store(), watches.targets.subscribe().touched_objects());
    let config_writes = Arc::new(OwnWrites::default());
    let configs = watches.configs.store();
    let configs_of_targets = configs.clone();
    let config_events = config_wakes(watches.configs.subscribe(), config_writes.clone(), bindings);
    let controller = controller
        .owns_stream(config_events)
        .watches_stream(template_events, move |t| {
            referencing(&by_template, ReferencedKind::Template, &t)
        })
        .watches_stream(params_events, move |p| {
            referencing(&by_params, ReferencedKind::Params, &p)
        })
        .watches_stream(target_events, move |t| {
            select::concerned(&by_target, &configs_of_targets, &t)
        });
    let ctx = Arc::new(Ctx::new(
        ctx,
        BindingOwn {
            referents: Referents {
                templates,
                params,
                targets,
            },
            configs,
            config_writes,
            status_writes: OwnWrites::default(),
            renders: RenderCache::default(),
        },
    ));
    reconciler::run::<reconcile::BindingReconciler>(controller, ctx, shutdown).await;
}

/// A store of every `K` in the scope, and the watch events that fill it.
fn reflected<K>(
    scope: &Scope,
    wc: &watcher::Config,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let events = watcher(scope.api::<K>(), wc.clone())
        .modify(crate::runtime::watches::drop_managed_fields)
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// The config events that wake their owners. Each event also tells
/// `writes` that the store caught up with a write of the binding's own (its
/// echo wakes the binding: a created config is new, a patched one has a new
/// generation or labels); an event that changes nothing its binding's
/// reconcile reads wakes nothing ([`wake`]).
fn config_wakes(
    events: Events<VRouterConfig>,
    writes: Arc<OwnWrites>,
    bindings: Store<VRouterBinding>,
) -> impl futures::Stream<Item = Result<VRouterConfig, watcher::Error>> + Send + 'static {
    let wakes = wake::ConfigWakes::default();
    events
        .inspect_ok(move |event| {
            let _ = writes.passes(event);
        })
        .try_filter(move |event| {
            let pass = wakes.passes(event, |config| owner_reads_progress(&bindings, config));
            std::future::ready(pass)
        })
        .touched_objects()
}

/// Whether the binding controlling `config` reads its configs' progress
/// (true when that binding is not in the store yet).
fn owner_reads_progress(bindings: &Store<VRouterBinding>, config: &VRouterConfig) -> bool {
    let Some(owner) = config.controlling_binding() else {
        return true;
    };
    let key = ObjectRef::new(&owner.name).within(config.metadata.namespace.as_deref().unwrap_or_default());
    bindings.get(&key).is_none_or(|binding| {
        wake::reads_progress(&decide::policy(&binding))
            || binding.spec.effective_rollout_mode() == vrouter_api::RolloutMode::Waves
    })
}

/// The bindings in `referent`'s namespace that reference it as a `kind`.
fn referencing(
    bindings: &Store<VRouterBinding>,
    kind: ReferencedKind,
    referent: &impl kube::Resource,
) -> Vec<ObjectRef<VRouterBinding>> {
    let namespace = referent.meta().namespace.as_deref().unwrap_or_default();
    let name = referent.meta().name.as_deref().unwrap_or_default();
    bindings
        .state()
        .into_iter()
        .filter(|b| b.namespace().as_deref() == Some(namespace) && b.spec.refs_of(kind).any(|r| r.name == name))
        .map(|b| ObjectRef::from_obj(&*b))
        .collect()
}
