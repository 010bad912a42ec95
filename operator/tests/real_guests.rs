//! The operator end to end against real guests: QEMU VMs whose qemu-ga
//! sits on virtio-serial, reached as in production.
//!
//! - Proxmox VE: the in-test Proxmox API relays each agent call to the
//!   guest's QEMU chardev socket the way qemu-server does, and reports the
//!   uptime of the QEMU process;
//! - KubeVirt: pods/exec runs the real `virsh` the provider sends, in a real
//!   libvirtd's container, and libvirt's own agent channel reaches the guest.
//!
//! The operator, the released binary as its own process, runs with its
//! production guest paths and settings
//! (`/bin/vbash`, `/run/vrouter-operator`, `/config/config.boot`,
//! `cli-shell-api`, `/proc/uptime`); the guest's `/bin/vbash` is bash with
//! the stub vyatta functions, whose log shows what `load` received and every
//! call. One guest per provider serves this file, one test at a time.

mod common;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use sha2::{Digest, Sha256};
use vrouter_api::vm_access::ANNOTATION_ALLOWED_TARGET_NAMESPACES;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterStatus, VRouterTarget};
use vrouter_qga::Transport;
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::toxiproxy::Toxiproxy;
use vrouter_test_peers::vm::router::{RouterView, router_overlay};
use vrouter_test_peers::vm::{ChardevTransport, Domain, Libvirt, QemuGuest, SharedGuest, VirshTransport};

use std::os::unix::process::ExitStatusExt;

use common::replica_process::ReplicaProcess;
use common::{
    condition, config_phase, create, final_phase, proxmox_cluster_with, vrouter_status_syncing_every, wait_for,
};
use vrouter_operator::runtime::crash_point::CrashPoint;

const BOOT_BOUND: Duration = Duration::from_secs(180);
const VMID: i64 = 100;
const VMI_NS: &str = "vms";
const VMI: &str = "vyos-kv";
const VMI_UID: &str = "2c1e9a7f-5b3d-4e6a-9f8b-7c6d5e4f3a2b";

static PVE_GUEST: SharedGuest<Arc<QemuGuest>> =
    SharedGuest::new(|| QemuGuest::boot("operator-pve", router_overlay("vyos")).map(Arc::new));

struct KubeVirtGuest {
    domain: Domain,
}

static KUBEVIRT_GUEST: SharedGuest<KubeVirtGuest> = SharedGuest::new(|| {
    let libvirt = Arc::new(Libvirt::start()?);
    let domain = libvirt.start_domain(&format!("{VMI_NS}_{VMI}"), router_overlay("vyos"))?;
    Ok(KubeVirtGuest { domain })
});

/// The operator running for one namespace with one target `r1` on a real
/// guest, and the test's own way into that guest.
struct Rig<T> {
    ns: TestNamespace,
    view: RouterView<T>,
    console: Box<dyn Fn(&str) + Send + Sync>,
    /// The running operator: stopped (or killed) when the rig is dropped.
    _operator: Box<dyn Any + Send + Sync>,
    _api: Box<dyn Any + Send + Sync>,
}

/// The released binary as its own process for the rig's namespace
/// (see [`ReplicaProcess`]), named after it, reaching the API at `server`,
/// with `flags` added; its other settings are the defaults, as deployed.
async fn operator(ns: &TestNamespace, server: &str, flags: &[String]) -> Box<dyn Any + Send + Sync> {
    let env = TestEnv::shared().await;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Box::new(ReplicaProcess::start(
        env,
        ns.name(),
        ns.name(),
        ns.name(),
        server,
        &flags,
    ))
}

/// A namespace whose target `r1` names a real guest, with no operator
/// yet: the test's way into the guest, and the API the target is reached
/// through (`A`).
struct Site<T, A> {
    ns: TestNamespace,
    view: RouterView<T>,
    api: A,
}

/// A Proxmox cluster (`cluster`: its spec beyond endpoints and credentials)
/// whose VM 100 is the shared QEMU guest, and the target `r1` naming it.
async fn proxmox_site(
    hint: &str,
    guest: &Arc<QemuGuest>,
    cluster: serde_json::Value,
) -> Site<ChardevTransport, FakeProxmox> {
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    let view = RouterView::new(ChardevTransport::new(guest, Duration::from_secs(60)));
    view.reset().await.unwrap();
    let ns = TestEnv::shared().await.namespace(hint).await;
    let pve = proxmox_cluster_with(&ns, cluster).await;
    pve.add_guest_vm(VMID, "pve1", guest.clone());
    create::<VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "r1"}, "spec": {
            "provider": {"type": "proxmox", "proxmox": {"vmid": VMID, "clusterRef": {"name": "pve"}}},
            "params": {"hostName": "pve-r1", "asn": 4_200_000_001u64},
        }}),
    )
    .await;
    Site { ns, view, api: pve }
}

/// [`proxmox_site`] with the cluster syncing every `sync_interval` and
/// reading the guest's uptime, and the operator, once the cluster's first
/// sync is in.
async fn proxmox_rig(
    hint: &str,
    guest: &Arc<QemuGuest>,
    flags: &[String],
    sync_interval: &str,
) -> Rig<ChardevTransport> {
    let site = proxmox_site(
        hint,
        guest,
        json!({"syncInterval": sync_interval, "checkGuestUptime": true}),
    )
    .await;
    let server = TestEnv::shared().await.apiserver_url();
    let running = operator(&site.ns, &server, flags).await;
    // A guest booted less than 1.5 syncs ago is a reboot to the cluster's
    // first sync, which would apply again a config applied before that sync
    // (a race the applies' speed decides; the first test of a binary meets
    // a guest just booted): configs are created once it has run.
    wait_for("the cluster's first sync", Duration::from_secs(120), || async {
        let cluster = site.ns.api::<vrouter_api::ProxmoxCluster>().get("pve").await.ok()?;
        cluster.status?.last_sync_time
    })
    .await;
    let console_guest = guest.clone();
    Rig {
        ns: site.ns,
        view: site.view,
        console: Box::new(move |line| console_guest.console(line).unwrap()),
        _operator: running,
        _api: Box::new(site.api),
    }
}

/// The VMI's namespace lets `target_namespace` reach its VMs (the target
/// is in another namespace, docs/security.md). The Namespace is created if
/// absent; names are only added, so rigs set up at once each keep theirs.
async fn grant_vmi_namespace(target_namespace: &str) {
    let namespaces = Api::<Namespace>::all(TestEnv::shared().await.client());
    let fresh: Namespace = serde_json::from_value(json!({"metadata": {"name": VMI_NS}})).unwrap();
    match namespaces.create(&PostParams::default(), &fresh).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating Namespace {VMI_NS}: {e}"),
    }
    loop {
        let mut namespace = namespaces.get(VMI_NS).await.unwrap();
        let annotations = namespace.metadata.annotations.get_or_insert_with(Default::default);
        let granted = match annotations.get(ANNOTATION_ALLOWED_TARGET_NAMESPACES) {
            Some(listed) if !listed.is_empty() => format!("{listed},{target_namespace}"),
            _ => target_namespace.to_owned(),
        };
        annotations.insert(ANNOTATION_ALLOWED_TARGET_NAMESPACES.to_owned(), granted);
        // A conflict is another rig's grant landing first: read it again.
        match namespaces.replace(VMI_NS, &PostParams::default(), &namespace).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("granting Namespace {VMI_NS}: {e}"),
        }
    }
}

