//! Costs the operator pays per reconcile: choosing a launcher pod, decoding
//! Proxmox agent data, and one round trip through each carrier against the
//! in-test peers with a real qemu-ga (TLS handshake, pod exec, agent call).
//! Budgets are in the crate README.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use vrouter_providers::kubevirt::launcher::{LABEL_CREATED_BY, VmiView, choose_launcher};
use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider};
use vrouter_providers::proxmox::api::latin1_to_bytes;
use vrouter_providers::proxmox::{ApiToken, ProxmoxProvider, ProxmoxSettings};
use vrouter_providers::{GuestTiming, Provider};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::start_agent;

fn pods(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("virt-launcher-r-{i}")),
                labels: Some([(LABEL_CREATED_BY.to_string(), format!("uid-{}", i % 2))].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(format!("node-{i}")),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(if i % 3 == 0 { "Succeeded" } else { "Running" }.into()),
                ..Default::default()
            }),
        })
        .collect()
}

fn pure(c: &mut Criterion) {
    let list = pods(200);
    let vmi = VmiView {
        uid: Some("uid-1".into()),
        node: Some("node-101".into()),
    };
    c.bench_function("kubevirt/choose_launcher_200_pods", |b| {
        b.iter(|| choose_launcher(black_box(&list), black_box(&vmi)).unwrap())
    });
    let text: String = (0..1024 * 1024).map(|i| char::from((i % 256) as u8)).collect();
    c.bench_function("proxmox/latin1_to_bytes_1MiB", |b| {
        b.iter(|| latin1_to_bytes(black_box(&text)))
    });
}

fn round_trips(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let agent = start_agent();
    let sandbox = GuestSandbox::new(agent.dir(), "vyos");
    let config_boot = sandbox.put_file("config.boot", &vec![b'x'; 16 * 1024]);
    let timing = GuestTiming {
        poll_interval: Duration::from_millis(5),
        command_timeout: Duration::from_secs(10),
    };

    let pve = rt.block_on(FakeProxmox::start("root@pam!bench", "secret"));
    pve.add_vm(100, "pve1", agent.socket_path());
    let mut settings = ProxmoxSettings::new(vec![pve.url(0)], ApiToken::new("root@pam!bench", "secret"), 100);
    settings.trust.insecure_skip_verify = true;
    settings.cached_node = "pve1".into();
    settings.paths = sandbox.paths();
    settings.timing = timing;
    let proxmox = ProxmoxProvider::new(settings).unwrap();
    c.bench_function("proxmox/is_vm_running", |b| {
        b.iter(|| rt.block_on(proxmox.is_vm_running()).unwrap())
    });
    c.bench_function("proxmox/read_file_16KiB", |b| {
        b.iter(|| rt.block_on(proxmox.read_file(&config_boot)).unwrap())
    });
    c.bench_function("proxmox/check_ready", |b| {
        b.iter(|| rt.block_on(proxmox.check_ready()).unwrap())
    });

    // A second agent: the fake Proxmox keeps its connection to the first one.
    let kv_agent = start_agent();
    let kv_sandbox = GuestSandbox::new(kv_agent.dir(), "vyos");
    let kv_config_boot = kv_sandbox.put_file("config.boot", &vec![b'x'; 16 * 1024]);
    let api = rt.block_on(FakeKubeApi::start());
    api.put_vmi("ns", "r", "uid", "Running", "node-a");
    api.put_launcher_pod(
        "ns",
        "virt-launcher-r",
        "r",
        "uid",
        "node-a",
        "Running",
        Some(kv_agent.socket_path()),
    );
    let _guard = rt.enter();
    let kubevirt = KubeVirtProvider::new(
        api.client(),
        "r",
        "ns",
        kv_sandbox.paths(),
        timing,
        KubeVirtOptions::default(),
    )
    .unwrap();
    c.bench_function("kubevirt/read_file_16KiB", |b| {
        b.iter(|| rt.block_on(kubevirt.read_file(&kv_config_boot)).unwrap())
    });
    c.bench_function("kubevirt/check_ready", |b| {
        b.iter(|| rt.block_on(kubevirt.check_ready()).unwrap())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3));
    targets = pure, round_trips
}
criterion_main!(benches);
