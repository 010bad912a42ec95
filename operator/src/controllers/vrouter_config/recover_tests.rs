//! One table: every answer of the router, asked before a dispatch and
//! after a lost handle.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vrouter_api::constants::{condition, reason};

use super::*;
use crate::runtime::conditions;
use crate::runtime::test_clock::at;

const TIMEOUT: Duration = Duration::from_secs(600);

fn clock(secs: i64) -> Clock {
    Clock {
        now: at(secs),
        apply_timeout: TIMEOUT,
    }
}

/// Generation 4 written ahead at t=0 as apply `g4-a`, with `pid` (0: no
/// handle came back).
fn written_ahead(pid: i64) -> VRouterConfigStatus {
    let mut status = decide::before_dispatch(&VRouterConfigStatus::default(), 4, clock(0), "g4-a");
    status.exec_pid = pid;
    status
}

fn applied_reason(status: &VRouterConfigStatus) -> Option<String> {
    conditions::get(&status.conditions, condition::APPLIED).map(|c| c.reason.clone())
}

/// (phase, execPID, Applied reason, kept execStartedTime, next)
type Want = (Phase, i64, &'static str, bool, Next);

fn outcome(recovery: Recovery) -> Option<Want> {
    let Recovery::Step(step) = recovery else {
        return None;
    };
    let step = *step;
    let s = step.status;
    let reason: &'static str = match applied_reason(&s).as_deref() {
        Some(reason::CONFIG_APPLIED) => reason::CONFIG_APPLIED,
        Some(reason::CONFIG_FAILED) => reason::CONFIG_FAILED,
        Some(reason::APPLY_TIMEOUT) => reason::APPLY_TIMEOUT,
        Some(reason::APPLYING) => reason::APPLYING,
        other => panic!("unexpected Applied reason {other:?}"),
    };
    assert_eq!(s.apply_id, "g4-a", "the apply id stays for the record");
    Some((
        s.phase,
        s.exec_pid,
        reason,
        s.exec_started_time == Some(Time(at(0))),
        step.next,
    ))
}

