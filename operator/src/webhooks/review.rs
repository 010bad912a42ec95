//! Answering one AdmissionReview: decode the object, run the rules and the
//! reference checks, and say allowed or denied with every reason.

use std::sync::Arc;

use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;
use vrouter_api::{ProxmoxCluster, VRouterBinding, VRouterConfig, VRouterStatus, VRouterTarget, VRouterTemplate};
use vrouter_render::{TemplateEngine, TemplateKind};

use super::references;
use super::rules::{self, Findings, Violation};
use crate::metrics::{Metrics, WebhookLabels};

/// What the webhook needs to answer reviews.
#[derive(Clone)]
pub struct Admission {
    pub client: Client,
    pub metrics: Metrics,
    /// The rendering engine, configured as the controllers render with it,
    /// so a template admitted here never fails to parse at reconcile.
    pub templates: Arc<TemplateEngine>,
}

fn typed<K: DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize(value).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

fn template_findings(engine: &TemplateEngine, t: &VRouterTemplate) -> Findings {
    let mut findings = Findings::default();
    let name = t.metadata.name.as_deref().unwrap_or("");
    let parts = [
        ("spec.config", TemplateKind::Config, &t.spec.config),
        ("spec.commands", TemplateKind::Commands, &t.spec.commands),
    ];
    for (field, kind, source) in parts {
        if source.is_empty() {
            continue;
        }
        // `review` parses as `check` does and also reports every `| safe`
        // opt-out, which admission passes on as a warning to the author.
        match engine.review(name, kind, source) {
            Ok(warnings) => findings.warnings.extend(warnings.into_iter().map(|w| Violation {
                field: field.to_owned(),
                message: w.to_string(),
            })),
            Err(error) => findings.denials.push(Violation {
                field: field.to_owned(),
                message: error.to_string(),
            }),
        }
    }
    findings
}

impl Admission {
    /// Findings for a create or update of `object` of kind `kind`.
    async fn validate(&self, kind: &str, object: &DynamicObject) -> Result<Findings, String> {
        let mut findings = match kind {
            "VRouterTarget" => rules::target(&typed::<VRouterTarget>(object)?),
            "VRouterConfig" => {
                let c: VRouterConfig = typed(object)?;
                let mut f = rules::config(&c);
                f.denials.extend(references::config_references(&self.client, &c).await);
                f
            }
            "VRouterBinding" => {
                let b: VRouterBinding = typed(object)?;
                let mut f = rules::binding(&b);
                f.denials.extend(references::binding_references(&self.client, &b).await);
                f
            }
            "VRouterStatus" => {
                let s: VRouterStatus = typed(object)?;
                let mut f = rules::status(&s);
                f.denials.extend(references::status_references(&self.client, &s).await);
                f
            }
            "ProxmoxCluster" => rules::proxmox_cluster(&typed::<ProxmoxCluster>(object)?),
            "VRouterTemplate" => template_findings(&self.templates, &typed::<VRouterTemplate>(object)?),
            // VRouterParams: a schemaless block has nothing to check on write.
            _ => Findings::default(),
        };
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
                if req.operation == Operation::Update && rules::skip_for_deletion(&object.metadata) {
                    return Ok(Findings::default());
                }
                self.validate(kind, object).await
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
            .get_or_create(&WebhookLabels { kind, allowed })
            .inc();
        response.into_review()
    }
}
