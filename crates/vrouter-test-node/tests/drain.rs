//! A node drain against the chart's PodDisruptionBudget, on the test node:
//! `helm install` of the chart with two replicas from the operator's real
//! image (no cert-manager: the webhook's certificate is a test CA's, given
//! as `webhook.caBundle`), the budget allowing one disruption, then
//! `kubectl drain` of the node for the operator's pods, which evicts through
//! the Eviction API. One replica is evicted; the other's eviction is refused
//! by the budget ("would violate the pod's disruption budget") again and
//! again, because on this single, cordoned node the replacement cannot be
//! scheduled, until the drain gives up: one replica is left, Ready. The
//! admission webhook answers every create while the drain runs and after
//! (an invalid object refused with the operator's message, a valid one
//! admitted; never "failed calling webhook"). Uncordoned, the replacement
//! runs and the budget allows one disruption again. On a cluster of several
//! nodes the replacement starts elsewhere and the drain then proceeds; what
//! the budget refuses and allows is the same (docs/operations.md).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::json;
use vrouter_test_apiserver::TestNamespace;
use vrouter_test_node::{NODE_NAME, TestNode};

/// The variable `cargo xtask test` sets to the image archive it built.
const IMAGE_ENV: &str = "VROUTER_OPERATOR_IMAGE";
const RELEASE: &str = "vrouter-operator";
const SELECTOR: &str = "app.kubernetes.io/name=vrouter-operator,app.kubernetes.io/instance=vrouter-operator";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The image archive; fails, naming the commands that make it, when missing.
fn image_archive() -> PathBuf {
    let Some(path) = std::env::var_os(IMAGE_ENV) else {
        panic!(
            "{IMAGE_ENV} is not set: `cargo xtask test` builds the operator's image and sets it; to run this test \
             alone, build it with `cargo xtask image --out <path>` and set {IMAGE_ENV}=<path>"
        )
    };
    let archive = workspace_root().join(path);
    assert!(archive.is_file(), "{IMAGE_ENV}={} is not a file", archive.display());
    archive
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_evicts_one_replica_at_a_time_and_the_webhook_keeps_answering() {
    let archive = image_archive();
    let node = TestNode::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start the test node: {e}"));
    node.import_image(&archive)
        .unwrap_or_else(|e| panic!("importing {}: {e}", archive.display()));
    let ns = node.namespace("vrouter-system").await.expect("a namespace");
    let ca = webhook_certificate(&ns).await;
    helm_install(&node, &ns, &ca).await;
    let pods = ready_pods(&node, &ns).await;
    assert_eq!(pods.len(), 2, "{pods:?}");
    the_budget_allows(&node, &ns, 1).await;
    the_webhook_answers(&ns, "before").await;

    // The drain runs while the webhook is called: every call answered.
    let drain = tokio::spawn(drain_node(node.env().kubeconfig_path().to_owned()));
    let mut calls = 0;
    while !drain.is_finished() {
        the_webhook_answers(&ns, &format!("during-{calls}")).await;
        calls += 1;
    }
    let (drained, said) = drain.await.expect("the drain task");
    // One node: the evicted replica's replacement cannot be scheduled on
    // the cordoned node, so the budget refuses the other replica's eviction
    // until the drain gives up.
    assert!(!drained, "the drain evicted every operator pod: {said}");
    assert!(said.contains("would violate the pod's disruption budget"), "{said}");
    let left = ready_now(&ns).await.expect("the pods");
    assert_eq!(left.len(), 1, "one replica kept: {left:?}\n{said}");
    assert!(pods.contains(&left[0]), "{left:?} is one of {pods:?}");
    assert!(
        said.contains(&format!("pod/{} evicted", other(&pods, &left[0]))),
        "{said}"
    );
    assert!(calls >= 1, "the webhook was called during the drain");
    the_webhook_answers(&ns, "after-drain").await;

    // Uncordoned, the replacement runs and the budget allows one again.
    uncordon(&node);
    let replaced = node
        .until("two Ready replicas again, the evicted one replaced", || async {
            ready_now(&ns).await.filter(|now| now.len() == 2)
        })
        .await;
    assert!(replaced.contains(&left[0]), "{replaced:?}");
    the_budget_allows(&node, &ns, 1).await;
}

/// The one of `pods` that is not `kept`.
fn other<'a>(pods: &'a [String], kept: &str) -> &'a str {
    pods.iter().find(|p| *p != kept).expect("two pods")
}

