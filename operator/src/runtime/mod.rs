//! What every controller runs on: the reconciler loop and the shared context,
//! the watches and stores, the writes (own, status, binding), finalizers,
//! conditions, the per-router apply bookkeeping, leader election and logging.
//! Nothing here imports a controller.

pub mod apply_dispatches;
pub mod binding_writes;
pub mod conditions;
pub mod config_hash;
pub mod context;
pub mod controller_context;
pub mod crash_point;
pub mod finalizers;
pub mod leader;
pub mod metrics;
pub mod object_gauges;
pub mod off_runtime;
pub mod one_apply_per_router;
pub mod own_writes;
pub mod recently_ready;
pub mod reconciler;
pub mod status_object_retry;
pub mod status_writes;
pub mod stores;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod test_clock;
pub mod watches;
