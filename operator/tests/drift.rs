//! Drift detection end to end: after an apply a VRouterStatus appears, a
//! changed config.boot in the guest (what `commit; save` by a person does)
//! is detected and repaired by exactly one re-apply, and a paused config
//! shows the drift without repairing it until the pause is lifted.
//!
//! The guest behaves like VyOS here: the apply's `save` writes the running
//! config to config.boot, and `cli-shell-api showConfig` prints the running
//! config (see vrouter-test-peers's GuestSandbox).

mod common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterConfig, VRouterStatus};
use vrouter_operator::runtime::context::{Context, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_test_apiserver::TestEnv;

use common::{config_phase, create, site, site_idle, start_controllers, vrouter_status_syncing_every, wait_for};

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
    std::fs::write(site.routers["r1"].sandbox.config_boot_path(), content).unwrap();
}

fn config_boot(site: &common::Site) -> Vec<u8> {
    std::fs::read(site.routers["r1"].sandbox.config_boot_path()).unwrap()
}

/// What a person's `commit` without `save` does: the running config changes,
/// config.boot does not.
fn commit_without_save(site: &common::Site, line: &str) {
    let sandbox = &site.routers["r1"].sandbox;
    let mut running = sandbox.running_config();
    running.extend_from_slice(line.as_bytes());
    std::fs::write(sandbox.dir().join("running.config"), running).unwrap();
}

/// The Secret drift detection keeps the configs in.
async fn stored(site: &common::Site) -> Option<k8s_openapi::api::core::v1::Secret> {
    site.ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get_opt("vrs-c-config")
        .await
        .unwrap()
}

/// One router whose drift detection reads its own sandbox: its guest paths
/// point there, and its config.boot exists (empty) from the start.
async fn drift_site(hint: &str) -> common::Site {
    let site = site(hint, &["r1"], Settings::default()).await;
    write_config_boot(&site, "");
    site
}

/// The config `c` for r1; its first apply creates the VRouterStatus `c`.
async fn create_config(site: &common::Site) {
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name r1\n"}})).await;
}

/// Waits (at most 60 s) for the config `c` to be Applied.
async fn applied(configs: &kube::Api<VRouterConfig>) {
    wait_for("Applied", Duration::from_secs(60), || async {
        config_phase(configs, "c")
            .await
            .filter(|(p, _, _)| *p == Phase::Applied)
    })
    .await;
}

#[tokio::test]
async fn drift_is_detected_repaired_once_and_left_alone_while_paused() {
    let site = drift_site("drift").await;
    write_config_boot(&site, "system { host-name before-the-operator }\n");
    let ns = &site.ns;
    create_config(&site).await;
    let configs = ns.api::<VRouterConfig>();
    applied(&configs).await;

    // The VRouterStatus appears, owned by the config; make it sync fast.
    let vrs = vrouter_status_syncing_every(ns, "c", "1s", Duration::from_secs(30)).await;
    let owner = &vrs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("VRouterConfig", "c"));
    let baseline = wait_for("a baseline", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| !s.baseline_hash.is_empty())
    })
    .await;
    assert!(!baseline.drift_detected);
    assert!(baseline.baseline_hash.starts_with("sha256:"));
    // The apply's save wrote the running config to config.boot; the
    // Secret holds both, and the status their hashes.
    let running = site.routers["r1"].sandbox.running_config();
    assert_eq!(running, b"set system host-name r1\n");
    assert_eq!(config_boot(&site), running, "save writes the running config");
    let cm = stored(&site).await.unwrap();
    assert_eq!(cm.type_.as_deref(), Some("vrouter.kojuro.date/router-config"));
    let data = cm.data.clone().unwrap();
    assert_eq!(data["startup"].0, running);
    assert_eq!(data["running"].0, running);
    assert_eq!(baseline.config_secret_ref, "vrs-c-config");
    let hash = format!("sha256:{}", hex_sha256(&running));
    assert_eq!(baseline.baseline_hash, hash);
    assert_eq!(baseline.running_config_hash, hash);
    let cm_owner = &cm.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (cm_owner.kind.as_str(), cm_owner.uid.as_str()),
        ("VRouterStatus", vrs.metadata.uid.as_deref().unwrap())
    );
    assert_eq!(applies(&site), 1);

    // Someone commits by hand without saving: the running config shows it,
    // but only the startup config counts as drift.
    commit_without_save(&site, "set system host-name unsaved\n");
    let unsaved = wait_for("the running config read", Duration::from_secs(30), || async {
        status(&site)
            .await
            .filter(|s| s.running_config_hash != baseline.running_config_hash)
    })
    .await;
    assert!(!unsaved.drift_detected, "{unsaved:?}");
    assert_eq!(unsaved.startup_config_hash, baseline.baseline_hash);
    wait_for("the running config in the Secret", Duration::from_secs(30), || async {
        let data = stored(&site).await?.data?;
        String::from_utf8_lossy(&data["running"].0)
            .contains("host-name unsaved")
            .then_some(())
    })
    .await;
    assert_eq!(applies(&site), 1, "a commit without save is not drift");

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
    // The baseline is taken again after the re-apply, from what the router
    // holds then, and the loop stops: several more syncs, no more applies.
    let rebased = wait_for("the new baseline", Duration::from_secs(30), || async {
        status(&site)
            .await
            .filter(|s| s.last_baseline_time > baseline.last_baseline_time && !s.drift_detected)
    })
    .await;
    assert_eq!(rebased.startup_config_hash, rebased.baseline_hash);
    // The re-apply loaded the default config (a commands-only config starts
    // from it), so the hand-made commit is gone from the running config and
    // its save replaced the hand-made config.boot.
    let repaired = config_boot(&site);
    assert_eq!(repaired, site.routers["r1"].sandbox.running_config());
    assert_eq!(repaired, b"set system host-name r1\n");
    assert_eq!(rebased.baseline_hash, format!("sha256:{}", hex_sha256(&repaired)));
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
    // Two drifts (the hand-saved config, the one made while paused), each
    // counted once however many syncs saw it; no read failed.
    let metrics = site.ctx.metrics.encode();
    assert!(metrics.contains("vrouter_drifts_detected_total 2\n"), "{metrics}");
    assert!(
        metrics.contains("vrouter_drift_reads_total{result=\"failed\"} 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("vrouter_drift_reads_total{result=\"read\"}"),
        "{metrics}"
    );
}

