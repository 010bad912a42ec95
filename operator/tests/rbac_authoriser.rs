//! The shipped roles meet the real authoriser. Every kind of Kubernetes
//! request the KubeVirt and Proxmox paths make is sent by the providers' own
//! code as the operator's ServiceAccount, bound by exactly the roles of
//! `deploy/operator/rbac.yaml` or of the Helm chart: each passes
//! authorisation, and with its verb taken out of the role each is refused
//! with an error that names the missing permission. A KubeVirt exec is a
//! websocket upgrade (an HTTP GET), so a role granting `pods/exec` only
//! `create` is refused: this is where that shows.

mod common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vrouter_api::VRouterConfig;
use vrouter_operator::runtime::context::{Context, FactoryProviders, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_providers::kubevirt::virsh::{self, VirshTransport};
use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider, vmi_resource};
use vrouter_providers::lookup_cache::{CachedLookup, DEFAULT_TTL};
use vrouter_providers::{FactoryContext, GuestPaths, GuestTiming, KubeLookup, ObjectLookup, Provider, ProviderError};
use vrouter_qga::Agent;
use vrouter_test_apiserver::TestEnv;

use common::shipped_rbac;
use common::{create, install_vmi_crd, start_controllers, wait_for};

/// A kind of request a provider makes, and the role rule that allows it.
#[derive(Clone, Copy, Debug)]
enum Request {
    /// A `virsh` exec into a virt-launcher pod that does not exist.
    ExecIntoMissingPod,
    /// Reading a VirtualMachineInstance (here: one that does not exist).
    GetVmi,
    /// Listing the virt-launcher pods of an existing VMI (here: none).
    ListLauncherPods,
    /// Reading a credentials or kubeconfig Secret (here: a missing one).
    GetSecret,
    /// Reading a target's ProxmoxCluster (here: a missing one).
    GetProxmoxCluster,
}

/// The VMI that exists (without pods) for [`Request::ListLauncherPods`].
const LONELY_VMI: &str = "lonely";

impl Request {
    const ALL: [Request; 5] = [
        Request::ExecIntoMissingPod,
        Request::GetVmi,
        Request::ListLauncherPods,
        Request::GetSecret,
        Request::GetProxmoxCluster,
    ];

    /// The verbs of the role rule this request needs, as `(API group,
    /// resource, subresource, verb)`.
    fn grants(self) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
        match self {
            Request::ExecIntoMissingPod => vec![("", "pods", "exec", "get"), ("", "pods", "exec", "create")],
            Request::GetVmi => vec![("kubevirt.io", "virtualmachineinstances", "", "get")],
            Request::ListLauncherPods => vec![("", "pods", "", "list")],
            Request::GetSecret => vec![("", "secrets", "", "get")],
            Request::GetProxmoxCluster => vec![("vrouter.kojuro.date", "proxmoxclusters", "", "get")],
        }
    }

    /// Sends the request with the providers' own code as `client`;
    /// `Ok` carries what the authorised request was answered.
    async fn send(self, client: &kube::Client, namespace: &str) -> Result<String, ProviderError> {
        let kubevirt = |vm: &str| {
            KubeVirtProvider::new(
                client.clone(),
                vm,
                namespace,
                GuestPaths::default(),
                GuestTiming::default(),
                KubeVirtOptions::default(),
            )
            .unwrap()
        };
        match self {
            Request::ExecIntoMissingPod => {
                let transport = VirshTransport::new(
                    client.clone(),
                    namespace,
                    "virt-launcher-absent-x1y2z".into(),
                    virsh::domain_name(namespace, "absent"),
                    Duration::from_secs(30),
                );
                let error = Agent::new(transport).ping().await.expect_err("there is no such pod");
                match virsh::exec_refusal(error) {
                    Ok(refused) => Err(refused),
                    Err(other) => Ok(other.to_string()),
                }
            }
            Request::GetVmi => kubevirt("absent")
                .is_vm_running()
                .await
                .map(|running| format!("running: {running}")),
            Request::ListLauncherPods => match kubevirt(LONELY_VMI).check_ready().await {
                Ok(()) => Ok("ready".into()),
                Err(e @ ProviderError::AgentUnavailable { .. }) => Ok(e.to_string()),
                Err(e) => Err(e),
            },
            Request::GetSecret => KubeLookup::new(client.clone())
                .secret(namespace, "absent")
                .await
                .map(|s| format!("found: {}", s.is_some())),
            Request::GetProxmoxCluster => KubeLookup::new(client.clone())
                .proxmox_cluster(namespace, "absent")
                .await
                .map(|c| format!("found: {}", c.is_some())),
        }
    }

    /// What the authorised request must be answered: the object or pod is
    /// missing, nothing else went wrong.
    fn answered_as_authorised(self, answer: &str) -> bool {
        match self {
            Request::ExecIntoMissingPod => answer.contains("404"),
            Request::GetVmi => answer == "running: false",
            Request::ListLauncherPods => answer.contains("no running virt-launcher pod"),
            Request::GetSecret | Request::GetProxmoxCluster => answer == "found: false",
        }
    }
}

