//! What the operator does after one walk.

use std::time::Duration;

use jiff::Timestamp;

use crate::input::Frontier;
use crate::ready::Ready;

/// The outcome of one [`decide`](crate::decide) call. Targets are named by
/// their position in the `targets` slice (`targetRefs` order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Disabled mode: create or update every listed config in this reconcile
    /// (those missing or differing from the render), then set `ready`. A
    /// failed write is the operator's `ReconcileError` instead.
    WriteAll { targets: Vec<usize>, ready: Ready },
    /// Record `frontier` in `status.rollout` together with `ready` in one
    /// status update, and only after that succeeded create or update the
    /// config of `target`. Then look again after `requeue_after`.
    StampThenWrite {
        target: usize,
        frontier: Frontier,
        requeue_after: Duration,
        ready: Ready,
    },
    /// Write nothing; set `ready` and look again after `after`.
    Requeue {
        after: Duration,
        wait: Wait,
        /// The first mismatch the write gate is holding back, if the walk
        /// reached one.
        blocked_write: Option<usize>,
        ready: Ready,
    },
    /// WaitForApplied found the config of `target` Failed for the spec it
    /// should have: write nothing, set `ready` and look again after
    /// `requeue_after` only to notice a recovery (a Failed apply is never
    /// retried from here).
    Halted {
        target: usize,
        config: String,
        requeue_after: Duration,
        ready: Ready,
    },
    /// The rollout of the current render is finished: set `ready` (True) and
    /// do not requeue. `status.rollout` stays as it is.
    Completed { ready: Ready },
}

/// Why a [`Decision::Requeue`] waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// WaitForApplied: the frontier's config is not Applied for its current
    /// generation yet (or does not exist); poll again.
    NotApplied { frontier: String },
    /// WaitForApplied: the frontier is Applied and soaks until `until`.
    Soaking { frontier: String, until: Timestamp },
    /// FixedInterval: `waitInterval` after the frontier's stamp ends at `until`.
    Interval { frontier: String, until: Timestamp },
    /// The frontier is no longer in `targetRefs`: only its time gate, ending
    /// at `until`, is enforced.
    EvictedFrontier { frontier: String, until: Timestamp },
    /// WaitForApplied's completion check: every spec matches, but this
    /// target's config is not Applied for its current generation.
    NotAllApplied { target: String },
}

impl Decision {
    /// The `Ready` condition to set.
    pub fn ready(&self) -> &Ready {
        match self {
            Decision::WriteAll { ready, .. }
            | Decision::StampThenWrite { ready, .. }
            | Decision::Requeue { ready, .. }
            | Decision::Halted { ready, .. }
            | Decision::Completed { ready } => ready,
        }
    }

    /// The positions of the configs this decision writes.
    pub fn writes(&self) -> &[usize] {
        match self {
            Decision::WriteAll { targets, .. } => targets,
            Decision::StampThenWrite { target, .. } => std::slice::from_ref(target),
            Decision::Requeue { .. } | Decision::Halted { .. } | Decision::Completed { .. } => &[],
        }
    }

    /// When to reconcile again; `None` means only on the next watch event.
    pub fn requeue_after(&self) -> Option<Duration> {
        match self {
            Decision::StampThenWrite { requeue_after, .. } | Decision::Halted { requeue_after, .. } => {
                Some(*requeue_after)
            }
            Decision::Requeue { after, .. } => Some(*after),
            Decision::WriteAll { .. } | Decision::Completed { .. } => None,
        }
    }
}
