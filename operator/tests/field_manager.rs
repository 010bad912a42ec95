//! `managedFields` name the operator: the operator binary, on a real
//! kube-apiserver, writes generated configs, their status and finalizers,
//! a binding's status and Events, and every one of those writes is recorded
//! under the field manager `vrouter-operator` (none as `unknown`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use vrouter_api::{VRouterBinding, VRouterConfig, VRouterTarget, VRouterTemplate};
use vrouter_test_apiserver::TestEnv;

use common::operator_process::OperatorProcess;
use common::{shipped_rbac, wait_for};

/// The field manager of this test's own writes: its client's User-Agent,
/// which the API server names a write after when it sets no field manager.
const TEST_MANAGER: &str = "field-manager-test";

async fn test_client(env: &TestEnv) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(env.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("field-manager-test/1"),
    ));
    kube::Client::try_from(config).unwrap()
}

fn managers(meta: &ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|m| m.manager.clone().unwrap_or_default())
        .collect()
}

async fn create<K>(api: &Api<K>, body: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(body).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

#[tokio::test]
async fn every_write_of_the_operator_names_it_in_managed_fields() {
    let env = TestEnv::shared().await;
    shipped_rbac::install(&env.client(), &shipped_rbac::plain_manifest("rbac.yaml")).await;
    let token = env
        .service_account_token("vrouter-system", "vrouter-operator")
        .await
        .unwrap();
    let ns = env.namespace("field-manager").await;
    let client = test_client(env).await;
    let mut operator = OperatorProcess::start(
        env,
        &token,
        &["--leader-elect=false", &format!("--watch-namespace={}", ns.name())],
    );
    operator.wait_ready(Duration::from_secs(120)).await;

    // A binding over a target whose ProxmoxCluster is missing: the operator
    // creates the config, writes its status and the binding's, and records
    // Events, without any router.
    let (targets, templates, bindings, configs): (
        Api<VRouterTarget>,
        Api<VRouterTemplate>,
        Api<VRouterBinding>,
        Api<VRouterConfig>,
    ) = (
        Api::namespaced(client.clone(), ns.name()),
        Api::namespaced(client.clone(), ns.name()),
        Api::namespaced(client.clone(), ns.name()),
        Api::namespaced(client.clone(), ns.name()),
    );
    create(
        &targets,
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
        "metadata": {"name": "lost"}, "spec": {"provider": {"type": "proxmox",
        "proxmox": {"vmid": 121, "clusterRef": {"name": "absent"}}}}}),
    )
    .await;
    create(
        &templates,
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTemplate",
        "metadata": {"name": "t"}, "spec": {"commands": "set system host-name r\n"}}),
    )
    .await;
    create(
        &bindings,
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterBinding",
        "metadata": {"name": "b"}, "spec": {"templateRefs": [{"name": "t"}], "targetRefs": [{"name": "lost"}]}}),
    )
    .await;

    let events: Api<Event> = Api::namespaced(client.clone(), ns.name());
    let written = wait_for("the operator's writes", Duration::from_secs(90), || async {
        let config = configs.get_opt("b.lost").await.ok()??;
        config.status.as_ref().filter(|s| !s.conditions.is_empty())?;
        let binding = bindings.get("b").await.ok()?;
        binding.status.as_ref().filter(|s| !s.conditions.is_empty())?;
        let events = events.list(&ListParams::default()).await.ok()?.items;
        (!events.is_empty()).then_some(())?;
        let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        by_kind.insert("VRouterConfig", managers(&config.metadata));
        by_kind.insert("VRouterBinding", managers(&binding.metadata));
        by_kind.insert("Event", events.iter().flat_map(|e| managers(&e.metadata)).collect());
        let target = targets.get("lost").await.ok()?;
        by_kind.insert("VRouterTarget", managers(&target.metadata));
        Some(by_kind)
    })
    .await;

    for (kind, managers) in &written {
        let unexpected: BTreeSet<&String> = managers
            .iter()
            .filter(|m| *m != TEST_MANAGER && *m != "vrouter-operator")
            .collect();
        assert!(
            unexpected.is_empty(),
            "{kind}: written by {unexpected:?}; all: {managers:?}"
        );
    }
    for kind in ["VRouterConfig", "VRouterBinding", "Event"] {
        assert!(
            written[kind].iter().any(|m| m == "vrouter-operator"),
            "{kind}: the operator's writes are not named vrouter-operator: {:?}",
            written[kind]
        );
    }
}
