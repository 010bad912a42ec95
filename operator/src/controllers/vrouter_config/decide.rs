//! The apply state machine of a VRouterConfig (spec §7.2) as pure functions.
//!
//! The controller (`super`) performs the I/O — is the VM running, is the router
//! ready, poll the exec, dispatch the script — and after each observation asks
//! one of these functions what the status becomes and what happens next. Each
//! function returns the whole desired status; the controller writes it only
//! when it differs from what is stored, so a steady state makes no writes.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::events::EventType;
use vrouter_api::constants::{condition, reason};
use vrouter_api::{Phase, VRouterConfigStatus};

use crate::runtime::conditions::{self, Wanted};

/// How long to wait before looking at a router that is not ready again.
pub const NOT_READY_RETRY: Duration = Duration::from_secs(10);
/// The first exec poll comes this soon after dispatch: a small config applies
/// in well under a second and should be reported as soon as it is done.
pub const FIRST_POLL: Duration = Duration::from_millis(250);
/// Polls back off to at most this, so a long apply costs one request per few seconds.
pub const MAX_POLL: Duration = Duration::from_secs(5);
/// After a lost exec result, re-dispatch promptly.
pub const REDISPATCH_AFTER: Duration = Duration::from_millis(500);
/// How often a config whose target cannot be reached (missing, or its
/// provider cannot be built) is looked at again.
pub const TARGET_UNAVAILABLE_RETRY: Duration = Duration::from_secs(30);
/// How often a stopped VM is looked at again. The target's watch usually
/// brings its start sooner; this covers a start the target saw before this
/// config did, which no later change of the target would announce.
pub const VM_STOPPED_RETRY: Duration = Duration::from_secs(60);

/// What the controller knows when it decides.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub now: Timestamp,
    /// The longest an apply may run before it is reported failed.
    pub apply_timeout: Duration,
}

/// What to do after the status is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing more for this generation; wait for a change.
    Done,
    RequeueAfter(Duration),
    /// Return an error so the controller retries with backoff; the status is
    /// not a place for a transient failure.
    Retry(String),
}

/// A Kubernetes Event to record with the step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

/// One decision: the desired status, what comes next, and an optional event.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub status: VRouterConfigStatus,
    pub next: Next,
    pub event: Option<Event>,
}

/// What polling the in-flight exec returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    Running,
    /// The script finished. `failure` carries the failure-marker excerpt when
    /// the output shows a set/commit/delete failure (which can exit 0).
    Exited {
        code: i64,
        failure: Option<String>,
    },
    /// The provider can no longer tell what happened to this exec (the agent
    /// or the operator restarted): only a fresh dispatch can make progress.
    Lost,
    /// The apply is over without an outcome (vrouter-daemon's call timed out
    /// or failed): polling on until the apply timeout would only hide it.
    Ended {
        timed_out: bool,
        why: String,
    },
    /// Any other error, possibly transient.
    Error(String),
}

/// Why an apply is dispatched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchReason {
    /// The spec changed since the last dispatch.
    NewGeneration,
    /// The router rebooted since the last apply it was given.
    Reboot,
    /// Drift repair or a lost exec put the config back to Pending.
    Pending,
    /// A Secret its secret params name changed since the last dispatch.
    SecretRotated,
}

fn std_to_signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

pub(super) fn elapsed_since(start: &Option<Time>, now: Timestamp) -> SignedDuration {
    start.as_ref().map_or(SignedDuration::ZERO, |t| now.duration_since(t.0))
}

/// The status with `execStartedTime` backfilled: a config left mid-apply by an
/// older controller may carry a PID without a start time, and the timeout
/// must still be measured from somewhere.
pub(super) fn with_exec_start(status: &VRouterConfigStatus, now: Timestamp) -> VRouterConfigStatus {
    let mut status = status.clone();
    if status.exec_pid > 0 && status.exec_started_time.is_none() {
        status.exec_started_time = Some(Time(now));
    }
    status
}

pub(super) fn timed_out(status: &VRouterConfigStatus, clock: Clock) -> bool {
    elapsed_since(&status.exec_started_time, clock.now) > std_to_signed(clock.apply_timeout)
}

