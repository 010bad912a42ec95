//! Every reconcile runs in a span naming its object: a line a controller
//! logs inside a reconcile carries the kind, namespace and name of the
//! object it was about, though the line itself does not repeat them. The
//! operator binary logs JSON on a real kube-apiserver.

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use vrouter_api::VRouterTarget;
use vrouter_test_apiserver::TestEnv;

use common::operator_process::OperatorProcess;
use common::{create, shipped_rbac, wait_for};

/// The JSON log line whose message is `message`, once the operator wrote it.
fn line_with(log: &str, message: &str) -> Option<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["message"] == message)
}

#[tokio::test]
async fn a_line_logged_inside_a_reconcile_names_its_object() {
    let env = TestEnv::shared().await;
    shipped_rbac::install(&env.client(), &shipped_rbac::plain_manifest("rbac.yaml")).await;
    let token = env
        .service_account_token("vrouter-system", "vrouter-operator")
        .await
        .unwrap();
    let ns = env.namespace("reconcile-spans").await;
    let mut operator = OperatorProcess::start(
        env,
        &token,
        &[
            "--leader-elect=false",
            "--log-format=json",
            &format!("--watch-namespace={}", ns.name()),
        ],
    );
    operator.wait_ready(Duration::from_secs(120)).await;

    // A target whose ProxmoxCluster is missing: its reconcile logs that it
    // cannot tell whether the VM runs, a line that names no object itself
    // beyond the `target` field the span does not need.
    let _: VRouterTarget = create(
        &ns,
        json!({"metadata": {"name": "lost"}, "spec": {"provider": {"type": "proxmox",
        "proxmox": {"vmid": 121, "clusterRef": {"name": "absent"}}}}}),
    )
    .await;
    let line = wait_for("the target's reconcile to log", Duration::from_secs(60), || async {
        line_with(&operator.log(), "could not tell whether the VM runs")
    })
    .await;
    let span = &line["span"];
    assert_eq!(span["name"], "reconcile", "{line}");
    assert_eq!(span["kind"], "VRouterTarget", "{line}");
    assert_eq!(span["namespace"], ns.name(), "{line}");
    assert_eq!(span["object"], "lost", "{line}");
}
