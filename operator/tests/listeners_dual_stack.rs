//! The operator binary's three listeners bound as the chart binds them by
//! default (the host of the chart's rendered `WEBHOOK_ADDR`, `METRICS_ADDR`
//! and `HEALTH_PROBE_ADDR`, each on a free port), answering over both
//! loopbacks, 127.0.0.1 and ::1: one socket per listener serves IPv4 and
//! IPv6 clients, so pods reach it on an IPv6-only or dual-stack cluster.
//! Each answer is the operator's own: an admission review answered for its
//! uid, `/metrics` refused without a token (401), `/readyz` 200.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};
use vrouter_test_apiserver::TestEnv;

use common::https::{self, http_get};
use common::operator_process::OperatorProcess;
use common::shipped_rbac;

/// The host part of each listener's address in the chart's default
/// rendering (everything before the port).
fn chart_listen_hosts() -> Vec<(String, String)> {
    let objects = shipped_rbac::helm_template("vr", "vrouter-system", &[]).unwrap();
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the chart renders a Deployment");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    ["WEBHOOK_ADDR", "METRICS_ADDR", "HEALTH_PROBE_ADDR"]
        .iter()
        .map(|name| {
            let value = env
                .iter()
                .find(|e| e["name"] == *name)
                .and_then(|e| e["value"].as_str())
                .unwrap_or_else(|| panic!("the chart sets {name}"));
            let (host, _port) = value.rsplit_once(':').expect("HOST:PORT");
            (name.to_string(), host.to_owned())
        })
        .collect()
}

/// An AdmissionReview of a VRouterTarget, as the API server sends one.
fn review(uid: &str) -> Vec<u8> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "vrouter.kojuro.date", "version": "v1", "kind": "VRouterTarget"},
            "resource": {"group": "vrouter.kojuro.date", "version": "v1", "resource": "vroutertargets"},
            "operation": "CREATE", "name": "t", "namespace": "default",
            "userInfo": {"username": "someone"},
            "object": {
                "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
                "metadata": {"name": "t", "namespace": "default"},
                "spec": {"provider": {"type": "kubevirt", "kubevirt": {"name": "vm"}}},
            },
        },
    });
    serde_json::to_vec(&review).unwrap()
}

#[tokio::test]
async fn every_listener_answers_over_ipv4_and_ipv6_loopback() {
    let hosts = chart_listen_hosts();
    let host = &hosts[0].1;
    assert!(
        hosts.iter().all(|(_, h)| h == host),
        "the listeners bind different hosts: {hosts:?}"
    );
    let env = TestEnv::shared().await;
    shipped_rbac::install(&env.client(), &shipped_rbac::plain_manifest("rbac.yaml")).await;
    let token = env
        .service_account_token("vrouter-system", "vrouter-operator")
        .await
        .unwrap();
    let ns = env.namespace("dual-stack").await;
    let args = ["--leader-elect=false", &format!("--watch-namespace={}", ns.name())];
    let mut operator = OperatorProcess::start_on_host(env, &token, &args, &[], host);
    operator.wait_ready(Duration::from_secs(120)).await;
    let ca = env.webhook_tls().ca_pem();
    let loopbacks = [IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)];
    for ip in loopbacks {
        let at = |addr: SocketAddr| SocketAddr::new(ip, addr.port());

        let uid = format!("dual-stack-{ip}");
        let headers = [("Content-Type", "application/json")];
        let answer = https::https(at(operator.webhook), ca, "POST", "/validate", &headers, &review(&uid))
            .await
            .unwrap_or_else(|e| panic!("the webhook over {ip}: {e}"));
        assert_eq!(answer.status, 200, "the webhook over {ip}: {answer:?}");
        let body: Value = serde_json::from_slice(&answer.body).expect("an AdmissionReview");
        assert_eq!(body["response"]["uid"], uid.as_str(), "{body}");
        assert!(body["response"]["allowed"].is_boolean(), "{body}");

        let metrics = https::https(at(operator.metrics), ca, "GET", "/metrics", &[], b"")
            .await
            .unwrap_or_else(|e| panic!("/metrics over {ip}: {e}"));
        assert_eq!(metrics.status, 401, "/metrics over {ip} without a token: {metrics:?}");

        let ready = http_get(at(operator.health), "/readyz")
            .await
            .unwrap_or_else(|e| panic!("/readyz over {ip}: {e}"));
        assert_eq!(ready.status, 200, "/readyz over {ip}: {ready:?}");
    }
}