/// A KubeVirt VMI whose launcher pod's `compute` container is the shared
/// libvirtd, and the target `r1` naming it. The in-test Kubernetes API
/// serving them stands in front of the real API server, so that it is the
/// whole API to an operator process too ([`FakeKubeApi::start_in_front_of`]).
async fn kubevirt_site(hint: &str, guest: &KubeVirtGuest) -> Site<VirshTransport, FakeKubeApi> {
    guest
        .domain
        .wait_for_agent(BOOT_BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let view = RouterView::new(VirshTransport::new(&guest.domain, Duration::from_secs(60)));
    view.reset().await.unwrap();
    let env = TestEnv::shared().await;
    let ns = env.namespace(hint).await;
    let api = FakeKubeApi::start_in_front_of(env.client()).await;
    api.put_vmi(VMI_NS, VMI, VMI_UID, "Running", "node-a");
    api.put_libvirt_launcher_pod(
        VMI_NS,
        "virt-launcher-vyos-kv-7x2lq",
        VMI,
        VMI_UID,
        "node-a",
        guest.domain.libvirt().clone(),
        None,
    );
    create::<VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "r1"}, "spec": {
            "provider": {"type": "kubevirt", "kubevirt": {"name": VMI, "namespace": VMI_NS}},
            "params": {"hostName": "kv-r1", "asn": 4_200_000_002u64},
        }}),
    )
    .await;
    grant_vmi_namespace(ns.name()).await;
    Site { ns, view, api }
}

/// [`kubevirt_site`] with the operator; a binary reaches the whole API
/// through the in-test one.
async fn kubevirt_rig(hint: &str, guest: &KubeVirtGuest, flags: &[String]) -> Rig<VirshTransport> {
    let site = kubevirt_site(hint, guest).await;
    let running = operator(&site.ns, &site.api.url(), flags).await;
    let domain_console = guest.domain.console_handle();
    Rig {
        ns: site.ns,
        view: site.view,
        console: Box::new(move |line| domain_console(line)),
        _operator: running,
        _api: Box::new(site.api),
    }
}

const TEMPLATE_CONFIG: &str = "system {\n    host-name {{ hostName }}\n    login {\n        banner {\n            pre-login \"Zürich ✓ $(reboot) `id`\"\n        }\n    }\n}\n";
const TEMPLATE_COMMANDS: &str = "set protocols bgp system-as {{ asn }}\nset system ntp server {{ ntp }}\n";

/// A template and a binding over `r1`; returns the generated config's name.
async fn bind(ns: &TestNamespace) -> String {
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"config": TEMPLATE_CONFIG, "commands": TEMPLATE_COMMANDS}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "site"}, "spec": {
            "templateRefs": [{"name": "edge"}],
            "params": {"ntp": "192.0.2.123"},
            "targetRefs": [{"name": "r1"}],
        }}),
    )
    .await;
    "site.r1".to_owned()
}

