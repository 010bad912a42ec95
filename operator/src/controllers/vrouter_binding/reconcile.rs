//! The VRouterBinding reconciler: reads what the binding references,
//! composes every target's config, deletes orphans, then writes configs —
//! all at once (Disabled) or one at a time as `vrouter-rollout` decides.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tokio::sync::Semaphore;
use vrouter_api::compose::{ComposeError, render_configs};
use vrouter_api::constants::{FINALIZER, LABEL_BINDING, condition, reason};
use vrouter_api::{RolloutStatus, VRouterBinding, VRouterConfig};
use vrouter_rollout::{ConditionStatus, Decision, Frontier, Rollout};

use super::error::Error;
use super::render_cache::RenderKey;
use super::resolve::{self, ResolveError};
use super::status::set_status_with;
use super::writes::{write_all, write_config};
use super::{BindingContext, decide, pause, waves};
use crate::runtime::conditions::Wanted;
use crate::runtime::crash_point::{self, CrashPoint};
use crate::runtime::metrics::StateLabels;
use crate::runtime::reconciler::Reconciler;
use crate::runtime::{finalizers, own_writes, stores};

pub const CONTROLLER: &str = "vrouterbinding";

/// Why the binding's configs could not be composed.
#[derive(Debug, thiserror::Error)]
enum RenderError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Compose(#[from] ComposeError),
    /// The runtime shut down while the render ran.
    #[error("the render was interrupted: {0}")]
    Interrupted(tokio::task::JoinError),
}

/// How soon a binding that cannot be rendered is looked at again (a watched
/// template, params or target that changes brings it back sooner).
const UNRENDERABLE_RETRY: Duration = Duration::from_secs(60);

pub struct BindingReconciler;

impl Reconciler for BindingReconciler {
    type Object = VRouterBinding;
    type Context = BindingContext;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    async fn reconcile(binding: Arc<VRouterBinding>, ctx: Arc<BindingContext>) -> Result<Action, Error> {
        let result = reconcile(&binding, &ctx).await;
        if let Err(error) = &result {
            report_error(&binding, &ctx, error).await;
        }
        result
    }

    fn retry_after(_error: &Error, _ctx: &BindingContext) -> Duration {
        Duration::from_secs(5)
    }
}

/// Any failed reconcile shows in `Ready=False/ReconcileError`: a `Ready=True`
/// left from before would tell `kubectl wait` that configs it cannot write
/// are in place. A conflict only means the cache was behind; the retry
/// sorts it out and is not worth a flip of `Ready`.
async fn report_error(binding: &VRouterBinding, ctx: &BindingContext, error: &Error) {
    if matches!(error, Error::Kube(kube::Error::Api(e)) if e.code == 409 && e.reason == "Conflict") {
        return;
    }
    let message = match error {
        // The server's own sentence, without the Debug dump of its response.
        Error::Kube(kube::Error::Api(e)) => format!("Kubernetes API: {} ({})", e.message, e.reason),
        other => other.to_string(),
    };
    let retrying = is_transient(error);
    match set_status(ctx, binding, not_ready(binding, message.clone()), None, retrying).await {
        Ok(true) => {
            ctx.event(binding, EventType::Warning, reason::RECONCILE_ERROR, message)
                .await
        }
        Ok(false) => {}
        // The API server that failed the reconcile may fail this too; the
        // retry comes either way.
        Err(e) => tracing::debug!(error = %e, "could not report the failed reconcile in Ready"),
    }
}

/// Whether a failed reconcile may pass by itself on the retry: the API
/// server or the connection to it failed. A refused request (a name taken
/// by an object the binding does not control, a forbidden or invalid
/// write) and the binding's own errors need a change.
fn is_transient(error: &Error) -> bool {
    match error {
        Error::Kube(kube::Error::Api(e)) => e.code >= 500 || e.code == 429 || e.code == 409 && e.reason == "Conflict",
        Error::Kube(_) => true,
        Error::Rollout(_) | Error::NotOurs(_) => false,
    }
}

fn not_ready(binding: &VRouterBinding, message: String) -> Wanted<'static> {
    Wanted {
        type_: condition::READY,
        status: false,
        reason: reason::RECONCILE_ERROR,
        message,
        observed_generation: binding.meta().generation,
    }
}