pub(super) fn set_applied(
    status: &mut VRouterConfigStatus,
    ok: bool,
    why: &'static str,
    message: String,
    now: Timestamp,
) {
    let observed_generation = Some(status.observed_generation);
    conditions::set(
        &mut status.conditions,
        Wanted {
            type_: condition::APPLIED,
            status: ok,
            reason: why,
            message,
            observed_generation,
        },
        now,
    );
}

/// The generation failed for `why`: phase Failed, Applied=False with the
/// message, a warning event, and no retry (a new spec or reboot retries).
/// The generation applied: phase Applied, `Applied=True`, a Normal event
/// saying `note`.
pub(super) fn applied_step(mut status: VRouterConfigStatus, now: Timestamp, note: String) -> Step {
    status.phase = Phase::Applied;
    status.message = String::new();
    status.last_applied_time = Some(Time(now));
    set_applied(&mut status, true, reason::CONFIG_APPLIED, String::new(), now);
    Step {
        status,
        next: Next::Done,
        event: Some(Event {
            type_: EventType::Normal,
            reason: reason::CONFIG_APPLIED,
            note,
        }),
    }
}

fn failed_step(mut status: VRouterConfigStatus, why: &'static str, message: String, now: Timestamp) -> Step {
    status.phase = Phase::Failed;
    status.message = message.clone();
    set_applied(&mut status, false, why, message.clone(), now);
    Step {
        status,
        next: Next::Done,
        event: Some(Event {
            type_: EventType::Warning,
            reason: why,
            note: message,
        }),
    }
}

pub(super) fn apply_timeout_step(mut status: VRouterConfigStatus, clock: Clock, context: &str) -> Step {
    status.exec_pid = 0;
    let message = format!("apply did not finish within {:?}{context}", clock.apply_timeout);
    failed_step(status, reason::APPLY_TIMEOUT, message, clock.now)
}

/// The VM is not running. Nothing can be applied; an apply in flight still
/// has its timeout enforced, so a VM stopped mid-apply does not leave the
/// config Applying forever: the next look comes no later than its deadline.
pub fn on_vm_stopped(status: &VRouterConfigStatus, clock: Clock) -> Step {
    let status = nothing_attempted_meanwhile(with_exec_start(status, clock.now));
    let mut next = VM_STOPPED_RETRY;
    if status.exec_pid > 0 {
        if timed_out(&status, clock) {
            return apply_timeout_step(status, clock, " (the VM stopped)");
        }
        next = next.min(time_left(&status, clock) + Duration::from_secs(1));
    }
    Step {
        status,
        next: Next::RequeueAfter(next),
        event: None,
    }
}

/// With no apply in flight, a start time left by a failed dispatch is
/// dropped while the router cannot be tried (stopped, not ready, busy with
/// another config): the retries that failed are given the full apply
/// timeout again once it can, instead of one more attempt at most.
pub fn nothing_attempted_meanwhile(mut status: VRouterConfigStatus) -> VRouterConfigStatus {
    if status.exec_pid == 0 {
        status.exec_started_time = None;
    }
    status
}

/// What is left of the apply timeout; zero once it is spent.
fn time_left(status: &VRouterConfigStatus, clock: Clock) -> Duration {
    let left = std_to_signed(clock.apply_timeout) - elapsed_since(&status.exec_started_time, clock.now);
    Duration::try_from(left).unwrap_or(Duration::ZERO)
}

/// The target is missing or its provider cannot be built (a Secret or
/// ProxmoxCluster gone): `why` goes in the message. An apply in flight
/// still has its timeout enforced, so a credential deleted mid-apply does
/// not leave the config Applying (and a rollout waiting) forever.
pub fn on_target_unavailable(status: &VRouterConfigStatus, clock: Clock, why: &str) -> Step {
    let mut status = with_exec_start(status, clock.now);
    let mut next = TARGET_UNAVAILABLE_RETRY;
    if status.exec_pid > 0 {
        if timed_out(&status, clock) {
            return apply_timeout_step(status, clock, &format!(" ({why})"));
        }
        next = next.min(time_left(&status, clock) + Duration::from_secs(1));
    }
    status.message = why.to_owned();
    Step {
        status,
        next: Next::RequeueAfter(next),
        event: None,
    }
}