/// From the binding to `Applied`, with the guest's stub log showing the
/// rendered config reaching `load` byte for byte and each command run.
async fn binding_applies<T: Transport>(rig: &Rig<T>, host_name: &str, asn: u64) -> VRouterConfig {
    let name = bind(&rig.ns).await;
    let configs = rig.ns.api::<VRouterConfig>();
    let (phase, applied, message) = final_phase(&configs, &name, Duration::from_secs(180)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
    let config = configs.get(&name).await.unwrap();
    assert!(config.spec.config.contains(&format!("host-name {host_name}")));
    assert_eq!(
        config.spec.commands,
        format!("set protocols bgp system-as {asn}\nset system ntp server 192.0.2.123\n")
    );
    assert_eq!(
        rig.view.loaded_configs().await.unwrap(),
        std::slice::from_ref(&config.spec.config)
    );
    // The commit carries who changed the router, and the router's commit
    // log (what `show system commit` prints) keeps it.
    let comment = format!(
        "vrouter-operator binding={ns}/site config={ns}/{name} generation={generation} apply={apply}",
        ns = rig.ns.name(),
        generation = config.metadata.generation.unwrap(),
        apply = config.status.as_ref().unwrap().apply_id,
    );
    assert_eq!(
        rig.view.calls().await.unwrap(),
        [
            "source /opt/vyatta/etc/functions/script-template".to_owned(),
            "configure".into(),
            "load /dev/stdin".into(),
            format!("set protocols bgp system-as {asn}"),
            "set system ntp server 192.0.2.123".into(),
            format!("commit comment {comment}"),
            "save".into(),
        ]
    );
    let log = rig.view.commit_log().await.unwrap();
    assert_eq!(
        log.iter().map(|e| e.comment.as_str()).collect::<Vec<_>>(),
        [comment.as_str()],
        "{log:?}"
    );
    config
}

fn sha256(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// Drift detection reads config.boot and the running config out of the
/// guest: the baseline and the Secret hold what the guest holds; a
/// config.boot changed in the guest is repaired by one re-apply.
async fn drift_is_read_from_the_guest<T: Transport>(rig: &Rig<T>, config: &VRouterConfig) {
    let name = config.metadata.name.clone().unwrap();
    vrouter_status_syncing_every(&rig.ns, &name, "2s", Duration::from_secs(60)).await;
    let statuses = rig.ns.api::<VRouterStatus>();
    let baseline = wait_for("a baseline", Duration::from_secs(90), || async {
        statuses
            .get_opt(&name)
            .await
            .ok()??
            .status
            .filter(|s| !s.baseline_hash.is_empty())
    })
    .await;
    let startup = rig.view.config_boot().await.unwrap();
    let running = rig.view.running_config().await.unwrap();
    let expected = format!("{}{}", config.spec.config, config.spec.commands);
    assert_eq!(
        String::from_utf8_lossy(&startup),
        expected,
        "save wrote the running config"
    );
    assert_eq!(running, startup);
    assert_eq!(baseline.baseline_hash, sha256(&startup));
    assert_eq!(baseline.running_config_hash, sha256(&running));
    assert!(!baseline.drift_detected);
    let data = wait_for("the Secret", Duration::from_secs(30), || async {
        rig.ns
            .api::<Secret>()
            .get_opt(&format!("vrs-{name}-config"))
            .await
            .ok()??
            .data
    })
    .await;
    assert_eq!(data["startup"].0, startup);
    assert_eq!(data["running"].0, running);
    assert!(rig.view.running_config_reads().await.unwrap() >= 1);

    // A person edits the router and saves.
    rig.view
        .agent()
        .write_file(
            vrouter_qga::constants::CONFIG_BOOT_PATH,
            b"system {\n    host-name hand-edited\n}\n",
        )
        .await
        .unwrap();
    wait_for("the repair", Duration::from_secs(120), || async {
        (rig.view.loaded_configs().await.ok()?.len() == 2).then_some(())
    })
    .await;
    let configs = rig.ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, &name, Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    wait_for("config.boot repaired", Duration::from_secs(60), || async {
        (rig.view.config_boot().await.ok()? == expected.as_bytes()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn proxmox_binding_applies_over_the_chardev_and_drift_is_read_from_the_guest() {
    let guest = PVE_GUEST.lease();
    let rig = proxmox_rig("real-pve", &guest, &[], "60s").await;
    let config = binding_applies(&rig, "pve-r1", 4_200_000_001).await;
    drift_is_read_from_the_guest(&rig, &config).await;
}

#[tokio::test]
async fn kubevirt_binding_applies_through_virsh_and_drift_is_read_from_the_guest() {
    let guest = KUBEVIRT_GUEST.lease();
    let rig = kubevirt_rig("real-kv", &guest, &[]).await;
    let config = binding_applies(&rig, "kv-r1", 4_200_000_002).await;
    drift_is_read_from_the_guest(&rig, &config).await;
}

/// The detection window of a 20 s sync interval is 30 s: long enough for a
/// sync to find the rebooted guest's agent up on a loaded machine.
const REBOOT_SYNC_SECS: u64 = 20;

#[tokio::test]
async fn a_real_reboot_inside_the_guest_forces_exactly_one_re_apply() {
    let guest = PVE_GUEST.lease();
    let window = Duration::from_secs(REBOOT_SYNC_SECS * 3 / 2);
    // A VM started moments ago (Proxmox's uptime) or a guest booted moments
    // ago (its own) would itself count as a reboot at the cluster's first sync.
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    let early = RouterView::new(ChardevTransport::new(&guest, Duration::from_secs(60)));
    let margin = window + Duration::from_secs(5);
    wait_for(
        "the VM and guest to be up longer than the window",
        Duration::from_secs(120),
        || async { (guest.process_uptime() > margin && early.uptime().await.ok()? > margin).then_some(()) },
    )
    .await;
    let rig = proxmox_rig("real-reboot", &guest, &[], &format!("{REBOOT_SYNC_SECS}s")).await;
    create::<VRouterConfig>(
        &rig.ns,
        json!({"metadata": {"name": "direct"}, "spec": {"targetRef": {"name": "r1"}, "config": "system {\n    host-name r1\n}\n", "commands": "set system domain-name example.net\n"}}),
    )
    .await;
    let configs = rig.ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "direct", Duration::from_secs(180)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    let targets = rig.ns.api::<VRouterTarget>();
    assert_eq!(
        targets.get("r1").await.unwrap().status.and_then(|s| s.last_reboot_time),
        None
    );
    // This guest keeps no /config across a reboot (it is an initramfs), so
    // drift detection would repair the reset config.boot with a re-apply of
    // its own; it looks again only in an hour here, so what follows the
    // reboot is the reboot detection's doing alone.
    vrouter_status_syncing_every(&rig.ns, "direct", "1h", Duration::from_secs(60)).await;
    let statuses = rig.ns.api::<VRouterStatus>();
    wait_for("the drift baseline", Duration::from_secs(90), || async {
        statuses
            .get_opt("direct")
            .await
            .ok()??
            .status
            .filter(|s| !s.baseline_hash.is_empty())
    })
    .await;
    let uptime_before = rig.view.uptime().await.unwrap();

    // The guest reboots itself; QEMU resets the machine in the same process.
    (rig.console)("reboot -f");
    let rebooted = wait_for("lastRebootTime", Duration::from_secs(180), || async {
        targets.get("r1").await.ok()?.status?.last_reboot_time
    })
    .await;
    let uptime_after = rig.view.uptime().await.unwrap();
    assert!(
        uptime_after < uptime_before,
        "the guest's uptime restarted: {uptime_before:?} then {uptime_after:?}"
    );
    assert!(
        guest.process_uptime() > window,
        "Proxmox's uptime (the QEMU process) did not restart"
    );

    // The stub log started empty with the new boot: exactly one load since.
    wait_for("the re-apply", Duration::from_secs(120), || async {
        let loads = rig.view.loaded_configs().await.ok()?;
        let (phase, _, _) = config_phase(&configs, "direct").await?;
        (loads.len() == 1 && phase == Phase::Applied).then_some(())
    })
    .await;
    // Later syncs within the same boot settle on the same boot time.
    let synced_after = wait_for("two more syncs", Duration::from_secs(120), || async {
        let cluster = rig.ns.api::<vrouter_api::ProxmoxCluster>().get("pve").await.ok()?;
        let last = cluster.status?.last_sync_time?;
        (last.0 > rebooted.0 + jiff_secs(REBOOT_SYNC_SECS * 2)).then_some(last)
    })
    .await;
    let _ = synced_after;
    assert_eq!(
        targets.get("r1").await.unwrap().status.unwrap().last_reboot_time,
        Some(rebooted)
    );
    assert_eq!(
        rig.view.loaded_configs().await.unwrap().len(),
        1,
        "exactly one re-apply"
    );
}

fn jiff_secs(seconds: u64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(seconds as i64)
}

/// An apply that stays in the guest for `seconds` (a slow commit).
async fn slow_apply<T: Transport>(rig: &Rig<T>, name: &str, seconds: u32) -> i64 {
    rig.view.set_commit_delay(seconds).await.unwrap();
    create::<VRouterConfig>(
        &rig.ns,
        json!({"metadata": {"name": name}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name slow\n"}}),
    )
    .await;
    let configs = rig.ns.api::<VRouterConfig>();
    wait_for("the apply to start", Duration::from_secs(180), || async {
        let status = configs.get(name).await.ok()?.status?;
        (status.exec_pid > 0 && status.phase == Phase::Applying).then_some(status.exec_pid)
    })
    .await
}

/// qemu-ga killed in the guest while the apply runs: init starts a new
/// agent that does not know the pid. The operator asks the router about the
/// apply id and takes the result the router recorded: `Applied`, with the
/// script run exactly once.
async fn agent_killed_mid_apply<T: Transport>(rig: &Rig<T>) {
    slow_apply(rig, "killed", 5).await;
    (rig.console)("kill -KILL $(cat /run/qemu-ga.pid)");
    let configs = rig.ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "killed", Duration::from_secs(240)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    rig.view.set_commit_delay(0).await.unwrap();
    assert_eq!(
        rig.view.config_boot().await.unwrap(),
        b"system {\n    host-name vyos\n}\ninterfaces {\n    loopback lo {\n    }\n}\nset system host-name slow\n"
    );
    let status = configs.get("killed").await.unwrap().status.unwrap();
    assert_ran_once_each(rig, &[status.apply_id]).await;
}

/// The apply's wrapper (the process qemu-ga started) SIGKILLed in the guest
/// while its script commits: the script runs on under the router's lock.
/// The operator's poll sees a lost result, the router says the apply runs,
/// then its recorded result: `Applied`, with the script run exactly once.
async fn wrapper_killed_mid_apply<T: Transport>(rig: &Rig<T>) {
    let wrapper = slow_apply(rig, "wrapper-killed", 8).await;
    let configs = rig.ns.api::<VRouterConfig>();
    let apply_id = configs.get("wrapper-killed").await.unwrap().status.unwrap().apply_id;
    let started = format!("{apply_id} started");
    wait_for("the script to start", Duration::from_secs(120), || async {
        rig.view.apply_journal().await.ok()?.contains(&started).then_some(())
    })
    .await;
    rig.view.sh(&format!("kill -KILL {wrapper}")).await.unwrap();
    let (phase, _, message) = final_phase(&configs, "wrapper-killed", Duration::from_secs(240)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    rig.view.set_commit_delay(0).await.unwrap();
    assert_eq!(
        rig.view.config_boot().await.unwrap(),
        b"system {\n    host-name vyos\n}\ninterfaces {\n    loopback lo {\n    }\n}\nset system host-name slow\n"
    );
    let status = configs.get("wrapper-killed").await.unwrap().status.unwrap();
    assert_eq!(status.apply_id, apply_id, "not applied again under a new id");
    assert_ran_once_each(rig, &[apply_id]).await;
}

/// The router's journal shows exactly `apply_ids` (in any order), one run
/// each and never two at once, and the stubs saw one `commit` per run.
async fn assert_ran_once_each<T: Transport>(rig: &Rig<T>, apply_ids: &[String]) {
    assert_router_ran_once_each(&rig.view, apply_ids).await;
}

async fn assert_router_ran_once_each<T: Transport>(view: &RouterView<T>, apply_ids: &[String]) {
    let mut runs = view
        .apply_runs()
        .await
        .unwrap()
        .expect("an apply still runs on the router");
    runs.sort();
    let mut want = apply_ids.to_vec();
    want.sort();
    assert_eq!(runs, want, "one run per apply id");
    let commits = view
        .calls()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
        .count();
    assert_eq!(commits, apply_ids.len(), "one commit per run");
}

/// SIGCONT for the agent, also when the test fails half way.
struct Thaw<'a>(&'a (dyn Fn(&str) + Send + Sync));

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        (self.0)("kill -CONT $(cat /run/qemu-ga.pid)");
    }
}

/// qemu-ga frozen in the guest while the apply runs, longer than the apply
/// timeout: the config ends `Failed` with `ApplyTimeout`, not `Applying`;
/// once the agent thaws, the next generation applies.
async fn agent_frozen_mid_apply<T: Transport>(rig: &Rig<T>) {
    slow_apply(rig, "frozen", 2).await;
    (rig.console)("kill -STOP $(cat /run/qemu-ga.pid)");
    let thaw = Thaw(rig.console.as_ref());
    let configs = rig.ns.api::<VRouterConfig>();
    let (phase, applied, message) = final_phase(&configs, "frozen", APPLY_TIMEOUT * 4).await;
    assert_eq!(phase, Phase::Failed, "{message}");
    assert_eq!(
        applied.map(|(_, reason)| reason).as_deref(),
        Some("ApplyTimeout"),
        "{message}"
    );
    drop(thaw);
    rig.view.set_commit_delay(0).await.unwrap();
    configs
        .patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"commands": "set system host-name thawed\n"}})),
        )
        .await
        .unwrap();
    let applied_again = wait_for("the next generation Applied", Duration::from_secs(180), || async {
        let config = configs.get("frozen").await.ok()?;
        let status = config.status?;
        let applied = condition(&status.conditions, "Applied")?;
        (status.phase == Phase::Applied && Some(status.observed_generation) == config.metadata.generation)
            .then_some(applied)
    })
    .await;
    assert_eq!(applied_again, ("True".into(), "ConfigApplied".into()));
    assert!(String::from_utf8_lossy(&rig.view.config_boot().await.unwrap()).contains("host-name thawed"));
}

/// Short, so a frozen agent turns into ApplyTimeout within the test.
const APPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The flags giving the released binary [`APPLY_TIMEOUT`] (`--apply-timeout`): the agent faults below kill or
/// freeze qemu-ga under an operator that is a process of its own.
fn fault_flags() -> [String; 1] {
    [format!("--apply-timeout={}s", APPLY_TIMEOUT.as_secs())]
}

#[tokio::test]
async fn proxmox_agent_restarted_mid_apply_the_result_is_recovered_from_the_router() {
    let guest = PVE_GUEST.lease();
    let rig = proxmox_rig("real-pve-kill", &guest, &fault_flags(), "60s").await;
    agent_killed_mid_apply(&rig).await;
}

#[tokio::test]
async fn proxmox_a_killed_apply_wrapper_leaves_its_script_to_finish_once() {
    let guest = PVE_GUEST.lease();
    let rig = proxmox_rig("real-pve-wrapper", &guest, &fault_flags(), "60s").await;
    wrapper_killed_mid_apply(&rig).await;
}

#[tokio::test]
async fn proxmox_agent_frozen_mid_apply_times_out_then_recovers() {
    let guest = PVE_GUEST.lease();
    let rig = proxmox_rig("real-pve-stop", &guest, &fault_flags(), "60s").await;
    agent_frozen_mid_apply(&rig).await;
}

#[tokio::test]
async fn kubevirt_agent_restarted_mid_apply_the_result_is_recovered_from_the_router() {
    let guest = KUBEVIRT_GUEST.lease();
    let rig = kubevirt_rig("real-kv-kill", &guest, &fault_flags()).await;
    agent_killed_mid_apply(&rig).await;
}

#[tokio::test]
async fn kubevirt_agent_frozen_mid_apply_times_out_then_recovers() {
    let guest = KUBEVIRT_GUEST.lease();
    let rig = kubevirt_rig("real-kv-stop", &guest, &fault_flags()).await;
    agent_frozen_mid_apply(&rig).await;
}

/// The released operator binary as its own process for `ns`, reaching the
/// API at `server`, leading on a Lease of its own (`name`: no other process
/// waits for it, so two of them reconcile at once, as two operators without
/// leader election do), with `vars` in its environment. Drift repair is off:
/// where two configs save to one router, each would see the other's
/// config.boot as drift and apply again, a run the tests do not count.
fn operator_process(
    env: &TestEnv,
    ns: &TestNamespace,
    name: &str,
    server: &str,
    vars: &[(&str, &str)],
) -> ReplicaProcess {
    ReplicaProcess::start_with_env(env, name, ns.name(), name, server, &["--drift-repair=false"], vars)
}

/// Waits until the config's current generation ended Applied or Failed.
async fn settled(configs: &Api<VRouterConfig>, name: &str, limit: Duration) -> VRouterConfig {
    wait_for(
        &format!("{name}'s generation to be Applied or Failed"),
        limit,
        || async {
            let config = configs.get_opt(name).await.ok()??;
            let status = config.status.as_ref()?;
            let current = Some(status.observed_generation) == config.metadata.generation;
            (current && matches!(status.phase, Phase::Applied | Phase::Failed)).then_some(config)
        },
    )
    .await
}

/// The apply id of the config's current generation, once it is Applied.
async fn applied_apply_id(configs: &Api<VRouterConfig>, name: &str) -> String {
    let config = settled(configs, name, Duration::from_secs(240)).await;
    let status = config.status.unwrap();
    assert_eq!(status.phase, Phase::Applied, "{name}: {}", status.message);
    status.apply_id
}

/// Two VRouterTargets naming one router (`r1`, and `r1-alias` from
/// `alias`), a config on each, and two operators, each the released binary
/// as its own process reaching the API at `server`, without a Lease in
/// common: both reconcile both configs, each with its own in-memory holds.
/// The router's lock keeps the applies apart (a slow commit keeps each one
/// running while the other arrives), and both configs end `Applied` with
/// one run each.
async fn two_targets_on_one_router_and_two_operators<T: Transport>(
    ns: &TestNamespace,
    view: &RouterView<T>,
    server: &str,
    alias: serde_json::Value,
) {
    let env = TestEnv::shared().await;
    create::<VRouterTarget>(ns, json!({"metadata": {"name": "r1-alias"}, "spec": alias})).await;
    view.set_commit_delay(2).await.unwrap();
    let _a = operator_process(env, ns, "alias-a", server, &[]);
    let _b = operator_process(env, ns, "alias-b", server, &[]);
    for (name, target) in [("a", "r1"), ("b", "r1-alias")] {
        create::<VRouterConfig>(
            ns,
            json!({"metadata": {"name": name}, "spec": {"targetRef": {"name": target}, "commands": format!("set system host-name {name}\n")}}),
        )
        .await;
    }
    let configs = ns.api::<VRouterConfig>();
    let mut apply_ids = Vec::new();
    for name in ["a", "b"] {
        apply_ids.push(applied_apply_id(&configs, name).await);
    }
    view.set_commit_delay(0).await.unwrap();
    assert_router_ran_once_each(view, &apply_ids).await;
}

#[tokio::test]
async fn proxmox_two_targets_on_one_vm_and_two_operator_processes_never_overlap() {
    let guest = PVE_GUEST.lease();
    up_longer_than_the_reboot_window(&guest).await;
    let sync = format!("{REBOOT_SYNC_SECS}s");
    let site = proxmox_site("real-pve-alias", &guest, json!({"syncInterval": sync})).await;
    let alias = json!({"provider": {"type": "proxmox", "proxmox": {"vmid": VMID, "clusterRef": {"name": "pve"}}}});
    let server = TestEnv::shared().await.apiserver_url();
    two_targets_on_one_router_and_two_operators(&site.ns, &site.view, &server, alias).await;
}

#[tokio::test]
async fn kubevirt_two_targets_on_one_vmi_and_two_operator_processes_never_overlap() {
    let guest = KUBEVIRT_GUEST.lease();
    let site = kubevirt_site("real-kv-alias", &guest).await;
    let alias = json!({"provider": {"type": "kubevirt", "kubevirt": {"name": VMI, "namespace": VMI_NS}}});
    two_targets_on_one_router_and_two_operators(&site.ns, &site.view, &site.api.url(), alias).await;
}

/// The exec stream of the apply's dispatch is cut after `virsh` had the
/// guest start the script, before any output or exit status came back (as
/// when the connection to the kubelet breaks): the operator, the released
/// binary as its own process, asks the router about the apply id instead
/// of dispatching again, finds it, and the script runs once.
#[tokio::test]
async fn kubevirt_a_dispatch_whose_exec_stream_is_cut_runs_once() {
    let guest = KUBEVIRT_GUEST.lease();
    let site = kubevirt_site("real-kv-lost", &guest).await;
    let env = TestEnv::shared().await;
    site.api.lose_apply_answers(1);
    site.view.set_commit_delay(2).await.unwrap();
    let _operator = operator_process(env, &site.ns, "lost", &site.api.url(), &[]);
    create::<VRouterConfig>(
        &site.ns,
        json!({"metadata": {"name": "lost"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name lost\n"}}),
    )
    .await;
    let apply_id = applied_apply_id(&site.ns.api::<VRouterConfig>(), "lost").await;
    assert_eq!(site.api.apply_answers_to_lose(), 0, "the dispatch's answer was lost");
    let dispatches = site
        .api
        .execs()
        .into_iter()
        .filter(|exec| {
            let stdin = String::from_utf8_lossy(&exec.stdin);
            stdin.contains("\"guest-exec\"") && stdin.contains(".staged\"")
        })
        .count();
    assert_eq!(dispatches, 1, "the apply was dispatched once");
    site.view.set_commit_delay(0).await.unwrap();
    assert_router_ran_once_each(&site.view, &[apply_id]).await;
}
/// The Proxmox API loses the answer to the apply's `agent/exec` after the
/// guest started it (`got timeout`): the operator, the released binary as
/// its own process, asks the router about the apply id before dispatching
/// again, finds it, and the script runs once.
#[tokio::test]
async fn proxmox_a_dispatch_whose_answer_is_lost_runs_once() {
    let guest = PVE_GUEST.lease();
    let rig = proxmox_rig("real-pve-lost", &guest, &[], "60s").await;
    let pve = rig
        ._api
        .downcast_ref::<vrouter_test_peers::proxmox::FakeProxmox>()
        .unwrap();
    pve.lose_apply_answers(1);
    rig.view.set_commit_delay(2).await.unwrap();
    create::<VRouterConfig>(
        &rig.ns,
        json!({"metadata": {"name": "lost"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name lost\n"}}),
    )
    .await;
    let configs = rig.ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "lost", Duration::from_secs(240)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    assert_eq!(pve.apply_answers_to_lose(), 0, "the dispatch's answer was lost");
    rig.view.set_commit_delay(0).await.unwrap();
    let status = configs.get("lost").await.unwrap().status.unwrap();
    assert_ran_once_each(&rig, &[status.apply_id]).await;
}

/// The operator, the released binary as its own process, killed with
/// SIGKILL at each crash point of an apply (`VROUTER_CRASH_AT`): after the
/// apply id is written ahead, after the router started the script but
/// before its handle is stored, after its result was read but before it is
/// stored. A restarted operator finishes each generation (`Applied`), and
/// the router ran each one's script exactly once, never two at a time.
#[tokio::test]
async fn proxmox_an_operator_killed_at_each_crash_point_finishes_with_one_run() {
    assert_crash_points_built();
    let guest = PVE_GUEST.lease();
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    let view = RouterView::new(ChardevTransport::new(&guest, Duration::from_secs(60)));
    view.reset().await.unwrap();
    let env = TestEnv::shared().await;
    let ns = env.namespace("real-pve-crash").await;
    let pve = proxmox_cluster_with(&ns, json!({"syncInterval": "60s", "checkGuestUptime": true})).await;
    pve.add_guest_vm(VMID, "pve1", guest.clone());
    create::<VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "r1"}, "spec": {
            "provider": {"type": "proxmox", "proxmox": {"vmid": VMID, "clusterRef": {"name": "pve"}}},
        }}),
    )
    .await;
    // A slow commit keeps the script running past the dispatch's crash point.
    view.set_commit_delay(2).await.unwrap();
    let configs = ns.api::<VRouterConfig>();
    let mut apply_ids = Vec::new();
    for point in CrashPoint::OF_AN_APPLY {
        let name = point.name();
        create::<VRouterConfig>(
            &ns,
            json!({"metadata": {"name": name}, "spec": {"targetRef": {"name": "r1"}, "commands": format!("set system host-name {name}\n")}}),
        )
        .await;
        let lease = format!("{name}-crashing");
        let mut crashing = ReplicaProcess::start_with_env(
            env,
            &lease,
            ns.name(),
            &lease,
            &env.apiserver_url(),
            &[],
            &[(vrouter_operator::runtime::crash_point::ENV, name)],
        );
        let exit = wait_for_exit(&mut crashing, Duration::from_secs(300)).await;
        assert_eq!(exit.signal(), Some(9), "{name}: {exit}\n{}", crashing.log());
        let lease = format!("{name}-restarted");
        let _restarted = ReplicaProcess::start(env, &lease, ns.name(), &lease, &env.apiserver_url(), &[]);
        let (phase, _, message) = final_phase(&configs, name, Duration::from_secs(240)).await;
        assert_eq!(phase, Phase::Applied, "{name}: {message}");
        apply_ids.push(configs.get(name).await.unwrap().status.unwrap().apply_id);
        // Paused, so drift repair of the config.boot the next one saves
        // adds no run of its own.
        let paused = json!({"metadata": {"annotations": {vrouter_api::constants::ANNOTATION_PAUSED: "true"}}});
        configs
            .patch(name, &PatchParams::default(), &Patch::Merge(paused))
            .await
            .unwrap();
    }
    view.set_commit_delay(0).await.unwrap();
    assert_router_ran_once_each(&view, &apply_ids).await;
}

/// The operator binary these tests run has crash points only when built with
/// the `crash-points` feature, which `cargo xtask test` enables.
fn assert_crash_points_built() {
    if !cfg!(feature = "crash-points") {
        panic!(
            "the operator was built without crash points: run these tests with \
             `cargo test -p vrouter-operator --features crash-points` (cargo xtask test does)"
        );
    }
}

/// Starts the released binary with the crash point `point` selected, and
/// waits for it to kill itself there with SIGKILL.
async fn killed_at(env: &TestEnv, ns: &TestNamespace, name: &str, point: CrashPoint) {
    let server = env.apiserver_url();
    let mut crashing = operator_process(
        env,
        ns,
        name,
        &server,
        &[(vrouter_operator::runtime::crash_point::ENV, point.name())],
    );
    let exit = wait_for_exit(&mut crashing, Duration::from_secs(300)).await;
    assert_eq!(exit.signal(), Some(9), "{name}: {exit}\n{}", crashing.log());
}

/// The binding's recorded frontier: the target it stamped last.
async fn stamped_target(ns: &TestNamespace, binding: &str) -> String {
    let binding = ns.api::<VRouterBinding>().get(binding).await.unwrap();
    binding
        .status
        .and_then(|s| s.rollout)
        .unwrap_or_default()
        .last_updated_target
}

/// Waits until the binding's rollout of its current generation completed:
/// `Ready=True` (WaitForApplied: every config Applied).
async fn rollout_completed(ns: &TestNamespace, binding: &str) {
    let bindings = ns.api::<VRouterBinding>();
    wait_for(
        &format!("{binding}'s rollout to complete"),
        Duration::from_secs(300),
        || async {
            let binding = bindings.get(binding).await.ok()?;
            let status = binding.status?;
            let current = status.observed_generation == binding.metadata.generation;
            (current && condition(&status.conditions, "Ready")?.0 == "True").then_some(())
        },
    )
    .await;
}

/// A serial (WaitForApplied) rollout over two targets on the router, with
/// the operator (the released binary) killed with SIGKILL between a
/// rollout stamp and the write it stamps, twice: at the first target of the
/// first rollout, and at the second target of the next one (only its render
/// changed). Each time the binding's status names the stamped target and
/// its config is as it was before; a restarted operator writes it and
/// finishes the rollout, and the router ran each generation's apply once,
/// never two at a time.
#[tokio::test]
async fn proxmox_an_operator_killed_after_a_rollout_stamp_finishes_the_rollout_with_one_run_each() {
    assert_crash_points_built();
    let guest = PVE_GUEST.lease();
    up_longer_than_the_reboot_window(&guest).await;
    let sync = format!("{REBOOT_SYNC_SECS}s");
    let site = proxmox_site("real-pve-stamp", &guest, json!({"syncInterval": sync})).await;
    let env = TestEnv::shared().await;
    let ns = &site.ns;
    create::<VRouterTarget>(
        ns,
        json!({"metadata": {"name": "r2"}, "spec": {
            "provider": {"type": "proxmox", "proxmox": {"vmid": VMID, "clusterRef": {"name": "pve"}}},
            "params": {"hostName": "pve-r2"},
        }}),
    )
    .await;
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "name"}, "spec": {"commands": "set system host-name {{ hostName ~ \"-\" ~ wave }}\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "wave"}, "spec": {
            "templateRefs": [{"name": "name"}],
            "params": {"wave": "one"},
            "targetRefs": [{"name": "r1"}, {"name": "r2"}],
            "rollout": {"mode": "WaitForApplied", "pollInterval": "1s"},
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();

    // The first rollout: killed once r1 is stamped, before its config exists.
    killed_at(env, ns, "stamp-1", CrashPoint::AfterRolloutStamp).await;
    assert_eq!(stamped_target(ns, "wave").await, "r1");
    assert!(
        configs.get_opt("wave.r1").await.unwrap().is_none(),
        "r1's config was not written yet"
    );
    let restarted = operator_process(env, ns, "stamp-2", &env.apiserver_url(), &[]);
    rollout_completed(ns, "wave").await;
    let mut apply_ids = vec![
        applied_apply_id(&configs, "wave.r1").await,
        applied_apply_id(&configs, "wave.r2").await,
    ];
    drop(restarted);

    // The next rollout changes r2's render only: killed once r2 is stamped.
    let before = configs.get("wave.r2").await.unwrap();
    ns.api::<VRouterTarget>()
        .patch(
            "r2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"params": {"hostName": "pve-r2b"}}})),
        )
        .await
        .unwrap();
    killed_at(env, ns, "stamp-3", CrashPoint::AfterRolloutStamp).await;
    assert_eq!(stamped_target(ns, "wave").await, "r2");
    let unwritten = configs.get("wave.r2").await.unwrap();
    assert_eq!(
        unwritten.metadata.generation, before.metadata.generation,
        "r2's config was not written yet"
    );
    assert_eq!(unwritten.spec, before.spec);
    let _restarted = operator_process(env, ns, "stamp-4", &env.apiserver_url(), &[]);
    rollout_completed(ns, "wave").await;
    let rewritten = configs.get("wave.r2").await.unwrap();
    assert_eq!(rewritten.spec.commands, "set system host-name pve-r2b-one\n");
    apply_ids.push(applied_apply_id(&configs, "wave.r2").await);
    assert_eq!(
        configs.get("wave.r1").await.unwrap().metadata.generation,
        Some(1),
        "r1's render did not change"
    );
    assert_router_ran_once_each(&site.view, &apply_ids).await;
}

/// Holder of the Lease `name`, if any.
async fn lease_holder(ns: &TestNamespace, name: &str) -> Option<String> {
    let lease = ns.api::<Lease>().get_opt(name).await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Two replicas of the released binary with leader election (Lease 15 s,
/// renew deadline 10 s); the leader reaches the API server only through
/// Toxiproxy, and reaches the guest directly. While its apply runs on the
/// guest (a slow commit), the proxy drops every byte: the leader stops on
/// its own within its renew deadline (exit 3), the follower is never seen
/// holding the Lease while it runs, takes over, finds the apply on the
/// router instead of dispatching it again, and applies the next generation;
/// the router ran each generation once, never two at a time.
#[tokio::test]
async fn proxmox_a_leader_partitioned_mid_apply_stops_and_its_successor_runs_nothing_twice() {
    const LEASE: &str = "vrouter-operator-fence";
    let guest = PVE_GUEST.lease();
    up_longer_than_the_reboot_window(&guest).await;
    let sync = format!("{REBOOT_SYNC_SECS}s");
    let site = proxmox_site("real-pve-fence", &guest, json!({"syncInterval": sync})).await;
    let env = TestEnv::shared().await;
    let ns = &site.ns;
    let toxiproxy = Toxiproxy::start();
    let apiserver = env.apiserver_url().trim_start_matches("https://").parse().unwrap();
    let proxy = toxiproxy.proxy("apiserver-for-fence-a", apiserver);
    let args = ["--drift-repair=false"];
    let mut a = ReplicaProcess::start(env, "fence-a", ns.name(), LEASE, &proxy.https_url(), &args);
    wait_for("fence-a to lead", Duration::from_secs(120), || async {
        (lease_holder(ns, LEASE).await.as_deref() == Some("fence-a")).then_some(())
    })
    .await;
    let b = ReplicaProcess::start(env, "fence-b", ns.name(), LEASE, &env.apiserver_url(), &args);
    wait_for("fence-b to wait for the Lease", Duration::from_secs(120), || async {
        b.log()
            .contains("waiting for the Lease held by another replica")
            .then_some(())
    })
    .await;

    site.view.set_commit_delay(8).await.unwrap();
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "one"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name fenced\n"}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("fence-a's apply to start", Duration::from_secs(180), || async {
        let status = configs.get("one").await.ok()?.status?;
        (status.exec_pid > 0 && status.phase == Phase::Applying).then_some(())
    })
    .await;

    let cut = std::time::Instant::now();
    proxy.partition();
    let exit = loop {
        // The holder is read first: fence-b holding the Lease while fence-a
        // still runs afterwards would be two leaders at once.
        let holder = lease_holder(ns, LEASE).await;
        let exited = a.exited();
        assert!(
            exited.is_some() || holder.as_deref() != Some("fence-b"),
            "fence-b took the Lease while fence-a still ran:\n{}",
            a.log()
        );
        if let Some(exit) = exited {
            break exit;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(180),
            "fence-a still runs after the cut"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stopped_after = cut.elapsed();
    assert_eq!(
        exit.code(),
        Some(3),
        "a replica that lost the Lease exits with 3:\n{}",
        a.log()
    );
    let took_over_after = wait_for("fence-b to take over", Duration::from_secs(180), || async {
        (lease_holder(ns, LEASE).await.as_deref() == Some("fence-b")).then(|| cut.elapsed())
    })
    .await;
    eprintln!(
        "real guest: the leader stopped {stopped_after:?} after the cut (renew deadline 10s), \
         the follower took over {took_over_after:?} after it (Lease 15s)"
    );
    let mut apply_ids = vec![applied_apply_id(&configs, "one").await];
    site.view.set_commit_delay(0).await.unwrap();
    configs
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"commands": "set system host-name fenced-two\n"}})),
        )
        .await
        .unwrap();
    apply_ids.push(applied_apply_id(&configs, "one").await);
    assert_router_ran_once_each(&site.view, &apply_ids).await;
}

