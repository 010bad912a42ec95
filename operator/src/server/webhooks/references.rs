//! The admission checks that need the API server: referenced objects must
//! exist, and a VRouterTarget or VRouterParams still referenced must not be
//! deleted. Both fail closed: when the API server cannot answer, the request
//! is denied rather than let through unchecked.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use vrouter_api::daemon_access;
use vrouter_api::manifest::Manifest;
use vrouter_api::validate::Violation;
use vrouter_api::vm_access;

use super::target_cache::TargetCache;
use vrouter_api::{
    NameRef, ReferencedKind, VRouterBinding, VRouterConfig, VRouterParams, VRouterStatus, VRouterTarget,
    VRouterTemplate,
};

/// Bindings and configs that still point at the target `name` in `namespace`.
/// Objects already being deleted still count: their finalizer may yet run a
/// reconcile that needs the target.
pub fn target_referrers(
    name: &str,
    namespace: &str,
    bindings: &[VRouterBinding],
    configs: &[VRouterConfig],
) -> Vec<String> {
    let points_here = |r: &NameRef| r.name == name && r.resolve_namespace(namespace) == namespace;
    let from_bindings = bindings
        .iter()
        .filter(|b| b.spec.target_refs.iter().any(points_here))
        .map(|b| format!("VRouterBinding {:?}", b.metadata.name.as_deref().unwrap_or("")));
    let from_configs = configs
        .iter()
        .filter(|c| points_here(&c.spec.target_ref))
        .map(|c| format!("VRouterConfig {:?}", c.metadata.name.as_deref().unwrap_or("")));
    from_bindings.chain(from_configs).collect()
}

/// Bindings that still merge the params `name` in `namespace`.
pub fn params_referrers(name: &str, namespace: &str, bindings: &[VRouterBinding]) -> Vec<String> {
    bindings
        .iter()
        .filter(|b| {
            b.spec
                .params_refs
                .iter()
                .any(|r| r.name == name && r.resolve_namespace(namespace) == namespace)
        })
        .map(|b| format!("VRouterBinding {:?}", b.metadata.name.as_deref().unwrap_or("")))
        .collect()
}

/// The denial for a still-referenced object: one referrer by name, and how
/// many more, so the message stays short with a thousand referrers.
pub fn still_referenced(kind: &str, name: &str, referrers: &[String]) -> Option<String> {
    let first = referrers.first()?;
    let more = match referrers.len() - 1 {
        0 => String::new(),
        1 => " and 1 other".to_owned(),
        n => format!(" and {n} others"),
    };
    Some(format!(
        "{kind} {name:?} is still referenced by {first}{more}; remove the references first"
    ))
}

async fn list_all<K>(client: &Client, namespace: &str) -> Result<Vec<K>, String>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| format!("could not list {} to check references: {e}", K::plural(&())))
}

/// Whether deleting the target may proceed; `Err` is the denial message.
pub async fn check_target_delete(client: &Client, name: &str, namespace: &str) -> Result<(), String> {
    let bindings = list_all::<VRouterBinding>(client, namespace).await?;
    let configs = list_all::<VRouterConfig>(client, namespace).await?;
    let referrers = target_referrers(name, namespace, &bindings, &configs);
    still_referenced("VRouterTarget", name, &referrers).map_or(Ok(()), Err)
}

/// Whether deleting the params may proceed; `Err` is the denial message.
pub async fn check_params_delete(client: &Client, name: &str, namespace: &str) -> Result<(), String> {
    let bindings = list_all::<VRouterBinding>(client, namespace).await?;
    let referrers = params_referrers(name, namespace, &bindings);
    still_referenced("VRouterParams", name, &referrers).map_or(Ok(()), Err)
}

async fn exists<K>(client: &Client, namespace: &str, name: &str) -> Result<bool, String>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map(|o| o.is_some())
        .map_err(|e| format!("could not look up {} {name:?}: {e}", K::kind(&())))
}

/// Checks that each `(field, ref)` names an existing `K` in `namespace`.
/// References that leave the namespace are skipped: the rules deny them already.
async fn check_exist<K>(client: &Client, namespace: &str, refs: &[(String, &NameRef)], out: &mut Vec<Violation>)
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    for (field, r) in refs {
        if r.name.is_empty() || r.crosses_namespace(namespace) {
            continue;
        }
        match exists::<K>(client, namespace, &r.name).await {
            Ok(true) => {}
            Ok(false) => out.push(Violation {
                field: format!("{field}.name"),
                message: format!(
                    "{} {:?} does not exist in namespace {namespace:?}",
                    K::kind(&()),
                    r.name
                ),
            }),
            Err(message) => out.push(Violation {
                field: field.clone(),
                message,
            }),
        }
    }
}

