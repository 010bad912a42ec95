//! Table tests for spec §7.1 "Rollout modes", one per paragraph, named after
//! it. Times are seconds after a fixed start; specs are numbers (the render
//! `desired`, next to the `spec` the config holds).

mod common;

use common::*;
use vrouter_rollout::{Decision, Policy};

/// "At any moment, at most one target's VRouterConfig is being written."
#[test]
fn at_most_one_config_written_per_reconcile() {
    let all_new = vec![new_target("a", 1), new_target("b", 2), new_target("c", 3)];
    let rows = vec![
        Row {
            case: "WaitForApplied writes only the first of three new targets",
            policy: wait_for_applied(10, 0),
            frontier: None,
            targets: all_new.clone(),
            now: 0,
            expected: stamp_then_write(&all_new, 0, 0, 10, "1/3 targets updated"),
        },
        Row {
            case: "FixedInterval writes only the first of three new targets",
            policy: fixed_interval(60),
            frontier: None,
            targets: all_new.clone(),
            now: 0,
            expected: stamp_then_write(&all_new, 0, 0, 60, "1/3 targets updated"),
        },
    ];
    for row in &rows {
        let decision = run(row.policy, &row.frontier, &row.targets, row.now).unwrap();
        assert_eq!(decision.writes().len(), 1, "{}", row.case);
    }
    check_table(rows);
}

/// "Disabled (the default) is the zero value … no gating logic runs at all."
#[test]
fn disabled_is_the_default_and_writes_every_changed_config_at_once() {
    assert_eq!(Policy::default(), Policy::Disabled);
    let rows = vec![
        Row {
            case: "every missing or changed config in one decision, matching ones left out",
            policy: Policy::Disabled,
            frontier: None,
            targets: vec![new_target("a", 1), applied("b", 2, 2, 1, 0), applied("c", 3, 30, 1, 0)],
            now: 0,
            expected: Decision::WriteAll {
                targets: vec![0, 2],
                ready: succeeded("all 3 configs written"),
            },
        },
        Row {
            case: "no gate: a fresh frontier and a Failed config change nothing",
            policy: Policy::Disabled,
            frontier: frontier("b", 0),
            targets: vec![
                failed("a", 1, 1, 1, 0),
                applying("b", 2, 2, 1, 0),
                applied("c", 3, 30, 1, 0),
            ],
            now: 1,
            expected: Decision::WriteAll {
                targets: vec![2],
                ready: succeeded("all 3 configs written"),
            },
        },
        Row {
            case: "nothing changed: still ReconcileSucceeded",
            policy: Policy::Disabled,
            frontier: None,
            targets: vec![applied("a", 1, 1, 1, 0)],
            now: 0,
            expected: Decision::WriteAll {
                targets: vec![],
                ready: succeeded("all 1 configs written"),
            },
        },
    ];
    check_table(rows);
}

/// "FixedInterval: pure time-based stagger … Applied/Failed status is
/// ignored entirely."
#[test]
fn fixed_interval_is_a_pure_time_stagger() {
    let fleet = |first: vrouter_rollout::Target<u64>| vec![first, new_target("b", 2)];
    let rows = vec![
        Row {
            case: "waitInterval not over: requeue for the rest of it",
            policy: fixed_interval(60),
            frontier: frontier("a", 0),
            targets: fleet(applied("a", 1, 1, 1, 5)),
            now: 30,
            expected: requeue(30, interval("a", 60), None, "1/2 targets updated"),
        },
        Row {
            case: "waitInterval over: the next target is written",
            policy: fixed_interval(60),
            frontier: frontier("a", 0),
            targets: fleet(applied("a", 1, 1, 1, 5)),
            now: 60,
            expected: stamp_then_write(&fleet(applied("a", 1, 1, 1, 5)), 1, 60, 60, "2/2 targets updated"),
        },
        Row {
            case: "a Failed frontier does not stop the rollout",
            policy: fixed_interval(60),
            frontier: frontier("a", 0),
            targets: fleet(failed("a", 1, 1, 1, 5)),
            now: 60,
            expected: stamp_then_write(&fleet(failed("a", 1, 1, 1, 5)), 1, 60, 60, "2/2 targets updated"),
        },
        Row {
            case: "a frontier never applied does not hold the rollout past the interval",
            policy: fixed_interval(60),
            frontier: frontier("a", 0),
            targets: fleet(pending("a", 1, 1, 1)),
            now: 61,
            expected: stamp_then_write(&fleet(pending("a", 1, 1, 1)), 1, 61, 60, "2/2 targets updated"),
        },
        Row {
            case: "the interval counts from the stamp, not from any Applied transition",
            policy: fixed_interval(60),
            frontier: frontier("a", 0),
            targets: fleet(applied("a", 1, 1, 1, 50)),
            now: 60,
            expected: stamp_then_write(&fleet(applied("a", 1, 1, 1, 50)), 1, 60, 60, "2/2 targets updated"),
        },
    ];
    check_table(rows);
}

