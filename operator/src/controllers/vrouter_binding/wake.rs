//! Which events of a generated VRouterConfig wake its binding. Each config
//! changes several times during an apply (finalizer, write-ahead apply id,
//! Applying, Applied, the kstatus conditions), and every change used to
//! wake the binding, whose reconcile renders every target and decides the
//! rollout again: at 1,000 targets that was most of the operator's CPU
//! during a rollout, for decisions that read none of what had changed.
//!
//! A binding's reconcile reads two things of a config:
//! - its *shape*: that it exists, its generation (a spec change bumps it),
//!   its labels, its controller, whether it is being deleted. Every policy
//!   decides writes and orphans from these.
//! - its *progress*: the phase and the `Applied` condition. Only
//!   WaitForApplied reads them (its gate, the halt on Failed, all Applied);
//!   Disabled and FixedInterval never look at a config's status.
//!
//! An event wakes the binding when the shape changed, or the progress
//! changed and the binding's policy reads it. Each config's last view is
//! kept whatever the verdict, so the next event is compared with what the
//! store holds.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use kube::runtime::watcher;
use vrouter_api::VRouterConfig;
use vrouter_api::constants::condition;
use vrouter_rollout::Policy;

use crate::runtime::conditions;

/// What the binding's reconcile reads of one config, as two fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    shape: u64,
    progress: u64,
}

/// The fingerprints of `config` (see the module docs for what each holds).
pub fn seen(config: &VRouterConfig) -> Seen {
    let meta = &config.metadata;
    let mut shape = DefaultHasher::new();
    (
        meta.generation,
        &meta.labels,
        meta.deletion_timestamp.is_some(),
        meta.owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
            .map(|o| (&o.uid, &o.name))
            .collect::<Vec<_>>(),
    )
        .hash(&mut shape);
    let mut progress = DefaultHasher::new();
    let status = config.status.as_ref();
    // No status yet reads as the default phase, as `existing_view` has it.
    status.map(|s| s.phase).unwrap_or_default().hash(&mut progress);
    status
        .and_then(|s| conditions::get(&s.conditions, condition::APPLIED))
        .map(|c| (&c.status, c.observed_generation, c.last_transition_time.0))
        .hash(&mut progress);
    Seen {
        shape: shape.finish(),
        progress: progress.finish(),
    }
}

/// Whether a binding whose policy is `policy` reads its configs' progress.
pub fn reads_progress(policy: &Policy) -> bool {
    matches!(policy, Policy::WaitForApplied { .. })
}

/// Whether a config seen as `now` (after `before`, `None` for the first
/// sight) wakes a binding that reads progress or not.
pub fn wakes(before: Option<Seen>, now: Seen, reads_progress: bool) -> bool {
    match before {
        None => true,
        Some(before) => before.shape != now.shape || reads_progress && before.progress != now.progress,
    }
}

/// The last view of every config the binding controller's watch delivered.
#[derive(Default)]
pub struct ConfigWakes {
    last: Mutex<HashMap<(Option<String>, String), Seen>>,
}

impl ConfigWakes {
    /// Whether `event` is to wake the config's binding; `reads_progress`
    /// tells, for a config, whether its binding's policy reads progress
    /// (true when the binding is not known: a wake too many, never one too
    /// few). A deletion always wakes it, and the config is forgotten.
    pub fn passes(
        &self,
        event: &watcher::Event<VRouterConfig>,
        reads_progress: impl Fn(&VRouterConfig) -> bool,
    ) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(config) | watcher::Event::InitApply(config) => {
                let key = (
                    config.metadata.namespace.clone(),
                    config.metadata.name.clone().unwrap_or_default(),
                );
                let now = seen(config);
                let before = last.insert(key, now);
                wakes(before, now, reads_progress(config))
            }
            watcher::Event::Delete(config) => {
                last.remove(&(
                    config.metadata.namespace.clone(),
                    config.metadata.name.clone().unwrap_or_default(),
                ));
                true
            }
            watcher::Event::Init | watcher::Event::InitDone => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use vrouter_api::Phase;
    use vrouter_api::compose::desired_config;

    use super::*;

