//! A binding whose template computes until its time limit at every target
//! must not stall the operator: the leader keeps renewing its Lease within
//! the lease duration while several such renders run.
//!
//! The runtime has one worker, as `main`'s has in a pod limited to one CPU
//! (tokio sizes its pool by `available_parallelism`, which follows the
//! cgroup's CPU quota). With more workers a stalled one still delays the
//! tasks queued on it, only less predictably.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;
use vrouter_api::{VRouterBinding, VRouterTarget};
use vrouter_test_apiserver::TestEnv;

use common::replica::replica_with_lease;
use common::{condition, create, site_idle, wait_for};

const TARGETS: usize = 500;
/// Renewed every 6 s (two thirds), expired at 9 s.
const LEASE: Duration = Duration::from_secs(9);
/// Each render stops at its 2 s time limit; on the worker these would hold
/// it for 16 s, well past the lease.
const BINDINGS: usize = 8;

/// Builds a 10,000-number list and joins it 10,000 times: well inside every
/// deterministic bound, so only the time limit stops it.
const SLOW: &str = "{% set xs = range(end=10000) %}{% for i in range(end=10000) %}{% set s = xs | join(sep=\",\") %}{% endfor %}set system host-name {{ hostName }}\n";

/// When each renewal was seen: the observer's monotonic clock at the first
/// read that showed a new `renewTime`. A follower judges expiry the same
/// way (how long the record went unchanged on its own clock, never the
/// timestamps in it), so a wall-clock step on the machine cannot pass for a
/// missed renewal; and when the watch ended. Read from a thread of its own
/// with its own runtime and client, so the operator's runtime being stalled
/// cannot stall the observer.
fn observe_renewals(
    config: kube::Config,
    namespace: String,
    lease: &'static str,
    for_how_long: Duration,
) -> std::thread::JoinHandle<(Vec<Instant>, Instant)> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let client = kube::Client::try_from(config).unwrap();
            let leases: Api<Lease> = Api::namespaced(client, &namespace);
            let start = Instant::now();
            let mut last = None;
            let mut seen = Vec::new();
            while start.elapsed() < for_how_long {
                if let Ok(Some(lease)) = leases.get_opt(lease).await {
                    let renewed = lease.spec.and_then(|s| s.renew_time).map(|t| t.0);
                    if renewed.is_some() && renewed != last {
                        seen.push(Instant::now());
                        last = renewed;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (seen, Instant::now())
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn renders_at_their_time_limit_do_not_delay_lease_renewal() {
    let site = site_idle("render-lease", &[]).await;
    let ns = &site.ns;
    let targets = ns.api::<VRouterTarget>();
    let mut names = Vec::with_capacity(TARGETS);
    for i in 0..TARGETS {
        let name = format!("t{i}");
        create::<VRouterTarget>(
            ns,
            json!({"metadata": {"name": name}, "spec": {
                "provider": {"type": "proxmox", "proxmox": {"vmid": 1000 + i, "clusterRef": {"name": "pve"}}},
                "params": {"hostName": name},
            }}),
        )
        .await;
        names.push(name);
    }
    assert_eq!(targets.list(&Default::default()).await.unwrap().items.len(), TARGETS);
    create::<vrouter_api::VRouterTemplate>(ns, json!({"metadata": {"name": "slow"}, "spec": {"commands": SLOW}})).await;

    let _leader = replica_with_lease(&site, "replica-a", "render-lease", LEASE).await;
    wait_for("the Lease to be held", Duration::from_secs(30), || async {
        let lease = ns.api::<Lease>().get_opt("render-lease").await.ok()??;
        lease.spec?.holder_identity.filter(|h| h == "replica-a")
    })
    .await;

    let watching = LEASE * 3;
    let config = TestEnv::shared().await.config().clone();
    let observer = observe_renewals(config, ns.name().to_owned(), "render-lease", watching);
    let refs: Vec<_> = names.iter().map(|n| json!({"name": n})).collect();
    for b in 0..BINDINGS {
        create::<VRouterBinding>(
            ns,
            json!({"metadata": {"name": format!("slow-{b}")}, "spec": {"templateRefs": [{"name": "slow"}], "targetRefs": refs}}),
        )
        .await;
    }
    let (renewals, watched_until) = tokio::task::spawn_blocking(move || observer.join().unwrap())
        .await
        .unwrap();

    // Every binding's render was stopped by the time limit.
    let bindings = ns.api::<VRouterBinding>();
    for b in 0..BINDINGS {
        let name = format!("slow-{b}");
        let message = wait_for(
            &format!("{name} to fail on its time limit"),
            Duration::from_secs(120),
            || async {
                let status = bindings.get(&name).await.ok()?.status?;
                let (ready, _) = condition(&status.conditions, "Ready")?;
                let message = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| c.message.clone())?;
                (ready == "False").then_some(message)
            },
        )
        .await;
        assert!(message.contains("the time limit of 2s"), "{name}: {message}");
    }

    // The leader renewed throughout: no gap as long as the lease.
    assert!(renewals.len() >= 3, "too few renewals seen: {}", renewals.len());
    // Up to the end of the watch too: a leader that stopped renewing leaves
    // its widest gap after its last renewal.
    let ends = renewals.iter().copied().chain([watched_until]);
    let widest = renewals.iter().zip(ends.skip(1)).map(|(a, b)| b - *a).max().unwrap();
    eprintln!(
        "{} renewals in {watching:?}, widest gap {widest:?} (lease {LEASE:?})",
        renewals.len()
    );
    assert!(
        widest < LEASE,
        "the Lease went {widest:?} without renewal (lease {LEASE:?})"
    );
}
