//! The operator-made webhook certificate through a real kube-apiserver: the
//! certificate manager makes its Secret, publishes the CA in a webhook
//! configuration registered with `url:` client configs and no CA, and two
//! replicas serve what the Secret holds. A forced CA rotation under a stream
//! of creates refuses none, while an invalid create is still refused.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use vrouter_operator::server::webhooks::target_cache::TargetCache;

use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, watch};
use vrouter_api::{VRouterTarget, VRouterTemplate};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_operator::server::webhook_certs::material::{Lifetimes, Stored, bundle_ids};
use vrouter_operator::server::webhook_certs::plan::Policy;
use vrouter_operator::server::webhook_certs::shell::ROTATE_CA;
use vrouter_operator::server::webhook_certs::{Settings, start};
use vrouter_operator::server::webhooks::review::Admission;
use vrouter_operator::server::webhooks::server::{self, VALIDATE_PATH};
use vrouter_test_apiserver::{TestEnv, TestNamespace};

use common::try_create as create;

const CONFIGURATION: &str = "vrouter-operator-certs-test";
const SECRET: &str = "webhook-tls";

/// Two webhooks, one per replica, each called for every create in `ns`: a
/// create is admitted only when both replicas' certificates are trusted.
async fn register(env: &TestEnv, ns: &TestNamespace, ports: [u16; 2]) {
    let webhook = |name: &str, port: u16| ValidatingWebhook {
        name: name.into(),
        client_config: WebhookClientConfig {
            url: Some(format!("https://127.0.0.1:{port}{VALIDATE_PATH}")),
            ..Default::default()
        },
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec!["vrouter.kojuro.date".into()]),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(vec!["CREATE".into()]),
            resources: Some(vec!["vroutertemplates".into(), "vroutertargets".into()]),
            scope: Some("Namespaced".into()),
        }]),
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_owned(),
                ns.name().to_owned(),
            )])),
            ..Default::default()
        }),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        failure_policy: Some("Fail".into()),
        timeout_seconds: Some(10),
        ..Default::default()
    };
    let configuration = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION.into()),
            ..Default::default()
        },
        webhooks: Some(vec![
            webhook("a.certs.vrouter.kojuro.date", ports[0]),
            webhook("b.certs.vrouter.kojuro.date", ports[1]),
        ]),
    };
    Api::<ValidatingWebhookConfiguration>::all(env.client())
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
}

/// Replicas read the Secret at different rates, so one serves a replaced
/// certificate for a while after the other moved on, as pods do.
fn settings(ns: &TestNamespace, check_every: Duration) -> Settings {
    Settings {
        namespace: ns.name().to_owned(),
        secret: SECRET.to_owned(),
        configurations: vec![CONFIGURATION.to_owned()],
        names: vec!["127.0.0.1".to_owned()],
        policy: Policy {
            propagation: Duration::from_secs(5),
        },
        check_every,
        lifetimes: Lifetimes::default(),
    }
}

/// A replica: the certificate manager and the webhook server it feeds.
async fn replica(env: &TestEnv, ns: &TestNamespace, listener: TcpListener, check_every: Duration) {
    let tls = start(env.client(), settings(ns, check_every))
        .await
        .expect("the certificate manager starts");
    let admission = Admission {
        client: env.client(),
        metrics: Metrics::new(),
        templates: Arc::new(vrouter_render::TemplateEngine::new()),
        targets: TargetCache::watch(env.client(), None),
    };
    let (stop, stopped) = watch::channel(false);
    // The server lives as long as the test process.
    std::mem::forget(stop);
    tokio::spawn(server::serve_tls(listener, tls, server::router(admission), stopped));
}

fn template(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"commands": "set system host-name {{ hostName }}"}})
}

fn invalid_target() -> Value {
    json!({"metadata": {"name": "bad"}, "spec": {"provider": {"type": "proxmox"}}})
}

async fn stored(ns: &TestNamespace) -> Stored {
    let secret = ns.api::<Secret>().get(SECRET).await.unwrap();
    Stored::from_data(secret.data.as_ref().unwrap()).unwrap()
}

