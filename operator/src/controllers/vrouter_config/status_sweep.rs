//! Every Applied VRouterConfig has its VRouterStatus. The config controller
//! creates it on the step to Applied; this sweep compares the controllers'
//! stores and creates what is missing, so a config applied by the Go
//! operator before the switch, one whose create was left to an in-memory
//! retry when the operator restarted, and one whose VRouterStatus a person
//! deleted all get theirs back.

use std::future::Future;

use futures::StreamExt;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use vrouter_api::{Phase, VRouterConfig, VRouterStatus};

use super::ConfigContext;
use super::reconcile::ensure_status_object;
use crate::runtime::one_apply_per_router::Router;

/// The configs that are Applied since before `applied_before`, not being
/// deleted, and have no VRouterStatus of their name (the name the operator
/// creates it with) in `has_status`. A config applied since is left to the
/// create its own step to Applied makes: the sweep's store may not hold
/// that VRouterStatus yet, and a second create would only meet it.
pub fn missing<'a>(
    configs: impl IntoIterator<Item = &'a VRouterConfig>,
    has_status: impl Fn(&ObjectRef<VRouterStatus>) -> bool,
    applied_before: Timestamp,
) -> Vec<&'a VRouterConfig> {
    configs
        .into_iter()
        .filter(|c| c.status.as_ref().is_some_and(|s| s.phase == Phase::Applied))
        .filter(|c| {
            let applied = c.status.as_ref().and_then(|s| s.last_applied_time.as_ref());
            applied.is_none_or(|t| t.0 < applied_before)
        })
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            let status = ObjectRef::new(&c.name_any()).within(&c.namespace().unwrap_or_default());
            !has_status(&status)
        })
        .collect()
}

/// Sweeps every `ctx.settings.status_sweep` until `shutdown`, once both
/// stores hold their first list.
pub async fn run(
    ctx: &ConfigContext,
    configs: Store<VRouterConfig>,
    statuses: Store<VRouterStatus>,
    shutdown: impl Future<Output = ()>,
) {
    let sweeping = async {
        // Not `wait_until_ready().await`: it wakes only one of several
        // waiters, and the config controller's reads wait on this store too.
        if !crate::runtime::stores::ready(&configs).await || !crate::runtime::stores::ready(&statuses).await {
            return;
        }
        let mut tick = tokio::time::interval(ctx.settings.status_sweep);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let state = configs.state();
            let since = SignedDuration::try_from(ctx.settings.status_sweep).unwrap_or(SignedDuration::MAX);
            let applied_before = Timestamp::now().checked_sub(since).unwrap_or(Timestamp::MIN);
            let has_status = |s: &ObjectRef<VRouterStatus>| statuses.get(s).is_some();
            let due = missing(state.iter().map(|c| &**c), has_status, applied_before);
            // After a switch from the Go operator every Applied config is
            // due at once: as many creates at a time as VRouterStatuses
            // are reconciled at once, not one after another.
            let bound = usize::from(ctx.settings.concurrency.statuses.max(1));
            futures::stream::iter(due)
                .for_each_concurrent(bound, |config| create_missing(ctx, config))
                .await;
        }
    };
    tokio::select! {
        _ = sweeping => {}
        _ = shutdown => {}
    }
}

/// Creates `config`'s VRouterStatus, unless a failed create is already
/// retried by the config's own reconcile (with an event each time); the
/// sweep does not add to it.
async fn create_missing(ctx: &ConfigContext, config: &VRouterConfig) {
    let router = Router {
        namespace: config.namespace().unwrap_or_default(),
        target: config.spec.target_ref.name.clone(),
    };
    if ctx.own.status_objects_due.contains(&router, &config.name_any()) {
        return;
    }
    if let Err(error) = ensure_status_object(ctx, config, &router).await {
        tracing::warn!(config = %config.name_any(), %error, "could not create the VRouterStatus");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use vrouter_api::VRouterConfigStatus;

    fn config(name: &str, phase: Option<Phase>, deleting: bool) -> VRouterConfig {
        applied_at(name, phase, deleting, None)
    }

    fn applied_at(name: &str, phase: Option<Phase>, deleting: bool, at: Option<i64>) -> VRouterConfig {
        let mut c: VRouterConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
            "metadata": {"name": name, "namespace": "net"},
            "spec": {"targetRef": {"name": "r1"}},
        }))
        .unwrap();
        c.status = phase.map(|phase| VRouterConfigStatus {
            phase,
            last_applied_time: at.map(|s| Time(Timestamp::from_second(s).unwrap())),
            ..Default::default()
        });
        if deleting {
            c.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }
        c
    }

    #[test]
    fn only_applied_configs_without_a_status_object_are_missing_one() {
        let configs = [
            config("has-one", Some(Phase::Applied), false),
            config("applied-by-go", Some(Phase::Applied), false),
            config("failed", Some(Phase::Failed), false),
            config("pending", Some(Phase::Pending), false),
            config("applying", Some(Phase::Applying), false),
            config("new", None, false),
            config("being-deleted", Some(Phase::Applied), true),
            applied_at("applied-long-ago", Some(Phase::Applied), false, Some(1_000)),
            applied_at("applied-just-now", Some(Phase::Applied), false, Some(2_000)),
        ];
        let existing = ObjectRef::<VRouterStatus>::new("has-one").within("net");
        let before = Timestamp::from_second(2_000).unwrap();
        let names: Vec<String> = missing(&configs, |s| *s == existing, before)
            .iter()
            .map(|c| c.name_any())
            .collect();
        assert_eq!(names, ["applied-by-go", "applied-long-ago"]);
    }
}
