//! The VRouterStatus reconciler: reads the router's startup config back,
//! keeps it in a Secret ([`super::stored_configs`]), and sends a drifted VRouterConfig back to
//! Pending so it is applied again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::{condition, reason};
use vrouter_api::{Phase, VRouterConfig, VRouterStatus, VRouterStatusStatus};

use super::StatusContext;
use super::decide::{self, ConfigView, Reading};
use super::read_config::ReadConfig;
use super::stored_configs;
use crate::runtime::conditions::{self, Drift, Wanted};
use crate::runtime::metrics::ResultLabels;
use crate::runtime::recently_ready;
use crate::runtime::reconciler::{self, Reconciler};
use crate::runtime::{own_writes, status_writes, stores};

pub const CONTROLLER: &str = "vrouterstatus";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

pub struct StatusReconciler;

impl Reconciler for StatusReconciler {
    type Object = VRouterStatus;
    type Context = StatusContext;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    async fn reconcile(vrs: Arc<VRouterStatus>, ctx: Arc<StatusContext>) -> Result<Action, Error> {
        let wait = sync(&vrs, &ctx).await?;
        Ok(Action::requeue(wait.unwrap_or_else(|| sync_interval(&vrs))))
    }

    /// A conflict is a write from a view one event behind (this controller
    /// is the only writer of the status): the event is in the store by the
    /// retry, and the sync it finds done is not repeated.
    fn retry_after(error: &Error, _ctx: &StatusContext) -> Duration {
        match error {
            Error::Kube(e) if reconciler::is_conflict(e) => reconciler::CONFLICT_RETRY,
            _ => Duration::from_secs(10),
        }
    }

    fn is_routine(error: &Error) -> bool {
        matches!(error, Error::Kube(e) if reconciler::is_conflict(e))
    }
}

fn sync_interval(vrs: &VRouterStatus) -> Duration {
    vrs.spec.sync_interval.to_std().max(Duration::from_secs(1))
}

/// How soon to look again when `vrs` is older than a status write of this
/// controller's own: from it, the sync just made would look due, and its
/// write would be a conflict.
fn behind_own_write(vrs: &VRouterStatus, ctx: &StatusContext) -> Option<Duration> {
    if ctx.own.own_status_writes.is_replaced(vrs) {
        // The write's echo is in the store already: at once.
        return Some(reconciler::CONFLICT_RETRY);
    }
    // The store is behind the write (a config event woke this reconcile
    // first). Its echo wakes the controller; the requeue is for one lost.
    ctx.own
        .own_status_writes
        .awaiting_echo(vrs)
        .then_some(own_writes::ECHO_WAIT)
}

/// One sync; returns when the next is due if that is not a full interval
/// from now.
async fn sync(vrs: &VRouterStatus, ctx: &StatusContext) -> Result<Option<Duration>, Error> {
    if vrs.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    if let Some(again) = behind_own_write(vrs, ctx) {
        return Ok(Some(again));
    }
    let namespace = vrs.namespace().unwrap_or_default();
    let current = vrs.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let fail = |why: String| summarised(vrs, decide::on_read_failed(&current, &why, now), None, now);
    let config_ref = &vrs.spec.config_ref;
    if config_ref.crosses_namespace(&namespace) {
        let next = fail(format!("spec.configRef must stay in namespace {namespace:?}"));
        write_status(ctx, vrs, &current, &next).await?;
        return Ok(None);
    }
    // The config as the watch has it: a config event that changes what is
    // read here wakes this reconcile after the store holds it.
    let Some(config) = stores::get(&ctx.own.configs, &ctx.client, &namespace, &config_ref.name).await? else {
        let next = fail(format!("VRouterConfig {:?} not found", config_ref.name));
        write_status(ctx, vrs, &current, &next).await?;
        return Ok(None);
    };
    let view = ConfigView {
        phase: config.status.as_ref().map(|s| s.phase).unwrap_or_default(),
        last_applied_time: config.status.as_ref().and_then(|s| s.last_applied_time.clone()),
        paused: config.is_paused(),
        repair_off: !ctx.settings.drift_repair,
    };
    if decide::awaits_first_apply(&current, &view) {
        return Ok(None);
    }
    // A config event can wake this reconcile at any time (its own writes'
    // echoes are dropped); without this the router would be read again at once,
    // and the new lastFetchTime written again, in a loop. A spec not yet
    // observed (another config, another interval) is read for now.
    let observed = current.observed_generation == vrs.meta().generation;
    if observed && let Some(wait) = decide::sync_wait(&current, &view, sync_interval(vrs), now) {
        return Ok(Some(wait));
    }
    if !ctx.apply_dispatches.is_quiet() {
        // A burst of applies goes first (`crate::runtime::apply_dispatches`); the
        // sync after it decides again from the store, where the config may
        // have been applied again meanwhile.
        ctx.apply_dispatches.quiet().await;
        return Ok(Some(Duration::ZERO));
    }
    read_and_record(ctx, vrs, &config, &current, &view, now).await?;
    Ok(None)
}

