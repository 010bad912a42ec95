//! Secret params at apply time: the rendered config holds placeholders
//! (`@vrouter-secret:<name>/<key>@`, see `vrouter_render::secret_params`);
//! here, just before delivery, each is replaced by the Secret's value,
//! read from the config's own namespace. The resolved text goes to the
//! provider and nowhere else: not to status, events or logs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use vrouter_providers::ProviderError;
use vrouter_render::secret_params::{SecretContext, SecretKeyRef, redact, referenced_secrets, resolve_placeholders};

use super::decide::Step;

/// `config` and `commands` with every placeholder resolved from Secrets in
/// `namespace`. Unchanged (and no Secret read) when they hold none. The
/// error names the Secret and key, never a value.
pub(super) async fn resolve(
    client: &kube::Client,
    namespace: &str,
    config: &str,
    commands: &str,
) -> Result<(String, String), ProviderError> {
    let mut refs = referenced_secrets(config);
    refs.extend(referenced_secrets(commands));
    if refs.is_empty() {
        return Ok((config.to_owned(), commands.to_owned()));
    }
    let secrets = read_secrets(client, namespace, &refs).await?;
    let lookup = |r: &SecretKeyRef| {
        let bytes = secrets.get(&r.name)?.get(&r.key)?;
        String::from_utf8(bytes.clone()).ok()
    };
    let refused = |e: vrouter_render::secret_params::SecretParamError| ProviderError::Render(e.to_string());
    let config = resolve_placeholders(config, SecretContext::Config, lookup).map_err(refused)?;
    let commands = resolve_placeholders(commands, SecretContext::Commands, lookup).map_err(refused)?;
    Ok((config.into_owned(), commands.into_owned()))
}

/// `step` with the router's words scrubbed of the values of the Secrets
/// `config` names (every written form, see [`redact`]) before they reach
/// the status or an Event: a failed apply's excerpt may quote a value.
/// When the Secrets cannot be read, the text is withheld rather than
/// written unscrubbed.
pub(super) async fn scrub(client: &kube::Client, namespace: &str, config: &str, commands: &str, step: Step) -> Step {
    let mut refs = referenced_secrets(config);
    refs.extend(referenced_secrets(commands));
    let failure = step
        .status
        .confirmation
        .as_ref()
        .map(|c| c.failure.as_str())
        .unwrap_or("");
    let note = step.event.as_ref().map(|e| e.note.as_str()).unwrap_or("");
    if refs.is_empty() || (step.status.message.is_empty() && failure.is_empty() && note.is_empty()) {
        return step;
    }
    let values: Vec<(SecretKeyRef, String)> = match read_secrets(client, namespace, &refs).await {
        Ok(secrets) => refs
            .iter()
            .filter_map(|r| {
                let bytes = secrets.get(&r.name)?.get(&r.key)?;
                Some((r.clone(), String::from_utf8_lossy(bytes).into_owned()))
            })
            .collect(),
        Err(_) => {
            let withheld = "router output withheld: the Secrets to redact it from could not be read".to_owned();
            return scrubbed(step, |text| {
                if text.is_empty() {
                    String::new()
                } else {
                    withheld.clone()
                }
            });
        }
    };
    scrubbed(step, |text| redact(text, &values).into_owned())
}

fn scrubbed(mut step: Step, clean: impl Fn(&str) -> String) -> Step {
    step.status.message = clean(&step.status.message);
    if let Some(confirmation) = step.status.confirmation.as_mut() {
        confirmation.failure = clean(&confirmation.failure);
    }
    if let Some(event) = step.event.as_mut() {
        event.note = clean(&event.note);
    }
    step
}

/// Each referenced Secret's data, read once; a Secret that does not exist
/// is left out (its keys then read as missing).
async fn read_secrets(
    client: &kube::Client,
    namespace: &str,
    refs: &[SecretKeyRef],
) -> Result<BTreeMap<String, BTreeMap<String, Vec<u8>>>, ProviderError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut out = BTreeMap::new();
    for r in refs {
        if out.contains_key(&r.name) {
            continue;
        }
        let secret = api.get_opt(&r.name).await.map_err(|e| {
            ProviderError::Render(format!("reading Secret {namespace}/{} for a secret param: {e}", r.name))
        })?;
        let data = secret
            .and_then(|s| s.data)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        out.insert(r.name.clone(), data);
    }
    Ok(out)
}
