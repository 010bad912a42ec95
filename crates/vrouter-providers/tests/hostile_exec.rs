//! Guest agents that answer `guest-exec` and `guest-exec-status` as no real
//! `qemu-ga` would, on the real channel: the stand-in [`HostileAgent`]
//! reached through the in-test Proxmox VE API (qemu-server's transport,
//! which decodes the output streams as Proxmox does) and through the
//! in-test KubeVirt exec (virsh, which hands the reply line on as is).
//!
//! For every answer: the provider call returns (no panic, no wait past its
//! deadline), an error names the call in bounded length, and a second,
//! honest router on the same peer runs its command meanwhile.

mod common;

use std::future::Future;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use proptest::prelude::*;
use serde_json::{Value, json};
use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider};
use vrouter_providers::proxmox::{ApiToken, ProxmoxProvider, ProxmoxSettings};
use vrouter_providers::{ExecHandle, GuestPaths, GuestTiming, MAX_PEER_TEXT_BYTES, Provider, ProviderError};
use vrouter_test_peers::hostile_agent::{ExecAnswer, HostileAgent};
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::FakeProxmox;

const TOKEN_ID: &str = "root@pam!vrouter";
const TOKEN_SECRET: &str = "5f1c0b1e-7d2a-4c59-9a55-secret-value";
const HOSTILE_VMID: i64 = 100;
const HONEST_VMID: i64 = 101;
const NS: &str = "routers";

/// The longest provider error a hostile answer may produce: a reason and
/// at most [`MAX_PEER_TEXT_BYTES`] of what the peer said, never the whole.
const MAX_ERROR_BYTES: usize = MAX_PEER_TEXT_BYTES + 300;

/// How long a guest command may run before the provider gives up.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one call over either carrier may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(8);
/// Past this, a provider call has ignored its own deadlines: the command's
/// timeout plus one last status call, with room for a loaded machine. A
/// liveness bound, not a speed measurement.
const HANG: Duration = Duration::from_secs(90);

fn timing() -> GuestTiming {
    GuestTiming {
        poll_interval: Duration::from_millis(10),
        command_timeout: COMMAND_TIMEOUT,
    }
}

