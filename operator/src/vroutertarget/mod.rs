//! The VRouterTarget controller (spec §7.6): polls whether the target's VM
//! runs and reports it in `status.vmRunning`, writing only on a change.

use std::sync::Arc;
use std::time::Instant;

use kube::runtime::controller::Action;
use vrouter_api::VRouterTarget;

use crate::context::Context;
use crate::objects;

pub const CONTROLLER: &str = "vroutertarget";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

pub async fn reconcile(target: Arc<VRouterTarget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = poll(&target, &ctx).await;
    ctx.metrics.reconciled(CONTROLLER, started.elapsed(), result.is_err());
    result?;
    // The poll interval holds on every path: an unreachable provider is
    // asked again at the next poll, not in a tight retry loop.
    Ok(Action::requeue(ctx.settings.target_poll))
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
        objects::patch_status(&ctx.client, target, Some(&current), &next).await?;
    }
    Ok(())
}

pub fn error_policy(_target: Arc<VRouterTarget>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(%error, "VRouterTarget reconcile failed");
    Action::requeue(ctx.settings.target_poll)
}