/// Every target's desired VRouterConfig, in `targetRefs` order. Nothing is
/// written until all of them rendered. A render made from the same
/// binding and referents (the same uids and generations) is taken from
/// [`RenderCache`] instead of being made again.
///
/// The render runs on the blocking pool: a template may compute for up to
/// its time limit at every target, and on an async worker that would stall
/// every task sharing the worker, the Lease renewal and the webhook included.
/// At most one render per core runs at once, so that renders cannot take
/// every core from the async workers either.
async fn render(ctx: &BindingContext, binding: &VRouterBinding) -> Result<Arc<Vec<VRouterConfig>>, RenderError> {
    static RENDER_SLOTS: OnceLock<Semaphore> = OnceLock::new();
    // Taken before the referents are read: one that changes in between
    // leaves the render under the older key, which the next look misses.
    let key = render_key(ctx, binding);
    if let Some(kept) = key.as_ref().and_then(|key| ctx.own.renders.get(key)) {
        return Ok(kept);
    }
    let referenced = resolve::references(&ctx.client, &ctx.own.referents, binding).await?;
    let slots = RENDER_SLOTS
        .get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(1, std::num::NonZero::get)));
    let _slot = slots.acquire().await.expect("the semaphore is never closed");
    let owned = binding.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        render_configs(&owned, &referenced.templates, &referenced.params, &referenced.targets)
    })
    .await;
    let rendered = match rendered {
        Ok(configs) => Arc::new(configs?),
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(join) => return Err(RenderError::Interrupted(join)),
    };
    if let Some(key) = key {
        ctx.own.renders.put(key, rendered.clone());
    }
    Ok(rendered)
}

/// What a render of `binding` is made from, as the watches hold it now.
fn render_key(ctx: &BindingContext, binding: &VRouterBinding) -> Option<RenderKey> {
    let meta = binding.meta();
    Some(RenderKey {
        binding: (meta.uid.clone()?, meta.generation.unwrap_or(0)),
        referents: resolve::versions(&ctx.own.referents, binding)?,
    })
}

/// Writes `ready` with the kstatus conditions it implies (`retrying`: a
/// `ReconcileError` the controller expects to get past by itself) and the
/// rollout's stamp, when anything changed.
async fn set_status(
    ctx: &BindingContext,
    binding: &VRouterBinding,
    ready: Wanted<'_>,
    rollout: Option<RolloutStatus>,
    retrying: bool,
) -> Result<bool, Error> {
    set_status_with(ctx, binding, ready, retrying, |next| {
        if rollout.is_some() {
            next.rollout = rollout;
        }
    })
    .await
}

