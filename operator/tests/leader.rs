//! Two operator replicas against one API server: only the lease holder
//! reconciles, a crashed leader is replaced within the lease duration, and
//! the handover never applies a generation twice. A Lease held by the Go
//! operator (written as client-go's leader election writes it) keeps this
//! one waiting until it is released.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use vrouter_api::{Phase, VRouterConfig};
use vrouter_operator::context::{Context, Settings};
use vrouter_operator::leader::{self, Candidate, Election};
use vrouter_operator::metrics::{ControllerLabels, Metrics};
use vrouter_operator::run::{self, Ended};
use vrouter_test_apiserver::TestEnv;

use common::{create, final_phase, site_idle};

const LEASE: Duration = Duration::from_secs(4);

struct Replica {
    metrics: Metrics,
    task: tokio::task::JoinHandle<Ended>,
    renewal: tokio::task::AbortHandle,
    _stop: watch::Sender<bool>,
}

async fn replica(site: &common::Site, identity: &str) -> Replica {
    replica_on(site, identity, "vrouter-operator").await
}

async fn replica_on(site: &common::Site, identity: &str, lease_name: &str) -> Replica {
    let env = TestEnv::shared().await;
    let metrics = Metrics::new();
    let ctx = Arc::new(Context::new(
        env.client(),
        metrics.clone(),
        Settings::default(),
        site.providers.clone(),
    ));
    let election = Election {
        lease_name: lease_name.into(),
        namespace: site.ns.name().to_owned(),
        identity: identity.into(),
        duration: LEASE,
    };
    let mut candidate: Candidate = leader::campaign(env.client(), &election).await.unwrap();
    let renewal = candidate.renewal.abort_handle();
    let (stop, stopping) = watch::channel(false);
    let namespace = site.ns.name().to_owned();
    let task = tokio::spawn(async move { run::lead(ctx, Some(&mut candidate), Some(namespace), stopping).await });
    Replica {
        metrics,
        task,
        renewal,
        _stop: stop,
    }
}

fn config_reconciles(replica: &Replica) -> u64 {
    replica
        .metrics
        .reconciles
        .get_or_create(&ControllerLabels {
            controller: "vrouterconfig",
        })
        .get()
}

async fn applied(site: &common::Site, name: &str) {
    let configs = site.ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, name, Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
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

/// The Go operator's replica, as client-go's `leaderelection` with a Lease
/// lock writes it: holder, duration, acquire and renew times in microseconds.
fn go_record(holder: &str, duration_seconds: i32) -> serde_json::Value {
    let now = MicroTime(Timestamp::now());
    json!({
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": now,
        "renewTime": now,
        "leaseTransitions": 0,
    })
}

/// During a migration the Go operator still runs: by default this operator
/// competes for the Go operator's Lease, waits while the Go replica renews
/// it, and leads once the Go replica releases it on shutdown.
#[tokio::test]
async fn the_go_operators_lease_keeps_this_operator_waiting_until_released() {
    let site = site_idle("go-lease", &["r1"]).await;
    let leases: Api<Lease> = site.ns.api();
    let go_holder = "vrouter-operator-controller-manager-5d8f7c9b4-x2x7q_3f1c2a4e-8d9b-4f5e-9a51-0d6c9b1e7a22";
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": leader::DEFAULT_LEASE_NAME},
        "spec": go_record(go_holder, 4),
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    // The Go replica renews every second, as client-go does every RetryPeriod.
    let renewing = {
        let leases = leases.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let renew = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                leases
                    .patch(
                        leader::DEFAULT_LEASE_NAME,
                        &PatchParams::default(),
                        &Patch::Merge(&renew),
                    )
                    .await
                    .unwrap();
            }
        })
    };

    let ours = replica_on(&site, "rust-replica", leader::DEFAULT_LEASE_NAME).await;
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "one"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name one\n"}})).await;
    // Three times the Lease's duration: an operator that ignored the Go
    // holder, or judged it by the Lease's creation, would have taken over.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(config_reconciles(&ours), 0, "the Go operator leads: ours must wait");
    let held = leases.get(leader::DEFAULT_LEASE_NAME).await.unwrap();
    assert_eq!(held.spec.unwrap().holder_identity.as_deref(), Some(go_holder));
    assert!(site.routers["r1"].sandbox.calls().is_empty(), "nothing applied");

    // The Go replica shuts down and releases the Lease the way client-go
    // does: no holder, a one-second duration.
    renewing.abort();
    let _ = renewing.await;
    let release = json!({"spec": go_record("", 1)});
    leases
        .patch(
            leader::DEFAULT_LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&release),
        )
        .await
        .unwrap();
    applied(&site, "one").await;
    assert!(config_reconciles(&ours) > 0);

    // Ours holds it now in the form client-go reads, so a Go replica
    // started again would wait in turn.
    let spec = leases.get(leader::DEFAULT_LEASE_NAME).await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("rust-replica"));
    assert_eq!(spec.lease_duration_seconds, Some(LEASE.as_secs() as i32));
    let renewed = spec.renew_time.expect("renewTime").0;
    assert!(
        Timestamp::now().duration_since(renewed).as_secs() <= LEASE.as_secs() as i64,
        "renewTime {renewed} is kept fresh"
    );
    assert!(!ours.task.is_finished());
}
