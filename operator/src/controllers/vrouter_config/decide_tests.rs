//! One table per step of spec §7.2.

use super::*;
use crate::runtime::test_clock::at;

/// The apply id the shell offers a dispatch.
const FRESH: &str = "g4-fresh";

const TIMEOUT: Duration = Duration::from_secs(600);

fn clock(secs: i64) -> Clock {
    Clock {
        now: at(secs),
        apply_timeout: TIMEOUT,
    }
}

fn time(secs: i64) -> Time {
    Time(at(secs))
}

fn applied_condition(status: &VRouterConfigStatus) -> (String, String, Option<i64>) {
    let c = conditions::get(&status.conditions, condition::APPLIED).expect("Applied condition");
    (c.status.clone(), c.reason.clone(), c.observed_generation)
}

/// A config whose generation 3 was applied successfully.
fn applied() -> VRouterConfigStatus {
    let mut s = VRouterConfigStatus {
        phase: Phase::Applied,
        observed_generation: 3,
        last_applied_time: Some(time(0)),
        ..Default::default()
    };
    set_applied(&mut s, true, reason::CONFIG_APPLIED, String::new(), at(0));
    s
}

/// A config with generation 4 in flight since t=0 as PID 77.
fn applying() -> VRouterConfigStatus {
    after_dispatch(&applied(), 4, clock(0), 77, None).status
}

// Step 2: the VM is stopped.

#[test]
fn step2_vm_stopped_skips_without_touching_status_and_looks_again_later() {
    let step = on_vm_stopped(&applied(), clock(5));
    assert_eq!(step.status, applied());
    assert_eq!(step.next, Next::RequeueAfter(VM_STOPPED_RETRY));
}

#[test]
fn step2_vm_stopped_mid_apply_still_times_out() {
    let early = on_vm_stopped(&applying(), clock(5));
    assert_eq!(early.next, Next::RequeueAfter(VM_STOPPED_RETRY));
    // The next look comes by the deadline, not a full retry later.
    let within = on_vm_stopped(&applying(), clock(590));
    assert_eq!(within.status.phase, Phase::Applying);
    assert_eq!(within.next, Next::RequeueAfter(Duration::from_secs(11)));
    let past = on_vm_stopped(&applying(), clock(601));
    assert_eq!(past.status.phase, Phase::Failed);
    assert_eq!(past.status.exec_pid, 0);
    assert_eq!(applied_condition(&past.status).1, reason::APPLY_TIMEOUT);
}

#[test]
fn an_unreachable_target_is_noted_and_an_apply_in_flight_still_times_out() {
    let idle = on_target_unavailable(&applied(), clock(5), "VRouterTarget \"r1\" not found");
    assert_eq!(idle.status.phase, Phase::Applied);
    assert_eq!(idle.status.message, "VRouterTarget \"r1\" not found");
    assert_eq!(idle.next, Next::RequeueAfter(TARGET_UNAVAILABLE_RETRY));
    let within = on_target_unavailable(&applying(), clock(590), "Secret gone");
    assert_eq!((within.status.phase, within.status.exec_pid), (Phase::Applying, 77));
    assert_eq!(
        within.next,
        Next::RequeueAfter(Duration::from_secs(11)),
        "looked at again by the deadline"
    );
    let past = on_target_unavailable(&applying(), clock(601), "Secret gone");
    assert_eq!((past.status.phase, past.status.exec_pid), (Phase::Failed, 0));
    assert_eq!(applied_condition(&past.status).1, reason::APPLY_TIMEOUT);
    assert_eq!(past.status.message, "apply did not finish within 600s (Secret gone)");
}

// Step 3: CheckReady failed.

#[test]
fn step3_not_ready_resets_applied_to_pending_with_router_not_ready() {
    let step = on_not_ready(&applied(), clock(5), "vyos-router.service is activating");
    assert_eq!(step.status.phase, Phase::Pending);
    let (status, why, generation) = applied_condition(&step.status);
    assert_eq!(
        (status.as_str(), why.as_str(), generation),
        ("False", reason::ROUTER_NOT_READY, Some(3))
    );
    assert!(step.status.message.contains("vyos-router.service is activating"));
    assert_eq!(step.next, Next::RequeueAfter(NOT_READY_RETRY));
}