async fn reconcile(binding: &VRouterBinding, ctx: &BindingContext) -> Result<Action, Error> {
    if binding.meta().deletion_timestamp.is_some() {
        // Generated configs are owned by the binding; garbage collection
        // removes them. Nothing on the routers changes.
        if let Some(uid) = &binding.meta().uid {
            ctx.own.renders.forget(uid);
        }
        ctx.own.status_writes.forget(binding);
        return Ok(finalizers::release(&ctx.client, binding, FINALIZER).await?);
    }
    if ctx.own.status_writes.is_replaced(binding) {
        // Handed the binding from before a status write of its own whose
        // echo came in meanwhile (the echo's own reconcile follows): its
        // status write would be a conflict.
        return Ok(Action::requeue(own_writes::ECHO_WAIT));
    }
    if let Some(action) = finalizers::ensure(&ctx.client, binding, FINALIZER).await? {
        return Ok(action);
    }
    let namespace = binding.namespace().unwrap_or_default();
    if awaiting_own_writes(ctx, binding, &namespace) {
        // The config store is behind a write of this binding's own: from
        // it, a config just created would look missing (and be created
        // again), one just patched would look unchanged. Each echo wakes
        // the binding (a new config, a new generation or labels: see
        // `wake`), so the last one brings the reconcile that goes on; the
        // requeue only looks again should an echo be lost (to a watch that
        // listed again); the wait ends with the list, or after a minute.
        // (It polled every 200 ms before: 1,000 creates in flight kept the
        // binding reconciling five times a second for nothing.)
        return Ok(Action::requeue(own_writes::ECHO_WAIT));
    }
    let desired = match render(ctx, binding).await {
        Ok(desired) => desired,
        Err(RenderError::Resolve(ResolveError::Kube(e))) => return Err(e.into()),
        Err(unrenderable) => {
            // Every existing config stays as it is; a person must act.
            let message = unrenderable.to_string();
            if set_status(ctx, binding, not_ready(binding, message.clone()), None, false).await? {
                ctx.event(binding, EventType::Warning, reason::RECONCILE_ERROR, message)
                    .await;
            }
            return Ok(Action::requeue(UNRENDERABLE_RETRY));
        }
    };
    let configs: Api<VRouterConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(existing) = generated_configs(ctx, binding, &namespace).await else {
        // The config watch ended: the process is shutting down.
        return Ok(Action::await_change());
    };
    // A config rolled back while the binding is unchanged stays as it is.
    let desired = super::rollback_hold::keep_held(binding, desired, &existing);
    delete_orphans(&configs, binding, &desired, &existing).await?;
    let paused = binding.spec.paused;
    if paused {
        // Before any spec is written: no config may apply it.
        pause::mark(&configs, &ctx.own.config_writes, &existing, true).await?;
    }
    let by_name: HashMap<String, &VRouterConfig> = existing.iter().map(|c| (c.name_any(), &**c)).collect();
    let requeue_after = match waves::policy(binding)? {
        Some(policy) => waves::roll(ctx, binding, &configs, &desired, &by_name, &policy).await?,
        None => {
            let decision = decide_rollout(binding, &desired, &by_name)?;
            carry_out(ctx, binding, &configs, &desired, &by_name, &decision).await?;
            decision.requeue_after()
        }
    };
    if !paused {
        // After the specs are written: a config resumes with its newest spec.
        pause::mark(&configs, &ctx.own.config_writes, &existing, false).await?;
    }
    pause::announce(ctx, binding).await;
    Ok(decide::next_action(requeue_after))
}

/// Whether a config write of this binding's own has not come back through
/// the config watch yet (each target's config, by the name it is given).
fn awaiting_own_writes(ctx: &BindingContext, binding: &VRouterBinding, namespace: &str) -> bool {
    // Before the target store is filled the selected targets are unknown;
    // their configs are then checked by the names of the existing ones.
    let targets =
        super::select::from_store(&ctx.own.referents.targets, binding).unwrap_or_else(|| binding.spec.target_names([]));
    targets.iter().any(|target| {
        ctx.own
            .config_writes
            .awaiting_echo_of(namespace, &binding.config_name(target))
    })
}

/// The configs carrying the binding's label, from the config watch's store
/// once its first list is in (a LIST per reconcile before: most of a
/// rollout's reads), shared with the store rather than copied (copies of
/// every config were 3.6 % of the operator's CPU in a rollout over 1,000
/// targets); `None` when the watch is gone.
async fn generated_configs(
    ctx: &BindingContext,
    binding: &VRouterBinding,
    namespace: &str,
) -> Option<Vec<Arc<VRouterConfig>>> {
    if !stores::ready(&ctx.own.configs).await {
        return None;
    }
    let name = binding.name_any();
    let generated = ctx
        .own
        .configs
        .state()
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
        .filter(|c| c.labels().get(LABEL_BINDING) == Some(&name))
        .collect();
    Some(generated)
}

