//! The KubeVirt provider against an in-test Kubernetes API: VMI and pod
//! reads, and pods/exec over the websocket subprotocol, where
//! `virsh qemu-agent-command` is carried out against a real qemu-ga.

use std::time::Duration;

use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider};
use vrouter_providers::{GuestTiming, Provider, ProviderError};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::{AgentProcess, start_agent, wait_for_exit};

const NS: &str = "routers";
const VM: &str = "vyos-a";
const UID: &str = "6f0c1a52-0b1e-4f3a-9c1d-2a3b4c5d6e7f";

struct Guest {
    agent: AgentProcess,
    sandbox: GuestSandbox,
    api: FakeKubeApi,
}

async fn guest(os_id: &str) -> Guest {
    let agent = start_agent();
    let sandbox = GuestSandbox::new(agent.dir(), os_id);
    let api = FakeKubeApi::start().await;
    api.put_vmi(NS, VM, UID, "Running", "node-a");
    api.put_launcher_pod(
        NS,
        "virt-launcher-vyos-a-x1",
        VM,
        UID,
        "node-a",
        "Running",
        Some(agent.socket_path()),
    );
    Guest { agent, sandbox, api }
}

impl Guest {
    fn provider(&self) -> KubeVirtProvider {
        KubeVirtProvider::new(
            self.api.client(),
            VM,
            NS,
            self.sandbox.paths(),
            GuestTiming {
                poll_interval: Duration::from_millis(20),
                command_timeout: Duration::from_secs(20),
            },
            KubeVirtOptions {
                call_timeout: Duration::from_secs(20),
                api_timeout: Duration::from_secs(20),
            },
        )
        .unwrap()
    }
}

const CONFIG: &str = "interfaces {\n    ethernet eth0 {\n        description \"Zürich ✓\"\n    }\n}\n";

#[tokio::test]
async fn full_apply_path_through_virsh_in_the_launcher_pod() {
    let g = guest("vyos").await;
    let p = g.provider();
    assert!(p.is_vm_running().await.unwrap());
    p.check_ready().await.unwrap();
    assert_eq!(
        g.sandbox.systemctl_calls(),
        ["show -p SubState --value vyos-router.service"]
    );

    let handle = p.exec_script(CONFIG, "set system host-name a", true).await.unwrap();
    let outcome = wait_for_exit(&p, handle).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    assert_eq!(g.sandbox.loaded_config().as_deref(), Some(CONFIG.as_bytes()));
    assert_eq!(
        g.sandbox.calls(),
        [
            "source /opt/vyatta/etc/functions/script-template",
            "configure",
            "load /dev/stdin",
            "set system host-name a",
            "commit",
            "save",
        ]
    );
    let err = p.get_exec_status(handle).await.unwrap_err();
    assert!(err.is_exec_result_lost(), "{err}");

    let execs = g.api.execs();
    assert!(!execs.is_empty());
    for e in &execs {
        assert_eq!(e.container, "compute");
        assert_eq!(e.pod, "virt-launcher-vyos-a-x1");
        assert_eq!(&e.command[..3], ["virsh", "qemu-agent-command", "routers_vyos-a"]);
    }
}

#[tokio::test]
async fn failure_marker_fails_the_apply_and_files_read_back_exactly() {
    let g = guest("dozenos").await;
    let p = g.provider();
    p.check_ready().await.unwrap();
    assert_eq!(
        g.sandbox.systemctl_calls(),
        ["show -p SubState --value dozenos-router.service"]
    );
    let outcome = wait_for_exit(&p, p.exec_script("", "set interfaces INVALID", true).await.unwrap()).await;
    assert_eq!(outcome.exit_code, 0);
    assert!(outcome.failure().unwrap().contains("Set failed"), "{outcome:?}");

    let mut content = CONFIG.as_bytes().to_vec();
    content.extend_from_slice(b"\x00\xff binary\n");
    let path = g.sandbox.put_file("config.boot", &content);
    assert_eq!(p.read_file(&path).await.unwrap(), content);

    // The running config comes from a command, through the same carrier.
    let saved = wait_for_exit(&p, p.exec_script(CONFIG, "", true).await.unwrap()).await;
    assert_eq!(saved.failure(), None, "{saved:?}");
    let running = p.read_command_output(&g.sandbox.show_config_command()).await.unwrap();
    assert_eq!(running, CONFIG.as_bytes());
    let err = p
        .read_command_output(&["/bin/sh".into(), "-c".into(), "echo no >&2; exit 3".into()])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::GuestCommand { exit_code: 3, stderr, .. } if stderr == "no"),
        "{err}"
    );
}

