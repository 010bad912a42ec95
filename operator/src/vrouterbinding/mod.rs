//! The VRouterBinding controller: renders templates for each target into one
//! VRouterConfig per target, with an optional serial rollout (spec §7.1).
//! `plan` holds the pure parts; `reconcile` performs the I/O.

pub mod plan;
pub mod reconcile;
