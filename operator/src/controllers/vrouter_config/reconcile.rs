//! The VRouterConfig reconciler: reads the config, its target and the
//! router, asks `decide` what follows, and writes only what changed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::FINALIZER;
use vrouter_api::{
    ConfirmationStatus, ControllerRef, NameRef, VRouterConfig, VRouterConfigStatus, VRouterStatus, VRouterStatusSpec,
    VRouterTarget,
};
use vrouter_providers::{ApplyId, ApplyRecord, ExecHandle, ExecStatus, Provider, ProviderError};

use super::ConfigContext;
use super::confirm::{self, Checked, Stage};
use super::decide::{self, Clock, DispatchReason, Next, Poll, Step};
use super::recover::{self, Asked, Recovery, RouterSays};
use super::secret_rotation;
use crate::runtime::conditions::TargetProblem;
use crate::runtime::context::Context;
use crate::runtime::crash_point::{self, CrashPoint};
use crate::runtime::metrics::ResultLabels;
use crate::runtime::one_apply_per_router::{Router, RouterHold, Vm, holder, in_flight_elsewhere};
use crate::runtime::recently_ready::{self, RouterKey};
use crate::runtime::reconciler::{self, Reconciler};
use crate::runtime::{binding_writes, conditions, finalizers, off_runtime, own_writes, status_writes, stores};

pub const CONTROLLER: &str = "vrouterconfig";

