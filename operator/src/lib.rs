//! The vrouter operator, laid out by job:
//! - [`controllers`]: one folder per kind (`vrouter_config`, …), each with its
//!   setup and watches (`mod.rs`), its reconcile shell and its pure decisions;
//! - [`runtime`]: what every controller runs on (the reconciler loop, the shared
//!   context, watches and stores, writes, finalizers, conditions, leader election);
//! - [`server`]: the HTTP side (admission webhooks, metrics, health, listen, TLS);
//! - [`cli`]: the command line and its offline commands (render, convert, diff).
//!
//! Arrows point down only: controllers use the runtime, the runtime knows no
//! controller, and the server and CLI reach a controller only through what its
//! `mod.rs` exposes (checked by `tests/module_imports.rs`).

pub mod cli;
pub mod controllers;
pub mod runtime;
pub mod server;
