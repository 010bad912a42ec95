use std::sync::Arc;

use serde_json::json;

use super::*;

fn config(namespace: &str, phase: &str, applied: Option<&str>) -> Arc<VRouterConfig> {
    let conditions: Vec<serde_json::Value> = applied
        .map(|status| {
            vec![
                json!({"type": "Applied", "status": status, "reason": "R", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}),
            ]
        })
        .unwrap_or_default();
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
            "metadata": {"name": "c", "namespace": namespace},
            "spec": {"targetRef": {"name": "r"}},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap(),
    )
}

fn target(namespace: &str, ready: Option<&str>) -> Arc<VRouterTarget> {
    let status = ready.map(|status| {
        json!({"conditions": [{"type": "Ready", "status": status, "reason": "R", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    });
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"name": "r", "namespace": namespace},
            "spec": {"provider": {"type": "vrouter-daemon", "daemon": {"address": "127.0.0.1:1", "agentID": "a"}}},
            "status": status,
        }))
        .unwrap(),
    )
}

fn vrs(namespace: &str, drifted: bool) -> Arc<VRouterStatus> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterStatus",
            "metadata": {"name": "s", "namespace": namespace},
            "spec": {"configRef": {"name": "c"}},
            "status": {"driftDetected": drifted},
        }))
        .unwrap(),
    )
}

#[test]
fn configs_are_counted_by_namespace_phase_and_condition_with_zeros_for_the_rest() {
    let tally = Tally::of(
        &[
            config("a", "Applied", Some("True")),
            config("a", "Failed", Some("False")),
            config("a", "Applied", Some("True")),
            config("b", "Pending", None),
        ],
        &[],
        &[],
    );
    let phases: Vec<(&str, &str, i64)> = tally
        .configs
        .iter()
        .map(|((ns, phase), n)| (ns.as_str(), *phase, *n))
        .collect();
    assert_eq!(
        phases,
        [
            ("a", "Applied", 2),
            ("a", "Applying", 0),
            ("a", "Failed", 1),
            ("a", "Pending", 0),
            ("b", "Applied", 0),
            ("b", "Applying", 0),
            ("b", "Failed", 0),
            ("b", "Pending", 1),
        ]
    );
    let at =
        |ns: &str, condition: &'static str, status: &'static str| tally.conditions[&(ns.to_owned(), condition, status)];
    assert_eq!(at("a", "Applied", "True"), 2);
    assert_eq!(at("a", "Applied", "False"), 1);
    assert_eq!(at("a", "Applied", "Unknown"), 0);
    // No condition at all is Unknown; a condition never set (Ready) too.
    assert_eq!(at("b", "Applied", "Unknown"), 1);
    assert_eq!(at("a", "Ready", "Unknown"), 3);
    assert_eq!(tally.conditions.len(), 2 * 2 * 3);
}

#[test]
fn routers_not_ready_are_targets_whose_ready_is_not_true_and_drift_is_per_status() {
    let tally = Tally::of(
        &[],
        &[
            target("a", Some("True")),
            target("a", Some("False")),
            target("a", None),
            target("b", Some("True")),
            target("b", Some("Unknown")),
        ],
        &[vrs("a", true), vrs("a", false), vrs("c", false)],
    );
    assert_eq!(
        tally.routers_not_ready,
        [("a".to_owned(), 2), ("b".to_owned(), 1)].into_iter().collect()
    );
    assert_eq!(
        tally.routers_drifted,
        [("a".to_owned(), 1), ("c".to_owned(), 0)].into_iter().collect()
    );
}

#[test]
fn the_collector_exports_nothing_until_it_has_stores_then_their_counts() {
    let gauges = Arc::new(ObjectGauges::default());
    let mut registry = prometheus_client::registry::Registry::with_prefix("vrouter");
    registry.register_collector(Box::new(gauges.clone()));
    let encode = || {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    };
    assert!(!encode().contains("vrouter_configs"), "{}", encode());

    let (configs, mut writer) = kube::runtime::reflector::store::<VRouterConfig>();
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
        (*config("n", "Applied", Some("True"))).clone(),
    ));
    let (targets, _t) = kube::runtime::reflector::store::<VRouterTarget>();
    let (statuses, _s) = kube::runtime::reflector::store::<VRouterStatus>();
    gauges.observe(Stores {
        configs,
        targets,
        statuses,
    });
    let text = encode();
    assert!(
        text.contains("vrouter_configs{namespace=\"n\",phase=\"Applied\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("vrouter_configs{namespace=\"n\",phase=\"Failed\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("vrouter_config_conditions{namespace=\"n\",condition=\"Applied\",status=\"True\"} 1"),
        "{text}"
    );
}