/// "WaitForApplied: writes a target, then waits until its generated
/// VRouterConfig reaches Applied for the current generation … polling every
/// pollInterval; once Applied, an additional waitAfterApplied soak (measured
/// from the Applied condition's own lastTransitionTime …)."
#[test]
fn wait_for_applied_polls_for_applied_then_soaks_from_its_transition() {
    let fleet = |first: vrouter_rollout::Target<u64>| vec![first, new_target("b", 2)];
    let polling = requeue(10, not_applied("a"), None, "1/2 targets updated");
    let rows = vec![
        Row {
            case: "apply still running: poll",
            policy: wait_for_applied(10, 60),
            frontier: frontier("a", 0),
            targets: fleet(applying("a", 1, 1, 1, 1)),
            now: 3,
            expected: polling.clone(),
        },
        Row {
            case: "a True left over from the previous generation does not count",
            policy: wait_for_applied(10, 60),
            frontier: frontier("a", 0),
            targets: fleet(stale_applied("a", 1, 1, 2, -500)),
            now: 1000,
            expected: polling.clone(),
        },
        Row {
            case: "Applied at 50 after a slow apply: the soak runs to 110, not to stamp + 60",
            policy: wait_for_applied(10, 60),
            frontier: frontier("a", 0),
            targets: fleet(applied("a", 1, 1, 1, 50)),
            now: 70,
            expected: requeue(40, soaking("a", 110), None, "1/2 targets updated"),
        },
        Row {
            case: "soak over: the next target is written",
            policy: wait_for_applied(10, 60),
            frontier: frontier("a", 0),
            targets: fleet(applied("a", 1, 1, 1, 50)),
            now: 110,
            expected: stamp_then_write(&fleet(applied("a", 1, 1, 1, 50)), 1, 110, 10, "2/2 targets updated"),
        },
        Row {
            case: "zero soak: advance as soon as Applied",
            policy: wait_for_applied(10, 0),
            frontier: frontier("a", 0),
            targets: fleet(applied("a", 1, 1, 1, 7)),
            now: 7,
            expected: stamp_then_write(&fleet(applied("a", 1, 1, 1, 7)), 1, 7, 10, "2/2 targets updated"),
        },
    ];
    check_table(rows);
}

/// "The first target whose desired spec differs from its existing
/// VRouterConfig (or whose VRouterConfig doesn't exist yet) is the first
/// mismatch … stamps the frontier before writing … Ready … RolloutInProgress
/// (message e.g. 2/5 targets updated)."
#[test]
fn serial_walk_first_mismatch_is_stamped_then_written() {
    let changed_second = vec![
        applied("a", 1, 1, 1, 0),
        applied("b", 2, 20, 1, 0),
        applied("c", 3, 30, 1, 0),
        new_target("d", 4),
        applied("e", 5, 50, 1, 0),
    ];
    let missing_fourth = vec![
        applied("a", 1, 1, 1, 0),
        applied("b", 2, 2, 1, 0),
        applied("c", 3, 3, 1, 0),
        new_target("d", 4),
        applied("e", 5, 50, 1, 0),
    ];
    let rows = vec![
        Row {
            case: "a changed spec, in targetRefs order",
            policy: wait_for_applied(10, 0),
            frontier: None,
            targets: changed_second.clone(),
            now: 100,
            expected: stamp_then_write(&changed_second, 1, 100, 10, "2/5 targets updated"),
        },
        Row {
            case: "a config that does not exist yet",
            policy: fixed_interval(30),
            frontier: None,
            targets: missing_fourth.clone(),
            now: 100,
            expected: stamp_then_write(&missing_fourth, 3, 100, 30, "4/5 targets updated"),
        },
    ];
    check_table(rows);
}

