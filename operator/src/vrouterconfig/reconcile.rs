//! The VRouterConfig reconciler: reads the config, its target and the
//! router, asks `decide` what follows, and writes only what changed.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::{ANNOTATION_PAUSED, FINALIZER};
use vrouter_api::{NameRef, VRouterConfig, VRouterConfigStatus, VRouterStatus, VRouterStatusSpec, VRouterTarget};
use vrouter_providers::{ExecHandle, ExecStatus, ProviderError};

use super::decide::{self, Clock, Next, Poll, Step};
use super::one_apply_per_router::{Router, in_flight_elsewhere};
use crate::context::Context;
use crate::metrics::ResultLabels;
use crate::objects;

pub const CONTROLLER: &str = "vrouterconfig";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Retry(String),
}

/// The config is paused for debugging: no apply, no repair.
pub fn is_paused(config: &VRouterConfig) -> bool {
    config.annotations().get(ANNOTATION_PAUSED).is_some_and(|v| v == "true")
}

fn to_poll(result: Result<ExecStatus, ProviderError>) -> Poll {
    match result {
        Ok(ExecStatus::Running) => Poll::Running,
        Ok(ExecStatus::Exited(outcome)) => Poll::Exited {
            code: outcome.exit_code,
            // A non-zero code is reported by the code itself; the excerpt
            // says what the router printed.
            failure: if outcome.exit_code == 0 {
                outcome.failure()
            } else {
                outcome.error.clone()
            },
        },
        Err(e) if e.is_exec_result_lost() => Poll::Lost,
        Err(e) => match e.apply_ended() {
            Some(cause) => Poll::Ended {
                timed_out: cause.is_timeout(),
                why: cause.to_string(),
            },
            None => Poll::Error(e.to_string()),
        },
    }
}

pub async fn reconcile(config: Arc<VRouterConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&config, &ctx).await;
    ctx.metrics.reconciled(CONTROLLER, started.elapsed(), result.is_err());
    result
}

