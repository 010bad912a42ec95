//! The ProxmoxCluster reconciler (spec §7.3): once per sync interval, reads
//! `/cluster/resources`, then keeps each referencing VRouterTarget's
//! `proxmoxNode` and `lastRebootTime` current, writing only what changed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::{FINALIZER, condition, reason};
use vrouter_api::{ProxmoxCluster, ProxmoxClusterStatus, VRouterTarget};
use vrouter_providers::factory::{ClusterClientError, proxmox_cluster_client};
use vrouter_providers::{FactoryContext, KubeLookup, ProviderError};

use super::ClusterContext;
use super::decide::{self, VmResource};
use crate::runtime::conditions::{self, Wanted};
use crate::runtime::context::Context;
use crate::runtime::reconciler::{self, Reconciler};
use crate::runtime::{finalizers, status_writes, stores};

pub const CONTROLLER: &str = "proxmoxcluster";

/// The spec's bound on one guest `/proc/uptime` read: a hung agent must not
/// stall the sync of every other target.
const GUEST_UPTIME_TIMEOUT: Duration = Duration::from_secs(10);

/// Admission rejects a non-positive interval; this floor only keeps an object
/// stored before that rule from hot-polling the Proxmox API.
const MIN_SYNC_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Why a sync could not read the cluster: the Synced condition's reason (the
/// Go operator's three) and its message, already free of credentials.
struct SyncFailure {
    reason: &'static str,
    message: String,
}

pub struct ClusterReconciler;

impl Reconciler for ClusterReconciler {
    type Object = ProxmoxCluster;
    type Context = ClusterContext;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    async fn reconcile(cluster: Arc<ProxmoxCluster>, ctx: Arc<ClusterContext>) -> Result<Action, Error> {
        reconcile(&cluster, &ctx).await
    }

    fn retry_after(error: &Error, _ctx: &ClusterContext) -> Duration {
        match error {
            Error::Kube(e) if reconciler::is_conflict(e) => reconciler::CONFLICT_RETRY,
            _ => Duration::from_secs(5),
        }
    }

    fn is_routine(error: &Error) -> bool {
        matches!(error, Error::Kube(e) if reconciler::is_conflict(e))
    }
}

fn sync_interval(cluster: &ProxmoxCluster) -> Duration {
    cluster.spec.sync_interval.to_std().max(MIN_SYNC_INTERVAL)
}

