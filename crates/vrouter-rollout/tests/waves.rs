//! The wave walk's promises over random fleets and histories. A small model
//! plays the binding controller (it stores the progress and writes what the
//! walk asks) and the routers (an apply finishes Applied, or Failed on a
//! broken router) over virtual time, and checks at every step:
//!
//! - every write of a decision lies in one wave of the plan, and after it no
//!   router outside that wave is still applying, and no more are applying
//!   than the wave holds;
//! - a wave is dispatched only when every earlier wave is done (all its
//!   configs hold their render and finished) with its Failed configs within
//!   `maxFailures`: nothing new after a halt;
//! - a wave after the one dispatched last starts only when the pause after
//!   that one is over (its last finish plus `pause`) and, with
//!   `untilResumed`, after the walk reported the hold and the resume token
//!   changed since: nothing new during a pause;
//! - after a resume the walk dispatches the next wave that needs writes,
//!   never an earlier one: it continues where it stopped;
//! - a target is written at most once per render (a generation), and once
//!   every broken router is fixed and every hold resumed, the rollout
//!   completes with every target holding its render.
//!
//! The test counts the steps it played and fails below 100,000.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use vrouter_rollout::sim::at;
use vrouter_rollout::waves::{
    Size, WaveDecision, WavePolicy, WaveProgress, WaveRollout, WaveState, decide_waves, plan,
};
use vrouter_rollout::{AppliedCondition, ConditionStatus, ExistingConfig, Phase, Target};

/// One router and its config as the model keeps them.
#[derive(Clone, Debug)]
struct Router {
    /// The render the binding wants (a version number).
    desired: u32,
    existing: Option<ExistingConfig<u32>>,
    broken: bool,
    /// How many times each render was written.
    writes: std::collections::BTreeMap<u32, u32>,
    /// When its last apply finished.
    finished_at: Option<i64>,
}

struct Model {
    policy: WavePolicy,
    routers: Vec<Router>,
    progress: Option<WaveProgress>,
    resume: u32,
    now: i64,
    /// The hold the walk reported: (wave, token when first reported).
    hold_seen: Option<(usize, u32)>,
    last_dispatched: Option<usize>,
}

fn size(x: u32, percent: bool) -> Size {
    if percent {
        Size::Percent(1 + x % 100)
    } else {
        Size::Count(1 + x % 6)
    }
}

fn policy(x: u64) -> WavePolicy {
    let b = x as u32;
    WavePolicy {
        batch: size(b, b & 0x100 != 0),
        canary: (b & 0x200 != 0).then(|| size(b >> 10, b & 0x400 != 0)),
        pause: Duration::from_secs((x >> 16) % 3 * 20),
        until_resumed: x & (1 << 20) != 0,
        max_failures: if x & (1 << 21) != 0 {
            Size::Percent(((x >> 22) % 60) as u32)
        } else {
            Size::Count(((x >> 22) % 2) as u32)
        },
        poll_interval: Duration::from_secs(5),
    }
}

impl Model {
    fn new(policy: WavePolicy, fleet: usize, broken: &[bool]) -> Model {
        let routers = (0..fleet)
            .map(|i| Router {
                desired: 1,
                existing: None,
                broken: broken[i % broken.len()],
                writes: Default::default(),
                finished_at: None,
            })
            .collect();
        Model {
            policy,
            routers,
            progress: None,
            resume: 0,
            now: 0,
            hold_seen: None,
            last_dispatched: None,
        }
    }

    fn targets(&self) -> Vec<Target<u32>> {
        self.routers
            .iter()
            .enumerate()
            .map(|(i, r)| Target {
                name: format!("r{i}"),
                desired: r.desired,
                existing: r.existing.clone(),
            })
            .collect()
    }

    fn busy(r: &Router) -> bool {
        r.existing
            .as_ref()
            .is_some_and(|c| c.phase != Phase::Failed && c.applied_for_current_generation().is_none())
    }