async fn reconcile_inner(config: &VRouterConfig, ctx: &Context) -> Result<Action, Error> {
    if config.meta().deletion_timestamp.is_some() {
        // Deleting the object never touches the router: it keeps its config.
        // An apply still running keeps its router hold until it expires.
        let router = Router {
            namespace: config.namespace().unwrap_or_default(),
            target: config.spec.target_ref.name.clone(),
        };
        ctx.status_objects_due.remove(&router, &config.name_any());
        objects::remove_finalizer(&ctx.client, config, FINALIZER).await?;
        return Ok(Action::await_change());
    }
    if objects::ensure_finalizer(&ctx.client, config, FINALIZER).await? {
        // The patch's own watch event brings the updated object; a requeue
        // now would read the cache from before it, and its finalizer patch
        // would be a conflict (a third of the extra writes at 1,000 configs).
        return Ok(Action::await_change());
    }
    if is_paused(config) {
        return Ok(Action::await_change());
    }
    let namespace = config.namespace().unwrap_or_default();
    let status = config.status.clone().unwrap_or_default();
    let clock = Clock {
        now: Timestamp::now(),
        apply_timeout: ctx.settings.apply_timeout,
    };
    let target_ref = &config.spec.target_ref;
    if target_ref.crosses_namespace(&namespace) {
        return note_problem(
            ctx,
            config,
            &status,
            format!("spec.targetRef must stay in namespace {namespace:?}"),
        )
        .await;
    }
    let targets: Api<VRouterTarget> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(target) = targets.get_opt(&target_ref.name).await? else {
        return note_problem(
            ctx,
            config,
            &status,
            format!("VRouterTarget {:?} not found", target_ref.name),
        )
        .await;
    };
    let provider = match ctx.providers.for_target(&target).await {
        Ok(provider) => provider,
        Err(e) => return cannot_reach(ctx, config, &status, &e).await,
    };
    let last_reboot = target.status.as_ref().and_then(|s| s.last_reboot_time.clone());
    let generation = config.meta().generation.unwrap_or(0);
    let router = Router {
        namespace: namespace.clone(),
        target: target_ref.name.clone(),
    };
    let name = config.name_any();
    // A config that would dispatch but whose router is busy waits without
    // looking at the router: the other apply is polled through the same agent.
    if status.exec_pid == 0
        && decide::dispatch_reason(&status, generation, last_reboot.as_ref()).is_some()
        && let Some(other) = router_busy_with(ctx, &router, &name, clock).await
    {
        return wait_for_router(ctx, config, &status, &other).await;
    }

    let running = match provider.is_vm_running().await {
        Ok(running) => running,
        // A role that lacks a permission needs a person, like a missing target.
        Err(e) if e.is_forbidden() => return cannot_reach(ctx, config, &status, &e).await,
        // An apply in flight keeps its timeout even while its VM cannot be
        // looked at; without one there is nothing to time out.
        Err(e) if status.exec_pid > 0 => {
            let step = decide::on_exec_polled(&status, clock, Poll::Error(e.to_string()));
            record_apply_end(ctx, &status, &step, clock.now);
            return finish(ctx, config, &status, step).await;
        }
        Err(e) => return Err(Error::Retry(e.to_string())),
    };
    if !running {
        return finish(ctx, config, &status, decide::on_vm_stopped(&status, clock)).await;
    }
    if let Err(e) = provider.check_ready().await {
        if e.is_forbidden() {
            return cannot_reach(ctx, config, &status, &e).await;
        }
        return finish(
            ctx,
            config,
            &status,
            decide::on_not_ready(&status, clock, &e.to_string()),
        )
        .await;
    }
    // An apply in flight holds its router until its result is in; a
    // process that restarted mid-apply takes the hold again here.
    let hold_until = Instant::now() + ctx.settings.apply_timeout;
    if status.exec_pid > 0 {
        let poll = to_poll(provider.get_exec_status(ExecHandle(status.exec_pid)).await);
        let step = decide::on_exec_polled(&status, clock, poll);
        record_apply_end(ctx, &status, &step, clock.now);
        if step.status.exec_pid > 0 {
            let _ = ctx.router_locks.try_hold(&router, &name, hold_until, Instant::now());
        }
        return finish(ctx, config, &status, step).await;
    }
    let Some(reason) = decide::dispatch_reason(&status, generation, last_reboot.as_ref()) else {
        if status.phase == vrouter_api::Phase::Applied && ctx.status_objects_due.contains(&router, &name) {
            return Ok(match ensure_status_object(ctx, config, &router).await? {
                true => Action::await_change(),
                false => Action::requeue(STATUS_OBJECT_RETRY),
            });
        }
        return Ok(Action::await_change());
    };
    if let Err(other) = ctx.router_locks.try_hold(&router, &name, hold_until, Instant::now()) {
        return wait_for_router(ctx, config, &status, &other).await;
    }
    if let Some(other) = router_busy_with(ctx, &router, &name, clock).await {
        ctx.router_locks.release(&router, &name);
        return wait_for_router(ctx, config, &status, &other).await;
    }
    tracing::info!(config = %name, ?reason, generation, "dispatching apply");
    // Applied=False for the new generation goes out before the script runs.
    let before = decide::before_dispatch(&status, generation, clock);
    let fresh = match objects::write_status(&ctx.client, config, Some(&status), &before).await {
        Ok(fresh) => fresh,
        Err(e) => {
            ctx.router_locks.release(&router, &name);
            return Err(e.into());
        }
    };
    let step = match provider
        .exec_script(&config.spec.config, &config.spec.commands, config.spec.save)
        .await
    {
        Ok(handle) => decide::after_dispatch(&before, generation, clock, handle.get(), last_reboot.as_ref()),
        Err(e) => {
            let permanent = matches!(
                e,
                ProviderError::TooLarge { .. } | ProviderError::NotSupported { .. } | ProviderError::Render(_)
            );
            decide::on_dispatch_failed(
                &before,
                generation,
                clock,
                &e.to_string(),
                permanent,
                last_reboot.as_ref(),
            )
        }
    };
    finish(ctx, &fresh, &before, step).await
}

