//! The VRouterStatus controller: reads a router's config back and repairs
//! drift (the drift-detection proposal). `decide` holds the decisions;
//! `reconcile` performs the I/O.

pub mod decide;
pub mod reconcile;
