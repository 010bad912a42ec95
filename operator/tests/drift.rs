//! Drift detection end to end: after an apply a VRouterStatus appears, a
//! changed config.boot in the guest (what `commit; save` by a person does)
//! is detected and repaired by exactly one re-apply, and a paused config
//! shows the drift without repairing it until the pause is lifted.

mod common;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterConfig, VRouterStatus};
use vrouter_operator::context::Settings;

use common::{config_phase, create, site, wait_for};

fn applies(site: &common::Site) -> usize {
    site.routers["r1"]
        .sandbox
        .calls()
        .iter()
        .filter(|c| c.starts_with("set system host-name"))
        .count()
}

async fn status(site: &common::Site) -> Option<vrouter_api::VRouterStatusStatus> {
    site.ns.api::<VRouterStatus>().get_opt("c").await.ok()??.status
}

fn write_config_boot(site: &common::Site, content: &str) {
    std::fs::write(&site.ctx.settings.config_boot_path, content).unwrap();
}

#[tokio::test]
async fn drift_is_detected_repaired_once_and_left_alone_while_paused() {
    let settings = Settings {
        config_boot_path: String::new(), // the router's sandbox, see common
        ..Settings::default()
    };
    let site = site("drift", &["r1"], settings).await;
    write_config_boot(&site, "system { host-name r1 }\n");
    let ns = &site.ns;
    create::<VRouterConfig>(ns, json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name r1\n"}})).await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("Applied", Duration::from_secs(60), || async {
        config_phase(&configs, "c")
            .await
            .filter(|(p, _, _)| *p == Phase::Applied)
    })
    .await;

    // The VRouterStatus appears, owned by the config; make it sync fast.
    let statuses = ns.api::<VRouterStatus>();
    let vrs = wait_for("the VRouterStatus", Duration::from_secs(30), || async {
        statuses.get_opt("c").await.ok()?
    })
    .await;
    let owner = &vrs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("VRouterConfig", "c"));
    statuses
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "1s"}})),
        )
        .await
        .unwrap();
    let baseline = wait_for("a baseline", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| !s.baseline_hash.is_empty())
    })
    .await;
    assert!(!baseline.drift_detected);
    assert!(baseline.baseline_hash.starts_with("sha256:"));
    // The ConfigMap holds the startup config and is owned by the status.
    let cm = ns
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get("vrs-c-config")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["startup"], "system { host-name r1 }\n");
    let cm_owner = &cm.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (cm_owner.kind.as_str(), cm_owner.uid.as_str()),
        ("VRouterStatus", vrs.metadata.uid.as_deref().unwrap())
    );
    assert_eq!(applies(&site), 1);

    // Someone changes the router by hand and saves.
    write_config_boot(&site, "system { host-name hacked }\n");
    wait_for("the re-apply", Duration::from_secs(60), || async {
        (applies(&site) == 2).then_some(())
    })
    .await;
    wait_for("Applied again", Duration::from_secs(60), || async {
        config_phase(&configs, "c")
            .await
            .filter(|(p, _, _)| *p == Phase::Applied)
    })
    .await;
    // The baseline moves to what the router holds after the re-apply and
    // the loop stops: several more syncs, no more applies.
    let rebased = wait_for("the new baseline", Duration::from_secs(30), || async {
        status(&site)
            .await
            .filter(|s| s.baseline_hash != baseline.baseline_hash && !s.drift_detected)
    })
    .await;
    assert_eq!(rebased.startup_config_hash, rebased.baseline_hash);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(applies(&site), 2, "exactly one re-apply per drift");

    // Paused: the drift is visible, nothing is applied.
    configs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"vrouter.kojuro.date/paused": "true"}}})),
        )
        .await
        .unwrap();
    write_config_boot(&site, "system { host-name hacked-again }\n");
    wait_for("drift while paused", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| s.drift_detected)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(applies(&site), 2, "paused: nothing applied");
    // Lifting the pause repairs it within a sync interval or so.
    configs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"vrouter.kojuro.date/paused": null}}})),
        )
        .await
        .unwrap();
    wait_for("the repair after unpausing", Duration::from_secs(30), || async {
        (applies(&site) == 3).then_some(())
    })
    .await;
}
