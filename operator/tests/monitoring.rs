//! What people monitor the operator with, checked against the real things:
//!
//! - the object gauges, `vrouter_leader` and `vrouter_build_info` of two
//!   real operator processes (one leads) on a real API server with a real
//!   vrouter-daemon router: each gauge moves as the objects change, and a
//!   409 Conflict the API server answers is counted as a conflict, not an
//!   error;
//! - the chart's alerting rules, rendered by the real `helm`, pass
//!   Prometheus's own `promtool test rules`, and fail it when any alert's
//!   expression is broken;
//! - every query of the chart's Grafana dashboard and alerting rules, parsed
//!   by Prometheus's own PromQL parser, selects only metrics the operator
//!   process exports, and the check fails on one it does not.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use vrouter_api::{VRouterConfig, VRouterTarget};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::daemon::{AgentFlags, Daemon};

use common::https::http_get;
use common::replica_process::ReplicaProcess;
use common::shipped_rbac;
use common::status_refusals::{Answer, StatusRefusals};
use common::{create, wait_for};

const LIMIT: Duration = Duration::from_secs(120);

// ---- the exposition, read as Prometheus reads sample lines ----

/// A sample line: its name, labels and value.
type Sample = (String, Vec<(String, String)>, f64);

/// Every sample line of `text`.
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("a label in {line}"));
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (
                name.to_owned(),
                labels,
                value.parse().unwrap_or_else(|_| panic!("a value in {line}")),
            )
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text).into_iter().find_map(|(n, have, v)| {
        let matches = labels
            .iter()
            .all(|(k, want)| have.iter().any(|(hk, hv)| hk == k && hv == want));
        (n == name && matches).then_some(v)
    })
}

async fn scrape(replica: &ReplicaProcess) -> String {
    let answer = http_get(replica.metrics, "/metrics").await.expect("scrape /metrics");
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.text()
}

/// Scrapes `replica` until `check` holds for its exposition.
async fn scraped_until(replica: &ReplicaProcess, what: &str, check: impl Fn(&str) -> bool) -> String {
    wait_for(what, LIMIT, || async {
        let text = http_get(replica.metrics, "/metrics").await.ok()?.text();
        check(&text).then_some(text)
    })
    .await
}

// ---- PromQL of the chart, named by Prometheus's parser ----

/// `helm template` of the chart with the monitoring objects on.
fn monitoring_objects() -> Vec<Value> {
    shipped_rbac::helm_template(
        "vr",
        "vrouter-system",
        &[
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.dashboard.enabled=true",
        ],
    )
    .unwrap_or_else(|e| panic!("helm template: {e}"))
}

fn of_kind(objects: &[Value], kind: &str) -> Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("the chart renders no {kind}"))
        .clone()
}

/// Every query of the dashboard (panel targets, and the series a template
/// variable's `label_values(...)` reads).
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut out: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(series, _label)| series.to_owned())
                .unwrap_or_else(|| panic!("a template query other than label_values(): {query}"));
            out.push(inner);
        }
    }
    out
}

fn rule_queries(rule: &Value) -> Vec<String> {
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// The metrics each of `queries` selects, by Prometheus's parser (the
/// `promql` oracle); panics on a query that does not parse.
fn metric_names(queries: &[String]) -> BTreeSet<String> {
    let oracle = vrouter_test_apiserver::promql_oracle().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(oracle)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), queries).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the promql oracle failed");
    let answers: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let mut names = BTreeSet::new();
    for (query, answer) in queries.iter().zip(answers) {
        assert_eq!(answer["error"], "", "{query} does not parse");
        for name in answer["metrics"].as_array().unwrap() {
            names.insert(name.as_str().unwrap().to_owned());
        }
    }
    names
}

/// The names `queries` select that `exported` lacks.
fn not_exported(queries: &[String], exported: &BTreeSet<String>) -> Vec<String> {
    metric_names(queries)
        .into_iter()
        .filter(|name| !exported.contains(name))
        .collect()
}

fn every_chart_query(objects: &[Value]) -> (Vec<String>, Value) {
    let config_map = of_kind(objects, "ConfigMap");
    let dashboard: Value = serde_json::from_str(config_map["data"]["vrouter-operator.json"].as_str().unwrap()).unwrap();
    let mut queries = dashboard_queries(&dashboard);
    queries.extend(rule_queries(&of_kind(objects, "PrometheusRule")));
    (queries, dashboard)
}

// ---- promtool test rules ----

/// Writes the rule groups next to a copy of the repository's test file and
/// runs `promtool test rules` on it.
fn promtool_test(rule: &Value, dir: &Path) -> std::process::Output {
    let groups = json!({"groups": rule["spec"]["groups"]});
    std::fs::write(dir.join("rules.yaml"), serde_yaml::to_string(&groups).unwrap()).unwrap();
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/monitoring/alerts_test.yaml");
    std::fs::copy(tests, dir.join("alerts_test.yaml")).unwrap();
    let promtool = vrouter_test_apiserver::promtool().unwrap_or_else(|e| panic!("{e}"));
    Command::new(promtool)
        .args(["test", "rules", "alerts_test.yaml"])
        .current_dir(dir)
        .output()
        .expect("run promtool")
}