/// "A target whose spec already matches and which is not the current
/// frontier is skipped … the walk advances."
#[test]
fn serial_walk_skips_matching_targets_that_are_not_the_frontier() {
    // The frontier "c" is verified; "a" and "b" match and are not waited on
    // even though "b" is still Applying (it completed earlier in the walk as
    // far as the walk knows).
    let fleet = vec![
        applied("a", 1, 1, 1, 0),
        applying("b", 2, 2, 2, 90),
        applied("c", 3, 3, 1, 0),
        new_target("d", 4),
    ];
    check_table(vec![Row {
        case: "matching non-frontier targets never wait",
        policy: wait_for_applied(10, 0),
        frontier: frontier("c", 0),
        targets: fleet.clone(),
        now: 100,
        expected: stamp_then_write(&fleet, 3, 100, 10, "4/4 targets updated"),
    }]);
}

/// "A target whose spec matches and is the current frontier … the walk
/// requeues until the wait has elapsed …, then advances past it."
#[test]
fn serial_walk_waits_on_the_matching_frontier_then_advances() {
    let fleet = vec![applied("a", 1, 1, 1, 0), applied("b", 2, 2, 1, 20), new_target("c", 3)];
    let rows = vec![
        Row {
            case: "WaitForApplied: frontier b soaking until 80",
            policy: wait_for_applied(10, 60),
            frontier: frontier("b", 10),
            targets: fleet.clone(),
            now: 30,
            expected: requeue(50, soaking("b", 80), None, "2/3 targets updated"),
        },
        Row {
            case: "WaitForApplied: past the soak the walk advances to c",
            policy: wait_for_applied(10, 60),
            frontier: frontier("b", 10),
            targets: fleet.clone(),
            now: 80,
            expected: stamp_then_write(&fleet, 2, 80, 10, "3/3 targets updated"),
        },
        Row {
            case: "FixedInterval: frontier b waits until stamp + 60",
            policy: fixed_interval(60),
            frontier: frontier("b", 10),
            targets: fleet.clone(),
            now: 30,
            expected: requeue(40, interval("b", 70), None, "2/3 targets updated"),
        },
    ];
    check_table(rows);
}

/// "If the walk reaches the end with no mismatch and the frontier's wait has
/// elapsed, the rollout is finished for this render: status.rollout is left
/// in place."
#[test]
fn serial_walk_end_completes_and_leaves_the_frontier_in_place() {
    let fleet = vec![applied("a", 1, 1, 1, 0), applied("b", 2, 2, 1, 20)];
    let rows = vec![
        Row {
            case: "last frontier still waiting: not finished yet",
            policy: fixed_interval(60),
            frontier: frontier("b", 10),
            targets: fleet.clone(),
            now: 69,
            expected: requeue(1, interval("b", 70), None, "2/2 targets updated"),
        },
        Row {
            case: "FixedInterval finished",
            policy: fixed_interval(60),
            frontier: frontier("b", 10),
            targets: fleet.clone(),
            now: 70,
            expected: completed("all 2 configs written"),
        },
        Row {
            case: "WaitForApplied finished; a stale frontier far in the past is harmless",
            policy: wait_for_applied(10, 60),
            frontier: frontier("b", -10_000),
            targets: fleet.clone(),
            now: 80,
            expected: completed("all 2 configs Applied"),
        },
    ];
    // Completed carries no new frontier: nothing to write to status.rollout.
    for row in &rows {
        let decision = run(row.policy, &row.frontier, &row.targets, row.now).unwrap();
        assert!(decision.writes().is_empty(), "{}", row.case);
    }
    check_table(rows);
}

