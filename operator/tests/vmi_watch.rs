//! KubeVirt VirtualMachineInstance events on the real API server:
//! - a VM starting or stopping reaches its VRouterTarget through the VMI
//!   watch, not the next poll (the poll here is an hour);
//! - a VM restarted by KubeVirt (a new VMI: new uid, later creation) wakes
//!   the VRouterConfigs of the targets naming it, and one whose config is not
//!   saved in the guest gets it again, once; status changes of the running
//!   VMI wake the config and apply nothing.
//!
//! For the configs, the operator's KubeVirt provider reads the VMIs of the
//! real API server (through the in-test Kubernetes API, which relays them
//! and serves the virt-launcher pods and pods/exec) and runs the apply in a
//! real qemu-ga's guest sandbox; only the VRouterConfig controller runs, so
//! the target never changes (`vmRunning` true throughout) and every wake of
//! a config comes from its own watches.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::sync::watch;
use vrouter_api::{Phase, VRouterConfig, VRouterTarget};
use vrouter_operator::controllers::vrouter_config;
use vrouter_operator::runtime::context::{Context, Providers, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_operator::runtime::reconciler::{Scope, Shutdown};
use vrouter_operator::runtime::watches::Watches;
use vrouter_providers::{FactoryContext, GuestPaths, KubeLookup, Provider, ProviderError, build_provider};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::{AgentProcess, start_agent};

use common::{condition, config_phase, create, install_vmi_crd, site_idle, start_controllers, wait_for};

#[tokio::test]
async fn a_vmi_starting_and_stopping_updates_vm_running_at_once() {
    let env = TestEnv::shared().await;
    install_vmi_crd(&env.client()).await;
    let site = site_idle("vmi", &[]).await;
    let settings = Settings {
        target_poll: Duration::from_secs(3600),
        ..Settings::default()
    };
    let ctx = Arc::new(Context::new(
        env.client(),
        Metrics::new(),
        settings,
        site.providers.clone(),
    ));
    let _stop = start_controllers(&ctx, site.ns.name());
    create::<VRouterTarget>(
        &site.ns,
        json!({"metadata": {"name": "kv"}, "spec": {"provider": {"kubevirt": {"name": "vm1"}}}}),
    )
    .await;
    let targets = site.ns.api::<VRouterTarget>();
    let running = |want: bool| {
        let targets = targets.clone();
        async move {
            let t = targets.get("kv").await.ok()?;
            (t.status.unwrap_or_default().vm_running == want).then_some(())
        }
    };
    // Let the first poll (VMI missing → not running) happen.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let vmis = vmi_api(&site.ns);
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "uid": null}, "status": {"phase": "Running", "nodeName": "node-a"},
    }))
    .unwrap();
    vmis.create(&PostParams::default(), &vmi).await.unwrap();
    wait_for("vmRunning=true", Duration::from_secs(30), || running(true)).await;
    vmis.delete("vm1", &DeleteParams::default()).await.unwrap();
    wait_for("vmRunning=false", Duration::from_secs(30), || running(false)).await;
}

fn vmi_api(ns: &TestNamespace) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"));
    Api::namespaced_with(ns.client(), ns.name(), &resource)
}

/// The production provider factory, KubeVirt targets reached through the
/// in-test Kubernetes API, each target's guest paths in its own sandbox.
struct KubeVirtProviders {
    lookup: KubeLookup,
    kube_api: kube::Client,
    paths: HashMap<String, GuestPaths>,
}

#[async_trait]
impl Providers for KubeVirtProviders {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Arc<dyn Provider>, ProviderError> {
        let name = target.metadata.name.clone().unwrap_or_default();
        let factory = FactoryContext {
            client: Some(self.kube_api.clone()),
            guest_paths: self.paths.get(&name).cloned().unwrap_or_default(),
            ..FactoryContext::default()
        };
        Ok(Arc::from(build_provider(target, &self.lookup, &factory).await?))
    }
}

struct Guest {
    agent: AgentProcess,
    sandbox: GuestSandbox,
}

/// A namespace where each VM `v` runs as VMI `v` with a real guest agent,
/// has the target `kv-v` and the config `v` (`save: false`), and the
/// VRouterConfig controller runs for it.
struct KubeVirtSite {
    ns: TestNamespace,
    kube_api: FakeKubeApi,
    vmis: Api<DynamicObject>,
    guests: HashMap<String, Guest>,
    ctx: Arc<Context>,
    _stop: watch::Sender<bool>,
}

