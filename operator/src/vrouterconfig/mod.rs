//! The VRouterConfig controller: applies one router's config and reports the
//! result (spec §7.2). `decide` holds every decision; `reconcile` performs
//! the I/O around it.

pub mod decide;
pub mod one_apply_per_router;
pub mod reconcile;
pub mod status_object_retry;
pub mod status_sweep;
