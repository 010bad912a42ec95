//! The frontier's mode-specific wait, and the universal write gate built on it.

use jiff::Timestamp;

use crate::decision::Wait;
use crate::input::{ExistingConfig, Frontier};
use crate::policy::Policy;
use crate::time::{Remaining, remaining};

/// A wait that has not elapsed: how long, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub after: std::time::Duration,
    pub wait: Wait,
}

/// Where the recorded frontier stands relative to the current `targetRefs`.
#[derive(Debug)]
pub(crate) enum FrontierState<'a, S> {
    /// `status.rollout` is empty: the first rollout ever.
    None,
    /// The frontier is still a target; its config may or may not exist.
    Listed {
        frontier: &'a Frontier,
        index: usize,
        config: Option<&'a ExistingConfig<S>>,
    },
    /// The frontier was removed from `targetRefs`.
    Evicted { frontier: &'a Frontier },
}

// Written out because derive would demand `S: Copy`; only references are copied.
impl<S> Clone for FrontierState<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for FrontierState<'_, S> {}

/// The wait before the walk may move past a frontier that is still listed.
///
/// FixedInterval counts `waitInterval` from the stamp. WaitForApplied polls
/// until the config is Applied for its current generation (a missing config
/// is simply not Applied yet), then soaks from the condition's own
/// transition time.
pub(crate) fn frontier_wait<S>(
    policy: &Policy,
    frontier: &Frontier,
    config: Option<&ExistingConfig<S>>,
    now: Timestamp,
) -> Option<Pending> {
    match *policy {
        Policy::Disabled => None,
        Policy::FixedInterval { wait_interval } => {
            remaining(frontier.stamped_at, wait_interval, now).map(|Remaining { after, until }| Pending {
                after,
                wait: Wait::Interval {
                    frontier: frontier.target.clone(),
                    until,
                },
            })
        }
        Policy::WaitForApplied {
            poll_interval,
            wait_after_applied,
        } => {
            match config.and_then(ExistingConfig::applied_for_current_generation) {
                None => Some(Pending {
                    after: poll_interval,
                    wait: Wait::NotApplied {
                        frontier: frontier.target.clone(),
                    },
                }),
                Some(applied) => remaining(applied.last_transition_time, wait_after_applied, now).map(
                    |Remaining { after, until }| Pending {
                        after,
                        wait: Wait::Soaking {
                            frontier: frontier.target.clone(),
                            until,
                        },
                    },
                ),
            }
        }
    }
}

/// The universal write gate in front of writing the first mismatch at
/// `candidate`: the frontier's own wait, with the spec's two exceptions (no
/// frontier recorded; the candidate is the frontier) and its degraded form
/// for an evicted frontier (a pure time gate: never health-check a target the
/// user removed, it may well be dead).
pub(crate) fn write_gate<S>(
    policy: &Policy,
    frontier: FrontierState<'_, S>,
    candidate: usize,
    now: Timestamp,
) -> Option<Pending> {
    match frontier {
        FrontierState::None => None,
        FrontierState::Listed { index, .. } if index == candidate => None,
        FrontierState::Listed { frontier, config, .. } => frontier_wait(policy, frontier, config, now),
        FrontierState::Evicted { frontier } => {
            remaining(frontier.stamped_at, policy.evicted_frontier_wait(), now).map(|Remaining { after, until }| {
                Pending {
                    after,
                    wait: Wait::EvictedFrontier {
                        frontier: frontier.target.clone(),
                        until,
                    },
                }
            })
        }
    }
}
