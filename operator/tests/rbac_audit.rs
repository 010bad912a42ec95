//! The shipped roles are what the operator does, no more and no less.
//!
//! The operator binary runs as its ServiceAccount, bound by exactly the
//! plain manifests' roles (`deploy/operator/rbac.yaml`, `metrics-rbac.yaml`,
//! with `secret-policy.yaml`), on a real kube-apiserver that records every
//! request in an audit log and enforces owner-reference permissions. It is
//! driven through every path that talks to the API server: the five
//! controllers (a real guest applied through Proxmox, drift detection with
//! its Secret and the upgrade of an old ConfigMap, a KubeVirt VM in another
//! namespace reached through pods/exec, creation, change, deletion and
//! finalizers), the webhooks, leader election, events, and the metrics
//! authorisation. Then, from the audit log:
//!
//! - the operator was refused nothing;
//! - every request it made is allowed by the plain manifests' rules and by
//!   the Helm chart's (asked of the API server's own authoriser for the
//!   chart's ServiceAccount, installed beside);
//! - every rule either grants is used by some request.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use vrouter_api::vm_access::ANNOTATION_ALLOWED_TARGET_NAMESPACES;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterStatus};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::vm::QemuGuest;
use vrouter_test_peers::vm::router::router_overlay;

use common::https;
use common::operator_process::OperatorProcess;
use common::shipped_rbac;
use common::{create, final_phase, install_vmi_crd, wait_for};

const OPERATOR: &str = "system:serviceaccount:vrouter-system:vrouter-operator";
const TOKEN_ID: &str = "root@pam!vrouter";
const TOKEN_SECRET: &str = "3f0c9a1e-audit-only";

/// One permission a request needs: API group, resource (with
/// `/subresource`), verb.
type Permission = (String, String, String);

fn permission(group: &str, resource: &str, verb: &str) -> Permission {
    (group.to_owned(), resource.to_owned(), verb.to_owned())
}

/// The plural resource of one of the operator's kinds.
fn plural_of(api_version: &str, kind: &str) -> Option<(String, String)> {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let plural = match kind {
        "VRouterBinding" => VRouterBinding::plural(&()),
        "VRouterConfig" => VRouterConfig::plural(&()),
        "VRouterStatus" => VRouterStatus::plural(&()),
        _ => return None,
    };
    Some((group.to_owned(), plural.into_owned()))
}

/// The permissions a recorded request of the operator needed.
fn needed(event: &Value, owners_of_secrets: &[Value]) -> Vec<Permission> {
    let object = &event["objectRef"];
    let verb = event["verb"].as_str().unwrap_or_default();
    let Some(resource) = object["resource"].as_str() else {
        // A non-resource URL (discovery, /version): open to every identity.
        return Vec::new();
    };
    let group = object["apiGroup"].as_str().unwrap_or("");
    let full = match object["subresource"].as_str() {
        Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
        _ => resource.to_owned(),
    };
    let mut out = vec![permission(group, &full, verb)];
    // A server-side apply that created its object (201) was also
    // authorised as a create.
    if verb == "patch" && event["responseStatus"]["code"] == 201 {
        out.push(permission(group, &full, "create"));
    }
    // A websocket exec is a GET; Kubernetes 1.35+ also checks `create`.
    if full == "pods/exec" && verb == "get" {
        out.push(permission("", "pods/exec", "create"));
    }
    // An owner reference that blocks deletion needs update on the owner's
    // finalizers (OwnerReferencesPermissionEnforcement). Request bodies
    // show them, except for Secrets, whose bodies are not logged: their
    // owner references are read from the Secrets themselves.
    let owners: Vec<Value> = if resource == "secrets" {
        owners_of_secrets.to_vec()
    } else {
        event["requestObject"]["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    if ["create", "update", "patch"].contains(&verb) {
        for owner in owners.iter().filter(|o| o["blockOwnerDeletion"] == true) {
            if let Some((g, plural)) = plural_of(
                owner["apiVersion"].as_str().unwrap_or(""),
                owner["kind"].as_str().unwrap_or(""),
            ) {
                out.push(permission(&g, &format!("{plural}/finalizers"), "update"));
            }
        }
    }
    out
}

/// The permissions the operator's own roles among `objects` grant.
fn granted(objects: &[Value]) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for role in objects.iter().filter(|o| {
        matches!(o["kind"].as_str(), Some("ClusterRole" | "Role"))
            && !o["metadata"]["name"].as_str().unwrap_or("").ends_with("metrics-reader")
    }) {
        for rule in role["rules"].as_array().unwrap() {
            let strings = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_default()
            };
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "the operator's roles grant no non-resource URL: {rule}"
            );
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        assert!(group != "*" && resource != "*" && verb != "*", "no wildcards: {rule}");
                        out.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    out
}

