//! Operator replicas for the leader-election tests: each competes for a
//! Lease and runs the controllers while it leads, as `main` does.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use vrouter_api::{Phase, VRouterConfig};
use vrouter_operator::controllers::{self, Ended};
use vrouter_operator::runtime::context::{Context, Settings};
use vrouter_operator::runtime::leader::{self, Candidate, Election};
use vrouter_operator::runtime::metrics::{ControllerLabels, Metrics};
use vrouter_test_apiserver::TestEnv;

use super::{Site, final_phase};

/// Short, so that a crashed leader is replaced quickly.
pub const LEASE: Duration = Duration::from_secs(6);

/// The election's timing for a lease of `duration` (whole seconds): a renew
/// deadline of two thirds of it, as client-go's defaults (15 s / 10 s), with
/// a retry often enough for several tries within the deadline on a loaded
/// machine.
pub fn timing(duration: Duration) -> leader::Timing {
    leader::Timing {
        lease_duration: duration,
        renew_deadline: duration * 2 / 3,
        retry_period: duration / 8,
    }
}

/// One operator replica: its election and its controllers, as `main` runs them.
pub struct Replica {
    pub metrics: Metrics,
    pub task: tokio::task::JoinHandle<Ended>,
    pub renewal: tokio::task::AbortHandle,
    _stop: watch::Sender<bool>,
}

/// A replica competing for the Lease `lease_name` in the site's namespace.
pub async fn replica_on(site: &Site, identity: &str, lease_name: &str) -> Replica {
    replica_with_lease(site, identity, lease_name, LEASE).await
}

/// [`replica_on`] with a lease of `duration`.
pub async fn replica_with_lease(site: &Site, identity: &str, lease_name: &str, duration: Duration) -> Replica {
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
        timing: timing(duration),
    };
    let mut candidate: Candidate = leader::campaign(env.client(), &election).await.unwrap();
    let renewal = candidate.renewal.abort_handle();
    let (stop, stopping) = watch::channel(false);
    let namespace = site.ns.name().to_owned();
    let task =
        tokio::spawn(async move { controllers::lead(ctx, Some(&mut candidate), Some(namespace), stopping).await });
    Replica {
        metrics,
        task,
        renewal,
        _stop: stop,
    }
}

/// How many VRouterConfig reconciles the replica ran.
pub fn config_reconciles(replica: &Replica) -> u64 {
    replica
        .metrics
        .reconciles
        .get_or_create(&ControllerLabels {
            controller: "vrouterconfig",
        })
        .get()
}

/// Waits for the config to end Applied.
pub async fn applied(site: &Site, name: &str) {
    let configs = site.ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, name, Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
}