/// "Write-ahead stamping is what makes the walk resumable and crash-safe …
/// the walk re-detects the same first mismatch, re-stamps (refreshing the
/// interval's start time), and retries."
#[test]
fn write_ahead_stamping_retries_the_same_target_after_a_crash() {
    // The process stamped "b" at 100 and died before writing it: b's config
    // still holds the old spec.
    let after_crash = vec![applied("a", 1, 1, 1, 0), applied("b", 2, 20, 1, 0), new_target("c", 3)];
    let rows = vec![
        Row {
            case: "FixedInterval: rewritten at once and re-stamped, inside the interval",
            policy: fixed_interval(60),
            frontier: frontier("b", 100),
            targets: after_crash.clone(),
            now: 105,
            expected: stamp_then_write(&after_crash, 1, 105, 60, "2/3 targets updated"),
        },
        Row {
            case: "WaitForApplied: rewritten at once although b is not Applied for the new spec",
            policy: wait_for_applied(10, 60),
            frontier: frontier("b", 100),
            targets: after_crash.clone(),
            now: 101,
            expected: stamp_then_write(&after_crash, 1, 101, 10, "2/3 targets updated"),
        },
    ];
    check_table(rows);
}

/// "Universal write gate: the same wait that gates advancing past the
/// frontier also gates the first write of every render."
#[test]
fn universal_write_gate_holds_the_first_write_of_a_new_render() {
    // A new render changed "a" while the frontier "c" of the previous render
    // is still being waited on.
    let rerendered = |c: vrouter_rollout::Target<u64>| vec![applied("a", 10, 1, 1, 0), applied("b", 2, 2, 1, 0), c];
    let rows = vec![
        Row {
            case: "FixedInterval: the interval since c's stamp holds a",
            policy: fixed_interval(60),
            frontier: frontier("c", 100),
            targets: rerendered(applied("c", 3, 3, 1, 101)),
            now: 130,
            expected: requeue(30, interval("c", 160), Some(0), "0/3 targets updated"),
        },
        Row {
            case: "FixedInterval: once over, a is written",
            policy: fixed_interval(60),
            frontier: frontier("c", 100),
            targets: rerendered(applied("c", 3, 3, 1, 101)),
            now: 160,
            expected: stamp_then_write(
                &rerendered(applied("c", 3, 3, 1, 101)),
                0,
                160,
                60,
                "1/3 targets updated",
            ),
        },
        Row {
            case: "WaitForApplied: c still applying holds a",
            policy: wait_for_applied(10, 30),
            frontier: frontier("c", 100),
            targets: rerendered(applying("c", 3, 3, 1, 101)),
            now: 130,
            expected: requeue(10, not_applied("c"), Some(0), "0/3 targets updated"),
        },
        Row {
            case: "WaitForApplied: c Applied at 120 holds a through its soak",
            policy: wait_for_applied(10, 30),
            frontier: frontier("c", 100),
            targets: rerendered(applied("c", 3, 3, 1, 120)),
            now: 130,
            expected: requeue(20, soaking("c", 150), Some(0), "0/3 targets updated"),
        },
        Row {
            case: "WaitForApplied: c changed too, but its previous write is verified: a goes",
            policy: wait_for_applied(10, 30),
            frontier: frontier("c", 100),
            targets: rerendered(applied("c", 30, 3, 1, 120)),
            now: 150,
            expected: stamp_then_write(
                &rerendered(applied("c", 30, 3, 1, 120)),
                0,
                150,
                10,
                "1/3 targets updated",
            ),
        },
    ];
    check_table(rows);
}

