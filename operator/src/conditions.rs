//! Setting a status condition the way `kubectl wait` and Kubernetes
//! conventions expect: one entry per type, `lastTransitionTime` moved only
//! when the status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The wanted state of one condition; times are filled in by [`set`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub type_: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
    pub observed_generation: Option<i64>,
}

/// Puts `wanted` into `conditions`. Returns whether anything changed, so the
/// caller can skip a status write that would change nothing.
pub fn set(conditions: &mut Vec<Condition>, wanted: Wanted<'_>, now: Timestamp) -> bool {
    let status = if wanted.status { "True" } else { "False" };
    let position = conditions.iter().position(|c| c.type_ == wanted.type_);
    if let Some(existing) = position.map(|i| &mut conditions[i]) {
        let same = existing.status == status
            && existing.reason == wanted.reason
            && existing.message == wanted.message
            && existing.observed_generation == wanted.observed_generation;
        if same {
            return false;
        }
        if existing.status != status {
            existing.last_transition_time = Time(now);
        }
        existing.status = status.to_owned();
        existing.reason = wanted.reason.to_owned();
        existing.message = wanted.message;
        existing.observed_generation = wanted.observed_generation;
        return true;
    }
    conditions.push(Condition {
        type_: wanted.type_.to_owned(),
        status: status.to_owned(),
        reason: wanted.reason.to_owned(),
        message: wanted.message,
        observed_generation: wanted.observed_generation,
        last_transition_time: Time(now),
    });
    true
}

/// The condition of a type, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::at;

    fn applied(status: bool, reason: &str) -> Wanted<'_> {
        Wanted {
            type_: "Applied",
            status,
            reason,
            message: String::new(),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn adds_a_missing_condition_stamped_now() {
        let mut conditions = Vec::new();
        assert!(set(&mut conditions, applied(true, "ConfigApplied"), at(10)));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn an_identical_condition_is_no_change() {
        let mut conditions = Vec::new();
        set(&mut conditions, applied(true, "ConfigApplied"), at(10));
        assert!(!set(&mut conditions, applied(true, "ConfigApplied"), at(20)));
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conditions = Vec::new();
        set(&mut conditions, applied(false, "Applying"), at(10));
        assert!(set(&mut conditions, applied(false, "ConfigFailed"), at(20)));
        assert_eq!(
            conditions[0].last_transition_time,
            Time(at(10)),
            "same status, new reason"
        );
        assert!(set(&mut conditions, applied(true, "ConfigApplied"), at(30)));
        assert_eq!(conditions[0].last_transition_time, Time(at(30)));
        assert_eq!(conditions.len(), 1);
    }
}