/// `kubectl drain` of the node, the operator's pods only, giving up after
/// 40 s: whether it drained, and what it said.
async fn drain_node(kubeconfig: PathBuf) -> (bool, String) {
    let kubectl = vrouter_test_apiserver::kubectl().unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["drain", NODE_NAME, "--pod-selector", SELECTOR, "--timeout=40s"])
        .output()
        .await
        .expect("kubectl runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn uncordon(node: &TestNode) {
    let kubectl = vrouter_test_apiserver::kubectl().unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(node.env().kubeconfig_path())
        .args(["uncordon", NODE_NAME])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Creates the webhook's TLS Secret, signed by a new CA valid for the
/// webhook Service's names; returns the CA's PEM.
async fn webhook_certificate(ns: &TestNamespace) -> String {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("a CA key")).expect("the CA");
    let service = format!("{RELEASE}-webhook.{}.svc", ns.name());
    let mut params = CertificateParams::new(vec![service]).expect("serving parameters");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("a serving key");
    let cert = params.signed_by(&key, &ca).expect("the serving certificate");
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": format!("{RELEASE}-webhook-tls")},
        "stringData": {"tls.crt": cert.pem(), "tls.key": key.serialize_pem()},
    }))
    .expect("a valid Secret");
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("the webhook's Secret");
    ca.pem()
}

/// `helm install --wait` with two replicas, the image already on the node.
async fn helm_install(node: &TestNode, ns: &TestNamespace, ca_pem: &str) {
    let helm = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
    let home = node.dir().join("helm");
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let out = tokio::process::Command::new(helm)
        .args(["install", RELEASE])
        .arg(workspace_root().join("deploy/helm/vrouter-operator"))
        .args(["--namespace", ns.name(), "--kubeconfig"])
        .arg(node.env().kubeconfig_path())
        .args(["--set", "replicas=2", "--set", "image.pullPolicy=Never"])
        .args(["--set", "webhook.certManager.enabled=false", "--set"])
        .arg(format!("webhook.caBundle={ca_bundle}"))
        .args(["--set", "crds.install=false", "--wait", "--timeout", "4m"])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .await
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm install failed:\n{}{}\nlast kubelet log lines:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        node.log_tail("kubelet")
    );
}

/// The names of the operator's pods that are Ready and not being deleted.
async fn ready_now(ns: &TestNamespace) -> Option<Vec<String>> {
    let list = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .ok()?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    Some(names)
}

async fn ready_pods(node: &TestNode, ns: &TestNamespace) -> Vec<String> {
    node.until("both operator replicas Ready", || async {
        ready_now(ns).await.filter(|n| n.len() == 2)
    })
    .await
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The chart's budget, as the disruption controller sees it: `allowed`
/// evictions now.
async fn the_budget_allows(node: &TestNode, ns: &TestNamespace, allowed: i32) {
    let budgets: Api<PodDisruptionBudget> = ns.api();
    node.until("the budget's disruptions allowed", || async {
        let budget = budgets.get(RELEASE).await.ok()?;
        assert_eq!(
            budget.spec.as_ref().and_then(|s| s.min_available.clone()),
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
        );
        (budget.status?.disruptions_allowed == Some(allowed)).then_some(())
    })
    .await;
}

/// An invalid VRouterTarget refused by the operator's webhook with its
/// message, and a valid one admitted: the webhook answered both (with
/// `failurePolicy: Fail` an unanswered call is a refusal naming the call).
async fn the_webhook_answers(ns: &TestNamespace, when: &str) {
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "vrouter.kojuro.date",
        "v1",
        "VRouterTarget",
    ));
    let targets: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &ar);
    let target = |name: &str, provider: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"name": name}, "spec": {"provider": provider},
        }))
        .expect("an object")
    };
    let invalid = target(&format!("{when}-invalid"), json!({"type": "proxmox"}));
    match targets.create(&PostParams::default(), &invalid).await {
        Err(kube::Error::Api(status)) => assert!(
            status
                .message
                .contains(r#"admission webhook "validate.vrouter.kojuro.date" denied the request"#),
            "{when} the evictions: {}",
            status.message
        ),
        other => panic!("{when} the evictions, the invalid target: {other:?}"),
    }
    let valid = target(
        &format!("{when}-valid"),
        json!({"type": "kubevirt", "kubevirt": {"name": "vm"}}),
    );
    targets
        .create(&PostParams::default(), &valid)
        .await
        .unwrap_or_else(|e| panic!("{when} the evictions, the valid target: {e}"));
}