fn both(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn alert_names(rule: &Value) -> Vec<String> {
    rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_rendered_alerting_rules_pass_promtool_test_rules() {
    let rule = of_kind(&monitoring_objects(), "PrometheusRule");
    assert_eq!(alert_names(&rule).len(), 8, "{rule:#}");
    let dir = tempfile::tempdir().unwrap();
    let output = promtool_test(&rule, dir.path());
    assert!(
        output.status.success(),
        "promtool test rules failed:\n{}",
        both(&output)
    );
    assert!(both(&output).contains("SUCCESS"), "{}", both(&output));
}

/// Each alert in turn gets an expression that never fires: promtool fails,
/// naming that alert. So every alert is tested, and a broken one is caught.
#[test]
fn promtool_fails_when_any_alert_expression_is_broken() {
    let rule = of_kind(&monitoring_objects(), "PrometheusRule");
    for (index, alert) in alert_names(&rule).iter().enumerate() {
        let mut broken = rule.clone();
        broken["spec"]["groups"][0]["rules"][index]["expr"] = json!("vector(0) > 1");
        let dir = tempfile::tempdir().unwrap();
        let output = promtool_test(&broken, dir.path());
        assert!(
            !output.status.success(),
            "{alert} broken, yet promtool passed:\n{}",
            both(&output)
        );
        assert!(both(&output).contains(alert.as_str()), "{alert}:\n{}", both(&output));
    }
}

#[test]
fn the_monitoring_objects_are_off_by_default_and_carry_their_labels() {
    let plain = shipped_rbac::helm_template("vr", "vrouter-system", &[]).unwrap();
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(!plain.iter().any(|o| o["kind"] == kind), "{kind} rendered by default");
    }
    assert!(
        !plain
            .iter()
            .any(|o| o["metadata"]["name"] == "vr-vrouter-operator-dashboard")
    );
    let objects = shipped_rbac::helm_template(
        "vr",
        "vrouter-system",
        &[
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.serviceMonitor.labels.release=kps",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.prometheusRule.labels.role=alerts",
            "monitoring.dashboard.enabled=true",
        ],
    )
    .unwrap();
    let monitor = of_kind(&objects, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
    assert_eq!(monitor["spec"]["endpoints"][0]["scheme"], "https");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(
        of_kind(&objects, "PrometheusRule")["metadata"]["labels"]["role"],
        "alerts"
    );
    assert_eq!(
        of_kind(&objects, "ConfigMap")["metadata"]["labels"]["grafana_dashboard"],
        "1"
    );
}

// ---- the operator process ----

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases.get_opt(name).await.ok()??.spec?.holder_identity
}

/// Two replicas; returns (leader, follower) once one holds the Lease.
async fn two_replicas(env: &TestEnv, ns: &TestNamespace) -> (ReplicaProcess, ReplicaProcess) {
    const LEASE: &str = "monitoring";
    let args = ["--metrics-secure=false"];
    let a = ReplicaProcess::start(env, "replica-a", ns.name(), LEASE, &env.apiserver_url(), &args);
    let b = ReplicaProcess::start(env, "replica-b", ns.name(), LEASE, &env.apiserver_url(), &args);
    let leases: Api<Lease> = ns.api();
    let leader = wait_for("a replica to lead", LIMIT, || async { holder(&leases, LEASE).await }).await;
    if leader == "replica-a" { (a, b) } else { (b, a) }
}

fn daemon_target(name: &str, daemon: &Daemon, agent: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"provider": {"type": "vrouter-daemon", "daemon": {
        "address": daemon.address(), "agentID": agent, "timeoutSeconds": 30,
    }}}})
}

async fn applied(configs: &Api<VRouterConfig>, name: &str, generation: i64) {
    wait_for(&format!("{name} generation {generation} Applied"), LIMIT, || async {
        let status = configs.get_opt(name).await.ok()??.status?;
        (status.observed_generation == generation && status.phase == vrouter_api::Phase::Applied).then_some(())
    })
    .await;
}

