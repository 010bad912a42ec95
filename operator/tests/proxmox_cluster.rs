//! The ProxmoxCluster controller (spec §7.3) against a real kube-apiserver,
//! the in-test Proxmox API and real qemu-ga agents: node tracking, reboot
//! detection from the uptime Proxmox reports, and the Synced condition.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use vrouter_api::{Phase, ProxmoxCluster, VRouterConfig, VRouterTarget};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestNamespace;

use common::{Site, condition, config_phase, create, site, wait_for};

/// The token `common` gives the cluster's credentials Secret.
const TOKEN_ID: &str = "operator@pve!test";
const TOKEN_SECRET: &str = "0b7c6f0e-test-only";

const SYNC_INTERVAL_SECS: u64 = 10;

async fn cluster(ns: &TestNamespace) -> ProxmoxCluster {
    ns.api::<ProxmoxCluster>().get("pve").await.unwrap()
}

async fn set_sync_interval(ns: &TestNamespace, secs: u64) {
    ns.api::<ProxmoxCluster>()
        .patch(
            "pve",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": format!("{secs}s")}})),
        )
        .await
        .unwrap();
}

/// Makes the next sync due now, as if the interval had passed.
async fn force_sync(ns: &TestNamespace) {
    ns.api::<ProxmoxCluster>()
        .patch_status(
            "pve",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"lastSyncTime": null}})),
        )
        .await
        .unwrap();
}

/// Makes a sync due now and waits for it: `lastSyncTime` is cleared, so
/// its coming back (whole seconds, possibly the same as before) is the
/// new sync.
async fn next_sync(ns: &TestNamespace) -> k8s_openapi::jiff::Timestamp {
    force_sync(ns).await;
    wait_for("a new sync", Duration::from_secs(30), || async {
        Some(cluster(ns).await.status?.last_sync_time?.0)
    })
    .await
}

/// The guest uptime reads (`agent/file-read` of `/proc/uptime`) among `seen`.
fn uptime_reads(seen: &[vrouter_test_peers::proxmox::Seen]) -> Vec<vrouter_test_peers::proxmox::Seen> {
    seen.iter()
        .filter(|s| s.path.ends_with("/agent/file-read"))
        .cloned()
        .collect()
}

async fn node_of(ns: &TestNamespace, target: &str) -> Option<String> {
    let target = ns.api::<VRouterTarget>().get(target).await.ok()?;
    Some(target.status.unwrap_or_default().proxmox_node)
}

fn synced(cluster: &ProxmoxCluster) -> Option<(String, String, String)> {
    let c = cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Synced")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn the_node_is_tracked_and_cleared_and_synced_is_reported() {
    let site = site("pxc-node", &["r1", "r2"], Settings::default()).await;
    let ns = &site.ns;
    for name in ["r1", "r2"] {
        wait_for(&format!("{name} on pve1"), Duration::from_secs(30), || async {
            node_of(ns, name).await.filter(|n| n == "pve1")
        })
        .await;
    }
    // The sync writes the targets' nodes before the cluster's own status:
    // wait for that status rather than read it the moment the nodes show.
    let pve = wait_for("the cluster's Synced condition", Duration::from_secs(30), || async {
        let pve = cluster(ns).await;
        synced(&pve).map(|_| pve)
    })
    .await;
    assert!(pve.finalizers().contains(&"vrouter.kojuro.date/finalizer".to_string()));
    assert!(pve.status.as_ref().unwrap().last_sync_time.is_some());
    let (status, reason, _) = synced(&pve).expect("a Synced condition");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "SyncSucceeded"));

    // A migration moves the node; a destroyed VM clears it.
    site.pve.move_vm(101, "pve2");
    next_sync(ns).await;
    assert_eq!(node_of(ns, "r2").await.as_deref(), Some("pve2"));
    site.pve.remove_vm(100);
    next_sync(ns).await;
    assert_eq!(node_of(ns, "r1").await.as_deref(), Some(""));
    assert_eq!(node_of(ns, "r2").await.as_deref(), Some("pve2"));

    // Rejected credentials: FetchFailed (the Go operator's reason), and the
    // message never carries the token.
    site.pve.set_token("other@pve!x", "another-secret");
    force_sync(ns).await;
    let message = sync_failed(ns, "FetchFailed").await;
    assert!(message.contains("/cluster/resources"), "{message}");
    assert_eq!(
        node_of(ns, "r2").await.as_deref(),
        Some("pve2"),
        "a failed sync changes no target"
    );

    // A Secret without the token id: InvalidCredentials, naming the key.
    let secrets = ns.api::<Secret>();
    secrets
        .patch(
            "pve-token",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"api-token-id": null}})),
        )
        .await
        .unwrap();
    poke(ns).await;
    let message = sync_failed(ns, "InvalidCredentials").await;
    assert!(message.contains("api-token-id"), "{message}");
    // No Secret at all: CredentialsNotFound, naming it.
    secrets.delete("pve-token", &DeleteParams::default()).await.unwrap();
    poke(ns).await;
    let message = sync_failed(ns, "CredentialsNotFound").await;
    assert!(message.contains("pve-token"), "{message}");
}

