//! The operator completes an apply with nothing but the permissions of
//! `deploy/operator/rbac.yaml`: its controllers run on a ServiceAccount
//! token bound only to that ClusterRole, so a missing permission fails here.

mod common;

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterStatus};
use vrouter_operator::context::Settings;
use vrouter_test_apiserver::TestEnv;

use common::{condition, create, final_phase, site_as, wait_for};

const RBAC: &str = include_str!("../../deploy/operator/rbac.yaml");

async fn install_rbac(client: &kube::Client) {
    let pp = PostParams::default();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "vrouter-system"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&pp, &ns).await.unwrap();
    for document in serde_yaml::Deserializer::from_str(RBAC) {
        let value: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
        match value["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                let o: ServiceAccount = serde_json::from_value(value).unwrap();
                Api::namespaced(client.clone(), "vrouter-system")
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "ClusterRole" => {
                let o: ClusterRole = serde_json::from_value(value).unwrap();
                Api::all(client.clone()).create(&pp, &o).await.unwrap();
            }
            "ClusterRoleBinding" => {
                let o: ClusterRoleBinding = serde_json::from_value(value).unwrap();
                Api::all(client.clone()).create(&pp, &o).await.unwrap();
            }
            "Role" => {
                let o: Role = serde_json::from_value(value).unwrap();
                Api::namespaced(client.clone(), "vrouter-system")
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "RoleBinding" => {
                let o: RoleBinding = serde_json::from_value(value).unwrap();
                Api::namespaced(client.clone(), "vrouter-system")
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            other => panic!("unexpected kind {other} in rbac.yaml"),
        }
    }
}

/// A client that authenticates as the operator's ServiceAccount.
async fn operator_client(env: &TestEnv) -> kube::Client {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(env.client(), "vrouter-system")
        .create_token_request("vrouter-operator", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let mut config = env.config().clone();
    config.auth_info = serde_json::from_value(json!({"token": token})).unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn the_operator_applies_with_only_its_cluster_role() {
    let env = TestEnv::shared().await;
    install_rbac(&env.client()).await;
    let client = operator_client(env).await;
    // The token really is restricted: nodes are not the operator's business.
    let forbidden = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(forbidden.to_string().contains("forbidden"), "{forbidden}");

    let site = site_as("rbac", &["r1"], Settings::default(), client).await;
    let ns = &site.ns;
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "t"}, "spec": {"commands": "set system host-name {{ hostName }}\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "b"}, "spec": {"templateRefs": [{"name": "t"}], "targetRefs": [{"name": "r1"}]}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "b.r1", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    // The VRouterStatus for drift detection was created with the same rights.
    let statuses = ns.api::<VRouterStatus>();
    wait_for("the VRouterStatus", Duration::from_secs(30), || async {
        statuses.get_opt("b.r1").await.ok()?
    })
    .await;
    // The ProxmoxCluster sync too: Secret read, finalizer, both status writes.
    let clusters = ns.api::<vrouter_api::ProxmoxCluster>();
    wait_for("SyncSucceeded", Duration::from_secs(30), || async {
        let status = clusters.get("pve").await.ok()?.status?;
        condition(&status.conditions, "Synced").filter(|(s, _)| s == "True")
    })
    .await;
    let target = ns.api::<vrouter_api::VRouterTarget>().get("r1").await.unwrap();
    assert_eq!(target.status.unwrap().proxmox_node, "pve1");
}
