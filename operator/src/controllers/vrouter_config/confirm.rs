//! Confirmed applies (`spec.confirm`) as pure decisions.
//!
//! The apply script commits with `commit-confirm <minutes>` and does not
//! save: unless `confirm` runs within the minutes, the router rolls the
//! commit back by itself (VyOS 1.5 `action reload` reloads the config
//! committed before; 1.3 and 1.4 reboot into the saved config.boot, which is
//! why nothing is saved before the confirmation). What the operator adds, in
//! order:
//!
//! 1. before dispatch, the running config's hash, so a rollback can be
//!    verified ([`begin`]);
//! 2. once the script exits 0: checks from outside — the guest agent still
//!    answers, and the user's check command exits 0 — then `confirm` and
//!    `save`, all before the rollback time ([`stage`], [`on_checked`]);
//! 3. on any failure (a check, silence, a failed script, a lost result, a
//!    `confirm` that failed or came too late): no `confirm`; wait for the
//!    router's rollback, read the running config as drift detection does,
//!    and report `RolledBack` when it is the previous one, `RollbackFailed`
//!    when it is still not by the apply timeout after the rollback time
//!    ([`on_rollback_read`]).
//!
//! The controller (`super::reconcile`) performs each observation and writes
//! the status these functions return.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::events::EventType;
use vrouter_api::constants::reason;
use vrouter_api::{ConfirmationStatus, Phase, VRouterConfigStatus};

use super::decide::{Clock, Event, Next, Step, applied_step, set_applied};

/// The confirmation is sent only while at least this much is left before
/// the rollback time: `confirm` itself takes a moment to reach the router,
/// and a confirmation that races the revert would leave the router in a
/// state nobody chose.
pub const CONFIRM_MARGIN: Duration = Duration::from_secs(5);

/// How often the running config is read while a rollback is awaited.
pub const VERIFY_POLL: Duration = Duration::from_secs(5);

/// What the controller does next for a config with a confirmation in
/// progress and no exec in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Check the router and, when every check passes, confirm.
    Check,
    /// Not confirmed: nothing to do until the rollback is due.
    AwaitRollback(Duration),
    /// Read the running config to see whether the rollback restored it.
    Verify,
}

/// How the checks (and the confirmation after them) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// The agent answered, every check passed, and `confirm` (then `save`)
    /// succeeded.
    Confirmed,
    /// What failed: the agent's silence, a check's exit, a failed or late
    /// `confirm`. The router is left to roll back.
    Failed(String),
}

/// The status of a confirmed apply just dispatched at `now`: the rollback
/// can come `timeout` after the dispatch at the earliest (the router starts
/// its timer after receiving the script), and `previous` is the hash of the
/// running config read before the dispatch.
pub fn begin(
    mut status: VRouterConfigStatus,
    now: Timestamp,
    timeout: Duration,
    previous: String,
) -> VRouterConfigStatus {
    status.confirmation = Some(ConfirmationStatus {
        rollback_time: Time(now + to_signed(timeout)),
        previous_running_config_hash: previous,
        failure: String::new(),
    });
    status
}

/// A confirmed apply's script ended: `step` is what [`super::decide`] made
/// of the exit for a plain apply. Success moves on to the checks; anything
/// else (a failed script, a lost result, a timeout) is not confirmed and
/// waits for the rollback. Steps that keep the exec in flight pass through.
pub fn after_script(step: Step, clock: Clock) -> Step {
    let Some(confirmation) = step.status.confirmation.clone() else {
        return step;
    };
    if step.status.exec_pid > 0 {
        return step;
    }
    let mut status = step.status;
    if status.phase == Phase::Applied {
        // Undo the plain apply's success: it is not applied until confirmed.
        status.phase = Phase::Applying;
        status.last_applied_time = None;
        let message = format!(
            "committed with commit-confirm; checking the router before it rolls back at {}",
            confirmation.rollback_time.0
        );
        status.message = message.clone();
        set_applied(&mut status, false, reason::CONFIRMING, message, clock.now);
        return Step {
            status,
            next: Next::RequeueAfter(Duration::ZERO),
            event: None,
        };
    }
    let why = match status.phase {
        Phase::Pending => "the apply's result was lost (the guest agent restarted)".to_owned(),
        _ if status.message.is_empty() => "the apply ended without a result".to_owned(),
        _ => status.message.clone(),
    };
    not_confirmed(status, clock, why)
}

