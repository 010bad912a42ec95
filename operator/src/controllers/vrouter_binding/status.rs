//! The binding's status write: `Ready` with the kstatus conditions it
//! implies, and whatever else of the status a step changes; shared by the
//! reconcile shell and the wave shell.

use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use vrouter_api::{VRouterBinding, VRouterBindingStatus};

use super::BindingContext;
use super::error::Error;
use crate::runtime::conditions::{self, Wanted};
use crate::runtime::status_writes;

/// Writes `ready` (`retrying`: a `ReconcileError` the controller expects
/// to get past by itself) and whatever `edit` changes, when anything
/// changed; whether it wrote.
pub async fn set_status_with(
    ctx: &BindingContext,
    binding: &VRouterBinding,
    ready: Wanted<'_>,
    retrying: bool,
    edit: impl FnOnce(&mut VRouterBindingStatus),
) -> Result<bool, Error> {
    let current = binding.status.clone().unwrap_or_default();
    let mut next: VRouterBindingStatus = current.clone();
    let generation = binding.meta().generation;
    conditions::summarise(
        &mut next.conditions,
        conditions::binding_summary(&ready, retrying),
        generation,
        Timestamp::now(),
    );
    next.observed_generation = generation;
    edit(&mut next);
    let written = status_writes::patch_status(&ctx.client, binding, Some(&current), &next).await?;
    if let Some(written) = &written {
        ctx.own.status_writes.record_over(binding, written);
    }
    Ok(written.is_some())
}
