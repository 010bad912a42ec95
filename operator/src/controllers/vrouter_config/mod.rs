//! The VRouterConfig controller: applies one router's config and reports the
//! result (spec §7.2). `decide` holds every decision; `reconcile` performs
//! the I/O around it; `one_apply_per_router` keeps two configs from applying
//! to one router at once.

mod commit_comment;
mod confirm;
pub mod decide;
mod history;
mod reconcile;
pub mod recover;
mod secret_params;
pub mod secret_rotation;
pub mod status_sweep;

use std::sync::Arc;

use futures::TryStreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use vrouter_api::{VRouterConfig, VRouterTarget};

use crate::controllers::vrouter_target;
use crate::runtime::context::Context;
use crate::runtime::controller_context::Ctx;
use crate::runtime::one_apply_per_router::RouterLocks;
use crate::runtime::own_writes::OwnWrites;
use crate::runtime::recently_ready::RouterKey;
use crate::runtime::reconciler::{self, Scope, Shutdown};
use crate::runtime::status_object_retry::StatusObjectsDue;
use crate::runtime::watches::{Events, Watches};

pub use reconcile::CONTROLLER;
pub(crate) use reconcile::summarised;

/// What the config reconciler reads: the shared [`Context`], every
/// VRouterConfig and VRouterTarget as this controller's own watches have
/// them, and the versions its own status writes produced. The stores are
/// made with the controller: a reconcile reads its target from there (the
/// watch that wakes it filled the store first), and the
/// one-apply-per-router check reads the stored statuses after a restart.
pub type ConfigContext = Ctx<ConfigOwn>;

/// What only this controller's reconciles read (see [`ConfigContext`]).
pub struct ConfigOwn {
    configs: Store<VRouterConfig>,
    targets: Store<VRouterTarget>,
    own_writes: Arc<OwnWrites>,
    /// Which config's apply runs on which router: one at a time.
    router_locks: RouterLocks,
    /// Applied configs whose VRouterStatus is still to be created.
    status_objects_due: StatusObjectsDue,
    /// The Secrets' resourceVersions, for rotation (see [`secret_rotation`]).
    secrets: secret_rotation::SecretVersions,
    /// What each apply under way delivered, until its result is recorded.
    staged: history::Staged,
}

/// Runs the VRouterConfig controller until `shutdown`. Every change of a
/// config wakes it except the echoes of its own status writes (see
/// [`config_triggers`]). A target's change (vmRunning, lastRebootTime) concerns
/// every config that points at it; so does a change of the KubeVirt VMI a
/// target names, when this cluster serves KubeVirt: a restarted VM is a new
/// VMI, and the config learns of it from that VMI's events even while the
/// target's status stays as it was.
pub async fn run(ctx: Arc<Context>, scope: &Scope, watches: &Watches, shutdown: Shutdown) {
    let wc = watcher::Config::default();
    let own_writes = Arc::new(OwnWrites::default());
    let configs = watches.configs.store();
    let config_events = config_triggers(watches.configs.subscribe(), own_writes.clone());
    let controller = Controller::for_stream(config_events, configs.clone())
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency.configs));
    let targets = watches.targets.store();
    let target_events = watches.targets.subscribe().touched_objects();
    let statuses = watches.statuses.store();
    let by_target = configs.clone();
    let controller = controller.watches_stream(target_events, move |target| {
        configs_of_targets(by_target.state().iter().map(|c| &**c), [&target])
    });
    // A Secret that changed concerns the configs naming it.
    let (secrets, secret_events) = secret_rotation::watch(scope);
    let by_secret = configs.clone();
    let controller = controller.watches_stream(secret_events, move |secret| {
        secret_rotation::configs_naming(by_secret.state().iter(), &secret)
    });
    let recently_ready = ctx.recently_ready.clone();
    let controller = match vrouter_target::vmi_resource(&scope.client).await {
        Some(resource) => {
            let (by_vmi, targets) = (configs.clone(), targets.clone());
            let vmis = match &scope.namespace {
                Some(ns) => Api::<DynamicObject>::namespaced_with(scope.client.clone(), ns, &resource),
                None => Api::<DynamicObject>::all_with(scope.client.clone(), &resource),
            };
            let recently_ready = recently_ready.clone();
            controller.watches_with(vmis, resource, wc, move |vmi| {
                let (targets, configs) = (targets.state(), by_vmi.state());
                let named = vrouter_target::targets_naming_vmi(
                    &vmi.namespace().unwrap_or_default(),
                    &vmi.name_any(),
                    targets.iter().map(|t| &**t),
                );
                // A VMI that changed may be a VM restarted a moment ago, its
                // agent not up yet: what it answered before counts no more.
                for router in named.iter().filter_map(|t| RouterKey::of(t)) {
                    recently_ready.forget(&router);
                }
                configs_of_targets(configs.iter().map(|c| &**c), named)
            })
        }
        None => controller,
    };
    let swept = configs.clone();
    let ctx = Arc::new(Ctx::new(
        ctx,
        ConfigOwn {
            configs,
            targets,
            own_writes,
            router_locks: RouterLocks::default(),
            status_objects_due: StatusObjectsDue::default(),
            secrets,
            staged: history::Staged::default(),
        },
    ));
    // Every Applied config has its VRouterStatus, however it became Applied.
    futures::join!(
        reconciler::run::<reconcile::ConfigReconciler>(controller, ctx.clone(), shutdown.clone()),
        status_sweep::run(&ctx, swept, statuses, shutdown.clone()),
    );
}

