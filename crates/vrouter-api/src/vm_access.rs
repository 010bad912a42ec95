//! Which namespaces may reach the KubeVirt VMs of a namespace.
//!
//! A VRouterTarget may name a VM in another namespace of the same cluster
//! (`spec.provider.kubevirt.namespace`). The operator reaches that VM with
//! its own identity — root commands in the guest, its config read back —
//! so without a check, whoever may create a VRouterTarget in namespace A
//! would control the routers of namespace B. The VM's namespace therefore
//! has to consent: its Namespace object lists, in the annotation
//! [`ANNOTATION_ALLOWED_TARGET_NAMESPACES`], the namespaces whose targets
//! may reach its VMs. A Namespace is cluster-scoped, so only someone who
//! may edit Namespaces (a cluster administrator, not a namespace admin) can
//! grant it. The webhook refuses a target without the grant, and the
//! provider factory refuses to reach the VM (a grant can be withdrawn
//! after the target was admitted).
//!
//! Targets of the VM's own namespace, and targets reaching another cluster
//! through a kubeconfig Secret (which act with that Secret's credentials,
//! not the operator's), need no grant.

use std::collections::BTreeMap;
use std::fmt;

use crate::target::VRouterTarget;

/// Annotation on a Namespace: a comma-separated list of the namespaces
/// whose VRouterTargets may reach KubeVirt VMs in this one.
pub const ANNOTATION_ALLOWED_TARGET_NAMESPACES: &str = "vrouter.kojuro.date/allowed-target-namespaces";

/// A VM reached from a target in another namespace of this cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrossNamespaceVm {
    /// Where the VRouterTarget lives.
    pub target_namespace: String,
    /// Where the VM lives: the namespace that must consent.
    pub vm_namespace: String,
}

impl VRouterTarget {
    /// The cross-namespace reach of this target, when it has one that needs
    /// the VM namespace's consent: a KubeVirt VM in this cluster (no
    /// kubeconfig) in a namespace other than the target's own.
    pub fn cross_namespace_vm(&self) -> Option<CrossNamespaceVm> {
        let own = self.metadata.namespace.as_deref().filter(|ns| !ns.is_empty())?;
        let kv = self.spec.provider.kubevirt.as_ref()?;
        if self.spec.provider.type_ != crate::ProviderType::KubeVirt || kv.kubeconfig.is_some() {
            return None;
        }
        (!kv.namespace.is_empty() && kv.namespace != own).then(|| CrossNamespaceVm {
            target_namespace: own.to_owned(),
            vm_namespace: kv.namespace.clone(),
        })
    }
}

/// The namespaces an annotation value grants: comma-separated names,
/// blanks around them ignored. No wildcard: every namespace is named.
pub fn allowed_namespaces(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|name| !name.is_empty())
}

/// Why a target may not reach a VM in another namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmAccessDenied {
    /// The VM's namespace does not exist (so nothing in it can be reached).
    NoSuchNamespace(CrossNamespaceVm),
    /// The VM's namespace does not list the target's namespace.
    NotGranted {
        reach: CrossNamespaceVm,
        /// The annotation's current value, to extend rather than replace.
        current: Option<String>,
    },
}

impl fmt::Display for VmAccessDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmAccessDenied::NoSuchNamespace(reach) => write!(
                f,
                "the VM's namespace {:?} does not exist, so VRouterTargets of namespace {:?} cannot reach it",
                reach.vm_namespace, reach.target_namespace
            ),
            VmAccessDenied::NotGranted { reach, current } => {
                let granted: Vec<&str> = current
                    .as_deref()
                    .map(|v| allowed_namespaces(v).collect())
                    .unwrap_or_default();
                let mut wanted = granted.clone();
                wanted.push(&reach.target_namespace);
                write!(
                    f,
                    "namespace {vm:?} does not allow VRouterTargets of namespace {from:?} to reach its VMs \
                     (a target reaches a VM in another namespace only with that namespace's consent); \
                     someone who may edit Namespaces grants it with: \
                     kubectl annotate namespace {vm} --overwrite {key}={list}",
                    vm = reach.vm_namespace,
                    from = reach.target_namespace,
                    key = ANNOTATION_ALLOWED_TARGET_NAMESPACES,
                    list = wanted.join(","),
                )
            }
        }
    }
}