async fn kubevirt_site(hint: &str, vms: &[&str]) -> KubeVirtSite {
    let env = TestEnv::shared().await;
    install_vmi_crd(&env.client()).await;
    let ns = env.namespace(hint).await;
    let kube_api = FakeKubeApi::start_with_vmis_from(env.client()).await;
    let vmis = vmi_api(&ns);
    let mut guests = HashMap::new();
    let mut paths = HashMap::new();
    for vm in vms {
        let agent = start_agent();
        let sandbox = GuestSandbox::new(agent.dir(), "vyos");
        paths.insert(format!("kv-{vm}"), sandbox.paths());
        guests.insert(vm.to_string(), Guest { agent, sandbox });
    }
    let providers = Arc::new(KubeVirtProviders {
        lookup: KubeLookup::new(env.client()),
        kube_api: kube_api.client(),
        paths,
    });
    let ctx = Arc::new(Context::new(
        env.client(),
        Metrics::new(),
        Settings::default(),
        providers,
    ));
    let mut site = KubeVirtSite {
        ns,
        kube_api,
        vmis,
        guests,
        ctx,
        _stop: watch::channel(false).0,
    };
    for vm in vms {
        site.start_run(vm, 1).await;
        create::<VRouterTarget>(
            &site.ns,
            json!({"metadata": {"name": format!("kv-{vm}")}, "spec": {"provider": {"kubevirt": {"name": vm}}}}),
        )
        .await;
        create::<VRouterConfig>(
            &site.ns,
            json!({"metadata": {"name": vm}, "spec": {"targetRef": {"name": format!("kv-{vm}")}, "save": false,
                "commands": format!("set system host-name {vm}\n")}}),
        )
        .await;
    }
    site._stop = start_config_controller(&site.ctx, site.ns.name());
    for vm in vms {
        site.wait_applied(vm, 1).await;
    }
    site
}

/// Runs only the VRouterConfig controller, for one namespace.
fn start_config_controller(ctx: &Arc<Context>, namespace: &str) -> watch::Sender<bool> {
    let (stop, mut stopped) = watch::channel(false);
    let scope = Scope {
        client: ctx.client.clone(),
        namespace: Some(namespace.to_owned()),
    };
    let shutdown: Shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    }
    .boxed()
    .shared();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let watches = Watches::new(&scope);
        futures::join!(
            vrouter_config::run(ctx, &scope, &watches, shutdown.clone()),
            watches.run(shutdown)
        );
    });
    stop
}

impl KubeVirtSite {
    /// Starts run `run` of VM `vm` as KubeVirt does: a new VMI (the API
    /// server gives it its uid and creation time), then its virt-launcher
    /// pod, then the VMI Running on the pod's node.
    async fn start_run(&self, vm: &str, run: u32) -> DynamicObject {
        let vmi: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": vm}, "status": {"phase": "Scheduling"},
        }))
        .unwrap();
        let vmi = self.vmis.create(&PostParams::default(), &vmi).await.unwrap();
        let uid = vmi.metadata.uid.clone().expect("the API server sets a uid");
        self.kube_api.put_launcher_pod(
            self.ns.name(),
            &format!("virt-launcher-{vm}-{run}"),
            vm,
            &uid,
            "node-a",
            "Running",
            Some(self.guests[vm].agent.socket_path()),
        );
        self.patch_status(
            vm,
            json!({"phase": "Running", "nodeName": "node-a",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "AgentConnected", "status": "True"}]}),
        )
        .await
    }

    async fn patch_status(&self, vm: &str, status: serde_json::Value) -> DynamicObject {
        self.vmis
            .patch(vm, &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
            .await
            .unwrap()
    }

    /// KubeVirt restarts VM `vm` (its VirtualMachine stays `running: true`):
    /// the VMI of the old run goes, one for run `run` comes.
    async fn restart(&self, vm: &str, run: u32) -> DynamicObject {
        let old = self.vmis.get(vm).await.unwrap();
        self.vmis.delete(vm, &DeleteParams::default()).await.unwrap();
        wait_for("the old VMI to be gone", Duration::from_secs(30), || async {
            self.vmis.get_opt(vm).await.ok()?.is_none().then_some(())
        })
        .await;
        // The API server stamps creation in whole seconds; KubeVirt's own
        // restart takes longer than one, this test may not.
        let created = old.metadata.creation_timestamp.expect("a creation time").0;
        wait_for("the next second", Duration::from_secs(5), || async {
            (Timestamp::now() >= created + SignedDuration::from_secs(1)).then_some(())
        })
        .await;
        self.start_run(vm, run).await
    }

    /// The applies VM `vm`'s guest ran, counted by their commits.
    fn applies(&self, vm: &str) -> usize {
        self.guests[vm]
            .sandbox
            .calls()
            .iter()
            .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
            .count()
    }

    async fn wait_applied(&self, vm: &str, applies: usize) {
        let configs = self.ns.api::<VRouterConfig>();
        wait_for(
            &format!("config {vm} applied {applies} time(s)"),
            Duration::from_secs(90),
            || async {
                let (phase, applied, _) = config_phase(&configs, vm).await?;
                (phase == Phase::Applied
                    && applied == Some(("True".into(), "ConfigApplied".into()))
                    && self.applies(vm) == applies)
                    .then_some(())
            },
        )
        .await;
    }

    /// Waits until a config reconcile read VMI `vm` as `seen` is, and every
    /// reconcile started has finished: the config has acted on that VMI.
    async fn reconciled_with(&self, vm: &str, seen: &DynamicObject) {
        let version = seen.metadata.resource_version.clone().unwrap();
        wait_for(
            &format!("a config reconcile that read VMI {vm} at version {version}"),
            Duration::from_secs(60),
            || async {
                let metrics = self.ctx.metrics.encode();
                let started = counter(&metrics, "vrouter_reconciles_total{controller=\"vrouterconfig\"}");
                let finished = counter(
                    &metrics,
                    "vrouter_reconcile_duration_seconds_count{controller=\"vrouterconfig\"}",
                );
                (self.kube_api.served_vmi(self.ns.name(), vm, &version) && started == finished).then_some(())
            },
        )
        .await;
    }
}

fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A status change KubeVirt makes to a running VMI: the guest agent's
/// report and a condition, nothing about the run itself.
fn status_churn(n: u32) -> serde_json::Value {
    json!({"guestOSInfo": {"id": "vyos", "name": "VyOS", "kernelRelease": format!("6.6.{n}-vyos")},
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "AgentConnected", "status": "True"},
            {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable", "message": format!("churn {n}")}]})
}

#[tokio::test]
async fn a_restarted_vmi_re_applies_its_unsaved_config_exactly_once() {
    let site = kubevirt_site("vmi-restart", &["vm-a", "vm-b"]).await;
    let configs = site.ns.api::<VRouterConfig>();
    let first = configs.get("vm-a").await.unwrap().status.unwrap();
    let first_run = site.vmis.get("vm-a").await.unwrap();
    assert_eq!(
        first.last_reboot_handled_time.map(|t| t.0),
        first_run.metadata.creation_timestamp.map(|t| t.0),
        "the first apply records the run it went to"
    );

    // A status change first: once a reconcile has read it and nothing runs,
    // the config has acted on everything before, so what follows the
    // restart is the VMI watch's doing.
    let churned = site.patch_status("vm-a", status_churn(0)).await;
    site.reconciled_with("vm-a", &churned).await;
    assert_eq!(site.applies("vm-a"), 1);

    let second_run = site.restart("vm-a", 2).await;
    site.wait_applied("vm-a", 2).await;
    let status = configs.get("vm-a").await.unwrap().status.unwrap();
    assert_eq!(
        status.last_reboot_handled_time.map(|t| t.0),
        second_run.metadata.creation_timestamp.map(|t| t.0),
        "the re-apply records the new run"
    );
    assert_eq!(status.observed_generation, first.observed_generation, "the same spec");

    // The same run changing its status afterwards applies nothing more.
    let churned = site.patch_status("vm-a", status_churn(1)).await;
    site.reconciled_with("vm-a", &churned).await;
    assert_eq!(site.applies("vm-a"), 2, "exactly one re-apply for one restart");
    let calls = site.guests["vm-a"].sandbox.calls();
    assert!(!calls.contains(&"save".to_string()), "save: false: {calls:?}");
    // The other VM did not restart: its config was not applied again.
    assert_eq!(site.applies("vm-b"), 1);
    let (phase, applied, _) = config_phase(&configs, "vm-b").await.unwrap();
    assert_eq!(phase, Phase::Applied);
    assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
}

#[tokio::test]
async fn status_changes_of_a_running_vmi_wake_its_config_and_apply_nothing() {
    let site = kubevirt_site("vmi-churn", &["vm-a"]).await;
    for n in 1..=3 {
        let churned = site.patch_status("vm-a", status_churn(n)).await;
        site.reconciled_with("vm-a", &churned).await;
        assert_eq!(site.applies("vm-a"), 1, "after status change {n}");
    }
    let config = site.ns.api::<VRouterConfig>().get("vm-a").await.unwrap();
    let status = config.status.unwrap();
    assert_eq!(status.phase, Phase::Applied);
    assert_eq!(
        condition(&status.conditions, "Applied"),
        Some(("True".into(), "ConfigApplied".into()))
    );
}
