//! Inputs the walk refuses, each with what is wrong.

use thiserror::Error;

/// Why [`decide`](crate::decide) (or parsing an input) refused its input.
///
/// Admission rejects most of these before they reach the operator; the walk
/// still refuses them because each one would make "the frontier" or "the
/// interval" ambiguous.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RolloutError {
    /// FixedInterval with a zero interval would not stagger anything.
    #[error("rollout mode FixedInterval needs waitInterval greater than zero")]
    ZeroWaitInterval,
    /// The frontier is recorded by target name, so names must be unique.
    #[error("target {name:?} appears more than once in targetRefs (positions {first} and {second})")]
    DuplicateTarget { name: String, first: usize, second: usize },
    /// An empty name cannot be told apart from "no frontier recorded".
    #[error("target at position {index} in targetRefs has an empty name")]
    EmptyTargetName { index: usize },
    /// A condition status other than True, False or Unknown.
    #[error("invalid condition status {value:?}: expected \"True\", \"False\" or \"Unknown\"")]
    InvalidConditionStatus { value: String },
    /// A VRouterConfig phase other than the four the config controller writes.
    #[error("invalid VRouterConfig phase {value:?}: expected \"Pending\", \"Applying\", \"Applied\" or \"Failed\"")]
    InvalidPhase { value: String },
    /// A wave size or failure threshold that cannot cut a fleet into waves.
    #[error(
        "spec.rollout.waves.{field} {value:?} is invalid: a count of at least 1 (0 allowed for maxFailures) or a percentage from 1% to 100%"
    )]
    InvalidWaveSize { field: &'static str, value: String },
}