/// How soon a config waiting for another config's apply on its router looks
/// again; applies of a small config take about a second.
const ROUTER_BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Another config whose apply runs on `router`: held in this process, or,
/// after a restart, shown in stored statuses (the store is read once its
/// first list is in, so a restarted process cannot miss one).
async fn router_busy_with(ctx: &Context, router: &Router, name: &str, clock: Clock) -> Option<String> {
    if let Some(other) = ctx.router_locks.held_by_other(router, name, Instant::now()) {
        return Some(other);
    }
    let store = ctx.configs_seen.read().unwrap_or_else(|e| e.into_inner()).clone()?;
    store.wait_until_ready().await.ok()?;
    let configs = store.state();
    in_flight_elsewhere(
        configs.iter().map(|c| &**c),
        router,
        name,
        clock.now,
        clock.apply_timeout,
    )
}

async fn wait_for_router(
    ctx: &Context,
    config: &VRouterConfig,
    status: &VRouterConfigStatus,
    other: &str,
) -> Result<Action, Error> {
    let mut next = decide::nothing_attempted_meanwhile(status.clone());
    next.message = format!("waiting for VRouterConfig {other:?} to finish its apply on the same router");
    objects::patch_status(&ctx.client, config, Some(status), &next).await?;
    Ok(Action::requeue(ROUTER_BUSY_RETRY))
}

/// A problem that needs a person (a missing target, unreadable credentials):
/// shown in `status.message`, retried slowly, never a hot loop.
async fn note_problem(
    ctx: &Context,
    config: &VRouterConfig,
    status: &VRouterConfigStatus,
    message: String,
) -> Result<Action, Error> {
    let clock = Clock {
        now: Timestamp::now(),
        apply_timeout: ctx.settings.apply_timeout,
    };
    let step = decide::on_target_unavailable(status, clock, &message);
    if step.status.exec_pid == 0 && status.exec_pid > 0 {
        // The apply in flight timed out meanwhile.
        record_apply_end(ctx, status, &step, clock.now);
        return finish(ctx, config, status, step).await;
    }
    if objects::patch_status(&ctx.client, config, Some(status), &step.status).await? {
        ctx.event(config, true, vrouter_api::constants::event::TARGET_UNAVAILABLE, message)
            .await;
    }
    Ok(match step.next {
        Next::RequeueAfter(after) => Action::requeue(after),
        _ => Action::requeue(decide::TARGET_UNAVAILABLE_RETRY),
    })
}

async fn cannot_reach(
    ctx: &Context,
    config: &VRouterConfig,
    status: &VRouterConfigStatus,
    error: &ProviderError,
) -> Result<Action, Error> {
    note_problem(ctx, config, status, format!("cannot reach the router: {error}")).await
}

fn record_apply_end(ctx: &Context, before: &VRouterConfigStatus, step: &Step, now: Timestamp) {
    if step.status.exec_pid != 0 {
        return;
    }
    let result = match (
        &step.status.phase,
        step.status.conditions.iter().find(|c| c.type_ == "Applied"),
    ) {
        (vrouter_api::Phase::Applied, _) => "applied",
        (vrouter_api::Phase::Failed, Some(c)) if c.reason == vrouter_api::constants::reason::APPLY_TIMEOUT => "timeout",
        (vrouter_api::Phase::Failed, _) => "failed",
        _ => "lost",
    };
    ctx.metrics.applies.get_or_create(&ResultLabels { result }).inc();
    if let Some(started) = &before.exec_started_time {
        let seconds = now.duration_since(started.0).as_secs_f64();
        ctx.metrics.exec_poll_latency.observe(seconds.max(0.0));
    }
}