/// The condition reason of a problem reaching the router that needs a
/// person: TLS problems by kind (they are fixed in a CA bundle or at the
/// endpoint, not in the target), every other one `TargetUnavailable`.
pub fn problem_reason(error: &vrouter_providers::ProviderError) -> &'static str {
    use vrouter_providers::ProviderError as E;
    match error {
        E::CertificateNotTrusted { .. } | E::DaemonTls { untrusted: true, .. } => reason::CERTIFICATE_NOT_TRUSTED,
        E::DaemonTls { untrusted: false, .. } => reason::TLS_HANDSHAKE_FAILED,
        E::InvalidTls { .. } => reason::INVALID_TLS_CONFIG,
        _ => reason::TARGET_UNAVAILABLE,
    }
}

/// The router did not pass its readiness check (spec §7.2 step 3).
pub fn on_not_ready(status: &VRouterConfigStatus, clock: Clock, why: &str) -> Step {
    let mut status = nothing_attempted_meanwhile(with_exec_start(status, clock.now));
    if status.exec_pid > 0 && timed_out(&status, clock) {
        return apply_timeout_step(status, clock, &format!(" (router not ready: {why})"));
    }
    if status.phase == Phase::Applied {
        // A previous success can no longer be trusted while the router does
        // not answer; without this, `kubectl wait` would report a stale True.
        status.phase = Phase::Pending;
        let message = format!("router not ready: {why}");
        status.message = message.clone();
        set_applied(&mut status, false, reason::ROUTER_NOT_READY, message, clock.now);
    }
    Step {
        status,
        next: Next::RequeueAfter(NOT_READY_RETRY),
        event: None,
    }
}

/// How long to wait before the next exec poll: short at first so a quick
/// apply is seen quickly, backing off to [`MAX_POLL`] for long ones.
pub fn poll_interval(elapsed: SignedDuration) -> Duration {
    let quarter = Duration::try_from(elapsed / 4).unwrap_or(Duration::ZERO);
    quarter.clamp(FIRST_POLL, MAX_POLL)
}

/// The in-flight exec was polled (spec §7.2 step 4). Precondition: `execPID > 0`.
pub fn on_exec_polled(status: &VRouterConfigStatus, clock: Clock, poll: Poll) -> Step {
    let mut status = with_exec_start(status, clock.now);
    let elapsed = elapsed_since(&status.exec_started_time, clock.now);
    match poll {
        Poll::Running if timed_out(&status, clock) => apply_timeout_step(status, clock, ""),
        Poll::Running => {
            // A poll that failed before said so in the message; it answers again.
            status.message.clear();
            Step {
                status,
                next: Next::RequeueAfter(poll_interval(elapsed)),
                event: None,
            }
        }
        // The error stays in the message: for vrouter-daemon it is how the
        // apply itself ended (a gRPC error), not only a failed look at it.
        Poll::Error(error) if timed_out(&status, clock) => {
            apply_timeout_step(status, clock, &format!(" (its status could not be read: {error})"))
        }
        Poll::Error(error) => {
            status.message = format!("could not read the apply's result, retrying: {error}");
            Step {
                status,
                next: Next::Retry(format!("polling the apply: {error}")),
                event: None,
            }
        }
        Poll::Lost => {
            status.exec_pid = 0;
            status.exec_started_time = None;
            status.phase = Phase::Pending;
            status.message = "the result of the running apply was lost; applying again".into();
            Step {
                status,
                next: Next::RequeueAfter(REDISPATCH_AFTER),
                event: None,
            }
        }
        Poll::Ended { timed_out, why } => {
            status.exec_pid = 0;
            status.exec_started_time = None;
            let reason = if timed_out {
                reason::APPLY_TIMEOUT
            } else {
                reason::CONFIG_FAILED
            };
            failed_step(
                status,
                reason,
                format!("apply ended without a result: {why}"),
                clock.now,
            )
        }
        Poll::Exited { code, failure } => {
            status.exec_pid = 0;
            status.exec_started_time = None;
            let failed = code != 0 || failure.is_some();
            if failed {
                let detail = failure.map(|f| format!(": {f}")).unwrap_or_default();
                let message = format!("apply script exited with code {code}{detail}");
                failed_step(status, reason::CONFIG_FAILED, message, clock.now)
            } else {
                let note = format!("applied generation {}", status.observed_generation);
                applied_step(status, clock.now, note)
            }
        }
    }
}

