//! Status conditions, in one place: setting one the way `kubectl wait` and
//! Kubernetes conventions expect (one entry per type, `lastTransitionTime`
//! moved only when the status flips), and the rules that turn where each
//! kind stands into the `Ready`, `Reconciling` and `Stalled` conditions the
//! kstatus library (Flux, kpt, cli-utils) reads without customisation.
//!
//! kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status) decides, in order:
//! a `status.observedGeneration` other than `metadata.generation` is
//! InProgress; `Reconciling=True` is InProgress; `Stalled=True` is Failed;
//! then `Ready` True is Current and False is InProgress; no condition at all
//! is Current. So every kind here writes `observedGeneration`, carries
//! `Reconciling` only while work is under way that ends by itself and
//! `Stalled` only while it cannot progress without a change (both are
//! removed, not set False, otherwise: kstatus's abnormal-true convention),
//! and `Ready` for the rest. The kind's own conditions (`Applied`, `Synced`,
//! the binding's `Ready`) keep their reasons: `kubectl wait` and the Argo CD
//! checks read them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use vrouter_api::constants::{condition, reason};
use vrouter_api::{Phase, VRouterConfigStatus};

/// The wanted state of one condition; times are filled in by [`set`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub type_: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
    pub observed_generation: Option<i64>,
}

/// Puts `wanted` into `conditions`. Returns whether anything changed, so the
/// caller can skip a status write that would change nothing. The message is
/// bounded here ([`vrouter_api::text::message`]): messages quote what
/// guests and APIs answered, and every condition is set through this.
pub fn set(conditions: &mut Vec<Condition>, mut wanted: Wanted<'_>, now: Timestamp) -> bool {
    vrouter_api::text::bound(&mut wanted.message, vrouter_api::text::MAX_MESSAGE_BYTES);
    let status = if wanted.status { "True" } else { "False" };
    let position = conditions.iter().position(|c| c.type_ == wanted.type_);
    if let Some(existing) = position.map(|i| &mut conditions[i]) {
        let same = existing.status == status
            && existing.reason == wanted.reason
            && existing.message == wanted.message
            && existing.observed_generation == wanted.observed_generation;
        if same {
            return false;
        }
        if existing.status != status {
            existing.last_transition_time = Time(now);
        }
        existing.status = status.to_owned();
        existing.reason = wanted.reason.to_owned();
        existing.message = wanted.message;
        existing.observed_generation = wanted.observed_generation;
        return true;
    }
    conditions.push(Condition {
        type_: wanted.type_.to_owned(),
        status: status.to_owned(),
        reason: wanted.reason.to_owned(),
        message: wanted.message,
        observed_generation: wanted.observed_generation,
        last_transition_time: Time(now),
    });
    true
}

/// The condition of a type, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Removes the condition of `type_`. Returns whether it was there.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Where an object stands, in kstatus's three words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Done for the generation observed: `Ready=True`.
    Current,
    /// Work is under way and ends by itself (an apply runs, a rollout walks,
    /// a VM is starting): `Ready=False`, `Reconciling=True`.
    Reconciling,
    /// Nothing more happens without a change to the object, a reference or
    /// the router (a render error, a missing reference, a failed apply):
    /// `Ready=False`, `Stalled=True`.
    Stalled,
}

/// What an object's `Ready`, `Reconciling` and `Stalled` conditions say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub progress: Progress,
    /// The reason of `Ready` and of the abnormal condition set with it.
    pub reason: String,
    pub message: String,
}

