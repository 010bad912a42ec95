//! Routers that passed their readiness check a moment ago, and the OS
//! each was found to run. A readiness check is several agent round trips
//! (get-osinfo, then systemctl started and polled); a config's reconciles
//! follow each other closely while an apply runs (a dispatch, then polls
//! every few hundred milliseconds), and several configs can share one
//! router. A router that answered within [`FRESH_FOR`] is taken as still
//! ready, unless it booted since (whether its VM runs is still asked every
//! time: one call, not a check). The OS it runs changes only across a
//! boot, so a check asks it once per boot; that is one agent call less on
//! every drift read of an idle fleet.
//!
//! Keyed by the router (the VM or agent a target reaches), not by the
//! target: two targets naming one VM share the answer. One record serves
//! the config and the VRouterStatus controllers (the drift read follows an
//! apply within seconds), and an apply that just committed counts as an
//! answer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use vrouter_api::VRouterTarget;
use vrouter_api::target::SelectedProvider;
use vrouter_providers::{GuestFlavor, Provider, ProviderError};

/// How long a passed readiness check stands. Short: a router that stops
/// answering is noticed by the apply's own calls anyway, and the next
/// check after this finds it.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Entries kept before the stale ones are dropped.
const PRUNE_ABOVE: usize = 4096;

/// Routers whose OS is kept before all are forgotten.
const OS_KEPT: usize = 65_536;

/// The router a target reaches: the same for two targets naming one VM.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouterKey {
    /// VMID on the ProxmoxCluster of that name in the target's namespace.
    Proxmox {
        namespace: String,
        cluster: String,
        vmid: i64,
    },
    /// A KubeVirt VMI, in the cluster a kubeconfig Secret names (or this one).
    KubeVirt {
        kubeconfig: Option<(String, String, String)>,
        namespace: String,
        name: String,
    },
    /// A vrouter-daemon agent behind its server.
    Daemon { address: String, agent_id: String },
}

impl RouterKey {
    /// The router `target` reaches; `None` when its provider block is
    /// missing (its reconcile fails before any check).
    pub fn of(target: &VRouterTarget) -> Option<RouterKey> {
        let namespace = target.metadata.namespace.clone().unwrap_or_default();
        Some(match target.spec.provider.selected()? {
            SelectedProvider::Proxmox(p) => RouterKey::Proxmox {
                namespace,
                cluster: p.cluster_ref.name.clone(),
                vmid: p.vmid,
            },
            SelectedProvider::KubeVirt(k) => RouterKey::KubeVirt {
                kubeconfig: k.kubeconfig.as_ref().map(|c| {
                    let secret = &c.secret_ref;
                    (namespace.clone(), secret.name.clone(), secret.key.clone())
                }),
                namespace: if k.namespace.is_empty() {
                    namespace
                } else {
                    k.namespace.clone()
                },
                name: k.name.clone(),
            },
            SelectedProvider::Daemon(d) => RouterKey::Daemon {
                address: d.address.clone(),
                agent_id: d.agent_id.clone(),
            },
        })
    }
}

/// Whether a router must be checked now: it has not answered a check
/// within [`FRESH_FOR`] before `now` (an answer stamped after `now` is a
/// clock that moved back, not trusted), or it booted at or after that
/// answer.
pub fn check_due(answered: Option<Timestamp>, now: Timestamp, last_boot: Option<Timestamp>) -> bool {
    let Some(answered) = answered else {
        return true;
    };
    let age = now.duration_since(answered);
    let fresh =
        age >= SignedDuration::ZERO && age < SignedDuration::try_from(FRESH_FOR).unwrap_or(SignedDuration::ZERO);
    let booted_since = last_boot.is_some_and(|boot| boot >= answered);
    !fresh || booted_since
}

/// Whether an OS found at `learned` still stands: the router has not
/// booted since. A boot stamp has whole seconds, so one in the second the
/// OS was found counts as after it.
pub fn os_still_known(learned: Timestamp, last_boot: Option<Timestamp>) -> bool {
    let learned_second = Timestamp::from_second(learned.as_second()).unwrap_or(learned);
    last_boot.is_none_or(|boot| boot < learned_second)
}

/// The readiness check of the router `target` reaches, unless it answered
/// one within [`FRESH_FOR`] and has not booted since; the OS is asked only
/// when none is known since the last boot. A failed check forgets both.
pub async fn check(
    ready: &RecentlyReady,
    target: &VRouterTarget,
    provider: &dyn Provider,
) -> Result<(), ProviderError> {
    checked(
        ready,
        target,
        |known| async move { Ok((provider.check_ready_knowing(known).await?, ())) },
        || async {},
    )
    .await
}