/// The gate's one addition to the letter of §7.1 (see the README): when
/// WaitForApplied's gate waits for the frontier to be Applied but the
/// frontier's own render has changed (or its config is gone), the frontier
/// is rewritten first, since waiting for it in `targetRefs` order could
/// never end.
#[test]
fn universal_write_gate_never_waits_on_a_frontier_whose_own_render_changed() {
    let fix_for_everyone = vec![applied("a", 10, 1, 1, 0), failed("b", 20, 2, 1, 50), new_target("c", 3)];
    let crash_before_create = vec![applied("a", 10, 1, 1, 0), applied("b", 2, 2, 1, 0), new_target("c", 3)];
    let still_applying_its_render = vec![applied("a", 10, 1, 1, 0), applying("b", 2, 2, 1, 50)];
    check_table(vec![
        Row {
            case: "a template fix for every target after b Failed: b first",
            policy: wait_for_applied(10, 60),
            frontier: frontier("b", 40),
            targets: fix_for_everyone.clone(),
            now: 100,
            expected: stamp_then_write(&fix_for_everyone, 1, 100, 10, "2/3 targets updated"),
        },
        Row {
            case: "crash between stamping new target c and creating it, then a re-render: c first",
            policy: wait_for_applied(10, 60),
            frontier: frontier("c", 40),
            targets: crash_before_create.clone(),
            now: 100,
            expected: stamp_then_write(&crash_before_create, 2, 100, 10, "3/3 targets updated"),
        },
        Row {
            case: "a frontier still applying the render it should have is waited for",
            policy: wait_for_applied(10, 60),
            frontier: frontier("b", 40),
            targets: still_applying_its_render,
            now: 100,
            expected: requeue(10, not_applied("b"), Some(0), "0/2 targets updated"),
        },
        Row {
            case: "FixedInterval only ever waits for time: a waits, in order",
            policy: fixed_interval(120),
            frontier: frontier("b", 40),
            targets: fix_for_everyone.clone(),
            now: 100,
            expected: requeue(60, interval("b", 160), Some(0), "0/3 targets updated"),
        },
    ]);
}

/// "First mismatch IS the frontier itself (the render changed while that
/// target was still being waited on) → written immediately, no wait."
#[test]
fn first_mismatch_that_is_the_frontier_is_written_at_once() {
    let fleet = vec![
        applied("a", 1, 1, 1, 0),
        applying("b", 22, 2, 1, 101),
        new_target("c", 3),
    ];
    let rows = vec![
        Row {
            case: "WaitForApplied: b is rewritten while its previous apply runs",
            policy: wait_for_applied(10, 300),
            frontier: frontier("b", 100),
            targets: fleet.clone(),
            now: 102,
            expected: stamp_then_write(&fleet, 1, 102, 10, "2/3 targets updated"),
        },
        Row {
            case: "FixedInterval: b is rewritten inside its interval",
            policy: fixed_interval(600),
            frontier: frontier("b", 100),
            targets: fleet.clone(),
            now: 102,
            expected: stamp_then_write(&fleet, 1, 102, 600, "2/3 targets updated"),
        },
    ];
    check_table(rows);
}

/// "No frontier recorded (status.rollout empty — first rollout ever) → gate
/// passes immediately."
#[test]
fn no_frontier_recorded_passes_the_gate() {
    let fleet = vec![
        applied("a", 1, 1, 1, 0),
        applying("b", 2, 2, 1, 0),
        applied("c", 33, 3, 1, 0),
    ];
    let rows = vec![
        Row {
            case: "WaitForApplied: c is written although b is not Applied",
            policy: wait_for_applied(10, 60),
            frontier: None,
            targets: fleet.clone(),
            now: 1,
            expected: stamp_then_write(&fleet, 2, 1, 10, "3/3 targets updated"),
        },
        Row {
            case: "FixedInterval: no interval to wait out",
            policy: fixed_interval(60),
            frontier: None,
            targets: fleet.clone(),
            now: 1,
            expected: stamp_then_write(&fleet, 2, 1, 60, "3/3 targets updated"),
        },
    ];
    check_table(rows);
}

/// "Frontier evicted from targetRefs … the gate degrades to a pure time
/// gate: wait until lastUpdateTime + waitAfterApplied (WaitForApplied) /
/// + waitInterval (FixedInterval), then pass."
#[test]
fn frontier_evicted_from_target_refs_degrades_to_a_time_gate() {
    // "dead" was the frontier and has been removed; its config may already
    // be gone, and it is never health-checked.
    let fleet = vec![applied("a", 1, 1, 1, 0), applied("b", 22, 2, 1, 0)];
    let rows = vec![
        Row {
            case: "WaitForApplied: waitAfterApplied after the stamp",
            policy: wait_for_applied(10, 60),
            frontier: frontier("dead", 100),
            targets: fleet.clone(),
            now: 110,
            expected: requeue(50, evicted("dead", 160), Some(1), "1/2 targets updated"),
        },
        Row {
            case: "WaitForApplied: then pass",
            policy: wait_for_applied(10, 60),
            frontier: frontier("dead", 100),
            targets: fleet.clone(),
            now: 160,
            expected: stamp_then_write(&fleet, 1, 160, 10, "2/2 targets updated"),
        },
        Row {
            case: "WaitForApplied with no soak: passes at once",
            policy: wait_for_applied(10, 0),
            frontier: frontier("dead", 100),
            targets: fleet.clone(),
            now: 100,
            expected: stamp_then_write(&fleet, 1, 100, 10, "2/2 targets updated"),
        },
        Row {
            case: "FixedInterval: waitInterval after the stamp",
            policy: fixed_interval(90),
            frontier: frontier("dead", 100),
            targets: fleet.clone(),
            now: 150,
            expected: requeue(40, evicted("dead", 190), Some(1), "1/2 targets updated"),
        },
        Row {
            case: "evicted and all matching: nothing to gate, the rollout completes",
            policy: fixed_interval(90),
            frontier: frontier("dead", 100),
            targets: vec![applied("a", 1, 1, 1, 0)],
            now: 101,
            expected: completed("all 1 configs written"),
        },
    ];
    check_table(rows);
}