/// Leader and follower, the object gauges before and after a config is
/// applied and a router goes missing, and a forced 409 counted as a
/// conflict; then every chart query checked against what was exported.
#[tokio::test]
async fn gauges_follow_the_objects_and_conflicts_are_not_errors() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("monitoring").await;
    let refusals = StatusRefusals::register(env, &ns).await;
    let daemon = Daemon::start();
    let _agent = daemon.start_agent("edge-1", AgentFlags::default()).await;
    // Granted as an administrator would: every agent of this daemon.
    let every_agent = format!("{}/*", daemon.address());
    common::grant_daemon_agents(&env.client(), ns.name(), Some(&every_agent)).await;
    create::<VRouterTarget>(&ns, daemon_target("r1", &daemon, "edge-1")).await;
    let (leader, follower) = two_replicas(env, &ns).await;
    let n = ns.name();

    let text = scraped_until(&leader, "the leader's gauges", |t| {
        value(t, "vrouter_leader", &[]) == Some(1.0)
            && value(t, "vrouter_routers_not_ready", &[("namespace", n)]) == Some(0.0)
    })
    .await;
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        value(&text, "vrouter_build_info", &[("version", version)]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "vrouter_configs", &[("namespace", n)]),
        None,
        "no config yet: {text}"
    );
    let followed = scrape(&follower).await;
    assert_eq!(value(&followed, "vrouter_leader", &[]), Some(0.0), "{followed}");
    assert!(
        !followed.contains("vrouter_configs{"),
        "a follower exports no object gauges: {followed}"
    );
    assert_eq!(
        value(&followed, "vrouter_build_info", &[("version", version)]),
        Some(1.0)
    );

    // A config is applied: the phase and condition gauges move, and its
    // VRouterStatus appears (not drifted).
    let configs: Api<VRouterConfig> = ns.api();
    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "one"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name one\n"}}),
    )
    .await;
    applied(&configs, "one", 1).await;
    let applied_text = scraped_until(&leader, "the applied config counted", |t| {
        value(t, "vrouter_configs", &[("namespace", n), ("phase", "Applied")]) == Some(1.0)
            && value(t, "vrouter_routers_drifted", &[("namespace", n)]) == Some(0.0)
    })
    .await;
    let applied_true = [("namespace", n), ("condition", "Applied"), ("status", "True")];
    assert_eq!(
        value(&applied_text, "vrouter_config_conditions", &applied_true),
        Some(1.0),
        "{applied_text}"
    );
    assert_eq!(
        value(
            &applied_text,
            "vrouter_configs",
            &[("namespace", n), ("phase", "Pending")]
        ),
        Some(0.0),
        "{applied_text}"
    );
    assert!(
        value(&applied_text, "vrouter_applies_total", &[("result", "applied")]).unwrap_or(0.0) >= 1.0,
        "{applied_text}"
    );

    // A router whose agent never connects: not ready.
    create::<VRouterTarget>(&ns, daemon_target("r2", &daemon, "nobody")).await;
    scraped_until(&leader, "the missing router counted not ready", |t| {
        value(t, "vrouter_routers_not_ready", &[("namespace", n)]) == Some(1.0)
    })
    .await;

    // The API server answers the config's status writes 409 Conflict.
    let errors = |t: &str| value(t, "vrouter_reconcile_errors_total", &[("controller", "vrouterconfig")]);
    let conflicts = |t: &str| {
        value(
            t,
            "vrouter_reconcile_conflicts_total",
            &[("controller", "vrouterconfig")],
        )
    };
    let before = scrape(&leader).await;
    let (errors_before, conflicts_before) = (errors(&before), conflicts(&before));
    assert!(
        errors_before.is_some() && conflicts_before.is_some(),
        "both start at zero: {before}"
    );
    refusals.answer(Answer::Refuse {
        code: 409,
        retry_after: None,
    });
    configs
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"commands": "set system host-name two\n"}})),
        )
        .await
        .unwrap();
    let during = scraped_until(&leader, "a conflict counted", |t| conflicts(t) > conflicts_before).await;
    assert!(
        refusals.refused("one").iter().any(|r| r.code == 409),
        "the operator's status write met the 409"
    );
    assert_eq!(
        errors(&during),
        errors_before,
        "a conflict counted as an error: {during}"
    );
    refusals.answer(Answer::Allow);
    applied(&configs, "one", 2).await;
    let after = scrape(&leader).await;
    assert_eq!(errors(&after), errors_before, "{after}");

    check_chart_queries(&after);
}

/// Every chart query's metrics are among the sample names `exposition`
/// holds; a dashboard naming one more metric fails the same check.
fn check_chart_queries(exposition: &str) {
    let exported: BTreeSet<String> = samples(exposition).into_iter().map(|(name, _, _)| name).collect();
    let (queries, dashboard) = every_chart_query(&monitoring_objects());
    assert!(queries.len() >= 20, "{queries:?}");
    assert_eq!(
        not_exported(&queries, &exported),
        Vec::<String>::new(),
        "exported: {exported:?}"
    );

    let mut mutated = dashboard.clone();
    mutated["panels"][0]["targets"][0]["expr"] = json!("sum(vrouter_leaders)");
    let wrong = not_exported(&dashboard_queries(&mutated), &exported);
    assert_eq!(
        wrong,
        ["vrouter_leaders"],
        "the check misses a metric the operator does not export"
    );
}