/// How much earlier than the boot it stands for a target's `lastRebootTime`
/// can be. It is "read at minus uptime", with the uptime read before the
/// moment stamped (and, from Proxmox, in whole seconds rounded down), so it
/// is never before the boot; stored as a `metav1.Time` it loses its
/// fraction, up to one second. One more second covers the skew between
/// replicas' clocks, which stamp it and `lastAppliedTime`.
const REBOOT_ESTIMATE_SLACK: SignedDuration = SignedDuration::from_secs(2);

/// The router's latest boot, as [`dispatch_reason`] and the dispatch's
/// record of it take it: the target's `lastRebootTime` (a Proxmox reboot
/// found by the ProxmoxCluster sync) or the start of the VM's current run as
/// its provider records it (a KubeVirt VMI's creation), whichever is later.
///
/// A boot before the config's last success went to that success, and is not
/// counted, so a reboot found only after the apply (a guest booted shortly
/// before its first apply, seen by the cluster's next sync) does not apply
/// it a second time. A plain apply's success is read from the guest agent
/// that ran the script, or from the apply's record in the router's `/run`,
/// and a boot after the dispatch would have lost both. Not so a confirmed
/// apply's (`confirmed`): it is the confirm's, and a boot between the
/// script and the confirm rolls the change back without failing the confirm;
/// for such a config every unhandled reboot counts, as before.
/// - The target's `lastRebootTime` is an estimate, never earlier than the
///   boot by more than [`REBOOT_ESTIMATE_SLACK`]; it is not counted when it
///   lies that much before the success.
/// - A VM run's start is exact; it is not counted when it began before the
///   success and the config recorded no boot for it (applied by the Go
///   operator, which records none for KubeVirt, or before runs were recorded).
pub fn latest_boot(
    status: &VRouterConfigStatus,
    confirmed: bool,
    target_last_reboot: Option<&Time>,
    vm_started_at: Option<Timestamp>,
) -> Option<Time> {
    let succeeded_after = |boot: Timestamp| {
        status
            .last_applied_time
            .as_ref()
            .is_some_and(|applied| boot <= applied.0)
    };
    let reboot = target_last_reboot.filter(|reboot| {
        let latest_true_boot = reboot.0.checked_add(REBOOT_ESTIMATE_SLACK).unwrap_or(reboot.0);
        confirmed || !succeeded_after(latest_true_boot)
    });
    let started =
        vm_started_at.filter(|started| !(status.last_reboot_handled_time.is_none() && succeeded_after(*started)));
    match (reboot, started) {
        (Some(reboot), Some(started)) if started > reboot.0 => Some(Time(started)),
        (Some(reboot), _) => Some(reboot.clone()),
        (None, started) => started.map(Time),
    }
}

/// Whether an apply must be dispatched (spec §7.2 steps 5 and 6), and why.
/// Precondition: no exec in flight.
pub fn dispatch_reason(
    status: &VRouterConfigStatus,
    generation: i64,
    target_last_reboot: Option<&Time>,
) -> Option<DispatchReason> {
    if generation != status.observed_generation {
        return Some(DispatchReason::NewGeneration);
    }
    let reboot_unhandled = match (target_last_reboot, status.last_reboot_handled_time.as_ref()) {
        // In whole seconds: the handled time is stored as a metav1.Time
        // keeps it (seconds), while a stamp someone else wrote may carry a
        // fraction, which would otherwise stay "newer" and re-apply forever.
        (Some(reboot), Some(handled)) => reboot.0.as_second() > handled.0.as_second(),
        (Some(_), None) => true,
        (None, _) => false,
    };
    if reboot_unhandled {
        return Some(DispatchReason::Reboot);
    }
    match status.phase {
        Phase::Applied | Phase::Failed => None,
        // Pending (drift repair, lost result, not-ready reset) or an Applying
        // whose PID was never recorded: only a dispatch can make progress.
        Phase::Pending | Phase::Applying => Some(DispatchReason::Pending),
    }
}