    fn binding() -> vrouter_api::VRouterBinding {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bgp", "namespace": "net", "uid": "uid-1"},
            "spec": {"templateRefs": [{"name": "t"}], "targetRefs": [{"name": "a"}]},
        }))
        .unwrap()
    }

    fn config() -> VRouterConfig {
        let mut config = desired_config(&binding(), "a", "cfg".into(), "cmd".into());
        config.metadata.generation = Some(1);
        config.metadata.resource_version = Some("10".into());
        config
    }

    fn applied(status: &str, generation: i64, at: i64) -> Condition {
        Condition {
            type_: condition::APPLIED.into(),
            status: status.into(),
            observed_generation: Some(generation),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: Time(crate::runtime::test_clock::at(at)),
        }
    }

    /// Each change an apply or a person makes, and whether it wakes a
    /// binding that does not read progress (Disabled, FixedInterval) and
    /// one that does (WaitForApplied).
    #[test]
    fn only_what_the_rollout_reads_wakes_the_binding() {
        type Change = fn(&mut VRouterConfig);
        let cases: [(&str, Change, bool, bool); 12] = [
            (
                "a new resourceVersion alone",
                |c| c.metadata.resource_version = Some("11".into()),
                false,
                false,
            ),
            (
                "the finalizer",
                |c| c.metadata.finalizers = Some(vec!["f".into()]),
                false,
                false,
            ),
            (
                "an annotation (pause)",
                |c| c.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into()),
                false,
                false,
            ),
            (
                "the write-ahead apply id",
                |c| c.status.get_or_insert_default().apply_id = "g1-x".into(),
                false,
                false,
            ),
            (
                "an exec pid",
                |c| c.status.get_or_insert_default().exec_pid = 7,
                false,
                false,
            ),
            (
                "a message",
                |c| c.status.get_or_insert_default().message = "m".into(),
                false,
                false,
            ),
            (
                "the phase",
                |c| c.status.get_or_insert_default().phase = Phase::Applying,
                false,
                true,
            ),
            (
                "Applied turned True",
                |c| c.status.get_or_insert_default().conditions.push(applied("True", 1, 5)),
                false,
                true,
            ),
            (
                "a new generation (spec)",
                |c| c.metadata.generation = Some(2),
                true,
                true,
            ),
            (
                "a label",
                |c| {
                    c.metadata.labels.get_or_insert_default().insert("x".into(), "y".into());
                },
                true,
                true,
            ),
            ("the controller", |c| c.metadata.owner_references = None, true, true),
            (
                "deletion began",
                |c| c.metadata.deletion_timestamp = Some(Time(crate::runtime::test_clock::at(0))),
                true,
                true,
            ),
        ];
        let before = seen(&config());
        for (what, change, plain, serial) in cases {
            let mut changed = config();
            change(&mut changed);
            let now = seen(&changed);
            assert_eq!(wakes(Some(before), now, false), plain, "{what}, progress not read");
            assert_eq!(wakes(Some(before), now, true), serial, "{what}, progress read");
        }
        assert!(wakes(None, before, false), "a config seen for the first time");
    }

    #[test]
    fn the_applied_condition_wakes_on_each_of_its_fields() {
        let with = |condition: Condition| {
            let mut c = config();
            c.status.get_or_insert_default().conditions.push(condition);
            seen(&c)
        };
        let base = with(applied("False", 1, 5));
        for other in [applied("True", 1, 5), applied("False", 2, 5), applied("False", 1, 6)] {
            assert!(wakes(Some(base), with(other), true));
        }
        let mut other_reason = applied("False", 1, 5);
        other_reason.message = "another message".into();
        assert!(!wakes(Some(base), with(other_reason), true), "message only");
    }

    #[test]
    fn only_wait_for_applied_reads_progress() {
        assert!(!reads_progress(&Policy::Disabled));
        assert!(!reads_progress(&Policy::FixedInterval {
            wait_interval: Duration::from_secs(1)
        }));
        assert!(reads_progress(&Policy::WaitForApplied {
            poll_interval: Duration::from_secs(1),
            wait_after_applied: Duration::ZERO,
        }));
    }

    #[test]
    fn the_watch_wakes_on_first_sight_and_deletion_and_compares_with_the_last_event() {
        let wakes = ConfigWakes::default();
        let plain = |_: &VRouterConfig| false;
        let first = config();
        assert!(wakes.passes(&watcher::Event::Apply(first.clone()), plain));
        let mut progressed = first.clone();
        progressed.status.get_or_insert_default().phase = Phase::Applied;
        assert!(!wakes.passes(&watcher::Event::Apply(progressed.clone()), plain));
        assert!(
            wakes.passes(&watcher::Event::Apply(first.clone()), |_| true),
            "compared with the last event, not the first"
        );
        assert!(
            !wakes.passes(&watcher::Event::InitApply(first.clone()), |_| true),
            "a relist of it unchanged"
        );
        assert!(wakes.passes(&watcher::Event::Delete(first.clone()), plain));
        assert!(
            wakes.passes(&watcher::Event::Apply(first), plain),
            "forgotten once deleted"
        );
        assert!(wakes.passes(&watcher::Event::<VRouterConfig>::InitDone, plain));
    }
}
