#![doc = include_str!("../README.md")]

pub mod api_client;
pub mod daemon;
mod error;
pub mod factory;
mod guest;
pub mod kept_providers;
pub mod kubevirt;
pub mod lookup_cache;
pub mod memory_budget;
pub mod off_runtime;
mod outcome;
mod provider;
pub mod proxmox;
mod proxmox_trust_source;

pub use error::{Attempts, EndpointFailure, KubeAccess, MAX_PEER_TEXT_BYTES, ProviderError};
pub use factory::{FactoryContext, KubeLookup, ObjectLookup, StaticLookup, build_provider};
pub use guest::{
    GuestPaths, GuestTiming, RUNNING_CONFIG_FOLLOWS, check_then_read_argv, excerpt, parse_proc_uptime, parse_substate,
};
pub use kept_providers::KeptProviders;
pub use lookup_cache::CachedLookup;
pub use provider::{ApplyRecord, ExecHandle, ExecOutcome, ExecStatus, Provider};
pub use vrouter_qga::{ApplyId, GuestFlavor};