async fn reconcile(cluster: &ProxmoxCluster, ctx: &ClusterContext) -> Result<Action, Error> {
    if cluster.meta().deletion_timestamp.is_some() {
        // Nothing to clean up: the targets keep their last observed node.
        return Ok(finalizers::release(&ctx.client, cluster, FINALIZER).await?);
    }
    if let Some(action) = finalizers::ensure(&ctx.client, cluster, FINALIZER).await? {
        return Ok(action);
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let interval = sync_interval(cluster);
    if !stores::ready(&ctx.own.targets).await {
        // The target watch ended: the process is shutting down.
        return Ok(Action::await_change());
    }
    let targets = targets_of(ctx, &namespace, &name);
    let current = cluster.status.clone().unwrap_or_default();
    // A spec not yet observed (other endpoints or credentials) is synced now.
    let observed = current.observed_generation == cluster.metadata.generation;
    if observed && let Some(wait) = decide::sync_wait(current.last_sync_time.as_ref(), interval, Timestamp::now()) {
        // A target created since the last sync is synced now rather than up
        // to a whole interval later: until then its provider must look the
        // node up on every call. (Keyed on creation, not on an empty node:
        // a VM that is gone keeps an empty node, and must not make every
        // event a sync.)
        if !decide::has_new_target(targets.iter().map(|t| &**t), current.last_sync_time.as_ref()) {
            return Ok(Action::requeue(wait));
        }
    }

    let outcome = match read_cluster(cluster, ctx).await {
        Ok(vms) => Ok(sync_targets(cluster, ctx, &targets, vms, interval).await?),
        Err(failure) => Err(failure),
    };
    let next = after_sync(cluster, &current, outcome, targets.len(), Timestamp::now());
    status_writes::patch_status(&ctx.client, cluster, Some(&current), &next).await?;
    // A failed sync is retried at the next interval too: an unreachable
    // cluster is not polled in a tight loop.
    Ok(Action::requeue(interval))
}

/// The targets whose provider names cluster `name` of `namespace`, shared
/// with the store, not copied: every sync and every target event mapped to
/// the cluster comes here.
fn targets_of(ctx: &ClusterContext, namespace: &str, name: &str) -> Vec<Arc<VRouterTarget>> {
    ctx.own
        .targets
        .state()
        .into_iter()
        .filter(|t| decide::references(t, namespace, name))
        .collect()
}

/// The status after a sync of `targets` targets that ended with `outcome`
/// (the targets whose uptime could not be read, or why the cluster could
/// not be read): its Synced condition says which, and the summary follows.
fn after_sync(
    cluster: &ProxmoxCluster,
    current: &ProxmoxClusterStatus,
    outcome: Result<Vec<(String, String)>, SyncFailure>,
    targets: usize,
    now: Timestamp,
) -> ProxmoxClusterStatus {
    let mut next = current.clone();
    let wanted = match outcome {
        Ok(unread) => {
            next.last_sync_time = Some(Time(now));
            Wanted {
                type_: condition::SYNCED,
                status: true,
                reason: reason::SYNC_SUCCEEDED,
                message: decide::synced_message(targets, &unread),
                observed_generation: cluster.metadata.generation,
            }
        }
        Err(SyncFailure { reason, message }) => {
            tracing::warn!(cluster = %cluster.name_any(), %reason, %message, "ProxmoxCluster sync failed");
            Wanted {
                type_: condition::SYNCED,
                status: false,
                reason,
                message,
                observed_generation: cluster.metadata.generation,
            }
        }
    };
    conditions::set(&mut next.conditions, wanted, now);
    next.observed_generation = cluster.metadata.generation;
    let summary = conditions::synced_summary(&next.conditions, None);
    conditions::summarise(&mut next.conditions, summary, next.observed_generation, now);
    next
}

/// Steps 2–3: credentials, then one `/cluster/resources` read.
async fn read_cluster(cluster: &ProxmoxCluster, ctx: &Context) -> Result<Vec<VmResource>, SyncFailure> {
    let lookup = KubeLookup::new(ctx.client.clone());
    let factory = FactoryContext {
        proxmox_clients: ctx.providers.proxmox_clients(),
        ..FactoryContext::default()
    };
    let client = proxmox_cluster_client(cluster, &lookup, &factory).await.map_err(|e| {
        let (reason, step) = match e {
            ClusterClientError::CredentialsNotFound(_) => (reason::CREDENTIALS_NOT_FOUND, "reading the credentials"),
            ClusterClientError::InvalidCredentials(_) => (reason::INVALID_CREDENTIALS, "reading the credentials"),
            ClusterClientError::Client(_) => (reason::FETCH_FAILED, "building the Proxmox client"),
            ClusterClientError::Tls(_) => (reason::INVALID_TLS_CONFIG, "reading the TLS settings"),
        };
        SyncFailure {
            reason,
            message: format!("{step}: {e}"),
        }
    })?;
    let vms = client.vms().await.map_err(|e| SyncFailure {
        reason: match e {
            ProviderError::CertificateNotTrusted { .. } => reason::CERTIFICATE_NOT_TRUSTED,
            _ => reason::FETCH_FAILED,
        },
        message: format!("listing /cluster/resources: {e}"),
    })?;
    Ok(vms
        .into_iter()
        .map(|vm| VmResource {
            vmid: vm.vmid,
            node: vm.node,
            uptime_secs: if vm.running { vm.uptime } else { 0 },
        })
        .collect())
}

/// Step 4: node and reboot time of every referencing target, up to
/// `ctx.settings.concurrency.cluster_sweep` of them at once: with
/// `checkGuestUptime` each is a guest agent round trip (up to
/// [`GUEST_UPTIME_TIMEOUT`]), and one after another a restart over 1,000
/// targets spent most of its first minutes here. The first failed write
/// ends the sweep (the reconcile is retried). Returns the guest uptimes
/// that could not be read, by target, sorted.
async fn sync_targets(
    cluster: &ProxmoxCluster,
    ctx: &Context,
    targets: &[Arc<VRouterTarget>],
    vms: Vec<VmResource>,
    interval: Duration,
) -> Result<Vec<(String, String)>, Error> {
    // The uptimes were read just now; the boot time is derived from this.
    let observed_at = Timestamp::now();
    let index = decide::index_by_vmid(vms);
    let sweep = Sweep {
        cluster,
        ctx,
        index: &index,
        observed_at,
        interval,
        unread: std::sync::Mutex::new(Vec::new()),
    };
    bounded(targets, ctx.settings.concurrency.cluster_sweep, |target| {
        sweep.sync_target(target)
    })
    .await?;
    let mut unread = sweep
        .unread
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    unread.sort();
    Ok(unread)
}

/// `each` over `items`, up to `bound` at once (at least one); the first
/// error ends the run.
async fn bounded<'a, T, E, Fut>(items: &'a [T], bound: u16, each: impl Fn(&'a T) -> Fut) -> Result<(), E>
where
    Fut: std::future::Future<Output = Result<(), E>>,
{
    futures::stream::iter(items.iter().map(Ok))
        .try_for_each_concurrent(usize::from(bound.max(1)), each)
        .await
}

/// What one sync knows about the cluster's VMs.
struct Sweep<'a> {
    cluster: &'a ProxmoxCluster,
    ctx: &'a Context,
    index: &'a HashMap<i64, VmResource>,
    observed_at: Timestamp,
    interval: Duration,
    /// (target, why) of each guest uptime that could not be read.
    unread: std::sync::Mutex<Vec<(String, String)>>,
}

impl Sweep<'_> {
    /// One target's node and reboot time, written when they changed.
    async fn sync_target(&self, target: &VRouterTarget) -> Result<(), Error> {
        let Some(vmid) = target.spec.provider.proxmox.as_ref().map(|p| p.vmid) else {
            return Ok(());
        };
        let current = target.status.clone().unwrap_or_default();
        let mut next = current.clone();
        next.proxmox_node = decide::node_for(self.index, vmid);
        let uptime = self.index.get(&vmid).map(|vm| vm.uptime_secs).unwrap_or(0);
        if let Some(boot) = decide::detect_reboot(
            Duration::from_secs(uptime),
            self.observed_at,
            self.interval,
            next.last_reboot_time.as_ref(),
        ) {
            next.last_reboot_time = Some(boot);
        }
        // A guest-initiated reboot keeps the QEMU process (and its uptime):
        // only the guest's own clock shows it. A stopped VM has no agent.
        if self.cluster.spec.check_guest_uptime && uptime > 0 {
            let mut fresh = target.clone();
            fresh.status = Some(next.clone());
            match guest_uptime(self.ctx, &fresh).await {
                Ok((guest_uptime, read_at)) => {
                    if let Some(boot) =
                        decide::detect_reboot(guest_uptime, read_at, self.interval, next.last_reboot_time.as_ref())
                    {
                        next.last_reboot_time = Some(boot);
                    }
                }
                Err(why) => {
                    let mut unread = self.unread.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    unread.push((target.name_any(), why));
                }
            }
        }
        status_writes::patch_status(&self.ctx.client, target, Some(&current), &next).await?;
        Ok(())
    }
}

