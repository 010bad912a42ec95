//! The ProxmoxCluster controller: tracks which node hosts each VM and detects
//! guest reboots (spec §7.3). `decide` holds the decisions, `reconcile` the
//! reads and writes around them.

pub mod decide;
mod reconcile;

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use vrouter_api::{ProxmoxCluster, VRouterTarget};

use crate::runtime::context::Context;
use crate::runtime::controller_context::Ctx;
use crate::runtime::reconciler::{self, Scope, Shutdown};
use crate::runtime::watches::Watches;

pub use reconcile::CONTROLLER;

/// What the cluster reconciler reads besides the cluster: the shared
/// [`Context`] and the targets as the watch that wakes it has them (a LIST
/// of the namespace's targets per sync before, idle or not).
pub type ClusterContext = Ctx<ClusterOwn>;

/// What only this controller's reconciles read (see [`ClusterContext`]).
pub struct ClusterOwn {
    targets: Store<VRouterTarget>,
}

/// Runs the ProxmoxCluster controller until `shutdown`. A target wakes the
/// cluster its clusterRef names (same namespace only), so a new target gets
/// its node promptly.
pub async fn run(ctx: Arc<Context>, scope: &Scope, watches: &Watches, shutdown: Shutdown) {
    let targets = watches.targets.store();
    let target_events = watches.targets.subscribe().touched_objects();
    let controller = Controller::new(scope.api::<ProxmoxCluster>(), watcher::Config::default())
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.clusters))
        .watches_stream(target_events, |target| cluster_of(&target));
    let ctx = Arc::new(Ctx::new(ctx, ClusterOwn { targets }));
    reconciler::run::<reconcile::ClusterReconciler>(controller, ctx, shutdown).await;
}

/// The ProxmoxCluster a target's provider names, when it is in the
/// target's own namespace.
fn cluster_of(target: &VRouterTarget) -> Option<ObjectRef<ProxmoxCluster>> {
    let namespace = target.namespace().unwrap_or_default();
    target
        .spec
        .provider
        .proxmox
        .as_ref()
        .filter(|p| !p.cluster_ref.crosses_namespace(&namespace))
        .map(|p| ObjectRef::new(&p.cluster_ref.name).within(&namespace))
}
