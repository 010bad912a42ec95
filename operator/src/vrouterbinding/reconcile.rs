//! The VRouterBinding reconciler: resolves what the binding references,
//! renders every target, deletes orphans, then writes configs — all at once
//! (Disabled) or one at a time as `vrouter-rollout` decides.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::{FINALIZER, LABEL_BINDING, condition, reason};
use vrouter_api::{
    RolloutMode, RolloutStatus, VRouterBinding, VRouterBindingStatus, VRouterConfig, VRouterConfigSpec, VRouterParams,
    VRouterTarget, VRouterTemplate,
};
use vrouter_rollout::{AppliedCondition, ConditionStatus, Decision, ExistingConfig, Frontier, Policy, Rollout, Target};

use super::plan;
use crate::conditions::{self, Wanted};
use crate::context::Context;
use crate::metrics::StateLabels;
use crate::objects;

pub const CONTROLLER: &str = "vrouterbinding";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("rollout: {0}")]
    Rollout(#[from] vrouter_rollout::RolloutError),
    #[error("{0}")]
    NotOurs(String),
}

/// Why the binding cannot be rendered; shown as `Ready=False/ReconcileError`
/// with every existing VRouterConfig left as it is.
#[derive(Debug)]
struct RenderProblem(String);

pub async fn reconcile(binding: Arc<VRouterBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&binding, &ctx).await;
    ctx.metrics.reconciled(CONTROLLER, started.elapsed(), result.is_err());
    if let Err(error) = &result {
        report_error(&binding, &ctx, error).await;
    }
    result
}

/// Any failed reconcile shows in `Ready=False/ReconcileError`: a `Ready=True`
/// left from before would tell `kubectl wait` that configs it cannot write
/// are in place. A conflict only means the cache was behind; the retry
/// sorts it out and is not worth a flip of `Ready`.
async fn report_error(binding: &VRouterBinding, ctx: &Context, error: &Error) {
    if matches!(error, Error::Kube(kube::Error::Api(e)) if e.code == 409 && e.reason == "Conflict") {
        return;
    }
    let message = match error {
        // The server's own sentence, without the Debug dump of its response.
        Error::Kube(kube::Error::Api(e)) => format!("Kubernetes API: {} ({})", e.message, e.reason),
        other => other.to_string(),
    };
    let wanted = Wanted {
        type_: condition::READY,
        status: false,
        reason: reason::RECONCILE_ERROR,
        message: message.clone(),
        observed_generation: binding.meta().generation,
    };
    match set_status(ctx, binding, wanted, None).await {
        Ok(true) => ctx.event(binding, true, reason::RECONCILE_ERROR, message).await,
        Ok(false) => {}
        // The API server that failed the reconcile may fail this too; the
        // retry comes either way.
        Err(e) => tracing::debug!(error = %e, "could not report the failed reconcile in Ready"),
    }
}

/// A zero `pollInterval`/`waitInterval` is valid input but would requeue at
/// once, in a loop of reads against the API server while a rollout waits.
const MIN_REQUEUE: Duration = Duration::from_secs(1);

fn next_action(requeue_after: Option<Duration>) -> Action {
    match requeue_after {
        Some(after) => Action::requeue(after.max(MIN_REQUEUE)),
        None => Action::await_change(),
    }
}

async fn get_all<K>(
    api: &Api<K>,
    refs: &[&vrouter_api::NameRef],
    kind: &str,
) -> Result<Result<Vec<K>, RenderProblem>, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        match api.get_opt(&r.name).await? {
            Some(object) => out.push(object),
            None => return Ok(Err(RenderProblem(format!("{kind} {:?} not found", r.name)))),
        }
    }
    Ok(Ok(out))
}

/// Config writes of one binding in flight at once.
const WRITE_CONCURRENCY: usize = 16;