/// Reads the router, then writes what it holds (the status, the stored
/// configs) and acts on drift. A router that cannot be read is reported in
/// Synced=False, with no error return: it is looked at again after
/// syncInterval, without the controller's error backoff.
async fn read_and_record(
    ctx: &StatusContext,
    vrs: &VRouterStatus,
    config: &VRouterConfig,
    current: &VRouterStatusStatus,
    view: &ConfigView,
    now: Timestamp,
) -> Result<(), Error> {
    let (startup, running) = match read_router_counted(ctx, config).await {
        Ok(read) => read,
        Err(why) => {
            let next = summarised(vrs, decide::on_read_failed(current, &why, now), None, now);
            return write_status(ctx, vrs, current, &next).await;
        }
    };
    let reading = reading_of(&startup, &running);
    let mut sync = decide::on_read(current, view, &reading, now);
    let drift = sync.status.drift_detected.then(|| Drift {
        repairing: view.drift_is_repaired(),
        why: &sync.status.message,
    });
    sync.status = summarised(vrs, sync.status.clone(), drift, now);
    stored_configs::keep(
        &ctx.client,
        vrs,
        current,
        &reading,
        &startup,
        &running,
        &mut sync.status,
    )
    .await?;
    write_status(ctx, vrs, current, &sync.status).await?;
    act_on_drift(ctx, vrs, config, &sync).await
}

/// After the sync's status is written: drift newly seen is announced, and
/// a config to repair goes back to Pending.
async fn act_on_drift(
    ctx: &StatusContext,
    vrs: &VRouterStatus,
    config: &VRouterConfig,
    sync: &decide::Sync,
) -> Result<(), Error> {
    if sync.drift_started {
        ctx.metrics.drifts_detected.inc();
        ctx.event(
            vrs,
            EventType::Warning,
            reason::DRIFT_DETECTED,
            "the router's startup config differs from the last applied one".into(),
        )
        .await;
    }
    if sync.reset_config {
        reset_to_pending(ctx, config).await?;
    }
    Ok(())
}

/// Writes the status when it changed, and records the write so its echo
/// does not wake this controller.
async fn write_status(
    ctx: &StatusContext,
    vrs: &VRouterStatus,
    current: &VRouterStatusStatus,
    next: &VRouterStatusStatus,
) -> Result<(), Error> {
    if let Some(written) = status_writes::patch_status(&ctx.client, vrs, Some(current), next).await? {
        ctx.own.own_status_writes.record_over(vrs, &written);
    }
    Ok(())
}

/// [`read_router`], counted in `vrouter_drift_reads_total`.
async fn read_router_counted(ctx: &StatusContext, config: &VRouterConfig) -> Result<(ReadConfig, ReadConfig), String> {
    let read = read_router(ctx, config).await;
    let result = if read.is_ok() { "read" } else { "failed" };
    ctx.metrics.drift_reads.get_or_create(&ResultLabels { result }).inc();
    read
}

