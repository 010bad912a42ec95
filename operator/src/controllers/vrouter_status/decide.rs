//! Drift detection (the VRouterStatus proposal) as pure decisions: when to
//! take a new baseline, whether the router drifted, and whether to send its
//! VRouterConfig back to Pending so it is applied again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use vrouter_api::constants::{condition, reason};
use vrouter_api::{Phase, VRouterStatusStatus};

use crate::runtime::conditions::{self, Wanted};
pub use crate::runtime::config_hash::config_hash;

/// What was read from the router in this sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    pub startup_hash: String,
    /// Empty when the running config could not be read (a warning, not a failure).
    pub running_hash: String,
}

/// The VRouterConfig as drift detection sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigView {
    pub phase: Phase,
    pub last_applied_time: Option<Time>,
    pub paused: bool,
    /// The operator runs with `--drift-repair=false`: drift is shown, never
    /// repaired, for every config.
    pub repair_off: bool,
}

impl ConfigView {
    /// Whether drift on this config's router is repaired: a settled Applied
    /// config (Applying is already re-applying; Failed or Pending are left to
    /// the user and the config controller), neither paused nor under a
    /// global repair switch that is off.
    fn repairs(&self) -> bool {
        !self.paused && !self.repair_off && self.phase == Phase::Applied
    }

    /// Whether drift on this router is being put right: repaired now, or
    /// by the apply already pending or running. A Failed config (or one
    /// paused, or repair switched off) leaves it to a person.
    pub fn drift_is_repaired(&self) -> bool {
        !self.paused && !self.repair_off && self.phase != Phase::Failed
    }
}

/// The outcome of one sync.
#[derive(Clone, Debug, PartialEq)]
pub struct Sync {
    pub status: VRouterStatusStatus,
    /// Send the VRouterConfig back to Pending so it is applied again.
    pub reset_config: bool,
    /// Drift newly seen in this sync (for an event).
    pub drift_started: bool,
}