/// Each (desired, existing) pair written as [`write_config`] does, up to
/// [`WRITE_CONCURRENCY`] at a time; the first error ends the batch.
async fn write_all(
    api: &Api<VRouterConfig>,
    writes: Vec<(&VRouterConfig, Option<&VRouterConfig>)>,
) -> Result<(), Error> {
    let mut pending = futures::stream::FuturesUnordered::new();
    let mut queue = writes.into_iter();
    loop {
        while pending.len() < WRITE_CONCURRENCY {
            let Some((desired, existing)) = queue.next() else { break };
            pending.push(write_config(api, desired, existing));
        }
        match pending.next().await {
            Some(result) => result?,
            None => return Ok(()),
        }
    }
}

/// Above this many targets one LIST of the namespace's targets replaces a
/// GET per target: at 1,000 targets the GETs were a sixth of all API
/// requests of a rollout (docs/benchmarks.md), repeated on every reconcile.
const LIST_TARGETS_ABOVE: usize = 8;

async fn get_targets(
    api: &Api<VRouterTarget>,
    refs: &[&vrouter_api::NameRef],
) -> Result<Result<Vec<VRouterTarget>, RenderProblem>, Error> {
    if refs.len() <= LIST_TARGETS_ABOVE {
        return get_all(api, refs, "VRouterTarget").await;
    }
    let by_name: HashMap<String, VRouterTarget> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|t| (t.name_any(), t))
        .collect();
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        match by_name.get(&r.name) {
            Some(target) => out.push(target.clone()),
            None => return Ok(Err(RenderProblem(format!("VRouterTarget {:?} not found", r.name)))),
        }
    }
    Ok(Ok(out))
}

/// Every target's desired VRouterConfig, in `targetRefs` order, or the first
/// problem. Nothing is written until all of them rendered.
async fn render_all(
    ctx: &Context,
    binding: &VRouterBinding,
) -> Result<Result<Vec<VRouterConfig>, RenderProblem>, Error> {
    if let Err(e) = plan::check_same_namespace(binding) {
        return Ok(Err(RenderProblem(e.to_string())));
    }
    let namespace = binding.namespace().unwrap_or_default();
    let spec = &binding.spec;
    let template_refs: Vec<_> = spec.effective_template_refs().collect();
    let templates = match get_all(
        &Api::<VRouterTemplate>::namespaced(ctx.client.clone(), &namespace),
        &template_refs,
        "VRouterTemplate",
    )
    .await?
    {
        Ok(t) => t,
        Err(p) => return Ok(Err(p)),
    };
    let params_refs: Vec<_> = spec.params_refs.iter().collect();
    let params = match get_all(
        &Api::<VRouterParams>::namespaced(ctx.client.clone(), &namespace),
        &params_refs,
        "VRouterParams",
    )
    .await?
    {
        Ok(p) => p,
        Err(p) => return Ok(Err(p)),
    };
    let target_refs: Vec<_> = spec.target_refs.iter().collect();
    let targets = match get_targets(
        &Api::<VRouterTarget>::namespaced(ctx.client.clone(), &namespace),
        &target_refs,
    )
    .await?
    {
        Ok(t) => t,
        Err(p) => return Ok(Err(p)),
    };
    Ok(plan::render_targets(binding, &templates, &params, &targets).map_err(RenderProblem))
}

fn policy(binding: &VRouterBinding) -> Policy {
    match (binding.spec.effective_rollout_mode(), &binding.spec.rollout) {
        (RolloutMode::WaitForApplied, Some(r)) => Policy::WaitForApplied {
            poll_interval: r.poll_interval.to_std(),
            wait_after_applied: r.wait_after_applied.to_std(),
        },
        (RolloutMode::FixedInterval, Some(r)) => Policy::FixedInterval {
            wait_interval: r.wait_interval.unwrap_or_default().to_std(),
        },
        _ => Policy::Disabled,
    }
}

fn existing_view(config: &VRouterConfig) -> ExistingConfig<VRouterConfigSpec> {
    let status = config.status.clone().unwrap_or_default();
    let applied = conditions::get(&status.conditions, condition::APPLIED).map(|c| AppliedCondition {
        status: c.status.parse().unwrap_or(ConditionStatus::Unknown),
        observed_generation: c.observed_generation,
        last_transition_time: c.last_transition_time.0,
    });
    ExistingConfig {
        spec: config.spec.clone(),
        generation: config.meta().generation.unwrap_or(0),
        phase: status.phase.as_str().parse().unwrap_or_default(),
        applied,
    }
}