impl Summary {
    fn new(progress: Progress, reason: &str, message: impl Into<String>) -> Self {
        Summary {
            progress,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// Puts `summary` into `conditions` as `Ready` plus `Reconciling` or
/// `Stalled` (the other one removed), each stamped with
/// `observed_generation`. Returns whether anything changed.
pub fn summarise(
    conditions: &mut Vec<Condition>,
    summary: Summary,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let wanted = |type_, status| Wanted {
        type_,
        status,
        reason: &summary.reason,
        message: summary.message.clone(),
        observed_generation,
    };
    let current = summary.progress == Progress::Current;
    let mut changed = set(conditions, wanted(condition::READY, current), now);
    for (type_, progress) in [
        (condition::RECONCILING, Progress::Reconciling),
        (condition::STALLED, Progress::Stalled),
    ] {
        changed |= if summary.progress == progress {
            set(conditions, wanted(type_, true), now)
        } else {
            remove(conditions, type_)
        };
    }
    changed
}

/// Why a config's target cannot be reached: the condition reason naming
/// the kind of problem (`TargetUnavailable`, or a TLS reason such as
/// `CertificateNotTrusted`) and the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetProblem<'a> {
    pub reason: &'static str,
    pub message: &'a str,
}

impl<'a> TargetProblem<'a> {
    /// A problem of no more specific kind: `TargetUnavailable`.
    pub fn unavailable(message: &'a str) -> Self {
        TargetProblem {
            reason: reason::TARGET_UNAVAILABLE,
            message,
        }
    }
}

/// VRouterConfig at `generation`: from its phase and `Applied` condition.
/// `target_problem` is why its target cannot be reached as configured
/// (missing, a Secret or ProxmoxCluster gone, a permission lacking), when
/// that is what stops it. A failed apply (any reason that made the phase
/// Failed: `ConfigFailed`, `ApplyTimeout`, a rolled-back confirm) is
/// Stalled: only a new spec or a reboot applies again. A generation no
/// apply was started for yet is waiting for one, whatever became of the
/// one before.
///
/// The conditions are stamped with `generation`, the spec they were decided
/// on; `status.observedGeneration` stays the generation an apply was last
/// started for, so kstatus reads a config as InProgress until its current
/// spec is being applied.
pub fn config_summary(
    status: &VRouterConfigStatus,
    generation: i64,
    target_problem: Option<TargetProblem<'_>>,
) -> Summary {
    if let Some(problem) = target_problem {
        return Summary::new(Progress::Stalled, problem.reason, problem.message);
    }
    if status.observed_generation != generation {
        let message = if status.message.is_empty() {
            format!("waiting to apply generation {generation}")
        } else {
            status.message.clone()
        };
        return Summary::new(Progress::Reconciling, reason::PENDING, message);
    }
    let applied = get(&status.conditions, condition::APPLIED);
    let message = || {
        let said = applied.map(|c| c.message.as_str()).unwrap_or_default();
        if status.message.is_empty() {
            said.to_owned()
        } else {
            status.message.clone()
        }
    };
    let applied_reason = applied.map(|c| c.reason.as_str());
    match status.phase {
        Phase::Applied if applied.is_some_and(|c| c.status == "True") => {
            Summary::new(Progress::Current, reason::CONFIG_APPLIED, "")
        }
        Phase::Failed => Summary::new(
            Progress::Stalled,
            applied_reason.unwrap_or(reason::CONFIG_FAILED),
            message(),
        ),
        Phase::Applying => Summary::new(
            Progress::Reconciling,
            applied_reason.unwrap_or(reason::APPLYING),
            message(),
        ),
        // Waiting for its first apply, for the router to be ready again, for
        // another apply on the same router, or for drift to be repaired.
        Phase::Pending | Phase::Applied => {
            let why = applied
                .filter(|c| c.status == "False")
                .map_or(reason::PENDING, |c| c.reason.as_str());
            let mut message = message();
            if message.is_empty() {
                message = "waiting to apply".to_owned();
            }
            Summary::new(Progress::Reconciling, why, message)
        }
    }
}

/// VRouterBinding: from the `Ready` it sets. `retrying` says a
/// `ReconcileError` is transient (the API server failed a request; the
/// controller retries in seconds); otherwise that error needs a change (a
/// missing reference, a template that fails, a config of the generated
/// name the binding does not control). A halted rollout waits for its
/// failed config to be fixed.
pub fn binding_summary(ready: &Wanted<'_>, retrying: bool) -> Summary {
    let progress = if ready.status {
        Progress::Current
    } else if ready.reason == reason::ROLLOUT_HALTED
        || ready.reason == reason::PAUSED
        || (ready.reason == reason::RECONCILE_ERROR && !retrying)
    {
        Progress::Stalled
    } else {
        Progress::Reconciling
    };
    Summary::new(progress, ready.reason, ready.message.clone())
}

/// What the VRouterTarget controller saw of its VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmSeen {
    Running,
    Stopped,
    /// The provider could not tell (the agent or the hypervisor's API did
    /// not answer); the next poll asks again.
    Unknown(String),
    /// The provider cannot be built or is refused as configured: a person
    /// must fix a Secret, a ProxmoxCluster or a permission.
    Unreachable(String),
}

/// VRouterTarget: a running VM is Current; a stopped one, or one whose
/// state could not be read, is waited for; an unusable provider is Stalled.
pub fn target_summary(seen: &VmSeen) -> Summary {
    match seen {
        VmSeen::Running => Summary::new(Progress::Current, reason::VM_RUNNING, "the VM runs"),
        VmSeen::Stopped => Summary::new(
            Progress::Reconciling,
            reason::VM_NOT_RUNNING,
            "waiting for the VM to run (or its vrouter-daemon agent to connect)",
        ),
        VmSeen::Unknown(why) => Summary::new(Progress::Reconciling, reason::VM_STATE_UNKNOWN, why.clone()),
        VmSeen::Unreachable(why) => Summary::new(Progress::Stalled, reason::PROVIDER_UNAVAILABLE, why.clone()),
    }
}

/// VRouterStatus and ProxmoxCluster: from their `Synced` condition. A read
/// that failed is Stalled (it is tried again only at the next sync
/// interval, and usually needs the router, the agent or the credentials
/// fixed). On a VRouterStatus, drift that is being repaired is Reconciling;
/// drift left alone (the config paused, not Applied, or repair switched
/// off) is Stalled: the router stays different from its config until a
/// person acts.
pub fn synced_summary(conditions: &[Condition], drift: Option<Drift<'_>>) -> Summary {
    let Some(synced) = get(conditions, condition::SYNCED) else {
        return Summary::new(Progress::Reconciling, reason::PENDING, "waiting for the first read");
    };
    if synced.status != "True" {
        return Summary::new(Progress::Stalled, &synced.reason, synced.message.clone());
    }
    match drift {
        Some(Drift { repairing: true, .. }) => Summary::new(
            Progress::Reconciling,
            reason::DRIFT_DETECTED,
            "the router's config changed outside the operator; applying the VRouterConfig again",
        ),
        Some(Drift { repairing: false, why }) => {
            let why = if why.is_empty() {
                "the router's config changed outside the operator; not repaired while the VRouterConfig is not Applied"
            } else {
                why
            };
            Summary::new(Progress::Stalled, reason::DRIFT_DETECTED, why)
        }
        None => Summary::new(Progress::Current, &synced.reason, synced.message.clone()),
    }
}

/// Drift a VRouterStatus found on its router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drift<'a> {
    /// The VRouterConfig is sent back to Pending to be applied again.
    pub repairing: bool,
    /// Why it is not, when it is not (the status message).
    pub why: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::test_clock::at;

