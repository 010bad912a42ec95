//! The VRouterTarget controller (spec §7.6): polls whether the target's VM
//! runs and reports it in `status.vmRunning`, writing only on a change. A
//! KubeVirt VM's start or stop is seen at once through its VMI's watch.

mod reconcile;

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use vrouter_api::VRouterTarget;

use crate::runtime::context::Context;
use crate::runtime::reconciler::{self, Scope, Shutdown};
use crate::runtime::watches::Watches;

pub use reconcile::CONTROLLER;

/// Runs the VRouterTarget controller until `shutdown`. A VMI event polls
/// the targets that name it at once, when this cluster serves KubeVirt.
pub async fn run(ctx: Arc<Context>, scope: &Scope, watches: &Watches, shutdown: Shutdown) {
    let wc = watcher::Config::default();
    let target_events = watches.targets.subscribe().applied_objects();
    let controller = Controller::for_stream(target_events, watches.targets.store())
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.targets));
    let controller = match vmi_resource(&scope.client).await {
        Some(resource) => {
            let targets = controller.store();
            let vmis = match &scope.namespace {
                Some(ns) => Api::<DynamicObject>::namespaced_with(scope.client.clone(), ns, &resource),
                None => Api::<DynamicObject>::all_with(scope.client.clone(), &resource),
            };
            controller.watches_with(vmis, resource, wc, move |vmi| {
                let state = targets.state();
                targets_for_vmi(
                    &vmi.namespace().unwrap_or_default(),
                    &vmi.name_any(),
                    state.iter().map(|t| &**t),
                )
            })
        }
        None => controller,
    };
    reconciler::run::<reconcile::TargetReconciler>(controller, ctx, shutdown).await;
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
    targets_naming_vmi(vmi_namespace, vmi_name, targets)
        .into_iter()
        .map(kube::runtime::reflector::ObjectRef::from_obj)
        .collect()
}

/// The KubeVirt targets whose VM is the VMI `vmi_namespace/vmi_name`: the
/// one rule both the target and the config controllers map VMI events by.
pub fn targets_naming_vmi<'a>(
    vmi_namespace: &str,
    vmi_name: &str,
    targets: impl IntoIterator<Item = &'a VRouterTarget>,
) -> Vec<&'a VRouterTarget> {
    targets
        .into_iter()
        .filter(|t| {
            let Some(kv) = t.spec.provider.kubevirt.as_ref() else {
                return false;
            };
            kv.name == vmi_name && t.kubevirt_namespace().as_deref() == Some(vmi_namespace)
        })
        .collect()
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