/// The guest's uptime and when it was read back, or why the agent could
/// not tell (logged, and named in the Synced message): the Proxmox uptime
/// check still stands.
async fn guest_uptime(ctx: &Context, target: &VRouterTarget) -> Result<(Duration, Timestamp), String> {
    let name = target.name_any();
    let read = async {
        let provider = ctx.providers.for_target(target).await?;
        provider.guest_uptime().await
    };
    let why = match tokio::time::timeout(GUEST_UPTIME_TIMEOUT, read).await {
        Ok(Ok(uptime)) => return Ok((uptime, Timestamp::now())),
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {}s", GUEST_UPTIME_TIMEOUT.as_secs()),
    };
    tracing::warn!(target = %name, error = %why, "could not read the guest's uptime");
    Err(why)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_sweep_runs_up_to_its_bound_at_once_and_never_more() {
        let (in_flight, peak, started) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        let (gate, opened) = tokio::sync::watch::channel(0usize);
        let items: Vec<usize> = (0..8).collect();
        let sweep = bounded(&items, 3, |_| {
            let mut opened = opened.clone();
            let (in_flight, peak, started, gate) = (&in_flight, &peak, &started, &gate);
            async move {
                peak.fetch_max(in_flight.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                gate.send_replace(started.fetch_add(1, Ordering::SeqCst) + 1);
                // Each waits for the first three to have started: one at a
                // time, the first would wait forever.
                let _ = opened.wait_for(|n| *n >= 3).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<(), ()>(())
            }
        });
        tokio::time::timeout(Duration::from_secs(60), sweep)
            .await
            .expect("three items ran at once")
            .unwrap();
        assert_eq!(started.load(Ordering::SeqCst), items.len());
        assert_eq!(peak.load(Ordering::SeqCst), 3, "never more than the bound at once");
        let failing = bounded(&items, 0, |i| async move { if *i == 2 { Err(*i) } else { Ok(()) } });
        assert_eq!(
            failing.await,
            Err(2),
            "a bound of 0 runs one at a time, and an error ends the run"
        );
    }
}
