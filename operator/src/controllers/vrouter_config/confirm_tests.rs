//! One table per stage of a confirmed apply.

use super::*;
use crate::controllers::vrouter_config::decide::{Poll, after_dispatch, on_exec_polled};
use crate::runtime::conditions;
use crate::runtime::config_hash::config_hash;
use crate::runtime::test_clock::at;
use vrouter_api::constants::condition;

const APPLY_TIMEOUT: Duration = Duration::from_secs(300);
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(120);
const PREVIOUS: &str = "sha256:previous";

fn clock(secs: i64) -> Clock {
    Clock {
        now: at(secs),
        apply_timeout: APPLY_TIMEOUT,
    }
}

fn applied_condition(status: &VRouterConfigStatus) -> (String, String, String) {
    let c = conditions::get(&status.conditions, condition::APPLIED).expect("Applied condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// Generation 4 dispatched at t=0 as PID 77, confirmed with a 2-minute timeout.
fn dispatched() -> VRouterConfigStatus {
    let status = after_dispatch(&VRouterConfigStatus::default(), 4, clock(0), 77, None).status;
    begin(status, at(0), CONFIRM_TIMEOUT, PREVIOUS.into())
}

/// The script exited 0 at t=10: the checks are next.
fn committed() -> VRouterConfigStatus {
    let poll = Poll::Exited { code: 0, failure: None };
    after_script(on_exec_polled(&dispatched(), clock(10), poll), clock(10)).status
}

/// A check failed at t=20.
fn refused() -> VRouterConfigStatus {
    on_checked(
        &committed(),
        clock(20),
        Checked::Failed("check `/bin/ping` exited with code 1".into()),
    )
    .status
}

#[test]
fn begin_records_the_previous_config_and_the_earliest_rollback() {
    let c = dispatched().confirmation.unwrap();
    assert_eq!(c.rollback_time, Time(at(120)));
    assert_eq!(c.previous_running_config_hash, PREVIOUS);
    assert!(c.failure.is_empty());
}

#[test]
fn how_the_script_ends_decides_between_checking_and_awaiting_the_rollback() {
    // (poll at t=10, phase, stage at t=11, what the message says)
    let cases: Vec<(Poll, Phase, Stage, &str)> = vec![
        (
            Poll::Exited { code: 0, failure: None },
            Phase::Applying,
            Stage::Check,
            "committed with commit-confirm; checking the router",
        ),
        (
            Poll::Exited { code: 1, failure: None },
            Phase::Applying,
            Stage::AwaitRollback(Duration::from_secs(109)),
            "not confirmed: apply script exited with code 1",
        ),
        (
            Poll::Exited {
                code: 0,
                failure: Some("Set failed".into()),
            },
            Phase::Applying,
            Stage::AwaitRollback(Duration::from_secs(109)),
            "not confirmed: apply script exited with code 0: Set failed",
        ),
        (
            Poll::Lost,
            Phase::Applying,
            Stage::AwaitRollback(Duration::from_secs(109)),
            "not confirmed: the apply's result was lost",
        ),
        (
            Poll::Ended {
                timed_out: false,
                why: "gone".into(),
            },
            Phase::Applying,
            Stage::AwaitRollback(Duration::from_secs(109)),
            "not confirmed: apply ended without a result: gone",
        ),
    ];
    for (poll, phase, want_stage, message) in cases {
        let step = after_script(on_exec_polled(&dispatched(), clock(10), poll.clone()), clock(10));
        assert_eq!(step.status.phase, phase, "{poll:?}");
        assert_eq!(step.status.exec_pid, 0, "{poll:?}");
        assert!(
            step.status.message.starts_with(message),
            "{poll:?}: {}",
            step.status.message
        );
        let (ok, why, _) = applied_condition(&step.status);
        assert_eq!((ok.as_str(), why.as_str()), ("False", reason::CONFIRMING), "{poll:?}");
        assert_eq!(step.event, None, "{poll:?}: no verdict yet");
        let confirmation = step.status.confirmation.as_ref().expect("still confirming");
        assert_eq!(stage(confirmation, at(11)), want_stage, "{poll:?}");
    }
}

#[test]
fn a_running_script_stays_in_flight_and_a_timeout_is_not_confirmed() {
    let running = after_script(on_exec_polled(&dispatched(), clock(1), Poll::Running), clock(1));
    assert_eq!(running.status.exec_pid, 77);
    assert!(running.status.confirmation.unwrap().failure.is_empty());
    let timed_out = after_script(on_exec_polled(&dispatched(), clock(301), Poll::Running), clock(301));
    let c = timed_out.status.confirmation.unwrap();
    assert!(c.failure.starts_with("apply did not finish within"), "{}", c.failure);
}

#[test]
fn stages_follow_the_clock_and_the_failure() {
    let committed = committed().confirmation.unwrap();
    let refused = refused().confirmation.unwrap();
    let cases = [
        (&committed, 20, Stage::Check),
        (&committed, 119, Stage::Check),
        // Too late to confirm: the rollback may already run.
        (&committed, 120, Stage::Verify),
        (&refused, 20, Stage::AwaitRollback(Duration::from_secs(100))),
        (&refused, 120, Stage::Verify),
        (&refused, 500, Stage::Verify),
    ];
    for (confirmation, now, want) in cases {
        assert_eq!(
            stage(confirmation, at(now)),
            want,
            "t={now} failure={:?}",
            confirmation.failure
        );
    }
    assert!(may_confirm(&committed, at(114)));
    assert!(!may_confirm(&committed, at(115)));
}

#[test]
fn checks_that_pass_confirm_and_report_applied() {
    let step = on_checked(&committed(), clock(30), Checked::Confirmed);
    assert_eq!(step.status.phase, Phase::Applied);
    assert_eq!(step.status.confirmation, None);
    assert_eq!(step.status.last_applied_time, Some(Time(at(30))));
    assert_eq!(applied_condition(&step.status).0, "True");
    assert_eq!(step.next, Next::Done);
    assert_eq!(step.event.unwrap().reason, reason::CONFIG_APPLIED);
}

#[test]
fn a_failed_check_waits_for_the_rollback_without_a_verdict() {
    let step = on_checked(
        &committed(),
        clock(20),
        Checked::Failed("check exited with code 1".into()),
    );
    assert_eq!(step.status.phase, Phase::Applying);
    assert_eq!(step.next, Next::RequeueAfter(Duration::from_secs(100)));
    assert_eq!(step.status.confirmation.unwrap().failure, "check exited with code 1");
    assert_eq!(step.event, None);
}

/// (status, now, read, phase, reason or None while waiting, text in the message)
type RollbackCase = (
    VRouterConfigStatus,
    i64,
    Result<String, String>,
    Phase,
    Option<&'static str>,
    &'static str,
);

#[test]
fn the_rollback_read_decides_rolled_back_or_rollback_failed() {
    let previous = Ok(PREVIOUS.to_owned());
    let other = Ok("sha256:new".to_owned());
    let silent = Err("guest agent did not answer".to_owned());
    let cases: Vec<RollbackCase> = vec![
        (
            refused(),
            121,
            previous.clone(),
            Phase::Failed,
            Some(reason::ROLLED_BACK),
            "not confirmed: check `/bin/ping` exited with code 1; the router rolled back",
        ),
        (
            refused(),
            121,
            other.clone(),
            Phase::Applying,
            None,
            "not the previous one yet",
        ),
        (
            refused(),
            150,
            silent.clone(),
            Phase::Applying,
            None,
            "cannot be read yet: guest agent",
        ),
        (
            refused(),
            420,
            other,
            Phase::Failed,
            Some(reason::ROLLBACK_FAILED),
            "the previous running config is not back 300s after the rollback was due (it is still another one)",
        ),
        (
            refused(),
            420,
            silent,
            Phase::Failed,
            Some(reason::ROLLBACK_FAILED),
            "(it cannot be read: guest agent did not answer)",
        ),
        // Checks that never ended in time: silence is a failure too.
        (
            committed(),
            121,
            previous,
            Phase::Failed,
            Some(reason::ROLLED_BACK),
            "not confirmed: the operator did not confirm before the rollback time",
        ),
    ];
    for case in cases {
        assert_rollback_read(case);
    }
}

/// One row of the rollback-read table: the phase and message it leads to,
/// and with a verdict, everything that verdict sets.
fn assert_rollback_read((status, now, read, phase, want_reason, text): RollbackCase) {
    let step = on_rollback_read(&status, clock(now), read.clone());
    assert_eq!(step.status.phase, phase, "t={now} {read:?}");
    assert!(
        step.status.message.contains(text),
        "t={now} {read:?}: {}",
        step.status.message
    );
    match want_reason {
        Some(why) => {
            assert_eq!(step.status.confirmation, None);
            assert_eq!(step.next, Next::Done);
            let (ok, got, message) = applied_condition(&step.status);
            assert_eq!((ok.as_str(), got.as_str()), ("False", why));
            assert_eq!(message, step.status.message);
            let event = step.event.expect("a warning event");
            assert_eq!((event.type_, event.reason), (EventType::Warning, why));
            // Its own rollback (a reboot on VyOS 1.3/1.4) is no reason to apply again.
            assert_eq!(step.status.last_reboot_handled_time, Some(Time(at(now))));
        }
        None => {
            assert!(step.status.confirmation.is_some());
            assert_eq!(step.next, Next::RequeueAfter(VERIFY_POLL));
            assert_eq!(step.event, None);
        }
    }
}

#[test]
fn a_rolled_back_config_is_failed_for_its_generation_so_it_is_not_dispatched_again() {
    let step = on_rollback_read(&refused(), clock(121), Ok(PREVIOUS.into()));
    assert_eq!(step.status.observed_generation, 4);
    assert_eq!(
        crate::controllers::vrouter_config::decide::dispatch_reason(&step.status, 4, Some(&Time(at(100)))),
        None,
        "a reboot before the verdict is the rollback's own"
    );
}

#[test]
fn hashes_are_written_as_drift_detection_writes_them() {
    assert_eq!(
        config_hash(b""),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}
