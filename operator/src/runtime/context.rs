//! What every reconciler shares: the client, metrics, the event recorder, the
//! settings, and the way to reach a router.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use vrouter_api::VRouterTarget;
use vrouter_providers::lookup_cache::CachedLookup;
use vrouter_providers::proxmox::ProxmoxClients;
use vrouter_providers::{FactoryContext, KeptProviders, KubeLookup, Provider, ProviderError};

use crate::runtime::apply_dispatches::ApplyDispatches;
use crate::runtime::binding_writes::BindingWrites;
use crate::runtime::metrics::Metrics;
use crate::runtime::recently_ready::RecentlyReady;

/// Builds the provider that reaches a target's router.
#[async_trait]
pub trait Providers: Send + Sync {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Arc<dyn Provider>, ProviderError>;

    /// The Proxmox clients these providers keep open, so the ProxmoxCluster
    /// sync lists a cluster's VMs over the connections its routers' applies
    /// use. A source that keeps none gives an empty set: the sync then
    /// opens a connection of its own, as any unshared client does.
    fn proxmox_clients(&self) -> ProxmoxClients {
        ProxmoxClients::default()
    }
}

/// The production source: the providers crate's factory, reading Secrets
/// and ProxmoxClusters from the API server through a short-lived cache, so
/// a rotated credential takes effect within [`vrouter_providers::lookup_cache::DEFAULT_TTL`]
/// while a burst of reconciles costs one read per object. Proxmox
/// providers are kept from one call to the next while their target,
/// ProxmoxCluster spec and Secret stay the same.
pub struct FactoryProviders {
    pub lookup: CachedLookup<KubeLookup>,
    pub factory: FactoryContext,
    pub kept: KeptProviders,
}

impl FactoryProviders {
    pub fn new(lookup: CachedLookup<KubeLookup>, factory: FactoryContext) -> Self {
        FactoryProviders {
            lookup,
            factory,
            kept: KeptProviders::default(),
        }
    }
}

#[async_trait]
impl Providers for FactoryProviders {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Arc<dyn Provider>, ProviderError> {
        self.kept.provider(target, &self.lookup, &self.factory).await
    }

    fn proxmox_clients(&self) -> ProxmoxClients {
        self.factory.proxmox_clients.clone()
    }
}

/// Knobs the controllers read; defaults are the production values.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The longest an apply may run before its config is Failed.
    pub apply_timeout: Duration,
    /// How often a target's VM state is polled.
    pub target_poll: Duration,
    /// Re-apply a config whose router drifted (`--drift-repair`); off, drift
    /// is only shown on the VRouterStatus.
    pub drift_repair: bool,
    /// How often every Applied config is checked for its VRouterStatus.
    pub status_sweep: Duration,
    /// How many objects of each kind are reconciled at once.
    pub concurrency: Concurrency,
}

/// Reconciles running at the same time, per controller. Each bounds the
/// provider connections and API writes a burst (a rollout over many
/// targets, a restart) opens at once; the other objects of the kind wait
/// in the controller's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concurrency {
    /// VRouterConfigs: each holds a connection to its router while it
    /// checks readiness, dispatches or polls an apply.
    pub configs: u16,
    /// VRouterStatuses: each reads a router's configs back. Also bounds the
    /// creates of missing VRouterStatuses the status sweep makes at once.
    pub statuses: u16,
    /// VRouterTargets: each asks its provider whether the VM runs.
    pub targets: u16,
    /// VRouterBindings: each renders every config of the binding.
    pub bindings: u16,
    /// ProxmoxClusters: each lists its cluster's VMs.
    pub clusters: u16,
    /// Targets one ProxmoxCluster sync updates at once: each reads its
    /// guest's uptime (`checkGuestUptime`) and writes its status.
    pub cluster_sweep: u16,
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency {
            configs: 32,
            statuses: 32,
            targets: 32,
            bindings: 4,
            clusters: 4,
            cluster_sweep: 16,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            apply_timeout: Duration::from_secs(300),
            target_poll: Duration::from_secs(60),
            drift_repair: true,
            status_sweep: Duration::from_secs(30),
            concurrency: Concurrency::default(),
        }
    }
}

/// What every reconciler shares.
pub struct Context {
    pub client: Client,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub settings: Settings,
    pub providers: Arc<dyn Providers>,
    /// Routers that passed a readiness check a moment ago: the config and
    /// the drift controller both skip a check another one just made.
    pub recently_ready: Arc<RecentlyReady>,
    /// Bindings' config writes in flight, which new applies let go first.
    pub binding_writes: BindingWrites,
    /// When applies were last started: drift reads let a burst go first.
    pub apply_dispatches: ApplyDispatches,
}

/// Field manager of every write the operator makes, so `managedFields`
/// names the operator. Writes take it from [`patch_params`] and
/// [`post_params`]; writes made inside kube-runtime (Events) from the
/// client's User-Agent, which the API server reads up to its first `/`.
pub const FIELD_MANAGER: &str = "vrouter-operator";

/// Parameters of a merge or JSON patch the operator makes.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// Parameters of a create the operator makes.
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// The User-Agent of the operator's client: [`FIELD_MANAGER`] and the version.
pub fn user_agent() -> String {
    format!("{FIELD_MANAGER}/{}", env!("CARGO_PKG_VERSION"))
}

impl AsRef<Context> for Context {
    fn as_ref(&self) -> &Context {
        self
    }
}

impl Context {
    pub fn new(client: Client, metrics: Metrics, settings: Settings, providers: Arc<dyn Providers>) -> Self {
        let reporter = Reporter {
            controller: "vrouter-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            settings,
            providers,
            recently_ready: Arc::default(),
            binding_writes: BindingWrites::default(),
            apply_dispatches: ApplyDispatches::default(),
        }
    }

    /// Records a Kubernetes Event on `object`. Failing to record is logged,
    /// never fatal: events are for people, not for control flow. The note is
    /// bounded ([`vrouter_api::text::message`]; the API server refuses a
    /// note over 1 KiB, and notes quote what routers answered).
    pub async fn event<K>(&self, object: &K, type_: EventType, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.event_of_action(object, type_, reason, "Reconcile", note).await;
    }

    /// [`Context::event`] with its own `action`. kube's recorder folds
    /// Events of one object, type, reason and action into one series that
    /// keeps the first note, so steps a person must tell apart (each wave
    /// of a rollout) each need an action of their own.
    pub async fn event_of_action<K>(&self, object: &K, type_: EventType, reason: &str, action: &str, mut note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        vrouter_api::text::bound(&mut note, vrouter_api::text::MAX_MESSAGE_BYTES);
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(%error, object = %object.name_any(), "could not record an event");
        }
    }
}
