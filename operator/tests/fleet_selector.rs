//! A binding that selects its targets by label (`spec.targetSelector`),
//! against a real kube-apiserver with real qemu-ga guests behind the
//! in-test Proxmox API: a target labelled in joins, one labelled out leaves.

mod common;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterTarget, VRouterTemplate};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestNamespace;

use common::{create, site, wait_for};

async fn merge<K: common::Namespaced>(ns: &TestNamespace, name: &str, patch: Value) {
    ns.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Waits until config `name` exists and is Applied at its generation.
async fn applied(ns: &TestNamespace, name: &str) -> VRouterConfig {
    let configs = ns.api::<VRouterConfig>();
    wait_for(&format!("{name} Applied"), Duration::from_secs(90), || async {
        let c = configs.get_opt(name).await.ok()??;
        let status = c.status.as_ref()?;
        let current = status.observed_generation == c.metadata.generation.unwrap_or(0);
        (current && status.phase == Phase::Applied).then_some(c)
    })
    .await
}

async fn configs_of(ns: &TestNamespace) -> Vec<String> {
    let mut names: Vec<String> = ns
        .api::<VRouterConfig>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

/// The selector is `role: edge`. r1 and r2 carry it from the start, r3
/// does not: two configs. Labelling r3 makes it join (its config appears and
/// applies on its guest); relabelling r1 makes it leave (its config is
/// deleted, the target and its router stay, and nothing more runs on it);
/// r2's config is untouched throughout.
#[tokio::test]
async fn a_target_labelled_in_joins_and_one_labelled_out_leaves() {
    let site = site("fleet-selector", &["r1", "r2", "r3"], Settings::default()).await;
    let ns = &site.ns;
    for name in ["r1", "r2"] {
        merge::<VRouterTarget>(ns, name, json!({"metadata": {"labels": {"role": "edge"}}})).await;
    }
    create::<VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "t"}, "spec": {"commands": "set system host-name edge\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "t"}],
               "targetSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["edge"]}]}}}),
    )
    .await;
    let r2_before = applied(ns, "edge.r2").await;
    applied(ns, "edge.r1").await;
    assert_eq!(configs_of(ns).await, ["edge.r1", "edge.r2"], "r3 is not selected");

    merge::<VRouterTarget>(ns, "r3", json!({"metadata": {"labels": {"role": "edge"}}})).await;
    let joined = applied(ns, "edge.r3").await;
    assert_eq!(joined.spec.target_ref.name, "r3");
    assert_eq!(joined.spec.commands, "set system host-name edge\n");

    let r1_runs = site.routers["r1"].sandbox.calls().len();
    merge::<VRouterTarget>(ns, "r1", json!({"metadata": {"labels": {"role": "core"}}})).await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("edge.r1 deleted", Duration::from_secs(30), || async {
        configs.get_opt("edge.r1").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(configs_of(ns).await, ["edge.r2", "edge.r3"]);
    assert!(ns.api::<VRouterTarget>().get_opt("r1").await.unwrap().is_some());
    assert_eq!(
        site.routers["r1"].sandbox.calls().len(),
        r1_runs,
        "a router that leaves keeps its config: nothing runs on it"
    );
    let r2_after = configs.get("edge.r2").await.unwrap();
    assert_eq!(r2_after.metadata.generation, r2_before.metadata.generation);
    assert_eq!(r2_after.metadata.uid, r2_before.metadata.uid);
}

/// Names and a selector together: the binding configures both sets, a
/// target in both once; a named target that loses the label stays.
#[tokio::test]
async fn named_and_selected_targets_are_configured_together() {
    let site = site("fleet-selector-union", &["r1", "r2", "r3"], Settings::default()).await;
    let ns = &site.ns;
    for name in ["r1", "r2"] {
        merge::<VRouterTarget>(ns, name, json!({"metadata": {"labels": {"role": "edge"}}})).await;
    }
    create::<VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "t"}, "spec": {"commands": "set system host-name x\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "b"}, "spec": {"templateRefs": [{"name": "t"}],
               "targetRefs": [{"name": "r1"}, {"name": "r3"}],
               "targetSelector": {"matchLabels": {"role": "edge"}}}}),
    )
    .await;
    for config in ["b.r1", "b.r2", "b.r3"] {
        applied(ns, config).await;
    }
    merge::<VRouterTarget>(ns, "r1", json!({"metadata": {"labels": {"role": null}}})).await;
    merge::<VRouterTarget>(ns, "r2", json!({"metadata": {"labels": {"role": null}}})).await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("b.r2 deleted", Duration::from_secs(30), || async {
        configs.get_opt("b.r2").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(configs_of(ns).await, ["b.r1", "b.r3"], "named targets stay");
}
