//! Starts every controller, and runs them only while this replica leads.
//! Each controller module sets itself up (its own watches, its triggers);
//! this module hands them the shared context, the scope, the watches several
//! of them read ([`Watches`]) and the shutdown.

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;

use crate::runtime::context::Context;
use crate::runtime::reconciler::{Scope, Shutdown};
use crate::runtime::watches::Watches;
pub mod proxmox_cluster;
pub mod vrouter_binding;
pub mod vrouter_config;
pub mod vrouter_status;
pub mod vrouter_target;

/// Runs every controller until `shutdown` resolves, watching `namespace`
/// only when given (`--watch-namespace`), else the whole cluster.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let scope = Scope {
        client: ctx.client.clone(),
        namespace,
    };
    let shutdown: Shutdown = shutdown.boxed().shared();
    let watches = Watches::new(&scope);
    ctx.metrics.observe_stores(watches.stores());
    // The controllers subscribe before their first await, so the watches
    // (polled last) start with every subscriber in place.
    futures::join!(
        vrouter_config::run(ctx.clone(), &scope, &watches, shutdown.clone()),
        vrouter_binding::run(ctx.clone(), &scope, &watches, shutdown.clone()),
        vrouter_target::run(ctx.clone(), &scope, &watches, shutdown.clone()),
        vrouter_status::run(ctx.clone(), &watches, shutdown.clone()),
        proxmox_cluster::run(ctx, &scope, &watches, shutdown.clone()),
        watches.run(shutdown),
    );
}

/// Sets the leader gauge back to 0 when dropped: whichever way [`lead`]
/// returns, this replica no longer runs the controllers.
struct NotLeadingOnDrop(crate::runtime::metrics::Metrics);

impl Drop for NotLeadingOnDrop {
    fn drop(&mut self) {
        self.0.set_leader(false);
    }
}

/// Why [`lead`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// `shutdown` was signalled; the controllers finished their work.
    Shutdown,
    /// Another replica holds the lease now; the controllers were stopped.
    LostLease,
}

/// Waits to lead (when `candidate` is given), then runs the controllers
/// until shutdown or until the lease is lost — whichever comes first.
pub async fn lead(
    ctx: Arc<Context>,
    candidate: Option<&mut crate::runtime::leader::Candidate>,
    namespace: Option<String>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Ended {
    let mut leading = candidate.map(|c| c.leading.clone());
    if let Some(leading) = leading.as_mut() {
        // The `Ref` guards `wait_for` returns are dropped inside each future:
        // they must not be held across the select.
        tokio::select! {
            became = async { leading.wait_for(|l| *l).await.is_ok() } => if !became { return Ended::LostLease },
            _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => return Ended::Shutdown,
        }
        tracing::info!("leading: starting controllers");
    }
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let metrics = ctx.metrics.clone();
    metrics.set_leader(true);
    let _not_leading = NotLeadingOnDrop(metrics);
    let running = run(ctx, namespace, async move {
        let _ = stopped.wait_for(|s| *s).await;
    });
    tokio::pin!(running);
    let lost = async {
        match leading.as_mut() {
            Some(leading) => {
                let _ = leading.wait_for(|l| !*l).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = &mut running => Ended::Shutdown,
        _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => {
            let _ = stop.send(true);
            running.await;
            Ended::Shutdown
        }
        _ = lost => {
            // Stop at once: another replica may already be reconciling.
            Ended::LostLease
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_controllers_whose_metrics_start_at_zero_are_the_controllers() {
        let names = [
            super::vrouter_config::CONTROLLER,
            super::vrouter_binding::CONTROLLER,
            super::vrouter_target::CONTROLLER,
            super::vrouter_status::CONTROLLER,
            super::proxmox_cluster::CONTROLLER,
        ];
        assert_eq!(crate::runtime::metrics::CONTROLLERS, names);
    }
}