/// "Re-render mid-rollout needs no explicit restart … the first target whose
/// config differs from the new desired spec becomes the new frontier …
/// while targets already matching the new render are left untouched."
#[test]
fn re_render_mid_rollout_restarts_from_the_first_mismatch() {
    // The old render reached "c" (Applied at 200, soaked); the new render
    // changes "a" and "c" but not "b" or "d".
    let fleet = vec![
        applied("a", 100, 1, 1, 0),
        applied("b", 2, 2, 1, 0),
        applied("c", 300, 3, 1, 200),
        applied("d", 4, 4, 1, 0),
    ];
    let after_a = vec![
        applied("a", 100, 100, 2, 320),
        applied("b", 2, 2, 1, 0),
        applied("c", 300, 3, 1, 200),
        applied("d", 4, 4, 1, 0),
    ];
    let rows = vec![
        Row {
            case: "the walk starts again at the very first target",
            policy: wait_for_applied(10, 60),
            frontier: frontier("c", 190),
            targets: fleet.clone(),
            now: 300,
            expected: stamp_then_write(&fleet, 0, 300, 10, "1/4 targets updated"),
        },
        Row {
            case: "then skips b, which already matches, and moves to c",
            policy: wait_for_applied(10, 60),
            frontier: frontier("a", 300),
            targets: after_a.clone(),
            now: 380,
            expected: stamp_then_write(&after_a, 2, 380, 10, "3/4 targets updated"),
        },
    ];
    check_table(rows);
}

/// "Error handling and halt (WaitForApplied only): if any generated
/// VRouterConfig belonging to the binding is Failed — checked across every
/// desired target, not only the current frontier … No further targets are
/// written … requeues at pollInterval … Ready is set to False,
/// reason=RolloutHalted."
#[test]
fn error_handling_halts_on_any_failed_config() {
    // "site-a" completed earlier and later Failed (a reboot-forced re-apply);
    // the frontier "site-b" is healthy and "site-c" still needs its write.
    let fleet = vec![
        failed("site-a", 1, 1, 1, 400),
        applied("site-b", 2, 2, 1, 100),
        new_target("site-c", 3),
    ];
    let rows = vec![
        Row {
            case: "WaitForApplied halts, naming the failed config",
            policy: wait_for_applied(15, 0),
            frontier: frontier("site-b", 90),
            targets: fleet.clone(),
            now: 500,
            expected: halted_on(0, "mybinding.site-a", 15),
        },
        Row {
            case: "a Failed frontier halts too",
            policy: wait_for_applied(15, 0),
            frontier: frontier("site-b", 90),
            targets: vec![
                applied("site-a", 1, 1, 1, 0),
                failed("site-b", 2, 2, 1, 100),
                new_target("site-c", 3),
            ],
            now: 500,
            expected: halted_on(1, "mybinding.site-b", 15),
        },
        Row {
            case: "FixedInterval does not halt",
            policy: fixed_interval(60),
            frontier: frontier("site-b", 90),
            targets: fleet.clone(),
            now: 500,
            expected: stamp_then_write(&fleet, 2, 500, 60, "3/3 targets updated"),
        },
    ];
    check_table(rows);
}