/// What only the API server can tell about `object`: every reference that
/// names no existing object, one violation each, and a target's reach into
/// another namespace that namespace has not granted.
pub async fn cluster_denials(client: &Client, targets: &TargetCache, object: &Manifest) -> Vec<Violation> {
    match object {
        Manifest::Binding(b) => binding_references(client, targets, b).await,
        Manifest::Config(c) => config_references(client, c).await,
        Manifest::Status(s) => status_references(client, s).await,
        Manifest::Target(t) => {
            let mut out = target_vm_access(client, t).await;
            out.extend(target_daemon_access(client, t).await);
            out
        }
        _ => Vec::new(),
    }
}

/// Missing references of a binding, one violation per missing object.
async fn binding_references(client: &Client, targets: &TargetCache, b: &VRouterBinding) -> Vec<Violation> {
    let namespace = b.metadata.namespace.as_deref().unwrap_or("");
    let all = b.references();
    let of = |kind: ReferencedKind| -> Vec<(String, &NameRef)> {
        all.iter()
            .filter(|r| r.kind == kind)
            .map(|r| (r.field.clone(), r.name_ref))
            .collect()
    };
    let mut out = Vec::new();
    check_exist::<VRouterTemplate>(client, namespace, &of(ReferencedKind::Template), &mut out).await;
    check_exist::<VRouterParams>(client, namespace, &of(ReferencedKind::Params), &mut out).await;
    check_targets(client, targets, namespace, &of(ReferencedKind::Target), &mut out).await;
    out
}

/// Like [`check_exist`] for targets, answered from the webhook's cache
/// (a binding may name thousands); `spec.targetRefs` is denied as a whole
/// when the API server, asked about the cache's misses, did not answer.
async fn check_targets(
    client: &Client,
    cache: &TargetCache,
    namespace: &str,
    refs: &[(String, &NameRef)],
    out: &mut Vec<Violation>,
) {
    let checked = |r: &NameRef| !r.name.is_empty() && !r.crosses_namespace(namespace);
    let names: Vec<&str> = refs
        .iter()
        .filter(|(_, r)| checked(r))
        .map(|(_, r)| r.name.as_str())
        .collect();
    let missing: HashSet<String> = match cache.missing(client, namespace, &names).await {
        Ok(missing) => missing.into_iter().collect(),
        Err(message) => {
            out.push(Violation {
                field: "spec.targetRefs".into(),
                message,
            });
            return;
        }
    };
    for (field, r) in refs.iter().filter(|(_, r)| checked(r) && missing.contains(&r.name)) {
        out.push(Violation {
            field: format!("{field}.name"),
            message: format!("VRouterTarget {:?} does not exist in namespace {namespace:?}", r.name),
        });
    }
}

/// A target naming a KubeVirt VM in another namespace needs that
/// namespace's grant (`vrouter_api::vm_access`). Fails closed: a Namespace
/// that cannot be read denies.
async fn target_vm_access(client: &Client, t: &VRouterTarget) -> Vec<Violation> {
    let Some(reach) = t.cross_namespace_vm() else {
        return Vec::new();
    };
    let field = "spec.provider.kubevirt.namespace".to_owned();
    let annotations = match namespace_annotations(client, &reach.vm_namespace, &field).await {
        Ok(annotations) => annotations,
        Err(unreadable) => return vec![unreadable],
    };
    match vm_access::check_vm_access(&reach, annotations.as_ref()) {
        Ok(()) => Vec::new(),
        Err(denied) => vec![Violation {
            field,
            message: denied.to_string(),
        }],
    }
}