#[test]
fn step3_not_ready_leaves_other_phases_untouched() {
    for phase in [Phase::Pending, Phase::Failed] {
        let mut s = applied();
        s.phase = phase;
        let step = on_not_ready(&s, clock(5), "no answer");
        assert_eq!(step.status, s, "{phase:?}");
        assert_eq!(step.next, Next::RequeueAfter(NOT_READY_RETRY));
    }
    let step = on_not_ready(&applying(), clock(5), "no answer");
    assert_eq!(step.status, applying());
}

#[test]
fn step3_not_ready_past_the_apply_timeout_fails_the_apply() {
    let step = on_not_ready(&applying(), clock(601), "no answer");
    assert_eq!(step.status.phase, Phase::Failed);
    assert_eq!(step.status.exec_pid, 0);
    assert_eq!(
        applied_condition(&step.status),
        ("False".into(), reason::APPLY_TIMEOUT.into(), Some(4))
    );
    assert_eq!(step.next, Next::Done);
    assert_eq!(step.event.unwrap().type_, EventType::Warning);
}

#[test]
fn step3_a_pid_without_start_time_is_backfilled_not_failed() {
    let mut s = applying();
    s.exec_started_time = None;
    let step = on_not_ready(&s, clock(10_000), "no answer");
    assert_eq!(step.status.exec_started_time, Some(time(10_000)));
    assert_eq!(step.status.phase, Phase::Applying);
}

// Step 4: an exec is in flight.

#[test]
fn step4_running_within_timeout_polls_adaptively() {
    let early = on_exec_polled(&applying(), clock(0), Poll::Running);
    assert_eq!(early.next, Next::RequeueAfter(FIRST_POLL));
    assert_eq!(early.status, applying(), "no write while running");
    let later = on_exec_polled(&applying(), clock(8), Poll::Running);
    assert_eq!(later.next, Next::RequeueAfter(Duration::from_secs(2)));
    let long = on_exec_polled(&applying(), clock(500), Poll::Running);
    assert_eq!(long.next, Next::RequeueAfter(MAX_POLL));
}

#[test]
fn step4_running_past_timeout_fails_with_apply_timeout_and_no_retry() {
    let step = on_exec_polled(&applying(), clock(601), Poll::Running);
    assert_eq!(step.status.phase, Phase::Failed);
    assert_eq!(step.status.exec_pid, 0);
    assert_eq!(applied_condition(&step.status).1, reason::APPLY_TIMEOUT);
    assert_eq!(step.next, Next::Done);
}

#[test]
fn step4_lost_result_goes_back_to_pending_and_redispatches() {
    let step = on_exec_polled(&applying(), clock(5), Poll::Lost);
    assert_eq!(step.status.phase, Phase::Pending);
    assert_eq!(step.status.exec_pid, 0);
    assert_eq!(step.next, Next::RequeueAfter(REDISPATCH_AFTER));
    assert_eq!(dispatch_reason(&step.status, 4, None), Some(DispatchReason::Pending));
}

#[test]
fn step4_other_error_within_timeout_retries_with_pid_untouched_and_says_why() {
    let step = on_exec_polled(&applying(), clock(5), Poll::Error("connection reset".into()));
    let mut expected = applying();
    expected.message = "could not read the apply's result, retrying: connection reset".into();
    assert_eq!(step.status, expected);
    assert!(matches!(step.next, Next::Retry(ref m) if m.contains("connection reset")));
    // The next poll that answers clears the message again.
    let answered = on_exec_polled(&step.status, clock(10), Poll::Running);
    assert_eq!(answered.status, applying());
}

#[test]
fn step4_other_error_past_timeout_fails_with_apply_timeout_and_the_error() {
    let step = on_exec_polled(&applying(), clock(601), Poll::Error("Invalid parameter 'pid'".into()));
    assert_eq!(step.status.phase, Phase::Failed);
    assert_eq!(applied_condition(&step.status).1, reason::APPLY_TIMEOUT);
    assert_eq!(
        step.status.message,
        "apply did not finish within 600s (its status could not be read: Invalid parameter 'pid')"
    );
    assert_eq!(step.next, Next::Done);
}

