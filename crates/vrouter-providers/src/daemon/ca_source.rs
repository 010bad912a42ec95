//! A daemon target's CA bundle as the client needs it: the text of the
//! Secret key `spec.provider.daemon.caBundle` names, in the target's own
//! namespace (a Secret of another namespace is not the target's to read).

use vrouter_api::{DaemonConfig, VRouterTarget};

use super::DaemonCaBundle;
use crate::error::ProviderError;
use crate::factory::{ObjectLookup, secret_text};

/// The CA bundle of `target`'s daemon block, `None` when it names none. A
/// bundle that cannot be read as text (Secret or key missing, not UTF-8)
/// is [`ProviderError::InvalidTls`] naming the field, Secret and key; a
/// failed lookup is the lookup's own error (tried again).
pub(crate) async fn ca_bundle(
    target: &VRouterTarget,
    config: &DaemonConfig,
    lookup: &dyn ObjectLookup,
) -> Result<Option<DaemonCaBundle>, ProviderError> {
    let Some(bundle) = &config.ca_bundle else {
        return Ok(None);
    };
    let (name, key) = (&bundle.secret_ref.name, &bundle.secret_ref.key);
    if name.trim().is_empty() || key.trim().is_empty() {
        return Err(ProviderError::InvalidTls {
            reason: "spec.provider.daemon.caBundle.secretRef needs both a name and a key".into(),
        });
    }
    let namespace = target.metadata.namespace.as_deref().unwrap_or_default();
    let source = format!("Secret {namespace}/{name} key {key:?}");
    let invalid = |what: &str| ProviderError::InvalidTls {
        reason: format!("the CA bundle (spec.provider.daemon.caBundle.secretRef): Secret {namespace}/{name} {what}"),
    };
    let secret = lookup
        .secret(namespace, name)
        .await?
        .ok_or_else(|| invalid("was not found"))?;
    match secret_text(&secret, key) {
        None => Err(invalid(&format!("has no key {key:?}"))),
        Some(Err(_)) => Err(invalid(&format!("key {key:?} is not UTF-8 text (PEM is)"))),
        Some(Ok(pem)) => Ok(Some(DaemonCaBundle { pem, source })),
    }
}
