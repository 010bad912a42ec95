//! `VRouterTarget`: one router, how to reach it, and its own params.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::proxmox_cluster::CaBundleRef;
use crate::refs::{NameRef, SecretKeyRef};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterTarget",
    doc = "One router: the provider that reaches it and its own params.",
    namespaced,
    category = "vrouter",
    status = "VRouterTargetStatus",
    shortname = "vrt",
    shortname = "vroutertarget",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.provider.type"}"#,
    printcolumn = r#"{"name":"VM Running","type":"boolean","jsonPath":".status.vmRunning"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.proxmoxNode","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VRouterTargetSpec {
    pub provider: ProviderConfig,
    /// The highest-priority params layer: overrides the binding's params and
    /// its paramsRefs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::refs::preserve_unknown_fields")]
    pub params: Option<serde_json::Value>,
}

/// How the operator reaches the router.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ProviderType {
    /// A KubeVirt VM, reached through the guest agent via `virsh` in its virt-launcher pod.
    #[default]
    #[serde(rename = "kubevirt")]
    KubeVirt,
    /// A Proxmox VE VM, reached through the guest agent via the Proxmox REST API.
    #[serde(rename = "proxmox")]
    Proxmox,
    /// Any machine running the vrouter-daemon agent, reached through its gRPC ControlService.
    #[serde(rename = "vrouter-daemon")]
    VRouterDaemon,
}

impl ProviderType {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderType::KubeVirt => "kubevirt",
            ProviderType::Proxmox => "proxmox",
            ProviderType::VRouterDaemon => "vrouter-daemon",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ProviderConfig {
    #[serde(rename = "type", default)]
    pub type_: ProviderType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt: Option<KubeVirtConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxmox: Option<ProxmoxConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonConfig>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct KubeVirtConfig {
    /// Name of the VirtualMachineInstance.
    pub name: String,
    /// Namespace of the VirtualMachineInstance; defaults to the target's own.
    /// Unlike other references this one may name another namespace (or, with
    /// `kubeconfig`, another cluster): it locates a VM, not an object of this operator.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// A kubeconfig Secret for a VM in another cluster; absent means this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<KubeconfigRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigRef {
    pub secret_ref: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxmoxConfig {
    /// VMID of the VM on the Proxmox cluster (Proxmox allots 100 to 999999999).
    #[schemars(range(min = 100, max = 999_999_999))]
    pub vmid: i64,
    /// The ProxmoxCluster holding endpoints and credentials; same namespace only.
    pub cluster_ref: NameRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonConfig {
    /// gRPC endpoint of the vrouter-daemon ControlService: `host:port` or
    /// `http://host:port` (plaintext), or `https://host:port` (TLS, never
    /// falling back to plaintext), e.g. `vrouter-server.vrouter-system.svc:9090`.
    pub address: String,
    /// Identifier of the router's agent.
    #[serde(rename = "agentID")]
    pub agent_id: String,
    /// Longest time an apply may take before it is reported failed.
    #[serde(default = "default_daemon_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i32,
    /// PEM CA certificates that are the ONLY roots trusted for an
    /// `https://` address; absent means the operator's system roots. Only
    /// with an `https://` address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundleRef>,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            address: String::new(),
            agent_id: String::new(),
            timeout_seconds: default_daemon_timeout(),
            ca_bundle: None,
        }
    }
}

fn default_daemon_timeout() -> i32 {
    60
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VRouterTargetStatus {
    /// The Proxmox node hosting the VM, kept current by the ProxmoxCluster controller.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub proxmox_node: String,
    /// When the guest last booted, if a recent reboot was detected; a newer
    /// value forces one re-apply of every config of this target not applied
    /// since that boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reboot_time: Option<Time>,
    /// Whether the VM was running at the last poll.
    #[serde(default)]
    pub vm_running: bool,
    /// `Ready` (the VM runs), `Reconciling` and `Stalled`, as kstatus reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The provider block that `spec.provider.type` selects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SelectedProvider<'a> {
    KubeVirt(&'a KubeVirtConfig),
    Proxmox(&'a ProxmoxConfig),
    Daemon(&'a DaemonConfig),
}

impl ProviderConfig {
    /// The block of the selected type; `None` when that block is missing
    /// (a block of another type is ignored).
    pub fn selected(&self) -> Option<SelectedProvider<'_>> {
        match self.type_ {
            ProviderType::KubeVirt => self.kubevirt.as_ref().map(SelectedProvider::KubeVirt),
            ProviderType::Proxmox => self.proxmox.as_ref().map(SelectedProvider::Proxmox),
            ProviderType::VRouterDaemon => self.daemon.as_ref().map(SelectedProvider::Daemon),
        }
    }
}

impl VRouterTarget {
    /// Namespace of the KubeVirt VM: the explicit one, else the target's own.
    pub fn kubevirt_namespace(&self) -> Option<String> {
        let kv = self.spec.provider.kubevirt.as_ref()?;
        if kv.namespace.is_empty() {
            self.metadata.namespace.clone()
        } else {
            Some(kv.namespace.clone())
        }
    }
}

/// How a daemon address is reached, from its scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonTransport {
    /// `host:port` or `http://host:port`: plaintext gRPC.
    Plaintext,
    /// `https://host:port`: TLS, and nothing else.
    Tls,
}

impl DaemonTransport {
    /// The transport `address` names; `Err` says why the scheme is refused.
    /// Schemes are compared case-insensitively, as URIs define them.
    pub fn of(address: &str) -> Result<DaemonTransport, String> {
        let address = address.trim();
        let Some((scheme, _)) = address.split_once("://") else {
            return Ok(DaemonTransport::Plaintext);
        };
        match scheme.to_ascii_lowercase().as_str() {
            "http" => Ok(DaemonTransport::Plaintext),
            "https" => Ok(DaemonTransport::Tls),
            _ => Err(format!(
                "scheme {scheme:?} is not supported: write host:port or http://host:port (plaintext) or \
                 https://host:port (TLS)"
            )),
        }
    }
}
