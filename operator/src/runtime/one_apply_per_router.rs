//! One apply at a time per router. Every apply runs a configure session:
//! two VRouterConfigs reaching one VM (two bindings, a binding and a
//! hand-written config, or two VRouterTargets naming the same VM) would
//! otherwise interleave their sessions.
//!
//! The router itself is the arbiter: an exclusive lock is held for each
//! whole apply script (`vrouter_qga::arbiter`), whoever dispatched it and
//! even when the process the agent started is killed, so applies never
//! overlap even across operator processes. This hold
//! is the operator's courtesy on top: a config whose VM is busy waits here,
//! with a message saying for whom, instead of spending its apply timeout
//! queued on the router's lock. It is keyed by the resolved VM ([`Vm`]),
//! not by the VRouterTarget (the same key as `recently_ready`'s), lives in the process's memory, is taken when
//! an apply is dispatched, held while polls find it running, and released
//! when its result is in. A holder that disappears (its config deleted
//! mid-apply) cannot block a VM for longer than the apply timeout: every
//! hold expires then. A restarted process starts with no holds; what it
//! knows then is the configs' stored status, read by [`in_flight_elsewhere`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use vrouter_api::VRouterConfig;

pub use super::recently_ready::RouterKey;

/// A router, as the configs name it: namespace and VRouterTarget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Router {
    pub namespace: String,
    pub target: String,
}

/// A router as the machine it is ([`RouterKey`]): two VRouterTargets
/// naming one VM are one `Vm`.
pub type Vm = RouterKey;

/// How a config is named in a hold: `namespace/name`, since configs of
/// several namespaces can reach one VM.
pub fn holder(config: &VRouterConfig) -> String {
    format!("{}/{}", config.namespace().unwrap_or_default(), config.name_any())
}

#[derive(Debug)]
struct Hold {
    config: String,
    until: Instant,
}

#[derive(Debug, Default)]
pub struct RouterLocks {
    holds: Mutex<HashMap<Vm, Hold>>,
}

impl RouterLocks {
    /// Takes (or renews) `router` for `config` until `until`, unless another
    /// config holds it unexpired: then that config's name. Check and take
    /// are one step, so two configs reconciled at once cannot both win.
    pub fn try_hold(&self, router: &Vm, config: &str, until: Instant, now: Instant) -> Result<(), String> {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hold) = holds.get(router)
            && hold.config != config
            && hold.until > now
        {
            return Err(hold.config.clone());
        }
        holds.insert(
            router.clone(),
            Hold {
                config: config.to_owned(),
                until,
            },
        );
        Ok(())
    }

    /// [`RouterLocks::try_hold`] for one dispatch, as a guard: dropped, it
    /// releases the hold, so no way out of the dispatch (an early return,
    /// an error, a panic) keeps a router whose apply never started.
    pub fn hold(&self, router: &Vm, config: &str, until: Instant, now: Instant) -> Result<RouterHold<'_>, String> {
        self.try_hold(router, config, until, now)?;
        Ok(RouterHold {
            locks: self,
            config: Some(config.to_owned()),
        })
    }

    /// The config holding `router` unexpired, when it is not `config`.
    pub fn held_by_other(&self, router: &Vm, config: &str, now: Instant) -> Option<String> {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds
            .get(router)
            .filter(|hold| hold.config != config && hold.until > now)
            .map(|hold| hold.config.clone())
    }

    /// `config`'s apply is over, on whichever VM it held; another
    /// config's hold stays.
    pub fn release(&self, config: &str) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.retain(|_, hold| hold.config != config);
    }
}

/// A hold on a router taken for one dispatch (see [`RouterLocks::hold`]).
/// Invariant: while it lives, its config holds the router; once dropped,
/// the config holds no router unless [`RouterHold::hand_over`] was called.
#[must_use = "dropping the hold releases the router at once"]
#[derive(Debug)]
pub struct RouterHold<'a> {
    locks: &'a RouterLocks,
    /// `None` once handed over.
    config: Option<String>,
}

