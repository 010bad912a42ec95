//! The Kubernetes versions the chart claims (`kubeVersion` in Chart.yaml),
//! held to what is tested. The test API server is one version (the
//! testenv's kube-apiserver); older servers differ, for this chart, in
//! which APIs they serve. So:
//!
//! - every API the chart renders unconditionally is one that has been GA
//!   since the claimed minimum minor (a table below, checked against the
//!   chart's rendering, so a newer API added without a gate fails here);
//! - the one newer API, ValidatingAdmissionPolicy (GA in 1.30), is gated on
//!   `.Capabilities`: a real `helm install` on a real kube-apiserver with
//!   that API switched off (`--runtime-config`) succeeds, installs no
//!   policy, and the chart's webhook configuration still refuses an invalid
//!   object with the operator's message (the operator's webhook server runs
//!   in this process; there is no node here, so the configuration's Service
//!   is pointed at it by URL);
//! - with the API on, the same install creates the policy and its binding.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use vrouter_api::{VRouterTarget, VRouterTemplate};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_operator::server::webhooks::review::Admission;
use vrouter_operator::server::webhooks::server::{self, VALIDATE_PATH};
use vrouter_operator::server::webhooks::target_cache::TargetCache;
use vrouter_test_apiserver::{Options, TestEnv, TestNamespace};

use common::shipped_rbac::{ADMISSION_POLICY_API, chart, helm_template_with};
use common::try_create;

const RELEASE: &str = "vr";
const NAMESPACE: &str = "vr-system";
/// What `kube-apiserver --runtime-config` takes to stop serving the API
/// (both of its resources, as a server older than 1.30 serves neither).
const POLICY_API_OFF: [&str; 2] = [
    "admissionregistration.k8s.io/v1/validatingadmissionpolicies=false",
    "admissionregistration.k8s.io/v1/validatingadmissionpolicybindings=false",
];

/// The minor in which each API the chart renders without a capability
/// check became GA (Kubernetes' deprecation guide and release notes).
const GA_MINOR: [(&str, u32); 11] = [
    ("apps/v1/Deployment", 9),
    ("v1/Service", 0),
    ("v1/ServiceAccount", 0),
    ("rbac.authorization.k8s.io/v1/ClusterRole", 8),
    ("rbac.authorization.k8s.io/v1/ClusterRoleBinding", 8),
    ("rbac.authorization.k8s.io/v1/Role", 8),
    ("rbac.authorization.k8s.io/v1/RoleBinding", 8),
    ("admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration", 16),
    ("admissionregistration.k8s.io/v1/MutatingWebhookConfiguration", 16),
    ("apiextensions.k8s.io/v1/CustomResourceDefinition", 16),
    ("policy/v1/PodDisruptionBudget", 21),
];

/// The minors of Chart.yaml's `kubeVersion: ">=1.N.0-0 <1.M.0-0"`: the
/// oldest claimed and the first no longer claimed.
fn claimed_minors() -> (u32, u32) {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .expect("Chart.yaml claims a kubeVersion");
    let claim = line.trim().trim_matches('"');
    let minor = |bound: &str, op: &str| -> u32 {
        let version = bound
            .strip_prefix(op)
            .and_then(|v| v.strip_prefix("1."))
            .unwrap_or_else(|| panic!("kubeVersion {claim} is not of the form \">=1.N.0-0 <1.M.0-0\""));
        version.split('.').next().unwrap().parse().unwrap()
    };
    let (oldest, beyond) = claim
        .split_once(' ')
        .unwrap_or_else(|| panic!("kubeVersion {claim} has no upper bound"));
    (minor(oldest, ">="), minor(beyond, "<"))
}

fn api_of(object: &Value) -> String {
    format!(
        "{}/{}",
        object["apiVersion"].as_str().unwrap(),
        object["kind"].as_str().unwrap()
    )
}

