//! `VRouterConfig`: the rendered configuration of one router, and the state
//! of applying it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::Duration;
use crate::refs::{NameRef, default_true};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterConfig",
    doc = "The rendered configuration of one router and the state of applying it.",
    namespaced,
    category = "vrouter",
    status = "VRouterConfigStatus",
    shortname = "vrc",
    shortname = "vrouterconfig",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.targetRef.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VRouterConfigSpec {
    /// The VRouterTarget to apply to; same namespace only.
    pub target_ref: NameRef,
    /// Persist the running config after commit so it survives a reboot.
    #[serde(default = "default_true")]
    pub save: bool,
    /// A config.boot fragment, loaded before the commands run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config: String,
    /// Configure-mode commands, one per line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commands: String,
    /// Commit with VyOS's `commit-confirm`: the router rolls the change back by
    /// itself unless the operator, after checking the router from outside,
    /// confirms it within `timeout`. `save` runs only after the confirmation.
    /// Not available for vrouter-daemon targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<ConfirmSpec>,
    /// Apply a revision from this config's history (`kubectl vrouter
    /// history`) instead of `config` and `commands`, through the same
    /// apply as any other. Set by `kubectl vrouter rollback`; removing it
    /// applies `config` and `commands` again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to: Option<RollbackTo>,
    /// How many applied revisions the history Secret `<name>-history`
    /// keeps, oldest dropped first (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub revision_history_limit: Option<u32>,
}

/// A rollback to a revision of the config's history (`spec.rollbackTo`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackTo {
    /// The revision to apply, as `kubectl vrouter history` numbers it.
    #[schemars(range(min = 1))]
    pub revision: u64,
    /// The generation of the controlling VRouterBinding when the rollback
    /// was asked for: the binding leaves the config as it is while its
    /// generation is still this one, and replaces it (ending the rollback)
    /// once its spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_generation: Option<i64>,
}

/// The revisions a history keeps when `spec.revisionHistoryLimit` is unset.
pub const DEFAULT_REVISION_HISTORY_LIMIT: u32 = 10;

/// A confirmed apply (`spec.confirm`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmSpec {
    /// How long the router waits for the confirmation before it rolls back:
    /// whole minutes (`commit-confirm` counts minutes), from 1m to 24h.
    #[serde(default = "default_confirm_timeout")]
    #[schemars(extend("default" = "10m"))]
    pub timeout: Duration,
    /// A command run in the guest after the commit; it must exit 0 for the
    /// change to be confirmed. Without it, the guest agent answering is the
    /// only check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<ConfirmCheck>,
}

impl Default for ConfirmSpec {
    fn default() -> Self {
        ConfirmSpec {
            timeout: default_confirm_timeout(),
            check: None,
        }
    }
}

/// The user's check of a confirmed apply.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmCheck {
    /// The program and its arguments, run in the guest without a shell
    /// (for a pipeline, `["/bin/sh", "-c", "…"]`), e.g.
    /// `["/bin/ping", "-c", "3", "-W", "2", "192.0.2.1"]`.
    pub command: Vec<String>,
    /// How long the command may run; must be shorter than `confirm.timeout`.
    #[serde(default = "default_check_timeout")]
    #[schemars(extend("default" = "30s"))]
    pub timeout: Duration,
}

/// VyOS's own default for `commit-confirm` without an argument.
fn default_confirm_timeout() -> Duration {
    Duration::from_secs(10 * 60)
}

fn default_check_timeout() -> Duration {
    Duration::from_secs(30)
}

/// The shortest and longest `spec.confirm.timeout`.
pub const CONFIRM_TIMEOUT_RANGE: std::ops::RangeInclusive<i64> = 1..=24 * 60;

impl VRouterConfigSpec {
    /// How the apply script ends: `commit-confirm` without `save` for a
    /// confirmed apply (an invalid timeout, which admission refuses, counts
    /// as one minute), else `commit` and `save` as `save` says.
    pub fn commit(&self) -> vrouter_render::Commit {
        match &self.confirm {
            Some(confirm) => vrouter_render::Commit::Confirmed {
                minutes: confirm.minutes().unwrap_or(1),
            },
            None => vrouter_render::Commit::Plain { save: self.save },
        }
    }
}