/// A daemon target needs the grant on its own Namespace
/// (`vrouter_api::daemon_access`). Fails closed: a Namespace that cannot be
/// read denies.
async fn target_daemon_access(client: &Client, t: &VRouterTarget) -> Vec<Violation> {
    // An empty address or agent id is refused by the object rules already.
    let Some(reach) = t
        .daemon_reach()
        .filter(|r| !r.endpoint.is_empty() && !r.agent_id.is_empty())
    else {
        return Vec::new();
    };
    let field = "spec.provider.daemon".to_owned();
    let annotations = match namespace_annotations(client, &reach.target_namespace, &field).await {
        Ok(annotations) => annotations,
        Err(unreadable) => return vec![unreadable],
    };
    match daemon_access::check_daemon_access(&reach, annotations.as_ref()) {
        Ok(()) => Vec::new(),
        Err(denied) => vec![Violation {
            field,
            message: denied.to_string(),
        }],
    }
}

/// The annotations of Namespace `name` (none when it does not exist), where
/// a grant is read; a Namespace that cannot be read is a violation of
/// `field`, so a grant check fails closed.
async fn namespace_annotations(
    client: &Client,
    name: &str,
    field: &str,
) -> Result<Option<BTreeMap<String, String>>, Violation> {
    match Api::<Namespace>::all(client.clone()).get_opt(name).await {
        Ok(namespace) => Ok(namespace.map(|ns| ns.metadata.annotations.unwrap_or_default())),
        Err(e) => Err(Violation {
            field: field.to_owned(),
            message: format!("could not read Namespace {name:?} to check its grant: {e}"),
        }),
    }
}

async fn config_references(client: &Client, c: &VRouterConfig) -> Vec<Violation> {
    let namespace = c.metadata.namespace.as_deref().unwrap_or("");
    let mut out = Vec::new();
    let refs = [("spec.targetRef".to_owned(), &c.spec.target_ref)];
    check_exist::<VRouterTarget>(client, namespace, &refs, &mut out).await;
    out
}

async fn status_references(client: &Client, s: &VRouterStatus) -> Vec<Violation> {
    let namespace = s.metadata.namespace.as_deref().unwrap_or("");
    let mut out = Vec::new();
    let refs = [("spec.configRef".to_owned(), &s.spec.config_ref)];
    check_exist::<VRouterConfig>(client, namespace, &refs, &mut out).await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(name: &str, targets: &[&str], params: &[&str]) -> VRouterBinding {
        let mut b = VRouterBinding::new(name, Default::default());
        b.spec.target_refs = targets.iter().map(|t| NameRef::new(*t)).collect();
        b.spec.params_refs = params.iter().map(|p| NameRef::new(*p)).collect();
        b
    }

    fn config(name: &str, target: &str) -> VRouterConfig {
        let mut c = VRouterConfig::new(name, Default::default());
        c.spec.target_ref = NameRef::new(target);
        c
    }

    #[test]
    fn target_referrers_come_from_bindings_and_configs() {
        let bindings = [binding("b1", &["a", "x"], &[]), binding("b2", &["x"], &[])];
        let configs = [config("c1", "a"), config("c2", "x")];
        assert_eq!(
            target_referrers("a", "net", &bindings, &configs),
            ["VRouterBinding \"b1\"", "VRouterConfig \"c1\""]
        );
        assert!(target_referrers("unused", "net", &bindings, &configs).is_empty());
    }

    #[test]
    fn a_reference_into_another_namespace_does_not_protect_this_one() {
        let mut b = binding("b1", &[], &[]);
        b.spec.target_refs = vec![NameRef {
            namespace: "other".into(),
            name: "a".into(),
        }];
        assert!(target_referrers("a", "net", &[b], &[]).is_empty());
    }

    #[test]
    fn terminating_referrers_still_count() {
        let mut b = binding("b1", &["a"], &["p"]);
        b.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(target_referrers("a", "net", std::slice::from_ref(&b), &[]).len(), 1);
        assert_eq!(params_referrers("p", "net", &[b]).len(), 1);
    }

    #[test]
    fn the_denial_names_one_referrer_and_counts_the_rest() {
        assert_eq!(still_referenced("VRouterParams", "p", &[]), None);
        let one = still_referenced("VRouterParams", "p", &["VRouterBinding \"b\"".into()]).unwrap();
        assert_eq!(
            one,
            "VRouterParams \"p\" is still referenced by VRouterBinding \"b\"; remove the references first"
        );
        let many: Vec<String> = (0..4).map(|i| format!("VRouterBinding \"b{i}\"")).collect();
        let text = still_referenced("VRouterTarget", "t", &many).unwrap();
        assert!(text.contains("by VRouterBinding \"b0\" and 3 others"), "{text}");
    }
}