#[tokio::test]
async fn not_ready_until_the_router_unit_exited() {
    let g = guest("vyos").await;
    g.sandbox.set_substate("start");
    let err = g.provider().check_ready().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::NotReady { substate, .. } if substate == "start"),
        "{err}"
    );
}

#[tokio::test]
async fn migration_picks_the_pod_on_the_vmi_node() {
    let g = guest("vyos").await;
    // The migration target pod runs too, but the VMI still lives on node-a;
    // its "virsh" has no agent, so using it would fail.
    g.api
        .put_launcher_pod(NS, "virt-launcher-vyos-a-y2", VM, UID, "node-b", "Running", None);
    g.provider().check_ready().await.unwrap();
    assert!(g.api.execs().iter().all(|e| e.pod == "virt-launcher-vyos-a-x1"));

    // Handover: the VMI now runs on node-b, served by the second pod.
    g.api.put_vmi(NS, VM, UID, "Running", "node-b");
    g.api
        .put_launcher_pod(NS, "virt-launcher-vyos-a-x1", VM, UID, "node-a", "Running", None);
    g.api.put_launcher_pod(
        NS,
        "virt-launcher-vyos-a-y2",
        VM,
        UID,
        "node-b",
        "Running",
        Some(g.agent.socket_path()),
    );
    let before = g.api.execs().len();
    g.provider().check_ready().await.unwrap();
    assert!(
        g.api.execs()[before..]
            .iter()
            .all(|e| e.pod == "virt-launcher-vyos-a-y2")
    );
}

#[tokio::test]
async fn missing_or_finished_vmi_is_not_running() {
    let g = guest("vyos").await;
    let p = g.provider();
    g.api.put_vmi(NS, VM, UID, "Succeeded", "node-a");
    assert!(!p.is_vm_running().await.unwrap());
    g.api.put_vmi(NS, VM, UID, "Failed", "node-a");
    assert!(!p.is_vm_running().await.unwrap());
    g.api.remove_vmi(NS, VM);
    assert!(!p.is_vm_running().await.unwrap());
    let err = p.check_ready().await.unwrap_err();
    assert!(err.is_vm_not_found(), "{err}");
}

#[tokio::test]
async fn agent_not_connected_is_reported_as_unavailable() {
    let g = guest("vyos").await;
    g.api
        .put_launcher_pod(NS, "virt-launcher-vyos-a-x1", VM, UID, "node-a", "Running", None);
    let err = g.provider().check_ready().await.unwrap_err();
    assert!(matches!(err, ProviderError::AgentUnavailable { .. }), "{err}");
}

#[tokio::test]
async fn script_larger_than_one_agent_write_arrives_whole() {
    let g = guest("vyos").await;
    let p = g.provider();
    // ~150 KiB: several 48 KiB guest-file-write chunks, each one virsh exec.
    let mut config = String::from("firewall {\n");
    for i in 0..3000 {
        config.push_str(&format!(
            "    group address-group g{i} {{ address 198.51.100.{} }} # ünïcode\n",
            i % 250
        ));
    }
    config.push_str("}\n");
    assert!(config.len() > 3 * 48 * 1024);
    let outcome = wait_for_exit(&p, p.exec_script(&config, "", true).await.unwrap()).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    assert_eq!(g.sandbox.loaded_config().as_deref(), Some(config.as_bytes()));
    let writes = g
        .api
        .execs()
        .iter()
        .filter(|e| e.command[3].contains("guest-file-write"))
        .count();
    assert!(writes >= 4, "{writes} writes");
}