/// The cluster sync lists the VMs over the connection the routers'
/// providers keep open (one client per cluster and credential, kept by the
/// operator's provider factory), and the next sync after the token in the
/// Secret or the cluster's endpoints change uses the new ones.
#[tokio::test]
async fn the_sync_reuses_the_routers_connection_until_the_token_or_endpoints_change() {
    let mut site = site("pxc-pool", &["r1"], Settings::default()).await;
    wait_for("r1 on pve1", Duration::from_secs(30), || async {
        node_of(&site.ns, "r1").await.filter(|n| n == "pve1")
    })
    .await;
    next_sync(&site.ns).await;
    let handshakes = site.pve.tls_handshakes();
    let requests = site.pve.seen().len();
    const SYNCS: usize = 5;
    for _ in 0..SYNCS {
        next_sync(&site.ns).await;
    }
    let listings = site.pve.seen()[requests..]
        .iter()
        .filter(|s| s.path.ends_with("/cluster/resources"))
        .count();
    assert!(listings >= SYNCS, "{listings} listings in {SYNCS} syncs");
    // A client of its own per sync is a handshake each. A kept connection
    // serves the next sync unless it sat idle past the pool's 4 s (a slow
    // machine) or the target's poll ran at the same moment: fewer than one
    // per sync is the sharing, whatever the machine's speed.
    let new = site.pve.tls_handshakes() - handshakes;
    assert!(
        new < SYNCS,
        "{new} TLS handshakes for {SYNCS} syncs: no connection was kept"
    );

    site.pve.set_token(TOKEN_ID, "rotated-secret");
    site.ns
        .api::<Secret>()
        .patch(
            "pve-token",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"api-token-secret": "rotated-secret"}})),
        )
        .await
        .unwrap();
    // `lastSyncTime` comes back only from a sync that listed the VMs: the
    // one the fake accepts now is the rotated token.
    next_sync(&site.ns).await;
    let listing = |seen: Vec<vrouter_test_peers::proxmox::Seen>| {
        seen.into_iter()
            .rev()
            .find(|s| s.path.ends_with("/cluster/resources"))
            .unwrap()
    };
    assert!(listing(site.pve.seen()).authorized);
    // The routers' own calls (the sync's guest uptime reads) go through
    // the provider kept for each target: the next sync's reads carry the
    // rotated token too.
    let after_rotation = site.pve.seen().len();
    next_sync(&site.ns).await;
    let reads = uptime_reads(&site.pve.seen()[after_rotation..]);
    assert!(!reads.is_empty(), "no guest uptime read in a sync");
    assert!(
        reads.iter().all(|r| r.authorized),
        "a router's provider kept the old token: {reads:?}"
    );

    let second = site.pve.add_endpoint().await;
    site.ns
        .api::<ProxmoxCluster>()
        .patch(
            "pve",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"endpoints": [second]}})),
        )
        .await
        .unwrap();
    next_sync(&site.ns).await;
    assert_eq!(
        listing(site.pve.seen()).endpoint,
        1,
        "the sync after the endpoint change asked the new endpoint"
    );
    let after_move = site.pve.seen().len();
    next_sync(&site.ns).await;
    let reads = uptime_reads(&site.pve.seen()[after_move..]);
    assert!(!reads.is_empty(), "no guest uptime read in a sync");
    assert!(
        reads.iter().all(|r| r.endpoint == 1),
        "a router's provider kept the old endpoint: {reads:?}"
    );
    let (status, reason, _) = synced(&cluster(&site.ns).await).unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "SyncSucceeded"));
}

/// Brings the cluster to its controller now: after a failed sync,
/// `lastSyncTime` is already unset (so `force_sync` changes nothing) and the
/// next try is a whole interval away; Secrets are not watched.
async fn poke(ns: &TestNamespace) {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_string();
    ns.api::<ProxmoxCluster>()
        .patch(
            "pve",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": at}}})),
        )
        .await
        .unwrap();
}

