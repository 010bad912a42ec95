//! The KubeVirt and Proxmox providers against real guests, with the
//! operator's production guest paths (`/bin/vbash`, `/run/vrouter-operator`,
//! `/config/config.boot`, `/usr/bin/systemctl`, `/etc/os-release`):
//!
//! - Proxmox VE: the in-test API relays each agent call to the guest's QEMU
//!   chardev socket the way qemu-server does;
//! - KubeVirt: the in-test Kubernetes API runs the real `virsh` the
//!   provider asked for in a real libvirtd's container, and libvirt's agent
//!   channel reaches the guest.
//!
//! The same scenarios run over both: one conformance check per provider,
//! each on its own guest.

use std::sync::Arc;
use std::time::Duration;

use vrouter_providers::ApplyId;
use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider};
use vrouter_providers::proxmox::{ApiToken, ProxmoxProvider, ProxmoxSettings};
use vrouter_providers::{ApplyRecord, ExecStatus, GuestFlavor, GuestPaths, GuestTiming, Provider, ProviderError};
use vrouter_qga::Transport;
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::vm::router::{DEFAULT_CONFIG_BOOT, RouterView, router_overlay};
use vrouter_test_peers::vm::{ChardevTransport, Domain, Libvirt, QemuGuest, SharedGuest, VirshTransport};
use vrouter_test_peers::wait_for_exit;

const BOOT_BOUND: Duration = Duration::from_secs(180);
const TOKEN_ID: &str = "root@pam!vrouter";
const TOKEN_SECRET: &str = "0d9c3f52-real-guest-secret";
const VMID: i64 = 120;
const NS: &str = "routers";
const VMI: &str = "vyos-kv";
const UID: &str = "0b7e6a4c-1f2d-4e3a-8b9c-0d1e2f3a4b5c";

static PROXMOX_GUEST: SharedGuest<Arc<QemuGuest>> =
    SharedGuest::new(|| QemuGuest::boot("providers-pve", router_overlay("vyos")).map(Arc::new));

/// libvirtd and its domain, named as KubeVirt names a VMI's domain.
struct KubeVirtGuest {
    domain: Domain,
}

static KUBEVIRT_GUEST: SharedGuest<KubeVirtGuest> = SharedGuest::new(|| {
    let libvirt = Arc::new(Libvirt::start()?);
    let domain = libvirt.start_domain(&format!("{NS}_{VMI}"), router_overlay("vyos"))?;
    Ok(KubeVirtGuest { domain })
});

fn timing() -> GuestTiming {
    GuestTiming {
        poll_interval: Duration::from_millis(100),
        command_timeout: Duration::from_secs(30),
    }
}

/// A provider of either kind, and a way into its guest for the test.
struct Rig<T> {
    provider: Box<dyn Provider>,
    view: RouterView<T>,
    _api: Box<dyn std::any::Any>,
}

async fn proxmox_rig(guest: &Arc<QemuGuest>) -> Rig<ChardevTransport> {
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    pve.add_guest_vm(VMID, "pve1", guest.clone());
    let mut settings = ProxmoxSettings::new(vec![pve.url(0)], ApiToken::new(TOKEN_ID, TOKEN_SECRET), VMID);
    settings.trust.insecure_skip_verify = true;
    settings.request_timeout = Duration::from_secs(60);
    settings.paths = GuestPaths::default();
    settings.timing = timing();
    let provider = ProxmoxProvider::new(settings).unwrap();
    Rig {
        provider: Box::new(provider),
        view: RouterView::new(ChardevTransport::new(guest, Duration::from_secs(60))),
        _api: Box::new(pve),
    }
}

