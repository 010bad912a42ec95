//! The rollout's promises over random fleets and event sequences, played on
//! the simulator (`vrouter_rollout::sim`), which checks every promise at
//! every reconcile:
//!
//! - at most one config write per decision in FixedInterval and WaitForApplied;
//! - two writes to different targets never closer than `waitInterval`
//!   (FixedInterval) or `waitAfterApplied` (WaitForApplied), across re-renders
//!   and crashes: the gap never shrinks;
//! - WaitForApplied never writes past an unverified frontier (not Applied for
//!   its current generation and soaked), except the frontier itself or after
//!   an evicted frontier's time gate;
//! - WaitForApplied writes nothing while a config is Failed with its render;
//! - a crash between stamp and write never leaves a write unrecorded;
//! - Ready=True only when the mode's promise holds for the whole fleet;
//! - with every apply succeeding, a rollout of N targets completes within a
//!   bound that grows linearly in N, and ends Ready=True/ReconcileSucceeded.
//!
//! Each test counts the simulated steps it played, prints the count, and
//! fails if it played fewer than it promises (at least 100,000 in total).

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use vrouter_rollout::sim::{Behavior, Event, Settings, Sim, secs};
use vrouter_rollout::{ConditionStatus, Decision, Policy, Reason};

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        (1u64..=30, 0u64..=90).prop_map(|(poll, soak)| Policy::WaitForApplied {
            poll_interval: secs(poll),
            wait_after_applied: secs(soak),
        }),
        (1u64..=120).prop_map(|interval| Policy::FixedInterval {
            wait_interval: secs(interval),
        }),
    ]
}

fn behavior(failures: bool) -> BoxedStrategy<Behavior> {
    any::<u32>().prop_map(move |x| decode_behavior(x, failures)).boxed()
}

fn decode_behavior(x: u32, failures: bool) -> Behavior {
    let after = secs(u64::from(x >> 8) % 41);
    match (failures, x % 8) {
        (true, 4 | 5) => Behavior::Fail { after },
        (true, 6) => Behavior::Hang,
        (true, 7) => Behavior::Stopped,
        _ => Behavior::Succeed { after },
    }
}

/// Events of a busy day, each decoded from one random number so that
/// generating (and shrinking) a long history stays cheap: proptest shrinks
/// the numbers toward zero, which decodes to the plainest event,
/// `FollowRequeue`. `failures` adds failing, hanging and stopped routers and
/// out-of-band repairs; without it every apply succeeds.
fn events(failures: bool, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(any::<u64>(), len)
        .prop_map(move |xs| xs.into_iter().map(|x| decode_event(x, failures)).collect())
}

fn decode_event(x: u64, failures: bool) -> Event {
    let target = ((x >> 8) % 16) as usize;
    let arg = (x >> 16) as u32;
    match x % 100 {
        0..30 => Event::FollowRequeue,
        30..42 => Event::Reconcile,
        42..54 => Event::Advance(secs(u64::from(arg) % 151)),
        54..59 => Event::CrashAfterStamp,
        59..64 => Event::Rerender {
            targets: (0..=arg % 3).map(|i| (target + 5 * i as usize) % 16).collect(),
        },
        64..66 => Event::RerenderAll,
        66..68 => Event::RevertRender { target },
        68..70 => Event::Reboot { target },
        70..72 => Event::RemoveTarget { target },
        72..74 => Event::AddTarget,
        74..78 => Event::SetBehavior {
            target,
            behavior: decode_behavior(arg, failures),
        },
        78..80 if failures => Event::RecoverOutOfBand { target },
        _ => Event::FollowRequeue,
    }
}

fn settings(policy: Policy, behavior: Behavior) -> Settings {
    Settings {
        behavior,
        ..Settings::new("fleet", policy)
    }
}

/// Runs `cases` random cases of `strategy` through `body`, then prints and
/// checks how many simulated steps they played.
fn run_counted<S: Strategy>(
    name: &str,
    cases: u32,
    min_steps: u64,
    strategy: S,
    body: impl Fn(S::Value, &AtomicU64) -> Result<(), TestCaseError>,
) {
    let steps = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(error) = runner.run(&strategy, |value| body(value, &steps)) {
        panic!("{name}: {error}");
    }
    let played = steps.load(Ordering::Relaxed);
    println!("{name}: {cases} cases, {played} simulated steps");
    assert!(
        played >= min_steps,
        "{name} played only {played} simulated steps; it promises at least {min_steps}"
    );
}

