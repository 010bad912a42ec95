//! A fleet of simulated routers over virtual time, driven one [`Event`] at a
//! time against [`decide`], with every promise of the rollout
//! checked at each reconcile (see [`Violation`]).
//!
//! It is a test utility, compiled only with the `sim` feature, for this
//! crate's property tests and the operator's own tests. Renders are plain
//! numbers ([`Spec`]); the binding controller's shell (orphan cleanup,
//! stamp, write) and the §7.2 config controller are modelled just far enough
//! to exercise the walk: dispatch after a delay, applies that succeed, fail
//! or hang until the apply timeout, stopped VMs, reboots.
//!
//! ```
//! use std::time::Duration;
//! use vrouter_rollout::sim::{Event, Settings, Sim};
//! use vrouter_rollout::{Decision, Policy};
//!
//! let policy = Policy::FixedInterval { wait_interval: Duration::from_secs(60) };
//! let mut sim = Sim::new(Settings::new("edge", policy), 3).unwrap();
//! let reconciles = sim.settle(100).unwrap();
//! assert_eq!(sim.writes().len(), 3);
//! assert!(matches!(sim.last_decision(), Some(Decision::Completed { .. })));
//! assert!(reconciles <= 7);
//! sim.step(&Event::RerenderAll).unwrap();
//! ```

mod config_controller;
mod event;
mod invariants;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

pub use config_controller::{Exec, ExecEnd, SimConfig};
pub use event::{Behavior, Event};
pub use invariants::Violation;

use crate::decision::Decision;
use crate::error::RolloutError;
use crate::input::{Frontier, Target};
use crate::policy::Policy;
use crate::ready::Ready;
use crate::walk::{Rollout, decide};
use invariants::{Before, Oracle};

/// `seconds` after the simulator's start, 2026-07-16T00:00:00Z: how tests
/// write times.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_784_160_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `seconds` as a duration, as tests write intervals.
pub fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// A render: two targets hold the same config exactly when their specs are
/// equal numbers.
pub type Spec = u64;

/// The fixed parts of a simulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub binding: String,
    pub policy: Policy,
    /// Virtual time at the start.
    pub start: Timestamp,
    /// How long after a write the config controller dispatches the apply.
    pub dispatch_delay: Duration,
    /// The config controller's bound on an apply that never reports back.
    pub apply_timeout: Duration,
    /// How every router's applies end until told otherwise.
    pub behavior: Behavior,
}

impl Settings {
    /// One-second dispatch, five-second applies that succeed, a two-minute
    /// apply timeout, starting at 2026-07-16T00:00:00Z.
    pub fn new(binding: &str, policy: Policy) -> Settings {
        Settings {
            binding: binding.to_owned(),
            policy,
            start: at(0),
            dispatch_delay: Duration::from_secs(1),
            apply_timeout: Duration::from_secs(120),
            behavior: Behavior::Succeed {
                after: Duration::from_secs(5),
            },
        }
    }
}

/// A config write the binding controller performed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub at: Timestamp,
    pub target: String,
    pub spec: Spec,
}

/// Why [`Sim::settle`] gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettleError {
    /// A promise broke on the way.
    Violation(Violation),
    /// The rollout did not complete within the given number of reconciles.
    NotCompleted { reconciles: usize, last: Option<Decision> },
}

impl fmt::Display for SettleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettleError::Violation(violation) => violation.fmt(f),
            SettleError::NotCompleted { reconciles, last } => write!(
                f,
                "the rollout did not complete within {reconciles} reconciles; last decision {last:?}"
            ),
        }
    }
}

impl std::error::Error for SettleError {}

/// A binding, its routers and their configs, in virtual time.
#[derive(Clone, Debug)]
pub struct Sim {
    settings: Settings,
    now: Timestamp,
    /// `spec.targetRefs`, in order.
    targets: Vec<String>,
    /// The current render of every router ever listed.
    desired: BTreeMap<String, Spec>,
    behaviors: BTreeMap<String, Behavior>,
    configs: BTreeMap<String, SimConfig>,
    frontier: Option<Frontier>,
    ready: Option<Ready>,
    last_decision: Option<Decision>,
    requeue_at: Option<Timestamp>,
    writes: Vec<Write>,
    next_spec: Spec,
    next_router: usize,
    steps: u64,
    oracle: Oracle,
}