/// The hashes of the configs read; an empty running config (it could not
/// be read) has none.
fn reading_of(startup: &ReadConfig, running: &ReadConfig) -> Reading {
    Reading {
        startup_hash: startup.hash.clone(),
        running_hash: if running.len == 0 {
            String::new()
        } else {
            running.hash.clone()
        },
    }
}

/// `status` with its observed generation and the `Ready`, `Reconciling` and
/// `Stalled` conditions its `Synced` and `drift` imply.
fn summarised(
    vrs: &VRouterStatus,
    mut status: VRouterStatusStatus,
    drift: Option<Drift<'_>>,
    now: Timestamp,
) -> VRouterStatusStatus {
    // Every status this controller writes passes here: its message may
    // quote a router's answer.
    vrouter_api::text::bound(&mut status.message, vrouter_api::text::MAX_MESSAGE_BYTES);
    let summary = conditions::synced_summary(&status.conditions, drift);
    status.observed_generation = vrs.meta().generation;
    conditions::summarise(&mut status.conditions, summary, status.observed_generation, now);
    status
}

/// The router's startup and running configs, or why they could not be read.
/// The running config is for people to compare with the startup one; drift
/// is decided on the startup config alone, so a router whose running config
/// cannot be shown is still checked (its running config stored empty).
/// Each config is hashed ([`ReadConfig`]) before the next is read.
async fn read_router(ctx: &StatusContext, config: &VRouterConfig) -> Result<(ReadConfig, ReadConfig), String> {
    let namespace = config.namespace().unwrap_or_default();
    let target_name = &config.spec.target_ref.name;
    let target = stores::get(&ctx.own.targets, &ctx.client, &namespace, target_name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("VRouterTarget {target_name:?} not found"))?;
    let provider = ctx.providers.for_target(&target).await.map_err(|e| e.to_string())?;
    // A periodic read, not an action: the shared few-seconds-old view
    // serves (the readiness check and the reads below reach the VM itself).
    if !provider.is_vm_running_polled().await.map_err(|e| e.to_string())? {
        return Err("the VM is not running".to_owned());
    }
    // Shared with the config controller: the drift read follows an apply
    // closely, and the apply's check (or its commit) serves. A check that
    // is due reads the running config in the same guest call.
    let running = recently_ready::check_reading_running(&ctx.recently_ready, &target, &*provider)
        .await
        .map_err(|e| e.to_string())?;
    let running = running.unwrap_or_else(|error| {
        tracing::warn!(config = %config.name_any(), %namespace, %error, "could not read the running config; storing it empty");
        Vec::new()
    });
    let running = ReadConfig::off_runtime(running).await;
    let startup = provider.read_startup_config().await.map_err(|e| e.to_string())?;
    Ok((ReadConfig::off_runtime(startup).await, running))
}

/// Sends a drifted config back to Pending; its controller applies it again
/// at the same generation. The write is conditional on the config's
/// resourceVersion, so it never overwrites an apply that just started.
async fn reset_to_pending(ctx: &StatusContext, config: &VRouterConfig) -> Result<(), Error> {
    let current = config.status.clone().unwrap_or_default();
    let mut next = current.clone();
    next.phase = Phase::Pending;
    next.message = "drift detected: the router's config changed outside the operator; applying again".into();
    let generation = Some(next.observed_generation);
    let now = Timestamp::now();
    conditions::set(
        &mut next.conditions,
        Wanted {
            type_: condition::APPLIED,
            status: false,
            reason: reason::DRIFT_DETECTED,
            message: next.message.clone(),
            observed_generation: generation,
        },
        now,
    );
    let next = crate::controllers::vrouter_config::summarised(next, config, None, now);
    status_writes::patch_status(&ctx.client, config, Some(&current), &next).await?;
    ctx.event(config, EventType::Warning, reason::DRIFT_DETECTED, next.message.clone())
        .await;
    Ok(())
}