impl RouterHold<'_> {
    /// The apply's outcome is decided: from here the hold lasts as long as
    /// that outcome says an apply is in flight, and whoever records the
    /// outcome releases it (or the hold expires).
    pub fn hand_over(mut self) {
        self.config = None;
    }
}

impl Drop for RouterHold<'_> {
    fn drop(&mut self) {
        if let Some(config) = &self.config {
            self.locks.release(config);
        }
    }
}

/// Another config on VM `router` (`vm_of` resolves a config's VM through
/// its target) whose stored status shows an apply in flight (a handle,
/// started less than `apply_timeout` ago) or a confirmed apply not yet
/// confirmed or verified rolled back. `config` is the asking config's
/// [`holder`] name; the answer is the other's.
pub fn in_flight_elsewhere<'a>(
    configs: impl IntoIterator<Item = &'a VRouterConfig>,
    vm_of: impl Fn(&VRouterConfig) -> Option<Vm>,
    router: &Vm,
    config: &str,
    now: Timestamp,
    apply_timeout: Duration,
) -> Option<String> {
    let timeout = SignedDuration::try_from(apply_timeout).unwrap_or(SignedDuration::MAX);
    configs
        .into_iter()
        .filter(|c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.exec_pid > 0 || s.confirmation.is_some())
        })
        .filter(|c| holder(c) != config && vm_of(c).as_ref() == Some(router))
        .find(|c| {
            c.status.as_ref().is_some_and(|s| {
                let running = s.exec_pid > 0
                    && s.exec_started_time
                        .as_ref()
                        .is_none_or(|started| now.duration_since(started.0) < timeout);
                // A confirmed apply holds its router until its rollback is
                // verified, at most the apply timeout after it was due.
                let confirming = s
                    .confirmation
                    .as_ref()
                    .is_some_and(|c| now.duration_since(c.rollback_time.0) < timeout);
                running || confirming
            })
        })
        .map(holder)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn config(namespace: &str, name: &str, target: &str, pid: i64, started: Option<i64>) -> VRouterConfig {
        let mut c: VRouterConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"targetRef": {"name": target}},
        }))
        .unwrap();
        let status = c.status.get_or_insert_default();
        status.exec_pid = pid;
        status.exec_started_time = started.map(|s| Time(Timestamp::from_second(1_800_000_000 + s).unwrap()));
        c
    }

    /// Targets `r1` and `r1-alias` in `net` name one Proxmox VM; `r2` another.
    fn vm_of(c: &VRouterConfig) -> Option<Vm> {
        let vmid = match c.spec.target_ref.name.as_str() {
            "r1" | "r1-alias" => 100,
            "r2" => 101,
            _ => return None,
        };
        Some(RouterKey::Proxmox {
            namespace: c.metadata.namespace.clone()?,
            cluster: "pve".into(),
            vmid,
        })
    }

    fn vm(vmid: i64) -> Vm {
        RouterKey::Proxmox {
            namespace: "net".into(),
            cluster: "pve".into(),
            vmid,
        }
    }

    #[test]
    fn an_apply_in_flight_is_found_from_the_stored_status() {
        let now = Timestamp::from_second(1_800_000_000 + 100).unwrap();
        let timeout = Duration::from_secs(300);
        let cases = [
            (config("net", "a", "r1", 7, Some(0)), Some("net/a")),
            (config("net", "a", "r1-alias", 7, Some(0)), Some("net/a")),
            (config("net", "a", "r1", 7, None), Some("net/a")),
            (config("net", "a", "r1", 0, Some(0)), None),
            (config("net", "b", "r1", 7, Some(0)), None),
            (config("net", "a", "r2", 7, Some(0)), None),
            (config("other", "a", "r1", 7, Some(0)), None),
            (config("net", "a", "r1", 7, Some(-200)), None),
            (config("net", "a", "gone", 7, Some(0)), None),
        ];
        for (other, want) in cases {
            let got = in_flight_elsewhere([&other], vm_of, &vm(100), "net/b", now, timeout);
            assert_eq!(
                got.as_deref(),
                want,
                "{} {:?}",
                other.spec.target_ref.name,
                other.status
            );
        }
    }

    #[test]
    fn a_confirmed_apply_holds_its_router_until_its_rollback_is_verified() {
        let now = Timestamp::from_second(1_800_000_000 + 100).unwrap();
        let timeout = Duration::from_secs(300);
        // (rollback due at, found)
        let cases = [(500, true), (100, true), (-150, true), (-200, false)];
        for (due, want) in cases {
            let mut other = config("net", "a", "r1", 0, None);
            other.status.as_mut().unwrap().confirmation = Some(vrouter_api::ConfirmationStatus {
                rollback_time: Time(Timestamp::from_second(1_800_000_000 + due).unwrap()),
                previous_running_config_hash: "sha256:x".into(),
                failure: String::new(),
            });
            let got = in_flight_elsewhere([&other], vm_of, &vm(100), "net/b", now, timeout);
            assert_eq!(got.is_some(), want, "rollback due at {due}");
        }
    }

    #[test]
    fn a_router_is_taken_by_one_config_until_released_or_expired() {
        let locks = RouterLocks::default();
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(300);
        assert_eq!(locks.try_hold(&vm(100), "a", until, t0), Ok(()), "nobody held it");
        let cases = [
            ("b", 100, 0, Err("a")),
            ("a", 100, 0, Ok(())),
            ("b", 101, 0, Ok(())),
            ("b", 100, 299, Err("a")),
        ];
        for (config, vmid, after, want) in cases {
            let now = t0 + Duration::from_secs(after);
            let got = locks.try_hold(&vm(vmid), config, now + Duration::from_secs(300), now);
            assert_eq!(got, want.map_err(str::to_owned), "{config} on {vmid} after {after}s");
        }
        // a renewed its hold at 0 s: b gets the router once that expired.
        let expired = t0 + Duration::from_secs(300);
        assert_eq!(
            locks.try_hold(&vm(100), "b", expired + Duration::from_secs(300), expired),
            Ok(())
        );
        assert_eq!(locks.try_hold(&vm(100), "a", expired, expired), Err("b".to_owned()));
    }

    #[test]
    fn a_dispatch_hold_is_released_on_every_way_out_unless_handed_over() {
        let locks = RouterLocks::default();
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(300);
        let free = |locks: &RouterLocks| locks.held_by_other(&vm(100), "b", t0).is_none();

        // An early return drops the guard.
        let early_return = |locks: &RouterLocks| -> Result<(), &'static str> {
            let _hold = locks.hold(&vm(100), "a", until, t0).unwrap();
            assert!(!free(locks), "held while the dispatch runs");
            Err("the dispatch gave up")?;
            unreachable!()
        };
        assert!(early_return(&locks).is_err());
        assert!(free(&locks), "released after the early return");

        // A panic unwinds through the guard.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _hold = locks.hold(&vm(100), "a", until, t0).unwrap();
            panic!("a bug met mid-dispatch");
        }));
        assert!(unwound.is_err());
        assert!(free(&locks), "released after the panic");

        // A hold that is refused is no guard, and leaves the holder's hold.
        locks.try_hold(&vm(100), "a", until, t0).unwrap();
        assert_eq!(locks.hold(&vm(100), "b", until, t0).unwrap_err(), "a");
        assert!(!free(&locks), "b's refused hold released nothing of a's");
        locks.release("a");

        // Handed over, the hold outlives the dispatch until released.
        locks.hold(&vm(100), "a", until, t0).unwrap().hand_over();
        assert!(!free(&locks), "the apply in flight keeps its router");
        locks.release("a");
        assert!(free(&locks));
    }

    #[test]
    fn only_the_holder_releases() {
        let locks = RouterLocks::default();
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(300);
        locks.try_hold(&vm(100), "a", until, t0).unwrap();
        locks.release("b");
        assert_eq!(locks.try_hold(&vm(100), "b", until, t0), Err("a".to_owned()));
        locks.release("a");
        assert_eq!(locks.try_hold(&vm(100), "b", until, t0), Ok(()));
    }
}
