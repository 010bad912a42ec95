//! A paused binding (`spec.paused`): its configs carry the label
//! [`LABEL_BINDING_PAUSED`], which the config controller reads through
//! `VRouterConfig::pause` (the one home of the pause rule), so no config of
//! the binding starts a new apply while one in flight finishes. The binding
//! keeps writing its configs' specs meanwhile: resumed, they apply.

use std::sync::Arc;

use kube::api::{Api, Patch};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::{LABEL_BINDING_PAUSED, condition, event, reason};
use vrouter_api::{VRouterBinding, VRouterConfig};

use super::BindingContext;
use super::error::Error;
use crate::runtime::conditions::Wanted;
use crate::runtime::own_writes::OwnWrites;

/// Whether `config` carries the paused label.
pub fn is_marked(config: &VRouterConfig) -> bool {
    config.labels().get(LABEL_BINDING_PAUSED).is_some_and(|v| v == "true")
}

/// The configs of `existing` whose label disagrees with `paused`.
pub fn to_mark(existing: &[Arc<VRouterConfig>], paused: bool) -> impl Iterator<Item = &VRouterConfig> {
    existing.iter().map(|c| &**c).filter(move |c| is_marked(c) != paused)
}

/// Sets (or removes) the paused label on every config of `existing` that
/// disagrees with `paused`; each write is recorded in `own` like the
/// binding's other config writes.
pub async fn mark(
    api: &Api<VRouterConfig>,
    own: &OwnWrites,
    existing: &[Arc<VRouterConfig>],
    paused: bool,
) -> Result<(), Error> {
    let value = paused.then_some("true");
    let patch = serde_json::json!({"metadata": {"labels": {LABEL_BINDING_PAUSED: value}}});
    for config in to_mark(existing, paused) {
        match api
            .patch(
                &config.name_any(),
                &crate::runtime::context::patch_params(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => own.record(&written),
            // Deleted meanwhile: nothing left to pause.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `ready`, or `Ready=False/Paused` while the binding is paused.
pub fn ready_or_paused<'a>(binding: &VRouterBinding, configs: usize, ready: Wanted<'a>) -> Wanted<'a> {
    if !binding.spec.paused {
        return ready;
    }
    Wanted {
        type_: condition::READY,
        status: false,
        reason: reason::PAUSED,
        message: format!("spec.paused: none of its {configs} VRouterConfigs starts a new apply"),
        observed_generation: binding.meta().generation,
    }
}

/// Records a `Paused` event when the binding becomes paused and `Resumed`
/// when it stops being paused, as told by the Ready reason its status had
/// before this reconcile.
pub async fn announce(ctx: &BindingContext, binding: &VRouterBinding) {
    let was_paused = binding
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::READY))
        .is_some_and(|c| c.reason == reason::PAUSED);
    match (was_paused, binding.spec.paused) {
        (false, true) => {
            let note = "spec.paused: its VRouterConfigs start no new apply; applies in flight finish".to_owned();
            ctx.event(binding, EventType::Normal, reason::PAUSED, note).await;
        }
        (true, false) => {
            let note = "spec.paused is off: its VRouterConfigs apply again".to_owned();
            ctx.event(binding, EventType::Normal, event::RESUMED, note).await;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(label: Option<&str>) -> Arc<VRouterConfig> {
        let mut c = VRouterConfig::new("b.r", Default::default());
        if let Some(v) = label {
            c.metadata.labels = Some([(LABEL_BINDING_PAUSED.to_owned(), v.to_owned())].into());
        }
        Arc::new(c)
    }

    #[test]
    fn only_configs_whose_label_disagrees_are_marked() {
        let existing = [config(None), config(Some("true")), config(Some("false"))];
        // (paused, how many configs get a write)
        let cases = [(true, 2), (false, 1)];
        for (paused, writes) in cases {
            assert_eq!(to_mark(&existing, paused).count(), writes, "paused={paused}");
        }
    }

    #[test]
    fn a_paused_binding_is_not_ready_with_reason_paused() {
        let ready = Wanted {
            type_: condition::READY,
            status: true,
            reason: reason::RECONCILE_SUCCEEDED,
            message: String::new(),
            observed_generation: Some(2),
        };
        let mut binding = VRouterBinding::new("b", Default::default());
        binding.metadata.generation = Some(2);
        assert_eq!(
            ready_or_paused(&binding, 3, ready.clone()).reason,
            reason::RECONCILE_SUCCEEDED
        );
        binding.spec.paused = true;
        let paused = ready_or_paused(&binding, 3, ready);
        assert_eq!((paused.status, paused.reason), (false, reason::PAUSED));
        assert!(paused.message.contains("3 VRouterConfigs"), "{}", paused.message);
    }
}
