//! Answering one AdmissionReview: decode the object, run the rules and the
//! reference checks, and say allowed or denied with every reason.

use std::sync::Arc;

use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;
use vrouter_api::manifest::Manifest;
use vrouter_api::validate::{self, Findings, Violation};
use vrouter_render::TemplateEngine;

use super::{off_runtime, references};
use crate::runtime::metrics::{Metrics, WebhookLabels};

/// What the webhook needs to answer reviews.
#[derive(Clone)]
pub struct Admission {
    pub client: Client,
    pub metrics: Metrics,
    /// The rendering engine, configured as the controllers render with it,
    /// so a template admitted here never fails to parse at reconcile.
    pub templates: Arc<TemplateEngine>,
    /// The targets a binding's references are checked against.
    pub targets: super::target_cache::TargetCache,
}

fn typed<K: DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize(value).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

impl Admission {
    /// Findings for a create or update of `object` of kind `kind`: the
    /// object's own rules (on the blocking pool, within
    /// [`off_runtime::RULES_DEADLINE`]), then what only the API server can tell (its
    /// references exist, the namespaces it reaches granted it).
    async fn validate(&self, kind: &str, object: &DynamicObject) -> Result<Findings, String> {
        let manifest = match kind {
            "VRouterTarget" => Manifest::Target(typed(object)?),
            "VRouterConfig" => Manifest::Config(typed(object)?),
            "VRouterBinding" => Manifest::Binding(typed(object)?),
            "VRouterStatus" => Manifest::Status(typed(object)?),
            "ProxmoxCluster" => Manifest::ProxmoxCluster(typed(object)?),
            "VRouterTemplate" => Manifest::Template(typed(object)?),
            // Schemaless but for its secret params.
            "VRouterParams" => Manifest::Params(typed(object)?),
            _ => return Ok(Findings::default()),
        };
        let templates = self.templates.clone();
        let checked = off_runtime::run(off_runtime::RULES_DEADLINE, move || {
            let findings = validate::manifest(&manifest, &templates);
            (manifest, findings)
        })
        .await;
        let (manifest, mut findings) = match checked {
            Ok(checked) => checked,
            Err(message) => {
                let mut findings = Findings::default();
                findings.deny("spec", message);
                return Ok(findings);
            }
        };
        findings
            .denials
            .extend(references::cluster_denials(&self.client, &self.targets, &manifest).await);
        findings.denials.dedup();
        Ok(findings)
    }

    async fn decide(&self, req: &AdmissionRequest<DynamicObject>) -> Result<Findings, String> {
        let kind = req.kind.kind.as_str();
        let namespace = req.namespace.as_deref().unwrap_or("");
        match req.operation {
            Operation::Delete => {
                let outcome = match kind {
                    "VRouterTarget" => references::check_target_delete(&self.client, &req.name, namespace).await,
                    "VRouterParams" => references::check_params_delete(&self.client, &req.name, namespace).await,
                    _ => Ok(()),
                };
                let mut findings = Findings::default();
                if let Err(message) = outcome {
                    findings.denials.push(Violation {
                        field: "metadata.name".into(),
                        message,
                    });
                }
                Ok(findings)
            }
            Operation::Create | Operation::Update => {
                let object = req.object.as_ref().ok_or("the review carries no object")?;
                if req.operation == Operation::Update && validate::skip_for_deletion(&object.metadata) {
                    return Ok(Findings::default());
                }
                self.validate(kind, &in_request_namespace(object, req.namespace.as_deref()))
                    .await
            }
            Operation::Connect => Ok(Findings::default()),
        }
    }

    /// Answers a review.
    pub async fn review(&self, review: AdmissionReview<DynamicObject>) -> AdmissionReview<DynamicObject> {
        let req: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(req) => req,
            Err(error) => return AdmissionResponse::invalid(error.to_string()).into_review(),
        };
        let kind = req.kind.kind.clone();
        let mut response = AdmissionResponse::from(&req);
        let allowed = match self.decide(&req).await {
            Ok(findings) => {
                if !findings.warnings.is_empty() {
                    response.warnings = Some(findings.warnings.iter().map(ToString::to_string).collect());
                }
                if findings.is_allowed() {
                    true
                } else {
                    response = response.deny(findings.denial_message());
                    false
                }
            }
            Err(message) => {
                response = response.deny(format!("{kind} could not be read: {message}"));
                false
            }
        };
        tracing::debug!(%kind, name = %req.name, allowed, "admission review");
        self.metrics
            .admission_reviews
            .get_or_create(&WebhookLabels {
                kind: crate::runtime::metrics::review_kind_label(&kind),
                allowed,
            })
            .inc();
        response.into_review()
    }
}

/// The object as it will be stored: one sent without `metadata.namespace`
/// lives in the request's namespace, and every rule about namespaces (its
/// references, the grants it needs) must judge it there.
fn in_request_namespace(object: &DynamicObject, namespace: Option<&str>) -> DynamicObject {
    let mut object = object.clone();
    if object.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        object.metadata.namespace = namespace.map(str::to_owned);
    }
    object
}
