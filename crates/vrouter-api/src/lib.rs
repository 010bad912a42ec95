#![doc = include_str!("../README.md")]

pub mod binding;
pub mod compose;
pub mod config;
pub mod constants;
pub mod crds;
pub mod daemon_access;
pub mod duration;
pub mod fingerprint;
pub mod history;
pub mod manifest;
pub mod params;
pub mod proxmox_cluster;
pub mod refs;
pub mod selector;
pub mod status;
pub mod target;
pub mod template;
pub mod text;
pub mod validate;
pub mod vm_access;
pub mod waves;

pub use binding::{
    BindingRef, ReferencedKind, RolloutMode, RolloutSpec, RolloutStatus, VRouterBinding, VRouterBindingSpec,
    VRouterBindingStatus,
};
pub use config::{
    ConfirmCheck, ConfirmSpec, ConfirmationStatus, Phase, RollbackTo, VRouterConfig, VRouterConfigSpec,
    VRouterConfigStatus,
};
pub use duration::Duration;
pub use params::{VRouterParams, VRouterParamsSpec};
pub use proxmox_cluster::{ProxmoxCluster, ProxmoxClusterSpec, ProxmoxClusterStatus};
pub use refs::{ControllerRef, NameRef, SecretKeyRef, SecretReference};
pub use selector::{SelectorRequirement, TargetSelector};
pub use status::{VRouterStatus, VRouterStatusSpec, VRouterStatusStatus};
pub use target::{
    DaemonConfig, DaemonTransport, KubeVirtConfig, KubeconfigRef, ProviderConfig, ProviderType, ProxmoxConfig,
    SelectedProvider, VRouterTarget, VRouterTargetSpec, VRouterTargetStatus,
};
pub use template::{VRouterTemplate, VRouterTemplateSpec};
pub use waves::{WavesSpec, WavesStatus};

/// Re-exported so users of these types need not pin the same versions themselves.
pub use k8s_openapi;
pub use kube;
