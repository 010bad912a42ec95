//! What every reconciler shares: the client, metrics, the event recorder, the
//! settings, and the way to reach a router.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use vrouter_api::{VRouterConfig, VRouterTarget};
use vrouter_providers::{FactoryContext, GuestTiming, KubeLookup, Provider, ProviderError, build_provider};

use crate::lookup_cache::CachedLookup;

use crate::metrics::Metrics;
use crate::vrouterconfig::one_apply_per_router::RouterLocks;
use crate::vrouterconfig::status_object_retry::StatusObjectsDue;

/// Builds the provider that reaches a target's router.
#[async_trait]
pub trait Providers: Send + Sync {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Box<dyn Provider>, ProviderError>;
}

/// The production source: the providers crate's factory, reading Secrets
/// and ProxmoxClusters from the API server through a short-lived cache, so
/// a rotated credential takes effect within [`crate::lookup_cache::DEFAULT_TTL`]
/// while a burst of reconciles costs one read per object.
pub struct FactoryProviders {
    pub lookup: CachedLookup<KubeLookup>,
    pub factory: FactoryContext,
}

#[async_trait]
impl Providers for FactoryProviders {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Box<dyn Provider>, ProviderError> {
        build_provider(target, &self.lookup, &self.factory).await
    }
}

/// How the providers poll short helper commands in the guest (the
/// readiness check's `systemctl`, file assembly). Every apply waits on
/// two readiness checks, and at the agent library's 250 ms interval they
/// were most of an apply's latency (docs/benchmarks.md); such a command
/// exits within tens of milliseconds, so a 50 ms poll costs a request or
/// two more per check.
pub fn guest_timing() -> GuestTiming {
    GuestTiming {
        poll_interval: Duration::from_millis(50),
        ..GuestTiming::default()
    }
}

/// Knobs the controllers read; defaults are the production values.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The longest an apply may run before its config is Failed.
    pub apply_timeout: Duration,
    /// How often a target's VM state is polled.
    pub target_poll: Duration,
    /// The router's startup configuration, read back for drift detection.
    pub config_boot_path: String,
    /// Prints the router's running config, for drift detection's `running`.
    pub running_config_command: Vec<String>,
    /// Where the ProxmoxCluster sync reads the guest's uptime; tests point it
    /// into a sandbox, since every test guest shares this machine's /proc.
    pub guest_uptime_path: String,
    /// Re-apply a config whose router drifted (`--drift-repair`); off, drift
    /// is only shown on the VRouterStatus.
    pub drift_repair: bool,
    /// How often every Applied config is checked for its VRouterStatus.
    pub status_sweep: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            apply_timeout: Duration::from_secs(300),
            target_poll: Duration::from_secs(60),
            config_boot_path: vrouter_api::constants::CONFIG_BOOT_PATH.to_owned(),
            running_config_command: vrouter_api::constants::SHOW_RUNNING_CONFIG.map(str::to_owned).to_vec(),
            guest_uptime_path: "/proc/uptime".to_owned(),
            drift_repair: true,
            status_sweep: Duration::from_secs(30),
        }
    }
}

pub struct Context {
    pub client: Client,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub settings: Settings,
    pub providers: Arc<dyn Providers>,
    /// Which config's apply runs on which router: one at a time.
    pub router_locks: RouterLocks,
    /// Applied configs whose VRouterStatus is still to be created.
    pub status_objects_due: StatusObjectsDue,
    /// Every VRouterConfig as the running controller last saw it; set each
    /// time the controllers start (a new leader term brings a new store).
    pub configs_seen: std::sync::RwLock<Option<Store<VRouterConfig>>>,
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
            router_locks: RouterLocks::default(),
            status_objects_due: StatusObjectsDue::default(),
            configs_seen: std::sync::RwLock::new(None),
        }
    }

    /// Records a Kubernetes Event on `object`. Failing to record is logged,
    /// never fatal: events are for people, not for control flow.
    pub async fn event<K>(&self, object: &K, warning: bool, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_owned(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(%error, object = %object.name_any(), "could not record an event");
        }
    }
}
