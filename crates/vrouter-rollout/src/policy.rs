//! The binding's `spec.rollout`, reduced to what the walk needs.

use std::time::Duration;

/// How a binding spreads its config writes over its targets (`spec.rollout`).
///
/// Each mode carries only its own durations, so a field that belongs to the
/// other mode cannot influence the walk (admission ignores it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Write every changed config in one reconcile (the default: an absent
    /// `rollout`, `rollout: {}` and an unset mode all mean this).
    #[default]
    Disabled,
    /// One target at a time; advance once the last written config is Applied
    /// for its current generation and has soaked for `wait_after_applied`.
    WaitForApplied {
        /// How often to look again while the frontier is not Applied (and
        /// while halted).
        poll_interval: Duration,
        /// Soak after the frontier's `Applied` condition turned True.
        wait_after_applied: Duration,
    },
    /// One target at a time, `wait_interval` apart, whatever the routers
    /// report.
    FixedInterval {
        /// The time between two writes; must be greater than zero.
        wait_interval: Duration,
    },
}

impl Policy {
    /// The serial modes write at most one config per decision.
    pub fn is_serial(&self) -> bool {
        !matches!(self, Policy::Disabled)
    }

    /// The pure time gate used when the frontier was removed from
    /// `targetRefs`: there is no config left to health-check, so only the
    /// mode's own interval after the stamp is enforced.
    pub(crate) fn evicted_frontier_wait(&self) -> Duration {
        match *self {
            Policy::Disabled => Duration::ZERO,
            Policy::WaitForApplied { wait_after_applied, .. } => wait_after_applied,
            Policy::FixedInterval { wait_interval } => wait_interval,
        }
    }

    /// When to look again after a write: WaitForApplied polls for Applied;
    /// FixedInterval has nothing to look at before its interval is over.
    pub(crate) fn after_write(&self) -> Duration {
        match *self {
            Policy::Disabled => Duration::ZERO,
            Policy::WaitForApplied { poll_interval, .. } => poll_interval,
            Policy::FixedInterval { wait_interval } => wait_interval,
        }
    }
}