/// What to do for a confirmation in progress at `now`.
pub fn stage(confirmation: &ConfirmationStatus, now: Timestamp) -> Stage {
    if confirmation.failure.is_empty() && now < confirmation.rollback_time.0 {
        return Stage::Check;
    }
    let left = confirmation.rollback_time.0.duration_since(now);
    match Duration::try_from(left) {
        Ok(left) if !left.is_zero() => Stage::AwaitRollback(left),
        _ => Stage::Verify,
    }
}

/// Whether a confirmation may still be sent at `now`.
pub fn may_confirm(confirmation: &ConfirmationStatus, now: Timestamp) -> bool {
    now + to_signed(CONFIRM_MARGIN) < confirmation.rollback_time.0
}

/// The checks ended.
pub fn on_checked(status: &VRouterConfigStatus, clock: Clock, checked: Checked) -> Step {
    let mut status = status.clone();
    match checked {
        Checked::Confirmed => {
            status.confirmation = None;
            let note = format!("applied and confirmed generation {}", status.observed_generation);
            applied_step(status, clock.now, note)
        }
        Checked::Failed(why) => not_confirmed(status, clock, why),
    }
}

/// Not confirmed because of `why`: recorded, and the router is left to roll
/// back; the next look is when the rollback is due.
fn not_confirmed(mut status: VRouterConfigStatus, clock: Clock, why: String) -> Step {
    let Some(confirmation) = status.confirmation.as_mut() else {
        return Step {
            status,
            next: Next::Done,
            event: None,
        };
    };
    confirmation.failure = why.clone();
    let rollback_time = confirmation.rollback_time.0;
    status.exec_pid = 0;
    status.exec_started_time = None;
    status.phase = Phase::Applying;
    let message = format!("not confirmed: {why}; waiting for the router to roll back at {rollback_time}");
    status.message = message.clone();
    set_applied(&mut status, false, reason::CONFIRMING, message, clock.now);
    let next = match Duration::try_from(rollback_time.duration_since(clock.now)) {
        Ok(left) => left.max(VERIFY_POLL),
        Err(_) => VERIFY_POLL,
    };
    Step {
        status,
        next: Next::RequeueAfter(next),
        event: None,
    }
}

/// The running config read once the rollback was due: `Ok` with its hash,
/// or why it could not be read (a router rebooting into its saved config
/// does not answer for a while).
pub fn on_rollback_read(status: &VRouterConfigStatus, clock: Clock, read: Result<String, String>) -> Step {
    let mut status = status.clone();
    let Some(confirmation) = status.confirmation.clone() else {
        return Step {
            status,
            next: Next::Done,
            event: None,
        };
    };
    let failure = if confirmation.failure.is_empty() {
        "the operator did not confirm before the rollback time".to_owned()
    } else {
        confirmation.failure.clone()
    };
    let restored = matches!(&read, Ok(hash) if *hash == confirmation.previous_running_config_hash);
    let overdue = clock.now >= confirmation.rollback_time.0 + to_signed(clock.apply_timeout);
    if !restored && !overdue {
        let seen = match &read {
            Ok(_) => "the running config is not the previous one yet".to_owned(),
            Err(e) => format!("the running config cannot be read yet: {e}"),
        };
        status.message = format!("not confirmed: {failure}; waiting for the router's rollback ({seen})");
        if let Some(c) = status.confirmation.as_mut() {
            c.failure = failure;
        }
        return Step {
            status,
            next: Next::RequeueAfter(VERIFY_POLL),
            event: None,
        };
    }
    status.confirmation = None;
    status.phase = Phase::Failed;
    // A rollback that reboots (VyOS 1.3 and 1.4) is this apply's own
    // doing: it must not count as a reboot that re-applies the config.
    status.last_reboot_handled_time = Some(Time(clock.now));
    let (why, message) = if restored {
        (
            reason::ROLLED_BACK,
            format!("not confirmed: {failure}; the router rolled back to its previous running config"),
        )
    } else {
        let seen = match &read {
            Ok(_) => "it is still another one".to_owned(),
            Err(e) => format!("it cannot be read: {e}"),
        };
        (
            reason::ROLLBACK_FAILED,
            format!(
                "not confirmed: {failure}; the previous running config is not back {:?} after the rollback was due ({seen})",
                clock.apply_timeout
            ),
        )
    };
    status.message = message.clone();
    set_applied(&mut status, false, why, message.clone(), clock.now);
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

fn to_signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

#[cfg(test)]
#[path = "confirm_tests.rs"]
mod tests;