/// [`check`] and the router's running config: read in the same guest call
/// as the check when one is due (a drift read of an idle router, once per
/// sync interval), alone when the router answered a check just now. The
/// inner error is a running config that could not be read from a router
/// found ready.
pub async fn check_reading_running(
    ready: &RecentlyReady,
    target: &VRouterTarget,
    provider: &dyn Provider,
) -> Result<Result<Vec<u8>, ProviderError>, ProviderError> {
    checked(
        ready,
        target,
        |known| provider.check_ready_reading_running(known),
        || provider.read_running_config(),
    )
    .await
}

/// The one home of the rule [`check`] states: `due` is the check (given
/// the OS known, if any; it returns the OS found and its reading), `fresh`
/// what stands in for it when the router answered just now.
async fn checked<T, Due, DueFut, Fresh, FreshFut>(
    ready: &RecentlyReady,
    target: &VRouterTarget,
    due: Due,
    fresh: Fresh,
) -> Result<T, ProviderError>
where
    Due: FnOnce(Option<GuestFlavor>) -> DueFut,
    DueFut: Future<Output = Result<(Option<GuestFlavor>, T), ProviderError>>,
    Fresh: FnOnce() -> FreshFut,
    FreshFut: Future<Output = T>,
{
    let Some(router) = RouterKey::of(target) else {
        return due(None).await.map(|(_, reading)| reading);
    };
    let last_boot = target
        .status
        .as_ref()
        .and_then(|s| s.last_reboot_time.as_ref())
        .map(|t| t.0);
    if !check_due(ready.answered(&router), Timestamp::now(), last_boot) {
        return Ok(fresh().await);
    }
    let known = ready.os(&router, last_boot);
    // Stamped before the call: a boot while the guest is asked is after it.
    let asked_at = Timestamp::now();
    match due(known).await {
        Ok((os, reading)) => {
            if known.is_none() {
                ready.record_os(router.clone(), os, asked_at);
            }
            ready.record(router, Timestamp::now());
            Ok(reading)
        }
        Err(e) => {
            ready.forget(&router);
            Err(e)
        }
    }
}

/// When each router last passed a readiness check, and the OS it runs.
#[derive(Default)]
pub struct RecentlyReady {
    known: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    answered: HashMap<RouterKey, Timestamp>,
    /// Kept past [`FRESH_FOR`]: until a boot, a failed check or a call
    /// that says the router is not as it was.
    os: HashMap<RouterKey, (GuestFlavor, Timestamp)>,
}

impl RecentlyReady {
    pub fn answered(&self, router: &RouterKey) -> Option<Timestamp> {
        self.lock().answered.get(router).copied()
    }

    /// `router` passed a check (or committed an apply) at `at`.
    pub fn record(&self, router: RouterKey, at: Timestamp) {
        let mut known = self.lock();
        if known.answered.len() >= PRUNE_ABOVE {
            known.answered.retain(|_, when| !check_due(Some(*when), at, None));
        }
        known.answered.insert(router, at);
    }

    /// `router` was found running `os` by asking it at `at`.
    pub fn record_os(&self, router: RouterKey, os: Option<GuestFlavor>, at: Timestamp) {
        let Some(os) = os else { return };
        let mut known = self.lock();
        if known.os.len() >= OS_KEPT {
            // Routers long gone are among them; each one still here costs
            // one question again.
            known.os.clear();
        }
        known.os.insert(router, (os, at));
    }

    /// The OS `router` was found to run, unless it booted since.
    pub fn os(&self, router: &RouterKey, last_boot: Option<Timestamp>) -> Option<GuestFlavor> {
        let known = self.lock();
        let (os, learned) = known.os.get(router)?;
        os_still_known(*learned, last_boot).then_some(*os)
    }