/// Waits until the shared Proxmox guest's VM (Proxmox's uptime: its QEMU
/// process) and the guest itself have been up longer than the reboot
/// window of a `REBOOT_SYNC_SECS` sync: a boot inside it would count as a
/// reboot at the cluster's first sync, whose re-apply would be a run of its
/// own amid the applies a test counts.
async fn up_longer_than_the_reboot_window(guest: &Arc<QemuGuest>) {
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    let early = RouterView::new(ChardevTransport::new(guest, Duration::from_secs(60)));
    let margin = Duration::from_secs(REBOOT_SYNC_SECS * 3 / 2 + 5);
    wait_for(
        "the VM and guest to be up longer than the reboot window",
        Duration::from_secs(120),
        || async { (guest.process_uptime() > margin && early.uptime().await.ok()? > margin).then_some(()) },
    )
    .await;
}

/// Waits (at most `limit`) for `replica` to exit.
async fn wait_for_exit(replica: &mut ReplicaProcess, limit: Duration) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = replica.exited() {
            return status;
        }
        assert!(
            started.elapsed() < limit,
            "the operator did not crash:\n{}",
            replica.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A minute of the guest's `commit-confirm` timer, in seconds: short, so
/// the stub's rollback comes well within the test, and long enough that a
/// check and a `confirm` under TCG finish before it.
const CONFIRM_MINUTE_SECONDS: u32 = 20;

/// The check of the confirmed applies below: the router's running config
/// (read in the guest as drift detection reads it) still names the uplink.
fn uplink_check() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        "/bin/cli-shell-api showConfig --show-active-only | grep -q 'description uplink-ok'".into(),
    ]
}

