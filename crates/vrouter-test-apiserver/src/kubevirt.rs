//! KubeVirt's VirtualMachineInstance resource, as far as the operator
//! reads it: tests that stand in for virt-handler write the objects.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use crate::Error;

/// How long a new CRD may take to be served.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// Installs just enough of KubeVirt's VMI CRD for the operator's reads and
/// watch (an open schema, no status subresource: whoever writes the object
/// writes its status), and waits until discovery serves it. Installed
/// already is fine.
pub async fn install_vmi_crd(client: &kube::Client) -> Result<(), Error> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "virtualmachineinstances.kubevirt.io"},
        "spec": {
            "group": "kubevirt.io",
            "names": {"kind": "VirtualMachineInstance", "plural": "virtualmachineinstances",
                      "singular": "virtualmachineinstance", "shortNames": ["vmi"]},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .expect("a well-formed CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    let deadline = Instant::now() + SERVED_WITHIN;
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e.into()),
        }
    }
}
