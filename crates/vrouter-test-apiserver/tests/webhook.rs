//! An admission webhook served by the test process over HTTPS, registered with
//! a `url:` client config and the harness's CA, is called by the API server.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use vrouter_api::VRouterTemplate;
use vrouter_test_apiserver::TestEnv;

const DENIAL: &str = "denied by the vrouter-test-apiserver test webhook";

/// Answers admission reviews: denies objects labelled `deny: "yes"`.
async fn review(request: Request<Incoming>, calls: Arc<AtomicUsize>) -> Result<Response<Full<Bytes>>, Infallible> {
    calls.fetch_add(1, Ordering::SeqCst);
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&body).expect("an AdmissionReview");
    let admission: AdmissionRequest<DynamicObject> = review.try_into().expect("a review with a request");
    let deny = admission
        .object
        .as_ref()
        .and_then(|o| o.metadata.labels.as_ref())
        .and_then(|l| l.get("deny"))
        .is_some_and(|v| v == "yes");
    let mut response = AdmissionResponse::from(&admission);
    if deny {
        response = response.deny(DENIAL);
    }
    let out = serde_json::to_vec(&response.into_review()).expect("a review serializes");
    Ok(Response::new(Full::new(Bytes::from(out))))
}

/// Serves [`review`] over TLS on a free loopback port; returns the port.
async fn serve(env: &TestEnv, calls: Arc<AtomicUsize>) -> u16 {
    let acceptor = TlsAcceptor::from(Arc::new(env.webhook_tls().server_config().unwrap()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = service_fn(move |req| review(req, calls.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

fn template(name: &str, deny: bool) -> VRouterTemplate {
    let mut template: VRouterTemplate = serde_json::from_value(json!({
        "apiVersion": "vrouter.kojuro.date/v1",
        "kind": "VRouterTemplate",
        "metadata": {"name": name},
        "spec": {"config": "set system host-name edge"},
    }))
    .unwrap();
    if deny {
        template.metadata.labels = Some([("deny".to_owned(), "yes".to_owned())].into());
    }
    template
}

#[tokio::test]
async fn the_api_server_calls_a_webhook_served_by_the_test() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("webhook").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let port = serve(env, calls.clone()).await;

    let name = format!("vrouter-test-apiserver-{}", ns.name());
    let configuration = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "deny-labelled.testenv.vrouter.kojuro.date".to_owned(),
            client_config: env
                .webhook_tls()
                .client_config(format!("https://127.0.0.1:{port}/validate")),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["vrouter.kojuro.date".to_owned()]),
                api_versions: Some(vec!["v1".to_owned()]),
                operations: Some(vec!["CREATE".to_owned()]),
                resources: Some(vec!["vroutertemplates".to_owned()]),
                scope: Some("Namespaced".to_owned()),
            }]),
            // Only this test's namespace: other tests share the API server.
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("kubernetes.io/metadata.name".to_owned(), ns.name().to_owned())].into()),
                ..LabelSelector::default()
            }),
            side_effects: "None".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            failure_policy: Some("Fail".to_owned()),
            timeout_seconds: Some(5),
            ..ValidatingWebhook::default()
        }]),
    };
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    configurations
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();

    // The API server picks new configurations up asynchronously: retry until
    // the webhook answers, for a bounded time.
    let templates = ns.api::<VRouterTemplate>();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    let denial = loop {
        attempt += 1;
        match templates
            .create(&PostParams::default(), &template(&format!("denied-{attempt}"), true))
            .await
        {
            Err(kube::Error::Api(status)) => break status,
            Err(other) => panic!("creating a template: {other}"),
            Ok(_) => {
                assert!(Instant::now() < deadline, "the webhook was never called");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(denial.message.contains(DENIAL), "{denial:?}");
    let calls_after_denial = calls.load(Ordering::SeqCst);
    assert!(calls_after_denial >= 1);

    // An object the webhook allows goes through, after the webhook saw it.
    templates
        .create(&PostParams::default(), &template("allowed", false))
        .await
        .unwrap();
    assert!(calls.load(Ordering::SeqCst) > calls_after_denial);

    configurations.delete(&name, &DeleteParams::default()).await.unwrap();
}
