//! A real guest as router `r1` of one namespace, applied to by the released
//! operator binary as its own process, for fault tests that break what lies
//! between the operator and the API server while the guest runs a script.
//!
//! The guest is a QEMU VM whose qemu-ga the in-test Proxmox API relays to,
//! as in `real_guests.rs`; its journal of apply runs
//! (`vrouter_qga::arbiter`) is read through the test's own way into the
//! guest, which no API fault touches.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use vrouter_api::{Phase, VRouterConfig, VRouterConfigStatus, VRouterTarget};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::vm::router::RouterView;
use vrouter_test_peers::vm::{ChardevTransport, QemuGuest};

use super::replica_process::ReplicaProcess;
use super::{create, proxmox_cluster_with, wait_for};

/// How long a booting guest may take to answer its agent (TCG).
pub const BOOT_BOUND: Duration = Duration::from_secs(180);
const VMID: i64 = 100;

/// The operator's flags besides those of [`ReplicaProcess`]:
///
/// - drift repair off: every run in the router's journal is then one the
///   test asked for (a repair re-runs a generation on purpose);
/// - a Lease of 120 s renewed within 90 s: each fault here (an API server
///   down for seconds, a partition) is ridden out by the same process, with
///   its in-memory state, instead of ending in a restart (which
///   `real_guests.rs`'s crash points and `leader.rs` cover).
pub const OPERATOR_ARGS: &[&str] = &["--drift-repair=false", "--lease-duration=120s", "--renew-deadline=90s"];

/// Limit for a step the operator takes once the API answers again.
pub const SETTLE: Duration = Duration::from_secs(180);

pub struct GuestRig {
    pub ns: TestNamespace,
    pub view: RouterView<ChardevTransport>,
    pub operator: ReplicaProcess,
    _pve: FakeProxmox,
}

impl GuestRig {
    /// `guest` as target `r1` of a new namespace of `env` (a Proxmox cluster
    /// `pve` whose VM 100 it is), and the operator reaching the API server
    /// at `server` (the API server itself, or a fault proxy in front of it).
    /// Returns once the cluster's first sync is in: a guest booted moments
    /// ago counts as rebooted at that sync, and a config applied before it
    /// would be applied again for the reboot.
    pub async fn start(env: &TestEnv, hint: &str, guest: &Arc<QemuGuest>, server: &str) -> GuestRig {
        let ns = env.namespace(hint).await;
        GuestRig::start_in(env, ns, guest, server).await
    }

    /// [`GuestRig::start`] in a namespace the test made (and set up) itself.
    pub async fn start_in(env: &TestEnv, ns: TestNamespace, guest: &Arc<QemuGuest>, server: &str) -> GuestRig {
        guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
        let view = RouterView::new(ChardevTransport::new(guest, Duration::from_secs(60)));
        view.reset().await.unwrap();
        let pve = proxmox_cluster_with(&ns, json!({"syncInterval": "60s", "checkGuestUptime": true})).await;
        pve.add_guest_vm(VMID, "pve1", guest.clone());
        create::<VRouterTarget>(
            &ns,
            json!({"metadata": {"name": "r1"}, "spec": {
                "provider": {"type": "proxmox", "proxmox": {"vmid": VMID, "clusterRef": {"name": "pve"}}},
            }}),
        )
        .await;
        let identity = format!("{}-operator", ns.name());
        let operator = ReplicaProcess::start(env, &identity, ns.name(), &identity, server, OPERATOR_ARGS);
        let clusters = ns.api::<vrouter_api::ProxmoxCluster>();
        wait_for("the cluster's first sync", SETTLE, || async {
            clusters.get("pve").await.ok()?.status?.last_sync_time
        })
        .await;
        GuestRig {
            ns,
            view,
            operator,
            _pve: pve,
        }
    }