fn line(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

fn started(pid: Value) -> Vec<u8> {
    line(json!({ "return": { "pid": pid } }))
}

fn status(fields: Value) -> Vec<u8> {
    line(json!({ "return": fields }))
}

fn exited_with(stdout: &[u8], stderr: &[u8], code: i64) -> Vec<u8> {
    status(json!({
        "exited": true, "exitcode": code,
        "out-data": BASE64.encode(stdout), "err-data": BASE64.encode(stderr),
    }))
}

/// What an honest agent answers: `running` printed, exit 0.
fn honest_exec() -> ExecAnswer {
    ExecAnswer {
        started: started(json!(4242)),
        status: exited_with(b"running\n", b"", 0),
    }
}

/// A hostile answer class: why it is hostile, and the two reply lines.
struct Class {
    why: &'static str,
    answer: ExecAnswer,
}

fn class(why: &'static str, pid: Vec<u8>, status: Vec<u8>) -> Class {
    Class {
        why,
        answer: ExecAnswer { started: pid, status },
    }
}

/// Answers to `guest-exec`: pids no kernel hands out, and none at all.
fn hostile_pids() -> Vec<Class> {
    let ok = exited_with(b"x", b"", 0);
    let raw = |s: &str| s.as_bytes().to_vec();
    vec![
        class("pid i64::MAX", started(json!(i64::MAX)), ok.clone()),
        class("pid i64::MIN", started(json!(i64::MIN)), ok.clone()),
        class("pid -1", started(json!(-1)), ok.clone()),
        class(
            "pid 2^64",
            raw(r#"{"return":{"pid":18446744073709551616}}"#),
            ok.clone(),
        ),
        class("pid 1e300", raw(r#"{"return":{"pid":1e300}}"#), ok.clone()),
        class("pid NaN", raw(r#"{"return":{"pid":NaN}}"#), ok.clone()),
        class("pid a string", started(json!("4242")), ok.clone()),
        class("pid a 4 MiB string", started(json!("7".repeat(4 << 20))), ok.clone()),
        class("pid null", started(Value::Null), ok.clone()),
        class("no pid", status(json!({})), ok),
    ]
}

/// Answers to `guest-exec-status`: exit codes and signals out of range.
fn hostile_exits() -> Vec<Class> {
    let pid = started(json!(4242));
    let raw = |s: &str| s.as_bytes().to_vec();
    vec![
        class("exitcode i64::MAX", pid.clone(), exited_with(b"", b"", i64::MAX)),
        class("exitcode i64::MIN", pid.clone(), exited_with(b"", b"", i64::MIN)),
        class("exitcode -1", pid.clone(), exited_with(b"", b"", -1)),
        class(
            "exitcode 2^64",
            pid.clone(),
            raw(r#"{"return":{"exited":true,"exitcode":18446744073709551616}}"#),
        ),
        class(
            "exitcode NaN",
            pid.clone(),
            raw(r#"{"return":{"exited":true,"exitcode":NaN}}"#),
        ),
        class(
            "signal i64::MIN",
            pid.clone(),
            status(json!({"exited": true, "signal": i64::MIN})),
        ),
        class(
            "signal i64::MAX",
            pid.clone(),
            status(json!({"exited": true, "signal": i64::MAX})),
        ),
        class(
            "both exitcode and signal",
            pid.clone(),
            status(json!({"exited": true, "exitcode": 0, "signal": 9})),
        ),
        class("neither exitcode nor signal", pid, status(json!({"exited": true}))),
    ]
}

/// Output streams: invalid, huge, truncated, not UTF-8.
fn hostile_streams() -> Vec<Class> {
    let pid = started(json!(4242));
    let with = |fields: Value| status(fields);
    // 6 MiB decoded (8 MiB of base64): within every cap on both carriers,
    // Proxmox's answer included (one or two characters per byte).
    let big = vec![b'y'; 6 << 20];
    let not_utf8: Vec<u8> = (0..1 << 20).map(|i| 0x80 | (i % 64) as u8).collect();
    vec![
        class(
            "out-data not base64",
            pid.clone(),
            with(json!({"exited": true, "exitcode": 0, "out-data": "%%%not base64%%%"})),
        ),
        class(
            "err-data 4 MiB not base64",
            pid.clone(),
            with(json!({"exited": true, "exitcode": 1, "err-data": "%".repeat(4 << 20)})),
        ),
        class("stdout of 6 MiB", pid.clone(), exited_with(&big, b"", 0)),
        class("stderr of 6 MiB, exit 3", pid.clone(), exited_with(b"", &big, 3)),
        class("stdout not UTF-8", pid.clone(), exited_with(&not_utf8, b"", 0)),
        class("stderr not UTF-8, exit 1", pid.clone(), exited_with(b"", &not_utf8, 1)),
        class(
            "out-truncated",
            pid.clone(),
            with(json!({"exited": true, "exitcode": 0, "out-data": BASE64.encode(b"half"), "out-truncated": true})),
        ),
        class(
            "out-truncated a string",
            pid,
            with(json!({"exited": true, "exitcode": 0, "out-truncated": "yes"})),
        ),
    ]
}

/// Replies of the wrong shape, or not a reply at all.
fn hostile_shapes() -> Vec<Class> {
    let pid = started(json!(4242));
    let raw = |s: &str| s.as_bytes().to_vec();
    vec![
        class("status an array", pid.clone(), line(json!({"return": [1, 2, 3]}))),
        class("status a number", pid.clone(), line(json!({"return": 7}))),
        class(
            "status a 4 MiB string",
            pid.clone(),
            line(json!({"return": "z".repeat(4 << 20)})),
        ),
        class("exited a string", pid.clone(), status(json!({"exited": "yes"}))),
        class(
            "exited a 4 MiB string",
            pid.clone(),
            status(json!({"exited": "q".repeat(4 << 20)})),
        ),
        class(
            "an error of 4 MiB",
            pid.clone(),
            line(json!({"error": {"class": "GenericError", "desc": "e".repeat(4 << 20)}})),
        ),
        class(
            "both return and error",
            pid.clone(),
            line(json!({"return": {"exited": false}, "error": {"class": "x", "desc": "y"}})),
        ),
        class(
            "for another command id",
            pid.clone(),
            line(json!({"return": {"exited": true, "exitcode": 0}, "id": 987654321})),
        ),
        class("not JSON", pid.clone(), raw("{\"return\": {\"exited\": tru")),
        class(
            "invalid UTF-8 in JSON",
            pid.clone(),
            b"{\"return\": \"\xff\xfe\"}".to_vec(),
        ),
        class("an empty line", pid, Vec::new()),
    ]
}

fn all_classes() -> Vec<Class> {
    [hostile_pids(), hostile_exits(), hostile_streams(), hostile_shapes()]
        .into_iter()
        .flatten()
        .collect()
}

fn proxmox_provider(pve: &FakeProxmox, vmid: i64) -> ProxmoxProvider {
    let mut s = ProxmoxSettings::new(vec![pve.url(0)], ApiToken::new(TOKEN_ID, TOKEN_SECRET), vmid);
    s.trust.insecure_skip_verify = true;
    s.cached_node = "pve1".into();
    s.connect_timeout = Duration::from_millis(500);
    s.request_timeout = CALL_TIMEOUT;
    s.paths = GuestPaths::default();
    s.timing = timing();
    ProxmoxProvider::new(s).unwrap()
}

fn kubevirt_provider(api: &FakeKubeApi, vm: &str) -> KubeVirtProvider {
    let options = KubeVirtOptions {
        call_timeout: CALL_TIMEOUT,
        api_timeout: CALL_TIMEOUT,
        ..KubeVirtOptions::default()
    };
    KubeVirtProvider::new(api.client(), vm, NS, GuestPaths::default(), timing(), options).unwrap()
}

fn add_vmi(api: &FakeKubeApi, vm: &str, uid: &str, agent: &HostileAgent) {
    api.put_vmi(NS, vm, uid, "Running", "node-a");
    let pod = format!("virt-launcher-{vm}-x1");
    api.put_launcher_pod(NS, &pod, vm, uid, "node-a", "Running", Some(agent.socket_path()));
}

/// One hostile router and one honest one on the same peer.
struct Pair {
    hostile: Box<dyn Provider>,
    honest: Box<dyn Provider>,
}

/// Runs `call` with a liveness bound; a call past it ignored its deadline.
async fn bounded<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after {HANG:?}"))
}

/// The error text of a hostile answer, checked for length.
fn checked_error(what: &str, error: &ProviderError) -> String {
    let text = error.to_string();
    assert!(
        text.len() <= MAX_ERROR_BYTES,
        "{what}: an error of {} bytes: {}…",
        text.len(),
        text.chars().take(300).collect::<String>()
    );
    text
}

/// Each provider call that polls a process meets `answer`, while the
/// honest router runs a command: the hostile calls return in bounded
/// length, the honest one succeeds.
async fn meets(what: &str, pair: &Pair) {
    let argv = GuestPaths::default().running_config;
    let hostile = async {
        if let Err(e) = bounded(what, pair.hostile.read_running_config()).await {
            checked_error(&format!("{what}: read_running_config"), &e);
        }
        match bounded(what, pair.hostile.run_check(&argv, COMMAND_TIMEOUT)).await {
            Ok(outcome) => {
                let _ = outcome.failure();
            }
            Err(e) => drop(checked_error(&format!("{what}: run_check"), &e)),
        }
        if let Err(e) = bounded(what, pair.hostile.get_exec_status(ExecHandle(4242))).await {
            checked_error(&format!("{what}: get_exec_status"), &e);
        }
    };
    let honest = async { bounded(what, pair.honest.read_running_config()).await };
    let ((), honest) = tokio::join!(hostile, honest);
    assert_eq!(
        honest.unwrap_or_else(|e| panic!("{what}: the honest router: {e}")),
        b"running\n"
    );
}

async fn every_class_through(carrier: &str, agent: &HostileAgent, pair: &Pair) {
    for class in all_classes() {
        agent.set_exec(class.answer);
        meets(&format!("{carrier}: {}", class.why), pair).await;
    }
}

struct ProxmoxPeers {
    hostile: HostileAgent,
    honest: HostileAgent,
    pve: FakeProxmox,
}

async fn proxmox_peers() -> (ProxmoxPeers, Pair) {
    let (hostile, honest) = (HostileAgent::start(), HostileAgent::start());
    honest.set_exec(honest_exec());
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    pve.add_vm(HOSTILE_VMID, "pve1", hostile.socket_path());
    pve.add_vm(HONEST_VMID, "pve1", honest.socket_path());
    let pair = Pair {
        hostile: Box::new(proxmox_provider(&pve, HOSTILE_VMID)),
        honest: Box::new(proxmox_provider(&pve, HONEST_VMID)),
    };
    (ProxmoxPeers { hostile, honest, pve }, pair)
}

struct KubeVirtPeers {
    hostile: HostileAgent,
    honest: HostileAgent,
    api: FakeKubeApi,
}

async fn kubevirt_peers() -> (KubeVirtPeers, Pair) {
    let (hostile, honest) = (HostileAgent::start(), HostileAgent::start());
    honest.set_exec(honest_exec());
    let api = FakeKubeApi::start().await;
    add_vmi(&api, "vyos-hostile", "6f0c1a52-0b1e-4f3a-9c1d-2a3b4c5d6e70", &hostile);
    add_vmi(&api, "vyos-honest", "6f0c1a52-0b1e-4f3a-9c1d-2a3b4c5d6e71", &honest);
    let pair = Pair {
        hostile: Box::new(kubevirt_provider(&api, "vyos-hostile")),
        honest: Box::new(kubevirt_provider(&api, "vyos-honest")),
    };
    (KubeVirtPeers { hostile, honest, api }, pair)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_exec_answers_through_proxmox_end_in_bounded_errors() {
    let (peers, pair) = proxmox_peers().await;
    every_class_through("proxmox", &peers.hostile, &pair).await;
    assert!(peers.honest.statuses() > 0);
    drop(peers.pve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_exec_answers_through_kubevirt_end_in_bounded_errors() {
    let (peers, pair) = kubevirt_peers().await;
    every_class_through("kubevirt", &peers.hostile, &pair).await;
    assert!(peers.honest.statuses() > 0);
    drop(peers.api);
}

/// An agent that never says the process exited: the wait ends at the
/// command's timeout, named, and the honest router is unaffected.
async fn never_exits(carrier: &str, agent: &HostileAgent, pair: &Pair) {
    agent.set_exec(ExecAnswer {
        started: started(json!(4242)),
        status: status(json!({"exited": false})),
    });
    let honest = async { bounded(carrier, pair.honest.read_running_config()).await };
    let (error, honest) = tokio::join!(bounded(carrier, pair.hostile.read_running_config()), honest);
    let error = error.expect_err("a process that never exits was read");
    assert!(
        matches!(error, ProviderError::Timeout { after, .. } if after == COMMAND_TIMEOUT),
        "{carrier}: {error}"
    );
    checked_error(carrier, &error);
    assert!(agent.statuses() > 1, "{carrier}: polled {} times", agent.statuses());
    assert_eq!(honest.unwrap(), b"running\n", "{carrier}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_never_exits_ends_at_the_command_timeout() {
    let (proxmox, pair) = proxmox_peers().await;
    never_exits("proxmox", &proxmox.hostile, &pair).await;
    let (kubevirt, pair) = kubevirt_peers().await;
    never_exits("kubevirt", &kubevirt.hostile, &pair).await;
}

/// An agent that sends its replies one byte at a time: each call ends at
/// its carrier's timeout (Proxmox's qemu-server gives up on the agent and
/// reports it not running; the virsh exec is cut by the provider's call
/// timeout).
async fn drips(carrier: &str, agent: &HostileAgent, pair: &Pair) {
    agent.set_exec(honest_exec());
    agent.set_drip(Some(Duration::from_millis(200)));
    let honest = async { bounded(carrier, pair.honest.read_running_config()).await };
    let (error, honest) = tokio::join!(bounded(carrier, pair.hostile.read_running_config()), honest);
    let error = error.expect_err("a dripping reply was waited for to its end");
    let text = checked_error(carrier, &error);
    assert!(
        matches!(error, ProviderError::AgentUnavailable { .. }) || error.is_timeout(),
        "{carrier}: {text}"
    );
    assert_eq!(honest.unwrap(), b"running\n", "{carrier}");
    agent.set_drip(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_one_byte_at_a_time_end_at_the_call_timeout() {
    let (proxmox, pair) = proxmox_peers().await;
    drips("proxmox", &proxmox.hostile, &pair).await;
    let (kubevirt, pair) = kubevirt_peers().await;
    drips("kubevirt", &kubevirt.hostile, &pair).await;
}

/// Any JSON value in any field of `guest-exec-status`.
fn any_field() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON holds finite numbers", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,64}".prop_map(Value::String),
        proptest::collection::vec(any::<u8>(), 0..256).prop_map(|b| json!(BASE64.encode(b))),
        (any::<u8>(), 0usize..(2 << 20)).prop_map(|(b, n)| json!(BASE64.encode(vec![b; n]))),
    ]
}

fn any_status() -> impl Strategy<Value = Vec<u8>> {
    let names = [
        "exited",
        "exitcode",
        "signal",
        "out-data",
        "err-data",
        "out-truncated",
        "err-truncated",
    ];
    proptest::collection::vec((0..names.len(), any_field()), 0..9).prop_map(move |fields| {
        let mut object = serde_json::Map::new();
        object.insert("exited".into(), json!(true));
        for (name, value) in fields {
            object.insert(names[name].into(), value);
        }
        line(json!({ "return": object }))
    })
}

/// Any status object through both carriers: the calls return in bounded
/// length and the honest router keeps answering.
#[test]
fn any_exec_status_is_survived_on_both_carriers() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (proxmox, proxmox_pair) = runtime.block_on(proxmox_peers());
    let (kubevirt, kubevirt_pair) = runtime.block_on(kubevirt_peers());
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(&any_status(), |status| {
            for (carrier, agent, pair) in [
                ("proxmox", &proxmox.hostile, &proxmox_pair),
                ("kubevirt", &kubevirt.hostile, &kubevirt_pair),
            ] {
                agent.set_exec(ExecAnswer {
                    started: started(json!(4242)),
                    status: status.clone(),
                });
                runtime.block_on(meets(carrier, pair));
            }
            Ok(())
        })
        .unwrap();
}