impl ConfirmSpec {
    /// The timeout in whole minutes, as `commit-confirm` takes it; `None`
    /// when it is not a whole number of minutes in [`CONFIRM_TIMEOUT_RANGE`].
    pub fn minutes(&self) -> Option<u32> {
        const MINUTE: i64 = 60_000_000_000;
        let nanos = self.timeout.as_nanos();
        let minutes = nanos / MINUTE;
        (nanos % MINUTE == 0 && CONFIRM_TIMEOUT_RANGE.contains(&minutes)).then_some(minutes as u32)
    }
}

/// Where an apply stands: the rollout walk's own type, so the status and the
/// walk agree on every value without a conversion.
pub use vrouter_rollout::Phase;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VRouterConfigStatus {
    /// Where an apply stands. Display only: controllers decide from
    /// `observedGeneration`, `execPID` and the conditions.
    #[serde(default)]
    pub phase: Phase,
    /// Handle of the apply in flight (a guest-agent PID for KubeVirt and Proxmox).
    #[serde(rename = "execPID", default, skip_serializing_if = "is_zero")]
    pub exec_pid: i64,
    /// When the apply in flight was dispatched (with no handle yet: when its
    /// dispatch was first tried); bounds how long it is polled or retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_started_time: Option<Time>,
    /// The apply last dispatched (`g<generation>-<nonce>`), written before
    /// the router is touched: the router records each apply under this id,
    /// so an operator that lost the handle (a crash, a lost answer, a
    /// restarted guest agent) asks the router instead of applying again.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub apply_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_time: Option<Time>,
    /// The target reboot this config already re-applied for, so one reboot
    /// forces at most one re-apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reboot_handled_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The generation an apply was last dispatched for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// A confirmed apply (`spec.confirm`) from its dispatch until it is
    /// confirmed or its rollback is verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<ConfirmationStatus>,
    /// The Secrets the config's secret params name, each with the
    /// resourceVersion the last dispatch saw (`name=version`, sorted; `-`
    /// for one that did not exist). When a named Secret changes the stamp
    /// differs, and the config is applied again with the new value. Never a
    /// value or a hash of one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secrets_version: String,
}

/// Where a confirmed apply stands between its dispatch and its end.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationStatus {
    /// The earliest the router can roll the change back (the dispatch plus
    /// `spec.confirm.timeout`): the confirmation must be sent before it.
    pub rollback_time: Time,
    /// `sha256:<hex>` of the running config before the apply (as drift
    /// detection hashes it): the rollback must bring it back.
    pub previous_running_config_hash: String,
    /// Why the change is not confirmed; once set, the operator only waits
    /// for the router's rollback and verifies it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure: String,
}

/// Why a VRouterConfig starts no new apply; the one place the pause rule lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Annotation `vrouter.kojuro.date/paused: "true"`, for debugging one
    /// router: the operator leaves the config alone entirely, an apply in
    /// flight included.
    Annotation,
    /// Its VRouterBinding is paused (label
    /// `vrouter.kojuro.date/binding-paused: "true"`): nothing new starts,
    /// but an apply in flight is followed to its result.
    Binding,
}

impl Pause {
    /// Whether an apply already running is still followed to its result.
    pub fn lets_in_flight_finish(self) -> bool {
        self == Pause::Binding
    }
}

impl VRouterConfig {
    /// The owner reference of the VRouterBinding that controls this config,
    /// if one does: what generated it, read from the controller reference
    /// rather than a label anyone may edit.
    pub fn controlling_binding(&self) -> Option<&OwnerReference> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "VRouterBinding")
    }

    /// Paused for debugging or by its binding: no new apply and no drift
    /// repair, while drift stays visible.
    pub fn is_paused(&self) -> bool {
        self.pause().is_some()
    }

    /// Why the config is paused, if it is; the annotation wins (it also
    /// stops an apply in flight from being followed).
    pub fn pause(&self) -> Option<Pause> {
        let is_true = |map: &Option<std::collections::BTreeMap<String, String>>, key: &str| {
            map.as_ref().and_then(|m| m.get(key)).is_some_and(|v| v == "true")
        };
        if is_true(&self.metadata.annotations, crate::constants::ANNOTATION_PAUSED) {
            Some(Pause::Annotation)
        } else if is_true(&self.metadata.labels, crate::constants::LABEL_BINDING_PAUSED) {
            Some(Pause::Binding)
        } else {
            None
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}
