//! Secret rotation: a config whose secret params name a Secret is applied
//! again when that Secret changes, once per change.
//!
//! The config's text holds only placeholders, so a new value changes
//! neither its spec nor its generation. What the last dispatch saw is kept
//! instead as `status.secretsVersion`: each named Secret with its
//! resourceVersion (never a value, nor a hash of one). A watch of Secrets'
//! metadata (values are never transferred) wakes the configs naming a
//! Secret that changed; the reconcile compares the stamp the store gives
//! now with the recorded one.
//!
//! Invariant: the stamp recorded at dispatch is the one the decision was
//! made from (the store's), not one read at delivery, so a store one event
//! behind the API server never makes a second apply for one change: it
//! makes at most one more, for a change the store has not shown yet.

use std::sync::Arc;

use futures::Stream;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use vrouter_api::{Phase, VRouterConfig, VRouterConfigStatus};
use vrouter_render::secret_params::{PLACEHOLDER_PREFIX, referenced_secrets};

use crate::runtime::reconciler::Scope;

/// The Secrets' metadata, as the rotation decision reads it.
pub type SecretVersions = Store<PartialObjectMeta<Secret>>;

/// The names of the Secrets `config`'s placeholders refer to, sorted, each once.
pub fn secret_names(config: &VRouterConfig) -> Vec<String> {
    let mut names: Vec<String> = referenced_secrets(&config.spec.config)
        .into_iter()
        .chain(referenced_secrets(&config.spec.commands))
        .map(|r| r.name)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The stamp of `names` (sorted, unique): `name=version` each, `-` for a
/// Secret `version_of` does not know; empty for no names.
pub fn stamp(names: &[String], version_of: impl Fn(&str) -> Option<String>) -> String {
    names
        .iter()
        .map(|name| format!("{name}={}", version_of(name).unwrap_or_else(|| "-".to_owned())))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a settled config must be applied again because a Secret it
/// names changed since its last dispatch. An apply in flight or one still
/// to come (Pending, Applying) records the stamp when it is dispatched.
pub fn rotation_due(status: &VRouterConfigStatus, stamp: &str) -> bool {
    matches!(status.phase, Phase::Applied | Phase::Failed) && status.secrets_version != stamp
}

/// Whether `config`'s text refers to Secret `name` (a substring test: the
/// watch's mapping runs for every Secret event of the namespace).
pub fn names_secret(config: &VRouterConfig, name: &str) -> bool {
    let needle = format!("{PLACEHOLDER_PREFIX}{name}/");
    config.spec.config.contains(&needle) || config.spec.commands.contains(&needle)
}

/// The stamp of `config`'s Secrets as `secrets` holds them, once its first
/// list is in; empty (and nothing waited for) when it names none.
pub async fn current_stamp(secrets: &SecretVersions, config: &VRouterConfig) -> String {
    let names = secret_names(config);
    if names.is_empty() {
        return String::new();
    }
    // A store still listing would read every Secret as missing and apply
    // every config again after a restart.
    crate::runtime::stores::ready(secrets).await;
    let namespace = config.namespace().unwrap_or_default();
    stamp(&names, |name| {
        secrets
            .get(&ObjectRef::new(name).within(&namespace))
            .and_then(|s| s.resource_version())
    })
}

/// A metadata-only watch (`Api<PartialObjectMeta>`) of the Secrets in `scope`, feeding the returned
/// store: each event is the Secret as stored. Annotations, labels and
/// managed fields are dropped before they are kept: `kubectl apply` copies a
/// Secret's data into an annotation.
pub fn watch(
    scope: &Scope,
) -> (
    SecretVersions,
    impl Stream<Item = Result<PartialObjectMeta<Secret>, watcher::Error>> + Send + use<>,
) {
    let (store, writer) = reflector::store();
    let events = watcher(scope.api::<PartialObjectMeta<Secret>>(), watcher::Config::default())
        .default_backoff()
        .modify(|secret| {
            secret.metadata.annotations = None;
            secret.metadata.labels = None;
            secret.metadata.managed_fields = None;
        })
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// The configs in `configs` that name `secret` (same namespace).
pub fn configs_naming<'a>(
    configs: impl IntoIterator<Item = &'a Arc<VRouterConfig>>,
    secret: &PartialObjectMeta<Secret>,
) -> Vec<ObjectRef<VRouterConfig>> {
    let (namespace, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
    configs
        .into_iter()
        .filter(|c| c.namespace().as_deref() == Some(namespace.as_str()) && names_secret(c, &name))
        .map(|c| ObjectRef::from_obj(&**c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(namespace: &str, commands: &str) -> VRouterConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
            "metadata": {"name": "c", "namespace": namespace},
            "spec": {"targetRef": {"name": "r"}, "commands": commands},
        }))
        .unwrap()
    }

    fn secret(namespace: &str, name: &str) -> PartialObjectMeta<Secret> {
        let mut s = PartialObjectMeta::<Secret>::default();
        s.metadata.namespace = Some(namespace.into());
        s.metadata.name = Some(name.into());
        s
    }

    #[test]
    fn the_stamp_names_each_secret_with_its_version() {
        let c = config(
            "net",
            "set a @vrouter-secret:db/pw@\nset b @vrouter-secret:api/token@\nset c @vrouter-secret:db/user@\n",
        );
        let names = secret_names(&c);
        assert_eq!(names, ["api", "db"]);
        let versions = |name: &str| (name == "db").then(|| "41".to_owned());
        assert_eq!(stamp(&names, versions), "api=-,db=41");
        assert_eq!(stamp(&[], versions), "");
    }

    #[test]
    fn only_a_settled_config_with_another_stamp_is_applied_again() {
        let table = [
            (Phase::Applied, "db=1", "db=1", false),
            (Phase::Applied, "db=1", "db=2", true),
            (Phase::Failed, "db=-", "db=2", true),
            (Phase::Failed, "db=2", "db=2", false),
            // No secret params, before and after: nothing to do.
            (Phase::Applied, "", "", false),
            // Params that no longer name a Secret came with a new generation.
            (Phase::Applied, "db=1", "", true),
            // In flight or due anyway: its dispatch records the stamp.
            (Phase::Applying, "db=1", "db=2", false),
            (Phase::Pending, "db=1", "db=2", false),
        ];
        for (phase, recorded, now, due) in table {
            let status = VRouterConfigStatus {
                phase,
                secrets_version: recorded.into(),
                ..Default::default()
            };
            assert_eq!(rotation_due(&status, now), due, "{phase:?} {recorded} -> {now}");
        }
    }

    #[test]
    fn a_secret_event_wakes_the_configs_of_its_namespace_naming_it() {
        let configs: Vec<Arc<VRouterConfig>> = vec![
            Arc::new(config("net", "set a @vrouter-secret:db/pw@\n")),
            Arc::new(config("lab", "set a @vrouter-secret:db/pw@\n")),
            Arc::new(config("net", "set a @vrouter-secret:dbx/pw@\n")),
            Arc::new(config("net", "set a db/pw\n")),
        ];
        let woken = configs_naming(&configs, &secret("net", "db"));
        assert_eq!(woken.len(), 1);
        assert_eq!(woken[0].namespace.as_deref(), Some("net"));
        assert!(configs_naming(&configs, &secret("net", "other")).is_empty());
    }
}