/// Every promise checked at every reconcile, while routers fail, hang and
/// stop, targets come and go, renders change and the operator crashes
/// between stamp and write.
#[test]
fn promises_hold_over_random_fleets_and_events() {
    let strategy = (policy(), behavior(true), 1usize..=8, events(true, 150..250));
    run_counted(
        "promises_hold_over_random_fleets_and_events",
        1_000,
        150_000,
        strategy,
        |(policy, behavior, routers, events), steps| {
            let mut sim = Sim::new(settings(policy, behavior), routers).unwrap();
            for event in &events {
                if let Err(violation) = sim.step(event) {
                    return Err(TestCaseError::fail(format!(
                        "{violation}\nafter {} steps; writes so far: {:?}",
                        sim.steps(),
                        sim.writes()
                    )));
                }
            }
            steps.fetch_add(sim.steps(), Ordering::Relaxed);
            Ok(())
        },
    );
}

/// After any history of renders, crashes, reboots, removals and additions
/// in which every apply succeeds, following requeues completes the rollout
/// within a bound linear in the fleet size, and ends Ready=True.
#[test]
fn healthy_rollouts_complete_within_a_bound() {
    let strategy = (policy(), (0u64..=40), 1usize..=10, events(false, 20..120));
    run_counted(
        "healthy_rollouts_complete_within_a_bound",
        1_000,
        50_000,
        strategy,
        |(policy, apply_seconds, routers, chaos), steps| {
            let behavior = Behavior::Succeed {
                after: secs(apply_seconds),
            };
            let mut sim = Sim::new(settings(policy, behavior), routers).unwrap();
            for event in &chaos {
                sim.step(event).map_err(|v| TestCaseError::fail(v.to_string()))?;
            }
            let bound = reconcile_bound(&sim, 40);
            let reconciles = sim
                .settle(bound)
                .map_err(|e| TestCaseError::fail(format!("{e}\nbound {bound}, writes {:?}", sim.writes())))?;
            prop_assert!(reconciles <= bound);
            let ready = sim.ready().unwrap();
            prop_assert_eq!(ready.status, ConditionStatus::True);
            prop_assert_eq!(ready.reason, Reason::ReconcileSucceeded);
            for target in sim.targets() {
                let config = sim.config(target).unwrap();
                prop_assert_eq!(Some(config.spec), sim.desired(target));
                if matches!(policy, Policy::WaitForApplied { .. }) {
                    prop_assert!(config.existing().applied_for_current_generation().is_some());
                }
            }
            steps.fetch_add(sim.steps(), Ordering::Relaxed);
            Ok(())
        },
    );
}

/// The most reconciles a healthy rollout of the current fleet may take.
///
/// Per target: one write, then for WaitForApplied enough polls to see the
/// apply finish (an apply of the previous spec still running, then the
/// dispatch delay and the apply of the new one), plus the soak's single
/// requeue; for FixedInterval the interval's single requeue. One extra
/// target's worth covers the previous render's frontier (or an evicted
/// frontier's time gate) and the completion check, plus a few reconciles of
/// slack.
fn reconcile_bound(sim: &Sim, max_apply_seconds: u64) -> usize {
    let targets = sim.targets().len() + 1;
    let per_target = match sim.settings().policy {
        Policy::WaitForApplied { poll_interval, .. } => {
            let longest = 2 * (sim.settings().dispatch_delay.as_secs() + max_apply_seconds);
            let polls = longest.div_ceil(poll_interval.as_secs().max(1)) as usize;
            polls + 3
        }
        _ => 2,
    };
    targets * per_target + 3
}

/// Disabled mode writes every changed config in the first reconcile, is
/// Ready=True right away, and never stamps a frontier.
#[test]
fn disabled_writes_everything_in_one_reconcile() {
    let strategy = (1usize..=10, events(false, 0..60));
    run_counted(
        "disabled_writes_everything_in_one_reconcile",
        200,
        2_000,
        strategy,
        |(routers, chaos), steps| {
            let mut sim = Sim::new(
                settings(Policy::Disabled, Behavior::Succeed { after: secs(5) }),
                routers,
            )
            .unwrap();
            for event in &chaos {
                sim.step(event).map_err(|v| TestCaseError::fail(v.to_string()))?;
            }
            let decision = sim
                .step(&Event::Reconcile)
                .map_err(|v| TestCaseError::fail(v.to_string()))?;
            let wrote_all = matches!(decision, Some(Decision::WriteAll { .. }));
            prop_assert!(wrote_all, "Disabled decided {:?}", decision);
            for target in sim.targets() {
                prop_assert_eq!(sim.config(target).map(|c| c.spec), sim.desired(target));
            }
            prop_assert!(sim.frontier().is_none());
            prop_assert_eq!(sim.ready().unwrap().status, ConditionStatus::True);
            steps.fetch_add(sim.steps(), Ordering::Relaxed);
            Ok(())
        },
    );
}