async fn write_config(
    api: &Api<VRouterConfig>,
    desired: &VRouterConfig,
    existing: Option<&VRouterConfig>,
) -> Result<(), Error> {
    match existing {
        None => match api.create(&PostParams::default(), desired).await {
            Ok(_) => {}
            // Existing configs are found by the binding's label: one of its
            // own whose label was removed is found only now. It is put
            // right; a config of that name the binding does not control is
            // not its to change, and the conflict is reported.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let current = api.get(&desired.name_any()).await?;
                if !plan::controlled_by_the_same_owner(&current, desired) {
                    return Err(kube::Error::Api(e).into());
                }
                patch_config(api, &current, desired).await?;
            }
            Err(e) => return Err(e.into()),
        },
        Some(current) if plan::needs_write(current, desired) => {
            // Carrying the binding's label does not make a config the
            // binding's to take from another controller.
            if let Some(other) = plan::other_controller(current, desired) {
                return Err(Error::NotOurs(format!(
                    "VRouterConfig {:?} carries this binding's label but is controlled by {other}",
                    desired.name_any()
                )));
            }
            patch_config(api, current, desired).await?
        }
        Some(_) => {}
    }
    Ok(())
}

async fn patch_config(api: &Api<VRouterConfig>, current: &VRouterConfig, desired: &VRouterConfig) -> Result<(), Error> {
    let patch = serde_json::json!({
        "metadata": {
            "labels": desired.metadata.labels,
            "ownerReferences": desired.metadata.owner_references,
        },
        // Only what changed, and `null` for what the desired spec no longer
        // has: its empty `config`/`commands` are left out when serialized,
        // and a merge patch that leaves a key out keeps the old value
        // (applied again with the next change).
        "spec": objects::merge_patch(&json_of(&current.spec), &json_of(&desired.spec)),
    });
    api.patch(&desired.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

fn json_of(spec: &VRouterConfigSpec) -> serde_json::Value {
    serde_json::to_value(spec).expect("a VRouterConfig spec serializes")
}

async fn set_status(
    ctx: &Context,
    binding: &VRouterBinding,
    ready: Wanted<'_>,
    rollout: Option<RolloutStatus>,
) -> Result<bool, Error> {
    let current = binding.status.clone().unwrap_or_default();
    let mut next: VRouterBindingStatus = current.clone();
    conditions::set(&mut next.conditions, ready, Timestamp::now());
    next.observed_generation = binding.meta().generation;
    if rollout.is_some() {
        next.rollout = rollout;
    }
    Ok(objects::patch_status(&ctx.client, binding, Some(&current), &next).await?)
}

async fn reconcile_inner(binding: &VRouterBinding, ctx: &Context) -> Result<Action, Error> {
    if binding.meta().deletion_timestamp.is_some() {
        // Generated configs are owned by the binding; garbage collection
        // removes them. Nothing on the routers changes.
        objects::remove_finalizer(&ctx.client, binding, FINALIZER).await?;
        return Ok(Action::await_change());
    }
    if objects::ensure_finalizer(&ctx.client, binding, FINALIZER).await? {
        // The patch's own watch event brings the updated object; a requeue
        // now would read the cache from before it.
        return Ok(Action::await_change());
    }
    let generation = binding.meta().generation;
    let desired = match render_all(ctx, binding).await? {
        Ok(d) => d,
        Err(RenderProblem(message)) => {
            let changed = set_status(
                ctx,
                binding,
                Wanted {
                    type_: condition::READY,
                    status: false,
                    reason: reason::RECONCILE_ERROR,
                    message: message.clone(),
                    observed_generation: generation,
                },
                None,
            )
            .await?;
            if changed {
                ctx.event(binding, true, reason::RECONCILE_ERROR, message).await;
            }
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    };

    let namespace = binding.namespace().unwrap_or_default();
    let configs: Api<VRouterConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = format!("{LABEL_BINDING}={}", binding.name_any());
    let existing = configs.list(&ListParams::default().labels(&selector)).await?.items;
    let desired_names: HashSet<String> = desired.iter().map(|c| c.name_any()).collect();
    for orphan in plan::orphans(&desired_names, &existing) {
        tracing::info!(binding = %binding.name_any(), config = orphan, "deleting orphaned VRouterConfig");
        match configs.delete(orphan, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let by_name: HashMap<String, &VRouterConfig> = existing.iter().map(|c| (c.name_any(), c)).collect();
    let targets: Vec<Target<VRouterConfigSpec>> = desired
        .iter()
        .map(|d| Target {
            name: d.spec.target_ref.name.clone(),
            desired: d.spec.clone(),
            existing: by_name.get(&d.name_any()).map(|c| existing_view(c)),
        })
        .collect();
    let frontier = binding
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| Frontier::from_status(&r.last_updated_target, r.last_update_time.as_ref().map(|t| t.0)));
    let binding_name = binding.name_any();
    let rollout = Rollout {
        binding: &binding_name,
        policy: policy(binding),
        frontier: frontier.as_ref(),
        targets: &targets,
    };
    let decision = vrouter_rollout::decide(&rollout, Timestamp::now())?;
    let ready = decision.ready();
    let wanted = Wanted {
        type_: condition::READY,
        status: ready.status == ConditionStatus::True,
        reason: ready.reason.as_str(),
        message: ready.message.clone(),
        observed_generation: generation,
    };
    match &decision {
        Decision::WriteAll { targets: indices, .. } => {
            // Several writes in flight: one at a time, the binding's creates
            // queued behind the applies they start and took 15 times as long
            // as a plain client's (docs/benchmarks.md).
            let writes: Vec<(&VRouterConfig, Option<&VRouterConfig>)> = indices
                .iter()
                .map(|&i| (&desired[i], by_name.get(&desired[i].name_any()).copied()))
                .collect();
            write_all(&configs, writes).await?;
            set_status(ctx, binding, wanted, None).await?;
        }
        Decision::StampThenWrite { target, frontier, .. } => {
            // Write-ahead: the stamp is stored before the write, so a crash
            // between the two is seen as the same first mismatch next time.
            let stamp = RolloutStatus {
                last_updated_target: frontier.target.clone(),
                last_update_time: Some(Time(frontier.stamped_at)),
            };
            set_status(ctx, binding, wanted, Some(stamp)).await?;
            write_config(
                &configs,
                &desired[*target],
                by_name.get(&desired[*target].name_any()).copied(),
            )
            .await?;
            ctx.metrics
                .rollouts
                .get_or_create(&StateLabels { state: "in_progress" })
                .inc();
        }
        Decision::Requeue { .. } => {
            set_status(ctx, binding, wanted, None).await?;
        }
        Decision::Halted { config, .. } => {
            if set_status(ctx, binding, wanted, None).await? {
                ctx.metrics
                    .rollouts
                    .get_or_create(&StateLabels { state: "halted" })
                    .inc();
                ctx.event(
                    binding,
                    true,
                    reason::ROLLOUT_HALTED,
                    format!("VRouterConfig {config:?} is Failed"),
                )
                .await;
            }
        }
        Decision::Completed { .. } => {
            if set_status(ctx, binding, wanted, None).await? {
                ctx.metrics
                    .rollouts
                    .get_or_create(&StateLabels { state: "completed" })
                    .inc();
                ctx.event(
                    binding,
                    false,
                    vrouter_api::constants::event::ROLLOUT_COMPLETED,
                    format!("{} targets up to date", desired.len()),
                )
                .await;
            }
        }
    }
    Ok(next_action(decision.requeue_after()))
}

pub fn error_policy(_binding: Arc<VRouterBinding>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(%error, "VRouterBinding reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_interval_still_waits_a_second() {
        let cases = [
            (Some(Duration::ZERO), Action::requeue(MIN_REQUEUE)),
            (Some(Duration::from_millis(200)), Action::requeue(MIN_REQUEUE)),
            (Some(Duration::from_secs(10)), Action::requeue(Duration::from_secs(10))),
            (None, Action::await_change()),
        ];
        for (after, want) in cases {
            assert_eq!(next_action(after), want, "{after:?}");
        }
    }
}
