//! A KubeVirt VM starting or stopping reaches its VRouterTarget through the
//! VirtualMachineInstance watch, not the next poll: the poll here is an hour.

mod common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use vrouter_api::VRouterTarget;
use vrouter_operator::context::{Context, Settings};
use vrouter_operator::metrics::Metrics;
use vrouter_test_apiserver::TestEnv;

use common::{create, site_idle, start_controllers, wait_for};

/// Just enough of KubeVirt's VMI CRD for the operator's reads and watch.
async fn install_vmi_crd(client: &kube::Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "virtualmachineinstances.kubevirt.io"},
        "spec": {
            "group": "kubevirt.io",
            "names": {"kind": "VirtualMachineInstance", "plural": "virtualmachineinstances", "singular": "virtualmachineinstance", "shortNames": ["vmi"]},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("installing the VMI CRD: {e}"),
    }
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    wait_for("the VMI resource to be served", Duration::from_secs(30), || async {
        kube::discovery::pinned_kind(client, &gvk).await.ok()
    })
    .await;
}

#[tokio::test]
async fn a_vmi_starting_and_stopping_updates_vm_running_at_once() {
    let env = TestEnv::shared().await;
    install_vmi_crd(&env.client()).await;
    let site = site_idle("vmi", &[]).await;
    let settings = Settings {
        target_poll: Duration::from_secs(3600),
        ..Settings::default()
    };
    let ctx = Arc::new(Context::new(
        env.client(),
        Metrics::new(),
        settings,
        site.providers.clone(),
    ));
    let _stop = start_controllers(&ctx, site.ns.name());
    create::<VRouterTarget>(
        &site.ns,
        json!({"metadata": {"name": "kv"}, "spec": {"provider": {"kubevirt": {"name": "vm1"}}}}),
    )
    .await;
    let targets = site.ns.api::<VRouterTarget>();
    let running = |want: bool| {
        let targets = targets.clone();
        async move {
            let t = targets.get("kv").await.ok()?;
            (t.status.unwrap_or_default().vm_running == want).then_some(())
        }
    };
    // Let the first poll (VMI missing → not running) happen.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"));
    let vmis: Api<DynamicObject> = Api::namespaced_with(env.client(), site.ns.name(), &resource);
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "uid": null}, "status": {"phase": "Running", "nodeName": "node-a"},
    }))
    .unwrap();
    vmis.create(&PostParams::default(), &vmi).await.unwrap();
    wait_for("vmRunning=true", Duration::from_secs(30), || running(true)).await;
    vmis.delete("vm1", &DeleteParams::default()).await.unwrap();
    wait_for("vmRunning=false", Duration::from_secs(30), || running(false)).await;
}
