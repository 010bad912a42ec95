//! `VRouterStatus`: what is really on a router, and whether it drifted from
//! what its VRouterConfig last applied.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::Duration;
use crate::refs::NameRef;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterStatus",
    doc = "The configuration read back from a router, and whether it drifted.",
    plural = "vrouterstatuses",
    namespaced,
    category = "vrouter",
    status = "VRouterStatusStatus",
    shortname = "vrs",
    shortname = "vrouterstatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Config","type":"string","jsonPath":".spec.configRef.name"}"#,
    printcolumn = r#"{"name":"Drift","type":"boolean","jsonPath":".status.driftDetected"}"#,
    printcolumn = r#"{"name":"LastFetch","type":"date","jsonPath":".status.lastFetchTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VRouterStatusSpec {
    /// The VRouterConfig this object watches; same namespace only.
    pub config_ref: NameRef,
    /// How often the router's config is read back.
    #[serde(default = "default_sync_interval")]
    #[schemars(extend("default" = "5m"))]
    pub sync_interval: Duration,
}

fn default_sync_interval() -> Duration {
    Duration::from_secs(300)
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VRouterStatusStatus {
    /// `sha256:<hex>` of `/config/config.boot`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub startup_config_hash: String,
    /// `sha256:<hex>` of the running (committed) config.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub running_config_hash: String,
    /// Name of the Secret holding both configs (keys `startup` and
    /// `running`, type `vrouter.kojuro.date/router-config`): a router's
    /// config holds its passwords and keys, so it is never kept in a ConfigMap.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_secret_ref: String,
    /// Deprecated: the ConfigMap an earlier version kept the configs in. The
    /// operator deletes it once the Secret holds them, then clears this field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_map_ref: String,
    /// The startup hash captured right after the last apply.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub baseline_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_baseline_time: Option<Time>,
    #[serde(default)]
    pub drift_detected: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl VRouterStatus {
    /// The Secret holding the router's startup and running configs
    /// (keys `startup` and `running`): `vrs-<name>-config`. An earlier
    /// version's ConfigMap had the same name.
    pub fn config_secret_name(&self) -> String {
        Self::config_secret_name_of(self.metadata.name.as_deref().unwrap_or(""))
    }

    /// [`Self::config_secret_name`] of the VRouterStatus `name` (which is
    /// also the name of its VRouterConfig).
    pub fn config_secret_name_of(name: &str) -> String {
        format!("vrs-{name}-config")
    }
}
