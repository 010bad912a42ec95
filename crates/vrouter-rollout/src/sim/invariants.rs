//! The rollout's promises, checked against the simulated world at every
//! reconcile. Each check restates a promise of §7.1 from the world's state;
//! none of them calls into the walk.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use super::Spec;
use super::config_controller::SimConfig;
use crate::decision::Decision;
use crate::input::{ConditionStatus, Frontier, Phase};
use crate::policy::Policy;
use crate::ready::Reason;

/// A broken promise, with what the simulator saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// `decide` refused a well-formed world.
    Refused { at: Timestamp, error: String },
    /// A serial mode wrote more than one config in one decision.
    SeveralWrites { at: Timestamp, count: usize },
    /// Two writes to different targets closer than the mode's gap.
    WriteTooSoon {
        at: Timestamp,
        target: String,
        previous_target: String,
        previous_at: Timestamp,
        min_gap: Duration,
    },
    /// WaitForApplied wrote past a frontier that was not verified.
    FrontierUnverified {
        at: Timestamp,
        target: String,
        frontier: Frontier,
    },
    /// WaitForApplied wrote while a config was Failed with the spec the
    /// render wants.
    WriteWhileFailed {
        at: Timestamp,
        target: String,
        failed: String,
    },
    /// A config was written without `status.rollout` naming it, stamped now.
    UnrecordedWrite {
        at: Timestamp,
        target: String,
        frontier: Option<Frontier>,
    },
    /// The decision's Ready condition does not match the fleet.
    WrongReady { at: Timestamp, detail: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Refused { at, error } => write!(f, "{at}: decide refused: {error}"),
            Violation::SeveralWrites { at, count } => {
                write!(f, "{at}: one serial decision wrote {count} configs")
            }
            Violation::WriteTooSoon {
                at,
                target,
                previous_target,
                previous_at,
                min_gap,
            } => write!(
                f,
                "{at}: wrote {target} only {:?} after {previous_target} (at {previous_at}); the gap must be at least {min_gap:?}",
                at.duration_since(*previous_at)
            ),
            Violation::FrontierUnverified { at, target, frontier } => write!(
                f,
                "{at}: wrote {target} while frontier {} (stamped {}) was not Applied and soaked",
                frontier.target, frontier.stamped_at
            ),
            Violation::WriteWhileFailed { at, target, failed } => write!(
                f,
                "{at}: wrote {target} while {failed} was Failed with an unchanged spec"
            ),
            Violation::UnrecordedWrite { at, target, frontier } => {
                write!(f, "{at}: wrote {target} but status.rollout was {frontier:?}")
            }
            Violation::WrongReady { at, detail } => write!(f, "{at}: wrong Ready: {detail}"),
        }
    }
}

impl std::error::Error for Violation {}

/// The world as one reconcile of the binding saw it.
pub(crate) struct Before<'a> {
    pub now: Timestamp,
    pub policy: Policy,
    pub frontier: Option<&'a Frontier>,
    /// `targetRefs` in order with each render and config.
    pub fleet: Vec<(&'a str, Spec, Option<&'a SimConfig>)>,
}

/// The last write, remembered across reconciles for the gap promise.
#[derive(Clone, Debug, Default)]
pub(crate) struct Oracle {
    last_write: Option<(String, Timestamp)>,
}

impl Oracle {
    /// Checks a decision before the simulator performs it.
    pub(crate) fn check_decision(&self, before: &Before<'_>, decision: &Decision) -> Result<(), Violation> {
        let at = before.now;
        check_ready(before, decision)?;
        if !before.policy.is_serial() {
            return Ok(());
        }
        let writes = decision.writes();
        if writes.len() > 1 {
            return Err(Violation::SeveralWrites {
                at,
                count: writes.len(),
            });
        }
        let Some(&index) = writes.first() else {
            return Ok(());
        };
        let target = before.fleet[index].0;
        if let Some((previous_target, previous_at)) = &self.last_write {
            let min_gap = match before.policy {
                Policy::WaitForApplied { wait_after_applied, .. } => wait_after_applied,
                Policy::FixedInterval { wait_interval } => wait_interval,
                Policy::Disabled => Duration::ZERO,
            };
            if previous_target != target && elapsed(*previous_at, at) < min_gap {
                return Err(Violation::WriteTooSoon {
                    at,
                    target: target.to_owned(),
                    previous_target: previous_target.clone(),
                    previous_at: *previous_at,
                    min_gap,
                });
            }
        }
        if let Policy::WaitForApplied { wait_after_applied, .. } = before.policy {
            if let Some(failed) = before
                .fleet
                .iter()
                .find(|(_, desired, config)| config.is_some_and(|c| c.phase == Phase::Failed && c.spec == *desired))
            {
                return Err(Violation::WriteWhileFailed {
                    at,
                    target: target.to_owned(),
                    failed: failed.0.to_owned(),
                });
            }
            if let Some(frontier) = before.frontier
                && frontier.target != target
                && !frontier_verified(before, frontier, wait_after_applied)
            {
                return Err(Violation::FrontierUnverified {
                    at,
                    target: target.to_owned(),
                    frontier: frontier.clone(),
                });
            }
        }
        Ok(())
    }