/// Why a config reconcile failed and is retried with backoff: a transient
/// failure, which the status is not the place for. Each keeps the error it
/// met as its source, and says in its text what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("asking whether the VM runs: {0}")]
    VmRunning(#[source] ProviderError),
    #[error("asking when the VM started: {0}")]
    VmStarted(#[source] ProviderError),
    #[error("asking the router about apply {apply}: {source}")]
    AskRouter {
        apply: ApplyId,
        #[source]
        source: ProviderError,
    },
    /// A retry `decide` chose ([`Next::Retry`]); its text quotes the
    /// provider's error, which the pure decisions take as text.
    #[error("{0}")]
    Decided(String),
}

pub struct ConfigReconciler;

impl Reconciler for ConfigReconciler {
    type Object = VRouterConfig;
    type Context = ConfigContext;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    async fn reconcile(config: Arc<VRouterConfig>, ctx: Arc<ConfigContext>) -> Result<Action, Error> {
        reconcile(&config, &ctx).await
    }

    fn retry_after(error: &Error, _ctx: &ConfigContext) -> Duration {
        match error {
            Error::Kube(e) if reconciler::is_conflict(e) => reconciler::CONFLICT_RETRY,
            _ => Duration::from_secs(5),
        }
    }

    fn is_routine(error: &Error) -> bool {
        matches!(error, Error::Kube(e) if reconciler::is_conflict(e))
    }
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

async fn reconcile(config: &VRouterConfig, ctx: &ConfigContext) -> Result<Action, Error> {
    if config.meta().deletion_timestamp.is_some() {
        // Deleting the object never touches the router: it keeps its config.
        // An apply still running keeps its router hold until it expires.
        ctx.own
            .status_objects_due
            .remove(&router_of(config), &config.name_any());
        ctx.own.staged.forget(config);
        return Ok(finalizers::release(&ctx.client, config, FINALIZER).await?);
    }
    if ctx.own.own_writes.is_replaced(config) {
        // Handed the config from before a status write of its own whose
        // echo is in the store already: look again at once.
        return Ok(Action::requeue(reconciler::CONFLICT_RETRY));
    }
    if ctx.own.own_writes.awaiting_echo(config) {
        // The store is behind this controller's own last status write: a
        // decision from it would redo what that write recorded, and its
        // write would be a conflict. That echo wakes the controller now
        // (see `OwnWrites::awaiting_echo`); the requeue is for one lost.
        return Ok(Action::requeue(own_writes::ECHO_WAIT));
    }
    if let Some(action) = finalizers::ensure(&ctx.client, config, FINALIZER).await? {
        return Ok(action);
    }
    if let Some(pause) = config.pause()
        && !(pause.lets_in_flight_finish() && apply_in_flight(config))
    {
        return Ok(Action::await_change());
    }
    if let Some(binding) = binding_of(config)
        && awaits_first_dispatch(config)
    {
        // Most likely written by its binding, which may be writing others.
        ctx.binding_writes.written(binding, binding_writes::MAX_WAIT).await;
    }
    Apply::new(ctx, config).step().await
}

/// The uid of the binding that controls `config`, if one does.
fn binding_of(config: &VRouterConfig) -> Option<&str> {
    config.controlling_binding().map(|o| o.uid.as_str())
}

/// An apply dispatched whose result is not in yet: its script runs, or a
/// confirmed apply is being checked. Reconciling it only follows it (a
/// paused config dispatches nothing from `Apply::step` once it is over).
fn apply_in_flight(config: &VRouterConfig) -> bool {
    config
        .status
        .as_ref()
        .is_some_and(|s| s.exec_pid > 0 || s.confirmation.is_some())
}

/// A generation not yet dispatched, with no apply in flight.
fn awaits_first_dispatch(config: &VRouterConfig) -> bool {
    let status = config.status.as_ref();
    status.is_none_or(|s| s.exec_pid == 0 && s.observed_generation != config.meta().generation.unwrap_or(0))
}

/// The router a config applies to.
fn router_of(config: &VRouterConfig) -> Router {
    Router {
        namespace: config.namespace().unwrap_or_default(),
        target: config.spec.target_ref.name.clone(),
    }
}

/// One reconcile of one config that is neither deleted nor paused.
struct Apply<'a> {
    ctx: &'a ConfigContext,
    config: &'a VRouterConfig,
    status: VRouterConfigStatus,
    clock: Clock,
    router: Router,
    name: String,
    /// `namespace/name`, as the config holds a VM.
    holder: String,
    /// The VM the target names, once the target is read.
    vm: Option<Vm>,
    /// The named Secrets' versions now (`status.secretsVersion`'s form).
    secrets_stamp: String,
}

impl<'a> Apply<'a> {
    fn new(ctx: &'a ConfigContext, config: &'a VRouterConfig) -> Self {
        Apply {
            ctx,
            config,
            status: config.status.clone().unwrap_or_default(),
            clock: Clock {
                now: Timestamp::now(),
                apply_timeout: ctx.settings.apply_timeout,
            },
            router: router_of(config),
            name: config.name_any(),
            holder: holder(config),
            vm: None,
            secrets_stamp: String::new(),
        }
    }

    /// Target, provider, router state, then the one step that follows:
    /// poll the apply in flight, dispatch a new one, or nothing.
    async fn step(mut self) -> Result<Action, Error> {
        self.secrets_stamp = secret_rotation::current_stamp(&self.ctx.own.secrets, self.config).await;
        let namespace = &self.router.namespace;
        let target_ref = &self.config.spec.target_ref;
        if target_ref.crosses_namespace(namespace) {
            return self
                .note_problem(format!("spec.targetRef must stay in namespace {namespace:?}"))
                .await;
        }
        // From the watch, not the API server: the event that woke this
        // reconcile (the config's, or its target's) was stored first, so the
        // target is as that event left it. A lastRebootTime newer than the
        // store is its own event, which wakes this config again; and the
        // dispatch write below is conditional on the config's version, so
        // no apply starts twice from a view one event behind.
        let Some(target) = stores::get(&self.ctx.own.targets, &self.ctx.client, namespace, &target_ref.name).await?
        else {
            return self
                .note_problem(format!("VRouterTarget {:?} not found", target_ref.name))
                .await;
        };
        let provider = match self.ctx.providers.for_target(&target).await {
            Ok(provider) => provider,
            Err(e) => return self.cannot_reach(&e).await,
        };
        // A provider was built, so the target's provider block is there.
        let Some(vm) = RouterKey::of(&target) else {
            return self
                .note_problem(format!("VRouterTarget {:?} names no provider block", target_ref.name))
                .await;
        };
        self.vm = Some(vm);
        if self.status.exec_pid == 0
            && let Some(confirmation) = self.status.confirmation.clone()
        {
            return self.confirmation(&*provider, &confirmation).await;
        }
        let last_reboot = target.status.as_ref().and_then(|s| s.last_reboot_time.clone());
        let generation = self.config.meta().generation.unwrap_or(0);
        // A config that would dispatch but whose router is busy waits without
        // looking at the router: the other apply is polled through the same
        // agent. (The VM run's start is asked only before a dispatch.)
        let known_boot = decide::latest_boot(&self.status, self.confirmed(), last_reboot.as_ref(), None);
        if self.status.exec_pid == 0
            && self.due(generation, known_boot.as_ref()).is_some()
            && let Some(other) = self.router_busy_with().await
        {
            return self.wait_for_router(&other).await;
        }
        if let Some(action) = self.unless_ready(&*provider, &target).await? {
            return Ok(action);
        }
        if self.status.exec_pid > 0 {
            return self.poll(&*provider, RouterKey::of(&target)).await;
        }
        if self.config.is_paused() {
            // Only an apply in flight is followed while paused (see `reconcile`).
            return Ok(Action::await_change());
        }
        self.dispatch(&*provider, generation, last_reboot.as_ref()).await
    }

    /// `None` when the VM runs and the router is ready; else what the
    /// status becomes meanwhile. Whether the VM runs is asked every time
    /// (one call; it also tells an unreachable agent from an apply that
    /// ended); the readiness check is skipped for a router that passed it a
    /// moment ago (`recently_ready`).
    async fn unless_ready(&self, provider: &dyn Provider, target: &VRouterTarget) -> Result<Option<Action>, Error> {
        // Asked of this VM live, not from the cluster's shared listing the
        // target poll reads: what follows may start an apply, and the VM's
        // state right before it matters more than one request per reconcile.
        let running = match provider.is_vm_running().await {
            Ok(running) => running,
            // A role that lacks a permission needs a person, like a missing target.
            Err(e) if e.needs_a_person() => return self.cannot_reach(&e).await.map(Some),
            // An apply in flight keeps its timeout even while its VM cannot be
            // looked at; without one there is nothing to time out.
            Err(e) if self.status.exec_pid > 0 => {
                let step = decide::on_exec_polled(&self.status, self.clock, Poll::Error(e.to_string()));
                record_apply_end(self.ctx, &self.status, &step, self.clock.now);
                return self.finish(step).await.map(Some);
            }
            Err(e) => return Err(Error::VmRunning(e)),
        };
        if !running {
            return self
                .finish(decide::on_vm_stopped(&self.status, self.clock))
                .await
                .map(Some);
        }
        if let Err(e) = recently_ready::check(&self.ctx.recently_ready, target, provider).await {
            if e.needs_a_person() {
                return self.cannot_reach(&e).await.map(Some);
            }
            let step = decide::on_not_ready(&self.status, self.clock, &e.to_string());
            return self.finish(step).await.map(Some);
        }
        Ok(None)
    }

    /// Polls the apply in flight. It holds its router until its result is
    /// in; a process that restarted mid-apply takes the hold again here.
    async fn poll(&self, provider: &dyn Provider, router: Option<RouterKey>) -> Result<Action, Error> {
        let poll = to_poll(provider.get_exec_status(ExecHandle(self.status.exec_pid)).await);
        if let (Some(router), Poll::Lost | Poll::Error(_) | Poll::Ended { .. }) = (&router, &poll) {
            // The agent lost the apply or did not answer: check it again first.
            self.ctx.recently_ready.forget(router);
        }
        if matches!(poll, Poll::Exited { .. }) {
            crash_point::reached(CrashPoint::AfterResult);
        }
        let step = match (poll, self.apply_id()) {
            // The agent lost the pid (it restarted) or the dispatch was a
            // duplicate: the router's record of the apply id says what it became.
            (Poll::Lost, Some(apply)) => match self.ask_router(provider, &apply, Asked::HandleLost).await {
                Ok(Recovery::Step(step)) => *step,
                Ok(Recovery::Dispatch) => unreachable!("a lost handle is never dispatched from the poll"),
                Err(e) => decide::on_exec_polled(&self.status, self.clock, Poll::Error(e.to_string())),
            },
            (poll, _) => decide::on_exec_polled(&self.status, self.clock, poll),
        };
        if let Some(router) = router
            && step.status.phase == vrouter_api::Phase::Applied
        {
            // It has just committed this config: as ready as a check says,
            // for the drift read that follows.
            self.ctx.recently_ready.record(router, Timestamp::now());
        }
        self.settle(provider, step).await
    }

    /// Records the end of an apply (a metric, and a stop in the guest for
    /// one that timed out), then the step; a confirmed apply goes on to its
    /// confirmation.
    async fn settle(&self, provider: &dyn Provider, step: Step) -> Result<Action, Error> {
        record_apply_end(self.ctx, &self.status, &step, self.clock.now);
        self.stop_if_timed_out(provider, &step).await;
        let lost_confirmation = self.config.spec.confirm.is_some() && self.status.confirmation.is_none();
        let step = recover::without_lost_confirmation(step, lost_confirmation, self.clock);
        let step = confirm::after_script(step, self.clock);
        if step.status.exec_pid > 0 || step.status.confirmation.is_some() {
            let _ = self
                .ctx
                .own
                .router_locks
                .try_hold(self.vm(), &self.holder, self.hold_until(), Instant::now());
        }
        self.finish(step).await
    }

    /// Whether this config's applies are confirmed (`spec.confirm`).
    fn confirmed(&self) -> bool {
        self.config.spec.confirm.is_some()
    }

    /// The stored apply id, when there is one the router can know.
    fn apply_id(&self) -> Option<ApplyId> {
        ApplyId::parse(&self.status.apply_id).ok()
    }

    /// Asks the router about `apply` and decides from its answer.
    async fn ask_router(
        &self,
        provider: &dyn Provider,
        apply: &ApplyId,
        asked: Asked,
    ) -> Result<Recovery, ProviderError> {
        let says = match provider.apply_record(apply).await? {
            ApplyRecord::Unknown => RouterSays::Unknown,
            ApplyRecord::Vanished => RouterSays::Vanished,
            ApplyRecord::Running(handle) => RouterSays::Running { handle: handle.get() },
            ApplyRecord::Finished(outcome) => match to_poll(Ok(ExecStatus::Exited(outcome))) {
                Poll::Exited { code, failure } => RouterSays::Finished { code, failure },
                other => unreachable!("an exited outcome polls as exited, not {other:?}"),
            },
        };
        tracing::info!(config = %self.name, %apply, ?asked, ?says, "asked the router about the apply");
        Ok(recover::on_router_answer(&self.status, self.clock, asked, says))
    }

    /// An apply that ran out of time is stopped in the guest, so the next
    /// one does not queue behind it on the router's lock (which keeps them
    /// apart either way). Best effort: a router that cannot be reached now
    /// ends the apply itself, or the next apply waits for it.
    async fn stop_if_timed_out(&self, provider: &dyn Provider, step: &Step) {
        let timed_out = step.status.phase == vrouter_api::Phase::Failed
            && conditions::get(&step.status.conditions, vrouter_api::constants::condition::APPLIED)
                .is_some_and(|c| c.reason == vrouter_api::constants::reason::APPLY_TIMEOUT)
            && self.status.phase == vrouter_api::Phase::Applying;
        if let (true, Some(apply)) = (timed_out, self.apply_id())
            && let Err(e) = provider.stop_apply(&apply).await
        {
            tracing::warn!(config = %self.name, %apply, error = %e, "could not stop the timed-out apply in the guest");
        }
    }

    fn vm(&self) -> &Vm {
        self.vm.as_ref().expect("the VM is resolved before any hold")
    }

    /// Dispatches an apply when one is due and the router is free; with
    /// nothing due, creates a VRouterStatus still owed. A VM run that began
    /// after the last apply (a KubeVirt VMI made anew) is a reboot like the
    /// target's `lastRebootTime`.
    async fn dispatch(
        &self,
        provider: &dyn Provider,
        generation: i64,
        target_last_reboot: Option<&Time>,
    ) -> Result<Action, Error> {
        let (ctx, config, status, clock) = (self.ctx, self.config, &self.status, self.clock);
        let started = match provider.vm_started_at().await {
            Ok(started) => started,
            Err(e) if e.needs_a_person() => return self.cannot_reach(&e).await,
            Err(e) => return Err(Error::VmStarted(e)),
        };
        let last_reboot = decide::latest_boot(status, self.confirmed(), target_last_reboot, started);
        let last_reboot = last_reboot.as_ref();
        let Some(reason) = self.due(generation, last_reboot) else {
            return self.nothing_due().await;
        };
        // Every return before the hold is handed over releases it.
        let hold = match self.take_router().await {
            Ok(hold) => hold,
            Err(other) => return self.wait_for_router(&other).await,
        };
        if let Some(step) = self.recover_before_dispatch(provider, generation).await? {
            hold.hand_over();
            return self.settle(provider, step).await;
        }
        // A confirmed apply needs the running config it may roll back to,
        // read before anything changes; a provider that cannot finish a
        // confirmed apply refuses before it starts one.
        let previous = match &config.spec.confirm {
            None => None,
            Some(confirm) => match self.previous_running_config(provider, confirm).await {
                Ok(hash) => Some((confirm.clone(), hash)),
                Err(refusal) => {
                    drop(hold);
                    return self.refuse_confirm(generation, refusal, last_reboot).await;
                }
            },
        };
        tracing::info!(config = %self.name, ?reason, generation, confirmed = previous.is_some(), "dispatching apply");
        let (fresh, before) = self.write_ahead(generation, last_reboot).await?;
        crash_point::reached(CrashPoint::AfterWriteAhead);
        let started = match ApplyId::parse(&before.apply_id) {
            Ok(apply) => {
                self.start_script(provider, &apply, previous.as_ref().map(|(confirm, _)| confirm))
                    .await
            }
            Err(e) => Err(ProviderError::Render(e.to_string())),
        };
        let step = match started {
            Ok(handle) => {
                // Only an apply that started counts: a dispatch failing and
                // retried must not hold drift detection back.
                ctx.apply_dispatches.record();
                crash_point::reached(CrashPoint::AfterDispatch);
                let mut step = decide::after_dispatch(&before, generation, clock, handle.get(), last_reboot);
                if let Some((confirm, hash)) = previous {
                    step.status = confirm::begin(step.status, clock.now, confirm.timeout.to_std(), hash);
                }
                step
            }
            Err(e) => {
                let permanent = matches!(
                    e,
                    ProviderError::TooLarge { .. } | ProviderError::NotSupported { .. } | ProviderError::Render(_)
                );
                decide::on_dispatch_failed(&before, generation, clock, &e.to_string(), permanent, last_reboot)
            }
        };
        hold.hand_over();
        finish(ctx, &fresh, &before, step).await
    }

    /// Takes this config's VM for a dispatch, unless another config holds
    /// it in this process or (after a restart) its stored status shows an
    /// apply of its own there: then that config's name.
    async fn take_router(&self) -> Result<RouterHold<'a>, String> {
        let hold = self
            .ctx
            .own
            .router_locks
            .hold(self.vm(), &self.holder, self.hold_until(), Instant::now())?;
        match self.router_busy_with().await {
            Some(other) => Err(other),
            None => Ok(hold),
        }
    }

    /// Why an apply is due, if one is: a new generation, a reboot, a
    /// config put back to Pending, or a Secret it names that changed.
    fn due(&self, generation: i64, last_reboot: Option<&Time>) -> Option<DispatchReason> {
        decide::dispatch_reason(&self.status, generation, last_reboot).or_else(|| {
            secret_rotation::rotation_due(&self.status, &self.secrets_stamp).then_some(DispatchReason::SecretRotated)
        })
    }

    /// The status of a dispatch about to start, recording the Secrets'
    /// versions it was decided from (so one change makes one apply).
    fn before_dispatch(&self, generation: i64) -> VRouterConfigStatus {
        let fresh_id = ApplyId::fresh(generation);
        let mut before = decide::before_dispatch(&self.status, generation, self.clock, fresh_id.as_str());
        before.secrets_version = self.secrets_stamp.clone();
        before
    }

    /// With no apply due: a config settled before its kind had the kstatus
    /// conditions gets them once (after that this writes nothing), and a
    /// VRouterStatus still owed is created.
    async fn nothing_due(&self) -> Result<Action, Error> {
        let (ctx, config, status) = (self.ctx, self.config, &self.status);
        let settled = summarised(status.clone(), config, None, self.clock.now);
        if let Some(written) = status_writes::patch_status(&ctx.client, config, Some(status), &settled).await? {
            ctx.own.own_writes.record_over(config, &written);
        }
        if status.phase == vrouter_api::Phase::Applied && ctx.own.status_objects_due.contains(&self.router, &self.name)
        {
            return Ok(match ensure_status_object(ctx, config, &self.router).await? {
                true => Action::await_change(),
                false => Action::requeue(STATUS_OBJECT_RETRY),
            });
        }
        Ok(Action::await_change())
    }

    /// The status written before the router is touched: Applied=False for
    /// the new generation, the apply id the router will record the apply
    /// under, and the reboot it handles. Returns the config as written, and
    /// that status.
    async fn write_ahead(
        &self,
        generation: i64,
        last_reboot: Option<&Time>,
    ) -> Result<(VRouterConfig, VRouterConfigStatus), Error> {
        let before = self.before_dispatch(generation);
        let before = summarised(
            decide::handling_reboot(before, last_reboot),
            self.config,
            None,
            self.clock.now,
        );
        match status_writes::write_status(&self.ctx.client, self.config, Some(&self.status), &before).await {
            Ok(fresh) => {
                self.ctx.own.own_writes.record_over(self.config, &fresh);
                Ok((fresh, before))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Before a dispatch that continues the apply id written ahead (no
    /// handle came back: a crash, a failed or lost dispatch), the router
    /// says whether it started that apply; `None` when it did not, and the
    /// dispatch goes on under the same id.
    async fn recover_before_dispatch(&self, provider: &dyn Provider, generation: i64) -> Result<Option<Step>, Error> {
        if !decide::continues_stored_apply(&self.status, generation) {
            return Ok(None);
        }
        let Some(apply) = self.apply_id() else {
            return Ok(None);
        };
        match self.ask_router(provider, &apply, Asked::BeforeDispatch).await {
            Ok(Recovery::Dispatch) => Ok(None),
            Ok(Recovery::Step(step)) => Ok(Some(*step)),
            Err(source) => Err(Error::AskRouter { apply, source }),
        }
    }

    /// Starts the apply script as `apply`: a plain commit, or
    /// `commit-confirm` when `confirm` is set, the commit carrying a
    /// comment naming this config, its binding, generation and `apply`.
    async fn start_script(
        &self,
        provider: &dyn Provider,
        apply: &ApplyId,
        confirm: Option<&vrouter_api::ConfirmSpec>,
    ) -> Result<ExecHandle, ProviderError> {
        let spec = &self.config.spec;
        let commit = match confirm {
            None => vrouter_render::Commit::Plain { save: spec.save },
            // Validated: a whole number of minutes in range.
            Some(confirm) => vrouter_render::Commit::Confirmed {
                minutes: confirm.minutes().unwrap_or(1),
            },
        };
        let comment = super::commit_comment::for_apply(self.config, apply.as_str());
        let (config, commands) = self.content().await?;
        self.stage(apply, &config, &commands).await?;
        provider
            .exec_commented_script(apply, &config, &commands, commit, &comment)
            .await
    }

    /// What this apply delivers: the stored revision `spec.rollbackTo`
    /// names, else the spec's content with its secret params resolved.
    async fn content(&self) -> Result<(String, String), ProviderError> {
        let spec = &self.config.spec;
        match &spec.rollback_to {
            Some(rollback) => super::history::rollback_content(&self.ctx.client, self.config, rollback.revision).await,
            None => {
                super::secret_params::resolve(&self.ctx.client, &self.router.namespace, &spec.config, &spec.commands)
                    .await
            }
        }
    }

    /// Keeps what the apply delivers until its result is recorded, so the
    /// revision holds exactly the content sent. In memory, not in the
    /// history Secret: an apply costs one history write, and the write can
    /// never hold an apply back.
    async fn stage(&self, apply: &ApplyId, config: &str, commands: &str) -> Result<(), ProviderError> {
        let delivery = vrouter_api::history::Delivery {
            apply_id: apply.as_str().to_owned(),
            binding: super::commit_comment::binding_of(self.config),
            generation: self.config.meta().generation.unwrap_or(0),
            rollback_of: self.config.spec.rollback_to.as_ref().map(|r| r.revision),
            config: config.to_owned(),
            commands: commands.to_owned(),
            content_dropped: false,
        };
        self.ctx.own.staged.stage(self.config, delivery);
        Ok(())
    }

    /// The hash of the running config before a confirmed apply, or why the
    /// apply cannot start.
    async fn previous_running_config(
        &self,
        provider: &dyn Provider,
        confirm: &vrouter_api::ConfirmSpec,
    ) -> Result<String, ConfirmRefusal> {
        provider
            .confirm_supported()
            .map_err(|e| ConfirmRefusal::Permanent(e.to_string()))?;
        if confirm.minutes().is_none() {
            return Err(ConfirmRefusal::Permanent(format!(
                "spec.confirm.timeout {} is not a whole number of minutes from 1m to 24h",
                confirm.timeout
            )));
        }
        let running = provider
            .read_running_config()
            .await
            .map_err(|e| ConfirmRefusal::Transient(format!("reading the running config to roll back to: {e}")))?;
        Ok(off_runtime::config_hash(running).await)
    }

    /// A confirmed apply that cannot start: the generation fails with the
    /// reason (permanent) or the dispatch is retried (transient).
    async fn refuse_confirm(
        &self,
        generation: i64,
        refusal: ConfirmRefusal,
        last_reboot: Option<&Time>,
    ) -> Result<Action, Error> {
        let (why, permanent) = match refusal {
            ConfirmRefusal::Permanent(why) => (why, true),
            ConfirmRefusal::Transient(why) => (why, false),
        };
        let before = self.before_dispatch(generation);
        let step = decide::on_dispatch_failed(&before, generation, self.clock, &why, permanent, last_reboot);
        self.finish(step).await
    }

    /// One look at a confirmed apply between its commit and its end.
    async fn confirmation(&self, provider: &dyn Provider, confirmation: &ConfirmationStatus) -> Result<Action, Error> {
        // The router stays this config's until the confirmation ends: another
        // config's apply would commit into the pending rollback.
        let rollback_in =
            Duration::try_from(confirmation.rollback_time.0.duration_since(self.clock.now)).unwrap_or(Duration::ZERO);
        let until = Instant::now() + rollback_in + self.ctx.settings.apply_timeout;
        let _ = self
            .ctx
            .own
            .router_locks
            .try_hold(self.vm(), &self.holder, until, Instant::now());
        let step = match confirm::stage(confirmation, self.clock.now) {
            Stage::AwaitRollback(left) => return Ok(Action::requeue(left)),
            Stage::Check => {
                let checked = self.check_and_confirm(provider, confirmation).await;
                if let Checked::Failed(why) = &checked {
                    tracing::warn!(config = %self.name, %why, "not confirming; the router will roll back");
                }
                confirm::on_checked(&self.status, self.now(), checked)
            }
            Stage::Verify => {
                let read = match provider.read_running_config().await {
                    Ok(running) => Ok(off_runtime::config_hash(running).await),
                    Err(e) => Err(e.to_string()),
                };
                confirm::on_rollback_read(&self.status, self.now(), read)
            }
        };
        self.finish(step).await
    }

    /// The checks from outside, then `confirm` and `save`: the agent answers
    /// and the router is ready, the user's check exits 0, and there is still
    /// time before the rollback.
    async fn check_and_confirm(&self, provider: &dyn Provider, confirmation: &ConfirmationStatus) -> Checked {
        if let Err(e) = provider.check_ready().await {
            return Checked::Failed(format!("the router did not answer after the commit: {e}"));
        }
        if let Some(check) = self.config.spec.confirm.as_ref().and_then(|c| c.check.as_ref()) {
            let command = check.command.join(" ");
            match provider.run_check(&check.command, check.timeout.to_std()).await {
                Ok(outcome) if outcome.exit_code == 0 && outcome.error.is_none() => {}
                Ok(outcome) => {
                    // Only stderr: a check's stdout may print the config.
                    let detail = match (&outcome.error, outcome.stderr.trim()) {
                        (Some(error), _) => format!(": {error}"),
                        (None, "") => String::new(),
                        (None, _) => format!(": {}", vrouter_providers::excerpt("", &outcome.stderr)),
                    };
                    return Checked::Failed(format!(
                        "check `{command}` exited with code {}{detail}",
                        outcome.exit_code
                    ));
                }
                Err(e) => return Checked::Failed(format!("check `{command}` did not complete: {e}")),
            }
        }
        if !confirm::may_confirm(confirmation, Timestamp::now()) {
            return Checked::Failed(format!(
                "the checks ended less than {:?} before the rollback time, too late to confirm safely",
                confirm::CONFIRM_MARGIN
            ));
        }
        match provider.confirm_apply(self.config.spec.save).await {
            Ok(()) => Checked::Confirmed,
            Err(e) => Checked::Failed(format!("confirm failed: {e}")),
        }
    }

    /// The clock at this moment: checks take time, and the verdict is
    /// stamped when it is reached.
    fn now(&self) -> Clock {
        Clock {
            now: Timestamp::now(),
            ..self.clock
        }
    }

    /// Until when a hold taken now lasts: an apply cannot run longer.
    fn hold_until(&self) -> Instant {
        Instant::now() + self.ctx.settings.apply_timeout
    }

    async fn router_busy_with(&self) -> Option<String> {
        router_busy_with(self.ctx, self.vm(), &self.holder, self.clock).await
    }

    async fn wait_for_router(&self, other: &str) -> Result<Action, Error> {
        wait_for_router(self.ctx, self.config, &self.status, other).await
    }

    async fn note_problem(&self, message: String) -> Result<Action, Error> {
        let problem = TargetProblem::unavailable(&message);
        note_problem(self.ctx, self.config, &self.status, problem).await
    }

    /// The router cannot be reached for a reason a person must fix (its
    /// provider cannot be built, the operator's role lacks a permission,
    /// its certificate is not trusted).
    async fn cannot_reach(&self, error: &ProviderError) -> Result<Action, Error> {
        let message = format!("cannot reach the router: {error}");
        let problem = TargetProblem {
            reason: decide::problem_reason(error),
            message: &message,
        };
        note_problem(self.ctx, self.config, &self.status, problem).await
    }

    async fn finish(&self, step: Step) -> Result<Action, Error> {
        finish(self.ctx, self.config, &self.status, step).await
    }
}

/// Why a confirmed apply cannot start.
enum ConfirmRefusal {
    /// The provider cannot carry it, or the spec cannot be given to the router.
    Permanent(String),
    /// The running config could not be read; tried again.
    Transient(String),
}

/// How soon a config waiting for another config's apply on its router looks
/// again; applies of a small config take about a second.
const ROUTER_BUSY_RETRY: Duration = Duration::from_secs(2);

/// Another config whose apply runs on `router`: held in this process, or,
/// after a restart, shown in stored statuses (the store is read once its
/// first list is in, so a restarted process cannot miss one).
async fn router_busy_with(ctx: &ConfigContext, vm: &Vm, holder: &str, clock: Clock) -> Option<String> {
    if let Some(other) = ctx.own.router_locks.held_by_other(vm, holder, Instant::now()) {
        return Some(other);
    }
    stores::ready(&ctx.own.configs).await.then_some(())?;
    let configs = ctx.own.configs.state();
    let vm_of = |config: &VRouterConfig| {
        let target = ObjectRef::<VRouterTarget>::new(&config.spec.target_ref.name)
            .within(&config.namespace().unwrap_or_default());
        ctx.own.targets.get(&target).and_then(|target| RouterKey::of(&target))
    };
    in_flight_elsewhere(
        configs.iter().map(|c| &**c),
        vm_of,
        vm,
        holder,
        clock.now,
        clock.apply_timeout,
    )
}

async fn wait_for_router(
    ctx: &ConfigContext,
    config: &VRouterConfig,
    status: &VRouterConfigStatus,
    other: &str,
) -> Result<Action, Error> {
    let mut next = decide::nothing_attempted_meanwhile(status.clone());
    // `other` is `namespace/name`; a config of the same namespace is named alone.
    let own_namespace = format!("{}/", config.namespace().unwrap_or_default());
    let other = other.strip_prefix(&own_namespace).unwrap_or(other);
    next.message = format!("waiting for VRouterConfig {other:?} to finish its apply on the same router");
    let next = summarised(next, config, None, Timestamp::now());
    if let Some(written) = status_writes::patch_status(&ctx.client, config, Some(status), &next).await? {
        ctx.own.own_writes.record_over(config, &written);
    }
    Ok(Action::requeue(ROUTER_BUSY_RETRY))
}

/// A problem that needs a person (a missing target, unreadable credentials):
/// shown in `status.message`, retried slowly, never a hot loop.
async fn note_problem(
    ctx: &ConfigContext,
    config: &VRouterConfig,
    status: &VRouterConfigStatus,
    problem: TargetProblem<'_>,
) -> Result<Action, Error> {
    let clock = Clock {
        now: Timestamp::now(),
        apply_timeout: ctx.settings.apply_timeout,
    };
    let message = problem.message.to_owned();
    let mut step = decide::on_target_unavailable(status, clock, &message);
    if step.status.exec_pid == 0 && status.exec_pid > 0 {
        // The apply in flight timed out meanwhile.
        record_apply_end(ctx, status, &step, clock.now);
        return finish(ctx, config, status, step).await;
    }
    step.status = summarised(step.status, config, Some(problem), clock.now);
    if let Some(written) = status_writes::patch_status(&ctx.client, config, Some(status), &step.status).await? {
        ctx.own.own_writes.record_over(config, &written);
        ctx.event(
            config,
            EventType::Warning,
            vrouter_api::constants::event::TARGET_UNAVAILABLE,
            message,
        )
        .await;
    }
    Ok(match step.next {
        Next::RequeueAfter(after) => Action::requeue(after),
        _ => Action::requeue(decide::TARGET_UNAVAILABLE_RETRY),
    })
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

/// `status` with the `Ready`, `Reconciling` and `Stalled` conditions its
/// phase (or `target_problem`) implies for `config`'s current generation.
pub(crate) fn summarised(
    mut status: VRouterConfigStatus,
    config: &VRouterConfig,
    target_problem: Option<TargetProblem<'_>>,
    now: Timestamp,
) -> VRouterConfigStatus {
    let generation = config.meta().generation.unwrap_or(0);
    // Every status this controller writes passes here: its message may
    // quote a router's output.
    vrouter_api::text::bound(&mut status.message, vrouter_api::text::MAX_MESSAGE_BYTES);
    let summary = conditions::config_summary(&status, generation, target_problem);
    conditions::summarise(&mut status.conditions, summary, Some(generation), now);
    status
}

async fn finish(
    ctx: &ConfigContext,
    config: &VRouterConfig,
    current: &VRouterConfigStatus,
    step: Step,
) -> Result<Action, Error> {
    let namespace = config.namespace().unwrap_or_default();
    let (text, commands) = (&config.spec.config, &config.spec.commands);
    let mut step = super::secret_params::scrub(&ctx.client, &namespace, text, commands, step).await;
    step.status = summarised(step.status, config, None, Timestamp::now());
    record_revision(ctx, config, current, &step.status).await;
    if step.status.exec_pid == 0 && step.status.confirmation.is_none() {
        // No apply of this config runs (any more): its router is free.
        ctx.own.router_locks.release(&holder(config));
    }
    if let Some(written) =
        status_writes::patch_status_keeping_result(&ctx.client, config, current, &step.status).await?
    {
        ctx.own.own_writes.record_over(config, &written);
    }
    if let Some(event) = &step.event {
        ctx.event(config, event.type_, event.reason, event.note.clone()).await;
    }
    if step.status.phase == vrouter_api::Phase::Applied
        && current.phase != vrouter_api::Phase::Applied
        && !ensure_status_object(ctx, config, &router_of(config)).await?
    {
        return Ok(Action::requeue(STATUS_OBJECT_RETRY));
    }
    match step.next {
        Next::Done => Ok(Action::await_change()),
        Next::RequeueAfter(after) => Ok(Action::requeue(after)),
        Next::Retry(message) => Err(Error::Decided(message)),
    }
}

/// Records the apply that `next` ends as a revision of the config's
/// history. Best effort: the apply's result stands either way, and a
/// history that cannot be written is logged, never a reason to apply again.
async fn record_revision(
    ctx: &ConfigContext,
    config: &VRouterConfig,
    current: &VRouterConfigStatus,
    next: &VRouterConfigStatus,
) {
    let Some(result) = super::history::outcome(current, next) else {
        return;
    };
    let Some(delivery) = ctx.own.staged.take(config, &next.apply_id) else {
        return;
    };
    if let Err(e) = super::history::record(&ctx.client, &ctx.own.secrets, config, delivery, result).await {
        tracing::warn!(config = %config.name_any(), apply = %next.apply_id, error = %e, "could not record the revision");
    }
}

/// How soon a VRouterStatus that could not be created is tried again.
const STATUS_OBJECT_RETRY: Duration = Duration::from_secs(30);

/// After the first successful apply, a VRouterStatus watches the router for
/// drift. It is owned by the config, so it goes when the config goes. A
/// failed create is remembered and tried again every
/// [`STATUS_OBJECT_RETRY`]: the config is Applied by then and nothing else
/// would bring it back here before its next apply. Returns whether it
/// exists now.
pub(crate) async fn ensure_status_object(
    ctx: &ConfigContext,
    config: &VRouterConfig,
    router: &Router,
) -> Result<bool, Error> {
    let name = config.name_any();
    match create_status_object(ctx, config).await {
        Ok(()) => {
            ctx.own.status_objects_due.remove(router, &name);
            Ok(true)
        }
        Err(Error::Kube(error)) => {
            ctx.own.status_objects_due.insert(router, &name);
            let message = match &error {
                kube::Error::Api(e) => format!("{} ({})", e.message, e.reason),
                other => other.to_string(),
            };
            tracing::warn!(config = %name, %message, "could not create the VRouterStatus; retrying");
            ctx.event(
                config,
                EventType::Warning,
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
    // Create and take "already exists" as done: one request in either
    // case, where a look first would be a second request for every config.
    let status = VRouterStatus {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            owner_references: config.controller_ref().map(|owner| vec![owner]),
            ..Default::default()
        },
        spec: VRouterStatusSpec {
            config_ref: NameRef::new(name),
            sync_interval: vrouter_api::Duration::from_secs(300),
        },
        status: None,
    };
    match api.create(&crate::runtime::context::post_params(), &status).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
