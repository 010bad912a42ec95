//! The chart's default webhook certificate on the test node: `helm install`
//! with no cert-manager and no certificate given, two replicas from the
//! operator's image. The operator makes the Secret and writes the CA into
//! its ValidatingWebhookConfiguration; the API server then admits a valid
//! create and refuses an invalid one through the webhook Service; a forced
//! CA rotation (the Secret's annotation, as an administrator sets it) while
//! creates go on refuses none, through to the old CA leaving the bundle.
//!
//! The propagation period is shortened through `extraEnv` so that the
//! rotation's steps fit in a test; the steps are the same.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use vrouter_api::{VRouterTarget, VRouterTemplate};
use vrouter_test_apiserver::TestNamespace;
use vrouter_test_node::TestNode;

const IMAGE_ENV: &str = "VROUTER_OPERATOR_IMAGE";
const RELEASE: &str = "vrouter-operator";
const SECRET: &str = "vrouter-operator-webhook-tls";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fails, naming the commands that make it, without the image archive.
fn image_archive() -> PathBuf {
    let Some(path) = std::env::var_os(IMAGE_ENV) else {
        panic!(
            "{IMAGE_ENV} is not set: `cargo xtask test` builds the operator's image and sets it; to run this test \
             alone, build the archive with `cargo xtask image --out <path>` and set {IMAGE_ENV}=<path>"
        )
    };
    let archive = workspace_root().join(path);
    assert!(archive.is_file(), "{IMAGE_ENV}={} is not a file", archive.display());
    archive
}

/// `helm install --wait` as a user without cert-manager runs it: nothing
/// about certificates is set.
async fn helm_install(node: &TestNode, ns: &TestNamespace) {
    let helm = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
    let home = node.dir().join("helm-certs");
    let out = tokio::process::Command::new(helm)
        .args(["install", RELEASE])
        .arg(workspace_root().join("deploy/helm/vrouter-operator"))
        .args(["--namespace", ns.name(), "--kubeconfig"])
        .arg(node.env().kubeconfig_path())
        .args([
            "--set",
            "replicas=2",
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "crds.install=false",
        ])
        .args([
            "--set",
            "extraEnv[0].name=WEBHOOK_CERT_PROPAGATION",
            "--set",
            "extraEnv[0].value=20s",
        ])
        .args([
            "--set",
            "extraEnv[1].name=WEBHOOK_CERT_CHECK",
            "--set",
            "extraEnv[1].value=2s",
        ])
        .args(["--wait", "--timeout", "4m"])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .await
        .expect("helm runs");
    if !out.status.success() {
        let pods = ns.api::<Pod>().list(&ListParams::default()).await.map(|l| l.items);
        let mut logs = String::new();
        for pod in pods.iter().flatten() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let previous = LogParams {
                previous: true,
                tail_lines: Some(40),
                ..LogParams::default()
            };
            let log = ns
                .api::<Pod>()
                .logs(&name, &previous)
                .await
                .unwrap_or_else(|e| e.to_string());
            logs.push_str(&format!("--- {name} (previous container):\n{log}\n"));
        }
        panic!(
            "helm install failed:\n{}{}\noperator logs:\n{logs}\nlast kubelet log lines:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            node.log_tail("kubelet")
        );
    }
}

fn object(kind: &str, body: Value) -> Value {
    let mut body = body;
    body["apiVersion"] = json!("vrouter.kojuro.date/v1");
    body["kind"] = json!(kind);
    body
}

fn template(name: &str) -> VRouterTemplate {
    let body = object(
        "VRouterTemplate",
        json!({"metadata": {"name": name}, "spec": {"commands": "set system host-name {{ hostName }}"}}),
    );
    serde_json::from_value(body).unwrap()
}

