//! The operator's shipped RBAC — the plain manifests in `deploy/operator/`
//! and the Helm chart rendered by a real `helm` — installed on the test API
//! server, and clients that authenticate as the ServiceAccount it binds.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};
use vrouter_test_apiserver::TestEnv;

/// The kinds that make up the operator's identity and its grants.
const RBAC_KINDS: [&str; 7] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn chart() -> PathBuf {
    root().join("deploy/helm/vrouter-operator")
}

/// The YAML documents of `text`, empty ones left out.
pub fn documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The objects of one file of `deploy/operator/`.
pub fn plain_manifest(file: &str) -> Vec<Value> {
    documents(&std::fs::read_to_string(root().join("deploy/operator").join(file)).unwrap())
}

pub fn helm() -> Command {
    let path = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
    Command::new(path)
}

/// The API whose presence the chart checks before rendering its
/// ValidatingAdmissionPolicy (`secret-policy.yaml`).
pub const ADMISSION_POLICY_API: &str = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";

/// `helm template <release>` of the chart with `sets`, rendered as for the
/// test API server (which serves [`ADMISSION_POLICY_API`]); the objects, or
/// helm's stderr.
pub fn helm_template(release: &str, namespace: &str, sets: &[&str]) -> Result<Vec<Value>, String> {
    helm_template_with(release, namespace, sets, &[ADMISSION_POLICY_API])
}

/// `helm template` with exactly these `--api-versions` beyond Helm's own
/// defaults (`helm template` asks no cluster what it serves).
pub fn helm_template_with(
    release: &str,
    namespace: &str,
    sets: &[&str],
    api_versions: &[&str],
) -> Result<Vec<Value>, String> {
    let mut command = helm();
    command
        .args(["template", release])
        .arg(chart())
        .args(["--namespace", namespace]);
    for api in api_versions {
        command.args(["--api-versions", api]);
    }
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command.output().expect("run helm");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(documents(&String::from_utf8(output.stdout).unwrap()))
}

/// The ServiceAccount and RBAC objects among `objects`.
pub fn rbac_objects(objects: &[Value]) -> Vec<Value> {
    objects
        .iter()
        .filter(|o| RBAC_KINDS.contains(&o["kind"].as_str().unwrap_or_default()))
        .cloned()
        .collect()
}

/// The API of `object`'s kind, in its namespace when it has one.
pub async fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", object["apiVersion"].as_str().unwrap()),
    };
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("the API server does not serve {gvk:?}: {e}"));
    match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object["metadata"]["namespace"]
                .as_str()
                .expect("a namespaced object has a namespace"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    }
}

/// Creates the ServiceAccount and RBAC objects among `objects` (and the
/// namespaces they live in), with admin rights.
pub async fn install(client: &kube::Client, objects: &[Value]) {
    for object in rbac_objects(objects) {
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
            match Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &ns)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("creating namespace {namespace}: {e}"),
            }
        }
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        api_for(client, &object)
            .await
            .create(&PostParams::default(), &dynamic)
            .await
            .unwrap_or_else(|e| panic!("creating {} {}: {e}", object["kind"], object["metadata"]["name"]));
    }
}

/// A kubeconfig file for the test API server that authenticates with
/// `token`, for an operator process.
pub fn kubeconfig_with_token(env: &TestEnv, token: &str, path: &Path) {
    let mut kubeconfig: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(env.kubeconfig_path()).unwrap()).unwrap();
    for user in kubeconfig["users"].as_sequence_mut().unwrap() {
        user["user"] = serde_yaml::to_value(json!({"token": token})).unwrap();
    }
    std::fs::write(path, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();
}
