//! A rendered chart sent to a real kube-apiserver as a server-side dry run
//! with strict field validation, object by object, as `helm install`
//! creates them.

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;

/// Creates each object as a server-side dry run, as `helm install` would
/// create it; cert-manager's kinds are left out (no cert-manager here), and
/// so are the CRDs, which the test API server has installed already
/// (`helm_chart.rs` compares them;
/// `helm_upgrades.rs` installs them with helm).
pub async fn dry_run(client: &kube::Client, objects: &[Value]) {
    for object in objects {
        let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", object["apiVersion"].as_str().unwrap()),
        };
        if group == "cert-manager.io" || object["kind"] == "CustomResourceDefinition" {
            continue;
        }
        let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
        let (resource, capabilities) = pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("the API server does not serve {gvk:?}: {e}"));
        let namespace = match capabilities.scope {
            Scope::Namespaced => Some(
                object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a namespaced object without a namespace: {object:#?}")),
            ),
            Scope::Cluster => None,
        };
        // Strict: an unknown or duplicate field is an error, not a warning.
        let url = format!(
            "{}?dryRun=All&fieldValidation=Strict",
            <DynamicObject as Resource>::url_path(&resource, namespace)
        );
        let request = http::Request::post(url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(object).unwrap())
            .unwrap();
        client.request::<DynamicObject>(request).await.unwrap_or_else(|e| {
            panic!(
                "the API server refuses {} {:?}: {e}",
                gvk.kind, object["metadata"]["name"]
            )
        });
    }
}