/// A confirmed apply against the real guest, whose `commit-confirm` and
/// `confirm` are the stubs of `vrouter_test_peers::guest` (their doc cites
/// the VyOS sources they model: vyatta-cfg `vyatta-cfg-run` lines 134-162,
/// vyos-1x `python/vyos/config_mgmt.py` `commit_confirm`, `confirm` and
/// `revert_soft`, lines 183-307): the revert is a timer of the given
/// minutes that reloads the config committed before.
///
/// Generation 1 keeps the uplink: the check passes, the operator confirms,
/// then saves. Generation 2 cuts it: the check fails, nothing is confirmed
/// or saved, the guest's own timer restores generation 1's running config,
/// the config says `RolledBack` with the failed check, and the serial
/// rollout halts before its second target, `r2`, which generation 2 adds
/// after `r1` (its VM does not exist: the halt is all that keeps the
/// rollout from writing its config).
#[tokio::test]
async fn proxmox_confirmed_apply_is_confirmed_when_its_check_passes_and_rolled_back_when_it_fails() {
    let guest = PVE_GUEST.lease();
    // A guest booted moments ago would count as a reboot at a sync of the
    // cluster, and the reboot's re-apply would run amid the applies below.
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    let early = RouterView::new(ChardevTransport::new(&guest, Duration::from_secs(60)));
    let margin = Duration::from_secs(REBOOT_SYNC_SECS * 3 / 2 + 5);
    wait_for(
        "the VM and guest to be up longer than the reboot window",
        Duration::from_secs(120),
        || async { (guest.process_uptime() > margin && early.uptime().await.ok()? > margin).then_some(()) },
    )
    .await;
    let rig = proxmox_rig("real-pve-confirm", &guest, &[], &format!("{REBOOT_SYNC_SECS}s")).await;
    rig.view.set_confirm_minute(CONFIRM_MINUTE_SECONDS).await.unwrap();
    create::<VRouterTarget>(
        &rig.ns,
        json!({"metadata": {"name": "r2"}, "spec": {
            "provider": {"type": "proxmox", "proxmox": {"vmid": VMID + 1, "clusterRef": {"name": "pve"}}},
        }}),
    )
    .await;
    create::<vrouter_api::VRouterTemplate>(
        &rig.ns,
        json!({"metadata": {"name": "uplink"}, "spec": {
            "commands": "set interfaces ethernet eth0 description {{ uplink }}\n",
        }}),
    )
    .await;
    create::<VRouterBinding>(
        &rig.ns,
        json!({"metadata": {"name": "edge"}, "spec": {
            "templateRefs": [{"name": "uplink"}],
            "params": {"uplink": "uplink-ok"},
            "targetRefs": [{"name": "r1"}],
            "rollout": {"mode": "WaitForApplied", "pollInterval": "1s"},
            "confirm": {"timeout": "1m", "check": {"command": uplink_check(), "timeout": "20s"}},
        }}),
    )
    .await;
    let configs = rig.ns.api::<VRouterConfig>();
    let started = std::time::Instant::now();
    let (phase, applied, message) = final_phase(&configs, "edge.r1", Duration::from_secs(180)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
    eprintln!("confirmed apply: Applied after {:?}", started.elapsed());
    let confirmed_running = rig.view.running_config().await.unwrap();
    assert!(String::from_utf8_lossy(&confirmed_running).contains("description uplink-ok"));
    let status = configs.get("edge.r1").await.unwrap().status.unwrap();
    assert_eq!(status.confirmation, None);
    // Saved only after the confirmation, and what was saved is what runs.
    let confirmed = [
        "source /opt/vyatta/etc/functions/script-template",
        "configure",
        "confirm",
        "save",
    ];
    let mut expected = vec![
        "source /opt/vyatta/etc/functions/script-template",
        "configure",
        "load /opt/vyatta/etc/config.boot.default",
        "set interfaces ethernet eth0 description uplink-ok",
        "commit-confirm 1",
        "commit",
    ];
    expected.extend(confirmed);
    let calls = rig.view.calls().await.unwrap();
    let calls: Vec<String> = calls
        .iter()
        .map(|c| vrouter_test_peers::guest::without_commit_comment(c))
        .collect();
    assert_eq!(calls, expected);
    assert_eq!(rig.view.running_config().await.unwrap(), confirmed_running);
    assert_eq!(rig.view.config_boot().await.unwrap(), confirmed_running);
    assert!(!rig.view.confirm_pending().await.unwrap(), "confirm stopped the timer");
    // Past the stub's timer: a confirmed change stays.
    tokio::time::sleep(Duration::from_secs(u64::from(CONFIRM_MINUTE_SECONDS) + 2)).await;
    assert_eq!(rig.view.running_config().await.unwrap(), confirmed_running);

    // Generation 2 cuts the uplink, and adds r2 after r1.
    rig.ns
        .api::<VRouterBinding>()
        .patch(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "params": {"uplink": "cut"},
                "targetRefs": [{"name": "r1"}, {"name": "r2"}],
            }})),
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let status = wait_for("edge.r1 to be RolledBack", Duration::from_secs(240), || async {
        let status = configs.get("edge.r1").await.ok()?.status?;
        let applied = condition(&status.conditions, "Applied")?;
        (applied.1 == "RolledBack" || applied.1 == "RollbackFailed").then_some(status)
    })
    .await;
    eprintln!("failed check: verdict after {:?}", started.elapsed());
    let applied = condition(&status.conditions, "Applied").unwrap();
    assert_eq!(applied, ("False".into(), "RolledBack".into()), "{}", status.message);
    assert_eq!(status.phase, Phase::Failed);
    let check = uplink_check().join(" ");
    assert!(
        status
            .message
            .starts_with(&format!("not confirmed: check `{check}` exited with code 1"))
            && status
                .message
                .ends_with("the router rolled back to its previous running config"),
        "{}",
        status.message
    );
    assert_eq!(status.confirmation, None);
    // The guest's own timer put generation 1 back; nothing was confirmed or saved.
    assert_eq!(rig.view.running_config().await.unwrap(), confirmed_running);
    assert_eq!(rig.view.config_boot().await.unwrap(), confirmed_running);
    let raw_calls = rig.view.calls().await.unwrap();
    let calls: Vec<String> = raw_calls
        .iter()
        .map(|c| vrouter_test_peers::guest::without_commit_comment(c))
        .collect();
    let second = &calls[expected.len()..];
    assert_eq!(
        second,
        [
            "source /opt/vyatta/etc/functions/script-template",
            "configure",
            "load /opt/vyatta/etc/config.boot.default",
            "set interfaces ethernet eth0 description cut",
            "commit-confirm 1",
            "commit",
            "revert_soft",
        ]
    );
    // Only the confirmed commit reached the router's commit log: the
    // reverted one waited for a `confirm` that never came.
    let log = rig.view.commit_log().await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].comment.starts_with(&format!(
            "vrouter-operator binding={ns}/edge config={ns}/edge.r1 generation=1 apply=g1-",
            ns = rig.ns.name()
        )),
        "{log:?}"
    );
    // The rollout halts at r1: r2's config is never written.
    let binding = wait_for("the rollout to halt", Duration::from_secs(60), || async {
        let binding = rig.ns.api::<VRouterBinding>().get("edge").await.ok()?;
        let ready = condition(&binding.status.as_ref()?.conditions, "Ready")?;
        (ready.1 == "RolloutHalted").then_some(binding)
    })
    .await;
    let ready = condition(&binding.status.unwrap().conditions, "Ready").unwrap();
    assert_eq!(ready.0, "False");
    assert!(configs.get_opt("edge.r2").await.unwrap().is_none());
    // A rollback is no reboot to re-apply for: the config stays RolledBack.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = configs.get("edge.r1").await.unwrap().status.unwrap();
    assert_eq!(condition(&later.conditions, "Applied").unwrap().1, "RolledBack");
    assert_eq!(
        rig.view.calls().await.unwrap(),
        raw_calls,
        "nothing ran in the guest since"
    );
}

