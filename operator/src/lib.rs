//! The vrouter operator: controllers and admission webhooks wired around the
//! `vrouter-*` libraries. Each controller module (`vrouterconfig`,
//! `vrouterbinding`, …) sets itself up next to its reconciler and keeps its
//! decisions in a pure `decide` module; `controllers` starts them all, and
//! `reconciler` is the one loop they run in.

pub mod apply_dispatches;
pub mod binding_writes;
pub mod cli;
pub mod conditions;
pub mod context;
pub mod controllers;
pub mod convert_manifests;
pub mod crash_point;
pub mod diff;
pub mod finalizers;
pub mod go_flags;
pub mod health_and_metrics;
pub mod leader;
pub mod listen;
pub mod metrics;
pub mod metrics_auth;
pub mod object_gauges;
pub mod offline_render;
pub mod own_writes;
pub mod proxmoxcluster;
pub mod reconciler;
pub mod status_writes;
pub mod stores;
pub mod telemetry;
#[cfg(test)]
mod test_clock;
pub mod tls;
pub mod vrouterbinding;
pub mod vrouterconfig;
pub mod vrouterstatus;
pub mod vroutertarget;
pub mod watches;
pub mod webhook_certs;
pub mod webhooks;
