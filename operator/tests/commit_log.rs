//! The router's own commit log names who changed it: every apply's commit
//! carries a comment with the binding, the config's generation and the
//! apply id (VyOS `commit comment`), against a real kube-apiserver and the
//! sandbox guests (real qemu-ga, bash with VyOS's commit log modelled).

mod common;

use std::time::Duration;

use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_peers::guest::CommitLogEntry;

use common::{create, site, wait_for};

/// Waits until `name` is Applied for its current generation; its
/// generation and apply id.
async fn applied(configs: &kube::Api<VRouterConfig>, name: &str) -> (i64, String) {
    wait_for(&format!("{name} applied"), Duration::from_secs(60), || async {
        let config = configs.get_opt(name).await.ok()??;
        let generation = config.metadata.generation?;
        let status = config.status?;
        assert_ne!(status.phase, Phase::Failed, "{name}: {}", status.message);
        (status.phase == Phase::Applied && status.observed_generation == generation)
            .then_some((generation, status.apply_id))
    })
    .await
}

fn comments(log: &[CommitLogEntry]) -> Vec<&str> {
    log.iter().map(|e| e.comment.as_str()).collect()
}

#[tokio::test]
async fn each_apply_is_in_the_routers_commit_log_with_binding_generation_and_apply_id() {
    let site = site("commit-log", &["r1", "r2"], Settings::default()).await;
    let ns = &site.ns;
    let namespace = ns.name();
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "base"}, "spec": {"commands": "set system host-name {{ host }}\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {
            "templateRefs": [{"name": "base"}], "params": {"host": "first"}, "targetRefs": [{"name": "r1"}],
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let (first_generation, first_apply) = applied(&configs, "edge.r1").await;

    let bindings = ns.api::<VRouterBinding>();
    let patch = json!({"spec": {"params": {"host": "second"}}});
    bindings
        .patch(
            "edge",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let (second_generation, second_apply) =
        wait_for("edge.r1's next generation applied", Duration::from_secs(60), || async {
            Some(applied(&configs, "edge.r1").await).filter(|(g, _)| *g > first_generation)
        })
        .await;

    let log = site.routers["r1"].sandbox.commit_log();
    assert_eq!(
        comments(&log),
        vec![
            format!(
                "vrouter-operator binding={namespace}/edge config={namespace}/edge.r1 generation={second_generation} apply={second_apply}"
            ),
            format!(
                "vrouter-operator binding={namespace}/edge config={namespace}/edge.r1 generation={first_generation} apply={first_apply}"
            ),
        ],
        "newest first, one entry per apply"
    );
    assert!(log.iter().all(|e| e.via == "cli" && e.timestamp > 0), "{log:?}");

    // A config written directly names itself and no binding.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "direct"}, "spec": {"targetRef": {"name": "r2"}, "commands": "set system host-name direct\n"}}),
    )
    .await;
    let (generation, apply) = applied(&configs, "direct").await;
    assert_eq!(
        comments(&site.routers["r2"].sandbox.commit_log()),
        vec![format!(
            "vrouter-operator config={namespace}/direct generation={generation} apply={apply}"
        )]
    );
}
