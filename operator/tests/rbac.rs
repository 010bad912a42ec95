//! The operator completes an apply with nothing but the permissions of
//! `deploy/operator/rbac.yaml`: its controllers run on a ServiceAccount
//! token bound only to that ClusterRole, so a missing permission fails here.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterStatus};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestEnv;

use common::shipped_rbac;
use common::{condition, create, final_phase, site_as, wait_for};

#[tokio::test]
async fn the_operator_applies_with_only_its_cluster_role() {
    let env = TestEnv::shared().await;
    shipped_rbac::install(&env.client(), &shipped_rbac::plain_manifest("rbac.yaml")).await;
    let client = env
        .service_account_client("vrouter-system", "vrouter-operator")
        .await
        .unwrap();
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
