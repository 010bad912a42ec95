//! Two operator replicas against one API server: only the lease holder
//! reconciles, a crashed leader is replaced within the lease duration, a
//! leader cut off from the API server stops before another takes over, and
//! the handover never applies a generation twice.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use vrouter_api::{VRouterConfig, VRouterTarget};
use vrouter_test_apiserver::TestEnv;
use vrouter_test_peers::daemon::{AgentFlags, Daemon};
use vrouter_test_peers::toxiproxy::{Proxy, Toxiproxy};

use common::replica::{LEASE, Replica, applied, config_reconciles, replica_on};
use common::replica_process::ReplicaProcess;
use common::{create, site_idle};

async fn replica(site: &common::Site, identity: &str) -> Replica {
    replica_on(site, identity, "vrouter-operator").await
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_crashed_leader_is_replaced() {
    let site = site_idle("leader", &["r1"]).await;
    let a = replica(&site, "replica-a").await;
    // Let A take the lease before B starts competing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b = replica(&site, "replica-b").await;

    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "one"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name one\n"}})).await;
    applied(&site, "one").await;
    assert!(config_reconciles(&a) > 0, "the leader reconciled");
    assert_eq!(config_reconciles(&b), 0, "the follower must not reconcile");

    // A crashes: its lease is neither renewed nor released.
    let crashed_at = Instant::now();
    a.renewal.abort();
    a.task.abort();
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "two"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name two\n"}})).await;
    applied(&site, "two").await;
    let handover = crashed_at.elapsed();
    assert!(config_reconciles(&b) > 0, "the new leader reconciled");
    // Generous bound for a loaded machine; the measured value is reported.
    assert!(
        handover < LEASE * 3 + Duration::from_secs(10),
        "handover took {handover:?}"
    );
    eprintln!("handover after a leader crash: {handover:?} (lease {LEASE:?})");

    // Taking over re-read "one" but did not apply it again.
    let sets: Vec<String> = site.routers["r1"]
        .sandbox
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("set system host-name"))
        .collect();
    assert_eq!(sets, ["set system host-name one", "set system host-name two"]);
    assert!(!b.task.is_finished());
}

/// The Lease the process replicas compete for.
const FENCE_LEASE: &str = "vrouter-operator-fence";

/// Holder of the Lease `name`, if any.
async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    let lease = leases.get_opt(name).await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// A config whose script records, on the router, that the run labelled
/// `label` began and ended, around one recorded configuration call.
fn recording_spec(target: &str, label: &str, runs: &std::path::Path) -> serde_json::Value {
    let runs = runs.display();
    json!({"targetRef": {"name": target}, "commands": format!(
        "echo 'begin {label}' >> '{runs}'\nset system host-name {label}\necho 'end {label}' >> '{runs}'\n"
    )})
}

/// Checks the router's run record: each label ran exactly once, and no run
/// began while another was still running.
fn assert_each_ran_once_and_never_overlapped(runs: &std::path::Path, labels: &[&str]) {
    let record = std::fs::read_to_string(runs).unwrap_or_default();
    let mut running: Option<&str> = None;
    let mut begun: Vec<&str> = Vec::new();
    for line in record.lines() {
        match line.split_once(' ') {
            Some(("begin", label)) => {
                assert_eq!(running, None, "{label} began while another run was going:\n{record}");
                running = Some(label);
                begun.push(label);
            }
            Some(("end", label)) => {
                assert_eq!(running, Some(label), "unmatched end:\n{record}");
                running = None;
            }
            _ => panic!("unexpected line {line:?} in:\n{record}"),
        }
    }
    begun.sort_unstable();
    let mut want = labels.to_vec();
    want.sort_unstable();
    assert_eq!(begun, want, "each generation runs exactly once:\n{record}");
}

/// Waits until the config's generation `generation` ended Applied.
async fn applied_generation(configs: &Api<VRouterConfig>, name: &str, generation: i64) {
    let limit = Duration::from_secs(120);
    common::wait_for(&format!("{name} generation {generation} Applied"), limit, || async {
        let status = configs.get_opt(name).await.ok()??.status?;
        (status.observed_generation == generation && status.phase == vrouter_api::Phase::Applied).then_some(())
    })
    .await;
}

/// docs/operations.md, "Leader election": two replicas of the released
/// binary with the default timing (Lease 15 s, renew deadline 10 s, retry
/// 2 s); the leader reaches the API server only through Toxiproxy, and the
/// proxy drops every byte (a partition: its requests hang, nothing fails
/// fast). The leader stops on its own (exits, status 3) because it has not
/// renewed within the renew deadline; the follower is never seen holding
/// the Lease while the old leader runs; the new leader applies the next
/// generations, and the router ran every generation exactly once, never two
/// at a time.
#[tokio::test]
async fn a_leader_partitioned_from_the_api_server_stops_before_its_successor_takes_over() {
    cut_the_leader_off("partition", Proxy::partition).await;
}

