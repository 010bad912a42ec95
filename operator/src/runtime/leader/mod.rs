//! Leader election on a `coordination.k8s.io` Lease, so that of several
//! replicas only one reconciles at a time. Webhooks are served by every
//! replica; only controllers wait for the lease.
//!
//! The algorithm is client-go's `leaderelection` with a Lease lock (the Go
//! operator's), so replicas of both read each other's Lease: a follower
//! takes over a Lease whose record it has seen unchanged for the Lease's
//! duration; a leader that has not renewed within the renew deadline stops
//! leading, whether or not its requests ever come back. That fence is why
//! this is not `kube-lease-manager`: its watch kept reporting a leader whose
//! renewals failed, so a leader cut off from the API server kept
//! reconciling beside its successor.

mod record;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};

use record::{Observed, Record, Step};
pub use record::{Timing, TimingError};

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
    pub timing: Timing,
}

/// How the renewal task ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// [`Candidate::release`] was called (a graceful shutdown).
    Released,
    /// This replica led and then lost the Lease: not renewed within the
    /// renew deadline, or another replica holds it.
    Lost,
}

/// A replica competing for the lease.
pub struct Candidate {
    /// `true` while this replica leads. Turns `false` at the fence, when
    /// the renew deadline passed without a renewal, even while a renewal
    /// request still hangs; it never turns `true` again.
    pub leading: watch::Receiver<bool>,
    /// The task reading and renewing the lease; aborting it is what a crash
    /// looks like to the others (the lease is not released, it expires).
    pub renewal: JoinHandle<Outcome>,
    release: watch::Sender<bool>,
    timing: Timing,
}

impl Candidate {
    /// Stops competing; a leader hands the Lease back so that a follower
    /// takes over at its next try instead of after the Lease's duration.
    /// Waits at most the renew deadline for the API server.
    pub async fn release(self) {
        let _ = self.release.send(true);
        let limit = Instant::now() + self.timing.renew_deadline;
        if timeout_at(limit, self.renewal).await.is_err() {
            tracing::warn!("the Lease could not be released in time; it expires instead");
        }
    }
}

/// Starts competing for the lease. Fails at once on timings that could not
/// fence a leader ([`Timing::validated`]).
pub async fn campaign(client: Client, election: &Election) -> anyhow::Result<Candidate> {
    let timing = election.timing.validated()?;
    let (leading_tx, leading) = watch::channel(false);
    let (release, released) = watch::channel(false);
    let lease = LeaseClient {
        api: Api::namespaced(client, &election.namespace),
        name: election.lease_name.clone(),
        me: election.identity.clone(),
        timing,
    };
    let renewal = tokio::spawn(lease.elect(leading_tx, released));
    Ok(Candidate {
        leading,
        renewal,
        release,
        timing,
    })
}

/// What one read-and-write of the Lease found.
#[derive(Debug)]
enum Attempt {
    /// This replica holds the Lease, renewed by this attempt.
    Held,
    /// Another replica holds it.
    NotHeld { holder: String },
    /// Another write came between this attempt's read and write (409); the
    /// next read says who holds it.
    Conflict,
}

struct LeaseClient {
    api: Api<Lease>,
    name: String,
    me: String,
    timing: Timing,
}

impl LeaseClient {
    async fn elect(self, leading: watch::Sender<bool>, mut released: watch::Receiver<bool>) -> Outcome {
        let mut seen = Observed::new(Instant::now());
        let Some(acquired_at) = self.acquire(&mut seen, &mut released).await else {
            return Outcome::Released;
        };
        tracing::info!(identity = %self.me, lease = %self.name, "leading");
        let _ = leading.send(true);
        let outcome = self.keep(acquired_at, &mut seen, &mut released).await;
        // Whatever ended the term, this replica does not lead any more.
        let _ = leading.send(false);
        outcome
    }

    /// Tries every retry period until this replica holds the Lease; returns
    /// when the successful write was sent, or `None` on release.
    async fn acquire(&self, seen: &mut Observed, released: &mut watch::Receiver<bool>) -> Option<Instant> {
        let mut last_holder = String::new();
        loop {
            let sent = Instant::now();
            match timeout_at(sent + self.timing.renew_deadline, self.attempt(seen)).await {
                Ok(Ok(Attempt::Held)) => return Some(sent),
                Ok(Ok(Attempt::NotHeld { holder })) if holder != last_holder => {
                    tracing::info!(%holder, lease = %self.name, "waiting for the Lease held by another replica");
                    last_holder = holder;
                }
                Ok(Ok(Attempt::NotHeld { .. } | Attempt::Conflict)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, lease = %self.name, "reading the Lease failed"),
                Err(_) => tracing::warn!(lease = %self.name, "reading the Lease timed out"),
            }
            tokio::select! {
                _ = sleep(self.timing.retry_period) => {}
                _ = release_requested(released) => return None,
            }
        }
    }