/// Waits for `Synced=False` with `reason`; its message, checked free of the
/// token.
async fn sync_failed(ns: &TestNamespace, reason: &str) -> String {
    let (_, _, message) = wait_for(&format!("Synced=False/{reason}"), Duration::from_secs(30), || async {
        synced(&cluster(ns).await).filter(|(s, r, _)| s == "False" && r == reason)
    })
    .await;
    assert!(!message.is_empty());
    assert!(!message.contains(TOKEN_SECRET), "{message}");
    message
}

fn sets(site: &Site) -> usize {
    site.routers["r1"]
        .sandbox
        .calls()
        .iter()
        .filter(|c| c.starts_with("set "))
        .count()
}

#[tokio::test]
async fn a_reboot_forces_exactly_one_re_apply() {
    let site = site("pxc-reboot", &["r1"], Settings::default()).await;
    // The VM restarts: Proxmox reports a growing uptime from 1 s.
    one_re_apply_per_reboot(&site, |uptime| site.pve.set_uptime(100, uptime.as_secs())).await;
}

#[tokio::test]
async fn a_reboot_inside_the_guest_forces_exactly_one_re_apply() {
    // The guest's uptime file is its sandbox's (every test guest shares this
    // machine's /proc); it starts an hour into a boot.
    let site = site("pxc-soft-reboot", &["r1"], Settings::default()).await;
    let uptime_file = site.routers["r1"].sandbox.uptime_path();
    std::fs::write(&uptime_file, "3600.00 7000.00\n").unwrap();
    // The guest reboots itself: the QEMU process, and so the uptime Proxmox
    // reports (an hour), stays; only the guest's own clock starts over.
    one_re_apply_per_reboot(&site, |uptime| {
        std::fs::write(&uptime_file, format!("{:.2} 0.50\n", uptime.as_secs_f64())).unwrap()
    })
    .await;
}

/// Applies a config, reboots r1 (`set_uptime` receives the uptime since the
/// reboot, again and again while the test runs), and checks that exactly
/// one re-apply follows, even after a second sync within the same boot.
async fn one_re_apply_per_reboot(site: &Site, set_uptime: impl Fn(Duration)) {
    let ns = &site.ns;
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "direct"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name r1\n"}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let applied = || async {
        config_phase(&configs, "direct")
            .await
            .filter(|(p, _, _)| matches!(p, Phase::Applied | Phase::Failed))
    };
    let (phase, _, message) = wait_for("the first apply", Duration::from_secs(60), applied).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    set_sync_interval(ns, SYNC_INTERVAL_SECS).await;
    wait_for("r1 on pve1", Duration::from_secs(30), || async {
        node_of(ns, "r1").await.filter(|n| n == "pve1")
    })
    .await;
    let before = sets(site);
    assert_eq!(before, 1);
    let targets = ns.api::<VRouterTarget>();
    assert_eq!(
        targets.get("r1").await.unwrap().status.unwrap().last_reboot_time,
        None,
        "an hour of uptime is no reboot"
    );

    let boot = Instant::now();
    let ticker = async {
        loop {
            set_uptime(Duration::from_secs(1) + boot.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let body = async {
        next_sync(ns).await;
        let rebooted = wait_for("lastRebootTime", Duration::from_secs(30), || async {
            targets.get("r1").await.ok()?.status?.last_reboot_time
        })
        .await;
        wait_for("the re-apply", Duration::from_secs(60), || async {
            let (phase, applied, _) = config_phase(&configs, "direct").await?;
            (sets(site) > before && phase == Phase::Applied).then_some(applied)
        })
        .await;
        assert_eq!(sets(site), before + 1, "one re-apply");

        // Another sync inside the same boot's detection window (uptime at
        // most 1.5 × the interval) derives the same boot time: no new reboot.
        next_sync(ns).await;
        let window = Duration::from_secs(SYNC_INTERVAL_SECS * 3 / 2);
        assert!(
            boot.elapsed() < window,
            "precondition: the second sync ran within the detection window"
        );
        let target = targets.get("r1").await.unwrap();
        assert_eq!(target.status.unwrap().last_reboot_time, Some(rebooted));
        // Give the config controller time to act on any change it saw.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(sets(site), before + 1, "still exactly one re-apply");
        let (phase, applied, _) = config_phase(&configs, "direct").await.unwrap();
        assert_eq!(phase, Phase::Applied);
        assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
    };
    tokio::select! {
        _ = ticker => unreachable!("the ticker never ends"),
        _ = body => {}
    }
    let (status, reason) = condition(&cluster(ns).await.status.unwrap().conditions, "Synced").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "SyncSucceeded"));
}

