//! The binding controller's decisions about the configs it generates, as
//! pure functions: whether an existing config needs a write and whose it
//! is, which ones are orphans, and how a config is shown to the rollout
//! walk. What each target's config should hold comes from
//! `vrouter_api::compose`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use vrouter_api::constants::{LABEL_BINDING_PAUSED, condition};
use vrouter_api::{RolloutMode, VRouterBinding, VRouterConfig, VRouterConfigSpec};
use vrouter_rollout::{AppliedCondition, ConditionStatus, ExistingConfig, Policy, RolloutError, Target};

use crate::runtime::conditions;

/// Whether `existing` differs from `desired` in anything the binding owns:
/// the spec, its two labels, or its controller owner reference.
pub fn needs_write(existing: &VRouterConfig, desired: &VRouterConfig) -> bool {
    if existing.spec != desired.spec {
        return true;
    }
    let labels = existing.metadata.labels.clone().unwrap_or_default();
    let wanted_labels = desired.metadata.labels.clone().unwrap_or_default();
    if wanted_labels.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return true;
    }
    if labels.contains_key(LABEL_BINDING_PAUSED) && !wanted_labels.contains_key(LABEL_BINDING_PAUSED) {
        // Resumed: the label goes with the write (see `writes::patch_config`).
        return true;
    }
    !controlled_by_the_same_owner(existing, desired)
}

/// The controller of `existing` (`Kind name`) when that is not the binding
/// `desired` names as its owner; `None` when it has no controller or is
/// the binding's.
pub fn other_controller(existing: &VRouterConfig, desired: &VRouterConfig) -> Option<String> {
    controller_of(existing)
        .filter(|o| Some(&o.uid) != owner_uid(desired))
        .map(|o| format!("{} {:?}", o.kind, o.name))
}

/// Whether `existing` is controlled by the binding that `desired` names as
/// its owner: a config of the generated name that is not is someone else's.
pub fn controlled_by_the_same_owner(existing: &VRouterConfig, desired: &VRouterConfig) -> bool {
    controller_of(existing).is_some_and(|o| Some(&o.uid) == owner_uid(desired))
}

/// The API server allows one controller reference per object.
fn controller_of(object: &VRouterConfig) -> Option<&OwnerReference> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

fn owner_uid(desired: &VRouterConfig) -> Option<&String> {
    desired
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .map(|o| &o.uid)
}

/// Names of existing configs (found by the binding label) that no target of
/// the binding wants any more. Deleting one only removes the object; the
/// router keeps its config, so this is safe at any point of a rollout. One
/// already being deleted (its finalizer still on) is not deleted again.
pub fn orphans<'a>(
    desired_names: &HashSet<String>,
    existing: impl IntoIterator<Item = &'a VRouterConfig>,
) -> Vec<&'a str> {
    existing
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name.as_deref())
        .filter(|name| !desired_names.contains(*name))
        .collect()
}

/// The rollout policy of the binding's `spec.rollout`.
pub fn policy(binding: &VRouterBinding) -> Policy {
    match (binding.spec.effective_rollout_mode(), &binding.spec.rollout) {
        (RolloutMode::WaitForApplied, Some(r)) => Policy::WaitForApplied {
            poll_interval: r.poll_interval.to_std(),
            wait_after_applied: r.wait_after_applied.to_std(),
        },
        (RolloutMode::FixedInterval, Some(r)) => Policy::FixedInterval {
            wait_interval: r.wait_interval.unwrap_or_default().to_std(),
        },
        _ => Policy::Disabled,
    }
}

/// An existing config as the rollout walk reads it. A condition status
/// other than True, False or Unknown is an error, not a guess.
pub fn existing_view(config: &VRouterConfig) -> Result<ExistingConfig<VRouterConfigSpec>, RolloutError> {
    let status = config.status.clone().unwrap_or_default();
    let applied = conditions::get(&status.conditions, condition::APPLIED)
        .map(|c| {
            Ok::<_, RolloutError>(AppliedCondition {
                status: c.status.parse::<ConditionStatus>()?,
                observed_generation: c.observed_generation,
                last_transition_time: c.last_transition_time.0,
            })
        })
        .transpose()?;
    Ok(ExistingConfig {
        spec: config.spec.clone(),
        generation: config.metadata.generation.unwrap_or(0),
        phase: status.phase,
        applied,
    })
}

/// The targets as the rollout walks read them: `targetRefs` order, each
/// with its render and its existing config.
pub fn walk_targets(
    desired: &[VRouterConfig],
    existing: &HashMap<String, &VRouterConfig>,
) -> Result<Vec<Target<VRouterConfigSpec>>, RolloutError> {
    desired
        .iter()
        .map(|d| {
            Ok(Target {
                name: d.spec.target_ref.name.clone(),
                desired: d.spec.clone(),
                existing: existing.get(&d.name_any()).map(|c| existing_view(c)).transpose()?,
            })
        })
        .collect()
}