    /// `router` failed a check or a call: the next reconcile checks it,
    /// asking its OS again.
    pub fn forget(&self, router: &RouterKey) {
        let mut known = self.lock();
        known.answered.remove(router);
        known.os.remove(router);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_check_is_due_unless_the_router_answered_in_the_last_seconds_and_nothing_since_says_otherwise() {
        let fresh = FRESH_FOR.as_secs() as i64;
        // (answered, now, last boot, due, why)
        let cases = [
            (None, at(0), None, true, "never answered"),
            (Some(at(0)), at(0), None, false, "answered just now"),
            (Some(at(0)), at(fresh - 1), None, false, "answered within the window"),
            (Some(at(0)), at(fresh), None, true, "the window has passed"),
            (Some(at(0)), at(600), None, true, "long ago"),
            (
                Some(at(10)),
                at(0),
                None,
                true,
                "an answer from the future: the clock moved back",
            ),
            (Some(at(0)), at(1), Some(at(1)), true, "booted after it answered"),
            (Some(at(0)), at(1), Some(at(0)), true, "booted as it answered"),
            (Some(at(0)), at(1), Some(at(-30)), false, "booted before it answered"),
        ];
        for (answered, now, boot, due, why) in cases {
            assert_eq!(check_due(answered, now, boot), due, "{why}");
        }
    }

    fn target(namespace: &str, provider: serde_json::Value) -> VRouterTarget {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"name": "t", "namespace": namespace},
            "spec": {"provider": provider},
        }))
        .unwrap()
    }

    #[test]
    fn targets_naming_one_router_share_its_key_and_other_routers_do_not() {
        let pve = |ns: &str, cluster: &str, vmid: i64| {
            RouterKey::of(&target(
                ns,
                serde_json::json!({"type": "proxmox", "proxmox": {"vmid": vmid, "clusterRef": {"name": cluster}}}),
            ))
        };
        assert_eq!(pve("net", "p", 100), pve("net", "p", 100));
        assert_ne!(pve("net", "p", 100), pve("net", "p", 101), "another VMID");
        assert_ne!(pve("net", "p", 100), pve("net", "q", 100), "another cluster");
        assert_ne!(
            pve("net", "p", 100),
            pve("lab", "p", 100),
            "a cluster of that name elsewhere"
        );
        let kv = |ns: &str, vm_ns: &str| {
            RouterKey::of(&target(
                ns,
                serde_json::json!({"kubevirt": {"name": "vm-a", "namespace": vm_ns}}),
            ))
        };
        assert_eq!(
            kv("net", ""),
            kv("net", "net"),
            "the VMI's namespace defaults to the target's"
        );
        assert_eq!(kv("net", "vms"), kv("lab", "vms"), "one VMI named from two namespaces");
        let daemon = |agent: &str| {
            RouterKey::of(&target(
                "net",
                serde_json::json!({"type": "vrouter-daemon", "daemon": {"address": "127.0.0.1:9090", "agentID": agent}}),
            ))
        };
        assert_eq!(daemon("a"), daemon("a"));
        assert_ne!(daemon("a"), daemon("b"));
        assert_eq!(
            RouterKey::of(&target("net", serde_json::json!({"type": "proxmox"}))),
            None,
            "no provider block"
        );
    }

    #[test]
    fn a_failed_router_is_forgotten_and_stale_entries_do_not_pile_up() {
        let ready = RecentlyReady::default();
        let key = |vmid| RouterKey::Proxmox {
            namespace: "net".into(),
            cluster: "p".into(),
            vmid,
        };
        ready.record(key(1), at(0));
        assert_eq!(ready.answered(&key(1)), Some(at(0)));
        ready.forget(&key(1));
        assert_eq!(ready.answered(&key(1)), None);
        for vmid in 0..PRUNE_ABOVE as i64 {
            ready.record(key(vmid), at(0));
        }
        ready.record(key(-1), at(600));
        assert_eq!(ready.lock().answered.len(), 1, "only the fresh entry is kept");
    }

    #[test]
    fn an_os_stands_until_the_router_boots() {
        let learned = Timestamp::from_second(1_000_000).unwrap() + SignedDuration::from_millis(400);
        // (last boot, still known, why)
        let cases = [
            (None, true, "never booted as far as anyone saw"),
            (Some(at(-30)), true, "booted before the OS was found"),
            (Some(at(-1)), true, "booted the second before"),
            (Some(at(0)), false, "a boot stamped in that second may be after it"),
            (Some(at(5)), false, "booted since"),
        ];
        for (boot, known, why) in cases {
            assert_eq!(os_still_known(learned, boot), known, "{why}");
        }
    }

    #[test]
    fn the_os_outlives_the_fresh_window_and_goes_with_a_boot_or_a_failure() {
        let ready = RecentlyReady::default();
        let router = RouterKey::Daemon {
            address: "127.0.0.1:1".into(),
            agent_id: "a".into(),
        };
        ready.record_os(router.clone(), None, at(0));
        assert_eq!(ready.os(&router, None), None, "a provider that tells no OS");
        ready.record_os(router.clone(), Some(GuestFlavor::DozenOs), at(0));
        ready.record(router.clone(), at(0));
        for vmid in 0..PRUNE_ABOVE as i64 {
            let other = RouterKey::Proxmox {
                namespace: "net".into(),
                cluster: "p".into(),
                vmid,
            };
            ready.record(other, at(600));
        }
        assert_eq!(ready.answered(&router), None, "pruned once stale");
        assert_eq!(ready.os(&router, None), Some(GuestFlavor::DozenOs), "the OS is not");
        assert_eq!(ready.os(&router, Some(at(60))), None, "booted since");
        ready.forget(&router);
        assert_eq!(ready.os(&router, None), None, "a failed check");
    }
}