#[test]
fn step4_an_apply_that_ended_without_a_result_fails_at_once() {
    for (timed_out, why) in [(true, reason::APPLY_TIMEOUT), (false, reason::CONFIG_FAILED)] {
        let step = on_exec_polled(
            &applying(),
            clock(5),
            Poll::Ended {
                timed_out,
                why: "vrouter-daemon ApplyConfig failed".into(),
            },
        );
        assert_eq!(step.status.phase, Phase::Failed);
        assert_eq!((step.status.exec_pid, &step.status.exec_started_time), (0, &None));
        assert_eq!(applied_condition(&step.status), ("False".into(), why.into(), Some(4)));
        assert_eq!(
            step.status.message,
            "apply ended without a result: vrouter-daemon ApplyConfig failed"
        );
        assert_eq!(step.next, Next::Done);
        assert_eq!(
            dispatch_reason(&step.status, 4, None),
            None,
            "not retried for this generation"
        );
    }
}

#[test]
fn step4_exit_zero_without_marker_is_applied_for_the_dispatched_generation() {
    let step = on_exec_polled(&applying(), clock(2), Poll::Exited { code: 0, failure: None });
    assert_eq!(step.status.phase, Phase::Applied);
    assert_eq!(step.status.exec_pid, 0);
    assert_eq!(step.status.last_applied_time, Some(time(2)));
    assert_eq!(
        applied_condition(&step.status),
        ("True".into(), reason::CONFIG_APPLIED.into(), Some(4))
    );
    assert_eq!(step.next, Next::Done);
    assert_eq!(step.event.unwrap().type_, EventType::Normal);
}

#[test]
fn step4_nonzero_exit_or_failure_marker_is_failed() {
    for (code, failure) in [
        (1, None),
        (0, Some("Set failed".to_string())),
        (2, Some("Commit failed".into())),
    ] {
        let step = on_exec_polled(
            &applying(),
            clock(2),
            Poll::Exited {
                code,
                failure: failure.clone(),
            },
        );
        assert_eq!(step.status.phase, Phase::Failed, "{code} {failure:?}");
        assert_eq!(
            applied_condition(&step.status),
            ("False".into(), reason::CONFIG_FAILED.into(), Some(4))
        );
        assert!(step.status.message.contains(&format!("code {code}")));
        if let Some(f) = failure {
            assert!(step.status.message.contains(&f));
        }
        assert_eq!(
            step.status.last_applied_time,
            Some(time(0)),
            "a failure keeps the last success time"
        );
        assert_eq!(step.next, Next::Done);
    }
}

// Steps 5 and 6: reboot and the generation skip.

#[test]
fn step6_same_generation_applied_or_failed_is_done() {
    assert_eq!(dispatch_reason(&applied(), 3, None), None);
    let mut failed = applied();
    failed.phase = Phase::Failed;
    assert_eq!(dispatch_reason(&failed, 3, None), None, "Failed has no auto-retry");
}

#[test]
fn step6_a_new_generation_dispatches() {
    assert_eq!(
        dispatch_reason(&applied(), 4, None),
        Some(DispatchReason::NewGeneration)
    );
    assert_eq!(
        dispatch_reason(&VRouterConfigStatus::default(), 1, None),
        Some(DispatchReason::NewGeneration)
    );
}

#[test]
fn step6_pending_at_the_same_generation_dispatches() {
    let mut s = applied();
    s.phase = Phase::Pending;
    assert_eq!(dispatch_reason(&s, 3, None), Some(DispatchReason::Pending));
}

#[test]
fn step5_a_reboot_forces_exactly_one_reapply() {
    let reboot = time(100);
    let mut failed = applied();
    failed.phase = Phase::Failed;
    assert_eq!(dispatch_reason(&failed, 3, Some(&reboot)), Some(DispatchReason::Reboot));
    // The forced apply records the reboot it handled...
    let dispatched = after_dispatch(&failed, 3, clock(101), 9, Some(&reboot)).status;
    assert_eq!(dispatched.last_reboot_handled_time, Some(reboot.clone()));
    // ...and even if it fails, the same reboot does not force another.
    let done = on_exec_polled(&dispatched, clock(102), Poll::Exited { code: 1, failure: None }).status;
    assert_eq!(dispatch_reason(&done, 3, Some(&reboot)), None);
    // A newer reboot forces one more.
    assert_eq!(
        dispatch_reason(&done, 3, Some(&time(200))),
        Some(DispatchReason::Reboot)
    );
    // A stamp with a fraction of a second is handled once its second is:
    // the handled time is stored in whole seconds.
    let fractional = Time(reboot.0.checked_add(SignedDuration::from_millis(250)).unwrap());
    assert_eq!(dispatch_reason(&done, 3, Some(&fractional)), None);
}

