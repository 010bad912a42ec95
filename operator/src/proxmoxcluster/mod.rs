//! The ProxmoxCluster controller: tracks which node hosts each VM and detects
//! guest reboots (spec §7.3). `decide` holds the decisions, `reconcile` the
//! reads and writes around them.

pub mod decide;
pub mod reconcile;