/// (what, stored execPID, when asked, the answer, now, expected step)
type Case = (&'static str, i64, Asked, RouterSays, i64, Option<Want>);

fn poll() -> Next {
    Next::RequeueAfter(decide::poll_interval(k8s_openapi::jiff::SignedDuration::from_secs(20)))
}

fn redispatch() -> Next {
    Next::RequeueAfter(decide::REDISPATCH_AFTER)
}

fn finished(code: i64, failure: Option<&str>) -> RouterSays {
    RouterSays::Finished {
        code,
        failure: failure.map(str::to_owned),
    }
}

/// Asked before a dispatch (no handle came back).
fn before_dispatch_cases() -> Vec<Case> {
    let running = RouterSays::Running { handle: 41 };
    let asked = Asked::BeforeDispatch;
    vec![
        ("never started: dispatch now", 0, asked, RouterSays::Unknown, 20, None),
        (
            "running after a crash before the handle was stored: poll it",
            0,
            asked,
            running,
            20,
            Some((Phase::Applying, 41, reason::APPLYING, true, poll())),
        ),
        (
            "finished while the answer was lost: its result",
            0,
            asked,
            finished(0, None),
            20,
            Some((Phase::Applied, 0, reason::CONFIG_APPLIED, false, Next::Done)),
        ),
        (
            "finished with an exit code: failed",
            0,
            asked,
            finished(3, None),
            20,
            Some((Phase::Failed, 0, reason::CONFIG_FAILED, false, Next::Done)),
        ),
        (
            "vanished before dispatch: apply afresh",
            0,
            asked,
            RouterSays::Vanished,
            20,
            Some((Phase::Pending, 0, reason::APPLYING, false, redispatch())),
        ),
    ]
}

/// Asked because the agent lost the handle being polled.
fn handle_lost_cases() -> Vec<Case> {
    let running = RouterSays::Running { handle: 41 };
    let asked = Asked::HandleLost;
    vec![
        (
            "started, then unrecorded: dispatch the same id again",
            7,
            asked,
            RouterSays::Unknown,
            20,
            Some((Phase::Applying, 0, reason::APPLYING, true, redispatch())),
        ),
        (
            "running after the agent restarted: poll on",
            7,
            asked,
            running.clone(),
            20,
            Some((Phase::Applying, 41, reason::APPLYING, true, poll())),
        ),
        (
            "running past the apply timeout: failed, and stopped by the shell",
            7,
            asked,
            running,
            601,
            Some((Phase::Failed, 0, reason::APPLY_TIMEOUT, true, Next::Done)),
        ),
        (
            "finished while the agent restarted: its result",
            7,
            asked,
            finished(0, None),
            20,
            Some((Phase::Applied, 0, reason::CONFIG_APPLIED, false, Next::Done)),
        ),
        (
            "finished with a failure marker: failed",
            7,
            asked,
            finished(0, Some("Set failed")),
            20,
            Some((Phase::Failed, 0, reason::CONFIG_FAILED, false, Next::Done)),
        ),
        (
            "vanished: apply afresh",
            7,
            asked,
            RouterSays::Vanished,
            20,
            Some((Phase::Pending, 0, reason::APPLYING, false, redispatch())),
        ),
    ]
}

#[test]
fn the_router_decides_what_a_missing_or_lost_handle_became() {
    for (what, pid, asked, says, now, want) in before_dispatch_cases().into_iter().chain(handle_lost_cases()) {
        let got = outcome(on_router_answer(&written_ahead(pid), clock(now), asked, says));
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn after_a_vanished_apply_the_next_dispatch_has_a_new_id() {
    let Recovery::Step(step) = on_router_answer(&written_ahead(7), clock(20), Asked::HandleLost, RouterSays::Vanished)
    else {
        panic!("a vanished apply is a step");
    };
    let next = decide::before_dispatch(&step.status, 4, clock(21), "g4-b");
    assert_eq!(next.apply_id, "g4-b");
    let Recovery::Step(step) = on_router_answer(&written_ahead(7), clock(20), Asked::HandleLost, RouterSays::Unknown)
    else {
        panic!("an unrecorded started apply is a step");
    };
    let next = decide::before_dispatch(&step.status, 4, clock(21), "g4-b");
    assert_eq!(
        next.apply_id, "g4-a",
        "an unrecorded apply is dispatched under its own id"
    );
}

#[test]
fn a_recovered_confirmed_apply_is_not_reported_applied() {
    let Recovery::Step(step) = on_router_answer(
        &written_ahead(0),
        clock(20),
        Asked::BeforeDispatch,
        RouterSays::Finished { code: 0, failure: None },
    ) else {
        panic!("a finished apply is a step");
    };
    let step = *step;
    assert_eq!(step.status.phase, Phase::Applied);
    let plain = without_lost_confirmation(step.clone(), false, clock(20));
    assert_eq!(plain, step, "a plain apply keeps its result");
    let confirmed = without_lost_confirmation(step, true, clock(20));
    assert_eq!(confirmed.status.phase, Phase::Failed);
    assert_eq!(
        applied_reason(&confirmed.status).as_deref(),
        Some(reason::CONFIG_FAILED)
    );
    assert!(
        confirmed.status.message.contains("rolls it back"),
        "{}",
        confirmed.status.message
    );
}

#[test]
fn the_reboot_an_apply_handles_is_written_ahead_so_a_recovered_apply_handles_it() {
    let reboot = Time(at(-30));
    let ahead = decide::handling_reboot(written_ahead(0), Some(&reboot));
    assert_eq!(ahead.last_reboot_handled_time, Some(reboot.clone()));
    let Recovery::Step(step) = on_router_answer(
        &ahead,
        clock(20),
        Asked::BeforeDispatch,
        RouterSays::Finished { code: 0, failure: None },
    ) else {
        panic!("a finished apply is a step");
    };
    assert_eq!(step.status.phase, Phase::Applied);
    assert_eq!(
        decide::dispatch_reason(&step.status, 4, Some(&reboot)),
        None,
        "no second re-apply"
    );
    assert_eq!(
        decide::handling_reboot(written_ahead(0), None).last_reboot_handled_time,
        None
    );
}