#[test]
fn step5_the_latest_boot_is_the_later_of_the_targets_reboot_and_the_vm_runs_start() {
    // A config that recorded the boot its last dispatch went to.
    let mut s = applied();
    s.last_reboot_handled_time = Some(time(-100));
    let cases = [
        // (target lastRebootTime, the VM run's start, latest boot)
        (None, None, None),
        (Some(100), None, Some(100)),
        (None, Some(100), Some(100)),
        (None, Some(-50), Some(-50)),
        (Some(100), Some(200), Some(200)),
        (Some(200), Some(100), Some(200)),
        (Some(100), Some(100), Some(100)),
    ];
    for (target, started, want) in cases {
        assert_eq!(
            latest_boot(&s, false, target.map(time).as_ref(), started.map(at)),
            want.map(time),
            "target {target:?}, VM run started {started:?}"
        );
    }
}

#[test]
fn step5_a_new_vm_run_forces_exactly_one_reapply_and_the_same_run_none() {
    // Generation 3 was dispatched to the VMI created at t=50.
    let mut fresh = VRouterConfigStatus::default();
    let first_run = latest_boot(&fresh, false, None, Some(at(50)));
    assert_eq!(first_run, Some(time(50)), "a config never applied counts any run");
    fresh = after_dispatch(&fresh, 3, clock(60), 9, first_run.as_ref()).status;
    assert_eq!(fresh.last_reboot_handled_time, Some(time(50)));
    let done = on_exec_polled(&fresh, clock(61), Poll::Exited { code: 0, failure: None }).status;
    let cases = [
        // (start of the VM run the provider reports now, dispatch?)
        (50, None),                          // the same VMI: any status change of it
        (100, Some(DispatchReason::Reboot)), // a new VMI: the VM restarted
    ];
    for (started, want) in cases {
        let boot = latest_boot(&done, false, None, Some(at(started)));
        assert_eq!(
            dispatch_reason(&done, 3, boot.as_ref()),
            want,
            "run started at {started}"
        );
    }
    // The re-apply for the new run records it: that run forces no more.
    let second_run = latest_boot(&done, false, None, Some(at(100)));
    let again = after_dispatch(&done, 3, clock(110), 10, second_run.as_ref()).status;
    let again = on_exec_polled(&again, clock(111), Poll::Exited { code: 0, failure: None }).status;
    let boot = latest_boot(&again, false, None, Some(at(100)));
    assert_eq!(dispatch_reason(&again, 3, boot.as_ref()), None);
}

#[test]
fn step5_a_vm_run_older_than_a_success_that_recorded_no_boot_is_the_one_it_went_to() {
    // Applied at t=0 with no boot recorded: by the Go operator, which
    // records none for KubeVirt, or before VM runs were recorded.
    let mut s = applied();
    s.last_reboot_handled_time = None;
    let cases = [
        // (the VM run's start, dispatch?)
        (-30, None), // the run the apply went to
        (0, None),   // the same second: not after it
        (30, Some(DispatchReason::Reboot)),
    ];
    for (started, want) in cases {
        let boot = latest_boot(&s, false, None, Some(at(started)));
        assert_eq!(dispatch_reason(&s, 3, boot.as_ref()), want, "run started at {started}");
    }
}

#[test]
fn step5_a_reboot_estimate_before_the_last_success_is_the_boot_it_went_to() {
    // Applied at t=0. The cluster's sync found a reboot from an uptime: an
    // estimate the stored second may place up to a second before the boot.
    for handled in [None, Some(time(-100))] {
        let mut s = applied();
        s.last_reboot_handled_time = handled.clone();
        let cases = [
            // (target lastRebootTime, dispatch?)
            (-30, None), // booted, then applied: found by a later sync
            (-2, None),
            (-1, Some(DispatchReason::Reboot)), // within the estimate's error
            (0, Some(DispatchReason::Reboot)),
            (30, Some(DispatchReason::Reboot)),
        ];
        for (reboot, want) in cases {
            let boot = latest_boot(&s, false, Some(&time(reboot)), None);
            assert_eq!(
                dispatch_reason(&s, 3, boot.as_ref()),
                want,
                "reboot at {reboot}, handled {handled:?}"
            );
        }
    }
    // Never applied: every reboot counts.
    let mut never = applied();
    never.last_applied_time = None;
    let boot = latest_boot(&never, false, Some(&time(-30)), None);
    assert_eq!(dispatch_reason(&never, 3, boot.as_ref()), Some(DispatchReason::Reboot));
    // A confirmed apply's success is the confirm's, which a reboot after
    // the script does not stop: every unhandled reboot counts.
    let s = applied();
    let boot = latest_boot(&s, true, Some(&time(-30)), None);
    assert_eq!(dispatch_reason(&s, 3, boot.as_ref()), Some(DispatchReason::Reboot));
}