/// Deletes the configs no target wants any more. The routers keep their
/// config: only the objects go.
async fn delete_orphans(
    configs: &Api<VRouterConfig>,
    binding: &VRouterBinding,
    desired: &[VRouterConfig],
    existing: &[Arc<VRouterConfig>],
) -> Result<(), Error> {
    let desired_names: HashSet<String> = desired.iter().map(|c| c.name_any()).collect();
    for orphan in decide::orphans(&desired_names, existing.iter().map(|c| &**c)) {
        tracing::info!(binding = %binding.name_any(), config = orphan, "deleting orphaned VRouterConfig");
        match configs.delete(orphan, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The rollout walk's next step, from the desired configs, the existing
/// ones and the frontier recorded in the binding's status.
fn decide_rollout(
    binding: &VRouterBinding,
    desired: &[VRouterConfig],
    existing: &HashMap<String, &VRouterConfig>,
) -> Result<Decision, Error> {
    let targets = decide::walk_targets(desired, existing)?;
    let frontier = binding
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| Frontier::from_status(&r.last_updated_target, r.last_update_time.as_ref().map(|t| t.0)));
    let binding_name = binding.name_any();
    let rollout = Rollout {
        binding: &binding_name,
        policy: decide::policy(binding),
        frontier: frontier.as_ref(),
        targets: &targets,
    };
    Ok(vrouter_rollout::decide(&rollout, Timestamp::now())?)
}

/// Performs `decision`: the writes it asks for and the Ready condition,
/// with the rollout's metrics and events.
async fn carry_out(
    ctx: &BindingContext,
    binding: &VRouterBinding,
    configs: &Api<VRouterConfig>,
    desired: &[VRouterConfig],
    existing: &HashMap<String, &VRouterConfig>,
    decision: &Decision,
) -> Result<(), Error> {
    let ready = decision.ready();
    let wanted = Wanted {
        type_: condition::READY,
        status: ready.status == ConditionStatus::True,
        reason: ready.reason.as_str(),
        message: ready.message.clone(),
        observed_generation: binding.meta().generation,
    };
    let wanted = pause::ready_or_paused(binding, desired.len(), wanted);
    let paused = binding.spec.paused;
    let existing_of = |config: &VRouterConfig| existing.get(&config.name_any()).copied();
    let rollouts = |state: &'static str| ctx.metrics.rollouts.get_or_create(&StateLabels { state }).inc();
    match decision {
        Decision::WriteAll { targets: indices, .. } => {
            // Several writes in flight; the applies they start wait for
            // the batch (`binding_writes`) instead of slowing it down.
            let writes = indices
                .iter()
                .map(|&i| (&desired[i], existing_of(&desired[i])))
                .collect();
            let batch = ctx.binding_writes.batch(&binding.uid().unwrap_or_default());
            write_all(configs, &ctx.own.config_writes, writes).await?;
            drop(batch);
            set_status(ctx, binding, wanted, None, false).await?;
        }
        Decision::StampThenWrite { target, frontier, .. } => {
            // Write-ahead: the stamp is stored before the write, so a crash
            // between the two is seen as the same first mismatch next time.
            let stamp = RolloutStatus {
                last_updated_target: frontier.target.clone(),
                last_update_time: Some(Time(frontier.stamped_at)),
            };
            set_status(ctx, binding, wanted, Some(stamp), false).await?;
            crash_point::reached(CrashPoint::AfterRolloutStamp);
            write_config(
                configs,
                &ctx.own.config_writes,
                &desired[*target],
                existing_of(&desired[*target]),
            )
            .await?;
            rollouts("in_progress");
        }
        Decision::Requeue { .. } => {
            set_status(ctx, binding, wanted, None, false).await?;
        }
        Decision::Halted { .. } | Decision::Completed { .. } => {
            if set_status(ctx, binding, wanted, None, false).await? && !paused {
                announce_end(ctx, binding, decision, desired.len()).await;
            }
        }
    }
    Ok(())
}

/// A rollout that halted or completed is counted and announced in an
/// Event; the caller does so once, when the Ready condition changed.
async fn announce_end(ctx: &BindingContext, binding: &VRouterBinding, decision: &Decision, targets: usize) {
    let (state, type_, reason, note) = match decision {
        Decision::Halted { config, .. } => (
            "halted",
            EventType::Warning,
            reason::ROLLOUT_HALTED,
            format!("VRouterConfig {config:?} is Failed"),
        ),
        Decision::Completed { .. } => (
            "completed",
            EventType::Normal,
            vrouter_api::constants::event::ROLLOUT_COMPLETED,
            format!("{targets} targets up to date"),
        ),
        _ => return,
    };
    ctx.metrics.rollouts.get_or_create(&StateLabels { state }).inc();
    ctx.event(binding, type_, reason, note).await;
}
