//! A KubeVirt VM starting or stopping reaches its VRouterTarget through the
//! VirtualMachineInstance watch, not the next poll: the poll here is an hour.

mod common;

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use vrouter_api::VRouterTarget;
use vrouter_operator::context::{Context, Settings};
use vrouter_operator::metrics::Metrics;
use vrouter_test_apiserver::TestEnv;

use common::{create, install_vmi_crd, site_idle, start_controllers, wait_for};

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