/// As above, with the leader's connections closed and refused (the proxy
/// disabled): its renewals fail at once instead of hanging, and it keeps
/// trying until its renew deadline, then stops.
#[tokio::test]
async fn a_leader_whose_api_server_connections_are_refused_stops_before_its_successor_takes_over() {
    cut_the_leader_off("refused", Proxy::disable).await;
}

async fn cut_the_leader_off(fault: &str, cut_off: fn(&Proxy)) {
    let env = TestEnv::shared().await;
    let ns = env.namespace(&format!("fence-{fault}")).await;
    let leases: Api<Lease> = ns.api();
    let configs: Api<VRouterConfig> = ns.api();
    let toxiproxy = Toxiproxy::start();
    let apiserver = env.apiserver_url().trim_start_matches("https://").parse().unwrap();
    let proxy = toxiproxy.proxy("apiserver-for-replica-a", apiserver);
    let daemon = Daemon::start();
    let agent = daemon.start_agent("edge-1", AgentFlags::default()).await;
    let granted = format!("{}/edge-1", daemon.address());
    common::grant_daemon_agents(&env.client(), ns.name(), Some(&granted)).await;
    create::<VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "r1"}, "spec": {"provider": {"type": "vrouter-daemon", "daemon": {
            "address": daemon.address(), "agentID": "edge-1", "timeoutSeconds": 60,
        }}}}),
    )
    .await;
    let runs = agent.sandbox().dir().join("runs.log");

    let mut a = ReplicaProcess::start(env, "replica-a", ns.name(), FENCE_LEASE, &proxy.https_url(), &[]);
    common::wait_for("replica-a to lead", Duration::from_secs(120), || async {
        (holder(&leases, FENCE_LEASE).await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let mut b = ReplicaProcess::start(env, "replica-b", ns.name(), FENCE_LEASE, &env.apiserver_url(), &[]);
    common::wait_for("replica-b to wait for the Lease", Duration::from_secs(120), || async {
        b.log()
            .contains("waiting for the Lease held by another replica")
            .then_some(())
    })
    .await;

    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "one"}, "spec": recording_spec("r1", "one-g1", &runs)}),
    )
    .await;
    applied_generation(&configs, "one", 1).await;

    // The cut: replica-a's requests, its Lease renewals among them, fail.
    let cut = Instant::now();
    cut_off(&proxy);
    let limit = Duration::from_secs(180);
    let status = loop {
        // The holder is read first: replica-b holding the Lease while
        // replica-a still runs afterwards would be two leaders at once.
        let holder = holder(&leases, FENCE_LEASE).await;
        let exited = a.exited();
        assert!(
            exited.is_some() || holder.as_deref() != Some("replica-b"),
            "replica-b took the Lease while replica-a still ran:\n{}",
            a.log()
        );
        if let Some(status) = exited {
            break status;
        }
        assert!(cut.elapsed() < limit, "replica-a still runs {limit:?} after the cut");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stopped_after = cut.elapsed();
    assert_eq!(status.code(), Some(3), "a replica that lost the Lease exits with 3");
    assert!(
        a.log()
            .contains("not renewed within the renew deadline: stopped leading"),
        "replica-a stopped for its renew deadline:\n{}",
        a.log()
    );
    let took_over_after = common::wait_for("replica-b to take over", Duration::from_secs(180), || async {
        (holder(&leases, FENCE_LEASE).await.as_deref() == Some("replica-b")).then(|| cut.elapsed())
    })
    .await;
    assert!(b.exited().is_none(), "replica-b leads:\n{}", b.log());
    eprintln!(
        "{fault}: the leader stopped {stopped_after:?} after the cut (renew deadline 10s), \
         the follower took over {took_over_after:?} after it (Lease 15s)"
    );

    // The new leader applies the next generation of `one` and a new config.
    configs
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": recording_spec("r1", "one-g2", &runs)})),
        )
        .await
        .unwrap();
    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "two"}, "spec": recording_spec("r1", "two-g1", &runs)}),
    )
    .await;
    applied_generation(&configs, "one", 2).await;
    applied_generation(&configs, "two", 1).await;
    assert_each_ran_once_and_never_overlapped(&runs, &["one-g1", "one-g2", "two-g1"]);
}