    fn done(r: &Router) -> bool {
        r.existing.as_ref().is_some_and(|c| c.spec == r.desired) && !Self::busy(r)
    }

    fn needs_write(r: &Router) -> bool {
        r.existing.as_ref().is_none_or(|c| c.spec != r.desired)
    }

    fn failed(r: &Router) -> bool {
        r.existing
            .as_ref()
            .is_some_and(|c| c.spec == r.desired && c.phase == Phase::Failed)
    }

    /// One reconcile: decide, check the decision, carry it out.
    fn reconcile(&mut self) -> Result<WaveDecision, TestCaseError> {
        let targets = self.targets();
        let resume = self.resume.to_string();
        let rollout = WaveRollout {
            policy: &self.policy,
            progress: self.progress.as_ref(),
            resume: &resume,
            targets: &targets,
        };
        let decision = decide_waves(&rollout, at(self.now)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.check(&decision)?;
        if let WaveState::PausedUntilResumed { wave, .. } = decision.state {
            self.hold_seen.get_or_insert((wave - 1, self.resume));
        }
        self.progress = decision.progress.clone();
        if self.progress.is_none() {
            // Complete: the next render is a new rollout.
            self.last_dispatched = None;
            self.hold_seen = None;
        }
        for &i in &decision.writes {
            let r = &mut self.routers[i];
            let generation = r.existing.as_ref().map_or(1, |c| c.generation + 1);
            let applied = r.existing.as_ref().and_then(|c| c.applied);
            r.existing = Some(ExistingConfig {
                spec: r.desired,
                generation,
                phase: Phase::Pending,
                applied,
            });
            *r.writes.entry(r.desired).or_default() += 1;
            prop_assert!(r.writes[&r.desired] == 1, "r{i} written twice for render {}", r.desired);
        }
        self.check_in_flight(&decision)?;
        Ok(decision)
    }

    fn check(&mut self, decision: &WaveDecision) -> Result<(), TestCaseError> {
        if decision.writes.is_empty() {
            return Ok(());
        }
        let waves = plan(&self.policy, self.routers.len());
        let w = waves.iter().position(|r| r.contains(&decision.writes[0])).unwrap();
        prop_assert!(
            decision.writes.iter().all(|i| waves[w].contains(i)),
            "writes span waves: {decision:?}"
        );
        let dispatching = matches!(decision.state, WaveState::Dispatching { wave, .. } if wave == w + 1);
        prop_assert!(dispatching, "{:?}", decision.state);
        for earlier in &waves[..w] {
            let rs = &self.routers[earlier.clone()];
            prop_assert!(
                rs.iter().all(Self::done),
                "wave {} dispatched before an earlier one was done",
                w + 1
            );
            let failed = rs.iter().filter(|r| Self::failed(r)).count();
            prop_assert!(
                failed <= self.policy.max_failures.tolerated(earlier.len()),
                "dispatched past a halt"
            );
        }
        if let Some(last) = self.last_dispatched.filter(|&last| last < w) {
            let finished = self.routers[waves[last].clone()]
                .iter()
                .filter_map(|r| r.finished_at)
                .max();
            if let Some(finished) = finished {
                prop_assert!(
                    self.now >= finished + self.policy.pause.as_secs() as i64,
                    "dispatched during a pause"
                );
            }
            if self.policy.until_resumed {
                let hold = self.hold_seen.filter(|(wave, _)| *wave == last);
                prop_assert!(
                    hold.is_some_and(|(_, token)| token != self.resume),
                    "dispatched without a resume"
                );
                let next =
                    (last + 1..waves.len()).find(|&n| self.routers[waves[n].clone()].iter().any(Self::needs_write));
                prop_assert_eq!(Some(w), next, "the resume did not continue where it stopped");
            }
        }
        self.last_dispatched = Some(w);
        self.hold_seen = None;
        Ok(())
    }

    fn check_in_flight(&self, decision: &WaveDecision) -> Result<(), TestCaseError> {
        let waves = plan(&self.policy, self.routers.len());
        let busy: Vec<usize> = (0..self.routers.len())
            .filter(|&i| Self::busy(&self.routers[i]))
            .collect();
        let Some(&first) = busy.first() else { return Ok(()) };
        let wave = waves.iter().find(|r| r.contains(&first)).unwrap();
        prop_assert!(
            busy.iter().all(|i| wave.contains(i)),
            "routers of two waves in flight: {busy:?} ({decision:?})"
        );
        prop_assert!(busy.len() <= wave.len());
        if !decision.writes.is_empty() {
            prop_assert!(decision.writes.iter().all(|i| wave.contains(i)));
        }
        Ok(())
    }

    /// One event of the world between reconciles, decoded from `x`.
    fn event(&mut self, x: u64, repairs: bool) {
        let n = self.routers.len();
        let i = (x >> 8) as usize % n;
        match x % 8 {
            0..=2 => self.finish(i),
            3 => self.now += ((x >> 16) % 40) as i64,
            4 => self.resume += 1,
            5 if repairs => self.repair(i),
            6 if repairs && x & (1 << 40) != 0 => self.routers[i].desired += 1,
            _ => (0..n).for_each(|i| self.finish(i)),
        }
    }

    fn finish(&mut self, i: usize) {
        if !Self::busy(&self.routers[i]) {
            return;
        }
        let now = self.now;
        let r = &mut self.routers[i];
        let c = r.existing.as_mut().unwrap();
        let ok = !r.broken;
        c.phase = if ok { Phase::Applied } else { Phase::Failed };
        c.applied = Some(AppliedCondition {
            status: if ok {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            observed_generation: Some(c.generation),
            last_transition_time: at(now),
        });
        r.finished_at = Some(now);
    }

    /// A person fixes a broken router by changing its render.
    fn repair(&mut self, i: usize) {
        let r = &mut self.routers[i];
        if r.broken {
            r.broken = false;
            r.desired += 1;
        }
    }
}

static STEPS: AtomicU64 = AtomicU64::new(0);

fn play(policy_bits: u64, fleet: usize, broken: Vec<bool>, events: Vec<u64>) -> Result<(), TestCaseError> {
    let mut model = Model::new(policy(policy_bits), fleet, &broken);
    for x in events {
        model.reconcile()?;
        model.event(x, true);
        STEPS.fetch_add(1, Ordering::Relaxed);
    }
    // Every router fixed, every hold resumed, time passing: it must end.
    for i in 0..fleet {
        model.repair(i);
    }
    for _ in 0..(4 * fleet + 20) {
        let decision = model.reconcile()?;
        STEPS.fetch_add(1, Ordering::Relaxed);
        if let WaveState::Completed { failed, .. } = decision.state {
            prop_assert_eq!(failed, 0);
            prop_assert!(decision.progress.is_none());
            for (i, r) in model.routers.iter().enumerate() {
                prop_assert!(Model::done(r), "r{i} not reached");
                prop_assert_eq!(
                    r.writes.get(&r.desired).copied(),
                    Some(1),
                    "r{} written once for its render",
                    i
                );
            }
            return Ok(());
        }
        prop_assert!(
            !matches!(decision.state, WaveState::Halted { .. }),
            "halted with no broken router"
        );
        (0..fleet).for_each(|i| model.finish(i));
        model.now += 60;
        model.resume += 1;
    }
    Err(TestCaseError::fail(format!("no end: {:?}", model.progress)))
}

#[test]
fn waves_keep_their_promises_over_random_histories() {
    let mut runner = TestRunner::new(Config {
        cases: 700,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        any::<u64>(),
        1usize..=40,
        prop::collection::vec(prop::bool::weighted(0.15), 1..8),
        prop::collection::vec(any::<u64>(), 100..200),
    );
    runner
        .run(&strategy, |(p, fleet, broken, events)| play(p, fleet, broken, events))
        .unwrap();
    let steps = STEPS.load(Ordering::Relaxed);
    println!("{steps} steps played");
    assert!(steps >= 100_000, "only {steps} steps played");
}