async fn kubevirt_rig(guest: &KubeVirtGuest, default_uri: Option<&str>) -> Rig<VirshTransport> {
    guest
        .domain
        .wait_for_agent(BOOT_BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let api = FakeKubeApi::start().await;
    api.put_vmi(NS, VMI, UID, "Running", "node-a");
    api.put_libvirt_launcher_pod(
        NS,
        "virt-launcher-vyos-kv-abcde",
        VMI,
        UID,
        "node-a",
        guest.domain.libvirt().clone(),
        default_uri,
    );
    let provider = KubeVirtProvider::new(
        api.client(),
        VMI,
        NS,
        GuestPaths::default(),
        timing(),
        KubeVirtOptions {
            call_timeout: Duration::from_secs(60),
            api_timeout: Duration::from_secs(30),
            ..KubeVirtOptions::default()
        },
    )
    .unwrap();
    Rig {
        provider: Box::new(provider),
        view: RouterView::new(VirshTransport::new(&guest.domain, Duration::from_secs(60))),
        _api: Box::new(api),
    }
}

const CONFIG: &str = "interfaces {\n    ethernet eth0 {\n        description \"Zürich uplink ✓ $(reboot) `id`\"\n    }\n}\nsystem {\n    host-name r1\n}\n";

/// Readiness, a full apply with its `load` bytes and calls, and both drift
/// reads, with the production guest paths.
async fn apply_and_read_back<T: Transport>(rig: &Rig<T>) {
    rig.view.reset().await.unwrap();
    let p = &rig.provider;
    assert!(p.is_vm_running().await.unwrap());
    p.check_ready().await.unwrap();

    let handle = p
        .exec_script(
            &ApplyId::fresh(1),
            CONFIG,
            "set system host-name r1\nset interfaces ethernet eth0 mtu 1400",
            true,
        )
        .await
        .unwrap();
    let outcome = wait_for_exit(p.as_ref(), handle).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    assert_eq!(rig.view.loaded_configs().await.unwrap(), [CONFIG]);
    assert_eq!(
        rig.view.calls().await.unwrap(),
        [
            "source /opt/vyatta/etc/functions/script-template",
            "configure",
            "load /dev/stdin",
            "set system host-name r1",
            "set interfaces ethernet eth0 mtu 1400",
            "commit",
            "save",
        ]
    );
    let expected_running = format!("{CONFIG}set system host-name r1\nset interfaces ethernet eth0 mtu 1400\n");
    assert_eq!(
        p.read_file(vrouter_qga::constants::CONFIG_BOOT_PATH).await.unwrap(),
        expected_running.as_bytes()
    );
    let show = vrouter_qga::constants::SHOW_RUNNING_CONFIG.map(str::to_owned);
    assert_eq!(p.read_command_output(&show).await.unwrap(), expected_running.as_bytes());
    assert_eq!(rig.view.running_config_reads().await.unwrap(), 1);
}

/// A failing `set` fails the apply although `commit` exits 0.
async fn failed_set_fails_the_apply<T: Transport>(rig: &Rig<T>) {
    rig.view.reset().await.unwrap();
    let handle = rig
        .provider
        .exec_script(
            &ApplyId::fresh(1),
            "",
            "set interfaces ethernet eth0 address INVALID",
            false,
        )
        .await
        .unwrap();
    let outcome = wait_for_exit(rig.provider.as_ref(), handle).await;
    assert_eq!(outcome.exit_code, 0);
    assert!(outcome.failure().unwrap().contains("Set failed"), "{outcome:?}");
    // An empty config loads the router's default; unsaved, config.boot stays.
    assert_eq!(
        rig.view.calls().await.unwrap()[2],
        "load /opt/vyatta/etc/config.boot.default"
    );
    assert_eq!(rig.view.config_boot().await.unwrap(), DEFAULT_CONFIG_BOOT.as_bytes());
}

/// Readiness follows the guest: a DozenOS os-release asks for its own unit;
/// a unit still running makes the router not ready; another OS is refused.
async fn readiness_follows_the_guest<T: Transport>(rig: &Rig<T>) {
    rig.view.reset().await.unwrap();
    let os_release = vrouter_qga::constants::OS_RELEASE_PATH;
    let write = |content: String| async move {
        rig.view
            .agent()
            .write_file(os_release, content.as_bytes())
            .await
            .unwrap()
    };
    write(vrouter_test_peers::guest::os_release("dozenos")).await;
    rig.provider.check_ready().await.unwrap();
    let systemctl_log = rig.view.sh("cat /var/lib/vrouter-test/systemctl.log").await.unwrap();
    assert_eq!(systemctl_log, "show -p SubState --value dozenos-router.service\n");
    // An OS the caller knows from an earlier check is taken, not asked:
    // os-release says vyos now, and the unit checked is still dozenos's.
    write(vrouter_test_peers::guest::os_release("vyos")).await;
    let known = rig
        .provider
        .check_ready_knowing(Some(GuestFlavor::DozenOs))
        .await
        .unwrap();
    assert_eq!(known, Some(GuestFlavor::DozenOs));
    let asked = rig.provider.check_ready_knowing(None).await.unwrap();
    assert_eq!(asked, Some(GuestFlavor::Vyos), "with none known, the guest is asked");
    let systemctl_log = rig.view.sh("cat /var/lib/vrouter-test/systemctl.log").await.unwrap();
    assert_eq!(
        systemctl_log,
        "show -p SubState --value dozenos-router.service\n".repeat(2)
            + "show -p SubState --value vyos-router.service\n"
    );
    write(vrouter_test_peers::guest::os_release("dozenos")).await;

    rig.view.set_substate("running").await.unwrap();
    let error = rig.provider.check_ready().await.unwrap_err();
    assert!(
        matches!(error, ProviderError::NotReady { ref substate, .. } if substate == "running"),
        "{error}"
    );

    // The check and the running config in one guest command: a router not
    // ready is the check's error; a ready one's running config comes with
    // it, byte for byte.
    let running = "interfaces { ethernet eth0 { description \"a 'b' $(c)\" } }\n";
    rig.view
        .agent()
        .write_file("/var/lib/vrouter-test/running.config", running.as_bytes())
        .await
        .unwrap();
    let reads = rig.view.running_config_reads().await.unwrap();
    let error = rig
        .provider
        .check_ready_reading_running(Some(GuestFlavor::DozenOs))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::NotReady { ref substate, .. } if substate == "running"),
        "{error}"
    );
    rig.view.set_substate("exited").await.unwrap();
    let (os, read) = rig
        .provider
        .check_ready_reading_running(Some(GuestFlavor::DozenOs))
        .await
        .unwrap();
    assert_eq!(os, Some(GuestFlavor::DozenOs));
    assert_eq!(read.unwrap(), running.as_bytes());
    assert_eq!(rig.view.running_config_reads().await.unwrap(), reads + 2);
    assert!(
        rig.view
            .sh("cat /var/lib/vrouter-test/systemctl.log")
            .await
            .unwrap()
            .ends_with(&"show -p SubState --value dozenos-router.service\n".repeat(3)),
        "both combined calls ran the check"
    );
    rig.view.set_substate("running").await.unwrap();

    write(vrouter_test_peers::guest::os_release("debian")).await;
    let error = rig.provider.check_ready().await.unwrap_err();
    assert!(matches!(error, ProviderError::UnknownGuestOs { .. }), "{error}");
    write(vrouter_test_peers::guest::os_release("vyos")).await;
    rig.view.set_substate("exited").await.unwrap();
}

