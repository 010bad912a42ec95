//! The VRouterTarget reconciler: asks the provider whether the VM runs and
//! writes `status.vmRunning`, with `Ready` and kstatus's `Reconciling` or
//! `Stalled`, when that changed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use vrouter_api::VRouterTarget;
use vrouter_providers::ProviderError;

use crate::runtime::conditions::{self, VmSeen};
use crate::runtime::context::Context;
use crate::runtime::reconciler::Reconciler;
use crate::runtime::status_writes;

pub const CONTROLLER: &str = "vroutertarget";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

pub struct TargetReconciler;

impl Reconciler for TargetReconciler {
    type Object = VRouterTarget;
    type Context = Context;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    async fn reconcile(target: Arc<VRouterTarget>, ctx: Arc<Context>) -> Result<Action, Error> {
        poll(&target, &ctx).await?;
        // The poll interval holds on every path: an unreachable provider is
        // asked again at the next poll, not in a tight retry loop.
        Ok(Action::requeue(ctx.settings.target_poll))
    }

    fn retry_after(_error: &Error, ctx: &Context) -> Duration {
        ctx.settings.target_poll
    }
}

/// An error of the provider as the target's conditions show it: one that a
/// person must fix (a Secret, a ProxmoxCluster, a grant, a permission)
/// stalls the target; anything else may pass by the next poll.
fn seen_after(error: &ProviderError) -> VmSeen {
    match error {
        ProviderError::Kube { .. }
        | ProviderError::Timeout { .. }
        | ProviderError::Unreachable { .. }
        | ProviderError::Http { .. }
        | ProviderError::Grpc { .. }
        | ProviderError::Agent { .. }
        | ProviderError::AgentUnavailable { .. } => VmSeen::Unknown(error.to_string()),
        _ => VmSeen::Unreachable(error.to_string()),
    }
}

async fn poll(target: &VRouterTarget, ctx: &Context) -> Result<(), Error> {
    let running = match ctx.providers.for_target(target).await {
        // The poll only reports: a cluster-wide view a few seconds old is as
        // good as asking this VM alone, and costs one request for every
        // target polled meanwhile (issue 25).
        Ok(provider) => provider.is_vm_running_polled().await,
        Err(e) => Err(e),
    };
    let current = target.status.clone().unwrap_or_default();
    let mut next = current.clone();
    let seen = match running {
        Ok(true) => VmSeen::Running,
        Ok(false) => VmSeen::Stopped,
        Err(error) => {
            // The last observed vmRunning stays; the conditions say why it
            // could not be read again.
            tracing::warn!(target = ?target.metadata.name, %error, "could not tell whether the VM runs");
            seen_after(&error)
        }
    };
    match seen {
        VmSeen::Running => next.vm_running = true,
        VmSeen::Stopped => next.vm_running = false,
        VmSeen::Unknown(_) | VmSeen::Unreachable(_) => {}
    }
    next.observed_generation = target.metadata.generation;
    conditions::summarise(
        &mut next.conditions,
        conditions::target_summary(&seen),
        target.metadata.generation,
        Timestamp::now(),
    );
    status_writes::patch_status(&ctx.client, target, Some(&current), &next).await?;
    Ok(())
}
