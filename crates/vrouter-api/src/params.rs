//! `VRouterParams`: a reusable block of params that bindings merge in.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A pure data object with no status: the lowest-priority params layer of
/// every binding that lists it in `paramsRefs`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterParams",
    doc = "A reusable block of params merged into bindings via paramsRefs.",
    plural = "vrouterparams",
    namespaced,
    category = "vrouter",
    shortname = "vrtp",
    shortname = "vrouterparams",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct VRouterParamsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::refs::preserve_unknown_fields")]
    pub params: Option<serde_json::Value>,
}
