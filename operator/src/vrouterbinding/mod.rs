//! The VRouterBinding controller: renders templates for each target into one
//! VRouterConfig per target, with an optional serial rollout (spec §7.1).

pub mod plan;