#[test]
fn every_api_rendered_without_a_gate_is_ga_in_the_oldest_claimed_minor() {
    let (minimum, _) = claimed_minors();
    // Every value set that adds objects: the defaults, and without
    // cert-manager (a caBundle given).
    for sets in [
        &[][..],
        &["webhook.certManager.enabled=false", "webhook.caBundle=Y2EK"][..],
    ] {
        let objects = helm_template_with(RELEASE, NAMESPACE, sets, &[]).unwrap();
        assert!(!objects.is_empty());
        for object in objects
            .iter()
            .filter(|o| !o["apiVersion"].as_str().unwrap().starts_with("cert-manager.io/"))
        {
            let api = api_of(object);
            let ga = GA_MINOR
                .iter()
                .find(|(known, _)| *known == api)
                .unwrap_or_else(|| {
                    panic!(
                        "the chart renders {api} on every cluster: add it to GA_MINOR with the minor it became GA \
                         in, or render it only where .Capabilities.APIVersions has it"
                    )
                })
                .1;
            assert!(
                ga <= minimum,
                "{api} is GA in 1.{ga}, newer than the claimed 1.{minimum}"
            );
        }
    }
    // Where the API server serves it, the policy is rendered.
    let with_api = helm_template_with(RELEASE, NAMESPACE, &[], &[ADMISSION_POLICY_API]).unwrap();
    let apis: Vec<String> = with_api.iter().map(api_of).collect();
    assert!(apis.contains(&ADMISSION_POLICY_API.to_owned()), "{apis:?}");
    assert!(
        apis.contains(&"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding".to_owned()),
        "{apis:?}"
    );
}

/// `helm ARGS` against `env`, Helm's own files in `home`.
fn helm(env: &TestEnv, home: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let path = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(path)
        .args(args)
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() { Ok(text) } else { Err(text) }
}

/// `helm install` of the chart (without cert-manager: the harness's CA is
/// the caBundle) into a namespace created for it.
async fn install(env: &TestEnv, home: &std::path::Path) -> Result<String, String> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(env.client())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let ca = base64::engine::general_purpose::STANDARD.encode(env.webhook_tls().ca_pem());
    let chart = chart().display().to_string();
    let ca_set = format!("webhook.caBundle={ca}");
    let args = [
        "install",
        RELEASE,
        &chart,
        "-n",
        NAMESPACE,
        "--set",
        "webhook.certManager.enabled=false",
        "--set",
        &ca_set,
    ];
    tokio::task::block_in_place(|| helm(env, home, &args))
}

/// The operator's webhook server on loopback, on a thread of its own, for
/// as long as the test runs; returns its port.
fn serve_webhooks(env: &TestEnv) -> u16 {
    let (cert, key) = (
        env.webhook_tls().cert_pem().to_owned(),
        env.webhook_tls().key_pem().to_owned(),
    );
    let config = env.config().clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            std::fs::write(&cert_path, cert).unwrap();
            std::fs::write(&key_path, key).unwrap();
            let tls = vrouter_operator::server::tls::ReloadingCert::new(cert_path, key_path)
                .unwrap()
                .server_config();
            let client = kube::Client::try_from(config).unwrap();
            let admission = Admission {
                client: client.clone(),
                metrics: Metrics::new(),
                templates: Arc::new(vrouter_render::TemplateEngine::new()),
                targets: TargetCache::watch(client, None),
            };
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            port_tx.send(listener.local_addr().unwrap().port()).unwrap();
            let (_stop, stopped) = watch::channel(false);
            server::serve_tls(listener, tls, server::router(admission), stopped).await
        })
    });
    port_rx.recv().expect("the webhook server started")
}

/// Points each webhook of the chart's configuration at `port` by URL
/// instead of its Service (no node runs the operator's pods here); rules,
/// failure policy and everything else stay the chart's.
async fn point_webhooks_at(env: &TestEnv, port: u16) {
    let api = Api::<ValidatingWebhookConfiguration>::all(env.client());
    let name = format!("{RELEASE}-vrouter-operator");
    let mut configuration = api.get(&name).await.expect("the chart's webhook configuration");
    let url = format!("https://127.0.0.1:{port}{VALIDATE_PATH}");
    for webhook in configuration.webhooks.as_mut().unwrap() {
        webhook.client_config = env.webhook_tls().client_config(url.clone());
    }
    // A merge patch replaces the list whole, the Service references with it.
    let webhooks = json!({"webhooks": configuration.webhooks});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&webhooks))
        .await
        .unwrap();
}

