//! The binding's `Ready` condition as the spec's tables define it for each
//! rollout state.

use std::fmt;

use crate::input::ConditionStatus;

/// The `Ready` condition a decision asks the operator to set on the binding.
///
/// Every decision carries one; the operator writes it when it differs from
/// the condition already there, so repeated identical waits cost no API
/// write. `ReconcileError` never comes from here: it belongs to render and
/// orphan-cleanup failures, which happen before the walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready {
    pub status: ConditionStatus,
    pub reason: Reason,
    pub message: String,
}

/// The reasons the walk sets on `Ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    ReconcileSucceeded,
    RolloutInProgress,
    RolloutHalted,
    /// Waves: between two waves, for a set time or until resumed.
    RolloutPaused,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ReconcileSucceeded => "ReconcileSucceeded",
            Reason::RolloutInProgress => "RolloutInProgress",
            Reason::RolloutHalted => "RolloutHalted",
            Reason::RolloutPaused => "RolloutPaused",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Ready {
    /// `updated` of `total` targets are behind the walk's position.
    pub(crate) fn in_progress(updated: usize, total: usize) -> Ready {
        Ready {
            status: ConditionStatus::False,
            reason: Reason::RolloutInProgress,
            message: format!("{updated}/{total} targets updated"),
        }
    }

    /// WaitForApplied's final check: every spec matches, not every config is
    /// Applied for its current generation yet.
    pub(crate) fn waiting_for_all_applied() -> Ready {
        Ready {
            status: ConditionStatus::False,
            reason: Reason::RolloutInProgress,
            message: "waiting for all configs Applied".to_owned(),
        }
    }

    pub(crate) fn halted(config_name: &str) -> Ready {
        Ready {
            status: ConditionStatus::False,
            reason: Reason::RolloutHalted,
            message: format!("VRouterConfig {config_name:?} is Failed"),
        }
    }

    /// FixedInterval and Disabled only promise the writes happened.
    pub(crate) fn all_written(total: usize) -> Ready {
        Ready {
            status: ConditionStatus::True,
            reason: Reason::ReconcileSucceeded,
            message: format!("all {total} configs written"),
        }
    }

    /// WaitForApplied promises every router applied the current render.
    pub(crate) fn all_applied(total: usize) -> Ready {
        Ready {
            status: ConditionStatus::True,
            reason: Reason::ReconcileSucceeded,
            message: format!("all {total} configs Applied"),
        }
    }
}