/// Whether a dispatch of `generation` continues the stored apply id: one
/// was written ahead for this generation and no handle came back (a crash,
/// a dispatch error, a lost answer). The router may have started it, so it
/// is asked about that id, and a dispatch reuses it.
pub fn continues_stored_apply(status: &VRouterConfigStatus, generation: i64) -> bool {
    status.phase == Phase::Applying
        && status.observed_generation == generation
        && status.exec_pid == 0
        && !status.apply_id.is_empty()
}

/// The status written just before the script starts (write-ahead):
/// `Applied=False` for the generation about to be applied, so `kubectl
/// wait` cannot return on a stale True while the new apply runs, and the
/// apply id the router will record it under: `fresh_apply_id` unless the
/// dispatch continues the stored one. `execStartedTime` (with no PID yet)
/// marks the first attempt: a dispatch that keeps failing is given up after
/// the apply timeout like an apply that never ends.
pub fn before_dispatch(
    status: &VRouterConfigStatus,
    generation: i64,
    clock: Clock,
    fresh_apply_id: &str,
) -> VRouterConfigStatus {
    let mut status = status.clone();
    if !continues_stored_apply(&status, generation) {
        status.apply_id = fresh_apply_id.to_owned();
    }
    let retrying = status.phase == Phase::Applying
        && status.observed_generation == generation
        && status.exec_pid == 0
        && status.exec_started_time.is_some();
    if !retrying {
        status.exec_started_time = Some(Time(clock.now));
        status.message = String::new();
    }
    status.observed_generation = generation;
    status.phase = Phase::Applying;
    set_applied(
        &mut status,
        false,
        reason::APPLYING,
        format!("applying generation {generation}"),
        clock.now,
    );
    status
}

/// The write-ahead also records the reboot the apply handles: an apply
/// whose handle is lost is finished from the router's record of its id,
/// never dispatched again, so only the write-ahead can say that this
/// reboot's re-apply is under way.
pub fn handling_reboot(mut status: VRouterConfigStatus, target_last_reboot: Option<&Time>) -> VRouterConfigStatus {
    if let Some(reboot) = target_last_reboot {
        status.last_reboot_handled_time = Some(reboot.clone());
    }
    status
}

/// The script was dispatched and has a handle to poll.
pub fn after_dispatch(
    status: &VRouterConfigStatus,
    generation: i64,
    clock: Clock,
    handle: i64,
    target_last_reboot: Option<&Time>,
) -> Step {
    let mut status = before_dispatch(status, generation, clock, &status.apply_id);
    status.exec_pid = handle;
    status.exec_started_time = Some(Time(clock.now));
    if let Some(reboot) = target_last_reboot {
        status.last_reboot_handled_time = Some(reboot.clone());
    }
    Step {
        status,
        next: Next::RequeueAfter(FIRST_POLL),
        event: None,
    }
}

/// The dispatch itself failed. A permanent failure (the script cannot be
/// built or delivered as given) fails this generation with the reason; a
/// transient one is shown in `status.message` and retried with backoff
/// until the apply timeout, counted from the first attempt, is spent.
pub fn on_dispatch_failed(
    status: &VRouterConfigStatus,
    generation: i64,
    clock: Clock,
    error: &str,
    permanent: bool,
    target_last_reboot: Option<&Time>,
) -> Step {
    let mut status = before_dispatch(status, generation, clock, &status.apply_id);
    if !permanent && !timed_out(&status, clock) {
        status.message = format!("could not start the apply, retrying: {error}");
        return Step {
            status,
            next: Next::Retry(format!("dispatching the apply: {error}")),
            event: None,
        };
    }
    if let Some(reboot) = target_last_reboot {
        status.last_reboot_handled_time = Some(reboot.clone());
    }
    if permanent {
        let message = format!("apply could not be started: {error}");
        return failed_step(status, reason::CONFIG_FAILED, message, clock.now);
    }
    let message = format!("apply could not be started within {:?}: {error}", clock.apply_timeout);
    failed_step(status, reason::APPLY_TIMEOUT, message, clock.now)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