/// Creates the invalid target until the API server (which loads webhook
/// configurations asynchronously) calls the webhook; returns its refusal.
/// The CRDs Helm installed may not be served yet either.
async fn refusal_of_an_invalid_target(ns: &TestNamespace) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    for attempt in 0.. {
        let body = json!({"metadata": {"name": format!("bad-{attempt}")}, "spec": {"provider": {"type": "proxmox"}}});
        match try_create::<VRouterTarget>(ns, body).await {
            Err(message) if message.contains("denied the request") => return message,
            Err(message) => assert!(
                Instant::now() < deadline,
                "the API server never called the webhook; last answer: {message}"
            ),
            Ok(_) => panic!("an invalid VRouterTarget was admitted"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_policy_api_the_chart_installs_and_its_webhooks_refuse_bad_input() {
    let env = TestEnv::start_with(Options {
        runtime_config: POLICY_API_OFF.iter().map(|s| s.to_string()).collect(),
        // Its informers would wait for the API forever (kube-apiserver
        // exits); a server older than 1.30 runs without it too.
        disabled_admission_plugins: vec!["ValidatingAdmissionPolicy".to_owned()],
        without_crds: true,
        ..Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("cannot start the test API server: {e}"));
    let policies = Api::<ValidatingAdmissionPolicy>::all(env.client());
    assert!(
        policies.list(&Default::default()).await.is_err(),
        "the API server still serves ValidatingAdmissionPolicy"
    );
    let home = tempfile::tempdir().unwrap();
    let installed = install(&env, home.path()).await;
    assert!(installed.is_ok(), "helm install failed: {}", installed.unwrap_err());
    let manifest =
        tokio::task::block_in_place(|| helm(&env, home.path(), &["get", "manifest", RELEASE, "-n", NAMESPACE]))
            .unwrap();
    assert!(!manifest.contains("kind: ValidatingAdmissionPolicy"), "{manifest}");

    point_webhooks_at(&env, serve_webhooks(&env)).await;
    let ns = env.namespace("sites").await;
    let message = refusal_of_an_invalid_target(&ns).await;
    for part in [
        r#"admission webhook "validate.vrouter.kojuro.date" denied the request"#,
        "spec.provider.proxmox: must be set when spec.provider.type is proxmox",
    ] {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
    try_create::<VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "ok"}, "spec": {"provider": {"kubevirt": {"name": "vm"}}}}),
    )
    .await
    .expect("a valid target is admitted");
    try_create::<VRouterTemplate>(
        &ns,
        json!({"metadata": {"name": "ok"}, "spec": {"commands": "set system host-name {{ hostName }}"}}),
    )
    .await
    .expect("a valid template is admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_policy_api_the_chart_installs_the_policy_and_its_binding() {
    let env = TestEnv::start_with(Options {
        without_webhook_admission: true,
        without_crds: true,
        ..Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("cannot start the test API server: {e}"));
    let home = tempfile::tempdir().unwrap();
    let installed = install(&env, home.path()).await;
    assert!(installed.is_ok(), "helm install failed: {}", installed.unwrap_err());
    let name = format!("{RELEASE}-vrouter-operator-own-secrets");
    let policy = Api::<ValidatingAdmissionPolicy>::all(env.client())
        .get(&name)
        .await
        .expect("the policy is installed");
    assert_eq!(policy.spec.unwrap().failure_policy.as_deref(), Some("Fail"));
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(env.client())
        .get(&name)
        .await
        .expect("its binding is installed");
    assert_eq!(binding.spec.policy_name, name);
    // The newest claimed minor is this server's: tested, not hoped for.
    let version = env.client().apiserver_version().await.unwrap();
    let served: u32 = version.minor.trim_end_matches('+').parse().unwrap();
    assert_eq!(
        claimed_minors().1,
        served + 1,
        "Chart.yaml's kubeVersion must end at the tested kube-apiserver's minor (1.{served})"
    );
}
