//! Flags choosing where the webhook serving certificate comes from: files
//! (cert-manager's Secret, or one made by hand, mounted) or the operator,
//! which makes, stores, publishes and rotates it (docs/operations.md, "Webhook certificates").

use clap::{Args, ValueEnum};
use vrouter_api::Duration;

use crate::server::webhook_certs::Settings;
use crate::server::webhook_certs::material::Lifetimes;
use crate::server::webhook_certs::plan::Policy;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CertSource {
    /// Serve --webhook-cert-dir's files, reloaded when they change.
    Files,
    /// Make a CA and serving certificate in --webhook-cert-secret, write
    /// the CA into --webhook-configurations, and rotate them.
    Operator,
}

#[derive(Args, Debug, Clone)]
pub struct WebhookCertArgs {
    /// Where the webhook serving certificate comes from.
    #[arg(long, env = "WEBHOOK_CERTS", value_enum, default_value = "files")]
    pub webhook_certs: CertSource,

    /// The Secret (in --webhook-cert-namespace) holding the certificates
    /// the operator makes.
    #[arg(long, env = "WEBHOOK_CERT_SECRET", default_value = "vrouter-operator-webhook-tls")]
    pub webhook_cert_secret: String,

    /// Namespace of that Secret; the pod's own namespace when empty.
    #[arg(long, env = "WEBHOOK_CERT_NAMESPACE", default_value = "")]
    pub webhook_cert_namespace: String,

    /// ValidatingWebhookConfigurations whose webhooks get the CA bundle.
    #[arg(
        long,
        env = "WEBHOOK_CONFIGURATIONS",
        value_delimiter = ',',
        default_value = "vrouter-operator"
    )]
    pub webhook_configurations: Vec<String>,

    /// Names (DNS names or IP addresses) the serving certificate is for:
    /// the webhook Service's names.
    #[arg(
        long,
        env = "WEBHOOK_CERT_NAMES",
        value_delimiter = ',',
        default_value = "vrouter-operator-webhook-service.vrouter-system.svc"
    )]
    pub webhook_cert_names: Vec<String>,

    /// How long a change to the Secret or the bundle takes to reach every
    /// replica and API server, with margin: a new CA signs only after being
    /// published this long, and an old one leaves this long after its last
    /// serving certificate was replaced. Longer than --webhook-cert-check.
    #[arg(long, env = "WEBHOOK_CERT_PROPAGATION", default_value = "2m")]
    pub webhook_cert_propagation: Duration,

    /// How often each replica reads the Secret (serving what it holds) and
    /// the webhook configurations.
    #[arg(long, env = "WEBHOOK_CERT_CHECK", default_value = "10s")]
    pub webhook_cert_check: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CertArgsError {
    #[error(
        "--webhook-cert-propagation ({propagation}) must be longer than --webhook-cert-check ({check}): replicas read the Secret every check"
    )]
    PropagationTooShort { propagation: Duration, check: Duration },
    #[error("--webhook-cert-names is empty: the serving certificate needs the webhook Service's name")]
    NoNames,
    #[error("--webhook-configurations is empty: the CA bundle must be written somewhere")]
    NoConfigurations,
}

impl WebhookCertArgs {
    /// The operator-made certificate's settings, checked.
    pub fn settings(&self, pod_namespace: &str) -> Result<Settings, CertArgsError> {
        let (propagation, check) = (self.webhook_cert_propagation, self.webhook_cert_check);
        if propagation.to_std() <= check.to_std() {
            return Err(CertArgsError::PropagationTooShort { propagation, check });
        }
        let names: Vec<String> = self
            .webhook_cert_names
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        if names.is_empty() {
            return Err(CertArgsError::NoNames);
        }
        if self.webhook_configurations.iter().all(String::is_empty) {
            return Err(CertArgsError::NoConfigurations);
        }
        let namespace = match self.webhook_cert_namespace.as_str() {
            "" => pod_namespace.to_owned(),
            given => given.to_owned(),
        };
        Ok(Settings {
            namespace,
            secret: self.webhook_cert_secret.clone(),
            configurations: self
                .webhook_configurations
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect(),
            names,
            policy: Policy {
                propagation: propagation.to_std(),
            },
            check_every: check.to_std(),
            lifetimes: Lifetimes::default(),
        })
    }
}
