//! `diff --binding <namespace>/<name>`: the binding as the cluster holds it,
//! rendered from the templates, params and targets the cluster holds (the
//! controller's own resolve and compose), and for each of its targets what
//! is there now: the VRouterConfig the cluster holds, and the router's
//! config as drift detection last read it into its Secret or, without one,
//! the config last applied to it. Nothing is written.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use vrouter_api::compose::render_configs;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterStatus};

use super::{Live, RouterConfig, read_live};
use crate::controllers::vrouter_binding::{self, ResolveError};
use crate::controllers::vrouter_status::SECRET_TYPE;

/// What `diff --binding` compares for one target of the binding.
#[derive(Clone, Debug)]
pub struct Target {
    /// The VRouterConfig the binding renders for the target now.
    pub desired: VRouterConfig,
    /// What the cluster holds for it.
    pub live: Live,
    /// The router's config, when it is known.
    pub router: Option<RouterConfig>,
}

/// Why a live binding could not be compared (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("VRouterBinding {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("VRouterBinding {binding} does not render: {why}")]
    Render { binding: String, why: String },
    #[error("reading from the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// `<namespace>/<name>`, or `<name>` in `default_namespace` (the
/// kubeconfig context's, as kubectl takes it).
pub fn parse_binding_ref(text: &str, default_namespace: &str) -> Result<(String, String), String> {
    let (namespace, name) = match text.split_once('/') {
        Some((namespace, name)) => (namespace, name),
        None => (default_namespace, text),
    };
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(format!("--binding {text:?}: expected <namespace>/<name> or <name>"));
    }
    Ok((namespace.to_owned(), name.to_owned()))
}

/// Reads the binding `namespace/name`, renders it and reads what each of its
/// targets holds.
pub async fn read(client: &Client, namespace: &str, name: &str) -> Result<Vec<Target>, Error> {
    let binding = Api::<VRouterBinding>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
        .ok_or_else(|| Error::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })?;
    let unrenderable = |why: String| Error::Render {
        binding: format!("{namespace}/{name}"),
        why,
    };
    let referenced = match vrouter_binding::references(client, &vrouter_binding::Referents::unwatched(), &binding).await
    {
        Ok(referenced) => referenced,
        Err(ResolveError::Kube(e)) => return Err(e.into()),
        Err(other) => return Err(unrenderable(other.to_string())),
    };
    let desired = render_configs(&binding, &referenced.templates, &referenced.params, &referenced.targets)
        .map_err(|e| unrenderable(e.to_string()))?;
    let live = read_live(client, &desired).await?;
    let mut out = Vec::with_capacity(desired.len());
    for (desired, live) in desired.into_iter().zip(live) {
        let router = router_config(client, namespace, &desired, &live).await?;
        out.push(Target { desired, live, router });
    }
    Ok(out)
}

/// The router's config as drift detection last stored it (the running
/// config, or the startup one when the running one could not be read);
/// without that Secret (no sync yet, drift detection off, or no right to
/// read Secrets), the config of the VRouterConfig when it is Applied.
async fn router_config(
    client: &Client,
    namespace: &str,
    desired: &VRouterConfig,
    live: &Live,
) -> Result<Option<RouterConfig>, Error> {
    let secret_name = VRouterStatus::config_secret_name_of(&desired.name_any());
    let mut fallback = "last applied".to_owned();
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&secret_name)
        .await
    {
        Ok(Some(secret)) if secret.type_.as_deref() == Some(SECRET_TYPE) => {
            let data = secret.data.unwrap_or_default();
            let stored = |key: &str| {
                data.get(key)
                    .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
                    .filter(|text| !text.trim().is_empty())
            };
            let read = [("running", "running"), ("startup", "startup")]
                .into_iter()
                .find_map(|(key, which)| stored(key).map(|text| (text, which)));
            if let Some((text, which)) = read {
                return Ok(Some(RouterConfig {
                    text,
                    source: format!("router's {which} config, read by drift detection"),
                }));
            }
        }
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 403 => {
            fallback = format!("last applied; Secret {secret_name} could not be read: forbidden");
        }
        Err(e) => return Err(e.into()),
    }
    let applied = live
        .config
        .as_ref()
        .filter(|c| c.status.as_ref().is_some_and(|s| s.phase == Phase::Applied));
    Ok(applied.map(|config| RouterConfig {
        text: config.spec.config.clone(),
        source: fallback,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_is_named_with_or_without_its_namespace() {
        assert_eq!(
            parse_binding_ref("net/edge", "default"),
            Ok(("net".into(), "edge".into()))
        );
        assert_eq!(
            parse_binding_ref("edge", "ctx-ns"),
            Ok(("ctx-ns".into(), "edge".into()))
        );
        for bad in ["", "/edge", "net/", "a/b/c"] {
            let err = parse_binding_ref(bad, "default").unwrap_err();
            assert!(err.contains("<namespace>/<name>"), "{bad:?}: {err}");
        }
    }
}
