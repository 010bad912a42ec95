//! A Proxmox target applied from the operator's pods: the in-test Proxmox
//! VE API on the test's loopback, relaying to the qemu-ga of a real QEMU
//! guest (a router by its files), reached from the pods at an address
//! inside the node's namespace. The leader's container is SIGKILLed from
//! the host while the guest runs the apply script; the kubelet restarts
//! it, the apply ends Applied, and the guest's journal shows one run.

use std::sync::Arc;

use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::vm::router::{RouterView, router_overlay};
use vrouter_test_peers::vm::{ChardevTransport, QemuGuest};

use super::rollout::{api_of, condition_is_true, create};
use super::*;

pub const TOKEN_ID: &str = "operator@pve!node-test";
/// A test-only credential of the in-test Proxmox API.
pub const TOKEN_SECRET: &str = "4d1c2f0e-node-test-only";
const VMID: i64 = 100;
const TARGET: &str = "pve-router";
const CONFIG: &str = "pve-router-config";
/// How long the guest's `commit` sleeps: the leader is found and killed
/// within it (a Lease renewal, about 2 s, after the apply is seen running),
/// which is checked before the kill.
const COMMIT_DELAY_S: u32 = 20;
/// A guest boots in 4–10 s under TCG; the margin is for a busy machine.
pub const BOOT_BOUND: Duration = Duration::from_secs(180);

/// Starts the guest early: it boots while the node starts and the chart
/// installs.
pub fn boot_guest() -> Arc<QemuGuest> {
    let guest = QemuGuest::boot("node-helm-pve", router_overlay("vyos"));
    Arc::new(guest.unwrap_or_else(|e| panic!("booting the router guest: {e}")))
}

/// The Proxmox API and the guest it serves as VM [`VMID`], and the
/// test's own way into the guest.
pub struct ProxmoxSite {
    pub view: RouterView<ChardevTransport>,
    /// Where the pods reach the Proxmox API (`host:port`).
    pub address: String,
    _pve: FakeProxmox,
}

/// The in-test Proxmox API serving `guest`, exposed to the pods; a
/// ProxmoxCluster naming it (with its token in a Secret) and a target on
/// its VM, once the cluster's first sync is in (a guest booted moments ago
/// would otherwise count as rebooted at that sync and be applied again).
pub async fn proxmox_site(node: &mut TestNode, ns: &TestNamespace, guest: Arc<QemuGuest>) -> ProxmoxSite {
    guest
        .wait_for_agent(BOOT_BOUND)
        .await
        .unwrap_or_else(|e| panic!("the router guest's agent: {e}"));
    let view = RouterView::new(ChardevTransport::new(&guest, Duration::from_secs(60)));
    view.reset().await.expect("the guest's router state reset");
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    pve.add_guest_vm(VMID, "pve1", guest);
    let port: u16 = pve
        .url(0)
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("the Proxmox API's URL has a port");
    let address = node.expose(port).expect("the Proxmox API exposed to the pods");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pve-token"},
        "stringData": {"api-token-id": TOKEN_ID, "api-token-secret": TOKEN_SECRET},
    }))
    .expect("a Secret");
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("the token's Secret");
    create(
        &api_of(ns, "ProxmoxCluster", "proxmoxclusters"),
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "ProxmoxCluster",
               "metadata": {"name": "pve"},
               "spec": {"endpoints": [format!("https://{address}")], "credentialsRef": {"name": "pve-token"},
                        "insecureSkipTLSVerify": true, "syncInterval": "60s"}}),
    )
    .await;
    create(
        &api_of(ns, "VRouterTarget", "vroutertargets"),
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
               "metadata": {"name": TARGET},
               "spec": {"provider": {"type": "proxmox", "proxmox": {"vmid": VMID, "clusterRef": {"name": "pve"}}}}}),
    )
    .await;
    let clusters = api_of(ns, "ProxmoxCluster", "proxmoxclusters");
    node.until("the ProxmoxCluster's first sync from the pods", || async {
        let cluster = clusters.get("pve").await.ok()?;
        cluster.data["status"]["lastSyncTime"].as_str().map(drop)
    })
    .await;
    ProxmoxSite {
        view,
        address,
        _pve: pve,
    }
}

/// Whether the guest's journal shows `apply_id` ended.
fn ended(journal: &[String], apply_id: &str) -> bool {
    journal.iter().any(|line| {
        line.strip_prefix(apply_id)
            .is_some_and(|rest| rest.starts_with(' ') && rest != " started")
    })
}

/// A config for the Proxmox target; while the guest runs its apply (a
/// slow `commit`), the leader's container is SIGKILLed from the host. The
/// kubelet restarts it, a replica leads, the config ends Applied, and the
/// guest ran that apply once, with one `commit`.
pub async fn a_leader_killed_mid_apply_applies_once(
    node: &TestNode,
    ns: &TestNamespace,
    site: &ProxmoxSite,
) -> Vec<Pod> {
    site.view
        .set_commit_delay(COMMIT_DELAY_S)
        .await
        .expect("a slow commit in the guest");
    let configs = api_of(ns, "VRouterConfig", "vrouterconfigs");
    create(
        &configs,
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
               "metadata": {"name": CONFIG},
               "spec": {"targetRef": {"name": TARGET}, "commands": "set system host-name pve-router\n"}}),
    )
    .await;
    let apply_id = node
        .until("the apply dispatched to the guest", || async {
            let status = configs.get(CONFIG).await.ok()?.data["status"].clone();
            let running = status["phase"] == "Applying" && status["execPID"].as_i64().unwrap_or(0) > 0;
            running.then(|| status["applyId"].as_str().map(str::to_owned)).flatten()
        })
        .await;
    let pods = operator_pods_ready(node, ns).await;
    let names: Vec<String> = pods.iter().map(pod_name).collect();
    let leader = renewing_holder(node, ns, &names).await;
    let journal = site.view.apply_journal().await.expect("the guest's journal");
    assert!(
        journal.contains(&format!("{apply_id} started")) && !ended(&journal, &apply_id),
        "the apply is not running in the guest at the kill ({COMMIT_DELAY_S} s commit): {journal:?}"
    );
    kill_and_see_restarted(node, ns, &leader).await;
    node.until("the config Applied after the kill", || async {
        let config = configs.get(CONFIG).await.ok()?;
        condition_is_true(&config, "Applied").then_some(())
    })
    .await;
    site.view.set_commit_delay(0).await.expect("commit delay off");
    let runs = site
        .view
        .apply_runs()
        .await
        .expect("the guest's journal")
        .expect("no apply still runs in the guest");
    assert_eq!(runs, vec![apply_id], "one run of the apply");
    let calls = site.view.calls().await.expect("the guest's config calls");
    let commits = calls
        .iter()
        .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
        .count();
    assert_eq!(commits, 1, "one commit: {calls:?}");
    assert!(
        calls.contains(&"set system host-name pve-router".to_owned()),
        "{calls:?}"
    );
    renewing_holder(node, ns, &names).await;
    // The guest is the examples' VM 100 next: a second config on it would
    // see the examples' apply as drift at its next sync and apply again;
    // and its record starts afresh for them.
    configs
        .delete(CONFIG, &DeleteParams::default())
        .await
        .expect("the config deleted");
    node.until("the config gone", || async {
        configs.get_opt(CONFIG).await.ok()?.is_none().then_some(())
    })
    .await;
    site.view.reset().await.expect("the guest's router state reset");
    operator_pods_ready(node, ns).await
}