/// Whether `client`'s identity may `verb` the resource in `namespace`, by
/// the API server's own authoriser.
async fn allowed(client: &kube::Client, namespace: &str, grant: (&str, &str, &str, &str)) -> bool {
    let (group, resource, subresource, verb) = grant;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: Some(subresource.into()),
                verb: Some(verb.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The role among the shipped objects that grants pods/exec.
fn operator_role(objects: &[Value]) -> Value {
    objects
        .iter()
        .find(|o| {
            matches!(o["kind"].as_str(), Some("ClusterRole" | "Role"))
                && o["rules"].as_array().is_some_and(|rules| {
                    rules.iter().any(|r| {
                        r["resources"]
                            .as_array()
                            .is_some_and(|rs| rs.contains(&json!("pods/exec")))
                    })
                })
        })
        .expect("the shipped RBAC has a role granting pods/exec")
        .clone()
}

/// The role's rules with `verb` taken off every rule naming `resource`
/// (a rule left without verbs goes: the API server refuses it).
fn without(rules: &Value, resource: &str, verb: &str) -> Value {
    let mut rules = rules.clone();
    let rules_list = rules.as_array_mut().unwrap();
    for rule in rules_list.iter_mut() {
        if rule["resources"]
            .as_array()
            .is_some_and(|rs| rs.contains(&json!(resource)))
        {
            rule["verbs"].as_array_mut().unwrap().retain(|v| v != verb);
        }
    }
    rules_list.retain(|rule| rule["verbs"].as_array().is_some_and(|verbs| !verbs.is_empty()));
    rules
}

async fn set_rules(env: &TestEnv, role: &Value, rules: &Value) {
    shipped_rbac::api_for(&env.client(), role)
        .await
        .patch(
            role["metadata"]["name"].as_str().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": rules})),
        )
        .await
        .unwrap();
}

/// Waits until the authoriser (which reads roles from a watch) sees the
/// role as `want` for `grant`.
async fn until_authoriser_says(client: &kube::Client, namespace: &str, grant: (&str, &str, &str, &str), want: bool) {
    wait_for(
        &format!("the authoriser to say {want} for {grant:?}"),
        Duration::from_secs(30),
        || async { (allowed(client, namespace, grant).await == want).then_some(()) },
    )
    .await;
}

/// Installs `objects` (the shipped RBAC of one source) and checks every
/// [`Request`] against them, in the VM namespace `namespace`.
async fn check_shipped_role(env: &TestEnv, objects: &[Value], namespace: &str) {
    install_vmi_crd(&env.client()).await;
    shipped_rbac::install(&env.client(), objects).await;
    let account = objects
        .iter()
        .find(|o| o["kind"] == "ServiceAccount")
        .expect("the shipped RBAC has a ServiceAccount");
    let client = env
        .service_account_client(
            account["metadata"]["namespace"].as_str().unwrap(),
            account["metadata"]["name"].as_str().unwrap(),
        )
        .await
        .unwrap();
    let vmis: Api<DynamicObject> = Api::namespaced_with(env.client(), namespace, &vmi_resource());
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": LONELY_VMI},
        "status": {"phase": "Running", "nodeName": "node-1"},
    }))
    .unwrap();
    vmis.create(&PostParams::default(), &vmi).await.unwrap();

    for request in Request::ALL {
        match request.send(&client, namespace).await {
            Ok(answer) => assert!(
                request.answered_as_authorised(&answer),
                "{request:?} under the shipped role was answered {answer:?}"
            ),
            Err(e) => panic!("{request:?} under the shipped role failed: {e}"),
        }
    }

    let role = operator_role(objects);
    for request in Request::ALL {
        for grant in request.grants() {
            let (_, resource, subresource, verb) = grant;
            let rule_resource = if subresource.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}/{subresource}")
            };
            set_rules(env, &role, &without(&role["rules"], &rule_resource, verb)).await;
            until_authoriser_says(&client, namespace, grant, false).await;
            let error = request
                .send(&client, namespace)
                .await
                .expect_err(&format!("{request:?} without {verb} on {rule_resource}"));
            let ProviderError::Forbidden { access, .. } = &error else {
                panic!("{request:?} without {verb} on {rule_resource}: not a Forbidden error: {error}");
            };
            assert_eq!(access.verbs, [verb], "{error}");
            assert!(access.resource.starts_with(&rule_resource), "{error}");
            assert_eq!(access.namespace, namespace, "{error}");
            let message = error.to_string();
            assert!(
                message.contains(&format!("may not {verb} {rule_resource}")) && message.contains(namespace),
                "the message names the missing permission: {message}"
            );
            set_rules(env, &role, &role["rules"]).await;
            until_authoriser_says(&client, namespace, grant, true).await;
        }
    }
}