impl Sim {
    /// A binding over `routers` fresh routers (`router-0`, `router-1`, …),
    /// each with a render and no config yet, and no frontier recorded.
    pub fn new(settings: Settings, routers: usize) -> Result<Sim, RolloutError> {
        if let Policy::FixedInterval { wait_interval } = settings.policy
            && wait_interval.is_zero()
        {
            return Err(RolloutError::ZeroWaitInterval);
        }
        let mut sim = Sim {
            now: settings.start,
            settings,
            targets: Vec::new(),
            desired: BTreeMap::new(),
            behaviors: BTreeMap::new(),
            configs: BTreeMap::new(),
            frontier: None,
            ready: None,
            last_decision: None,
            requeue_at: None,
            writes: Vec::new(),
            next_spec: 1,
            next_router: 0,
            steps: 0,
            oracle: Oracle::default(),
        };
        for _ in 0..routers {
            sim.add_router();
        }
        Ok(sim)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// `spec.targetRefs`, in order.
    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// The current render of a router.
    pub fn desired(&self, target: &str) -> Option<Spec> {
        self.desired.get(target).copied()
    }

    /// The generated config of a router, if it exists.
    pub fn config(&self, target: &str) -> Option<&SimConfig> {
        self.configs.get(target)
    }

    /// `status.rollout`.
    pub fn frontier(&self) -> Option<&Frontier> {
        self.frontier.as_ref()
    }

    /// The binding's Ready condition as last set.
    pub fn ready(&self) -> Option<&Ready> {
        self.ready.as_ref()
    }

    pub fn last_decision(&self) -> Option<&Decision> {
        self.last_decision.as_ref()
    }

    /// Every config write so far, in order.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// How many events have been played.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The walk's input as the binding controller would build it now.
    pub fn rollout_targets(&self) -> Vec<Target<Spec>> {
        self.targets
            .iter()
            .map(|name| Target {
                name: name.clone(),
                desired: self.desired[name],
                existing: self.configs.get(name).map(SimConfig::existing),
            })
            .collect()
    }

    /// Plays one event. A reconcile returns its decision; a broken promise
    /// is an error (and the world is left as it was when it broke).
    pub fn step(&mut self, event: &Event) -> Result<Option<Decision>, Violation> {
        self.steps += 1;
        match event {
            Event::Reconcile => return self.reconcile(false).map(Some),
            Event::CrashAfterStamp => return self.reconcile(true).map(Some),
            Event::FollowRequeue => {
                if let Some(at) = self.requeue_at {
                    self.advance_to(at);
                }
                return self.reconcile(false).map(Some);
            }
            Event::Advance(by) => self.advance_to(self.now + *by),
            Event::Rerender { targets } => {
                for &position in targets {
                    if let Some(name) = self.listed(position) {
                        let spec = self.fresh_spec();
                        self.desired.insert(name, spec);
                    }
                }
            }
            Event::RerenderAll => {
                for name in self.targets.clone() {
                    let spec = self.fresh_spec();
                    self.desired.insert(name, spec);
                }
            }
            Event::RevertRender { target } => {
                if let Some(name) = self.listed(*target)
                    && let Some(config) = self.configs.get(&name)
                {
                    self.desired.insert(name, config.spec);
                }
            }
            Event::SetBehavior { target, behavior } => {
                if let Some(name) = self.listed(*target) {
                    self.behaviors.insert(name.clone(), *behavior);
                    if *behavior != Behavior::Stopped
                        && let Some(config) = self.configs.get_mut(&name)
                    {
                        config.vm_started(self.now, self.settings.dispatch_delay);
                    }
                }
            }
            Event::Reboot { target } => {
                if let Some(name) = self.listed(*target)
                    && let Some(config) = self.configs.get_mut(&name)
                {
                    config.reboot(self.now, self.settings.dispatch_delay);
                }
            }
            Event::RecoverOutOfBand { target } => {
                if let Some(name) = self.listed(*target)
                    && let Some(config) = self.configs.get_mut(&name)
                {
                    config.recover(self.now);
                }
            }
            Event::RemoveTarget { target } => {
                if self.targets.len() > 1
                    && let Some(name) = self.listed(*target)
                {
                    self.targets.retain(|t| *t != name);
                }
            }
            Event::AddTarget => self.add_router(),
        }
        Ok(None)
    }

    /// Follows requeues until the rollout completes, at most `max_reconciles`
    /// times; returns how many reconciles it took.
    pub fn settle(&mut self, max_reconciles: usize) -> Result<usize, SettleError> {
        for reconciles in 1..=max_reconciles {
            let decision = self.step(&Event::FollowRequeue).map_err(SettleError::Violation)?;
            if matches!(decision, Some(Decision::Completed { .. })) {
                return Ok(reconciles);
            }
        }
        Err(SettleError::NotCompleted {
            reconciles: max_reconciles,
            last: self.last_decision.clone(),
        })
    }

    fn listed(&self, position: usize) -> Option<String> {
        if self.targets.is_empty() {
            return None;
        }
        Some(self.targets[position % self.targets.len()].clone())
    }

    fn fresh_spec(&mut self) -> Spec {
        self.next_spec += 1;
        self.next_spec
    }

    fn add_router(&mut self) {
        let name = format!("router-{}", self.next_router);
        self.next_router += 1;
        let spec = self.fresh_spec();
        self.desired.insert(name.clone(), spec);
        self.behaviors.insert(name.clone(), self.settings.behavior);
        self.targets.push(name);
    }

    /// Moves virtual time to `until`, letting every config controller act at
    /// the moments it is due, in time order.
    fn advance_to(&mut self, until: Timestamp) {
        let timeout = self.settings.apply_timeout;
        loop {
            let next = self
                .configs
                .iter()
                .filter_map(|(name, config)| config.next_due(timeout).map(|due| (due, name.clone())))
                .filter(|(due, _)| *due <= until)
                .min();
            let Some((due, name)) = next else { break };
            self.now = self.now.max(due);
            let behavior = self.behaviors[&name];
            let config = self.configs.get_mut(&name).expect("due config exists");
            config.act(self.now, behavior, timeout, self.settings.dispatch_delay);
        }
        self.now = self.now.max(until);
    }

    /// One reconcile of the binding controller: orphan cleanup, the walk,
    /// then the decision carried out (or cut short after the stamp).
    fn reconcile(&mut self, crash_after_stamp: bool) -> Result<Decision, Violation> {
        let targets = &self.targets;
        self.configs.retain(|name, _| targets.contains(name));
        let fleet = self.rollout_targets();
        let rollout = Rollout {
            binding: &self.settings.binding,
            policy: self.settings.policy,
            frontier: self.frontier.as_ref(),
            targets: &fleet,
        };
        let decision = decide(&rollout, self.now).map_err(|error| Violation::Refused {
            at: self.now,
            error: error.to_string(),
        })?;
        let before = Before {
            now: self.now,
            policy: self.settings.policy,
            frontier: self.frontier.as_ref(),
            fleet: self
                .targets
                .iter()
                .map(|name| (name.as_str(), self.desired[name], self.configs.get(name)))
                .collect(),
        };
        self.oracle.check_decision(&before, &decision)?;

        self.ready = Some(decision.ready().clone());
        self.requeue_at = decision.requeue_after().map(|after| self.now + after);
        if let Decision::StampThenWrite { frontier, .. } = &decision {
            self.frontier = Some(frontier.clone());
        }
        if !crash_after_stamp {
            for &index in decision.writes() {
                self.write(&fleet[index].name)?;
            }
        }
        self.last_decision = Some(decision.clone());
        Ok(decision)
    }

    fn write(&mut self, target: &str) -> Result<(), Violation> {
        self.oracle
            .check_write(&self.settings.policy, target, self.frontier.as_ref(), self.now)?;
        let spec = self.desired[target];
        let delay = self.settings.dispatch_delay;
        match self.configs.get_mut(target) {
            Some(config) => config.update(spec, self.now, delay),
            None => {
                self.configs
                    .insert(target.to_owned(), SimConfig::created(spec, self.now, delay));
            }
        }
        self.writes.push(Write {
            at: self.now,
            target: target.to_owned(),
            spec,
        });
        Ok(())
    }
}
