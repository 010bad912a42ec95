//! The HTTP endpoints besides the webhooks: `/healthz` and `/readyz` for
//! the kubelet's probes (plain HTTP, no authentication: the kubelet sends
//! none), and `/metrics` for Prometheus — over HTTPS with the caller's
//! token checked by the API server ([`crate::server::metrics_auth`]) unless the
//! operator is told to serve it in plain HTTP.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::runtime::metrics::Metrics;
use crate::server::metrics_auth::{Decision, MetricsAuth};

/// Whether the operator is ready to serve: start-up has finished and every
/// listener that was started still accepts.
#[derive(Clone, Default)]
pub struct Readiness(Arc<ReadinessState>);

#[derive(Default)]
struct ReadinessState {
    started: AtomicBool,
    /// Listeners whose serving task ended (it only ends by shutdown, panic
    /// or abort): the API server would keep calling a dead webhook.
    gone: Mutex<Vec<&'static str>>,
}

/// Held by the task serving a listener; dropping it (the task ended, was
/// aborted or panicked) makes the operator not ready.
#[must_use = "the listener counts as gone as soon as the guard is dropped"]
pub struct ListenerGuard {
    name: &'static str,
    readiness: Readiness,
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        let mut gone = self.readiness.0.gone.lock().unwrap_or_else(|e| e.into_inner());
        gone.push(self.name);
    }
}

impl Readiness {
    pub fn set_ready(&self) {
        self.0.started.store(true, Ordering::SeqCst);
    }

    /// A guard for the serving task of listener `name`.
    pub fn listener(&self, name: &'static str) -> ListenerGuard {
        ListenerGuard {
            name,
            readiness: self.clone(),
        }
    }

    /// `Err` says why the operator is not ready.
    pub fn check(&self) -> Result<(), String> {
        let gone = self.0.gone.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = gone.first() {
            return Err(format!("the {name} listener stopped serving"));
        }
        if !self.0.started.load(Ordering::SeqCst) {
            return Err("starting".into());
        }
        Ok(())
    }

    pub fn is_ready(&self) -> bool {
        self.check().is_ok()
    }
}

/// `/healthz` and `/readyz`.
pub fn health_router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

async fn readyz(State(readiness): State<Readiness>) -> impl IntoResponse {
    match readiness.check() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

#[derive(Clone)]
struct MetricsState {
    metrics: Metrics,
    /// `None`: served to anyone (`--metrics-secure=false`).
    auth: Option<Arc<MetricsAuth>>,
}

/// The path Prometheus scrapes, and the non-resource URL readers are granted.
pub const METRICS_PATH: &str = "/metrics";

/// `/metrics`; with `auth`, only for callers the API server allows.
pub fn metrics_router(metrics: Metrics, auth: Option<Arc<MetricsAuth>>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(metrics_text))
        .with_state(MetricsState { metrics, auth })
}

async fn metrics_text(State(state): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Some(auth) = &state.auth {
        let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        match auth.decide(authorization, METRICS_PATH).await {
            Ok(Decision::Allowed) => {}
            Ok(Decision::Unauthenticated(why)) => {
                return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], why).into_response();
            }
            Ok(Decision::Forbidden(why)) => return (StatusCode::FORBIDDEN, why).into_response(),
            Err(error) => {
                tracing::warn!(%error, "could not check a /metrics caller with the API server");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the API server could not be asked about the token",
                )
                    .into_response();
            }
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_listener_makes_the_operator_unready() {
        let readiness = Readiness::default();
        assert_eq!(readiness.check(), Err("starting".into()));
        let guard = readiness.listener("webhook");
        readiness.set_ready();
        assert!(readiness.is_ready());
        drop(guard);
        assert_eq!(readiness.check(), Err("the webhook listener stopped serving".into()));
    }
}