#[tokio::test]
async fn check_guest_uptime_false_leaves_a_guest_reboot_unnoticed() {
    // The guest's own clock says it just booted; Proxmox says an hour (the
    // QEMU process kept running). Only the guest check could see this
    // reboot, and `checkGuestUptime: false` turns it off.
    let site = site("pxc-no-guest-check", &["r1"], Settings::default()).await;
    let uptime_file = site.routers["r1"].sandbox.uptime_path();
    std::fs::write(&uptime_file, "3600.00 7000.00\n").unwrap();
    let ns = &site.ns;
    ns.api::<ProxmoxCluster>()
        .patch(
            "pve",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"checkGuestUptime": false, "syncInterval": format!("{SYNC_INTERVAL_SECS}s")}}),
            ),
        )
        .await
        .unwrap();
    assert!(!cluster(ns).await.spec.check_guest_uptime, "an explicit false is kept");
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "direct"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name r1\n"}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("the first apply", Duration::from_secs(60), || async {
        config_phase(&configs, "direct")
            .await
            .filter(|(p, _, _)| *p == Phase::Applied)
    })
    .await;
    // Syncs before the patch took effect saw an hour of guest uptime; from
    // now on the guest has just booted.
    next_sync(ns).await;
    std::fs::write(&uptime_file, "2.00 0.50\n").unwrap();
    for _ in 0..2 {
        next_sync(ns).await;
        // The sync also tracks the node, so it did look at r1.
        assert_eq!(node_of(ns, "r1").await.as_deref(), Some("pve1"));
        let target = ns.api::<VRouterTarget>().get("r1").await.unwrap();
        assert_eq!(target.status.unwrap().last_reboot_time, None);
    }
    assert_eq!(sets(&site), 1, "no re-apply");
}

#[tokio::test]
async fn a_guest_answering_an_impossible_uptime_is_named_in_synced_and_the_others_go_on() {
    use vrouter_test_peers::hostile_agent::{FileAnswer, HostileAgent};
    // r1's guest is a real qemu-ga; "evil"'s agent is a stand-in that
    // answers `/proc/uptime` with numbers no real kernel writes, on the
    // real channel (the in-test Proxmox API reaches it as qemu-server does).
    let site = site("pxc-hostile-uptime", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let evil = HostileAgent::start();
    evil.set_file("/proc/uptime", FileAnswer::Content(b"1e20 0\n".to_vec()));
    site.pve.add_vm(200, "pve1", evil.socket_path());
    create::<VRouterTarget>(
        ns,
        json!({"metadata": {"name": "evil"}, "spec": {
            "provider": {"type": "proxmox", "proxmox": {"vmid": 200, "clusterRef": {"name": "pve"}}},
            "params": {"hostName": "evil"},
        }}),
    )
    .await;
    let message = |pve: &ProxmoxCluster| synced(pve).map(|(_, _, m)| m).unwrap_or_default();
    let first = wait_for("Synced to name evil's uptime", Duration::from_secs(60), || async {
        let pve = cluster(ns).await;
        message(&pve).contains("evil").then_some(pve)
    })
    .await;
    let (status, reason, text) = synced(&first).unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "SyncSucceeded"), "{text}");
    assert!(
        text.contains("/proc/uptime reads \"1e20 0\\n\", not a number of seconds"),
        "{text}"
    );
    assert!(evil.reads() >= 1, "the stand-in was asked");

    // The operator still manages the other router: its migration is seen.
    site.pve.move_vm(100, "pve2");
    next_sync(ns).await;
    assert_eq!(node_of(ns, "r1").await.as_deref(), Some("pve2"));

    // A megabyte of answer leaves a message of bounded length.
    evil.set_file("/proc/uptime", FileAnswer::Content(vec![b'9'; 1 << 20]));
    // The second sync started after the answer changed.
    next_sync(ns).await;
    next_sync(ns).await;
    let text = message(&cluster(ns).await);
    assert!(text.contains("(1048576 bytes)"), "{text}");
    assert!(
        text.len() <= vrouter_api::text::MAX_MESSAGE_BYTES,
        "{} bytes",
        text.len()
    );
}