/// A zero `pollInterval`/`waitInterval` is valid input but would requeue at
/// once, in a loop of reads against the API server while a rollout waits.
pub const MIN_REQUEUE: Duration = Duration::from_secs(1);

/// The controller's next step after a decision that may ask to look again.
pub fn next_action(requeue_after: Option<Duration>) -> Action {
    match requeue_after {
        Some(after) => Action::requeue(after.max(MIN_REQUEUE)),
        None => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    use vrouter_api::compose::desired_config;
    use vrouter_api::constants::LABEL_TARGET;

    use super::*;

    /// The binding `net/bgp` over targets a and b, as the API server has it.
    fn simple() -> VRouterBinding {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bgp", "namespace": "net", "uid": "uid-1"},
            "spec": {"templateRefs": [{"name": "t"}], "targetRefs": [{"name": "a"}, {"name": "b"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_matching_config_needs_no_write_and_any_owned_difference_does() {
        let desired = desired_config(&simple(), "a", "cfg".into(), "cmd".into());
        let mut existing = desired.clone();
        existing.metadata.resource_version = Some("7".into());
        existing
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "x".into());
        assert!(
            !needs_write(&existing, &desired),
            "extra labels and server fields are not ours"
        );

        let mut changed = existing.clone();
        changed.spec.commands = "other".into();
        assert!(needs_write(&changed, &desired));

        let mut relabelled = existing.clone();
        relabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_TARGET.into(), "b".into());
        assert!(needs_write(&relabelled, &desired));

        let mut unowned = existing.clone();
        unowned.metadata.owner_references = None;
        assert!(needs_write(&unowned, &desired));
    }

    #[test]
    fn a_config_controlled_by_another_object_is_named_and_an_uncontrolled_one_is_not() {
        let desired = desired_config(&simple(), "a", "cfg".into(), "cmd".into());
        assert_eq!(other_controller(&desired, &desired), None, "the binding's own");
        let mut unowned = desired.clone();
        unowned.metadata.owner_references = None;
        assert_eq!(other_controller(&unowned, &desired), None, "adoptable");
        let mut other = desired.clone();
        let reference = &mut other.metadata.owner_references.as_mut().unwrap()[0];
        reference.uid = "uid-of-another-binding".into();
        reference.name = "bgp-old".into();
        assert_eq!(
            other_controller(&other, &desired).as_deref(),
            Some(r#"VRouterBinding "bgp-old""#)
        );
        other.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert_eq!(
            other_controller(&other, &desired),
            None,
            "an owner that is not the controller"
        );
    }

    #[test]
    fn orphans_are_existing_configs_no_target_wants() {
        let b = simple();
        let mut existing = vec![
            desired_config(&b, "a", String::new(), String::new()),
            desired_config(&b, "gone", String::new(), String::new()),
            desired_config(&b, "going", String::new(), String::new()),
        ];
        existing[2].metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let desired: HashSet<String> = ["bgp.a".to_owned(), "bgp.b".to_owned()].into();
        assert_eq!(orphans(&desired, &existing), ["bgp.gone"]);
    }

    #[test]
    fn a_zero_interval_still_waits_a_second() {
        let cases = [
            (Some(Duration::ZERO), Action::requeue(MIN_REQUEUE)),
            (Some(Duration::from_millis(200)), Action::requeue(MIN_REQUEUE)),
            (Some(Duration::from_secs(10)), Action::requeue(Duration::from_secs(10))),
            (None, Action::await_change()),
        ];
        for (after, want) in cases {
            assert_eq!(next_action(after), want, "{after:?}");
        }
    }

    #[test]
    fn the_walk_sees_a_config_as_stored_and_a_bad_condition_status_is_an_error() {
        let mut config = desired_config(&simple(), "a", "cfg".into(), "cmd".into());
        config.metadata.generation = Some(3);
        let status = config.status.get_or_insert_default();
        status.phase = vrouter_api::Phase::Failed;
        status
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: condition::APPLIED.into(),
                status: "False".into(),
                observed_generation: Some(3),
                reason: "ApplyFailed".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    crate::runtime::test_clock::at(0),
                ),
            });
        let view = existing_view(&config).unwrap();
        assert_eq!((view.generation, view.phase), (3, vrouter_api::Phase::Failed));
        assert_eq!(view.applied.map(|c| c.status), Some(ConditionStatus::False));
        config.status.as_mut().unwrap().conditions[0].status = "Maybe".into();
        let err = existing_view(&config).unwrap_err();
        assert_eq!(err, RolloutError::InvalidConditionStatus { value: "Maybe".into() });
    }
}