/// The config `name` settled Applied at a generation above `after`.
async fn applied_after(configs: &Api<VRouterConfig>, name: &str, after: i64) -> i64 {
    wait_for(
        &format!("{name} applied after generation {after}"),
        Duration::from_secs(240),
        || async {
            let config = configs.get_opt(name).await.ok()??;
            let generation = config.metadata.generation?;
            let status = config.status?;
            assert_ne!(status.phase, Phase::Failed, "{name}: {}", status.message);
            (generation > after && status.phase == Phase::Applied && status.observed_generation == generation)
                .then_some(generation)
        },
    )
    .await
}

/// `vrouter-operator ARGS` as a user runs it, with the admin kubeconfig.
async fn operator_cli(args: &[&str]) -> String {
    let kubeconfig = TestEnv::shared().await.kubeconfig_path().to_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn a_rollback_puts_the_first_revision_back_on_a_real_guest() {
    let guest = PVE_GUEST.lease();
    let rig = proxmox_rig("real-rollback", &guest, &[], "60s").await;
    let ns = rig.ns.name().to_owned();
    let configs = rig.ns.api::<VRouterConfig>();
    let commands = |host: &str| format!("set system host-name {host}\n");
    create::<VRouterConfig>(
        &rig.ns,
        json!({"metadata": {"name": "direct"}, "spec": {"targetRef": {"name": "r1"}, "commands": commands("first")}}),
    )
    .await;
    let mut generation = applied_after(&configs, "direct", 0).await;
    for host in ["second", "third"] {
        let patch = json!({"spec": {"commands": commands(host)}});
        configs
            .patch("direct", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        generation = applied_after(&configs, "direct", generation).await;
    }
    let running = String::from_utf8(rig.view.running_config().await.unwrap()).unwrap();
    assert!(running.contains("host-name third"), "{running}");
    let listed = operator_cli(&["history", "direct", "-n", &ns]).await;
    assert_eq!(listed.lines().count(), 4, "a header and three revisions: {listed}");

    operator_cli(&["rollback", "direct", "-n", &ns, "--to-revision", "1"]).await;
    applied_after(&configs, "direct", generation).await;
    // Read back from the guest: revision 1's config runs there again.
    let running = String::from_utf8(rig.view.running_config().await.unwrap()).unwrap();
    assert!(
        running.contains("host-name first") && !running.contains("host-name third"),
        "{running}"
    );
    let listed = wait_for("the rollback's revision", Duration::from_secs(30), || async {
        let listed = operator_cli(&["history", "direct", "-n", &ns]).await;
        (listed.lines().count() == 5).then_some(listed)
    })
    .await;
    let last: Vec<&str> = listed.lines().last().unwrap().split('\t').collect();
    assert_eq!(
        (last[0], last[2], last[6]),
        ("4", "Applied", "rollback to 1"),
        "{listed}"
    );
}
