//! Starts the controllers and maps watch events of referenced kinds to the
//! objects that reference them.

use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, controller, watcher};
use vrouter_api::{VRouterBinding, VRouterConfig, VRouterParams, VRouterStatus, VRouterTarget, VRouterTemplate};

use crate::context::Context;
use crate::proxmoxcluster;
use crate::{vrouterbinding, vrouterconfig, vrouterstatus, vroutertarget};

/// VRouterConfigs reconciled at the same time.
pub const CONFIG_CONCURRENCY: u16 = 32;

/// Every object of kind `K` the controllers watch: one namespace, or all.
fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs every controller until `shutdown` resolves, watching `namespace`
/// only when given (`--watch-namespace`), else the whole cluster.
pub async fn controllers(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = namespace.as_deref();
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let wc = watcher::Config::default();
    let wc_status = wc.clone();
    let shutdown_status = shutdown.clone();

    // VRouterConfig: a target change (vmRunning, lastRebootTime) concerns
    // every config that points at it.
    // At most this many applies reconcile at once: a 1,000-target rollout
    // otherwise opens 1,000 provider connections and status writes together
    // (docs/benchmarks.md).
    let configs = Controller::new(api::<VRouterConfig>(&client, ns), wc.clone())
        .with_config(controller::Config::default().concurrency(CONFIG_CONCURRENCY));
    let config_store = configs.store();
    *ctx.configs_seen.write().unwrap_or_else(|e| e.into_inner()) = Some(config_store.clone());
    let sweep_configs = config_store.clone();
    let configs = configs
        .watches(api::<VRouterTarget>(&client, ns), wc.clone(), move |target| {
            let namespace = target.namespace().unwrap_or_default();
            let name = target.name_any();
            config_store
                .state()
                .into_iter()
                .filter(|c| c.namespace().as_deref() == Some(&namespace) && c.spec.target_ref.name == name)
                .map(|c| ObjectRef::from_obj(&*c))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.clone())
        .run(
            vrouterconfig::reconcile::reconcile,
            vrouterconfig::reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(|_| async {});

    // VRouterBinding: templates, params and targets map to the bindings
    // that reference them; owned configs wake their binding (WaitForApplied
    // sees an apply finish at once instead of at the next poll).
    let bindings = Controller::new(api::<VRouterBinding>(&client, ns), wc.clone());
    let store = bindings.store();
    let referencing = move |namespace: String, pick: fn(&VRouterBinding) -> Vec<&str>, name: String| {
        store
            .state()
            .into_iter()
            .filter(|b| b.namespace().as_deref() == Some(&namespace) && pick(b).contains(&name.as_str()))
            .map(|b| ObjectRef::from_obj(&*b))
            .collect::<Vec<_>>()
    };
    let (by_template, by_params, by_target) = (referencing.clone(), referencing.clone(), referencing);
    let bindings = bindings
        .owns(api::<VRouterConfig>(&client, ns), wc.clone())
        .watches(api::<VRouterTemplate>(&client, ns), wc.clone(), move |t| {
            by_template(
                t.namespace().unwrap_or_default(),
                |b| b.spec.effective_template_refs().map(|r| r.name.as_str()).collect(),
                t.name_any(),
            )
        })
        .watches(api::<VRouterParams>(&client, ns), wc.clone(), move |p| {
            by_params(
                p.namespace().unwrap_or_default(),
                |b| b.spec.params_refs.iter().map(|r| r.name.as_str()).collect(),
                p.name_any(),
            )
        })
        .watches(api::<VRouterTarget>(&client, ns), wc.clone(), move |t| {
            by_target(
                t.namespace().unwrap_or_default(),
                |b| b.spec.target_refs.iter().map(|r| r.name.as_str()).collect(),
                t.name_any(),
            )
        })
        .graceful_shutdown_on(shutdown.clone())
        .run(
            vrouterbinding::reconcile::reconcile,
            vrouterbinding::reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(|_| async {});

    // ProxmoxCluster: a target maps to the cluster its clusterRef names
    // (same namespace only), so a new target gets its node promptly.
    let proxmox = Controller::new(
        api::<vrouter_api::ProxmoxCluster>(&client, ns),
        watcher::Config::default(),
    )
    .watches(
        api::<VRouterTarget>(&client, ns),
        watcher::Config::default(),
        |target| {
            let namespace = target.namespace().unwrap_or_default();
            target
                .spec
                .provider
                .proxmox
                .as_ref()
                .filter(|p| !p.cluster_ref.crosses_namespace(&namespace))
                .map(|p| ObjectRef::new(&p.cluster_ref.name).within(&namespace))
        },
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        proxmoxcluster::reconcile::reconcile,
        proxmoxcluster::reconcile::error_policy,
        ctx.clone(),
    )
    .for_each(|_| async {});

    let targets = Controller::new(api::<VRouterTarget>(&client, ns), wc.clone());
    // KubeVirt VMs: a VMI event polls the targets that name it at once,
    // when this cluster serves KubeVirt at all.
    let targets = match vroutertarget::vmi_resource(&client).await {
        Some(resource) => {
            let store = targets.store();
            let vmis = match ns {
                Some(ns) => Api::<kube::core::DynamicObject>::namespaced_with(client.clone(), ns, &resource),
                None => Api::<kube::core::DynamicObject>::all_with(client.clone(), &resource),
            };
            targets.watches_with(vmis, resource, wc, move |vmi| {
                let state = store.state();
                vroutertarget::targets_for_vmi(
                    &vmi.namespace().unwrap_or_default(),
                    &vmi.name_any(),
                    state.iter().map(|t| &**t),
                )
            })
        }
        None => targets,
    };
    let targets = targets
        .graceful_shutdown_on(shutdown)
        .run(vroutertarget::reconcile, vroutertarget::error_policy, ctx.clone())
        .for_each(|_| async {});

    // VRouterStatus: a config's change (a new apply, a pause lifted) wakes
    // the status object watching it, so a new baseline is taken promptly.
    let statuses = Controller::new(api::<VRouterStatus>(&client, ns), wc_status.clone());
    let status_store = statuses.store();
    let sweep_statuses = status_store.clone();
    let statuses = statuses
        .owns(
            api::<k8s_openapi::api::core::v1::ConfigMap>(&client, ns),
            wc_status.clone(),
        )
        .watches(api::<VRouterConfig>(&client, ns), wc_status, move |config| {
            let namespace = config.namespace().unwrap_or_default();
            let name = config.name_any();
            status_store
                .state()
                .into_iter()
                .filter(|s| s.namespace().as_deref() == Some(&namespace) && s.spec.config_ref.name == name)
                .map(|s| ObjectRef::from_obj(&*s))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown_status.clone())
        .run(
            vrouterstatus::reconcile::reconcile,
            vrouterstatus::reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(|_| async {});

    // Every Applied config has its VRouterStatus, however it became Applied.
    let sweep = vrouterconfig::status_sweep::run(&ctx, sweep_configs, sweep_statuses, shutdown_status);

    futures::join!(configs, bindings, targets, statuses, proxmox, sweep);
}

/// Why [`lead`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// `shutdown` was signalled; the controllers finished their work.
    Shutdown,
    /// Another replica holds the lease now; the controllers were stopped.
    LostLease,
}

/// Waits to lead (when `candidate` is given), then runs the controllers
/// until shutdown or until the lease is lost — whichever comes first.
pub async fn lead(
    ctx: Arc<Context>,
    candidate: Option<&mut crate::leader::Candidate>,
    namespace: Option<String>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Ended {
    let mut leading = candidate.map(|c| c.leading.clone());
    if let Some(leading) = leading.as_mut() {
        // The `Ref` guards `wait_for` returns are dropped inside each future:
        // they must not be held across the select.
        tokio::select! {
            became = async { leading.wait_for(|l| *l).await.is_ok() } => if !became { return Ended::LostLease },
            _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => return Ended::Shutdown,
        }
        tracing::info!("leading: starting controllers");
    }
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let running = controllers(ctx, namespace, async move {
        let _ = stopped.wait_for(|s| *s).await;
    });
    tokio::pin!(running);
    let lost = async {
        match leading.as_mut() {
            Some(leading) => {
                let _ = leading.wait_for(|l| !*l).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = &mut running => Ended::Shutdown,
        _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => {
            let _ = stop.send(true);
            running.await;
            Ended::Shutdown
        }
        _ = lost => {
            // Stop at once: another replica may already be reconciling.
            Ended::LostLease
        }
    }
}