    /// Renews every retry period while leading. Ends at the fence (no
    /// renewal within the renew deadline), when another replica holds the
    /// Lease, or on release.
    async fn keep(&self, acquired_at: Instant, seen: &mut Observed, released: &mut watch::Receiver<bool>) -> Outcome {
        let mut renewed_at = acquired_at;
        loop {
            let fence = record::fence(renewed_at, &self.timing);
            tokio::select! {
                _ = sleep(self.timing.retry_period) => {}
                _ = sleep_until(fence) => return self.fenced(renewed_at),
                _ = release_requested(released) => {
                    self.release(fence).await;
                    return Outcome::Released;
                }
            }
            let sent = Instant::now();
            // The request is abandoned at the fence: a renewal that hangs
            // (a partition that drops packets) must not keep the term alive.
            match timeout_at(fence, self.attempt(seen)).await {
                Ok(Ok(Attempt::Held)) => renewed_at = sent,
                Ok(Ok(Attempt::NotHeld { holder })) => {
                    tracing::error!(%holder, lease = %self.name, "another replica holds the Lease: stopped leading");
                    return Outcome::Lost;
                }
                Ok(Ok(Attempt::Conflict)) => {
                    tracing::warn!(lease = %self.name, "renewing the Lease met a concurrent write")
                }
                Ok(Err(e)) => tracing::warn!(error = %e, lease = %self.name, "renewing the Lease failed"),
                Err(_) => return self.fenced(renewed_at),
            }
        }
    }

    fn fenced(&self, renewed_at: Instant) -> Outcome {
        tracing::error!(
            lease = %self.name,
            last_renewal_ago = ?renewed_at.elapsed(),
            renew_deadline = ?self.timing.renew_deadline,
            "the Lease was not renewed within the renew deadline: stopped leading"
        );
        Outcome::Lost
    }

    /// Reads the Lease, decides, and writes it when this replica may hold it.
    async fn attempt(&self, seen: &mut Observed) -> Result<Attempt, kube::Error> {
        let lease = self.api.get_opt(&self.name).await?;
        let now = Instant::now();
        let current = lease.as_ref().map(record_of);
        seen.see(current.as_ref(), now);
        let step = record::decide(current.as_ref(), &self.me, seen.unchanged_for(now));
        let Some(next) = record::next_record(&step, current.as_ref(), &self.me, &self.timing, Timestamp::now()) else {
            let holder = current.map(|r| r.holder).unwrap_or_default();
            return Ok(Attempt::NotHeld { holder });
        };
        let written = match (step, lease) {
            (Step::Create, _) | (_, None) => self.create(&next).await,
            (_, Some(lease)) => self.replace(lease, &next).await,
        };
        match written {
            Ok(()) => Ok(Attempt::Held),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    async fn create(&self, record: &Record) -> Result<(), kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec_fields(record)),
        };
        self.api
            .create(&crate::runtime::context::post_params(), &lease)
            .await
            .map(drop)
    }

    /// Writes `record` over `lease`, guarded by its resourceVersion: a
    /// replica that read an older Lease gets 409 instead of overwriting.
    /// A merge patch carrying the resourceVersion rather than client-go's
    /// update: the same optimistic lock, within the `patch` grant the
    /// shipped Roles already give for Leases.
    async fn replace(&self, lease: Lease, record: &Record) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": spec_fields(record),
        });
        self.api
            .patch(
                &self.name,
                &crate::runtime::context::patch_params(),
                &Patch::Merge(&patch),
            )
            .await
            .map(drop)
    }

    /// Hands the Lease back on shutdown, if this replica still holds it.
    async fn release(&self, fence: Instant) {
        let release = async {
            let lease = self.api.get_opt(&self.name).await?;
            match lease {
                Some(lease) if record_of(&lease).holder == self.me => {
                    let record = record::released(&record_of(&lease), Timestamp::now());
                    self.replace(lease, &record).await
                }
                _ => Ok(()),
            }
        };
        match timeout_at(fence, release).await {
            Ok(Ok(())) => tracing::info!(lease = %self.name, "released the Lease"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, lease = %self.name, "releasing the Lease failed; it expires instead")
            }
            Err(_) => tracing::warn!(lease = %self.name, "releasing the Lease timed out; it expires instead"),
        }
    }
}

/// Resolves once a release is asked for, or the [`Candidate`] is dropped.
async fn release_requested(released: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, not held across a select.
    let _ = released.wait_for(|r| *r).await.map(|_| ());
}

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity.unwrap_or_default(),
        duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
        acquire_time: spec.acquire_time.map(|t| t.0),
        renew_time: spec.renew_time.map(|t| t.0),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

/// The Lease's spec fields client-go's Lease lock writes, from `record`.
fn spec_fields(record: &Record) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(record.holder.clone()),
        lease_duration_seconds: Some(record.duration_seconds),
        acquire_time: record.acquire_time.map(MicroTime),
        renew_time: record.renew_time.map(MicroTime),
        lease_transitions: Some(record.transitions),
        ..LeaseSpec::default()
    }
}

/// The timing as whole durations, for log lines and docs.
pub fn describe(timing: &Timing) -> String {
    let secs = |d: Duration| format!("{:.1}s", d.as_secs_f64());
    format!(
        "lease {}, renew deadline {}, retry {}",
        secs(timing.lease_duration),
        secs(timing.renew_deadline),
        secs(timing.retry_period)
    )
}
