//! The one piece every controller runs through: a reconcile is timed and
//! counted, a failed one is counted, logged and retried after the delay its
//! controller chooses. A reconcile that panics is caught here: it fails that
//! one object (counted, logged, retried after [`PANIC_RETRY`]) and never
//! the process, whose other objects go on being reconciled. A controller module only says what it reconciles,
//! how, and how long to wait after an error ([`Reconciler`]), and builds its
//! own `kube` controller with the watches it needs.

use std::any::Any;
use std::fmt::Debug;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use kube::api::Api;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::runtime::context::Context;

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

/// How soon an object whose reconcile panicked is reconciled again. The
/// panic is a bug met on this object's input (or its peer's answer), which
/// a retry at the usual error pace would only repeat; a much later retry
/// still lets a changed object, or a peer that answers differently, through.
pub const PANIC_RETRY: Duration = Duration::from_secs(30);

/// How a reconcile failed: with its controller's own error, or by
/// panicking (caught at this boundary; the message is the panic's).
#[derive(Debug, thiserror::Error)]
pub enum Failure<E: std::error::Error + 'static> {
    #[error(transparent)]
    Reconcile(E),
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
}

/// The span every reconcile of `object` runs in, and its error handling
/// too: each line a controller logs says which object it was about without
/// the controller repeating it. The object's name is the field `object`:
/// in a JSON log a span's own name is the key `name`.
fn reconcile_span<R: Reconciler>(object: &R::Object) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        kind = %<R::Object as Resource>::kind(&()),
        namespace = object.meta().namespace.as_deref().unwrap_or_default(),
        object = %object.name_any(),
    )
}

async fn reconcile<R: Reconciler>(object: Arc<R::Object>, ctx: Arc<R::Context>) -> Result<Action, Failure<R::Error>> {
    let _timer = (*ctx).as_ref().metrics.count_and_measure(R::NAME);
    // Unwind safety: a panicking reconcile leaves nothing half-changed that
    // the next reconcile trusts — every reconcile reads its object afresh,
    // and what it shares (caches, registries) is behind locks, which a
    // panic releases.
    let span = reconcile_span::<R>(&object);
    match AssertUnwindSafe(R::reconcile(object, ctx).instrument(span))
        .catch_unwind()
        .await
    {
        Ok(result) => result.map_err(Failure::Reconcile),
        Err(payload) => Err(Failure::Panicked(panic_message(payload.as_ref()))),
    }
}

/// The text a panic was raised with, cut to a status-message length (a
/// panic may quote what a peer sent).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    vrouter_api::text::message(text).into_owned()
}

fn error_policy<R: Reconciler>(object: Arc<R::Object>, failure: &Failure<R::Error>, ctx: Arc<R::Context>) -> Action {
    let _span = reconcile_span::<R>(&object).entered();
    let metrics = &(*ctx).as_ref().metrics;
    let error = match failure {
        Failure::Reconcile(error) => error,
        Failure::Panicked(message) => {
            metrics.reconcile_failed(R::NAME);
            metrics.reconcile_panicked(R::NAME);
            tracing::error!(controller = R::NAME, object = %object.name_any(), panic = %message, retry = ?PANIC_RETRY, "reconcile panicked; the process goes on, this object is retried later");
            return Action::requeue(PANIC_RETRY);
        }
    };
    let retry = R::retry_after(error, &ctx);
    // A conflict is counted apart from errors: it is routine, and an
    // error-rate alert must not fire on it.
    if R::is_routine(error) {
        metrics.reconcile_conflicted(R::NAME);
        tracing::debug!(controller = R::NAME, object = %object.name_any(), %error, ?retry, "reconcile met a conflict; retrying");
    } else {
        metrics.reconcile_failed(R::NAME);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_read_from_either_payload_and_bounded() {
        let text: Box<dyn Any + Send> = Box::new("index out of bounds");
        assert_eq!(panic_message(text.as_ref()), "index out of bounds");
        let formatted: Box<dyn Any + Send> = Box::new(format!("value {}", 1e20));
        assert_eq!(panic_message(formatted.as_ref()), "value 100000000000000000000");
        let other: Box<dyn Any + Send> = Box::new(7u8);
        assert_eq!(panic_message(other.as_ref()), "a panic without a message");
        let huge: Box<dyn Any + Send> = Box::new("x".repeat(1 << 20));
        let message = panic_message(huge.as_ref());
        assert!(
            message.len() <= vrouter_api::text::MAX_MESSAGE_BYTES,
            "{}",
            message.len()
        );
        assert!(message.ends_with(vrouter_api::text::CUT_MARKER));
    }
}