/// Whether the chart's ServiceAccount may make `event`'s request, by the
/// API server's authoriser.
async fn chart_allows(env: &TestEnv, event: &Value, permission: &Permission) -> bool {
    let (group, resource, verb) = permission;
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:serviceaccount:audit-system:audit-vrouter-operator".into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:audit-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                // The operator's own namespace (its Lease) is the chart's
                // release namespace there.
                namespace: event["objectRef"]["namespace"]
                    .as_str()
                    .map(|ns| if ns == "vrouter-system" { "audit-system" } else { ns }.to_owned()),
                group: Some(group.clone()),
                resource: Some(resource.to_owned()),
                subresource: Some(subresource.to_owned()),
                verb: Some(verb.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(env.client())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The plain manifests the operator runs under.
fn plain_objects() -> Vec<Value> {
    let mut objects = shipped_rbac::plain_manifest("rbac.yaml");
    objects.extend(shipped_rbac::plain_manifest("metrics-rbac.yaml"));
    objects.extend(shipped_rbac::plain_manifest("secret-policy.yaml"));
    objects
}

async fn register_webhook(env: &TestEnv, operator: &OperatorProcess, namespaces: &[&str]) {
    let rule = |operations: &[&str], resources: &[&str]| {
        json!({"apiGroups": ["vrouter.kojuro.date"], "apiVersions": ["v1"], "operations": operations,
            "resources": resources, "scope": "Namespaced"})
    };
    let client_config = serde_json::to_value(
        env.webhook_tls()
            .client_config(format!("https://{}/validate", operator.webhook)),
    )
    .unwrap();
    let selector =
        json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]});
    let webhook = |name: &str, rules: Value| {
        json!({"name": name, "clientConfig": client_config, "rules": [rules], "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "timeoutSeconds": 10,
            "namespaceSelector": selector})
    };
    let configuration: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
        serde_json::from_value(json!({
            "metadata": {"name": "vrouter-operator-audit"},
            "webhooks": [
                webhook("validate.vrouter.kojuro.date", rule(&["CREATE", "UPDATE"], &[
                    "vroutertemplates", "vroutertargets", "vrouterbindings", "vrouterparams",
                    "vrouterconfigs", "proxmoxclusters", "vrouterstatuses"])),
                webhook("protect.vrouter.kojuro.date", rule(&["DELETE"], &["vroutertargets", "vrouterparams"])),
            ],
        }))
        .unwrap();
    Api::all(env.client())
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
}

/// Waits until the operator's requests in the audit log include one
/// matching `what`.
async fn until_audited(env: &TestEnv, what: &str, matches: impl Fn(&Value) -> bool) {
    wait_for(what, Duration::from_secs(120), || async {
        env.audit_events()
            .iter()
            .any(|e| e["user"]["username"] == OPERATOR && matches(e))
            .then_some(())
    })
    .await;
}

fn is(event: &Value, verb: &str, resource: &str, subresource: &str) -> bool {
    event["verb"] == verb
        && event["objectRef"]["resource"] == resource
        && event["objectRef"]["subresource"].as_str().unwrap_or("") == subresource
}

async fn proxmox_site(tenant: &TestNamespace, guest: Arc<QemuGuest>) -> FakeProxmox {
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    pve.add_guest_vm(120, "pve1", guest);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pve-token"},
        "stringData": {"api-token-id": TOKEN_ID, "api-token-secret": TOKEN_SECRET},
    }))
    .unwrap();
    tenant
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    create::<vrouter_api::ProxmoxCluster>(
        tenant,
        json!({"metadata": {"name": "pve"}, "spec": {"endpoints": [pve.url(0)],
            "credentialsRef": {"name": "pve-token"}, "insecureSkipTLSVerify": true}}),
    )
    .await;
    pve
}

