//! `VRouterTemplate`: tera templates for a router's config and commands.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Config-generation logic. Both parts are optional; when a binding applies
/// several templates, their configs and their commands are joined in order,
/// and the apply loads the config before it runs the commands.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterTemplate",
    doc = "Config and command templates (tera) for VyOS routers.",
    namespaced,
    category = "vrouter",
    shortname = "vrtt",
    shortname = "vroutertemplate",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct VRouterTemplateSpec {
    /// A tera template producing a config.boot fragment.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config: String,
    /// A tera template producing configure-mode commands (`set …`, `delete …`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commands: String,
}
