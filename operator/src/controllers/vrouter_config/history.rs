//! The config's revision history in its Secret `<config>-history` (format
//! and bookkeeping: `vrouter_api::history`). An apply is staged there just
//! before its script starts, with exactly the content delivered, and
//! recorded as a revision once its result is known; a rollback
//! (`spec.rollbackTo`) delivers a stored revision's content.
//!
//! Only this config's reconcile writes its history, and the controller
//! reconciles one config at a time; each write is still conditional on the
//! version read, so a second writer (an old leader) fails instead of
//! losing a revision.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use vrouter_api::constants::ROUTER_CONFIG_SECRET_TYPE as SECRET_TYPE;
use vrouter_api::history::{self, Delivery, History, Outcome};
use vrouter_api::{ControllerRef, Phase, VRouterConfig, VRouterConfigStatus};
use vrouter_providers::ProviderError;

use super::secret_rotation::SecretVersions;
use crate::runtime::context::FIELD_MANAGER;

/// How an apply ended, when `after` ends the apply `before` had in flight
/// on the router (a script running, or a confirmation pending); `None`
/// while it goes on, or when it ended without a result (the VM stopped:
/// what the router kept is unknown).
pub(super) fn outcome(before: &VRouterConfigStatus, after: &VRouterConfigStatus) -> Option<Outcome> {
    let was_in_flight = before.exec_pid > 0 || before.confirmation.is_some();
    let ended = after.exec_pid == 0 && after.confirmation.is_none();
    match (was_in_flight && ended, &after.phase) {
        (true, Phase::Applied) => Some(Outcome::Applied),
        (true, Phase::Failed) => Some(Outcome::Failed),
        _ => None,
    }
}

/// The content of `spec.rollbackTo`'s revision, or why it cannot be
/// applied (a permanent refusal: the revision is gone).
pub(super) async fn rollback_content(
    client: &kube::Client,
    config: &VRouterConfig,
    revision: u64,
) -> Result<(String, String), ProviderError> {
    let name = history::secret_name(&config.name_any());
    let unreadable = |e: String| ProviderError::Render(format!("spec.rollbackTo: reading Secret {name:?}: {e}"));
    let (stored, _) = read(client, config).await.map_err(|e| unreadable(e.to_string()))?;
    let stored = stored.ok_or_else(|| unreadable("it does not exist (no apply recorded yet)".into()))?;
    let history = History::parse(&stored).map_err(|e| unreadable(e.to_string()))?;
    match history.revision(revision) {
        Some(r) if r.delivery.content_dropped => Err(ProviderError::Render(format!(
            "spec.rollbackTo: revision {revision}'s content was too large to keep"
        ))),
        Some(r) => Ok((r.delivery.config.clone(), r.delivery.commands.clone())),
        None => Err(ProviderError::Render(format!(
            "spec.rollbackTo: revision {revision} is not in the history ({} kept)",
            history.kept()
        ))),
    }
}

/// The deliveries of the applies under way, by config, until each one's
/// result is recorded. Kept in memory: an apply whose result is only known
/// after a restart is not recorded.
#[derive(Debug, Default)]
pub struct Staged(Mutex<HashMap<(String, String), Delivery>>);

impl Staged {
    /// Keeps `delivery`, replacing an apply of `config` that never ended.
    pub(super) fn stage(&self, config: &VRouterConfig, delivery: Delivery) {
        self.lock().insert(key(config), delivery);
    }

    /// The delivery of `config`'s apply `apply_id`, once: a result seen
    /// twice is recorded once.
    pub(super) fn take(&self, config: &VRouterConfig, apply_id: &str) -> Option<Delivery> {
        let mut staged = self.lock();
        let key = key(config);
        if staged.get(&key)?.apply_id != apply_id {
            return None;
        }
        staged.remove(&key)
    }

