//! Which virt-launcher pod serves a VirtualMachineInstance.
//!
//! KubeVirt runs each VMI in a virt-launcher pod labelled
//! `vm.kubevirt.io/name=<vmi>` and `kubevirt.io/created-by=<vmi uid>`. A live
//! migration starts a second such pod on the target node; both run until
//! the handover, and `status.nodeName` of the VMI moves to the target node
//! only once the guest runs there. So the pod to exec into is the one that
//! 1. is not being deleted and is in phase `Running`,
//! 2. was created for this VMI instance (`kubevirt.io/created-by` equals the
//!    VMI's uid, when both are known — a VMI deleted and re-created under
//!    the same name leaves pods of the old one behind for a while),
//! 3. runs on the VMI's `status.nodeName`.
//!
//! Exactly one pod must remain; none or several is an error naming the pods.

use k8s_openapi::api::core::v1::Pod;

pub const LABEL_VM_NAME: &str = "vm.kubevirt.io/name";
pub const LABEL_CREATED_BY: &str = "kubevirt.io/created-by";

/// What the choice needs to know about the VMI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmiView {
    pub uid: Option<String>,
    pub node: Option<String>,
}

fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn describe(pods: &[&Pod]) -> String {
    pods.iter()
        .map(|p| format!("{} on {}", pod_name(p), pod_node(p).unwrap_or("no node")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name of the pod to exec into, by the rule in the module doc.
pub fn choose_launcher(pods: &[Pod], vmi: &VmiView) -> Result<String, String> {
    let running: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| {
            let created_by = p.metadata.labels.as_ref().and_then(|l| l.get(LABEL_CREATED_BY));
            match (&vmi.uid, created_by) {
                (Some(uid), Some(by)) => uid == by,
                _ => true,
            }
        })
        .collect();
    let serving: Vec<&Pod> = match &vmi.node {
        Some(node) => running
            .iter()
            .copied()
            .filter(|p| pod_node(p) == Some(node.as_str()))
            .collect(),
        None => running.clone(),
    };
    match serving.as_slice() {
        [one] => Ok(pod_name(one).to_string()),
        [] if running.is_empty() => Err(format!(
            "no running virt-launcher pod for this VMI among {} pod(s)",
            pods.len()
        )),
        [] => Err(format!(
            "no running virt-launcher pod on the VMI's node {} (running: {})",
            vmi.node.as_deref().unwrap_or("?"),
            describe(&running)
        )),
        several => Err(format!(
            "{} running virt-launcher pods could serve the VMI: {}",
            several.len(),
            describe(several)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(name: &str, node: &str, phase: &str, uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(LABEL_CREATED_BY.to_string(), uid.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }
    }

    fn vmi(uid: &str, node: &str) -> VmiView {
        VmiView {
            uid: Some(uid.into()),
            node: Some(node.into()),
        }
    }

    #[test]
    fn the_rule_table() {
        let src = pod("virt-launcher-r1-aaaaa", "node-a", "Running", "u1");
        let dst = pod("virt-launcher-r1-bbbbb", "node-b", "Running", "u1");
        let done = pod("virt-launcher-r1-ccccc", "node-a", "Succeeded", "u1");
        let old = pod("virt-launcher-r1-ddddd", "node-b", "Running", "u0");
        let mut deleting = pod("virt-launcher-r1-eeeee", "node-b", "Running", "u1");
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        type Case<'a> = (&'a str, Vec<Pod>, VmiView, Result<&'a str, &'a str>);
        let cases: Vec<Case> = vec![
            (
                "single pod",
                vec![src.clone()],
                vmi("u1", "node-a"),
                Ok("virt-launcher-r1-aaaaa"),
            ),
            (
                "migrating: VMI still on source",
                vec![src.clone(), dst.clone()],
                vmi("u1", "node-a"),
                Ok("virt-launcher-r1-aaaaa"),
            ),
            (
                "migrated: VMI on target",
                vec![src.clone(), dst.clone()],
                vmi("u1", "node-b"),
                Ok("virt-launcher-r1-bbbbb"),
            ),
            (
                "source pod finished",
                vec![done.clone(), dst.clone()],
                vmi("u1", "node-b"),
                Ok("virt-launcher-r1-bbbbb"),
            ),
            (
                "pod of an older VMI",
                vec![old.clone(), src.clone()],
                VmiView {
                    uid: Some("u1".into()),
                    node: None,
                },
                Ok("virt-launcher-r1-aaaaa"),
            ),
            (
                "terminating pod skipped",
                vec![deleting.clone(), src.clone()],
                VmiView {
                    uid: Some("u1".into()),
                    node: None,
                },
                Ok("virt-launcher-r1-aaaaa"),
            ),
            (
                "nothing running",
                vec![done.clone()],
                vmi("u1", "node-a"),
                Err("no running virt-launcher pod"),
            ),
            (
                "none on the VMI's node",
                vec![dst.clone()],
                vmi("u1", "node-c"),
                Err("node-c"),
            ),
            (
                "ambiguous without a node",
                vec![src.clone(), dst.clone()],
                VmiView {
                    uid: Some("u1".into()),
                    node: None,
                },
                Err("2 running"),
            ),
        ];
        for (name, pods, vmi, want) in cases {
            let got = choose_launcher(&pods, &vmi);
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{name}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "{name}: {g}"),
                (g, w) => panic!("{name}: got {g:?}, want {w:?}"),
            }
        }
    }
}
