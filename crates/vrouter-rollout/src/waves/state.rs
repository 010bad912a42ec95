//! What a wave walk decides, and the little state it keeps between walks.

use std::time::Duration;

use jiff::Timestamp;

use crate::input::ConditionStatus;
use crate::ready::{Ready, Reason};

/// The state stored between walks (in the binding's status): the last wave
/// dispatched (0-based), and, while the walk holds before the next wave
/// until resumed, the resume token as it was when the hold began. Absent
/// when no rollout is under way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveProgress {
    pub wave: usize,
    pub hold: Option<String>,
}

/// Where the walk stands, for status and Events. Waves are counted from 1
/// here, as people count them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaveState {
    /// The configs of `wave` are written now.
    Dispatching { wave: usize, of: usize, writes: usize },
    /// `wave` is written; `pending` of its configs have not finished.
    InFlight { wave: usize, of: usize, pending: usize },
    /// `wave` is done; the next starts at `until`.
    PausedUntil { wave: usize, of: usize, until: Timestamp },
    /// `wave` is done; the next starts when the resume token changes.
    PausedUntilResumed { wave: usize, of: usize },
    /// `failed` of `wave`'s configs are Failed, more than it tolerates.
    Halted {
        wave: usize,
        of: usize,
        failed: usize,
        tolerated: usize,
    },
    /// Every wave is done.
    Completed { waves: usize, failed: usize },
}

impl WaveState {
    /// "wave 3 of 20, paused until resumed", and the like.
    pub fn summary(&self) -> String {
        match self {
            WaveState::Dispatching { wave, of, writes } => format!("wave {wave} of {of}, writing {writes} configs"),
            WaveState::InFlight { wave, of, pending } => {
                format!("wave {wave} of {of}, {pending} configs not Applied yet")
            }
            WaveState::PausedUntil { wave, of, until } => {
                format!("wave {wave} of {of} done, paused until {until}")
            }
            WaveState::PausedUntilResumed { wave, of } => {
                format!("wave {wave} of {of} done, paused until resumed")
            }
            WaveState::Halted {
                wave,
                of,
                failed,
                tolerated,
            } => format!("wave {wave} of {of} halted: {failed} configs Failed, {tolerated} tolerated"),
            WaveState::Completed { waves, failed: 0 } => format!("all {waves} waves done, every config Applied"),
            WaveState::Completed { waves, failed } => {
                format!("all {waves} waves done, {failed} configs Failed within maxFailures")
            }
        }
    }

    /// The binding's `Ready` condition for this state.
    pub fn ready(&self) -> Ready {
        let (status, reason) = match self {
            WaveState::Dispatching { .. } | WaveState::InFlight { .. } => {
                (ConditionStatus::False, Reason::RolloutInProgress)
            }
            WaveState::PausedUntil { .. } | WaveState::PausedUntilResumed { .. } => {
                (ConditionStatus::False, Reason::RolloutPaused)
            }
            WaveState::Halted { .. } => (ConditionStatus::False, Reason::RolloutHalted),
            WaveState::Completed { .. } => (ConditionStatus::True, Reason::ReconcileSucceeded),
        };
        Ready {
            status,
            reason,
            message: self.summary(),
        }
    }
}

/// The outcome of one [`decide_waves`](crate::waves::decide_waves) call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveDecision {
    /// Positions (in `targetRefs`) whose configs to create or update now,
    /// after `progress` is stored: all in one wave.
    pub writes: Vec<usize>,
    /// The state to store; `None` clears it (the rollout is complete).
    pub progress: Option<WaveProgress>,
    pub state: WaveState,
    /// The Failed configs of a halted wave, by position.
    pub failed: Vec<usize>,
    /// When to look again; `None` means only on a watch event (a resume is
    /// a spec change, which is one).
    pub requeue_after: Option<Duration>,
}

impl WaveDecision {
    pub fn ready(&self) -> Ready {
        self.state.ready()
    }
}
