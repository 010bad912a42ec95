//! The VRouterConfig controller: applies one router's config and reports the
//! result (spec §7.2). `decide` holds every decision; `reconcile` performs
//! the I/O around it; `one_apply_per_router` keeps two configs from applying
//! to one router at once.

pub mod decide;
pub mod one_apply_per_router;
mod reconcile;
pub mod status_object_retry;
pub mod status_sweep;

use std::ops::Deref;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller, watcher};
use vrouter_api::{VRouterConfig, VRouterTarget};

use crate::context::Context;
use crate::reconciler::{self, Scope, Shutdown};

pub use reconcile::CONTROLLER;

/// VRouterConfigs reconciled at the same time: a rollout over many targets
/// must not open a provider connection and a status write for every one of
/// them at once.
pub const CONFIG_CONCURRENCY: u16 = 32;

/// What the config reconciler reads: the shared [`Context`] and every
/// VRouterConfig as this controller's own watch has it. The store is made
/// with the controller, so the one-apply-per-router check (which reads the
/// stored statuses after a restart) can never run without it.
pub struct ConfigContext {
    shared: Arc<Context>,
    configs: Store<VRouterConfig>,
}

impl Deref for ConfigContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

impl AsRef<Context> for ConfigContext {
    fn as_ref(&self) -> &Context {
        &self.shared
    }
}

/// Runs the VRouterConfig controller until `shutdown`. A target's change
/// (vmRunning, lastRebootTime) concerns every config that points at it.
pub async fn run(ctx: Arc<Context>, scope: &Scope, shutdown: Shutdown) {
    let controller = Controller::new(scope.api::<VRouterConfig>(), watcher::Config::default())
        .with_config(controller::Config::default().concurrency(CONFIG_CONCURRENCY));
    let configs = controller.store();
    let by_target = configs.clone();
    let swept = configs.clone();
    let controller = controller.watches(
        scope.api::<VRouterTarget>(),
        watcher::Config::default(),
        move |target| configs_of_target(&by_target, &target),
    );
    let ctx = Arc::new(ConfigContext { shared: ctx, configs });
    // Every Applied config has its VRouterStatus, however it became Applied.
    futures::join!(
        reconciler::run::<reconcile::ConfigReconciler>(controller, ctx.clone(), shutdown.clone()),
        status_sweep::run(&ctx, swept, scope, shutdown),
    );
}

fn configs_of_target(configs: &Store<VRouterConfig>, target: &VRouterTarget) -> Vec<ObjectRef<VRouterConfig>> {
    let namespace = target.namespace().unwrap_or_default();
    let name = target.name_any();
    configs
        .state()
        .into_iter()
        .filter(|c| c.namespace().as_deref() == Some(&namespace) && c.spec.target_ref.name == name)
        .map(|c| ObjectRef::from_obj(&*c))
        .collect()
}