#[test]
fn step5_a_guest_booted_shortly_before_its_first_apply_is_applied_once() {
    // Booted at t=0; the first dispatch (t=10) knew no reboot yet.
    let fresh = VRouterConfigStatus::default();
    let dispatched = after_dispatch(&fresh, 1, clock(10), 9, None).status;
    let done = on_exec_polled(&dispatched, clock(11), Poll::Exited { code: 0, failure: None }).status;
    // The cluster's first sync (t=40) reads an uptime of 40 s: lastRebootTime 0.
    let boot = latest_boot(&done, false, Some(&time(0)), None);
    assert_eq!(dispatch_reason(&done, 1, boot.as_ref()), None);
    // A real reboot after the apply is applied once more.
    let boot = latest_boot(&done, false, Some(&time(60)), None);
    assert_eq!(dispatch_reason(&done, 1, boot.as_ref()), Some(DispatchReason::Reboot));
    let again = after_dispatch(&done, 1, clock(70), 10, boot.as_ref()).status;
    let again = on_exec_polled(&again, clock(71), Poll::Exited { code: 0, failure: None }).status;
    let boot = latest_boot(&again, false, Some(&time(60)), None);
    assert_eq!(dispatch_reason(&again, 1, boot.as_ref()), None);
}

// Step 7: dispatch.

#[test]
fn step7_a_dispatch_continues_the_stored_apply_id_only_while_no_handle_came_back() {
    let written_ahead = before_dispatch(&applied(), 4, clock(1), "g4-first");
    let failed_once = on_dispatch_failed(&written_ahead, 4, clock(2), "timed out", false, None).status;
    let mut reapplied = applied();
    reapplied.apply_id = "g3-old".into();
    let mut pending = written_ahead.clone();
    pending.phase = Phase::Pending;
    let mut handle_back = written_ahead.clone();
    handle_back.exec_pid = 9;
    // (stored status, generation dispatched, apply id it runs under)
    let cases = [
        (&written_ahead, 4, "g4-first"),
        (&failed_once, 4, "g4-first"),
        (&written_ahead, 5, FRESH),
        (&reapplied, 3, FRESH),
        (&pending, 4, FRESH),
        (&handle_back, 4, FRESH),
    ];
    for (status, generation, want) in cases {
        let next = before_dispatch(status, generation, clock(3), FRESH);
        assert_eq!(next.apply_id, want, "{status:?} for generation {generation}");
        assert_eq!(continues_stored_apply(status, generation), want != FRESH);
    }
    let dispatched = after_dispatch(&written_ahead, 4, clock(2), 77, None).status;
    assert_eq!(dispatched.apply_id, "g4-first", "the handle joins the id written ahead");
}

#[test]
fn step7_before_dispatch_sets_applied_false_for_the_new_generation() {
    let s = before_dispatch(&applied(), 4, clock(1), FRESH);
    assert_eq!(s.phase, Phase::Applying);
    assert_eq!(
        applied_condition(&s),
        ("False".into(), reason::APPLYING.into(), Some(4))
    );
}

#[test]
fn step7_after_dispatch_records_handle_start_and_generation() {
    let step = after_dispatch(&applied(), 4, clock(1), 77, None);
    assert_eq!(step.status.exec_pid, 77);
    assert_eq!(step.status.exec_started_time, Some(time(1)));
    assert_eq!(step.status.observed_generation, 4);
    assert_eq!(step.next, Next::RequeueAfter(FIRST_POLL));
}

