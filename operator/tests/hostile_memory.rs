//! Peak memory of the operator under hostile guests: the released binary as
//! its own process, against the real API server, managing Proxmox routers
//! whose guests answer at the caps the operator allows (a config.boot of
//! the largest readable size, a running config as large, both as Proxmox
//! sends bytes above 0x7F: two bytes each, the largest answer under the
//! response cap), all read at once by drift detection at its default
//! concurrency (their first answers held by the Proxmox API until all are
//! ready, then sent together), beside routers whose agents answer one byte
//! at a time and
//! routers whose commands never exit. The operator's own peak RSS
//! (`VmHWM` in `/proc/<pid>/status`) must stay under the Helm chart's
//! memory limit with a margin.
//!
//! `cargo xtask bench` runs it in the release profile and reads the figures
//! from `VROUTER_BENCH_OUT`. Knobs (environment): `VROUTER_HOSTILE_BIG` (8
//! routers answering at the caps), `VROUTER_HOSTILE_SLOW` (2),
//! `VROUTER_HOSTILE_NEVER` (2), `VROUTER_HOSTILE_READS` (1: reads of each
//! large config.boot to wait for; drift detection reads each router once
//! per sync), `VROUTER_HOSTILE_AFTER_SECS` (15: how long the operator runs
//! on after them, the slow and never-exiting routers still being tried).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vrouter_api::{VRouterBinding, VRouterTarget, VRouterTemplate};
use vrouter_test_apiserver::TestEnv;
use vrouter_test_peers::hostile_agent::{ExecAnswer, FileAnswer, HostileAgent};
use vrouter_test_peers::instant_guest::InstantGuest;
use vrouter_test_peers::proxmox::FakeProxmox;

use common::create;
use common::replica_process::ReplicaProcess;

/// The chart's memory limit (deploy/helm/vrouter-operator/values.yaml).
const CHART_LIMIT_MIB: f64 = 512.0;
/// The budget: the limit less a quarter, for what this run does not
/// exercise (more watched objects, webhooks, a busier API server).
const BUDGET_MIB: f64 = CHART_LIMIT_MIB * 0.75;

/// A config.boot at the largest readable size, less room for the lines the
/// drift read's command prints before the running config (the agent keeps
/// at most that much output too): every byte above 0x7F, so Proxmox's
/// answer is twice as long, just under the response cap.
fn largest_config() -> Vec<u8> {
    let size = vrouter_qga::constants::MAX_READ_FILE_BYTES - 64 * 1024;
    (0..size).map(|i| 0x80 | (i % 128) as u8).collect()
}

fn knob(name: &str, default: u64) -> usize {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default as usize,
    }
}

/// The end of the operator's log, for a failure message.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().rev().take(30).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the operator's /proc status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status: a process that has exited has none (see the log below)");
    kib / 1024.0
}

/// The hostile routers and what keeps their agents alive.
struct Fleet {
    targets: usize,
    _agents: Vec<HostileAgent>,
}

/// VMIDs from 100: `big` instant guests at the caps, then `slow` agents
/// answering one byte per second, then `never` agents whose commands never
/// exit.
fn add_vms(pve: &FakeProxmox, big: usize, slow: usize, never: usize) -> Fleet {
    let config = largest_config();
    let path = vrouter_qga::constants::CONFIG_BOOT_PATH.to_owned();
    for i in 0..big {
        let guest = InstantGuest::new("vyos", [(path.clone(), config.clone())]);
        pve.add_instant_vm(100 + i as i64, "pve1", Arc::new(guest));
    }
    let mut agents = Vec::new();
    for i in 0..slow + never {
        let agent = HostileAgent::start();
        agent.set_file(&path, FileAnswer::Content(b"system {\n}\n".to_vec()));
        if i < slow {
            agent.set_drip(Some(Duration::from_secs(1)));
        } else {
            agent.set_exec(ExecAnswer {
                started: br#"{"return": {"pid": 4242}}"#.to_vec(),
                status: br#"{"return": {"exited": false}}"#.to_vec(),
            });
        }
        pve.add_vm(100 + (big + i) as i64, "pve1", agent.socket_path());
        agents.push(agent);
    }
    Fleet {
        targets: big + slow + never,
        _agents: agents,
    }
}

