//! WaitForApplied's two fleet-wide checks: the any-Failed halt before the
//! walk, and the all-Applied check after it.

use crate::input::{Phase, Target};

/// The first target whose config is Failed while already holding the spec
/// the render wants. A Failed config whose desired spec changed is not a
/// halt: the walk rewrites it (the documented way out of a halt).
pub(crate) fn first_halting_failure<S: PartialEq>(targets: &[Target<S>]) -> Option<usize> {
    targets.iter().position(|target| {
        target
            .existing
            .as_ref()
            .is_some_and(|config| config.phase == Phase::Failed && config.spec == target.desired)
    })
}

/// The first target whose config is missing or not Applied for its current
/// generation.
pub(crate) fn first_not_applied<S>(targets: &[Target<S>]) -> Option<usize> {
    targets.iter().position(|target| {
        target
            .existing
            .as_ref()
            .and_then(|config| config.applied_for_current_generation())
            .is_none()
    })
}
