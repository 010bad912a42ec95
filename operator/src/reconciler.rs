//! The one piece every controller runs through: a reconcile is timed and
//! counted, a failed one is counted, logged and retried after the delay its
//! controller chooses. A controller module only says what it reconciles,
//! how, and how long to wait after an error ([`Reconciler`]), and builds its
//! own `kube` controller with the watches it needs.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use kube::api::Api;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::context::Context;

/// Resolves when the controllers are to stop; every controller holds a clone.
pub type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Where the controllers watch: one namespace (`--watch-namespace`) or all.
#[derive(Clone)]
pub struct Scope {
    pub client: kube::Client,
    pub namespace: Option<String>,
}

impl Scope {
    /// Every object of kind `K` in the scope.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }
}

/// What a controller module tells the runner about itself.
pub trait Reconciler: Send + Sync + 'static {
    /// The kind it reconciles.
    type Object: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static;
    /// What each reconcile reads besides the object: the shared [`Context`],
    /// and anything only this controller has (its own store).
    type Context: AsRef<Context> + Send + Sync + 'static;
    type Error: std::error::Error + Send + Sync + 'static;
    /// The `controller` label of its metrics and logs.
    const NAME: &'static str;

    fn reconcile(
        object: Arc<Self::Object>,
        ctx: Arc<Self::Context>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// How long to wait after `error` before reconciling the object again.
    fn retry_after(error: &Self::Error, ctx: &Self::Context) -> Duration;

    /// An error that is part of normal operation (a conflict with a write
    /// this controller's cache has not seen yet): logged at debug only.
    fn is_routine(_error: &Self::Error) -> bool {
        false
    }
}

/// Runs `controller` with `R`'s reconcile until `shutdown` resolves.
pub async fn run<R: Reconciler>(controller: Controller<R::Object>, ctx: Arc<R::Context>, shutdown: Shutdown) {
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<R>, error_policy::<R>, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile<R: Reconciler>(object: Arc<R::Object>, ctx: Arc<R::Context>) -> Result<Action, R::Error> {
    let _timer = (*ctx).as_ref().metrics.count_and_measure(R::NAME);
    R::reconcile(object, ctx).await
}

fn error_policy<R: Reconciler>(object: Arc<R::Object>, error: &R::Error, ctx: Arc<R::Context>) -> Action {
    (*ctx).as_ref().metrics.reconcile_failed(R::NAME);
    let retry = R::retry_after(error, &ctx);
    if R::is_routine(error) {
        tracing::debug!(controller = R::NAME, object = %object.name_any(), %error, ?retry, "reconcile met a conflict; retrying");
    } else {
        tracing::warn!(controller = R::NAME, object = %object.name_any(), %error, ?retry, "reconcile failed; retrying");
    }
    Action::requeue(retry)
}

/// A conflict means this controller's cache was one write behind: a look
/// again soon finds the new version.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 409)
}

/// How soon an object whose write met a conflict is looked at again.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(200);