    /// Checks a config write as it happens: `status.rollout` must already
    /// name it, stamped now.
    pub(crate) fn check_write(
        &mut self,
        policy: &Policy,
        target: &str,
        frontier: Option<&Frontier>,
        now: Timestamp,
    ) -> Result<(), Violation> {
        if policy.is_serial() {
            let recorded = frontier.is_some_and(|f| f.target == target && f.stamped_at == now);
            if !recorded {
                return Err(Violation::UnrecordedWrite {
                    at: now,
                    target: target.to_owned(),
                    frontier: frontier.cloned(),
                });
            }
        }
        self.last_write = Some((target.to_owned(), now));
        Ok(())
    }
}

/// The previous frontier is verified once its config is Applied for its
/// current generation and has soaked; an evicted frontier only needs its
/// time gate.
fn frontier_verified(before: &Before<'_>, frontier: &Frontier, soak: Duration) -> bool {
    let listed = before.fleet.iter().find(|(name, _, _)| *name == frontier.target);
    match listed {
        None => elapsed(frontier.stamped_at, before.now) >= soak,
        Some((_, _, config)) => config
            .and_then(|c| {
                c.applied
                    .filter(|a| a.status == ConditionStatus::True && a.observed_generation == Some(c.generation))
            })
            .is_some_and(|a| elapsed(a.last_transition_time, before.now) >= soak),
    }
}

/// Ready=True only when the mode's promise holds for the whole fleet, and
/// every False carries the reason for what the world shows.
fn check_ready(before: &Before<'_>, decision: &Decision) -> Result<(), Violation> {
    let at = before.now;
    let ready = decision.ready();
    let wrong = |detail: String| Err(Violation::WrongReady { at, detail });
    let all_match = before
        .fleet
        .iter()
        .all(|(_, desired, config)| config.is_some_and(|c| c.spec == *desired));
    let all_applied = before.fleet.iter().all(|(_, _, config)| {
        config.is_some_and(|c| {
            c.applied
                .is_some_and(|a| a.status == ConditionStatus::True && a.observed_generation == Some(c.generation))
        })
    });
    match (before.policy, ready.status) {
        (Policy::Disabled, ConditionStatus::True) => Ok(()),
        (Policy::Disabled, _) => wrong(format!("Disabled reported {ready:?}")),
        (Policy::FixedInterval { .. }, ConditionStatus::True) if !all_match => {
            wrong(format!("FixedInterval reported {ready:?} with a spec still to write"))
        }
        (Policy::WaitForApplied { .. }, ConditionStatus::True) if !(all_match && all_applied) => wrong(format!(
            "WaitForApplied reported {ready:?} before every config was Applied"
        )),
        (_, ConditionStatus::True) if ready.reason != Reason::ReconcileSucceeded => {
            wrong(format!("True with reason {}", ready.reason))
        }
        (_, ConditionStatus::True) => Ok(()),
        (_, _) if ready.reason == Reason::RolloutHalted => {
            let halted = matches!(before.policy, Policy::WaitForApplied { .. })
                && before
                    .fleet
                    .iter()
                    .any(|(_, desired, config)| config.is_some_and(|c| c.phase == Phase::Failed && c.spec == *desired));
            if halted {
                Ok(())
            } else {
                wrong(format!("{ready:?} without a Failed config holding its render"))
            }
        }
        (_, _) if ready.reason == Reason::RolloutInProgress => {
            if all_match && (all_applied || matches!(before.policy, Policy::FixedInterval { .. })) {
                // Only the frontier's wait may still be running.
                match decision {
                    Decision::Requeue { .. } => Ok(()),
                    _ => wrong(format!("{ready:?} for a finished fleet without a wait")),
                }
            } else {
                Ok(())
            }
        }
        (_, _) => wrong(format!("unexpected {ready:?}")),
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let nanos = now.as_nanosecond() - since.as_nanosecond();
    if nanos <= 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}