/// "The halt is not terminal … it clears … the moment either: the failed
/// config recovers to Applied for its current generation …, or a new render
/// changes the failed config's own spec … overwritten immediately, with no
/// wait."
#[test]
fn halt_clears_when_the_failed_config_recovers_or_its_own_spec_changes() {
    let recovered = vec![applied("a", 1, 1, 1, 600), new_target("b", 2)];
    let fixed_render = vec![failed("a", 11, 1, 1, 100), new_target("b", 2)];
    let rows = vec![
        Row {
            case: "recovered to Applied: the next reconcile proceeds (after a's own soak)",
            policy: wait_for_applied(10, 30),
            frontier: frontier("a", 90),
            targets: recovered.clone(),
            now: 630,
            expected: stamp_then_write(&recovered, 1, 630, 10, "2/2 targets updated"),
        },
        Row {
            case: "a new render for the failed frontier: written at once",
            policy: wait_for_applied(10, 30),
            frontier: frontier("a", 90),
            targets: fixed_render.clone(),
            now: 101,
            expected: stamp_then_write(&fixed_render, 0, 101, 10, "1/2 targets updated"),
        },
    ];
    check_table(rows);
}

/// "Precisely not a resume path: a new render that changes only other
/// targets' specs … no target is written, not even the other target whose
/// spec did change."
#[test]
fn halt_does_not_clear_when_only_other_targets_change() {
    let rows = vec![
        Row {
            case: "b's render changed, a is still Failed with its own render",
            policy: wait_for_applied(10, 0),
            frontier: frontier("a", 90),
            targets: vec![failed("a", 1, 1, 1, 100), applied("b", 22, 2, 1, 0)],
            now: 200,
            expected: halted_on(0, "mybinding.a", 10),
        },
        Row {
            case: "the Failed config comes after the changed one in targetRefs",
            policy: wait_for_applied(10, 0),
            frontier: frontier("b", 90),
            targets: vec![applied("a", 11, 1, 1, 0), failed("b", 2, 2, 1, 100)],
            now: 200,
            expected: halted_on(1, "mybinding.b", 10),
        },
    ];
    check_table(rows);
}

/// "Stuck-but-not-Failed targets (e.g. VM stopped …) block the rollout
/// indefinitely via the normal frontier wait."
#[test]
fn stuck_but_not_failed_targets_block_the_rollout() {
    let fleet = vec![pending("a", 1, 1, 1), new_target("b", 2)];
    let blocked = requeue(10, not_applied("a"), None, "1/2 targets updated");
    check_table(vec![
        Row {
            case: "a minute later",
            policy: wait_for_applied(10, 0),
            frontier: frontier("a", 0),
            targets: fleet.clone(),
            now: 60,
            expected: blocked.clone(),
        },
        Row {
            case: "a week later",
            policy: wait_for_applied(10, 0),
            frontier: frontier("a", 0),
            targets: fleet.clone(),
            now: 7 * 24 * 3600,
            expected: blocked,
        },
    ]);
}

/// "Ready as a fleet-level completion gate (WaitForApplied only)" with its
/// table, and "The completion check … additionally verifies every desired
/// target's generated config is Applied for its current generation."
#[test]
fn ready_is_a_fleet_level_completion_gate_for_wait_for_applied() {
    let rows = vec![
        Row {
            case: "frontier c Applied, but a never applied (Pending): not complete",
            policy: wait_for_applied(10, 0),
            frontier: frontier("c", 0),
            targets: vec![
                pending("a", 1, 1, 1),
                applied("b", 2, 2, 1, 0),
                applied("c", 3, 3, 1, 5),
            ],
            now: 100,
            expected: requeue(10, not_all_applied("a"), None, "waiting for all configs Applied"),
        },
        Row {
            case: "b holds a stale True from an older generation: not complete",
            policy: wait_for_applied(10, 0),
            frontier: frontier("c", 0),
            targets: vec![
                applied("a", 1, 1, 1, 0),
                stale_applied("b", 2, 2, 3, 0),
                applied("c", 3, 3, 1, 5),
            ],
            now: 100,
            expected: requeue(10, not_all_applied("b"), None, "waiting for all configs Applied"),
        },
        Row {
            case: "every config Applied for its current generation: Ready=True",
            policy: wait_for_applied(10, 0),
            frontier: frontier("c", 0),
            targets: vec![
                applied("a", 1, 1, 1, 0),
                applied("b", 2, 2, 3, 0),
                applied("c", 3, 3, 1, 5),
            ],
            now: 100,
            expected: completed("all 3 configs Applied"),
        },
    ];
    check_table(rows);
}

