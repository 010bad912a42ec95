//! Status writes the real API server answers with an error code of the
//! test's choosing (500, 429, 409), for as long as the test says.
//!
//! Toxiproxy works on TCP and cannot make an HTTP error, so the error comes
//! from the API server itself: a ValidatingWebhookConfiguration on
//! `vrouterconfigs/status` UPDATE (a PATCH is an UPDATE to admission) of one
//! namespace, served by this test process, denies each write while refusing.
//! kube-apiserver turns a webhook's denial into the answer to the request
//! with the code the webhook set (any code from 400 up; k8s.io/apiserver
//! `pkg/admission/plugin/webhook/errors/statuserror.go`, `ToStatusErr`), and
//! sets `Retry-After` from `details.retryAfterSeconds` (`responsewriters`
//! `ErrorNegotiated`). So the operator's client meets exactly what an
//! overloaded or failing API server sends: a 500 Internal Error, a 429 Too
//! Many Requests with Retry-After, after authentication and authorization,
//! with nothing stored.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use vrouter_api::VRouterConfig;
use vrouter_test_apiserver::{TestEnv, TestNamespace};

/// How status writes are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Allow,
    /// Denied with HTTP `code`; `retry_after` seconds as the server's hint.
    Refuse {
        code: u16,
        retry_after: Option<u32>,
    },
}

/// One status write that was refused: the config, and the phase and
/// generation the write would have stored.
#[derive(Clone, Debug)]
pub struct Refused {
    pub config: String,
    pub phase: String,
    pub observed_generation: i64,
    pub code: u16,
}

#[derive(Default)]
struct Shared {
    answer: Option<Answer>,
    refused: Vec<Refused>,
}

/// The webhook, registered for one namespace. It stays registered while
/// the API server lives; its namespace selector keeps every other
/// namespace out of it.
pub struct StatusRefusals {
    shared: Arc<Mutex<Shared>>,
}

const PROBE: &str = "status-refusals-probe";

impl StatusRefusals {
    /// Serves the webhook and registers it for `ns`, answering `Allow`;
    /// returns once the API server calls it (a probe config's status write
    /// is refused, then the probe is deleted). Register it before the
    /// operator watches `ns`, so it never sees the probe.
    pub async fn register(env: &TestEnv, ns: &TestNamespace) -> StatusRefusals {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let port = serve(env, shared.clone()).await;
        let name = format!("status-refusals-{}", ns.name());
        let configurations: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
        configurations
            .create(&PostParams::default(), &configuration(env, ns, &name, port))
            .await
            .unwrap();
        let refusals = StatusRefusals { shared };
        refusals.wait_until_called(ns).await;
        refusals.answer(Answer::Allow);
        refusals
    }

    /// The API server picks a new configuration up asynchronously.
    async fn wait_until_called(&self, ns: &TestNamespace) {
        let configs = ns.api::<VRouterConfig>();
        super::create::<VRouterConfig>(
            ns,
            json!({"metadata": {"name": PROBE}, "spec": {"targetRef": {"name": "none"}}}),
        )
        .await;
        self.answer(Answer::Refuse {
            code: 500,
            retry_after: None,
        });
        let status = Patch::Merge(json!({"status": {"message": "probe"}}));
        super::wait_for("the status webhook to be called", Duration::from_secs(60), || async {
            match configs.patch_status(PROBE, &PatchParams::default(), &status).await {
                Err(kube::Error::Api(e)) if e.code == 500 && e.message.contains("refused by the test") => Some(()),
                _ => None,
            }
        })
        .await;
        configs.delete(PROBE, &DeleteParams::default()).await.unwrap();
    }

    /// From now on, status writes are answered `answer`.
    pub fn answer(&self, answer: Answer) {
        self.lock().answer = Some(answer);
    }

    /// Every status write of `config` refused so far.
    pub fn refused(&self, config: &str) -> Vec<Refused> {
        self.lock()
            .refused
            .iter()
            .filter(|r| r.config == config)
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn configuration(env: &TestEnv, ns: &TestNamespace, name: &str, port: u16) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "refuse-status.test.vrouter.kojuro.date".to_owned(),
            client_config: env
                .webhook_tls()
                .client_config(format!("https://127.0.0.1:{port}/status")),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["vrouter.kojuro.date".to_owned()]),
                api_versions: Some(vec!["v1".to_owned()]),
                operations: Some(vec!["UPDATE".to_owned()]),
                resources: Some(vec!["vrouterconfigs/status".to_owned()]),
                scope: Some("Namespaced".to_owned()),
            }]),
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
    }
}

/// The review's answer, and what it refused.
fn review(body: &[u8], shared: &Mutex<Shared>) -> Value {
    let review: Value = serde_json::from_slice(body).unwrap_or_default();
    let request = &review["request"];
    let object = &request["object"];
    let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
    let answer = shared.answer.unwrap_or(Answer::Allow);
    let mut response = json!({"uid": request["uid"], "allowed": true});
    if let Answer::Refuse { code, retry_after } = answer {
        let reason = match code {
            409 => "Conflict",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        };
        let mut status = json!({"code": code, "reason": reason, "message": "refused by the test's status webhook"});
        if let Some(seconds) = retry_after {
            status["details"] = json!({"retryAfterSeconds": seconds});
        }
        response = json!({"uid": request["uid"], "allowed": false, "status": status});
        shared.refused.push(Refused {
            config: object["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
            phase: object["status"]["phase"].as_str().unwrap_or_default().to_owned(),
            observed_generation: object["status"]["observedGeneration"].as_i64().unwrap_or(0),
            code,
        });
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Serves [`review`] over TLS on a free loopback port; returns the port.
async fn serve(env: &TestEnv, shared: Arc<Mutex<Shared>>) -> u16 {
    let acceptor = TlsAcceptor::from(Arc::new(env.webhook_tls().server_config().unwrap()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, shared) = (acceptor.clone(), shared.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = service_fn(move |request: Request<Incoming>| {
                    let shared = shared.clone();
                    async move {
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let out = review(&body, &shared).to_string();
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(out))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}
