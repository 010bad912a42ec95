//! A rollback of a binding-owned config (`spec.rollbackTo`, written by
//! `kubectl vrouter rollback`) holds while the binding is as it was when
//! the rollback was asked for: the binding leaves that config alone, so its
//! next reconcile does not undo the rollback at once. Once the binding's
//! spec changes (a new generation: an edit, pausing, resuming), the binding
//! writes the config again, and that write removes `spec.rollbackTo`.

use std::sync::Arc;

use kube::ResourceExt;
use vrouter_api::{VRouterBinding, VRouterConfig};

/// Whether `existing` carries a rollback its binding, now at
/// `binding_generation`, must leave alone.
pub fn holds(existing: &VRouterConfig, binding_generation: Option<i64>) -> bool {
    match (&existing.spec.rollback_to, binding_generation) {
        (Some(rollback), Some(generation)) => rollback.binding_generation == Some(generation),
        _ => false,
    }
}

/// `desired` with each config whose rollback holds replaced by the config
/// as it is, so that nothing the binding decides (writes, the rollout walk)
/// touches it. The same `desired` when none holds.
pub fn keep_held(
    binding: &VRouterBinding,
    desired: Arc<Vec<VRouterConfig>>,
    existing: &[Arc<VRouterConfig>],
) -> Arc<Vec<VRouterConfig>> {
    let generation = binding.metadata.generation;
    let held: Vec<&VRouterConfig> = existing.iter().map(|c| &**c).filter(|c| holds(c, generation)).collect();
    if held.is_empty() {
        return desired;
    }
    let kept = desired
        .iter()
        .map(|config| {
            held.iter()
                .find(|h| h.name_any() == config.name_any())
                .map_or_else(|| config.clone(), |h| (*h).clone())
        })
        .collect();
    Arc::new(kept)
}

#[cfg(test)]
mod tests {
    use vrouter_api::RollbackTo;

    use super::*;

    fn config(name: &str, content: &str, rollback: Option<(u64, Option<i64>)>) -> VRouterConfig {
        let mut config: VRouterConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
            "metadata": {"name": name, "namespace": "net"},
            "spec": {"targetRef": {"name": "r1"}, "config": content},
        }))
        .unwrap();
        config.spec.rollback_to = rollback.map(|(revision, binding_generation)| RollbackTo {
            revision,
            binding_generation,
        });
        config
    }

    #[test]
    fn a_rollback_holds_only_while_the_binding_keeps_its_generation() {
        let table = [
            // (rollback on the config, binding generation, holds)
            (Some((1, Some(4))), Some(4), true),
            // The binding changed (or was paused/resumed) since.
            (Some((1, Some(4))), Some(5), false),
            // Asked for without a binding generation: nothing to hold by.
            (Some((1, None)), Some(4), false),
            (None, Some(4), false),
            (Some((1, Some(4))), None, false),
        ];
        for (rollback, generation, held) in table {
            assert_eq!(
                holds(&config("e.r1", "", rollback), generation),
                held,
                "{rollback:?} {generation:?}"
            );
        }
    }

    #[test]
    fn a_held_config_is_desired_as_it_is_and_the_others_as_rendered() {
        let mut binding: VRouterBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterBinding",
            "metadata": {"name": "e", "namespace": "net", "generation": 4},
            "spec": {"templateRefs": [{"name": "t"}], "targetRefs": [{"name": "r1"}]},
        }))
        .unwrap();
        let desired = Arc::new(vec![config("e.r1", "new", None), config("e.r2", "new", None)]);
        let existing = vec![
            Arc::new(config("e.r1", "old", Some((1, Some(4))))),
            Arc::new(config("e.r2", "old", None)),
        ];
        let kept = keep_held(&binding, desired.clone(), &existing);
        assert_eq!(kept[0], *existing[0]);
        assert_eq!(kept[1], desired[1]);
        binding.metadata.generation = Some(5);
        let kept = keep_held(&binding, desired.clone(), &existing);
        assert!(Arc::ptr_eq(&kept, &desired), "nothing holds once the binding changed");
    }
}