async fn create_objects(ns: &vrouter_test_apiserver::TestNamespace, targets: usize) {
    create::<VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "system"}, "spec": {"commands": "set system host-name {{ hostName }}\n"}}),
    )
    .await;
    for i in 0..targets {
        create::<VRouterTarget>(
            ns,
            json!({"metadata": {"name": format!("r{i}")}, "spec": {
                "provider": {"type": "proxmox", "proxmox": {"vmid": 100 + i, "clusterRef": {"name": "pve"}}},
                "params": {"hostName": format!("r{i}")},
            }}),
        )
        .await;
    }
    let refs: Vec<Value> = (0..targets).map(|i| json!({"name": format!("r{i}")})).collect();
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "system"}], "targetRefs": refs}}),
    )
    .await;
}

/// Reads of a large config.boot the operator has been answered.
fn large_reads(pve: &FakeProxmox) -> usize {
    pve.large_answers()
}

/// How many VRouterConfigs are in each phase.
async fn phases(ns: &vrouter_test_apiserver::TestNamespace) -> Value {
    let mut phases = serde_json::Map::new();
    let configs = ns
        .api::<vrouter_api::VRouterConfig>()
        .list(&Default::default())
        .await
        .unwrap();
    for config in configs.items {
        let phase = config
            .status
            .map(|s| format!("{:?}", s.phase))
            .unwrap_or_else(|| "none".into());
        let count = phases.entry(phase).or_insert(json!(0));
        *count = json!(count.as_u64().unwrap_or(0) + 1);
    }
    Value::Object(phases)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_under_hostile_guests_stays_under_the_chart_limit() {
    let (big, slow, never) = (
        knob("VROUTER_HOSTILE_BIG", 8),
        knob("VROUTER_HOSTILE_SLOW", 2),
        knob("VROUTER_HOSTILE_NEVER", 2),
    );
    let reads_wanted = knob("VROUTER_HOSTILE_READS", 1) * big;
    let after = Duration::from_secs(knob("VROUTER_HOSTILE_AFTER_SECS", 15) as u64);
    let env = TestEnv::shared().await;
    let ns = env.namespace("hostile-memory").await;
    let pve = common::proxmox_cluster(&ns).await;
    let fleet = add_vms(&pve, big, slow, never);
    // The first read of each large config.boot is answered together with
    // the others: however the syncs happen to be spread, the operator meets
    // them all at once.
    pve.gather_large_reads(big);
    create_objects(&ns, fleet.targets).await;

    let url = env.apiserver_url();
    let mut operator = ReplicaProcess::start(env, "hostile", ns.name(), "vrouter-hostile", &url, &[]);
    let started = Instant::now();
    let limit = Duration::from_secs(600);
    while large_reads(&pve) < reads_wanted && started.elapsed() < limit {
        if let Some(exit) = operator.exited() {
            panic!(
                "the operator exited ({exit}) before reading every large config.boot: {}",
                tail(&operator.log())
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(after).await;
    // Still running: a guest's answer must never cost the operator its
    // Lease (a missed renewal ends the process) or its life.
    if let Some(exit) = operator.exited() {
        panic!(
            "the operator exited ({exit}) while the hostile guests answered: {}",
            tail(&operator.log())
        );
    }
    let reads = large_reads(&pve);
    let exec_statuses = pve
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/agent/exec-status"))
        .count();
    let peak = peak_rss_mib(operator.pid());
    let phases = phases(&ns).await;
    let log = operator.log();
    drop(operator);

    let report = json!({
        "big_routers": big,
        "slow_routers": slow,
        "never_exiting_routers": never,
        "config_boot_bytes": largest_config().len(),
        "large_config_reads": reads,
        "exec_status_calls": exec_statuses,
        "config_phases": phases,
        "seconds": started.elapsed().as_secs_f64(),
        "operator_peak_rss_mib": peak,
        "budget_mib": BUDGET_MIB,
        "chart_limit_mib": CHART_LIMIT_MIB,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    if let Ok(path) = std::env::var("VROUTER_BENCH_OUT") {
        std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap())
            .unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
    assert!(
        reads >= reads_wanted,
        "the operator read the large config.boot {reads} times in {limit:?}, {reads_wanted} wanted: {}",
        tail(&log)
    );
    assert!(
        peak <= BUDGET_MIB,
        "the operator's peak RSS was {peak:.1} MiB, over the budget of {BUDGET_MIB} MiB (chart limit {CHART_LIMIT_MIB} MiB)"
    );
}