    /// Gives config `name` (on `r1`) the commands `commands`, creating it
    /// the first time; returns the generation that makes.
    pub async fn set_commands(&self, name: &str, commands: &str) -> i64 {
        let configs = self.ns.api::<VRouterConfig>();
        let spec = json!({"targetRef": {"name": "r1"}, "commands": commands});
        let config = match configs.get_opt(name).await.unwrap() {
            None => create::<VRouterConfig>(&self.ns, json!({"metadata": {"name": name}, "spec": spec})).await,
            Some(_) => configs
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": spec})),
                )
                .await
                .unwrap(),
        };
        config.metadata.generation.unwrap()
    }

    /// Waits for `generation` of `name` to be mid-apply: written ahead,
    /// dispatched, and its handle stored (the script runs in the guest).
    pub async fn mid_apply(&self, name: &str, generation: i64) -> VRouterConfigStatus {
        let configs = self.ns.api::<VRouterConfig>();
        wait_for(&format!("{name} generation {generation} mid-apply"), SETTLE, || async {
            let status = configs.get(name).await.ok()?.status?;
            (status.observed_generation == generation && status.phase == Phase::Applying && status.exec_pid > 0)
                .then_some(status)
        })
        .await
    }

    /// Waits until the guest's journal shows `apply_id` started.
    pub async fn script_started(&self, apply_id: &str) {
        let started = format!("{apply_id} started");
        wait_for(&format!("apply {apply_id} to start in the guest"), SETTLE, || async {
            self.view.apply_journal().await.ok()?.contains(&started).then_some(())
        })
        .await;
    }

    /// Waits until the guest's journal shows `apply_id` ended; its exit code.
    pub async fn script_ended(&self, apply_id: &str) -> String {
        let prefix = format!("{apply_id} ");
        wait_for(&format!("apply {apply_id} to end in the guest"), SETTLE, || async {
            self.view.apply_journal().await.ok()?.into_iter().find_map(|line| {
                let code = line.strip_prefix(&prefix)?;
                (code != "started").then(|| code.to_owned())
            })
        })
        .await
    }

    /// The first apply id of a run that started in the guest and is not
    /// `known`, once there is one.
    pub async fn next_run_started(&self, known: &[String]) -> String {
        wait_for("a new apply to start in the guest", SETTLE, || async {
            self.view.apply_journal().await.ok()?.into_iter().find_map(|line| {
                let id = line.strip_suffix(" started")?;
                (!known.iter().any(|k| k == id)).then(|| id.to_owned())
            })
        })
        .await
    }

    /// Waits until `generation` of `name` is Applied; its status. A
    /// generation that ends Failed fails the test with its message.
    pub async fn applied(&self, name: &str, generation: i64) -> VRouterConfigStatus {
        let configs = self.ns.api::<VRouterConfig>();
        let status = wait_for(&format!("{name} generation {generation} to end"), SETTLE, || async {
            let status = configs.get(name).await.ok()?.status?;
            (status.observed_generation == generation && matches!(status.phase, Phase::Applied | Phase::Failed))
                .then_some(status)
        })
        .await;
        assert_eq!(
            status.phase,
            Phase::Applied,
            "{name} generation {generation}: {}\n{}",
            status.message,
            self.operator.log()
        );
        status
    }

    /// How many reconciles of configs the operator has logged as failed.
    pub fn failed_config_reconciles(&self) -> usize {
        self.operator
            .log()
            .lines()
            .filter(|l| l.contains("reconcile failed") && l.contains("vrouterconfig"))
            .count()
    }

    /// Waits until the operator has logged a config reconcile failed after
    /// the `before`-th: it tried, and the fault stopped it.
    pub async fn operator_failed_since(&self, before: usize) {
        wait_for("the operator to meet the fault", SETTLE, || async {
            (self.failed_config_reconciles() > before).then_some(())
        })
        .await;
    }

    /// The router's journal holds exactly `apply_ids`, in this order, one
    /// run each and never two at once, and the guest's stubs saw one
    /// `commit` per run.
    pub async fn assert_ran_once_each(&self, apply_ids: &[String]) {
        let journal = self.view.apply_journal().await.unwrap();
        let runs = vrouter_test_peers::vm::router::runs_in_order(&journal).expect("an apply still runs on the router");
        assert_eq!(runs, apply_ids, "one run per generation, in order: {journal:?}");
        let commits = self
            .view
            .calls()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
            .count();
        assert_eq!(commits, apply_ids.len(), "one commit per run");
    }
}
