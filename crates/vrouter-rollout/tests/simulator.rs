//! Stories told on the simulator, step by step: each one is a §7.1
//! situation played end to end over virtual time, with the promises checked
//! at every reconcile by the simulator itself.

use vrouter_rollout::sim::{Behavior, Event, Settings, Sim};
use vrouter_rollout::{ConditionStatus, Decision, Policy, Reason, Wait};

mod common;

use common::{secs, wait_for_applied};

fn write_times(sim: &Sim) -> Vec<(String, i64)> {
    let start = sim.settings().start.as_second();
    sim.writes()
        .iter()
        .map(|w| (w.target.clone(), w.at.as_second() - start))
        .collect()
}

#[test]
fn wait_for_applied_rollout_of_three_routers() {
    // Applies take 5 s after a 1 s dispatch delay; poll every 10 s, soak 30 s.
    let mut sim = Sim::new(Settings::new("edge", wait_for_applied(10, 30)), 3).unwrap();
    let reconciles = sim.settle(50).unwrap();
    // Each router: written, Applied at +6 s (seen at the +10 s poll), soaked
    // until +36 s, then the next one is written.
    assert_eq!(
        write_times(&sim),
        vec![("router-0".into(), 0), ("router-1".into(), 36), ("router-2".into(), 72)]
    );
    // Per router: the write, the poll that sees Applied and requeues for
    // the rest of the soak; then the final reconcile completes.
    assert_eq!(reconciles, 7);
    let ready = sim.ready().unwrap();
    assert_eq!(
        (ready.status, ready.reason),
        (ConditionStatus::True, Reason::ReconcileSucceeded)
    );
}

#[test]
fn fixed_interval_rollout_ignores_failures() {
    let mut settings = Settings::new(
        "edge",
        Policy::FixedInterval {
            wait_interval: secs(60),
        },
    );
    settings.behavior = Behavior::Fail { after: secs(1) };
    let mut sim = Sim::new(settings, 3).unwrap();
    sim.settle(10).unwrap();
    assert_eq!(
        write_times(&sim),
        vec![
            ("router-0".into(), 0),
            ("router-1".into(), 60),
            ("router-2".into(), 120)
        ]
    );
    assert_eq!(sim.ready().unwrap().status, ConditionStatus::True);
}

#[test]
fn crash_between_stamp_and_write_is_retried_with_a_fresh_stamp() {
    let policy = Policy::FixedInterval {
        wait_interval: secs(60),
    };
    let mut sim = Sim::new(Settings::new("edge", policy), 2).unwrap();
    sim.step(&Event::Reconcile).unwrap(); // router-0 at 0
    sim.step(&Event::Advance(secs(60))).unwrap();
    sim.step(&Event::CrashAfterStamp).unwrap(); // router-1 stamped at 60, not written
    assert_eq!(sim.frontier().unwrap().target, "router-1");
    assert!(sim.config("router-1").is_none());
    sim.step(&Event::Advance(secs(5))).unwrap();
    sim.step(&Event::Reconcile).unwrap(); // retried at once, stamped 65
    assert_eq!(write_times(&sim), vec![("router-0".into(), 0), ("router-1".into(), 65)]);
    assert_eq!(sim.frontier().unwrap().stamped_at, sim.now());
    // The rollout is finished only waitInterval after the retried stamp.
    let decision = sim
        .step(&Event::Advance(secs(59)))
        .and_then(|_| sim.step(&Event::Reconcile));
    assert!(matches!(decision, Ok(Some(Decision::Requeue { .. }))));
    sim.settle(2).unwrap();
}

#[test]
fn a_hung_apply_times_out_and_halts_until_the_router_is_fixed() {
    let mut settings = Settings::new("edge", wait_for_applied(10, 0));
    settings.apply_timeout = secs(120);
    let mut sim = Sim::new(settings, 3).unwrap();
    sim.step(&Event::SetBehavior {
        target: 1,
        behavior: Behavior::Hang,
    })
    .unwrap();
    let err = sim.settle(40).unwrap_err();
    // router-1's apply hung; after the apply timeout it is Failed and the
    // walk halts, polling, with router-2 never written.
    match sim.last_decision() {
        Some(Decision::Halted { config, ready, .. }) => {
            assert_eq!(config, "edge.router-1");
            assert_eq!(ready.message, r#"VRouterConfig "edge.router-1" is Failed"#);
        }
        other => panic!("expected a halt, got {other:?} ({err})"),
    }
    assert!(sim.config("router-2").is_none());
    // A fixed render for router-1 (its own spec changes) resumes at once.
    sim.step(&Event::SetBehavior {
        target: 1,
        behavior: Behavior::Succeed { after: secs(2) },
    })
    .unwrap();
    sim.step(&Event::Rerender { targets: vec![1] }).unwrap();
    let resumed = sim.step(&Event::Reconcile).unwrap();
    assert!(matches!(resumed, Some(Decision::StampThenWrite { target: 1, .. })));
    sim.settle(20).unwrap();
    assert_eq!(sim.writes().len(), 4);
}

#[test]
fn a_stopped_router_blocks_the_rollout_until_it_is_removed() {
    let mut sim = Sim::new(Settings::new("edge", wait_for_applied(10, 30)), 3).unwrap();
    sim.step(&Event::SetBehavior {
        target: 0,
        behavior: Behavior::Stopped,
    })
    .unwrap();
    assert!(sim.settle(100).is_err());
    assert!(matches!(
        sim.last_decision(),
        Some(Decision::Requeue {
            wait: Wait::NotApplied { .. },
            ..
        })
    ));
    assert_eq!(sim.writes().len(), 1);
    // The user evicts the dead router: only the time gate since its stamp
    // (waitAfterApplied) is left, which has long passed.
    sim.step(&Event::RemoveTarget { target: 0 }).unwrap();
    let next = sim.step(&Event::Reconcile).unwrap();
    assert!(matches!(next, Some(Decision::StampThenWrite { target: 0, .. })));
    assert!(
        sim.config("router-0").is_none(),
        "orphan cleanup removed the evicted config"
    );
    sim.settle(30).unwrap();
    assert_eq!(sim.writes().len(), 3);
}

#[test]
fn a_target_removed_right_after_its_write_still_holds_the_gap() {
    let policy = Policy::FixedInterval {
        wait_interval: secs(60),
    };
    let mut sim = Sim::new(Settings::new("edge", policy), 3).unwrap();
    sim.step(&Event::Reconcile).unwrap(); // router-0 at 0
    sim.step(&Event::Advance(secs(60))).unwrap();
    sim.step(&Event::Reconcile).unwrap(); // router-1 at 60
    sim.step(&Event::RemoveTarget { target: 1 }).unwrap();
    sim.step(&Event::Advance(secs(10))).unwrap();
    let held = sim.step(&Event::Reconcile).unwrap();
    assert!(matches!(
        held,
        Some(Decision::Requeue { wait: Wait::EvictedFrontier { .. }, after, .. }) if after == secs(50)
    ));
    sim.settle(5).unwrap();
    assert_eq!(
        write_times(&sim),
        vec![
            ("router-0".into(), 0),
            ("router-1".into(), 60),
            ("router-2".into(), 120)
        ]
    );
}