/// `--drift-repair=false`: drift is shown on the VRouterStatus, saying why
/// it is not repaired, and the config is never applied again.
#[tokio::test]
async fn with_drift_repair_off_drift_is_shown_and_never_repaired() {
    let settings = Settings {
        drift_repair: false,
        ..Settings::default()
    };
    let site = site("drift-off", &["r1"], settings).await;
    write_config_boot(&site, "");
    create_config(&site).await;
    let configs = site.ns.api::<VRouterConfig>();
    applied(&configs).await;
    vrouter_status_syncing_every(&site.ns, "c", "1s", Duration::from_secs(30)).await;
    wait_for("a baseline", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| !s.baseline_hash.is_empty())
    })
    .await;

    write_config_boot(&site, "system { host-name hacked }\n");
    let drifted = wait_for("the drift", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| s.drift_detected)
    })
    .await;
    assert!(drifted.message.contains("--drift-repair=false"), "{}", drifted.message);
    // Several one-second syncs later: still shown, still not repaired.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(applies(&site), 1, "repair is off: nothing applied again");
    assert!(status(&site).await.unwrap().drift_detected);
    let (phase, _, _) = config_phase(&configs, "c").await.unwrap();
    assert_eq!(phase, Phase::Applied);
    assert_eq!(config_boot(&site), b"system { host-name hacked }\n");
}

