//! The operator binary's listeners as a cluster sees them, the process
//! running as its ServiceAccount under the shipped roles:
//!
//! - `/metrics` over HTTPS: refused without a token (401) and for an
//!   identity without the reader role (403), served to one bound to the
//!   shipped `metrics-reader` ClusterRole, in a format Prometheus's text
//!   parser reads;
//! - the webhook server outlives a real accept error (the process out of
//!   file descriptors), bounds how long a client may take over its headers
//!   and body, and takes a review as large as the API server sends.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vrouter_api::VRouterConfig;
use vrouter_test_apiserver::TestEnv;

use common::https::{self, connect_tls};
use common::operator_process::OperatorProcess;
use common::shipped_rbac;
use common::wait_for;

/// Installs the shipped roles (once per test binary) and returns a token of
/// the operator's ServiceAccount.
async fn operator_token(env: &TestEnv) -> String {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let mut objects = shipped_rbac::plain_manifest("rbac.yaml");
            objects.extend(shipped_rbac::plain_manifest("metrics-rbac.yaml"));
            shipped_rbac::install(&env.client(), &objects).await;
        })
        .await;
    env.service_account_token("vrouter-system", "vrouter-operator")
        .await
        .unwrap()
}

/// A ServiceAccount `name` in `namespace`, optionally bound to `cluster_role`.
async fn account(env: &TestEnv, namespace: &str, name: &str, cluster_role: Option<&str>) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client(), namespace);
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    accounts.create(&PostParams::default(), &account).await.unwrap();
    if let Some(role) = cluster_role {
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("{namespace}-{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(env.client())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    env.service_account_token(namespace, name).await.unwrap()
}

async fn started(env: &TestEnv, hint: &str) -> (OperatorProcess, String) {
    let token = operator_token(env).await;
    let ns = env.namespace(hint).await;
    let mut operator = OperatorProcess::start(
        env,
        &token,
        &["--leader-elect=false", &format!("--watch-namespace={}", ns.name())],
    );
    operator.wait_ready(Duration::from_secs(120)).await;
    (operator, ns.name().to_owned())
}

#[tokio::test]
async fn metrics_are_served_over_https_only_to_readers_the_api_server_allows() {
    let env = TestEnv::shared().await;
    let (operator, namespace) = started(env, "metrics").await;
    let ca = env.webhook_tls().ca_pem();
    let scrape = |token: Option<String>| async move {
        let header = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = header.iter().map(|h| ("Authorization", h.as_str())).collect();
        https::https(operator.metrics, ca, "GET", "/metrics", &headers, b"")
            .await
            .unwrap()
    };

    let anonymous = scrape(None).await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    assert!(!anonymous.text().contains("vrouter_"), "{}", anonymous.text());
    let garbage = scrape(Some("not-a-token".into())).await;
    assert_eq!(garbage.status, 401, "{garbage:?}");

    let stranger = account(env, &namespace, "stranger", None).await;
    let refused = scrape(Some(stranger)).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(refused.text().contains("may not get /metrics"), "{}", refused.text());

    let prometheus = account(env, &namespace, "prometheus", Some("vrouter-operator-metrics-reader")).await;
    // Something for the operator to reconcile, so its labelled families
    // have samples (a family without any is not printed).
    let config: VRouterConfig = serde_json::from_value(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
        "metadata": {"name": "c"},
        "spec": {"targetRef": {"name": "missing"}, "commands": "set system host-name r1\n"},
    }))
    .unwrap();
    Api::<VRouterConfig>::namespaced(env.client(), &namespace)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    // The binding reaches the authoriser through a watch: wait for it, and
    // for the reconcile to be counted.
    let served = wait_for("the reader to be served", Duration::from_secs(60), || {
        let token = prometheus.clone();
        async move {
            Some(scrape(Some(token)).await)
                .filter(|a| a.status == 200 && a.text().contains("vrouter_reconciles_total{"))
        }
    })
    .await;
    let text = served.text();
    // Prometheus's text format, read by a parser: every sample line is
    // read (a histogram is one sample of its buckets, its _sum and _count
    // samples of their own), and the operator's families are there.
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scraped = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let sample_lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    let lines_read: usize = scraped
        .samples
        .iter()
        .map(|s| match &s.value {
            prometheus_parse::Value::Histogram(buckets) => buckets.len(),
            prometheus_parse::Value::Summary(quantiles) => quantiles.len(),
            _ => 1,
        })
        .sum();
    assert_eq!(lines_read, sample_lines, "every sample line is read: {text}");
    let reconciles = scraped
        .samples
        .iter()
        .find(|s| s.metric == "vrouter_reconciles_total" && s.labels.get("controller") == Some("vrouterconfig"))
        .unwrap_or_else(|| panic!("no VRouterConfig reconciles: {text}"));
    assert!(
        // OpenMetrics names the family without `_total`, which this parser
        // does not match to the sample: it reads the sample untyped.
        matches!(reconciles.value, prometheus_parse::Value::Counter(n) | prometheus_parse::Value::Untyped(n) if n >= 1.0),
        "{reconciles:?}"
    );
    assert!(
        scraped
            .samples
            .iter()
            .any(|s| s.metric == "vrouter_apply_observed_seconds"
                && matches!(&s.value, prometheus_parse::Value::Histogram(b) if !b.is_empty())),
        "{text}"
    );
}

