//! The wave walk: one pass over the waves that decides the next step.

use std::ops::Range;

use jiff::Timestamp;

use super::plan::{WavePolicy, plan};
use super::state::{WaveDecision, WaveProgress, WaveState};
use crate::error::RolloutError;
use crate::input::{Phase, Target};
use crate::time::remaining;
use crate::walk::validate_targets;

/// Everything one reconcile of a binding in waves knows.
#[derive(Clone, Copy, Debug)]
pub struct WaveRollout<'a, S> {
    pub policy: &'a WavePolicy,
    /// The state stored by the last walk (`None`: no rollout under way).
    pub progress: Option<&'a WaveProgress>,
    /// `spec.rollout.waves.resume` as it is now.
    pub resume: &'a str,
    /// `spec.targetRefs` in order, each with its render and existing config.
    pub targets: &'a [Target<S>],
}

/// One wave's configs, counted.
#[derive(Debug, Default)]
struct Tally {
    /// Missing, or holding another spec than the render.
    needs_write: Vec<usize>,
    /// Holding the render, neither Applied for it nor Failed.
    pending: usize,
    /// Configs whose apply has not finished, whatever spec they hold: a
    /// router at work (an older render's config may still be applying).
    busy: usize,
    /// Holding the render and Failed.
    failed: Vec<usize>,
    /// When the last of its finished configs finished.
    done_at: Option<Timestamp>,
}

fn tally<S: PartialEq>(targets: &[Target<S>], wave: Range<usize>) -> Tally {
    let mut t = Tally::default();
    for index in wave {
        let target = &targets[index];
        let unfinished = |c: &crate::input::ExistingConfig<S>| {
            c.phase != Phase::Failed && c.applied_for_current_generation().is_none()
        };
        t.busy += usize::from(target.existing.as_ref().is_some_and(unfinished));
        let Some(config) = target.existing.as_ref().filter(|_| !target.needs_write()) else {
            t.needs_write.push(index);
            continue;
        };
        let finished = if config.phase == Phase::Failed {
            t.failed.push(index);
            config.applied.as_ref().map(|c| c.last_transition_time)
        } else if let Some(applied) = config.applied_for_current_generation() {
            Some(applied.last_transition_time)
        } else {
            t.pending += 1;
            continue;
        };
        t.done_at = t.done_at.max(finished);
    }
    t
}

/// Decides the next step of a rollout in waves at `now`.
///
/// Invariants (property-tested in `tests/waves.rs`): every write of one
/// decision lies in one wave, and nothing is written while a config outside
/// that wave is in flight; nothing is written while a wave is halted or
/// during a pause between waves; a hold ends only when the resume token
/// differs from the one it began with.
pub fn decide_waves<S: PartialEq>(rollout: &WaveRollout<'_, S>, now: Timestamp) -> Result<WaveDecision, RolloutError> {
    let WaveRollout {
        policy,
        progress,
        resume: _,
        targets,
    } = *rollout;
    policy.validate()?;
    validate_targets(targets)?;
    let waves = plan(policy, targets.len());
    let of = waves.len();
    let tallies: Vec<Tally> = waves.iter().map(|w| tally(targets, w.clone())).collect();
    let kept = progress.cloned();
    for (w, (range, t)) in waves.iter().zip(&tallies).enumerate() {
        let tolerated = policy.max_failures.tolerated(range.len());
        if t.failed.len() > tolerated {
            let state = WaveState::Halted {
                wave: w + 1,
                of,
                failed: t.failed.len(),
                tolerated,
            };
            return Ok(wait(kept, state, Some(policy.poll_interval)).with_failed(t.failed.clone()));
        }
        let in_flight_elsewhere = tallies.iter().enumerate().any(|(o, other)| o != w && other.busy > 0);
        if !t.needs_write.is_empty() && !in_flight_elsewhere {
            let previous = progress.filter(|p| p.wave < w && p.wave < of);
            if let Some(held) = previous.and_then(|p| gate(rollout, p, &tallies[p.wave], of, now)) {
                return Ok(held);
            }
            let state = WaveState::Dispatching {
                wave: w + 1,
                of,
                writes: t.needs_write.len(),
            };
            let progress = WaveProgress { wave: w, hold: None };
            let mut decision = wait(Some(progress), state, Some(policy.poll_interval));
            decision.writes = t.needs_write.clone();
            return Ok(decision);
        }
        if t.pending > 0 || !t.needs_write.is_empty() {
            let pending = t.pending + t.needs_write.len();
            let state = WaveState::InFlight {
                wave: w + 1,
                of,
                pending,
            };
            return Ok(wait(kept, state, Some(policy.poll_interval)));
        }
    }
    let failed = tallies.iter().map(|t| t.failed.len()).sum();
    Ok(wait(None, WaveState::Completed { waves: of, failed }, None))
}

/// The pause between the wave `previous` dispatched last (done, as
/// `done` counts it) and the next: `None` once it is over.
fn gate<S>(
    rollout: &WaveRollout<'_, S>,
    previous: &WaveProgress,
    done: &Tally,
    of: usize,
    now: Timestamp,
) -> Option<WaveDecision> {
    let policy = rollout.policy;
    let wave = previous.wave + 1;
    if let Some(left) = done.done_at.and_then(|at| remaining(at, policy.pause, now)) {
        let state = WaveState::PausedUntil {
            wave,
            of,
            until: left.until,
        };
        return Some(wait(Some(previous.clone()), state, Some(left.after)));
    }
    if !policy.until_resumed {
        return None;
    }
    let state = WaveState::PausedUntilResumed { wave, of };
    match &previous.hold {
        // The hold begins: remember the token a resume must change.
        None => {
            let held = WaveProgress {
                wave: previous.wave,
                hold: Some(rollout.resume.to_owned()),
            };
            Some(wait(Some(held), state, None))
        }
        Some(token) if token == rollout.resume => Some(wait(Some(previous.clone()), state, None)),
        Some(_) => None,
    }
}

fn wait(progress: Option<WaveProgress>, state: WaveState, requeue_after: Option<std::time::Duration>) -> WaveDecision {
    WaveDecision {
        writes: Vec::new(),
        progress,
        state,
        failed: Vec::new(),
        requeue_after,
    }
}

impl WaveDecision {
    fn with_failed(mut self, failed: Vec<usize>) -> Self {
        self.failed = failed;
        self
    }
}
