//! The VRouterTarget reconciler: asks the provider whether the VM runs and
//! writes `status.vmRunning` when that changed.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use vrouter_api::VRouterTarget;

use crate::context::Context;
use crate::reconciler::Reconciler;
use crate::status_writes;

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

async fn poll(target: &VRouterTarget, ctx: &Context) -> Result<(), Error> {
    let running = match ctx.providers.for_target(target).await {
        Ok(provider) => provider.is_vm_running().await,
        Err(e) => Err(e),
    };
    let running = match running {
        Ok(running) => running,
        Err(error) => {
            // The last observed value stays; the error is in the log.
            tracing::warn!(target = ?target.metadata.name, %error, "could not tell whether the VM runs");
            return Ok(());
        }
    };
    let current = target.status.clone().unwrap_or_default();
    if current.vm_running != running {
        let mut next = current.clone();
        next.vm_running = running;
        status_writes::patch_status(&ctx.client, target, Some(&current), &next).await?;
    }
    Ok(())
}
