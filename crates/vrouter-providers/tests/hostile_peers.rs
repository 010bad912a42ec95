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
    s.trust.insecure_skip_verify = true;
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

const CONFIG_BOOT: &str = "/config/config.boot";

/// A `guest-file-read` reply line carrying `data` at once, as valid as a
/// real one: the count matches and the file ends there.
fn read_reply(data: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    format!(
        r#"{{"return": {{"count": {}, "buf-b64": "{b64}", "eof": true}}}}"#,
        data.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn virsh_output_past_its_cap_is_refused_not_held() {
    // libvirt never prints an agent reply over 10 MiB; the in-test virsh
    // does, so this is what a broken or hostile launcher would send.
    let agent = HostileAgent::start();
    let api = kubevirt_api(&agent).await;
    let provider = kubevirt_provider(&api);
    agent.set_file(CONFIG_BOOT, FileAnswer::RawReply(read_reply(&vec![b'x'; 13 << 20])));
    let error = provider
        .read_startup_config()
        .await
        .expect_err("a 17 MiB virsh answer was taken")
        .to_string();
    let cap = vrouter_providers::kubevirt::virsh::MAX_VIRSH_STDOUT_BYTES;
    assert!(error.contains(&format!("more than {cap} bytes on stdout")), "{error}");

    // Under the cap, the same kind of answer is read.
    agent.set_file(CONFIG_BOOT, FileAnswer::RawReply(read_reply(b"system {\n}\n")));
    assert_eq!(provider.read_startup_config().await.unwrap(), b"system {\n}\n");
}

#[tokio::test]
async fn a_file_dripping_one_byte_per_read_ends_at_the_read_deadline() {
    let agent = HostileAgent::start();
    let api = kubevirt_api(&agent).await;
    let provider = KubeVirtProvider::new(
        api.client(),
        "vyos-a",
        "routers",
        GuestPaths::default(),
        timing(),
        KubeVirtOptions {
            read_deadline: Duration::from_secs(2),
            ..KubeVirtOptions::default()
        },
    )
    .unwrap();
    // Each read is answered well within the call timeout, one byte at a
    // time: 400 bytes would take over 40 s.
    agent.set_file(
        CONFIG_BOOT,
        FileAnswer::Drip {
            content: vec![b'a'; 400],
            every: Duration::from_millis(100),
        },
    );
    let error = provider
        .read_startup_config()
        .await
        .expect_err("the drip was read to its end")
        .to_string();
    assert!(error.contains("refusing a file that arrives this slowly"), "{error}");
    assert!(error.contains(CONFIG_BOOT), "{error}");
    assert!(agent.reads() < 400, "{} reads", agent.reads());
}

#[tokio::test]
async fn a_proxmox_answer_past_its_cap_is_refused_and_one_within_it_is_read() {
    let agent = HostileAgent::start();
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    pve.add_vm(VMID, "pve1", agent.socket_path());
    let provider = proxmox_provider(&pve);
    // Proxmox sends each control byte as six characters (`\u0001`): 6 MiB
    // of them is a 36 MiB answer.
    agent.set_file(CONFIG_BOOT, FileAnswer::Content(vec![1u8; 6 << 20]));
    let error = provider
        .read_startup_config()
        .await
        .expect_err("a 36 MiB answer was read")
        .to_string();
    assert!(
        error.contains("the response body is larger than 35651584 bytes"),
        "{error}"
    );
    // Every byte above 0x7F is two bytes of UTF-8 in the answer: 4 MiB of
    // them is 8 MiB, read back exactly.
    let high: Vec<u8> = (0..4 << 20).map(|i| 0x80 | (i % 128) as u8).collect();
    agent.set_file(CONFIG_BOOT, FileAnswer::Content(high.clone()));
    assert!(provider.read_startup_config().await.unwrap() == high);
}