/// A VMI and its virt-launcher pod in `namespace`, on a node that does not
/// exist: an exec passes authorisation and then fails to reach a kubelet.
async fn kubevirt_vm(env: &TestEnv, namespace: &str) {
    let vmis: Api<DynamicObject> =
        Api::namespaced_with(env.client(), namespace, &vrouter_providers::kubevirt::vmi_resource());
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "kv"}, "status": {"phase": "Running", "nodeName": "node-absent"},
    }))
    .unwrap();
    let vmi = vmis.create(&PostParams::default(), &vmi).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client(), namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-kv-abcde", "labels": {
            "vm.kubevirt.io/name": "kv", "kubevirt.io/created-by": vmi.metadata.uid.unwrap()}},
        "spec": {"nodeName": "node-absent", "containers": [{"name": "compute", "image": "virt-launcher"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        "virt-launcher-kv-abcde",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn the_shipped_roles_grant_exactly_what_the_operator_does() {
    let guest = Arc::new(QemuGuest::boot("rbac-audit", router_overlay("vyos")).unwrap_or_else(|e| panic!("{e}")));
    let env = TestEnv::start_audited().await.unwrap_or_else(|e| panic!("{e}"));
    install_vmi_crd(&env.client()).await;
    shipped_rbac::install(&env.client(), &plain_objects()).await;
    // The operator here serves mounted certificate files, so the chart is
    // rendered for them (the operator-made certificate's roles are audited
    // by webhook_certs.rs).
    let chart = shipped_rbac::helm_template(
        "audit",
        "audit-system",
        &["webhook.certificates=manual", "webhook.caBundle=Y2EK"],
    )
    .unwrap();
    shipped_rbac::install(&env.client(), &chart).await;
    let tenant = env.namespace("tenant").await;
    let vms = env.namespace("vms").await;
    Api::<Namespace>::all(env.client())
        .patch(
            vms.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_ALLOWED_TARGET_NAMESPACES: tenant.name()}}})),
        )
        .await
        .unwrap();
    kubevirt_vm(&env, vms.name()).await;
    guest
        .wait_for_agent(Duration::from_secs(300))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let token = env
        .service_account_token("vrouter-system", "vrouter-operator")
        .await
        .unwrap();
    let mut operator = OperatorProcess::start(
        &env,
        &token,
        &[
            "--lease-namespace=vrouter-system",
            "--identity=audit-0",
            "--apply-timeout=20s",
        ],
    );
    operator.wait_ready(Duration::from_secs(120)).await;
    register_webhook(&env, &operator, &[tenant.name(), vms.name()]).await;
    // The API server loads webhook configurations asynchronously.
    wait_for("the webhook to be called", Duration::from_secs(30), || async {
        let probe: vrouter_api::VRouterTarget = serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"generateName": "probe-"}, "spec": {"provider": {"type": "proxmox"}},
        }))
        .unwrap();
        tenant
            .api::<vrouter_api::VRouterTarget>()
            .create(&PostParams::default(), &probe)
            .await
            .is_err()
            .then_some(())
    })
    .await;

    // Proxmox, a real guest, and a KubeVirt VM in the granted namespace.
    let _pve = proxmox_site(&tenant, guest.clone()).await;
    create::<vrouter_api::VRouterTarget>(
        &tenant,
        json!({"metadata": {"name": "r1"}, "spec": {"provider": {"type": "proxmox",
            "proxmox": {"vmid": 120, "clusterRef": {"name": "pve"}}}}}),
    )
    .await;
    create::<vrouter_api::VRouterTarget>(
        &tenant,
        json!({"metadata": {"name": "kv"}, "spec": {"provider": {"type": "kubevirt",
            "kubevirt": {"name": "kv", "namespace": vms.name()}}}}),
    )
    .await;
    // A target whose ProxmoxCluster is missing: its config is refused
    // again and again, the same event each time.
    create::<vrouter_api::VRouterTarget>(
        &tenant,
        json!({"metadata": {"name": "lost"}, "spec": {"provider": {"type": "proxmox",
            "proxmox": {"vmid": 121, "clusterRef": {"name": "absent"}}}}}),
    )
    .await;
    create::<vrouter_api::VRouterTemplate>(
        &tenant,
        json!({"metadata": {"name": "t"}, "spec": {"commands": "set system host-name {{ hostName }}\n"}}),
    )
    .await;
    create::<vrouter_api::VRouterParams>(
        &tenant,
        json!({"metadata": {"name": "p"}, "spec": {"params": {"hostName": "r1"}}}),
    )
    .await;
    create::<VRouterBinding>(
        &tenant,
        json!({"metadata": {"name": "b"}, "spec": {"templateRefs": [{"name": "t"}],
            "paramsRefs": [{"name": "p"}], "targetRefs": [{"name": "r1"}, {"name": "kv"}]}}),
    )
    .await;
    create::<VRouterConfig>(
        &tenant,
        json!({"metadata": {"name": "orphan"}, "spec": {"targetRef": {"name": "lost"}, "commands": "set system host-name x\n"}}),
    )
    .await;
    let configs = tenant.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "b.r1", Duration::from_secs(180)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    until_audited(&env, "an exec into the KubeVirt VM's pod", |e| {
        is(e, "get", "pods", "exec")
    })
    .await;

    // Drift detection, and the upgrade of an earlier version's ConfigMap.
    let statuses = tenant.api::<VRouterStatus>();
    let status = wait_for("the VRouterStatus", Duration::from_secs(60), || async {
        statuses.get_opt("b.r1").await.ok()?
    })
    .await;
    statuses
        .patch(
            "b.r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "2s"}})),
        )
        .await
        .unwrap();
    wait_for("the drift Secret", Duration::from_secs(120), || async {
        tenant.api::<Secret>().get_opt("vrs-b.r1-config").await.ok()?
    })
    .await;
    let legacy: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "vrs-b.r1-config", "ownerReferences": [{
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterStatus", "name": "b.r1",
            "uid": status.metadata.uid.clone().unwrap(), "controller": true}]},
        "data": {"startup": "old", "running": "old"},
    }))
    .unwrap();
    tenant
        .api::<ConfigMap>()
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();
    statuses
        .patch_status(
            "b.r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"configMapRef": "vrs-b.r1-config"}})),
        )
        .await
        .unwrap();
    wait_for("the old ConfigMap to go", Duration::from_secs(60), || async {
        tenant
            .api::<ConfigMap>()
            .get_opt("vrs-b.r1-config")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // The webhooks' own reads: references that must exist, deletions of
    // what is still referenced.
    let targets = tenant.api::<vrouter_api::VRouterTarget>();
    assert!(targets.delete("r1", &DeleteParams::default()).await.is_err());
    assert!(
        tenant
            .api::<vrouter_api::VRouterParams>()
            .delete("p", &DeleteParams::default())
            .await
            .is_err()
    );

    // /metrics, asked for by a reader: TokenReview and SubjectAccessReview.
    let reader: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "prometheus"}})).unwrap();
    tenant
        .api::<ServiceAccount>()
        .create(&PostParams::default(), &reader)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "audit-prometheus"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "vrouter-operator-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": tenant.name()}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(env.client())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let reader_token = env.service_account_token(tenant.name(), "prometheus").await.unwrap();
    let header = format!("Bearer {reader_token}");
    wait_for("/metrics for the reader", Duration::from_secs(30), || async {
        let answer = https::https(
            operator.metrics,
            env.webhook_tls().ca_pem(),
            "GET",
            "/metrics",
            &[("Authorization", &header)],
            b"",
        )
        .await
        .ok()?;
        (answer.status == 200).then_some(())
    })
    .await;

    // A change and a removal through the binding; then everything goes.
    create_or_patch_template(&tenant).await;
    tenant
        .api::<VRouterBinding>()
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"targetRefs": [{"name": "r1"}]}})),
        )
        .await
        .unwrap();
    wait_for("b.kv to go", Duration::from_secs(60), || async {
        configs.get_opt("b.kv").await.ok()?.is_none().then_some(())
    })
    .await;
    until_audited(&env, "a repeated event", |e| {
        e["verb"] == "patch" && e["objectRef"]["resource"] == "events"
    })
    .await;
    tenant
        .api::<VRouterBinding>()
        .delete("b", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the binding to go", Duration::from_secs(60), || async {
        let bound = tenant.api::<VRouterBinding>().get_opt("b").await.ok()?;
        bound.is_none().then_some(())
    })
    .await;
    // The test control plane runs no garbage collector: the test deletes
    // the binding's config as the collector would, and the orphan.
    configs.delete("b.r1", &DeleteParams::default()).await.unwrap();
    configs.delete("orphan", &DeleteParams::default()).await.unwrap();
    wait_for("the configs to go", Duration::from_secs(60), || async {
        let left = configs.list(&Default::default()).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    tenant
        .api::<vrouter_api::ProxmoxCluster>()
        .delete("pve", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the ProxmoxCluster to go", Duration::from_secs(60), || async {
        tenant
            .api::<vrouter_api::ProxmoxCluster>()
            .get_opt("pve")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // The leader renews its Lease meanwhile.
    until_audited(&env, "a Lease renewal", |e| is(e, "patch", "leases", "")).await;
    operator.terminate();

    // What the secret policy keeps from the operator, though RBAC grants the verbs.
    let as_operator = env
        .service_account_client("vrouter-system", "vrouter-operator")
        .await
        .unwrap();
    // A Secret that would be given a token of the ServiceAccount it names.
    let foreign: Secret = serde_json::from_value(json!({
        "metadata": {"name": "not-ours", "annotations": {"kubernetes.io/service-account.name": "prometheus"}},
        "type": "kubernetes.io/service-account-token",
    }))
    .unwrap();
    let refused = Api::<Secret>::namespaced(as_operator.clone(), tenant.name())
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("may write only Secrets of type"),
        "{refused}"
    );
    let refused = Api::<Secret>::namespaced(as_operator.clone(), tenant.name())
        .patch(
            "pve-token",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"api-token-secret": "overwritten"}})),
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("may write only Secrets of type"),
        "{refused}"
    );
    let plain_cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "someones"}})).unwrap();
    tenant
        .api::<ConfigMap>()
        .create(&PostParams::default(), &plain_cm)
        .await
        .unwrap();
    let refused = Api::<ConfigMap>::namespaced(as_operator, tenant.name())
        .delete("someones", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("may only delete the ConfigMaps"),
        "{refused}"
    );

    // The audit log: what the operator did, against what is granted.
    let events: Vec<Value> = env
        .audit_events()
        .into_iter()
        .filter(|e| e["user"]["username"] == OPERATOR && e["stage"] == "ResponseComplete")
        .collect();
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["responseStatus"]["code"] == 403
                // The policy refusals just provoked on purpose.
                && !e["objectRef"]["name"]
                    .as_str()
                    .is_some_and(|n| n == "not-ours" || n == "pve-token" || n == "someones")
        })
        .collect();
    assert!(refused.is_empty(), "the operator was refused: {refused:#?}");
    let secrets = Api::<Secret>::namespaced(env.client(), tenant.name());
    let mut owners_of_secrets = Vec::new();
    for name in events
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "secrets" && ["create", "patch"].contains(&e["verb"].as_str().unwrap_or(""))
        })
        .filter_map(|e| e["objectRef"]["name"].as_str())
        .filter(|n| *n != "not-ours" && *n != "pve-token")
        .collect::<BTreeSet<_>>()
    {
        if let Some(secret) = secrets.get_opt(name).await.unwrap() {
            owners_of_secrets.extend(
                secret
                    .owner_references()
                    .iter()
                    .map(|o| serde_json::to_value(o).unwrap()),
            );
        }
    }
    let deliberate = |e: &Value| {
        e["objectRef"]["name"]
            .as_str()
            .is_some_and(|n| n == "not-ours" || n == "pve-token" && e["verb"] == "patch" || n == "someones")
    };
    let mut used = BTreeSet::new();
    for event in events.iter().filter(|e| !deliberate(e)) {
        for needed in needed(event, &owners_of_secrets) {
            if !used.contains(&needed) {
                assert!(
                    chart_allows(&env, event, &needed).await,
                    "the chart's role does not allow {needed:?}, which the operator used: {event}"
                );
            }
            used.insert(needed);
        }
    }
    // SelfSubjectAccessReviews are open to every identity (system:basic-user).
    used.retain(|(group, resource, _)| !(group == "authorization.k8s.io" && resource == "selfsubjectaccessreviews"));
    let plain = granted(&plain_objects());
    let chart_granted = granted(&chart);
    assert_eq!(plain, chart_granted, "the chart and the plain manifests grant the same");
    let not_granted: Vec<&Permission> = used.iter().filter(|p| !plain.contains(p)).collect();
    assert!(not_granted.is_empty(), "used but not granted: {not_granted:#?}");
    let unused: Vec<&Permission> = plain.iter().filter(|p| !used.contains(p)).collect();
    assert!(
        unused.is_empty(),
        "granted but never used: {unused:#?}\nused: {used:#?}"
    );
}

async fn create_or_patch_template(tenant: &TestNamespace) {
    tenant
        .api::<vrouter_api::VRouterTemplate>()
        .patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"commands": "set system host-name {{ hostName }}\nset system domain-name example.net\n"}})),
        )
        .await
        .unwrap();
}