    fn applied(status: bool, reason: &str) -> Wanted<'_> {
        Wanted {
            type_: "Applied",
            status,
            reason,
            message: String::new(),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn adds_a_missing_condition_stamped_now() {
        let mut conditions = Vec::new();
        assert!(set(&mut conditions, applied(true, "ConfigApplied"), at(10)));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn a_message_quoting_a_peer_is_bounded_and_setting_it_again_is_no_change() {
        let mut conditions = Vec::new();
        let huge = || Wanted {
            message: format!("apply script exited with code 1: {}", "é".repeat(100_000)),
            ..applied(false, "ConfigFailed")
        };
        assert!(set(&mut conditions, huge(), at(10)));
        let message = &conditions[0].message;
        assert!(
            message.len() <= vrouter_api::text::MAX_MESSAGE_BYTES,
            "{}",
            message.len()
        );
        assert!(message.starts_with("apply script exited with code 1: éé"), "{message}");
        assert!(message.ends_with(vrouter_api::text::CUT_MARKER), "{message}");
        // The stored (cut) message equals the next cut of the same text: no
        // status write for a message that did not change.
        assert!(!set(&mut conditions, huge(), at(20)));
    }

    #[test]
    fn an_identical_condition_is_no_change() {
        let mut conditions = Vec::new();
        set(&mut conditions, applied(true, "ConfigApplied"), at(10));
        assert!(!set(&mut conditions, applied(true, "ConfigApplied"), at(20)));
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conditions = Vec::new();
        set(&mut conditions, applied(false, "Applying"), at(10));
        assert!(set(&mut conditions, applied(false, "ConfigFailed"), at(20)));
        assert_eq!(
            conditions[0].last_transition_time,
            Time(at(10)),
            "same status, new reason"
        );
        assert!(set(&mut conditions, applied(true, "ConfigApplied"), at(30)));
        assert_eq!(conditions[0].last_transition_time, Time(at(30)));
        assert_eq!(conditions.len(), 1);
    }

    fn summary(progress: Progress, reason: &str, message: &str) -> Summary {
        Summary::new(progress, reason, message)
    }

    /// (type, status, reason, observedGeneration) of each condition, sorted by type.
    fn shown(conditions: &[Condition]) -> Vec<(String, String, String, Option<i64>)> {
        let mut out: Vec<_> = conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.observed_generation,
                )
            })
            .collect();
        out.sort();
        out
    }

    fn row(type_: &str, status: &str, reason: &str, generation: i64) -> (String, String, String, Option<i64>) {
        (type_.into(), status.into(), reason.into(), Some(generation))
    }

    #[test]
    fn a_summary_sets_ready_and_exactly_one_abnormal_condition_or_none() {
        let mut conditions = Vec::new();
        set(&mut conditions, applied(false, "Applying"), at(0));
        assert!(summarise(
            &mut conditions,
            summary(Progress::Reconciling, "Applying", "applying generation 2"),
            Some(2),
            at(1)
        ));
        assert_eq!(
            shown(&conditions),
            [
                row("Applied", "False", "Applying", 1),
                row("Ready", "False", "Applying", 2),
                row("Reconciling", "True", "Applying", 2),
            ]
        );
        assert!(
            !summarise(
                &mut conditions,
                summary(Progress::Reconciling, "Applying", "applying generation 2"),
                Some(2),
                at(2)
            ),
            "the same summary again changes nothing"
        );
        assert!(summarise(
            &mut conditions,
            summary(Progress::Stalled, "ConfigFailed", "exit 1"),
            Some(2),
            at(3)
        ));
        assert_eq!(
            shown(&conditions),
            [
                row("Applied", "False", "Applying", 1),
                row("Ready", "False", "ConfigFailed", 2),
                row("Stalled", "True", "ConfigFailed", 2),
            ],
            "Reconciling is removed, not set False"
        );
        let ready = get(&conditions, "Ready").unwrap();
        assert_eq!(ready.last_transition_time, Time(at(1)), "Ready stayed False");
        assert!(summarise(
            &mut conditions,
            summary(Progress::Current, "ConfigApplied", ""),
            Some(3),
            at(4)
        ));
        assert_eq!(
            shown(&conditions),
            [
                row("Applied", "False", "Applying", 1),
                row("Ready", "True", "ConfigApplied", 3)
            ]
        );
        assert_eq!(get(&conditions, "Ready").unwrap().last_transition_time, Time(at(4)));
    }

    fn config_status(phase: Phase, applied: Option<(&str, &str, &str)>, message: &str) -> VRouterConfigStatus {
        let mut status = VRouterConfigStatus {
            phase,
            message: message.into(),
            observed_generation: 2,
            ..Default::default()
        };
        if let Some((state, why, said)) = applied {
            set(
                &mut status.conditions,
                Wanted {
                    type_: condition::APPLIED,
                    status: state == "True",
                    reason: why,
                    message: said.into(),
                    observed_generation: Some(2),
                },
                at(0),
            );
        }
        status
    }

    /// (phase, Applied (status, reason, message), status.message, target
    /// problem) → (progress, reason, message).
    type ConfigCase<'a> = (
        Phase,
        Option<(&'a str, &'a str, &'a str)>,
        &'a str,
        Option<&'a str>,
        (Progress, &'a str, &'a str),
    );

    #[test]
    fn a_config_is_current_when_applied_stalled_when_failed_or_unreachable_and_reconciling_otherwise() {
        use Progress::*;
        let cases: &[ConfigCase] = &[
            (
                Phase::Applied,
                Some(("True", "ConfigApplied", "")),
                "",
                None,
                (Current, "ConfigApplied", ""),
            ),
            (
                Phase::Applying,
                Some(("False", "Applying", "applying generation 2")),
                "",
                None,
                (Reconciling, "Applying", "applying generation 2"),
            ),
            (
                Phase::Failed,
                Some(("False", "ConfigFailed", "apply script exited with code 1")),
                "apply script exited with code 1",
                None,
                (Stalled, "ConfigFailed", "apply script exited with code 1"),
            ),
            (
                Phase::Failed,
                Some(("False", "ApplyTimeout", "apply did not finish within 5m")),
                "",
                None,
                (Stalled, "ApplyTimeout", "apply did not finish within 5m"),
            ),
            (
                Phase::Failed,
                Some(("False", "RolledBack", "check failed")),
                "",
                None,
                (Stalled, "RolledBack", "check failed"),
            ),
            (
                Phase::Pending,
                None,
                "",
                None,
                (Reconciling, "Pending", "waiting to apply"),
            ),
            (
                Phase::Pending,
                Some(("False", "RouterNotReady", "router not ready: agent")),
                "router not ready: agent",
                None,
                (Reconciling, "RouterNotReady", "router not ready: agent"),
            ),
            (
                Phase::Pending,
                Some(("False", "DriftDetected", "drift")),
                "drift detected; applying again",
                None,
                (Reconciling, "DriftDetected", "drift detected; applying again"),
            ),
            (
                Phase::Pending,
                Some(("True", "ConfigApplied", "")),
                "waiting for VRouterConfig \"b\" to finish its apply on the same router",
                None,
                (
                    Reconciling,
                    "Pending",
                    "waiting for VRouterConfig \"b\" to finish its apply on the same router",
                ),
            ),
            (
                Phase::Pending,
                None,
                "VRouterTarget \"r1\" not found",
                Some("VRouterTarget \"r1\" not found"),
                (Stalled, "TargetUnavailable", "VRouterTarget \"r1\" not found"),
            ),
            (
                Phase::Applied,
                Some(("True", "ConfigApplied", "")),
                "cannot reach the router: forbidden",
                Some("cannot reach the router: forbidden"),
                (Stalled, "TargetUnavailable", "cannot reach the router: forbidden"),
            ),
        ];
        for (phase, applied, message, problem, (progress, reason, said)) in cases {
            let status = config_status(*phase, *applied, message);
            assert_eq!(
                config_summary(&status, 2, problem.map(TargetProblem::unavailable)),
                summary(*progress, reason, said),
                "{phase:?} {applied:?} {problem:?}"
            );
        }
    }

    #[test]
    fn a_new_generation_waits_for_its_apply_whatever_became_of_the_last() {
        let failed = config_status(Phase::Failed, Some(("False", "ConfigFailed", "exit 1")), "exit 1");
        assert_eq!(
            config_summary(&failed, 3, None),
            summary(Progress::Reconciling, "Pending", "exit 1")
        );
        let applied = config_status(Phase::Applied, Some(("True", "ConfigApplied", "")), "");
        assert_eq!(
            config_summary(&applied, 3, None),
            summary(Progress::Reconciling, "Pending", "waiting to apply generation 3")
        );
        assert_eq!(
            config_summary(
                &applied,
                3,
                Some(TargetProblem::unavailable("VRouterTarget \"r\" not found"))
            ),
            summary(Progress::Stalled, "TargetUnavailable", "VRouterTarget \"r\" not found")
        );
    }

    #[test]
    fn a_binding_is_stalled_by_a_halt_or_an_error_only_a_change_fixes() {
        use Progress::*;
        let cases: &[(bool, &str, bool, Progress)] = &[
            (true, "ReconcileSucceeded", false, Current),
            (false, "RolloutInProgress", false, Reconciling),
            (false, "RolloutHalted", false, Stalled),
            (false, "ReconcileError", false, Stalled),
            (false, "ReconcileError", true, Reconciling),
        ];
        for (ok, why, retrying, progress) in cases {
            let ready = Wanted {
                type_: condition::READY,
                status: *ok,
                reason: why,
                message: "m".into(),
                observed_generation: Some(4),
            };
            assert_eq!(
                binding_summary(&ready, *retrying),
                summary(*progress, why, "m"),
                "{why} retrying={retrying}"
            );
        }
    }

    #[test]
    fn a_target_is_current_while_its_vm_runs_and_stalled_only_by_its_provider() {
        use Progress::*;
        let cases = [
            (VmSeen::Running, Current, "VMRunning"),
            (VmSeen::Stopped, Reconciling, "VMNotRunning"),
            (VmSeen::Unknown("timed out".into()), Reconciling, "VMStateUnknown"),
            (
                VmSeen::Unreachable("Secret \"pve\" not found".into()),
                Stalled,
                "ProviderUnavailable",
            ),
        ];
        for (seen, progress, why) in cases {
            let got = target_summary(&seen);
            assert_eq!((got.progress, got.reason.as_str()), (progress, why), "{seen:?}");
            if let VmSeen::Unknown(m) | VmSeen::Unreachable(m) = &seen {
                assert_eq!(&got.message, m);
            }
        }
    }

    #[test]
    fn a_synced_object_is_current_a_failed_read_stalls_and_drift_depends_on_its_repair() {
        use Progress::*;
        let synced = |ok: bool, why: &str| {
            let mut conditions = Vec::new();
            set(
                &mut conditions,
                Wanted {
                    type_: condition::SYNCED,
                    status: ok,
                    reason: why,
                    message: "said".into(),
                    observed_generation: None,
                },
                at(0),
            );
            conditions
        };
        let repairing = Drift {
            repairing: true,
            why: "",
        };
        let paused = Drift {
            repairing: false,
            why: "drift detected; not repaired while the VRouterConfig is paused",
        };
        let cases: Vec<(Vec<Condition>, Option<Drift<'_>>, Progress, &str)> = vec![
            (Vec::new(), None, Reconciling, "Pending"),
            (synced(true, "SyncSucceeded"), None, Current, "SyncSucceeded"),
            (synced(false, "SyncFailed"), None, Stalled, "SyncFailed"),
            (
                synced(false, "CredentialsNotFound"),
                None,
                Stalled,
                "CredentialsNotFound",
            ),
            (synced(false, "SyncFailed"), Some(repairing), Stalled, "SyncFailed"),
            (
                synced(true, "SyncSucceeded"),
                Some(repairing),
                Reconciling,
                "DriftDetected",
            ),
            (synced(true, "SyncSucceeded"), Some(paused), Stalled, "DriftDetected"),
        ];
        for (conditions, drift, progress, why) in &cases {
            let got = synced_summary(conditions, *drift);
            assert_eq!((got.progress, got.reason.as_str()), (*progress, *why), "{drift:?}");
        }
        let got = synced_summary(&cases[6].0, Some(paused));
        assert_eq!(got.message, paused.why, "the reason drift is left alone is shown");
    }
}