/// The config watch's events that wake the controller, after `writer` has
/// stored each of them. A status write of the controller's own comes back
/// as an event of exactly the version the write returned (recorded in
/// `own_writes`): that event is dropped, since it only shows what the
/// reconcile that wrote it had decided, and reconciling it again read the
/// router again for nothing (most of the 5.7 reconciles per config in
/// issue 25's run). Every other change has a version of its own and
/// passes: a new generation, a label or an annotation (paused), the
/// finalizer patch (not a status write), a status someone else wrote
/// (drift detection sending the config back to Pending), a deletion, and
/// every object of a relist. An echo that overtakes its write's response
/// passes too: one reconcile too many, never one too few.
pub fn config_triggers(
    events: Events<VRouterConfig>,
    own_writes: Arc<OwnWrites>,
) -> impl futures::Stream<Item = Result<VRouterConfig, watcher::Error>> + Send + 'static {
    events
        .try_filter(move |event| std::future::ready(own_writes.passes(event)))
        .applied_objects()
}

/// The configs that point at one of `targets` (same namespace, by name).
pub fn configs_of_targets<'a>(
    configs: impl IntoIterator<Item = &'a VRouterConfig>,
    targets: impl IntoIterator<Item = &'a VRouterTarget>,
) -> Vec<ObjectRef<VRouterConfig>> {
    let targets: Vec<(String, String)> = targets
        .into_iter()
        .map(|t| (t.namespace().unwrap_or_default(), t.name_any()))
        .collect();
    if targets.is_empty() {
        return Vec::new();
    }
    configs
        .into_iter()
        .filter(|c| {
            let namespace = c.namespace().unwrap_or_default();
            targets
                .iter()
                .any(|(ns, name)| *ns == namespace && c.spec.target_ref.name == *name)
        })
        .map(ObjectRef::from_obj)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<K: serde::de::DeserializeOwned>(kind: &str, namespace: &str, name: &str, spec: &str) -> K {
        let mut value: serde_json::Value = serde_yaml::from_str(&format!("spec: {spec}")).unwrap();
        value["apiVersion"] = "vrouter.kojuro.date/v1".into();
        value["kind"] = kind.into();
        value["metadata"] = serde_json::json!({"name": name, "namespace": namespace});
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_status_message_quoting_a_router_is_bounded_with_its_conditions() {
        let config: VRouterConfig = object("VRouterConfig", "net", "c", "{targetRef: {name: r1}}");
        let status = vrouter_api::VRouterConfigStatus {
            phase: vrouter_api::Phase::Failed,
            message: format!("apply script exited with code 1: {}", "\u{1F600}".repeat(50_000)),
            ..Default::default()
        };
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let status = summarised(status, &config, None, now);
        let limit = vrouter_api::text::MAX_MESSAGE_BYTES;
        assert!(status.message.len() <= limit, "{}", status.message.len());
        assert!(status.message.ends_with(vrouter_api::text::CUT_MARKER));
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert!(ready.message.len() <= limit && ready.message.starts_with("apply script exited with code 1"));
        // Summarising the stored status again changes nothing: no write.
        assert_eq!(summarised(status.clone(), &config, None, now), status);
    }

    #[test]
    fn a_vmi_event_concerns_only_the_configs_of_the_targets_naming_that_vmi() {
        let targets: Vec<VRouterTarget> = vec![
            object("VRouterTarget", "net", "kv-a", "{provider: {kubevirt: {name: vm-a}}}"),
            object("VRouterTarget", "net", "kv-b", "{provider: {kubevirt: {name: vm-b}}}"),
            // Its VMI lives in another namespace than the target.
            object(
                "VRouterTarget",
                "net",
                "kv-far",
                "{provider: {kubevirt: {name: vm-a, namespace: vms}}}",
            ),
            object("VRouterTarget", "lab", "kv-a", "{provider: {kubevirt: {name: vm-a}}}"),
            object(
                "VRouterTarget",
                "net",
                "pve",
                "{provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: p}}}}",
            ),
        ];
        let configs: Vec<VRouterConfig> = vec![
            object("VRouterConfig", "net", "a1", "{targetRef: {name: kv-a}}"),
            object("VRouterConfig", "net", "a2", "{targetRef: {name: kv-a}}"),
            object("VRouterConfig", "net", "b", "{targetRef: {name: kv-b}}"),
            object("VRouterConfig", "net", "far", "{targetRef: {name: kv-far}}"),
            object("VRouterConfig", "lab", "lab-a", "{targetRef: {name: kv-a}}"),
            object("VRouterConfig", "net", "p", "{targetRef: {name: pve}}"),
        ];
        let woken = |ns: &str, vmi: &str| -> Vec<String> {
            let named = vrouter_target::targets_naming_vmi(ns, vmi, &targets);
            configs_of_targets(&configs, named)
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect()
        };
        assert_eq!(woken("net", "vm-a"), ["net/a1", "net/a2"]);
        assert_eq!(woken("net", "vm-b"), ["net/b"]);
        assert_eq!(woken("vms", "vm-a"), ["net/far"]);
        assert_eq!(woken("lab", "vm-a"), ["lab/lab-a"]);
        assert!(woken("net", "vm-c").is_empty(), "no target names it");
        assert!(woken("other", "vm-a").is_empty(), "same name, other namespace");
    }
}