async fn assert_invalid_refused(ns: &TestNamespace, name: &str) {
    let target: VRouterTarget = serde_json::from_value(object(
        "VRouterTarget",
        json!({"metadata": {"name": name}, "spec": {"provider": {"type": "proxmox"}}}),
    ))
    .unwrap();
    let message = ns
        .api::<VRouterTarget>()
        .create(&PostParams::default(), &target)
        .await
        .expect_err("an invalid target was admitted")
        .to_string();
    assert!(
        message.contains("spec.provider.proxmox"),
        "not the webhook's refusal: {message}"
    );
}

/// The Secret's CA bundle and its record (dates, issuer) as the operator wrote them.
async fn stored(ns: &TestNamespace) -> Option<(String, Value)> {
    let secret = ns.api::<Secret>().get_opt(SECRET).await.unwrap()?;
    let data = secret.data?;
    let bundle = String::from_utf8(data.get("ca.crt")?.0.clone()).unwrap();
    let record = serde_json::from_slice(&data.get("certs.json")?.0).unwrap();
    Some((bundle, record))
}

async fn published(node: &TestNode) -> Vec<Option<String>> {
    let config = Api::<ValidatingWebhookConfiguration>::all(node.client())
        .get(RELEASE)
        .await
        .unwrap();
    config
        .webhooks
        .unwrap_or_default()
        .iter()
        .map(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .map(|b| String::from_utf8(b.0.clone()).unwrap())
        })
        .collect()
}

/// Polls until `done`; the limit only bounds a hang.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_default_makes_its_certificate_and_a_forced_rotation_refuses_no_create() {
    let archive = image_archive();
    let node = TestNode::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start the test node: {e}"));
    node.import_image(&archive)
        .unwrap_or_else(|e| panic!("importing {}: {e}", archive.display()));
    let ns = node.namespace("vrouter-system").await.expect("the release namespace");
    helm_install(&node, &ns).await;
    let tenant = node.namespace("tenant").await.expect("a tenant namespace");

    // No certificate was given: the operator made one and published its CA.
    let (initial, _) = stored(&ns).await.expect("the operator made the webhook Secret");
    assert_eq!(initial.matches("BEGIN CERTIFICATE").count(), 1);
    eventually("the operator's CA in every webhook", || async {
        published(&node)
            .await
            .iter()
            .all(|b| b.as_deref() == Some(initial.as_str()))
    })
    .await;
    eventually("a valid create admitted", || async {
        tenant
            .api::<VRouterTemplate>()
            .create(&PostParams::default(), &template("probe"))
            .await
            .is_ok()
    })
    .await;
    assert_invalid_refused(&tenant, "bad-before").await;

    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicUsize::new(0));
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let writer = {
        let (stop, admitted, refused) = (stop.clone(), admitted.clone(), refused.clone());
        let api = tenant.api::<VRouterTemplate>();
        tokio::spawn(async move {
            for i in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match api
                    .create(&PostParams::default(), &template(&format!("stream-{i}")))
                    .await
                {
                    Ok(_) => {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => refused.lock().await.push(e.to_string()),
                }
            }
        })
    };
    let annotate = json!({"metadata": {"annotations": {"vrouter.kojuro.date/rotate-ca": "node-test"}}});
    ns.api::<Secret>()
        .patch(SECRET, &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .unwrap();
    eventually(
        "a new CA alone, signing the served certificate, in every webhook",
        || async {
            let Some((bundle, record)) = stored(&ns).await else {
                return false;
            };
            let cas = record["cas"].as_array().cloned().unwrap_or_default();
            let rotated = bundle != initial && cas.len() == 1 && record["serving"]["issuer"] == cas[0]["id"];
            rotated
                && published(&node)
                    .await
                    .iter()
                    .all(|b| b.as_deref() == Some(bundle.as_str()))
        },
    )
    .await;
    let at_end = admitted.load(Ordering::SeqCst);
    eventually("creates admitted after the old CA left", || async {
        admitted.load(Ordering::SeqCst) >= at_end + 5
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let refused = refused.lock().await.clone();
    assert!(
        refused.is_empty(),
        "{} creates refused during the rotation: {refused:?}",
        refused.len()
    );
    assert_invalid_refused(&tenant, "bad-after").await;
}
