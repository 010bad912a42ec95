//! The VRouterTarget controller (spec §7.6): polls whether the target's VM
//! runs and reports it in `status.vmRunning`, writing only on a change.

use std::sync::Arc;
use std::time::Instant;

use kube::runtime::controller::Action;
use vrouter_api::VRouterTarget;

use crate::context::Context;
use crate::objects;

pub const CONTROLLER: &str = "vroutertarget";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

pub async fn reconcile(target: Arc<VRouterTarget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = poll(&target, &ctx).await;
    ctx.metrics.reconciled(CONTROLLER, started.elapsed(), result.is_err());
    result?;
    // The poll interval holds on every path: an unreachable provider is
    // asked again at the next poll, not in a tight retry loop.
    Ok(Action::requeue(ctx.settings.target_poll))
}

async fn poll(target: &VRouterTarget, ctx: &Context) -> Result<(), Error> {
    let running = match ctx.providers.for_target(target).await {
        Ok(provider) => provider.is_vm_running().await,
        Err(e) => Err(e),
    };
    let running = match running {
        Ok(running) => running,
        Err(error) => {
            // The last observed value stays; the error is in the log.
            tracing::warn!(target = ?target.metadata.name, %error, "could not tell whether the VM runs");
            return Ok(());
        }
    };
    let current = target.status.clone().unwrap_or_default();
    if current.vm_running != running {
        let mut next = current.clone();
        next.vm_running = running;
        objects::patch_status(&ctx.client, target, Some(&current), &next).await?;
    }
    Ok(())
}

/// The KubeVirt VirtualMachineInstance resource, when this cluster serves
/// it. Without KubeVirt there is nothing to watch, and a watch on a missing
/// resource would only fail forever.
pub async fn vmi_resource(client: &kube::Client) -> Option<kube::core::ApiResource> {
    let gvk = kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    kube::discovery::pinned_kind(client, &gvk)
        .await
        .ok()
        .map(|(resource, _)| resource)
}

/// The KubeVirt targets that a VMI event concerns: same VM name, and the VM
/// namespace the provider would use (the target's own when not set). Maps a
/// VM start or stop to an immediate poll instead of the next 60 s one.
pub fn targets_for_vmi<'a>(
    vmi_namespace: &str,
    vmi_name: &str,
    targets: impl IntoIterator<Item = &'a VRouterTarget>,
) -> Vec<kube::runtime::reflector::ObjectRef<VRouterTarget>> {
    targets
        .into_iter()
        .filter(|t| {
            let Some(kv) = t.spec.provider.kubevirt.as_ref() else {
                return false;
            };
            kv.name == vmi_name && t.kubevirt_namespace().as_deref() == Some(vmi_namespace)
        })
        .map(kube::runtime::reflector::ObjectRef::from_obj)
        .collect()
}

pub fn error_policy(_target: Arc<VRouterTarget>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(%error, "VRouterTarget reconcile failed");
    Action::requeue(ctx.settings.target_poll)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, namespace: &str, yaml: &str) -> VRouterTarget {
        let mut t: VRouterTarget = serde_yaml::from_str(&format!("metadata: {{}}\n{yaml}")).unwrap();
        t.metadata.name = Some(name.into());
        t.metadata.namespace = Some(namespace.into());
        t
    }

    #[test]
    fn a_vmi_maps_to_kubevirt_targets_by_name_and_resolved_namespace() {
        let targets = [
            target("same-ns", "net", "spec: {provider: {kubevirt: {name: vm1}}}"),
            target(
                "explicit-ns",
                "net",
                "spec: {provider: {kubevirt: {name: vm1, namespace: prod}}}",
            ),
            target("other-vm", "net", "spec: {provider: {kubevirt: {name: vm2}}}"),
            target(
                "proxmox",
                "net",
                "spec: {provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: p}}}}",
            ),
        ];
        let names = |ns: &str, vm: &str| -> Vec<String> {
            targets_for_vmi(ns, vm, &targets).into_iter().map(|r| r.name).collect()
        };
        assert_eq!(names("net", "vm1"), ["same-ns"]);
        assert_eq!(names("prod", "vm1"), ["explicit-ns"]);
        assert_eq!(names("net", "vm2"), ["other-vm"]);
        assert!(names("elsewhere", "vm1").is_empty());
    }
}