async fn finish(
    ctx: &Context,
    config: &VRouterConfig,
    current: &VRouterConfigStatus,
    step: Step,
) -> Result<Action, Error> {
    if step.status.exec_pid == 0 {
        // No apply of this config runs (any more): its router is free.
        let router = Router {
            namespace: config.namespace().unwrap_or_default(),
            target: config.spec.target_ref.name.clone(),
        };
        ctx.router_locks.release(&router, &config.name_any());
    }
    objects::patch_status_keeping_result(&ctx.client, config, current, &step.status).await?;
    if let Some(event) = &step.event {
        ctx.event(config, event.warning, event.reason, event.note.clone()).await;
    }
    if step.status.phase == vrouter_api::Phase::Applied && current.phase != vrouter_api::Phase::Applied {
        let router = Router {
            namespace: config.namespace().unwrap_or_default(),
            target: config.spec.target_ref.name.clone(),
        };
        if !ensure_status_object(ctx, config, &router).await? {
            return Ok(Action::requeue(STATUS_OBJECT_RETRY));
        }
    }
    match step.next {
        Next::Done => Ok(Action::await_change()),
        Next::RequeueAfter(after) => Ok(Action::requeue(after)),
        Next::Retry(message) => Err(Error::Retry(message)),
    }
}

/// How soon a VRouterStatus that could not be created is tried again.
const STATUS_OBJECT_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// After the first successful apply, a VRouterStatus watches the router for
/// drift. It is owned by the config, so it goes when the config goes. A
/// failed create is remembered and tried again every
/// [`STATUS_OBJECT_RETRY`]: the config is Applied by then and nothing else
/// would bring it back here before its next apply. Returns whether it
/// exists now.
pub(crate) async fn ensure_status_object(
    ctx: &Context,
    config: &VRouterConfig,
    router: &Router,
) -> Result<bool, Error> {
    let name = config.name_any();
    match create_status_object(ctx, config).await {
        Ok(()) => {
            ctx.status_objects_due.remove(router, &name);
            Ok(true)
        }
        Err(Error::Kube(error)) => {
            ctx.status_objects_due.insert(router, &name);
            let message = match &error {
                kube::Error::Api(e) => format!("{} ({})", e.message, e.reason),
                other => other.to_string(),
            };
            tracing::warn!(config = %name, %message, "could not create the VRouterStatus; retrying");
            ctx.event(
                config,
                true,
                vrouter_api::constants::event::STATUS_NOT_CREATED,
                format!("could not create VRouterStatus {name:?} for drift detection: {message}"),
            )
            .await;
            Ok(false)
        }
        Err(other) => Err(other),
    }
}

async fn create_status_object(ctx: &Context, config: &VRouterConfig) -> Result<(), Error> {
    let namespace = config.namespace().unwrap_or_default();
    let api: Api<VRouterStatus> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = config.name_any();
    // Create and take "already exists" as done: one request either way,
    // where a GET first cost two for every new config.
    let status = VRouterStatus {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            owner_references: Some(vec![OwnerReference {
                api_version: "vrouter.kojuro.date/v1".into(),
                kind: "VRouterConfig".into(),
                name: name.clone(),
                uid: config.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: VRouterStatusSpec {
            config_ref: NameRef::new(name),
            sync_interval: vrouter_api::Duration::from_secs(300),
        },
        status: None,
    };
    match api.create(&PostParams::default(), &status).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn error_policy(_config: Arc<VRouterConfig>, error: &Error, _ctx: Arc<Context>) -> Action {
    // A conflict means the cache was one write behind: look again promptly.
    if let Error::Kube(kube::Error::Api(e)) = error
        && e.code == 409
    {
        return Action::requeue(std::time::Duration::from_millis(200));
    }
    tracing::warn!(%error, "VRouterConfig reconcile failed; retrying");
    Action::requeue(std::time::Duration::from_secs(5))
}
