//! Leader election on a `coordination.k8s.io` Lease, so that of several
//! replicas only one reconciles at a time. Webhooks are served by every
//! replica; only controllers wait for the lease.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Lease name by default: the Go vrouter-operator's (its controller-runtime
/// `LeaderElectionID`). Replicas of both operators in one namespace then
/// compete for one Lease, so during a migration only one of them reconciles.
pub const DEFAULT_LEASE_NAME: &str = "d9121dda.kojuro.date";

/// Settings of the election.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub namespace: String,
    /// Unique per replica: the pod name in a cluster.
    pub identity: String,
    /// How long a lease is valid without renewal: the longest a dead
    /// leader blocks the others.
    pub duration: Duration,
}

/// A replica competing for the lease.
pub struct Candidate {
    /// `true` while this replica leads. Dropping it releases the lease.
    pub leading: watch::Receiver<bool>,
    /// The task renewing the lease; aborting it is what a crash looks like
    /// to the others (the lease is not released, it expires).
    pub renewal: JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

/// Starts competing for the lease.
pub async fn campaign(client: Client, election: &Election) -> anyhow::Result<Candidate> {
    let duration = election.duration.as_secs().max(2);
    // Renew well before expiry: a third of the duration is left as grace.
    let grace = (duration / 3).max(1);
    let manager = LeaseManagerBuilder::new(client, &election.lease_name)
        .with_namespace(&election.namespace)
        .with_parameters(LeaseParams::new(&election.identity, duration, grace))
        .build()
        .await?;
    let (leading, renewal) = manager.watch().await;
    Ok(Candidate { leading, renewal })
}