impl std::error::Error for VmAccessDenied {}

/// Whether `reach` is granted by the VM namespace's annotations; `None`
/// for annotations means the namespace does not exist.
pub fn check_vm_access(
    reach: &CrossNamespaceVm,
    vm_namespace_annotations: Option<&BTreeMap<String, String>>,
) -> Result<(), VmAccessDenied> {
    let Some(annotations) = vm_namespace_annotations else {
        return Err(VmAccessDenied::NoSuchNamespace(reach.clone()));
    };
    let current = annotations.get(ANNOTATION_ALLOWED_TARGET_NAMESPACES);
    let granted = current.is_some_and(|value| allowed_namespaces(value).any(|ns| ns == reach.target_namespace));
    if granted {
        Ok(())
    } else {
        Err(VmAccessDenied::NotGranted {
            reach: reach.clone(),
            current: current.cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(namespace: &str, spec: serde_json::Value) -> VRouterTarget {
        serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"name": "t", "namespace": namespace},
            "spec": spec,
        }))
        .unwrap()
    }

    fn reach(from: &str, to: &str) -> CrossNamespaceVm {
        CrossNamespaceVm {
            target_namespace: from.into(),
            vm_namespace: to.into(),
        }
    }

    #[test]
    fn only_a_kubevirt_vm_of_this_cluster_in_another_namespace_needs_consent() {
        let cases = [
            (
                json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm"}}}),
                None,
            ),
            (
                json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm", "namespace": "a"}}}),
                None,
            ),
            (
                json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm", "namespace": "b"}}}),
                Some(reach("a", "b")),
            ),
            (
                json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm", "namespace": "b",
                    "kubeconfig": {"secretRef": {"name": "remote", "key": "kubeconfig"}}}}}),
                None,
            ),
            // A kubevirt block the type does not select is not reached.
            (
                json!({"provider": {"type": "vrouter-daemon", "daemon": {"address": "x:1", "agentID": "r"},
                    "kubevirt": {"name": "vm", "namespace": "b"}}}),
                None,
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(target("a", spec.clone()).cross_namespace_vm(), want, "{spec}");
        }
    }

    #[test]
    fn the_annotation_lists_namespaces_and_nothing_else_grants() {
        let annotated =
            |value: &str| BTreeMap::from([(ANNOTATION_ALLOWED_TARGET_NAMESPACES.to_owned(), value.to_owned())]);
        assert!(check_vm_access(&reach("a", "b"), Some(&annotated("a"))).is_ok());
        assert!(check_vm_access(&reach("a", "b"), Some(&annotated(" x , a ,"))).is_ok());
        for refused in ["", "ab", "*", "x,b", "A"] {
            assert!(
                check_vm_access(&reach("a", "b"), Some(&annotated(refused))).is_err(),
                "{refused:?}"
            );
        }
        assert!(check_vm_access(&reach("a", "b"), Some(&BTreeMap::new())).is_err());
        assert_eq!(
            check_vm_access(&reach("a", "b"), None),
            Err(VmAccessDenied::NoSuchNamespace(reach("a", "b")))
        );
    }

    #[test]
    fn the_refusal_says_how_to_grant_keeping_the_existing_grants() {
        let none = check_vm_access(&reach("team-a", "vms"), Some(&BTreeMap::new())).unwrap_err();
        let text = none.to_string();
        assert!(
            text.ends_with(
                "kubectl annotate namespace vms --overwrite vrouter.kojuro.date/allowed-target-namespaces=team-a"
            ),
            "{text}"
        );
        let some = BTreeMap::from([(
            ANNOTATION_ALLOWED_TARGET_NAMESPACES.to_owned(),
            "team-b, team-c".to_owned(),
        )]);
        let text = check_vm_access(&reach("team-a", "vms"), Some(&some))
            .unwrap_err()
            .to_string();
        assert!(text.ends_with("=team-b,team-c,team-a"), "{text}");
        assert!(
            text.contains("namespace \"vms\" does not allow VRouterTargets of namespace \"team-a\""),
            "{text}"
        );
    }
}