#[tokio::test]
async fn the_plain_manifests_role_allows_every_provider_request_and_names_each_one_it_lacks() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("authz-plain").await;
    let objects = shipped_rbac::plain_manifest("rbac.yaml");
    check_shipped_role(env, &objects, ns.name()).await;
}

#[tokio::test]
async fn the_chart_role_allows_every_provider_request_and_names_each_one_it_lacks() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("authz-chart").await;
    let objects = shipped_rbac::helm_template("authz", "authz-system", &[]).unwrap();
    check_shipped_role(env, &objects, ns.name()).await;
}

#[tokio::test]
async fn the_chart_role_narrowed_to_one_namespace_allows_every_provider_request_there() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("authz-watched").await;
    let watch = format!("watchNamespace={}", ns.name());
    let objects = shipped_rbac::helm_template("watched", "watched-system", &[&watch]).unwrap();
    assert_eq!(operator_role(&objects)["kind"], "Role");
    check_shipped_role(env, &objects, ns.name()).await;
}

/// A role without `get` on pods/exec, as shipped before Kubernetes 1.35
/// needed it: the VRouterConfig says which permission is missing, where.
#[tokio::test]
async fn a_role_without_exec_get_is_named_in_the_config_status() {
    let env = TestEnv::shared().await;
    install_vmi_crd(&env.client()).await;
    let objects = shipped_rbac::helm_template("narrow", "narrow-system", &[]).unwrap();
    shipped_rbac::install(&env.client(), &objects).await;
    let role = operator_role(&objects);
    set_rules(env, &role, &without(&role["rules"], "pods/exec", "get")).await;
    let client = env
        .service_account_client("narrow-system", "narrow-vrouter-operator")
        .await
        .unwrap();
    let ns = env.namespace("authz-status").await;
    until_authoriser_says(&client, ns.name(), ("", "pods", "exec", "get"), false).await;

    // A running VMI and its virt-launcher pod, as KubeVirt leaves them.
    let vmis: Api<DynamicObject> = Api::namespaced_with(env.client(), ns.name(), &vmi_resource());
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1"},
        "status": {"phase": "Running", "nodeName": "node-1"},
    }))
    .unwrap();
    let vmi = vmis.create(&PostParams::default(), &vmi).await.unwrap();
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-vm1-abcde", "labels": {
            "vm.kubevirt.io/name": "vm1", "kubevirt.io/created-by": vmi.metadata.uid.unwrap()}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "compute", "image": "virt-launcher"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        "virt-launcher-vm1-abcde",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();

    let providers = Arc::new(FactoryProviders::new(
        CachedLookup::new(KubeLookup::new(client.clone()), DEFAULT_TTL),
        FactoryContext {
            client: Some(client.clone()),
            ..FactoryContext::default()
        },
    ));
    let ctx = Arc::new(Context::new(client, Metrics::new(), Settings::default(), providers));
    let _stop = start_controllers(&ctx, ns.name());
    create::<vrouter_api::VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "kv"}, "spec": {"provider": {"type": "kubevirt", "kubevirt": {"name": "vm1"}}}}),
    )
    .await;
    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "kv"}, "commands": "set system host-name kv\n"}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let want = format!("may not get pods/exec in namespace {:?}", ns.name());
    let message = wait_for(
        "the missing permission in the config's status",
        Duration::from_secs(60),
        || async {
            let message = configs.get("c").await.ok()?.status?.message;
            message.contains(&want).then_some(message)
        },
    )
    .await;
    assert!(message.contains("forbidden (HTTP 403)"), "{message}");
    assert!(!message.contains("create"), "only get is missing: {message}");
}