/// How long until the router is due to be read again, or `None` when it is
/// due now: never read, a full interval since the last read, an apply not
/// yet baselined, or a drift waiting to be repaired (say, just unpaused).
/// Reconciles woken for anything else — among them this controller's own
/// status and Secret writes — must not read the router.
pub fn sync_wait(
    status: &VRouterStatusStatus,
    config: &ConfigView,
    interval: std::time::Duration,
    now: Timestamp,
) -> Option<std::time::Duration> {
    let last_fetch = status.last_fetch_time.as_ref()?;
    let applied_since_baseline = match (&config.last_applied_time, &status.last_baseline_time) {
        (Some(applied), Some(baseline)) => applied.0 > baseline.0,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let repair_due = status.drift_detected && config.repairs();
    if applied_since_baseline || repair_due {
        return None;
    }
    let since = now.duration_since(last_fetch.0).unsigned_abs();
    interval.checked_sub(since).filter(|wait| !wait.is_zero())
}

/// Whether a router never read waits for its config's first apply to end
/// before it is read: the config watch can lag the write that created this
/// object, and a read now would take no baseline and be made again at once
/// when the apply's end arrives (whose event wakes the reconcile). A config
/// that failed before it ever applied is read now, for its hashes.
pub fn awaits_first_apply(status: &VRouterStatusStatus, config: &ConfigView) -> bool {
    status.last_fetch_time.is_none()
        && config.last_applied_time.is_none()
        && matches!(config.phase, Phase::Applying | Phase::Pending)
}

/// Decides one successful sync (the proposal's steps 6–8).
pub fn on_read(status: &VRouterStatusStatus, config: &ConfigView, reading: &Reading, now: Timestamp) -> Sync {
    let mut status = status.clone();
    let was_drifted = status.drift_detected;
    status.startup_config_hash = reading.startup_hash.clone();
    status.running_config_hash = reading.running_hash.clone();
    status.last_fetch_time = Some(Time(now));
    status.message = String::new();
    let applied_since_baseline = match (&config.last_applied_time, &status.last_baseline_time) {
        (Some(applied), Some(baseline)) => applied.0 > baseline.0,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let mut reset_config = false;
    if applied_since_baseline {
        // The config just applied is the new reference: whatever the router
        // holds now is what the operator put there. The baseline is stamped
        // with the apply's own time, so "applied since" compares like with like.
        status.baseline_hash = reading.startup_hash.clone();
        status.last_baseline_time = config.last_applied_time.clone();
        status.drift_detected = false;
    } else if status.baseline_hash.is_empty() {
        // Never applied: there is nothing to drift from.
        status.drift_detected = false;
    } else {
        status.drift_detected = reading.startup_hash != status.baseline_hash;
        reset_config = status.drift_detected && config.repairs();
        if status.drift_detected && config.paused {
            status.message = "drift detected; not repaired while the VRouterConfig is paused".into();
        } else if status.drift_detected && config.repair_off {
            status.message = "drift detected; not repaired: the operator runs with --drift-repair=false".into();
        }
    }
    conditions::set(
        &mut status.conditions,
        Wanted {
            type_: condition::SYNCED,
            status: true,
            reason: reason::SYNC_SUCCEEDED,
            message: String::new(),
            observed_generation: None,
        },
        now,
    );
    Sync {
        drift_started: status.drift_detected && !was_drifted,
        status,
        reset_config,
    }
}

/// A read from the router failed: say so, keep the last known hashes.
pub fn on_read_failed(status: &VRouterStatusStatus, error: &str, now: Timestamp) -> VRouterStatusStatus {
    let mut status = status.clone();
    status.message = format!("could not read the router's config: {error}");
    conditions::set(
        &mut status.conditions,
        Wanted {
            type_: condition::SYNCED,
            status: false,
            reason: reason::SYNC_FAILED,
            message: status.message.clone(),
            observed_generation: None,
        },
        now,
    );
    status
}

/// Why the configs cannot be stored in one Secret, when they cannot: an
/// object is at most about 1.5 MiB in etcd, and a silently truncated config
/// would mislead whoever compares it. The hashes are still kept.
pub fn too_large_to_store(startup: usize, running: usize, limit: usize) -> Option<String> {
    let total = startup.saturating_add(running);
    (total > limit).then(|| {
        format!(
            "the configs are {total} bytes (startup {startup}, running {running}), more than the {limit} bytes one Secret holds here; hashes are kept, the content is not stored"
        )
    })
}

/// Whether the Secret `secret_name` already holds the configs just read:
/// the last sync stored them there, and the status keeps their hashes. The
/// Secret itself is not read (watching Secrets would need list and watch on
/// all of them, and a read per sync is a request per router per interval);
/// a Secret changed by hand is written again with the router's next change.
pub fn secret_holds(previous: &VRouterStatusStatus, secret_name: &str, reading: &Reading) -> bool {
    !secret_name.is_empty()
        && previous.config_secret_ref == secret_name
        && previous.startup_config_hash == reading.startup_hash
        && previous.running_config_hash == reading.running_hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::test_clock::at;

    #[test]
    fn a_router_never_read_waits_only_for_a_first_apply_under_way() {
        let never_read = VRouterStatusStatus::default();
        let read = baselined("a");
        let cases = [
            (
                "first apply running",
                &never_read,
                config(Phase::Applying, None, false),
                true,
            ),
            (
                "first apply pending",
                &never_read,
                config(Phase::Pending, None, false),
                true,
            ),
            (
                "first apply ended",
                &never_read,
                config(Phase::Applied, Some(10), false),
                false,
            ),
            (
                "failed, never applied",
                &never_read,
                config(Phase::Failed, None, false),
                false,
            ),
            (
                "re-applying a router read before",
                &never_read,
                config(Phase::Applying, Some(10), false),
                false,
            ),
            ("already read", &read, config(Phase::Applying, None, false), false),
        ];
        for (name, status, view, want) in cases {
            assert_eq!(awaits_first_apply(status, &view), want, "{name}");
        }
    }

    #[test]
    fn the_router_is_read_only_when_a_read_is_due() {
        use std::time::Duration;
        let minute = Duration::from_secs(60);
        // Baselined for the apply at t=10, last read at t=11.
        let fresh = baselined("a");
        let drifted = on_read(&fresh, &config(Phase::Applied, Some(10), false), &reading("b"), at(20)).status;
        assert!(drifted.drift_detected);
        let never_read = VRouterStatusStatus::default();
        let cases: &[(&str, &VRouterStatusStatus, ConfigView, i64, Option<u64>)] = &[
            (
                "never read",
                &never_read,
                config(Phase::Applied, Some(10), false),
                11,
                None,
            ),
            (
                "own write echoed back",
                &fresh,
                config(Phase::Applied, Some(10), false),
                12,
                Some(59),
            ),
            (
                "half an interval",
                &fresh,
                config(Phase::Applied, Some(10), false),
                41,
                Some(30),
            ),
            (
                "interval elapsed",
                &fresh,
                config(Phase::Applied, Some(10), false),
                71,
                None,
            ),
            (
                "long overdue",
                &fresh,
                config(Phase::Applied, Some(10), false),
                5000,
                None,
            ),
            ("a new apply", &fresh, config(Phase::Applied, Some(12), false), 13, None),
            (
                "applying, not yet applied",
                &fresh,
                config(Phase::Applying, Some(10), false),
                14,
                Some(57),
            ),
            (
                "drift, paused",
                &drifted,
                config(Phase::Applied, Some(10), true),
                21,
                Some(59),
            ),
            (
                "drift, unpaused",
                &drifted,
                config(Phase::Applied, Some(10), false),
                21,
                None,
            ),
            (
                "drift, being re-applied",
                &drifted,
                config(Phase::Pending, Some(10), false),
                21,
                Some(59),
            ),
        ];
        for (name, status, view, now, want) in cases {
            let got = sync_wait(status, view, minute, at(*now));
            assert_eq!(got, want.map(Duration::from_secs), "{name}");
        }
    }

    #[test]
    fn configs_larger_than_a_config_map_are_refused_by_name_and_size() {
        let limit = 1024 * 1024;
        let cases = [
            (0, 0, false),
            (limit, 0, false),
            (limit / 2, limit / 2, false),
            (limit + 1, 0, true),
            (limit, 1, true),
            (0, limit + 1, true),
            (usize::MAX, usize::MAX, true),
        ];
        for (startup, running, refused) in cases {
            let got = too_large_to_store(startup, running, limit);
            assert_eq!(got.is_some(), refused, "{startup} + {running}");
            if let Some(message) = got {
                assert!(
                    message.contains(&format!("startup {startup}")) && message.contains(&format!("running {running}")),
                    "{message}"
                );
                assert!(message.contains(&limit.to_string()), "{message}");
            }
        }
    }

    fn reading(startup: &str) -> Reading {
        Reading {
            startup_hash: config_hash(startup.as_bytes()),
            running_hash: config_hash(b"running"),
        }
    }

    fn config(phase: Phase, applied_at: Option<i64>, paused: bool) -> ConfigView {
        ConfigView {
            phase,
            last_applied_time: applied_at.map(|s| Time(at(s))),
            paused,
            repair_off: false,
        }
    }

    /// Status right after a baseline of `startup` taken for the apply at t=10.
    fn baselined(startup: &str) -> VRouterStatusStatus {
        on_read(
            &Default::default(),
            &config(Phase::Applied, Some(10), false),
            &reading(startup),
            at(11),
        )
        .status
    }

    #[test]
    fn hashes_are_sha256_with_a_prefix() {
        assert_eq!(
            config_hash(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn step6_a_new_apply_takes_a_new_baseline() {
        let s = baselined("A");
        assert_eq!(s.baseline_hash, config_hash(b"A"));
        assert_eq!(s.last_baseline_time, Some(Time(at(10))));
        assert!(!s.drift_detected);
        let synced = conditions::get(&s.conditions, condition::SYNCED).unwrap();
        assert_eq!(synced.status, "True");
    }

    #[test]
    fn step6_never_applied_means_no_baseline_and_no_drift() {
        let sync = on_read(
            &Default::default(),
            &config(Phase::Pending, None, false),
            &reading("A"),
            at(1),
        );
        assert!(sync.status.baseline_hash.is_empty());
        assert!(!sync.status.drift_detected && !sync.reset_config);
    }

    #[test]
    fn step7_same_hash_is_no_drift() {
        let sync = on_read(
            &baselined("A"),
            &config(Phase::Applied, Some(10), false),
            &reading("A"),
            at(400),
        );
        assert!(!sync.status.drift_detected && !sync.reset_config && !sync.drift_started);
    }

    #[test]
    fn step7_a_different_hash_is_drift_and_resets_an_applied_config() {
        let sync = on_read(
            &baselined("A"),
            &config(Phase::Applied, Some(10), false),
            &reading("B"),
            at(400),
        );
        assert!(sync.status.drift_detected && sync.reset_config && sync.drift_started);
        assert_eq!(sync.status.startup_config_hash, config_hash(b"B"));
        assert_eq!(
            sync.status.baseline_hash,
            config_hash(b"A"),
            "the baseline stays until the re-apply"
        );
    }

    #[test]
    fn step7_only_applied_configs_are_reset() {
        for phase in [Phase::Pending, Phase::Applying, Phase::Failed] {
            let sync = on_read(&baselined("A"), &config(phase, Some(10), false), &reading("B"), at(400));
            assert!(sync.status.drift_detected, "{phase:?}");
            assert!(!sync.reset_config, "{phase:?}");
        }
    }

    #[test]
    fn with_repair_off_drift_is_visible_but_never_repaired() {
        let repair_off = ConfigView {
            repair_off: true,
            ..config(Phase::Applied, Some(10), false)
        };
        let sync = on_read(&baselined("A"), &repair_off, &reading("B"), at(400));
        assert!(sync.status.drift_detected && sync.drift_started && !sync.reset_config);
        assert!(
            sync.status.message.contains("--drift-repair=false"),
            "{}",
            sync.status.message
        );
        // Not due before the interval either: no repair is waiting.
        assert!(sync_wait(&sync.status, &repair_off, std::time::Duration::from_secs(300), at(401)).is_some());
        let next = on_read(&sync.status, &repair_off, &reading("B"), at(700));
        assert!(next.status.drift_detected && !next.reset_config);
    }

    #[test]
    fn paused_drift_is_visible_but_not_repaired() {
        let sync = on_read(
            &baselined("A"),
            &config(Phase::Applied, Some(10), true),
            &reading("B"),
            at(400),
        );
        assert!(sync.status.drift_detected && !sync.reset_config);
        assert!(sync.status.message.contains("paused"));
        // Unpaused, the next sync repairs it.
        let next = on_read(
            &sync.status,
            &config(Phase::Applied, Some(10), false),
            &reading("B"),
            at(700),
        );
        assert!(
            next.reset_config && !next.drift_started,
            "drift continues, no second event"
        );
    }

    #[test]
    fn after_the_reapply_the_baseline_moves_and_the_loop_stops() {
        let drifted = on_read(
            &baselined("A"),
            &config(Phase::Applied, Some(10), false),
            &reading("B"),
            at(400),
        );
        assert!(drifted.reset_config);
        // The re-apply wrote "A2" to config.boot at t=401.
        let rebased = on_read(
            &drifted.status,
            &config(Phase::Applied, Some(401), false),
            &reading("A2"),
            at(402),
        );
        assert!(!rebased.status.drift_detected && !rebased.reset_config);
        assert_eq!(rebased.status.baseline_hash, config_hash(b"A2"));
        let steady = on_read(
            &rebased.status,
            &config(Phase::Applied, Some(401), false),
            &reading("A2"),
            at(700),
        );
        assert!(!steady.reset_config);
    }

    #[test]
    fn a_failed_read_sets_synced_false_and_keeps_the_hashes() {
        let s = on_read_failed(&baselined("A"), "guest agent not responding", at(500));
        assert_eq!(s.baseline_hash, config_hash(b"A"));
        let synced = conditions::get(&s.conditions, condition::SYNCED).unwrap();
        assert_eq!(
            (synced.status.as_str(), synced.reason.as_str()),
            ("False", reason::SYNC_FAILED)
        );
        assert!(synced.message.contains("guest agent not responding"));
    }

    #[test]
    fn the_secret_is_written_only_when_it_may_not_hold_what_was_read() {
        let stored = {
            let mut s = baselined("A");
            s.config_secret_ref = "vrs-x-config".into();
            s
        };
        let not_stored = baselined("A");
        let mut running_unread = reading("A");
        running_unread.running_hash.clear();
        let cases: &[(&str, &VRouterStatusStatus, &str, Reading, bool)] = &[
            ("stored, same configs", &stored, "vrs-x-config", reading("A"), true),
            (
                "stored, the startup config changed",
                &stored,
                "vrs-x-config",
                reading("B"),
                false,
            ),
            (
                "stored, the running config unread now",
                &stored,
                "vrs-x-config",
                running_unread,
                false,
            ),
            (
                "never stored (first sync, too large, foreign)",
                &not_stored,
                "vrs-x-config",
                reading("A"),
                false,
            ),
            (
                "stored under another name",
                &stored,
                "vrs-y-config",
                reading("A"),
                false,
            ),
            (
                "no status at all",
                &VRouterStatusStatus::default(),
                "vrs-x-config",
                reading("A"),
                false,
            ),
        ];
        for (case, previous, name, read, holds) in cases {
            assert_eq!(secret_holds(previous, name, read), *holds, "{case}");
        }
    }
}
