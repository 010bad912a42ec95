//! Prometheus metrics of the operator, served on `/metrics`.
//!
//! Names follow Prometheus conventions (`_total` counters, `_seconds`
//! histograms) under the `vrouter_` prefix; `docs/operations.md` lists them
//! with the alerts worth setting on them.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::runtime::object_gauges::{ObjectGauges, Stores};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    /// The commit built, when the build was told it (`VROUTER_GIT_SHA` at
    /// compile time, which the image build sets), else `unknown`.
    pub git_sha: &'static str,
}

/// The labels of `vrouter_build_info`.
pub fn build_labels() -> BuildLabels {
    BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        git_sha: option_env!("VROUTER_GIT_SHA")
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown"),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// One of [`REVIEWED_KINDS`] or `other`: the kind comes from the
    /// request, and a label value per distinct request would let any
    /// caller grow the exposition without bound.
    pub kind: &'static str,
    pub allowed: bool,
}

/// The kinds the webhooks are registered for.
pub const REVIEWED_KINDS: [&str; 7] = [
    "VRouterTemplate",
    "VRouterTarget",
    "VRouterBinding",
    "VRouterParams",
    "VRouterConfig",
    "ProxmoxCluster",
    "VRouterStatus",
];

/// The `kind` label for a reviewed object of kind `kind`.
pub fn review_kind_label(kind: &str) -> &'static str {
    REVIEWED_KINDS.into_iter().find(|k| *k == kind).unwrap_or("other")
}

/// Upper bounds of the apply histogram, in seconds: from a fast apply up to
/// past the longest apply timeout worth setting. The default timeout
/// ([`crate::runtime::context::Settings`], 5 minutes) falls on a bucket, so "applies
/// that hit the timeout" is one bucket's complement.
pub const APPLY_BUCKETS: [f64; 16] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 450.0, 600.0, 900.0, 1800.0,
];

fn apply_histogram() -> Histogram {
    Histogram::new(APPLY_BUCKETS)
}

fn duration_histogram() -> Histogram {
    // 10 ms .. ~82 s: reconciles are usually milliseconds, applies seconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.01, 2.0, 14,
    ))
}

/// The `controller` label of each controller ([`crate::runtime::reconciler::Reconciler::NAME`]).
pub const CONTROLLERS: [&str; 5] = [
    "vrouterconfig",
    "vrouterbinding",
    "vroutertarget",
    "vrouterstatus",
    "proxmoxcluster",
];
/// The `result` label of `vrouter_applies_total`.
pub const APPLY_RESULTS: [&str; 4] = ["applied", "failed", "timeout", "lost"];
/// The `state` label of `vrouter_rollout_decisions_total`.
pub const ROLLOUT_STATES: [&str; 3] = ["in_progress", "halted", "completed"];
/// The `result` label of `vrouter_drift_reads_total`.
pub const DRIFT_READ_RESULTS: [&str; 2] = ["read", "failed"];

/// Creates every labelled series whose label values are known, at zero:
/// a counter first seen at 1 gives `increase()` and `rate()` nothing to
/// compare it with, so the first error after a restart would be missed;
/// and every family is listed from the first scrape.
fn start_at_zero(m: &Metrics) {
    for controller in CONTROLLERS {
        let labels = ControllerLabels { controller };
        for family in [
            &m.reconciles,
            &m.reconcile_errors,
            &m.reconcile_conflicts,
            &m.reconcile_panics,
        ] {
            drop(family.get_or_create(&labels));
        }
        drop(m.reconcile_duration.get_or_create(&labels));
    }
    for result in APPLY_RESULTS {
        drop(m.applies.get_or_create(&ResultLabels { result }));
    }
    for state in ROLLOUT_STATES {
        drop(m.rollouts.get_or_create(&StateLabels { state }));
    }
    for result in DRIFT_READ_RESULTS {
        drop(m.drift_reads.get_or_create(&ResultLabels { result }));
    }
    for kind in REVIEWED_KINDS {
        for allowed in [true, false] {
            drop(m.admission_reviews.get_or_create(&WebhookLabels { kind, allowed }));
        }
    }
}

