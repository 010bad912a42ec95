//! The VRouterStatus controller: reads a router's config back and repairs
//! drift (the drift-detection proposal). `decide` holds the decisions;
//! `reconcile` performs the I/O.

pub mod decide;
mod read_config;
mod reconcile;
pub mod stored_configs;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::TryStreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, controller};
use vrouter_api::{VRouterConfig, VRouterStatus, VRouterTarget};

use crate::runtime::context::Context;
use crate::runtime::controller_context::Ctx;
use crate::runtime::own_writes::OwnWrites;
use crate::runtime::reconciler::{self, Shutdown};
use crate::runtime::watches::Watches;

pub use read_config::MAX_STORED_BYTES;
pub use reconcile::CONTROLLER;
pub use stored_configs::SECRET_TYPE;

/// What the status reconciler reads besides the object: the shared
/// [`Context`], and the configs and targets as this controller's own
/// watches have them, so a sync reads nothing from the API server but the
/// router. Its own status writes are recorded so that their echoes do not
/// wake it (see [`OwnWrites`]).
pub type StatusContext = Ctx<StatusOwn>;

/// What only this controller's reconciles read (see [`StatusContext`]).
pub struct StatusOwn {
    configs: Store<VRouterConfig>,
    targets: Store<VRouterTarget>,
    own_status_writes: Arc<OwnWrites>,
}

/// Runs the VRouterStatus controller until `shutdown`. A config's change
/// that a sync reads (a new apply, a pause lifted or set, a phase) wakes
/// the status object watching it, so a new baseline is taken promptly;
/// the config's other status writes (an exec handle, a message) do not.
///
/// Its Secrets are not watched: that would need list and watch on every
/// Secret in the cluster. The status records the hashes of the configs the
/// Secret holds, which is what decides whether it is written again.
pub async fn run(ctx: Arc<Context>, watches: &Watches, shutdown: Shutdown) {
    let own_status_writes = Arc::new(OwnWrites::default());
    let statuses = watches.statuses.store();
    let echoes = own_status_writes.clone();
    let status_events = watches
        .statuses
        .subscribe()
        .try_filter(move |event| std::future::ready(echoes.passes(event)))
        .applied_objects();
    let configs = watches.configs.store();
    let config_events = watches
        .configs
        .subscribe()
        .touched_objects()
        .predicate_filter(what_a_sync_reads, Default::default());
    let targets = watches.targets.store();
    let by_config = statuses.clone();
    let controller = Controller::for_stream(status_events, statuses)
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.statuses))
        .watches_stream(config_events, move |config| watching(&by_config, &config));
    let ctx = Arc::new(Ctx::new(
        ctx,
        StatusOwn {
            configs,
            targets,
            own_status_writes,
        },
    ));
    reconciler::run::<reconcile::StatusReconciler>(controller, ctx, shutdown).await;
}

/// What a sync reads of a config ([`decide::ConfigView`] and whether it
/// still exists): a config event that changes none of it wakes nothing.
fn what_a_sync_reads(config: &VRouterConfig) -> Option<u64> {
    let status = config.status.as_ref();
    let mut hasher = DefaultHasher::new();
    (
        status.map(|s| s.phase),
        status.and_then(|s| s.last_applied_time.as_ref().map(|t| t.0.as_second())),
        config.is_paused(),
        config.metadata.deletion_timestamp.is_some(),
    )
        .hash(&mut hasher);
    Some(hasher.finish())
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