/// The CA fingerprints each webhook of the configuration trusts.
async fn published(env: &TestEnv) -> Vec<Vec<String>> {
    let config = Api::<ValidatingWebhookConfiguration>::all(env.client())
        .get(CONFIGURATION)
        .await
        .unwrap();
    config
        .webhooks
        .unwrap()
        .iter()
        .map(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .map(|b| bundle_ids(&b.0))
                .unwrap_or_default()
        })
        .collect()
}

/// Polls `done` until it holds; panics with `what` past a generous limit
/// (the limit bounds a hang, it measures nothing).
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn assert_invalid_refused(ns: &TestNamespace) {
    let message = create::<VRouterTarget>(ns, invalid_target())
        .await
        .expect_err("an invalid target was admitted");
    assert!(
        message.contains("spec.provider.proxmox"),
        "refused for another reason than the webhook's check: {message}"
    );
}

struct Stream {
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicUsize>,
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Creates templates one after another until stopped, keeping every refusal.
fn stream_of_creates(ns: &TestNamespace) -> Stream {
    let stop: Arc<AtomicBool> = Arc::default();
    let admitted: Arc<AtomicUsize> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let api = ns.api::<VRouterTemplate>();
    let (s, a, r) = (Arc::clone(&stop), Arc::clone(&admitted), Arc::clone(&refused));
    let task = tokio::spawn(async move {
        for i in 0.. {
            if s.load(Ordering::SeqCst) {
                break;
            }
            let mut body = template(&format!("stream-{i}"));
            body["apiVersion"] = json!("vrouter.kojuro.date/v1");
            body["kind"] = json!("VRouterTemplate");
            let object: VRouterTemplate = serde_json::from_value(body).unwrap();
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => a.fetch_add(1, Ordering::SeqCst),
                Err(e) => {
                    r.lock().await.push(e.to_string());
                    0
                }
            };
        }
    });
    Stream {
        stop,
        admitted,
        refused,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_ca_rotation_under_a_stream_of_creates_refuses_none() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("webhook-certs").await;
    let listeners = [
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    ];
    let ports = [0, 1].map(|i| listeners[i].local_addr().unwrap().port());
    register(env, &ns, ports).await;
    let [first, second] = listeners;
    replica(env, &ns, first, Duration::from_millis(500)).await;
    replica(env, &ns, second, Duration::from_secs(3)).await;

    // The bundle is published from the Secret the first replica made, and
    // once the API server has it, creates are admitted and refused as usual.
    let initial = stored(&ns).await;
    assert_eq!(initial.cas.len(), 1);
    let old_ca = initial.cas[0].record.id.clone();
    assert_eq!(published(env).await, vec![vec![old_ca.clone()]; 2]);
    eventually("a valid create admitted by both replicas", || async {
        create::<VRouterTemplate>(&ns, template(&format!("probe-{}", rand_suffix())))
            .await
            .is_ok()
    })
    .await;
    assert_invalid_refused(&ns).await;

    let stream = stream_of_creates(&ns);
    let patch = json!({"metadata": {"annotations": {ROTATE_CA: "rotation-1"}}});
    ns.api::<Secret>()
        .patch(SECRET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // The rotation's end: only the new CA is trusted, and it signed the
    // served certificate.
    eventually("the CA rotated and the old one left every bundle", || async {
        let now = stored(&ns).await;
        let done = now.cas.len() == 1
            && now.cas[0].record.id != old_ca
            && now
                .serving
                .as_ref()
                .is_some_and(|s| s.record.issuer == now.cas[0].record.id);
        done && published(env).await == vec![vec![now.cas[0].record.id.clone()]; 2]
    })
    .await;
    // Creates go on after the old CA left, so both replicas must serve the
    // new certificate for them to be admitted.
    let at_end = stream.admitted.load(Ordering::SeqCst);
    eventually("more creates admitted after the rotation", || async {
        stream.admitted.load(Ordering::SeqCst) >= at_end + 5
    })
    .await;
    stream.stop.store(true, Ordering::SeqCst);
    stream.task.await.unwrap();
    let refused = stream.refused.lock().await.clone();
    assert!(
        refused.is_empty(),
        "{} creates refused during the rotation: {refused:?}",
        refused.len()
    );
    assert!(stream.admitted.load(Ordering::SeqCst) > at_end);
    assert_invalid_refused(&ns).await;
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
