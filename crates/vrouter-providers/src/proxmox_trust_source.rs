//! A ProxmoxCluster's trust settings as the client needs them: the spec's
//! fields, with the CA bundle read from the Secret key `spec.caBundle` names
//! (in the cluster's own namespace, as its credentials Secret is). What the
//! settings mean is decided in `proxmox::trust`.

use vrouter_api::ProxmoxCluster;

use crate::error::ProviderError;
use crate::factory::{ObjectLookup, secret_text};
use crate::proxmox::TrustSettings;

/// The trust settings of `cluster`. A CA bundle that cannot be read as
/// text (Secret or key missing, not UTF-8) is [`ProviderError::InvalidTls`]
/// naming the Secret and key; a failed lookup is the lookup's own error
/// (tried again).
pub async fn trust_settings(
    cluster: &ProxmoxCluster,
    lookup: &dyn ObjectLookup,
) -> Result<TrustSettings, ProviderError> {
    let spec = &cluster.spec;
    let ca_bundle_pem = match &spec.ca_bundle {
        Some(bundle) => Some(ca_bundle_text(cluster, &bundle.secret_ref.name, &bundle.secret_ref.key, lookup).await?),
        None => None,
    };
    Ok(TrustSettings {
        insecure_skip_verify: spec.insecure_skip_tls_verify,
        ca_bundle_pem,
        certificate_fingerprints: spec.certificate_fingerprints.clone(),
    })
}

async fn ca_bundle_text(
    cluster: &ProxmoxCluster,
    name: &str,
    key: &str,
    lookup: &dyn ObjectLookup,
) -> Result<String, ProviderError> {
    let namespace = cluster.metadata.namespace.as_deref().unwrap_or_default();
    let invalid = |what: &str| ProviderError::InvalidTls {
        reason: format!("the CA bundle (spec.caBundle.secretRef): Secret {namespace}/{name} {what}"),
    };
    if name.trim().is_empty() || key.trim().is_empty() {
        return Err(ProviderError::InvalidTls {
            reason: "spec.caBundle.secretRef needs both a name and a key".into(),
        });
    }
    let secret = lookup
        .secret(namespace, name)
        .await?
        .ok_or_else(|| invalid("was not found"))?;
    match secret_text(&secret, key) {
        None => Err(invalid(&format!("has no key {key:?}"))),
        Some(Err(_)) => Err(invalid(&format!("key {key:?} is not UTF-8 text (PEM is)"))),
        Some(Ok(pem)) => Ok(pem),
    }
}
