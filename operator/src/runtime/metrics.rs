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
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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

fn duration_histogram() -> Histogram {
    // 10 ms .. ~82 s: reconciles are usually milliseconds, applies seconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.01, 2.0, 14,
    ))
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
    pub reconcile_errors: Family<ControllerLabels, Counter>,
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
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vrouter");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        let reconcile_panics = Family::<ControllerLabels, Counter>::default();
        let reconcile_duration =
            Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(duration_histogram);
        let applies = Family::<ResultLabels, Counter>::default();
        let rollouts = Family::<StateLabels, Counter>::default();
        let exec_poll_latency = duration_histogram();
        let admission_reviews = Family::<WebhookLabels, Counter>::default();
        let drift_reads = Family::<ResultLabels, Counter>::default();
        let drifts_detected = Counter::default();
        registry.register("reconciles", "Reconciles started, by controller", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that returned an error, by controller",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_panics",
            "Reconciles that panicked, by controller: a bug met on one object, caught so the others go on",
            reconcile_panics.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, by controller",
            reconcile_duration.clone(),
        );
        registry.register("applies", "Applies that finished, by result", applies.clone());
        registry.register(
            "rollout_decisions",
            "Rollout walk decisions, by state",
            rollouts.clone(),
        );
        registry.register(
            "apply_observed_seconds",
            "Time from dispatching an apply to observing its end",
            exec_poll_latency.clone(),
        );
        registry.register(
            "admission_reviews",
            "Admission reviews answered, by kind and outcome",
            admission_reviews.clone(),
        );
        registry.register(
            "drift_reads",
            "Reads of a router's startup and running configs by drift detection, by result",
            drift_reads.clone(),
        );
        registry.register(
            "drifts_detected",
            "Drifts newly detected: a router's startup config changed outside the operator",
            drifts_detected.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            reconciles,
            reconcile_errors,
            reconcile_panics,
            reconcile_duration,
            applies,
            rollouts,
            exec_poll_latency,
            admission_reviews,
            drift_reads,
            drifts_detected,
        }
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
    fn review_kinds_outside_the_registered_ones_share_one_label() {
        assert_eq!(review_kind_label("VRouterConfig"), "VRouterConfig");
        assert_eq!(review_kind_label("vrouterconfig"), "other");
        assert_eq!(review_kind_label("Pod"), "other");
    }
}
