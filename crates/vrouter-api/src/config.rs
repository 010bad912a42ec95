//! `VRouterConfig`: the rendered configuration of one router, and the state
//! of applying it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::refs::{NameRef, default_true};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterConfig",
    doc = "The rendered configuration of one router and the state of applying it.",
    namespaced,
    status = "VRouterConfigStatus",
    shortname = "vrc",
    shortname = "vrouterconfig",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
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
}

impl VRouterConfig {
    /// Paused for debugging (annotation `vrouter.kojuro.date/paused: "true"`):
    /// no apply and no drift repair, while drift stays visible.
    pub fn is_paused(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::constants::ANNOTATION_PAUSED))
            .is_some_and(|v| v == "true")
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}