/// An AdmissionReview the webhook answers without asking the API server.
fn review(uid: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "vrouter.kojuro.date", "version": "v1", "kind": "VRouterParams"},
            "resource": {"group": "vrouter.kojuro.date", "version": "v1", "resource": "vrouterparams"},
            "operation": "UPDATE", "name": "p", "namespace": "default",
            "userInfo": {"username": "someone"},
            "object": object.clone(),
            "oldObject": object,
        },
    }))
    .unwrap()
}

fn params(size: usize) -> Value {
    json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterParams",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"params": {"blob": "x".repeat(size)}},
    })
}

async fn post_review(operator: &OperatorProcess, ca: &str, body: &[u8]) -> https::Answer {
    https::https(
        operator.webhook,
        ca,
        "POST",
        "/validate",
        &[("Content-Type", "application/json")],
        body,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_webhook_server_survives_running_out_of_file_descriptors() {
    let env = TestEnv::shared().await;
    let (operator, _) = started(env, "accept-errors").await;
    let ca = env.webhook_tls().ca_pem();
    let answered = post_review(&operator, ca, &review("before", params(10))).await;
    assert_eq!(answered.status, 200, "{answered:?}");

    // Leave the process a handful of file descriptors beyond those it has
    // open, then open far more connections than that: accept(2) fails with
    // EMFILE, a real accept error.
    let open = std::fs::read_dir(format!("/proc/{}/fd", operator.pid()))
        .unwrap()
        .count();
    let limit = open + 4;
    let set = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &operator.pid().to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .expect("run prlimit (util-linux)");
    assert!(set.success());
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(tokio::net::TcpStream::connect(operator.webhook).await.unwrap());
    }
    let log = wait_for("an accept error in the log", Duration::from_secs(30), || async {
        let log = operator.log();
        log.contains("accepting a webhook connection failed").then_some(log)
    })
    .await;
    assert!(log.contains("Too many open files"), "{log}");

    // The connections go away; the server accepts again, as it is.
    drop(held);
    let recovered = wait_for("a review answered again", Duration::from_secs(60), || async {
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            post_review(&operator, ca, &review("after", params(10))),
        )
        .await
        .ok()?;
        (answer.status == 200).then_some(answer)
    })
    .await;
    let body: Value = serde_json::from_slice(&recovered.body).unwrap();
    assert_eq!(body["response"]["uid"], "after");
    assert_eq!(body["response"]["allowed"], true);
    let ready = https::http_get(operator.health, "/readyz").await.unwrap();
    assert_eq!(ready.status, 200, "{ready:?}");
}

#[tokio::test]
async fn slow_or_oversized_requests_are_cut_and_the_largest_review_is_taken() {
    let env = TestEnv::shared().await;
    let (operator, _) = started(env, "limits").await;
    let ca = env.webhook_tls().ca_pem();

    // An UPDATE review of two objects of nearly 3 MiB each: the most the
    // API server sends.
    let largest = review("largest", params(3 * 1024 * 1024 - 4096));
    assert!(largest.len() > 6 * 1024 * 1024 - 16 * 1024, "{}", largest.len());
    let answer = post_review(&operator, ca, &largest).await;
    assert_eq!(answer.status, 200, "{}", answer.head);
    // Far beyond it: refused, not read into memory.
    let too_large = review("too-large", params(5 * 1024 * 1024));
    let answer = post_review(&operator, ca, &too_large).await;
    assert_eq!(answer.status, 413, "{}", answer.head);

    // Headers that never end: the connection is closed by the server.
    let mut stalled = connect_tls(operator.webhook, ca).await.unwrap();
    stalled
        .write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the server kept a connection with unfinished headers open"
    );

    // A body that never arrives: answered 408.
    let mut slow = connect_tls(operator.webhook, ca).await.unwrap();
    slow.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(90), slow.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server waited for the body forever");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
}
