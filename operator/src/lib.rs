//! The vrouter operator: controllers and admission webhooks wired around the
//! `vrouter-*` libraries. Decisions live in pure `decide`/`plan`/`rules`
//! modules; the code around them only reads, calls and writes.

pub mod cli;
pub mod conditions;
pub mod context;
pub mod convert_manifests;
pub mod http;
pub mod leader;
pub mod lookup_cache;
pub mod metrics;
pub mod objects;
pub mod offline_render;
pub mod proxmoxcluster;
pub mod run;
pub mod telemetry;
pub mod tls;
pub mod vrouterbinding;
pub mod vrouterconfig;
pub mod vrouterstatus;
pub mod vroutertarget;
pub mod webhooks;
