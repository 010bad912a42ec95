//! Gauges of the objects the leader's caches hold: configs by phase and by
//! condition, routers not ready, routers drifted, per namespace.
//!
//! They are counted on each scrape from the shared watches' stores
//! ([`crate::runtime::watches::Watches`]), never by asking the API server: a scrape
//! costs one pass over memory the controllers keep anyway. Only the replica
//! that runs the controllers holds those stores, so only the leader exports
//! these series; a follower exports none (not zeros, which would read as
//! "nothing is failing" next to the leader's real counts).
//!
//! Every namespace that holds an object of a kind gets every label
//! combination of that kind's gauges, zeros included, so a series does not
//! vanish when its count drops to zero and an alert over it resolves on the
//! value rather than on a missing series.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use vrouter_api::constants::condition;
use vrouter_api::{Phase, VRouterConfig, VRouterStatus, VRouterTarget};

/// Every phase a config can show, in the order they are exported.
pub const PHASES: [Phase; 4] = [Phase::Pending, Phase::Applying, Phase::Applied, Phase::Failed];
/// The config conditions exported, and the statuses each is counted by.
pub const CONFIG_CONDITIONS: [&str; 2] = [condition::APPLIED, condition::READY];
pub const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    namespace: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    namespace: String,
    condition: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

/// The stores the gauges are counted from.
#[derive(Clone)]
pub struct Stores {
    pub configs: Store<VRouterConfig>,
    pub targets: Store<VRouterTarget>,
    pub statuses: Store<VRouterStatus>,
}

/// The collector; empty until the controllers hand it their stores.
#[derive(Default)]
pub struct ObjectGauges {
    stores: RwLock<Option<Stores>>,
}

impl std::fmt::Debug for ObjectGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectGauges")
    }
}

impl ObjectGauges {
    /// From now on, counts what `stores` hold.
    pub fn observe(&self, stores: Stores) {
        *self.stores.write().unwrap_or_else(|e| e.into_inner()) = Some(stores);
    }

    fn tally(&self) -> Option<Tally> {
        let stores = self.stores.read().unwrap_or_else(|e| e.into_inner()).clone()?;
        Some(Tally::of(
            &stores.configs.state(),
            &stores.targets.state(),
            &stores.statuses.state(),
        ))
    }
}

/// The counts of one scrape, keyed by their labels.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    pub configs: BTreeMap<(String, &'static str), i64>,
    pub conditions: BTreeMap<(String, &'static str, &'static str), i64>,
    pub routers_not_ready: BTreeMap<String, i64>,
    pub routers_drifted: BTreeMap<String, i64>,
}

impl Tally {
    pub fn of(
        configs: &[Arc<VRouterConfig>],
        targets: &[Arc<VRouterTarget>],
        statuses: &[Arc<VRouterStatus>],
    ) -> Tally {
        let mut tally = Tally::default();
        for config in configs {
            tally.count_config(config);
        }
        for target in targets {
            let ready = target
                .status
                .as_ref()
                .map(|s| status_of(&s.conditions, condition::READY));
            *tally
                .routers_not_ready
                .entry(target.namespace().unwrap_or_default())
                .or_default() += i64::from(ready != Some("True"));
        }
        for status in statuses {
            let drifted = status.status.as_ref().is_some_and(|s| s.drift_detected);
            *tally
                .routers_drifted
                .entry(status.namespace().unwrap_or_default())
                .or_default() += i64::from(drifted);
        }
        tally
    }

    fn count_config(&mut self, config: &VRouterConfig) {
        let namespace = config.namespace().unwrap_or_default();
        let status = config.status.clone().unwrap_or_default();
        for phase in PHASES {
            *self.configs.entry((namespace.clone(), phase.as_str())).or_default() += i64::from(status.phase == phase);
        }
        for kind in CONFIG_CONDITIONS {
            let seen = status_of(&status.conditions, kind);
            for value in CONDITION_STATUSES {
                *self.conditions.entry((namespace.clone(), kind, value)).or_default() += i64::from(seen == value);
            }
        }
    }
}

/// `True`, `False` or `Unknown` (also for a condition not set, or set to
/// anything else).
fn status_of(conditions: &[Condition], kind: &str) -> &'static str {
    match conditions.iter().find(|c| c.type_ == kind).map(|c| c.status.as_str()) {
        Some("True") => "True",
        Some("False") => "False",
        _ => "Unknown",
    }
}

fn gauges<L, I>(samples: I) -> Family<L, Gauge>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug,
    I: IntoIterator<Item = (L, i64)>,
{
    let family = Family::<L, Gauge>::default();
    for (labels, value) in samples {
        family.get_or_create(&labels).set(value);
    }
    family
}

fn encode_one<L>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    family: &Family<L, Gauge>,
) -> Result<(), std::fmt::Error>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug,
{
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

/// The names (without the registry's prefix) and help of the gauges.
pub const CONFIGS: (&str, &str) = ("configs", "VRouterConfigs by namespace and phase");
pub const CONFIG_CONDITION: (&str, &str) = (
    "config_conditions",
    "VRouterConfigs by namespace, condition (Applied, Ready) and its status (True, False, Unknown)",
);
pub const NOT_READY: (&str, &str) = (
    "routers_not_ready",
    "VRouterTargets whose Ready condition is not True (the VM is not running or its state is unknown), by namespace",
);
pub const DRIFTED: (&str, &str) = (
    "routers_drifted",
    "VRouterStatuses whose router's startup config changed outside the operator, by namespace",
);

impl Collector for ObjectGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(tally) = self.tally() else { return Ok(()) };
        let configs = gauges(
            tally
                .configs
                .into_iter()
                .map(|((namespace, phase), n)| (PhaseLabels { namespace, phase }, n)),
        );
        let conditions = gauges(tally.conditions.into_iter().map(|((namespace, condition, status), n)| {
            (
                ConditionLabels {
                    namespace,
                    condition,
                    status,
                },
                n,
            )
        }));
        let not_ready = gauges(
            tally
                .routers_not_ready
                .into_iter()
                .map(|(namespace, n)| (NamespaceLabels { namespace }, n)),
        );
        let drifted = gauges(
            tally
                .routers_drifted
                .into_iter()
                .map(|(namespace, n)| (NamespaceLabels { namespace }, n)),
        );
        encode_one(&mut encoder, CONFIGS.0, CONFIGS.1, &configs)?;
        encode_one(&mut encoder, CONFIG_CONDITION.0, CONFIG_CONDITION.1, &conditions)?;
        encode_one(&mut encoder, NOT_READY.0, NOT_READY.1, &not_ready)?;
        encode_one(&mut encoder, DRIFTED.0, DRIFTED.1, &drifted)
    }
}

#[cfg(test)]
#[path = "object_gauges_tests.rs"]
mod tests;