/// A config Applied without a VRouterStatus (applied by the Go operator
/// before the switch, with its status as the Go operator writes it) gets
/// one without being applied again, and a VRouterStatus a person deletes
/// comes back.
#[tokio::test]
async fn every_applied_config_gets_its_vrouter_status_and_keeps_it() {
    let site = site_idle("status-sweep", &["r1"]).await;
    let config = create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "by-go"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name by-go\n"}})).await;
    let now = Time(Timestamp::now());
    let go_status = json!({"status": {
        "phase": "Applied",
        "observedGeneration": config.metadata.generation,
        "lastAppliedTime": now,
        "lastRebootHandledTime": now,
        "conditions": [{
            "type": "Applied", "status": "True", "reason": "ConfigApplied",
            "message": "Configuration applied successfully.",
            "observedGeneration": config.metadata.generation, "lastTransitionTime": now,
        }],
    }});
    let configs = site.ns.api::<VRouterConfig>();
    configs
        .patch_status("by-go", &PatchParams::default(), &Patch::Merge(&go_status))
        .await
        .unwrap();

    // This operator starts.
    let ctx = Arc::new(Context::new(
        TestEnv::shared().await.client(),
        Metrics::new(),
        Settings {
            status_sweep: Duration::from_secs(1),
            ..site.ctx.settings.clone()
        },
        site.providers.clone(),
    ));
    let _stop = start_controllers(&ctx, site.ns.name());
    let statuses = site.ns.api::<VRouterStatus>();
    let first = wait_for("the VRouterStatus", Duration::from_secs(30), || async {
        statuses.get_opt("by-go").await.ok()?
    })
    .await;
    let owner = &first.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("VRouterConfig", "by-go"));
    assert_eq!(owner.uid, config.metadata.uid.clone().unwrap());

    // Deleted, it comes back (a new object).
    statuses.delete("by-go", &DeleteParams::default()).await.unwrap();
    let again = wait_for("the VRouterStatus again", Duration::from_secs(30), || async {
        statuses
            .get_opt("by-go")
            .await
            .ok()?
            .filter(|s| s.metadata.uid != first.metadata.uid)
    })
    .await;
    assert_eq!(again.spec.config_ref.name, "by-go");
    // Nothing was applied: the Go operator's apply stands.
    assert_eq!(applies(&site), 0);
    let (phase, _, _) = config_phase(&configs, "by-go").await.unwrap();
    assert_eq!(phase, Phase::Applied);
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test]
async fn configs_too_large_for_one_secret_are_reported_not_truncated() {
    let site = drift_site("drift-large").await;
    let ns = &site.ns;
    create_config(&site).await;
    vrouter_status_syncing_every(ns, "c", "1s", Duration::from_secs(60)).await;
    wait_for("the Secret", Duration::from_secs(30), || stored(&site)).await;

    // A running config of 1.2 MiB (committed, not saved: no drift, no re-apply).
    let line = "set firewall group address-group big address 192.0.2.1\n";
    let big = line.repeat(1_200_000 / line.len());
    commit_without_save(&site, &big);
    let running = site.routers["r1"].sandbox.running_config();
    assert!(running.len() > 1024 * 1024);
    let reported = wait_for("the size report", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| s.message.contains("more than"))
    })
    .await;
    assert!(
        reported.message.contains(&format!("running {}", running.len())),
        "{}",
        reported.message
    );
    assert_eq!(reported.config_secret_ref, "", "no Secret is referenced");
    assert_eq!(
        reported.running_config_hash,
        format!("sha256:{}", hex_sha256(&running)),
        "the hash still covers the whole config"
    );
    assert!(!reported.drift_detected);
    // The older, smaller copy is gone rather than left to mislead.
    let emptied = stored(&site).await.unwrap();
    assert_eq!(emptied.data.unwrap_or_default().len(), 0, "the Secret was emptied");
}

