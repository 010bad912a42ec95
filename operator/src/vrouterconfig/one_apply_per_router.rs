//! One apply at a time per router. Every apply writes the same script path
//! in the guest (`/tmp/vrouter-apply.sh`, fixed by the spec) and runs a
//! configure session: two VRouterConfigs naming one target (two bindings,
//! or a binding and a hand-written config) would otherwise overwrite the
//! script the other is running and interleave their sessions.
//!
//! The operator is one leader process, so the lock lives in its memory. It
//! is taken when an apply is dispatched, held while polls find it running,
//! and released when its result is in. A holder that disappears (its config
//! deleted mid-apply) cannot block a router for longer than the apply
//! timeout: every hold expires then. A restarted process starts with no
//! holds; what it knows then is the configs' stored status, read by
//! [`in_flight_elsewhere`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use vrouter_api::VRouterConfig;

/// A router, as the configs name it: namespace and VRouterTarget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Router {
    pub namespace: String,
    pub target: String,
}

#[derive(Debug)]
struct Hold {
    config: String,
    until: Instant,
}

#[derive(Debug, Default)]
pub struct RouterLocks {
    holds: Mutex<HashMap<Router, Hold>>,
}

impl RouterLocks {
    /// Takes (or renews) `router` for `config` until `until`, unless another
    /// config holds it unexpired: then that config's name. Check and take
    /// are one step, so two configs reconciled at once cannot both win.
    pub fn try_hold(&self, router: &Router, config: &str, until: Instant, now: Instant) -> Result<(), String> {
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

    /// The config holding `router` unexpired, when it is not `config`.
    pub fn held_by_other(&self, router: &Router, config: &str, now: Instant) -> Option<String> {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds
            .get(router)
            .filter(|hold| hold.config != config && hold.until > now)
            .map(|hold| hold.config.clone())
    }

    /// `config`'s apply on `router` is over; another config's hold stays.
    pub fn release(&self, router: &Router, config: &str) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        if holds.get(router).is_some_and(|hold| hold.config == config) {
            holds.remove(router);
        }
    }
}

/// Another config on `router` whose stored status shows an apply in flight
/// (a handle, started less than `apply_timeout` ago) or a confirmed apply
/// not yet confirmed or verified rolled back.
pub fn in_flight_elsewhere<'a>(
    configs: impl IntoIterator<Item = &'a VRouterConfig>,
    router: &Router,
    config: &str,
    now: Timestamp,
    apply_timeout: Duration,
) -> Option<String> {
    let timeout = SignedDuration::try_from(apply_timeout).unwrap_or(SignedDuration::MAX);
    configs
        .into_iter()
        // Borrowed fields, no allocation: a rollout scans every config of
        // the store for each dispatch.
        .filter(|c| {
            c.metadata.namespace.as_deref() == Some(router.namespace.as_str())
                && c.spec.target_ref.name == router.target
                && c.metadata.name.as_deref() != Some(config)
        })
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
        .map(|c| c.name_any())
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

    #[test]
    fn an_apply_in_flight_is_found_from_the_stored_status() {
        let now = Timestamp::from_second(1_800_000_000 + 100).unwrap();
        let timeout = Duration::from_secs(300);
        let me = Router {
            namespace: "net".into(),
            target: "r1".into(),
        };
        let cases = [
            (config("net", "a", "r1", 7, Some(0)), Some("a")),
            (config("net", "a", "r1", 7, None), Some("a")),
            (config("net", "a", "r1", 0, Some(0)), None),
            (config("net", "b", "r1", 7, Some(0)), None),
            (config("net", "a", "r2", 7, Some(0)), None),
            (config("other", "a", "r1", 7, Some(0)), None),
            (config("net", "a", "r1", 7, Some(-200)), None),
        ];
        for (other, want) in cases {
            let got = in_flight_elsewhere([&other], &me, "b", now, timeout);
            assert_eq!(got.as_deref(), want, "{:?}", other.status);
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
            let got = in_flight_elsewhere([&other], &router("r1"), "b", now, timeout);
            assert_eq!(got.is_some(), want, "rollback due at {due}");
        }
    }

    fn router(target: &str) -> Router {
        Router {
            namespace: "net".into(),
            target: target.into(),
        }
    }

    #[test]
    fn a_router_is_taken_by_one_config_until_released_or_expired() {
        let locks = RouterLocks::default();
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(300);
        assert_eq!(locks.try_hold(&router("r1"), "a", until, t0), Ok(()), "nobody held it");
        let cases = [
            ("b", "r1", 0, Err("a")),
            ("a", "r1", 0, Ok(())),
            ("b", "r2", 0, Ok(())),
            ("b", "r1", 299, Err("a")),
        ];
        for (config, target, after, want) in cases {
            let now = t0 + Duration::from_secs(after);
            let got = locks.try_hold(&router(target), config, now + Duration::from_secs(300), now);
            assert_eq!(got, want.map_err(str::to_owned), "{config} on {target} after {after}s");
        }
        // a renewed its hold at 0 s: b gets the router once that expired.
        let expired = t0 + Duration::from_secs(300);
        assert_eq!(
            locks.try_hold(&router("r1"), "b", expired + Duration::from_secs(300), expired),
            Ok(())
        );
        assert_eq!(
            locks.try_hold(&router("r1"), "a", expired, expired),
            Err("b".to_owned())
        );
    }

    #[test]
    fn only_the_holder_releases() {
        let locks = RouterLocks::default();
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(300);
        let r1 = router("r1");
        locks.try_hold(&r1, "a", until, t0).unwrap();
        locks.release(&r1, "b");
        assert_eq!(locks.try_hold(&r1, "b", until, t0), Err("a".to_owned()));
        locks.release(&r1, "a");
        assert_eq!(locks.try_hold(&r1, "b", until, t0), Ok(()));
    }
}
