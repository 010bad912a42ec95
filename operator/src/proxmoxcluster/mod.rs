//! The ProxmoxCluster controller: tracks which node hosts each VM and detects
//! guest reboots (spec §7.3). `decide` holds the decisions.

pub mod decide;