/// Drift reads let a burst of applies go first: while this process keeps
/// starting applies (recorded on the operator's own context, as its config
/// controller records each one), a new VRouterStatus reads nothing from its
/// router; once they stop, it takes its baseline.
#[tokio::test]
async fn drift_reads_wait_while_applies_are_being_started() {
    use vrouter_operator::runtime::apply_dispatches::{MAX_WAIT, QUIET};
    let site = drift_site("drift-yield").await;
    let began = std::time::Instant::now();
    let burst = tokio::spawn({
        let ctx = site.ctx.clone();
        async move {
            loop {
                ctx.apply_dispatches.record();
                tokio::time::sleep(QUIET / 4).await;
            }
        }
    });
    create_config(&site).await;
    let configs = site.ns.api::<VRouterConfig>();
    applied(&configs).await;
    wait_for("the VRouterStatus", Duration::from_secs(30), || async {
        site.ns.api::<VRouterStatus>().get_opt("c").await.ok()?
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sandbox = &site.routers["r1"].sandbox;
    assert_eq!(sandbox.running_config_reads(), 0, "read during the burst");
    assert!(status(&site).await.is_none_or(|s| s.baseline_hash.is_empty()));

    burst.abort();
    // The burst's bound must still be ahead, so that the baseline below
    // can only have followed the burst's end.
    let left = MAX_WAIT.saturating_sub(began.elapsed());
    assert!(
        left > Duration::from_secs(3),
        "the burst ran into its bound: {left:?} left"
    );
    wait_for("a baseline", Duration::from_secs(30), || async {
        status(&site).await.filter(|s| !s.baseline_hash.is_empty())
    })
    .await;
    assert!(sandbox.running_config_reads() >= 1);
    assert!(began.elapsed() < MAX_WAIT, "taken at the bound, not at the burst's end");
    assert_eq!(applies(&site), 1);
}

/// The config controller records each apply it starts: what drift reads
/// wait on.
#[tokio::test]
async fn the_config_controller_records_the_applies_it_starts() {
    let site = drift_site("drift-record").await;
    assert_eq!(site.ctx.apply_dispatches.last(), None);
    let before = tokio::time::Instant::now();
    create_config(&site).await;
    applied(&site.ns.api::<VRouterConfig>()).await;
    let last = site.ctx.apply_dispatches.last().expect("the apply was recorded");
    assert!(last >= before);
}

#[tokio::test]
async fn the_router_is_read_once_per_sync_interval_not_on_every_wake_up() {
    let site = drift_site("drift-quiet").await;
    let ns = &site.ns;
    create_config(&site).await;
    // The default interval (5m): after the first sync, nothing is due.
    let first = wait_for("the first sync", Duration::from_secs(60), || async {
        status(&site).await.filter(|s| !s.baseline_hash.is_empty())
    })
    .await;
    assert!(first.last_fetch_time.is_some());
    let sandbox = &site.routers["r1"].sandbox;
    // Let the echoes of the first sync's own writes (status, Secret) arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reads = sandbox.running_config_reads();
    assert!(reads >= 1, "the first sync read the running config");
    // The config changes in ways that are not a new apply (a label, as
    // kubectl label does; a status write, as every rollout step does): each
    // wakes this VRouterStatus, none makes a read due.
    let configs = ns.api::<VRouterConfig>();
    for i in 0..3 {
        configs
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touched": i.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sandbox.running_config_reads(), reads, "read again before the interval");
    assert_eq!(status(&site).await.unwrap().last_fetch_time, first.last_fetch_time);
    assert_eq!(applies(&site), 1);
}

#[tokio::test]
async fn a_status_object_that_could_not_be_created_is_created_once_it_can_be() {
    use k8s_openapi::api::core::v1::{Event, ResourceQuota};
    let site = drift_site("drift-quota").await;
    // For now no VRouterStatus may be created in this namespace.
    let quotas = site.ns.api::<ResourceQuota>();
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-statuses"},
        "spec": {"hard": {"count/vrouterstatuses.vrouter.kojuro.date": "0"}},
    }))
    .unwrap();
    quotas.create(&Default::default(), &quota).await.unwrap();
    // The test control plane runs no quota controller: the usage it would
    // record is written here, so that admission enforces the quota.
    let usage = json!({"status": {
        "hard": {"count/vrouterstatuses.vrouter.kojuro.date": "0"},
        "used": {"count/vrouterstatuses.vrouter.kojuro.date": "0"},
    }});
    quotas
        .patch_status("no-statuses", &PatchParams::default(), &Patch::Merge(usage))
        .await
        .unwrap();
    create_config(&site).await;
    let configs = site.ns.api::<VRouterConfig>();
    let (phase, _, message) = common::final_phase(&configs, "c", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    let events = site.ns.api::<Event>();
    let note = wait_for("a StatusNotCreated event", Duration::from_secs(30), || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("StatusNotCreated") && e.involved_object.name.as_deref() == Some("c"))
            .and_then(|e| e.message)
    })
    .await;
    assert!(
        note.starts_with(r#"could not create VRouterStatus "c" for drift detection: "#),
        "{note}"
    );
    assert!(site.ns.api::<VRouterStatus>().get_opt("c").await.unwrap().is_none());

    quotas.delete("no-statuses", &Default::default()).await.unwrap();
    wait_for(
        "the VRouterStatus after the quota is gone",
        Duration::from_secs(90),
        || async { site.ns.api::<VRouterStatus>().get_opt("c").await.ok()? },
    )
    .await;
}

/// A drift read whose readiness check is due asks the guest once for both
/// the check and the running config: through the Proxmox API, one
/// `agent/exec` (and its polls) per read, where the check and the read
/// alone would be two.
#[tokio::test]
async fn a_due_check_and_the_running_config_are_one_guest_command() {
    use vrouter_operator::runtime::recently_ready::FRESH_FOR;
    let site = drift_site("drift-one-exec").await;
    create_config(&site).await;
    applied(&site.ns.api::<VRouterConfig>()).await;
    // Longer than a passed check stands: every read's check is due.
    let interval = FRESH_FOR + Duration::from_secs(2);
    vrouter_status_syncing_every(
        &site.ns,
        "c",
        &format!("{}s", interval.as_secs()),
        Duration::from_secs(60),
    )
    .await;
    let sandbox = &site.routers["r1"].sandbox;
    let execs = || {
        site.pve
            .seen()
            .iter()
            .filter(|s| s.method == "POST" && s.path.ends_with("/agent/exec"))
            .count()
    };
    // Counted between reads (each takes well under a second), never
    // during one.
    let after_reads = async |reads: usize| {
        wait_for("the drift reads", Duration::from_secs(60), || async {
            (sandbox.running_config_reads() >= reads).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        (execs(), sandbox.systemctl_calls().len(), sandbox.running_config_reads())
    };
    let before = after_reads(sandbox.running_config_reads() + 1).await;
    let after = after_reads(before.2 + 2).await;
    let reads = after.2 - before.2;
    assert_eq!(after.1 - before.1, reads, "each read checked the router");
    assert_eq!(after.0 - before.0, reads, "one guest command per read");
    assert_eq!(applies(&site), 1);
}