    /// Drops what `config` had staged, when it goes.
    pub(super) fn forget(&self, config: &VRouterConfig) {
        self.lock().remove(&key(config));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Delivery>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key(config: &VRouterConfig) -> (String, String) {
    (config.namespace().unwrap_or_default(), config.name_any())
}

/// Records `delivery` as the next revision with `result`. A config with no
/// history Secret yet (as the Secret watch sees it) creates one without
/// reading it first; the create refused because it exists after all falls
/// back to reading and updating it.
pub(super) async fn record(
    client: &kube::Client,
    secrets: &SecretVersions,
    config: &VRouterConfig,
    delivery: Delivery,
    result: Outcome,
) -> Result<(), kube::Error> {
    let limit = config
        .spec
        .revision_history_limit
        .unwrap_or(vrouter_api::config::DEFAULT_REVISION_HISTORY_LIMIT);
    let apply_id = delivery.apply_id.clone();
    let add = |history: &mut History| {
        history.stage(delivery.clone());
        history.record(&apply_id, result, Timestamp::now(), limit)
    };
    let name = history::secret_name(&config.name_any());
    let known = secrets
        .get(&ObjectRef::new(&name).within(&config.namespace().unwrap_or_default()))
        .is_some();
    let mut recorded = None;
    let created = !known && {
        let mut fresh = History::default();
        recorded = add(&mut fresh);
        create(client, config, &fresh).await?
    };
    if !created {
        update(client, config, |history| recorded = add(history)).await?;
    }
    if let Some(revision) = recorded {
        tracing::info!(config = %config.name_any(), revision, apply = %apply_id, %result, "recorded a revision");
    }
    Ok(())
}

/// Creates the history Secret holding `history`; `false` when one exists.
async fn create(client: &kube::Client, config: &VRouterConfig, history: &History) -> Result<bool, kube::Error> {
    match secrets(client, config)
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..Default::default()
            },
            &secret(config, history, None),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads the history, changes it with `change`, and writes it back,
/// conditional on the version read. A history that cannot be parsed is
/// started anew (with a warning): it cannot be rolled back to either way.
async fn update(
    client: &kube::Client,
    config: &VRouterConfig,
    change: impl FnOnce(&mut History),
) -> Result<(), kube::Error> {
    let (stored, version) = read(client, config).await?;
    let mut history = match stored.as_deref().map(History::parse) {
        None => History::default(),
        Some(Ok(history)) => history,
        Some(Err(e)) => {
            tracing::warn!(config = %config.name_any(), error = %e, "starting the revision history anew");
            History::default()
        }
    };
    change(&mut history);
    write(client, config, &history, version).await
}

/// The stored history's bytes and the Secret's version; `None` for both
/// when there is no Secret yet.
async fn read(client: &kube::Client, config: &VRouterConfig) -> Result<(Option<Vec<u8>>, Option<String>), kube::Error> {
    let api = secrets(client, config);
    let Some(secret) = api.get_opt(&history::secret_name(&config.name_any())).await? else {
        return Ok((None, None));
    };
    let version = secret.resource_version();
    let bytes = secret.data.and_then(|mut d| d.remove(history::DATA_KEY)).map(|b| b.0);
    Ok((bytes, version))
}

/// Writes the history (server-side apply), owned by `config` so it goes
/// with it; of the type the operator may write (its admission policy).
async fn write(
    client: &kube::Client,
    config: &VRouterConfig,
    history: &History,
    version: Option<String>,
) -> Result<(), kube::Error> {
    let name = history::secret_name(&config.name_any());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    secrets(client, config)
        .patch(&name, &params, &Patch::Apply(&secret(config, history, version)))
        .await
        .map(|_| ())
}

/// The history Secret of `config` holding `history`.
fn secret(config: &VRouterConfig, history: &History, version: Option<String>) -> Secret {
    let name = history::secret_name(&config.name_any());
    Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            resource_version: version,
            owner_references: config.controller_ref().map(|owner| vec![owner]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                FIELD_MANAGER.to_owned(),
            )])),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([(
            history::DATA_KEY.to_owned(),
            ByteString(history.to_bytes()),
        )])),
        ..Default::default()
    }
}

fn secrets(client: &kube::Client, config: &VRouterConfig) -> Api<Secret> {
    Api::namespaced(client.clone(), &config.meta().namespace.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use vrouter_api::ConfirmationStatus;

    use super::*;

    fn status(phase: Phase, exec_pid: i64, confirming: bool) -> VRouterConfigStatus {
        VRouterConfigStatus {
            phase,
            exec_pid,
            confirmation: confirming.then(|| ConfirmationStatus {
                rollback_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
                previous_running_config_hash: String::new(),
                failure: String::new(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_an_apply_that_was_on_the_router_and_ended_with_a_result_is_recorded() {
        use Phase::*;
        let table = [
            // (before, after, recorded)
            (
                status(Applying, 7, false),
                status(Applied, 0, false),
                Some(Outcome::Applied),
            ),
            (
                status(Applying, 7, false),
                status(Failed, 0, false),
                Some(Outcome::Failed),
            ),
            // The script ended; the confirmation is still to come.
            (status(Applying, 7, false), status(Applying, 0, true), None),
            (
                status(Applying, 0, true),
                status(Applied, 0, false),
                Some(Outcome::Applied),
            ),
            (
                status(Applying, 0, true),
                status(Failed, 0, false),
                Some(Outcome::Failed),
            ),
            // Still running.
            (status(Applying, 7, false), status(Applying, 7, false), None),
            // The VM stopped under it: no result.
            (status(Applying, 7, false), status(Pending, 0, false), None),
            // Never dispatched (a refused dispatch, a target problem).
            (status(Pending, 0, false), status(Failed, 0, false), None),
            (status(Applied, 0, false), status(Applied, 0, false), None),
        ];
        for (before, after, recorded) in table {
            assert_eq!(outcome(&before, &after), recorded, "{before:?} -> {after:?}");
        }
    }
}