/// The gauges of this replica's state: `leader`, `build_info`, and the
/// object gauges (a collector counting the leader's caches on each scrape).
fn register_state(registry: &mut Registry, leader: &Gauge, objects: &Arc<ObjectGauges>) {
    registry.register(
        "leader",
        "1 while this replica holds the leader Lease and runs the controllers, else 0",
        leader.clone(),
    );
    let build = Family::<BuildLabels, Gauge>::default();
    build.get_or_create(&build_labels()).set(1);
    registry.register(
        "build_info",
        "Always 1; the labels name the operator's version and commit",
        build,
    );
    registry.register_collector(Box::new(objects.clone()));
}

/// Times one reconcile; records into its controller's histogram on drop.
pub struct ReconcileTimer {
    histogram: Histogram,
    started: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

/// Every metric of the operator, cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles that returned an error, conflicts excepted.
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    /// Reconciles that met a 409 Conflict: routine (the cache was one
    /// write behind), retried soon, and kept apart from errors so an
    /// error-rate alert does not fire on them.
    pub reconcile_conflicts: Family<ControllerLabels, Counter>,
    /// Reconciles that panicked (caught; each is also an error).
    pub reconcile_panics: Family<ControllerLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Applies that ended, by result: applied, failed, timeout, lost.
    pub applies: Family<ResultLabels, Counter>,
    /// Rollout decisions, by state: in_progress, halted, completed.
    pub rollouts: Family<StateLabels, Counter>,
    /// From dispatch of an apply to the poll that saw it finish.
    pub exec_poll_latency: Histogram,
    pub admission_reviews: Family<WebhookLabels, Counter>,
    /// Drift detection's reads of a router, by result: read, failed.
    pub drift_reads: Family<ResultLabels, Counter>,
    /// Drifts newly seen (a startup config changed outside the operator).
    pub drifts_detected: Counter,
    /// 1 while this replica runs the controllers, else 0.
    pub leader: Gauge,
    /// Configs, routers and drift counted from the leader's caches.
    pub objects: Arc<ObjectGauges>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vrouter");
        let mut metrics = Metrics {
            registry: Arc::new(Registry::default()),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_conflicts: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_duration: Family::new_with_constructor(duration_histogram),
            applies: Family::default(),
            rollouts: Family::default(),
            exec_poll_latency: apply_histogram(),
            admission_reviews: Family::default(),
            drift_reads: Family::default(),
            drifts_detected: Counter::default(),
            leader: Gauge::default(),
            objects: Arc::new(ObjectGauges::default()),
        };
        register_state(&mut registry, &metrics.leader, &metrics.objects);
        metrics.register_reconciles(&mut registry);
        metrics.register_outcomes(&mut registry);
        metrics.registry = Arc::new(registry);
        start_at_zero(&metrics);
        metrics
    }

    fn register_reconciles(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles started, by controller",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that returned an error other than a conflict, by controller",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_conflicts",
            "Reconciles that met a 409 Conflict (routine: retried at once), by controller",
            self.reconcile_conflicts.clone(),
        );
        registry.register(
            "reconcile_panics",
            "Reconciles that panicked, by controller: a bug met on one object, caught so the others go on",
            self.reconcile_panics.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, by controller",
            self.reconcile_duration.clone(),
        );
    }

    /// What the routers went through: applies, rollouts, reviews, drift.
    fn register_outcomes(&self, registry: &mut Registry) {
        registry.register("applies", "Applies that finished, by result", self.applies.clone());
        registry.register(
            "rollout_decisions",
            "Rollout walk decisions, by state",
            self.rollouts.clone(),
        );
        registry.register(
            "apply_observed_seconds",
            "Time from dispatching an apply to observing its end",
            self.exec_poll_latency.clone(),
        );
        registry.register(
            "admission_reviews",
            "Admission reviews answered, by kind and outcome",
            self.admission_reviews.clone(),
        );
        registry.register(
            "drift_reads",
            "Reads of a router's startup and running configs by drift detection, by result",
            self.drift_reads.clone(),
        );
        registry.register(
            "drifts_detected",
            "Drifts newly detected: a router's startup config changed outside the operator",
            self.drifts_detected.clone(),
        );
    }

    /// From now on, the object gauges count what `stores` hold.
    pub fn observe_stores(&self, stores: Stores) {
        self.objects.observe(stores);
    }

    /// Whether this replica runs the controllers.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Counts a reconcile of `controller` that met a conflict.
    pub fn reconcile_conflicted(&self, controller: &'static str) {
        self.reconcile_conflicts
            .get_or_create(&ControllerLabels { controller })
            .inc();
    }

    /// Counts a reconcile of `controller` now and records its duration when
    /// the returned guard is dropped, at the reconcile's end.
    pub fn count_and_measure(&self, controller: &'static str) -> ReconcileTimer {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            histogram: self.reconcile_duration.get_or_create(&labels).clone(),
            started: Instant::now(),
        }
    }

    /// Counts a reconcile of `controller` that returned an error.
    pub fn reconcile_failed(&self, controller: &'static str) {
        self.reconcile_errors
            .get_or_create(&ControllerLabels { controller })
            .inc();
    }

    /// Counts a reconcile of `controller` that panicked.
    pub fn reconcile_panicked(&self, controller: &'static str) {
        self.reconcile_panics
            .get_or_create(&ControllerLabels { controller })
            .inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_appear_in_the_exposition_with_their_labels() {
        let m = Metrics::new();
        drop(m.count_and_measure("vrouterconfig"));
        m.reconcile_failed("vrouterconfig");
        m.reconcile_panicked("vrouterconfig");
        m.applies.get_or_create(&ResultLabels { result: "applied" }).inc();
        let text = m.encode();
        assert!(
            text.contains("vrouter_reconciles_total{controller=\"vrouterconfig\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vrouter_reconcile_errors_total{controller=\"vrouterconfig\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vrouter_reconcile_panics_total{controller=\"vrouterconfig\"} 1"),
            "{text}"
        );
        assert!(text.contains("vrouter_applies_total{result=\"applied\"} 1"), "{text}");
        assert!(
            text.contains("vrouter_reconcile_duration_seconds_count{controller=\"vrouterconfig\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_apply_histogram_covers_the_default_apply_timeout_and_beyond() {
        let timeout = crate::runtime::context::Settings::default().apply_timeout.as_secs_f64();
        assert!(APPLY_BUCKETS.contains(&timeout), "{APPLY_BUCKETS:?}");
        assert!(
            APPLY_BUCKETS.last().is_some_and(|b| *b >= 2.0 * timeout),
            "{APPLY_BUCKETS:?}"
        );
        let m = Metrics::new();
        m.exec_poll_latency.observe(299.0);
        let text = m.encode();
        assert!(
            text.contains("vrouter_apply_observed_seconds_bucket{le=\"300.0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vrouter_apply_observed_seconds_bucket{le=\"240.0\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn conflicts_leader_and_build_info_are_exported() {
        let m = Metrics::new();
        let text = m.encode();
        assert!(text.contains("vrouter_leader 0"), "{text}");
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.contains(&format!("vrouter_build_info{{version=\"{version}\",git_sha=")),
            "{text}"
        );
        // Every known series starts at zero, so the first increment shows in increase().
        assert!(
            text.contains("vrouter_reconcile_conflicts_total{controller=\"vroutertarget\"} 0"),
            "{text}"
        );
        assert!(text.contains("vrouter_applies_total{result=\"timeout\"} 0"), "{text}");
        m.set_leader(true);
        m.reconcile_conflicted("vrouterconfig");
        let text = m.encode();
        assert!(text.contains("vrouter_leader 1"), "{text}");
        assert!(
            text.contains("vrouter_reconcile_conflicts_total{controller=\"vrouterconfig\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vrouter_reconcile_errors_total{controller=\"vrouterconfig\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn review_kinds_outside_the_registered_ones_share_one_label() {
        assert_eq!(review_kind_label("VRouterConfig"), "VRouterConfig");
        assert_eq!(review_kind_label("vrouterconfig"), "other");
        assert_eq!(review_kind_label("Pod"), "other");
    }
}
