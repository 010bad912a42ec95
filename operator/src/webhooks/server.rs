//! The HTTPS server the API server calls for admission reviews.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::review::Admission;

/// The path every validating webhook of the operator points at.
pub const VALIDATE_PATH: &str = "/validate";

pub fn router(admission: Admission) -> Router {
    Router::new()
        .route(VALIDATE_PATH, post(validate))
        .with_state(Arc::new(admission))
}

async fn validate(
    State(admission): State<Arc<Admission>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    Json(admission.review(review).await)
}

/// Serves `router` over TLS on `listener` until `shutdown` turns true.
/// Connections in progress are finished; new ones are no longer accepted.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
            };
            // HTTP/1.1 only: the TLS config offers just that in ALPN, and the
            // API server's webhook client speaks it.
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "webhook connection ended with an error");
            }
        });
    }
}
