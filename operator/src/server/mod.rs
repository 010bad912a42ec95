//! The operator's HTTP side, served on every replica: admission webhooks,
//! metrics (with their authorisation), health probes, listen addresses and TLS.

pub mod health_and_metrics;
pub mod listen;
pub mod metrics_auth;
pub mod tls;
pub mod webhook_certs;
pub mod webhooks;
