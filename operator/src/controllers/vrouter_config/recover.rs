//! What an apply whose handle is missing or lost became, decided from what
//! the router recorded under its apply id (`vrouter_qga::arbiter`). The
//! router is the arbiter: a lost guest-agent pid, a crash between the
//! write-ahead and the stored handle, or a dispatch whose answer never came
//! are no reason to apply again; only a router that never started the
//! apply is.

use vrouter_api::{Phase, VRouterConfigStatus};

use super::decide::{self, Clock, Next, Poll, Step};

/// What the router answered about the stored apply id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouterSays {
    /// It never started that apply (or rebooted since, which clears its
    /// records).
    Unknown,
    /// It runs, or waits for the router's lock, as `handle`.
    Running { handle: i64 },
    /// It ended with `code`; `failure` is a failure marker in its output.
    Finished { code: i64, failure: Option<String> },
    /// It started and ended without a result (its wrapper was killed
    /// before its script began, or with the runner that held its lock).
    Vanished,
}

/// When the router was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Before dispatching an apply id written ahead with no handle back.
    BeforeDispatch,
    /// The guest agent no longer knows the handle being polled.
    HandleLost,
}

/// What follows the router's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Recovery {
    /// The router never started the apply: dispatch it, under the same id.
    Dispatch,
    /// Record this step.
    Step(Box<Step>),
}

/// Decides from the router's answer about `status.apply_id`.
pub fn on_router_answer(status: &VRouterConfigStatus, clock: Clock, asked: Asked, says: RouterSays) -> Recovery {
    let id = &status.apply_id;
    match says {
        RouterSays::Unknown if asked == Asked::BeforeDispatch => Recovery::Dispatch,
        RouterSays::Unknown => {
            // Started (the agent gave a pid) but unrecorded: the router
            // rebooted, or the wrapper had not claimed the id yet. The same
            // id dispatched again runs at most once either way.
            let mut status = decide::with_exec_start(status, clock.now);
            status.exec_pid = 0;
            status.phase = Phase::Applying;
            status.message = format!("the router has no record of apply {id}; dispatching it");
            Recovery::Step(Box::new(Step {
                status,
                next: Next::RequeueAfter(decide::REDISPATCH_AFTER),
                event: None,
            }))
        }
        RouterSays::Running { handle } => {
            let mut status = decide::with_exec_start(status, clock.now);
            status.exec_pid = handle;
            status.phase = Phase::Applying;
            Recovery::Step(Box::new(decide::on_exec_polled(&status, clock, Poll::Running)))
        }
        RouterSays::Finished { code, failure } => Recovery::Step(Box::new(decide::on_exec_polled(
            status,
            clock,
            Poll::Exited { code, failure },
        ))),
        RouterSays::Vanished => {
            let mut status = status.clone();
            status.exec_pid = 0;
            status.exec_started_time = None;
            status.phase = Phase::Pending;
            status.message =
                format!("apply {id} ended without a result (killed, or its server restarted); applying again");
            Recovery::Step(Box::new(Step {
                status,
                next: Next::RequeueAfter(decide::REDISPATCH_AFTER),
                event: None,
            }))
        }
    }
}

/// A confirmed apply (`spec.confirm`) found on the router after its
/// dispatch state was lost cannot be confirmed: the running config it may
/// roll back to was read before the crash and is gone, so nothing can tell
/// a check's verdict from a rollback. It is reported failed instead of
/// Applied; nobody confirms it, so the router's own timer rolls it back.
pub fn without_lost_confirmation(step: Step, confirmed: bool, clock: Clock) -> Step {
    if !confirmed || step.status.phase != Phase::Applied {
        return step;
    }
    let mut status = step.status;
    let message = "the confirmed apply's result was recovered from the router after its confirmation state \
                   was lost; it is not confirmed, so the router rolls it back at its commit-confirm timer"
        .to_owned();
    status.phase = Phase::Failed;
    status.message = message.clone();
    decide::set_applied(
        &mut status,
        false,
        vrouter_api::constants::reason::CONFIG_FAILED,
        message.clone(),
        clock.now,
    );
    Step {
        status,
        next: Next::Done,
        event: Some(decide::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: vrouter_api::constants::reason::CONFIG_FAILED,
            note: message,
        }),
    }
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
