//! `ProxmoxCluster`: endpoints and credentials of a Proxmox VE cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::Duration;
use crate::refs::{SecretKeyRef, SecretReference, default_true};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "ProxmoxCluster",
    doc = "Endpoints and API-token credentials of a Proxmox VE cluster.",
    namespaced,
    category = "vrouter",
    status = "ProxmoxClusterStatus",
    shortname = "pxc",
    shortname = "proxmoxcluster",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".spec.endpoints[0]"}"#,
    printcolumn = r#"{"name":"LastSync","type":"date","jsonPath":".status.lastSyncTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProxmoxClusterSpec {
    /// API endpoints such as `https://pve1.example.com:8006`, tried in order until one answers.
    pub endpoints: Vec<String>,
    /// A Secret with keys `api-token-id` and `api-token-secret`.
    pub credentials_ref: SecretReference,
    /// Accept any certificate: the API token can be intercepted. Refused
    /// together with `caBundle` or `certificateFingerprints`.
    #[serde(rename = "insecureSkipTLSVerify", default)]
    pub insecure_skip_tls_verify: bool,
    /// PEM CA certificates (such as the cluster's `/etc/pve/pve-root-ca.pem`)
    /// that are the ONLY roots trusted for this cluster's endpoints; absent
    /// means the operator's system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundleRef>,
    /// SHA-256 fingerprints (`AB:CD:…` as `pvenode cert info` shows them, or
    /// 64 hex digits) of the endpoints' own certificates. Each endpoint's
    /// certificate must be one of them. Without `caBundle`, a listed
    /// certificate is trusted as it is (self-signed included); with it, the
    /// certificate must also chain to the bundle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificate_fingerprints: Vec<String>,
    /// How often the node map and guest uptimes are polled.
    #[serde(default = "default_sync_interval")]
    #[schemars(extend("default" = "60s"))]
    pub sync_interval: Duration,
    /// Read `/proc/uptime` in the guest to see reboots that keep the QEMU process.
    #[serde(default = "default_true")]
    pub check_guest_uptime: bool,
}

/// Where a CA bundle is: a key of a Secret in the namespace of the object
/// that names it (a ProxmoxCluster, or a VRouterTarget's daemon block).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBundleRef {
    pub secret_ref: SecretKeyRef,
}

fn default_sync_interval() -> Duration {
    Duration::from_secs(60)
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxmoxClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Keys of the credentials Secret.
pub const SECRET_KEY_TOKEN_ID: &str = "api-token-id";
pub const SECRET_KEY_TOKEN_SECRET: &str = "api-token-secret";