/// A config far larger than one write (48 KiB per `guest-file-write`,
/// 46,080 bytes per Proxmox `file-write`) arrives whole: the parts are joined in the guest.
async fn a_large_config_arrives_whole<T: Transport>(rig: &Rig<T>) {
    rig.view.reset().await.unwrap();
    // VyOS's syntax, with few children a node (the guest's `load` runs
    // VyOS's parser, whose time grows with the square of a node's children).
    let mut config = String::from("interfaces {\n");
    for i in 0..300 {
        config.push_str(&format!("    ethernet eth{i} {{\n"));
        for vif in 0..10 {
            config.push_str(&format!(
                "        vif {vif} {{\n            description \"port {i}.{vif} ✓ $(x) `y`\"\n        }}\n"
            ));
        }
        config.push_str("    }\n");
    }
    config.push_str("}\n");
    assert!(config.len() > 200 * 1024);
    let handle = rig
        .provider
        .exec_script(&ApplyId::fresh(1), &config, "", true)
        .await
        .unwrap();
    let outcome = wait_for_exit(rig.provider.as_ref(), handle).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    assert_eq!(rig.view.loaded_configs().await.unwrap(), [config.clone()]);
    assert_eq!(rig.view.config_boot().await.unwrap(), config.as_bytes());
}