/// "This evaluation happens at reconcile time, not continuously — after
/// completion, a router that breaks later only flips Ready back to False
/// once something triggers another reconcile."
#[test]
fn ready_is_evaluated_again_at_every_reconcile() {
    check_table(vec![
        Row {
            case: "completed earlier; b lost its Applied (RouterNotReady) since",
            policy: wait_for_applied(10, 0),
            frontier: frontier("b", 0),
            targets: vec![
                applied("a", 1, 1, 1, 0),
                with_config(
                    "b",
                    2,
                    2,
                    1,
                    vrouter_rollout::Phase::Pending,
                    condition(vrouter_rollout::ConditionStatus::False, 1, 5000),
                ),
            ],
            now: 5001,
            expected: requeue(10, not_applied("b"), None, "2/2 targets updated"),
        },
        Row {
            case: "completed earlier; a (not the frontier) lost its Applied since",
            policy: wait_for_applied(10, 0),
            frontier: frontier("b", 0),
            targets: vec![
                with_config(
                    "a",
                    1,
                    1,
                    1,
                    vrouter_rollout::Phase::Pending,
                    condition(vrouter_rollout::ConditionStatus::False, 1, 5000),
                ),
                applied("b", 2, 2, 1, 5),
            ],
            now: 5001,
            expected: requeue(10, not_all_applied("a"), None, "waiting for all configs Applied"),
        },
    ]);
}

/// "FixedInterval deliberately does not get this property … its Ready=True
/// only means the staggered writes finished."
#[test]
fn fixed_interval_ready_true_only_means_the_writes_finished() {
    check_table(vec![Row {
        case: "Failed and never-applied configs still complete",
        policy: fixed_interval(60),
        frontier: frontier("c", 0),
        targets: vec![
            failed("a", 1, 1, 1, 10),
            pending("b", 2, 2, 1),
            applied("c", 3, 3, 1, 5),
        ],
        now: 60,
        expected: completed("all 3 configs written"),
    }]);
}

/// The Ready condition table: for each mode and rollout state, the status
/// and reason the walk sets.
#[test]
fn ready_condition_table() {
    use vrouter_rollout::ConditionStatus::{False, True};
    use vrouter_rollout::Reason::{ReconcileSucceeded, RolloutHalted, RolloutInProgress};
    let in_flight = vec![applying("a", 1, 1, 1, 0), new_target("b", 2)];
    let done = vec![applied("a", 1, 1, 1, 0), applied("b", 2, 2, 1, 0)];
    let broken = vec![failed("a", 1, 1, 1, 0), new_target("b", 2)];
    let table = [
        (
            "Disabled, configs written",
            Policy::Disabled,
            &in_flight,
            True,
            ReconcileSucceeded,
        ),
        (
            "FixedInterval, in progress",
            fixed_interval(60),
            &in_flight,
            False,
            RolloutInProgress,
        ),
        (
            "FixedInterval, finished",
            fixed_interval(60),
            &done,
            True,
            ReconcileSucceeded,
        ),
        (
            "FixedInterval, Failed config: no health check",
            fixed_interval(60),
            &broken,
            False,
            RolloutInProgress,
        ),
        (
            "WaitForApplied, in progress",
            wait_for_applied(10, 0),
            &in_flight,
            False,
            RolloutInProgress,
        ),
        (
            "WaitForApplied, halted",
            wait_for_applied(10, 0),
            &broken,
            False,
            RolloutHalted,
        ),
        (
            "WaitForApplied, completed",
            wait_for_applied(10, 0),
            &done,
            True,
            ReconcileSucceeded,
        ),
    ];
    for (case, policy, targets, status, reason) in table {
        let decision = run(policy, &frontier("a", 0), targets, 100).unwrap();
        let ready = decision.ready();
        assert_eq!((ready.status, ready.reason), (status, reason), "{case}: {decision:?}");
    }
}
