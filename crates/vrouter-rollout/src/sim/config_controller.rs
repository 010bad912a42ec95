//! A generated VRouterConfig and the §7.2 config controller acting on it:
//! dispatch a new generation, finish or time out the apply, force one
//! re-apply after a reboot.

use std::time::Duration;

use jiff::Timestamp;

use super::Spec;
use super::event::Behavior;
use crate::input::{AppliedCondition, ConditionStatus, ExistingConfig, Phase};

/// A generated config as the simulated API server holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    pub spec: Spec,
    pub generation: i64,
    pub phase: Phase,
    pub applied: Option<AppliedCondition>,
    /// `status.observedGeneration`: the generation last dispatched.
    pub dispatched_generation: i64,
    /// The apply in flight, if any.
    pub exec: Option<Exec>,
    /// When the config controller will next look at a generation (or a
    /// reboot) it has not dispatched yet.
    pub dispatch_due: Option<Timestamp>,
    /// A reboot asked for one more apply of the current generation.
    pub reboot_pending: bool,
}

/// An apply in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exec {
    pub generation: i64,
    pub started: Timestamp,
    pub ends: ExecEnd,
}

/// How the apply in flight will end, if left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecEnd {
    Succeeds(Timestamp),
    Fails(Timestamp),
    Hangs,
}

impl SimConfig {
    /// A config the binding has just created.
    pub(crate) fn created(spec: Spec, now: Timestamp, dispatch_delay: Duration) -> SimConfig {
        SimConfig {
            spec,
            generation: 1,
            phase: Phase::Pending,
            applied: None,
            dispatched_generation: 0,
            exec: None,
            dispatch_due: Some(now + dispatch_delay),
            reboot_pending: false,
        }
    }

    /// The view the binding controller gets of this config.
    pub fn existing(&self) -> ExistingConfig<Spec> {
        ExistingConfig {
            spec: self.spec,
            generation: self.generation,
            phase: self.phase,
            applied: self.applied,
        }
    }

    /// A spec update by the binding: a new generation to dispatch, after the
    /// apply in flight (if any) has ended.
    pub(crate) fn update(&mut self, spec: Spec, now: Timestamp, dispatch_delay: Duration) {
        self.spec = spec;
        self.generation += 1;
        if self.exec.is_none() {
            self.dispatch_due = Some(now + dispatch_delay);
        }
    }

    /// The next moment the config controller has something to do.
    pub(crate) fn next_due(&self, apply_timeout: Duration) -> Option<Timestamp> {
        match self.exec {
            Some(exec) => {
                let timeout = exec.started + apply_timeout;
                Some(match exec.ends {
                    ExecEnd::Succeeds(at) | ExecEnd::Fails(at) => at.min(timeout),
                    ExecEnd::Hangs => timeout,
                })
            }
            None => self.dispatch_due,
        }
    }

    /// Runs the config controller at `now`, which is this config's due time.
    pub(crate) fn act(
        &mut self,
        now: Timestamp,
        behavior: Behavior,
        apply_timeout: Duration,
        dispatch_delay: Duration,
    ) {
        if let Some(exec) = self.exec {
            let outcome = match exec.ends {
                _ if now >= exec.started + apply_timeout => false,
                ExecEnd::Succeeds(at) if now >= at => true,
                ExecEnd::Fails(at) if now >= at => false,
                _ => return,
            };
            self.finish(exec.generation, outcome, now);
            if self.generation != exec.generation || self.reboot_pending {
                self.dispatch_due = Some(now + dispatch_delay);
            }
            return;
        }
        if self.dispatch_due.is_none_or(|due| due > now) {
            return;
        }
        self.dispatch_due = None;
        let pending = self.generation != self.dispatched_generation || self.reboot_pending;
        if !pending || behavior == Behavior::Stopped {
            return;
        }
        self.dispatch(now, behavior);
    }

    fn dispatch(&mut self, now: Timestamp, behavior: Behavior) {
        self.set_applied(ConditionStatus::False, self.generation, now);
        self.phase = Phase::Applying;
        self.dispatched_generation = self.generation;
        self.reboot_pending = false;
        let ends = match behavior {
            Behavior::Succeed { after } => ExecEnd::Succeeds(now + after),
            Behavior::Fail { after } => ExecEnd::Fails(now + after),
            Behavior::Hang | Behavior::Stopped => ExecEnd::Hangs,
        };
        self.exec = Some(Exec {
            generation: self.generation,
            started: now,
            ends,
        });
    }

    fn finish(&mut self, generation: i64, succeeded: bool, now: Timestamp) {
        self.exec = None;
        if succeeded {
            self.phase = Phase::Applied;
            self.set_applied(ConditionStatus::True, generation, now);
        } else {
            self.phase = Phase::Failed;
            self.set_applied(ConditionStatus::False, generation, now);
        }
    }

    /// A router reboot: the in-flight result is lost, a previous Applied is
    /// no longer trusted, and one re-apply is forced.
    pub(crate) fn reboot(&mut self, now: Timestamp, dispatch_delay: Duration) {
        if self.exec.take().is_some() {
            self.phase = Phase::Pending;
        }
        if self.phase == Phase::Applied {
            self.phase = Phase::Pending;
            let generation = self.dispatched_generation;
            self.set_applied(ConditionStatus::False, generation, now);
        }
        self.reboot_pending = true;
        self.dispatch_due = Some(now + dispatch_delay);
    }

    /// The VM started again: the config controller notices pending work.
    pub(crate) fn vm_started(&mut self, now: Timestamp, dispatch_delay: Duration) {
        if self.exec.is_none() && self.dispatch_due.is_none() {
            self.dispatch_due = Some(now + dispatch_delay);
        }
    }

    /// An out-of-band repair of a config that Failed for its current
    /// generation.
    pub(crate) fn recover(&mut self, now: Timestamp) {
        if self.phase == Phase::Failed && self.exec.is_none() && self.dispatched_generation == self.generation {
            self.phase = Phase::Applied;
            self.set_applied(ConditionStatus::True, self.generation, now);
        }
    }

    /// Sets the Applied condition the way Kubernetes does: the transition
    /// time moves only when the status changes.
    fn set_applied(&mut self, status: ConditionStatus, generation: i64, now: Timestamp) {
        let last_transition_time = match self.applied {
            Some(previous) if previous.status == status => previous.last_transition_time,
            _ => now,
        };
        self.applied = Some(AppliedCondition {
            status,
            observed_generation: Some(generation),
            last_transition_time,
        });
    }
}
