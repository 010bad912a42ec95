//! The KubeVirt provider against an in-test Kubernetes API: VMI and pod
//! reads, and pods/exec over the websocket subprotocol, where
//! `virsh qemu-agent-command` is carried out against a real qemu-ga.

mod common;

use vrouter_providers::ApplyId;
use vrouter_providers::kubevirt::virsh;
use vrouter_providers::{Provider, ProviderError};
use vrouter_test_peers::wait_for_exit;

use common::CONFIG;
use common::kubevirt::{NS, UID, VM, guest};

#[tokio::test]
async fn full_apply_path_through_virsh_in_the_launcher_pod() {
    // What the apply does is the contract every provider keeps
    // (tests/conformance.rs); here, the way KubeVirt carries it.
    let g = guest("vyos").await;
    let p = g.provider();
    p.check_ready().await.unwrap();
    let handle = p
        .exec_script(&ApplyId::fresh(1), CONFIG, "set system host-name a", true)
        .await
        .unwrap();
    let outcome = wait_for_exit(&p, handle).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");

    let execs = g.api.execs();
    assert!(!execs.is_empty());
    for e in &execs {
        assert_eq!(e.container, "compute");
        assert_eq!(e.pod, "virt-launcher-vyos-a-x1");
        // The agent command travels on stdin; the URL names only the shell
        // that reads it and the domain.
        assert_eq!(e.command, virsh::exec_argv("routers_vyos-a"));
        assert!(
            e.stdin.starts_with(br#"{"execute":"#),
            "{:?}",
            String::from_utf8_lossy(&e.stdin)
        );
        assert!(!e.uri.contains("execute"), "{}", e.uri);
    }
}

#[tokio::test]
async fn a_command_reads_back_its_output_and_a_failed_one_is_named() {
    let g = guest("vyos").await;
    let p = g.provider();
    // The running config comes from a command, through the same carrier.
    let saved = wait_for_exit(&p, p.exec_script(&ApplyId::fresh(1), CONFIG, "", true).await.unwrap()).await;
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