/// With `guest-get-osinfo` disabled in the agent, the OS comes from
/// `/etc/os-release` read through the agent.
async fn without_osinfo_the_os_release_file_is_read<T: Transport>(rig: &Rig<T>) {
    let restart_agent = |options: &'static str| async move {
        rig.view
            .sh(&format!(
                "printf '%s' '{options}' >/etc/vrouter-guest/qemu-ga.options; \
                 (sleep 1; kill -KILL $(cat /run/qemu-ga.pid)) >/dev/null 2>&1 &"
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        for _ in 0..120 {
            if rig.view.agent().ping().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("the agent did not come back");
    };
    restart_agent("-b guest-get-osinfo").await;
    let refused = rig.view.agent().os_info().await.unwrap_err();
    assert!(refused.to_string().contains("disabled"), "{refused}");
    rig.provider.check_ready().await.unwrap();
    let systemctl_log = rig.view.sh("cat /var/lib/vrouter-test/systemctl.log").await.unwrap();
    assert!(systemctl_log.ends_with("vyos-router.service\n"), "{systemctl_log}");
    restart_agent("").await;
    rig.view.agent().os_info().await.unwrap();
}

/// A pid the agent never started, or forgot, is a lost result.
async fn an_unknown_pid_is_a_lost_result<T: Transport>(rig: &Rig<T>) {
    let error = rig
        .provider
        .get_exec_status(vrouter_providers::ExecHandle(999_999))
        .await
        .unwrap_err();
    assert!(matches!(error, ProviderError::ExecResultLost { .. }), "{error}");
}

/// A wrapper SIGKILLed in the guest (busybox `sh`, `flock`, `setsid`)
/// while its script commits: its poll is a lost result, the router reports
/// the script running and keeps the next apply waiting until a stop ends
/// it, with its exit recorded.
async fn a_killed_wrappers_script_keeps_the_routers_lock<T: Transport>(rig: &Rig<T>) {
    rig.view.reset().await.unwrap();
    rig.view.set_commit_delay(600).await.unwrap();
    let p = rig.provider.as_ref();
    let (first, second) = (ApplyId::fresh(1), ApplyId::fresh(2));
    let handle = p
        .exec_script(&first, "", "set system host-name r1", false)
        .await
        .unwrap();
    let started = format!("{first} started");
    for attempt in 0.. {
        if rig.view.apply_journal().await.unwrap().contains(&started) {
            break;
        }
        assert!(attempt < 600, "the first apply never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rig.view.sh(&format!("kill -KILL {handle}")).await.unwrap();
    let polled = loop {
        match p.get_exec_status(handle).await {
            Ok(ExecStatus::Running) => tokio::time::sleep(Duration::from_millis(100)).await,
            other => break other,
        }
    };
    assert!(matches!(&polled, Err(e) if e.is_exec_result_lost()), "{polled:?}");
    assert_eq!(p.apply_record(&first).await.unwrap(), ApplyRecord::Running(handle));
    // Its `commit` sleeps before the next apply is made quick.
    let sleeping = "for p in /proc/[0-9]*; do \
                    [ \"$(tr '\\0' ' ' <\"$p/cmdline\" 2>/dev/null)\" = 'sleep 600 ' ] && echo \"$p\"; done; :";
    for attempt in 0.. {
        if !rig.view.sh(sleeping).await.unwrap().is_empty() {
            break;
        }
        assert!(attempt < 600, "the first apply's commit never began");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rig.view.set_commit_delay(0).await.unwrap();
    let next = p
        .exec_script(&second, "", "set system host-name r2", false)
        .await
        .unwrap();
    loop {
        match p.apply_record(&second).await.unwrap() {
            ApplyRecord::Unknown => tokio::time::sleep(Duration::from_millis(100)).await,
            claimed => {
                assert!(matches!(claimed, ApplyRecord::Running(_)), "{claimed:?}");
                break;
            }
        }
    }
    // Claimed and waiting: the journal has the first's start only (a
    // second start before the first's end panics in `apply_runs`).
    assert_eq!(rig.view.apply_runs().await.unwrap(), None);
    p.stop_apply(&first).await.unwrap();
    let outcome = wait_for_exit(p, next).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    let record = p.apply_record(&first).await.unwrap();
    assert!(
        matches!(&record, ApplyRecord::Finished(o) if o.exit_code > 128),
        "{record:?}"
    );
    assert_eq!(
        rig.view.apply_runs().await.unwrap(),
        Some(vec![first.to_string(), second.to_string()])
    );
}

/// The guest's `load` reads with VyOS's own parser: a config VyOS refuses
/// reaches the apply's output with VyOS's message (`ConfigTree`'s prefix,
/// libvyosconfig's text), fails the apply, and neither the running nor the
/// saved config changes.
async fn a_config_vyos_refuses_is_not_loaded<T: Transport>(rig: &Rig<T>) {
    rig.view.reset().await.unwrap();
    let config = "system {\n    host-name \"r2\n}\n";
    let handle = rig
        .provider
        .exec_script(&ApplyId::fresh(1), config, "", true)
        .await
        .unwrap();
    let outcome = wait_for_exit(rig.provider.as_ref(), handle).await;
    assert!(
        outcome.stderr.contains(
            "Failed to parse config: Syntax error on line 2, character 21: \
             Quoted string is missing the closing double quote\n"
        ),
        "{outcome:?}"
    );
    assert!(
        !outcome.succeeded(),
        "a config VyOS refused counted as applied: {outcome:?}"
    );
    assert_eq!(rig.view.loaded_configs().await.unwrap(), [config]);
    assert_eq!(rig.view.running_config().await.unwrap(), DEFAULT_CONFIG_BOOT.as_bytes());
    assert_eq!(rig.view.config_boot().await.unwrap(), DEFAULT_CONFIG_BOOT.as_bytes());
}

/// What every provider must do over a real guest's agent channel.
async fn every_scenario<T: Transport>(rig: &Rig<T>) {
    apply_and_read_back(rig).await;
    a_killed_wrappers_script_keeps_the_routers_lock(rig).await;
    failed_set_fails_the_apply(rig).await;
    a_config_vyos_refuses_is_not_loaded(rig).await;
    readiness_follows_the_guest(rig).await;
    an_unknown_pid_is_a_lost_result(rig).await;
    a_large_config_arrives_whole(rig).await;
    without_osinfo_the_os_release_file_is_read(rig).await;
}

#[tokio::test]
async fn proxmox_over_the_qemu_chardev() {
    let guest = PROXMOX_GUEST.lease();
    let rig = proxmox_rig(&guest).await;
    every_scenario(&rig).await;
}

#[tokio::test]
async fn kubevirt_through_virsh_and_libvirtd_as_root() {
    let guest = KUBEVIRT_GUEST.lease();
    let rig = kubevirt_rig(&guest, None).await;
    every_scenario(&rig).await;
}

/// The apply script (here holding a pre-shared key) reaches the guest on
/// the execs' stdin: every exec URL, which audit logs record, is the fixed
/// shell and the domain, whatever the agent command.
#[tokio::test]
async fn kubevirt_agent_commands_never_travel_in_the_exec_url() {
    let guest = KUBEVIRT_GUEST.lease();
    let rig = kubevirt_rig(&guest, None).await;
    rig.view.reset().await.unwrap();
    let secret = "pre-shared-secret Xq7-not-in-any-url";
    let config = format!("vpn {{\n    ipsec {{\n        {secret}\n    }}\n}}\n");
    let handle = rig
        .provider
        .exec_script(&ApplyId::fresh(1), &config, "", true)
        .await
        .unwrap();
    let outcome = wait_for_exit(rig.provider.as_ref(), handle).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    assert_eq!(rig.view.loaded_configs().await.unwrap(), std::slice::from_ref(&config));
    let api = rig._api.downcast_ref::<FakeKubeApi>().unwrap();
    let execs = api.execs();
    let fixed = vrouter_providers::kubevirt::virsh::exec_argv(&format!("{NS}_{VMI}"));
    assert!(!execs.is_empty());
    for exec in &execs {
        assert_eq!(exec.command, fixed, "{}", exec.uri);
    }
    // The script did travel, base64 in a guest-file-write on stdin.
    let written: Vec<u8> = execs
        .iter()
        .filter_map(|e| serde_json::from_slice::<serde_json::Value>(e.stdin.strip_suffix(b"\n")?).ok())
        .filter(|c| c["execute"] == "guest-file-write")
        .flat_map(|c| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(c["arguments"]["buf-b64"].as_str().unwrap())
                .unwrap()
        })
        .collect();
    assert!(String::from_utf8_lossy(&written).contains(secret));
}

#[tokio::test]
async fn kubevirt_through_an_explicit_unix_socket_uri() {
    let guest = KUBEVIRT_GUEST.lease();
    let rig = kubevirt_rig(&guest, Some("qemu+unix:///system?socket=/var/run/libvirt/libvirt-sock")).await;
    apply_and_read_back(&rig).await;
}
