//! The VRouterStatus controller: reads a router's config back and repairs
//! drift (the drift-detection proposal). `decide` holds the decisions;
//! `reconcile` performs the I/O.

pub mod decide;
mod reconcile;
pub mod stored_configs;

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller, watcher};
use vrouter_api::{VRouterConfig, VRouterStatus};

use crate::context::Context;
use crate::reconciler::{self, Scope, Shutdown};

pub use reconcile::CONTROLLER;
pub use stored_configs::{MAX_STORED_BYTES, SECRET_TYPE};

/// Runs the VRouterStatus controller until `shutdown`. A config's change (a
/// new apply, a pause lifted) wakes the status object watching it, so a
/// new baseline is taken promptly.
pub async fn run(ctx: Arc<Context>, scope: &Scope, shutdown: Shutdown) {
    let wc = watcher::Config::default();
    let controller = Controller::new(scope.api::<VRouterStatus>(), wc.clone())
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.statuses));
    let statuses = controller.store();
    // Its Secrets are not watched: that would need list and watch on every
    // Secret in the cluster, and the next sync rewrites a changed one.
    let controller = controller.watches(scope.api::<VRouterConfig>(), wc, move |config| {
        watching(&statuses, &config)
    });
    reconciler::run::<reconcile::StatusReconciler>(controller, ctx, shutdown).await;
}

/// The status objects whose `configRef` names `config`.
fn watching(statuses: &Store<VRouterStatus>, config: &VRouterConfig) -> Vec<ObjectRef<VRouterStatus>> {
    let namespace = config.namespace().unwrap_or_default();
    let name = config.name_any();
    statuses
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(&namespace) && s.spec.config_ref.name == name)
        .map(|s| ObjectRef::from_obj(&*s))
        .collect()
}
