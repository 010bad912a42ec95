//! Routers that passed their readiness check a moment ago. A readiness
//! check is several agent round trips (ping, get-osinfo, systemctl); a
//! config's reconciles follow each other closely while an apply runs (a
//! dispatch, then polls every few hundred milliseconds), and several
//! configs can share one router. A router that answered within
//! [`FRESH_FOR`] is taken as still ready, unless it booted since (whether
//! its VM runs is still asked every time: one call, not a check).
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

/// How long a passed readiness check stands. Short: a router that stops
/// answering is noticed by the apply's own calls anyway, and the next
/// check after this finds it.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Entries kept before the stale ones are dropped.
const PRUNE_ABOVE: usize = 4096;

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

/// When each router last passed a readiness check.
#[derive(Default)]
pub struct RecentlyReady {
    answered: Mutex<HashMap<RouterKey, Timestamp>>,
}

impl RecentlyReady {
    pub fn answered(&self, router: &RouterKey) -> Option<Timestamp> {
        self.lock().get(router).copied()
    }

    /// `router` passed a check at `at`.
    pub fn record(&self, router: RouterKey, at: Timestamp) {
        let mut answered = self.lock();
        if answered.len() >= PRUNE_ABOVE {
            answered.retain(|_, when| !check_due(Some(*when), at, None));
        }
        answered.insert(router, at);
    }

    /// `router` failed a check or a call: the next reconcile checks it.
    pub fn forget(&self, router: &RouterKey) {
        self.lock().remove(router);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RouterKey, Timestamp>> {
        self.answered.lock().unwrap_or_else(|e| e.into_inner())
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
        assert_eq!(ready.lock().len(), 1, "only the fresh entry is kept");
    }
}
