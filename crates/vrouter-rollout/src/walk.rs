//! The serial walk: one pass over `targetRefs` that decides the single next
//! step of the rollout.

use std::collections::HashMap;

use jiff::Timestamp;

use crate::decision::{Decision, Wait};
use crate::error::RolloutError;
use crate::gate::{FrontierState, frontier_wait, write_gate};
use crate::halt::{first_halting_failure, first_not_applied};
use crate::input::{Frontier, Target};
use crate::policy::Policy;
use crate::ready::Ready;

/// Everything one reconcile of a binding knows, borrowed from the caller.
#[derive(Clone, Copy, Debug)]
pub struct Rollout<'a, S> {
    /// The binding's name; generated configs are named `<binding>.<target>`.
    pub binding: &'a str,
    pub policy: Policy,
    /// `status.rollout`, see [`Frontier::from_status`].
    pub frontier: Option<&'a Frontier>,
    /// `spec.targetRefs` in order, each with its render and existing config.
    pub targets: &'a [Target<S>],
}

impl<'a, S> Rollout<'a, S> {
    /// A rollout of `targets` (in `targetRefs` order) with no frontier
    /// recorded yet.
    pub fn new(binding: &'a str, policy: Policy, targets: &'a [Target<S>]) -> Self {
        Rollout {
            binding,
            policy,
            frontier: None,
            targets,
        }
    }

    /// The same rollout, with the frontier recorded in `status.rollout`.
    pub fn with_frontier(mut self, frontier: &'a Frontier) -> Self {
        self.frontier = Some(frontier);
        self
    }
}

/// The name of the VRouterConfig a binding generates for a target.
pub fn config_name(binding: &str, target: &str) -> String {
    format!("{binding}.{target}")
}

/// Decides the next step of a binding's rollout at `now`.
///
/// Pure: it reads only its arguments, so the same state always gives the
/// same decision, and a decision is recomputed from persisted state after
/// any crash or restart.
pub fn decide<S: PartialEq>(rollout: &Rollout<'_, S>, now: Timestamp) -> Result<Decision, RolloutError> {
    let Rollout {
        binding,
        policy,
        frontier,
        targets,
    } = *rollout;
    validate(&policy)?;
    validate_targets(targets)?;
    let total = targets.len();

    if !policy.is_serial() {
        let changed = (0..total).filter(|&i| targets[i].needs_write()).collect();
        return Ok(Decision::WriteAll {
            targets: changed,
            ready: Ready::all_written(total),
        });
    }

    if let Policy::WaitForApplied { poll_interval, .. } = policy
        && let Some(failed) = first_halting_failure(targets)
    {
        let config = config_name(binding, &targets[failed].name);
        return Ok(Decision::Halted {
            target: failed,
            ready: Ready::halted(&config),
            config,
            requeue_after: poll_interval,
        });
    }

    let frontier = locate(frontier, targets);
    for (index, target) in targets.iter().enumerate() {
        if target.needs_write() {
            let Some(pending) = write_gate(&policy, frontier, index, now) else {
                return Ok(stamp_then_write(&policy, targets, index, now));
            };
            if let Some(obsolete) = obsolete_unverified_frontier(frontier, targets, &pending.wait) {
                return Ok(stamp_then_write(&policy, targets, obsolete, now));
            }
            return Ok(Decision::Requeue {
                after: pending.after,
                wait: pending.wait,
                blocked_write: Some(index),
                ready: Ready::in_progress(index, total),
            });
        }
        if let FrontierState::Listed {
            frontier,
            index: frontier_index,
            config,
        } = frontier
            && frontier_index == index
            && let Some(pending) = frontier_wait(&policy, frontier, config, now)
        {
            return Ok(Decision::Requeue {
                after: pending.after,
                wait: pending.wait,
                blocked_write: None,
                ready: Ready::in_progress(index + 1, total),
            });
        }
    }

    Ok(all_written(&policy, targets))
}

/// Every target holds its render: the rollout is complete, or (in
/// WaitForApplied) waits until every config is Applied.
fn all_written<S>(policy: &Policy, targets: &[Target<S>]) -> Decision {
    let total = targets.len();
    match *policy {
        Policy::WaitForApplied { poll_interval, .. } => match first_not_applied(targets) {
            Some(waiting) => Decision::Requeue {
                after: poll_interval,
                wait: Wait::NotAllApplied {
                    target: targets[waiting].name.clone(),
                },
                blocked_write: None,
                ready: Ready::waiting_for_all_applied(),
            },
            None => Decision::Completed {
                ready: Ready::all_applied(total),
            },
        },
        _ => Decision::Completed {
            ready: Ready::all_written(total),
        },
    }
}

fn stamp_then_write<S>(policy: &Policy, targets: &[Target<S>], index: usize, now: Timestamp) -> Decision {
    Decision::StampThenWrite {
        target: index,
        frontier: Frontier {
            target: targets[index].name.clone(),
            stamped_at: now,
        },
        requeue_after: policy.after_write(),
        ready: Ready::in_progress(index + 1, targets.len()),
    }
}

/// The frontier, when WaitForApplied's gate waits for it to be Applied but
/// its own render has changed since (or its config is gone). Its config can
/// then never be verified without being written again, and it comes later
/// in `targetRefs` than the held-back mismatch, so waiting in order would
/// block the rollout for good (say, a template fix for every target after
/// the frontier Failed, or a crash between stamping a new target and
/// creating its config). Rewriting the frontier itself is exempt from the
/// gate, exactly as when it is the first mismatch.
fn obsolete_unverified_frontier<S: PartialEq>(
    frontier: FrontierState<'_, S>,
    targets: &[Target<S>],
    wait: &Wait,
) -> Option<usize> {
    match (frontier, wait) {
        (FrontierState::Listed { index, .. }, Wait::NotApplied { .. }) if targets[index].needs_write() => Some(index),
        _ => None,
    }
}

/// Refuses an interval that would not stagger anything.
fn validate(policy: &Policy) -> Result<(), RolloutError> {
    if let Policy::FixedInterval { wait_interval } = policy
        && wait_interval.is_zero()
    {
        return Err(RolloutError::ZeroWaitInterval);
    }
    Ok(())
}

/// Refuses target lists that make "the frontier" (or a wave) ambiguous:
/// targets are recorded by name.
pub(crate) fn validate_targets<S>(targets: &[Target<S>]) -> Result<(), RolloutError> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(targets.len());
    for (index, target) in targets.iter().enumerate() {
        if target.name.is_empty() {
            return Err(RolloutError::EmptyTargetName { index });
        }
        if let Some(first) = seen.insert(&target.name, index) {
            return Err(RolloutError::DuplicateTarget {
                name: target.name.clone(),
                first,
                second: index,
            });
        }
    }
    Ok(())
}

fn locate<'a, S>(frontier: Option<&'a Frontier>, targets: &'a [Target<S>]) -> FrontierState<'a, S> {
    let Some(frontier) = frontier else {
        return FrontierState::None;
    };
    match targets.iter().position(|target| target.name == frontier.target) {
        Some(index) => FrontierState::Listed {
            frontier,
            index,
            config: targets[index].existing.as_ref(),
        },
        None => FrontierState::Evicted { frontier },
    }
}
