//! Guest agents that answer what no real `qemu-ga` would, on the real
//! channel: a stand-in agent speaking the QGA protocol on a unix socket
//! ([`HostileAgent`]), reached through the in-test Proxmox VE API (as
//! qemu-server reaches it) and through the in-test KubeVirt exec (as virsh
//! does). Whatever the guest answers, the provider returns: an error that
//! names what is wrong, in bounded length, never a panic.

mod common;

use std::time::Duration;

use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider};
use vrouter_providers::proxmox::{ApiToken, ProxmoxProvider, ProxmoxSettings};
use vrouter_providers::{GuestPaths, Provider};
use vrouter_test_peers::hostile_agent::{FileAnswer, HostileAgent};
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::FakeProxmox;

use common::timing;

const TOKEN_ID: &str = "root@pam!vrouter";
const TOKEN_SECRET: &str = "5f1c0b1e-7d2a-4c59-9a55-secret-value";
const VMID: i64 = 100;
const UPTIME: &str = "/proc/uptime";

/// The longest provider error a hostile answer may produce: a reason and
/// an excerpt, never the answer itself.
const MAX_ERROR_CHARS: usize = 600;

/// `/proc/uptime` contents a hostile guest may answer, each with why it
/// is wrong.
fn hostile_uptimes() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("beyond any Duration", b"1e20 0\n".to_vec()),
        ("one past u64::MAX seconds", b"18446744073709551616 0\n".to_vec()),
        ("the largest f64", b"1.7976931348623157e308 0\n".to_vec()),
        ("NaN", b"NaN 0\n".to_vec()),
        ("negative", b"-1 0\n".to_vec()),
        ("infinite", b"inf 0\n".to_vec()),
        ("empty", Vec::new()),
        ("invalid UTF-8", b"\xff\xfe\xfd 0\n".to_vec()),
        ("a megabyte of digits", vec![b'9'; 1 << 20]),
        ("a megabyte of text", "é".repeat(1 << 19).into_bytes()),
    ]
}

fn proxmox_provider(pve: &FakeProxmox) -> ProxmoxProvider {
    let mut s = ProxmoxSettings::new(vec![pve.url(0)], ApiToken::new(TOKEN_ID, TOKEN_SECRET), VMID);
    s.insecure_skip_tls_verify = true;
    s.cached_node = "pve1".into();
    s.connect_timeout = Duration::from_millis(500);
    // The in-test API (a debug build) takes its time to build answers of
    // tens of MiB; the bound under test is their size.
    s.request_timeout = Duration::from_secs(120);
    s.paths = GuestPaths::default();
    s.timing = timing();
    ProxmoxProvider::new(s).unwrap()
}

fn kubevirt_provider(api: &FakeKubeApi) -> KubeVirtProvider {
    KubeVirtProvider::new(
        api.client(),
        "vyos-a",
        "routers",
        GuestPaths::default(),
        timing(),
        KubeVirtOptions {
            call_timeout: Duration::from_secs(20),
            api_timeout: Duration::from_secs(20),
            ..KubeVirtOptions::default()
        },
    )
    .unwrap()
}

async fn kubevirt_api(agent: &HostileAgent) -> FakeKubeApi {
    let api = FakeKubeApi::start().await;
    let uid = "6f0c1a52-0b1e-4f3a-9c1d-2a3b4c5d6e7f";
    api.put_vmi("routers", "vyos-a", uid, "Running", "node-a");
    api.put_launcher_pod(
        "routers",
        "virt-launcher-vyos-a-x1",
        "vyos-a",
        uid,
        "node-a",
        "Running",
        Some(agent.socket_path()),
    );
    api
}

/// Each hostile uptime is refused with an error naming the file, in
/// bounded length; an honest one after them still reads.
async fn uptimes_are_refused_not_panicked_on(carrier: &str, agent: &HostileAgent, provider: &dyn Provider) {
    for (why, content) in hostile_uptimes() {
        agent.set_file(UPTIME, FileAnswer::Content(content));
        let error = provider
            .guest_uptime()
            .await
            .expect_err(&format!("{carrier}: {why} was taken as an uptime"))
            .to_string();
        assert!(error.contains(UPTIME), "{carrier}: {why}: {error}");
        assert!(
            error.chars().count() <= MAX_ERROR_CHARS,
            "{carrier}: {why}: {} chars: {}…",
            error.chars().count(),
            error.chars().take(200).collect::<String>()
        );
    }
    agent.set_file(UPTIME, FileAnswer::Content(b"3600.25 10.00\n".to_vec()));
    assert_eq!(
        provider.guest_uptime().await.unwrap(),
        Duration::from_millis(3_600_250),
        "{carrier}"
    );
}

#[tokio::test]
async fn hostile_uptimes_through_proxmox_are_refused_in_bounded_length() {
    let agent = HostileAgent::start();
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    pve.add_vm(VMID, "pve1", agent.socket_path());
    uptimes_are_refused_not_panicked_on("proxmox", &agent, &proxmox_provider(&pve)).await;
}

#[tokio::test]
async fn hostile_uptimes_through_kubevirt_are_refused_in_bounded_length() {
    let agent = HostileAgent::start();
    let api = kubevirt_api(&agent).await;
    uptimes_are_refused_not_panicked_on("kubevirt", &agent, &kubevirt_provider(&api)).await;
}