#[test]
fn step7_a_permanent_dispatch_failure_fails_the_generation_a_transient_one_retries() {
    let step = on_dispatch_failed(&applied(), 4, clock(1), "config too large", true, None);
    assert_eq!(step.status.phase, Phase::Failed);
    assert_eq!(step.status.observed_generation, 4, "not retried for this generation");
    assert_eq!(dispatch_reason(&step.status, 4, None), None);
    let step = on_dispatch_failed(&applied(), 4, clock(1), "connection refused", false, None);
    assert_eq!(step.status.phase, Phase::Applying);
    assert_eq!(
        step.status.message,
        "could not start the apply, retrying: connection refused"
    );
    assert!(matches!(step.next, Next::Retry(_)));
}

#[test]
fn step7_a_dispatch_that_keeps_failing_is_given_up_after_the_apply_timeout() {
    // As the controller does it: the status before the dispatch is written,
    // the dispatch fails, and the retry starts from what was written.
    let mut status = applied();
    for t in [1, 100, 300, 601] {
        status = on_dispatch_failed(
            &before_dispatch(&status, 4, clock(t), FRESH),
            4,
            clock(t),
            "guest-exec is disabled",
            false,
            None,
        )
        .status;
        assert_eq!(
            status.exec_started_time,
            Some(time(1)),
            "counted from the first attempt"
        );
        assert_eq!(status.phase, Phase::Applying, "t={t}");
    }
    let step = on_dispatch_failed(
        &before_dispatch(&status, 4, clock(602), FRESH),
        4,
        clock(602),
        "guest-exec is disabled",
        false,
        None,
    );
    assert_eq!(step.status.phase, Phase::Failed);
    assert_eq!(step.next, Next::Done);
    assert_eq!(
        applied_condition(&step.status),
        ("False".into(), reason::APPLY_TIMEOUT.into(), Some(4))
    );
    assert_eq!(
        step.status.message,
        "apply could not be started within 600s: guest-exec is disabled"
    );
    // A stopped VM, a router not ready: nothing is tried meanwhile, so the
    // count starts again when a dispatch can be tried.
    let first = on_dispatch_failed(
        &before_dispatch(&applied(), 4, clock(1), FRESH),
        4,
        clock(1),
        "flake",
        false,
        None,
    )
    .status;
    let paused = [
        on_vm_stopped(&first, clock(100)).status,
        on_not_ready(&first, clock(100), "booting").status,
    ];
    for paused in paused {
        assert_eq!(paused.exec_started_time, None);
        let again = on_dispatch_failed(
            &before_dispatch(&paused, 4, clock(700), FRESH),
            4,
            clock(700),
            "flake",
            false,
            None,
        );
        assert_eq!(
            again.status.phase,
            Phase::Applying,
            "one more failure after the pause is retried"
        );
        assert_eq!(again.status.exec_started_time, Some(time(700)));
    }
    // A new generation starts its own count.
    let next = before_dispatch(&step.status, 5, clock(700), FRESH);
    assert_eq!(next.exec_started_time, Some(time(700)));
    assert_eq!(next.message, "");
}

#[test]
fn poll_interval_is_bounded_both_ways() {
    assert_eq!(poll_interval(SignedDuration::ZERO), FIRST_POLL);
    assert_eq!(poll_interval(SignedDuration::from_secs(-5)), FIRST_POLL);
    assert_eq!(poll_interval(SignedDuration::from_secs(4)), Duration::from_secs(1));
    assert_eq!(poll_interval(SignedDuration::from_secs(3600)), MAX_POLL);
}

#[test]
fn tls_problems_reaching_the_router_have_reasons_of_their_own() {
    use vrouter_providers::{Attempts, ProviderError as E};
    let daemon = |untrusted| E::DaemonTls {
        endpoint: "https://127.0.0.1:9".into(),
        untrusted,
        reason: "x".into(),
    };
    let cases = [
        (daemon(true), reason::CERTIFICATE_NOT_TRUSTED),
        (daemon(false), reason::TLS_HANDSHAKE_FAILED),
        (
            E::CertificateNotTrusted {
                attempts: Attempts(Vec::new()),
            },
            reason::CERTIFICATE_NOT_TRUSTED,
        ),
        (
            E::InvalidTls {
                reason: "no PEM".into(),
            },
            reason::INVALID_TLS_CONFIG,
        ),
        (
            E::InvalidTarget {
                target: "t".into(),
                reason: "r".into(),
            },
            reason::TARGET_UNAVAILABLE,
        ),
    ];
    for (error, want) in cases {
        assert_eq!(problem_reason(&error), want, "{error}");
    }
}
