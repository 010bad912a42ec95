//! The HTTPS server the API server calls for admission reviews.
//!
//! It must keep serving whatever a client or the machine does to it: the
//! API server calls it for every write of the operator's kinds with
//! `failurePolicy: Fail`, so a server that stopped accepting would block
//! them all while its pod still looked ready. Hence: the accept loop
//! outlives every error, each connection is bounded in time (TLS handshake,
//! request headers, request body), and the body limit is the largest
//! review the API server can send.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
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

/// The API server refuses request bodies over 3 MiB (`--max-request-body-bytes`).
const APISERVER_MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

/// The largest AdmissionReview accepted: an UPDATE carries the new object
/// (at most one 3 MiB request) and the old one (at most what the API server
/// stores, which came from such a request too), plus the review's own fields.
pub const MAX_REVIEW_BYTES: usize = 2 * APISERVER_MAX_REQUEST_BYTES + 1024 * 1024;

/// How long each stage of a connection may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From accepting the TCP connection to the end of the TLS handshake.
    pub tls_handshake: Duration,
    /// To receive a request's headers, once the request has begun.
    pub header_read: Duration,
    /// To receive a request's whole body, once its headers are in.
    pub body_read: Duration,
    /// The largest body read.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    /// The API server gives a webhook call at most 30 s (`timeoutSeconds`,
    /// 10 s in our configuration); a client slower than that is not the
    /// API server.
    fn default() -> Self {
        Limits {
            tls_handshake: Duration::from_secs(10),
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(30),
            max_body_bytes: MAX_REVIEW_BYTES,
        }
    }
}

#[derive(Clone)]
struct Served {
    admission: Arc<Admission>,
    limits: Limits,
}

/// The webhook routes with the default [`Limits`].
pub fn router(admission: Admission) -> Router {
    router_with(admission, Limits::default())
}

pub fn router_with(admission: Admission, limits: Limits) -> Router {
    Router::new().route(VALIDATE_PATH, post(validate)).with_state(Served {
        admission: Arc::new(admission),
        limits,
    })
}

fn refuse(status: StatusCode, message: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message).into_response()
}

/// Reads the body within the limits, then answers the review.
async fn validate(State(served): State<Served>, request: Request) -> Response {
    let limits = served.limits;
    let read = axum::body::to_bytes(request.into_body(), limits.max_body_bytes);
    let body = match tokio::time::timeout(limits.body_read, read).await {
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {:?}", limits.body_read),
            );
        }
        Ok(Err(error)) if is_length_limit(&error) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("an admission review may be at most {} bytes", limits.max_body_bytes),
            );
        }
        Ok(Err(error)) => return refuse(StatusCode::BAD_REQUEST, format!("reading the request body: {error}")),
        Ok(Ok(body)) => body,
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(error) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("the body is not an AdmissionReview: {error}"),
            );
        }
    };
    let answer = served.admission.review(review).await;
    match serde_json::to_vec(&answer) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], Body::from(json)).into_response(),
        Err(error) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the review: {error}"),
        ),
    }
}

/// Whether reading a body failed on the length limit (axum wraps
/// http-body-util's `LengthLimitError`).
fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Accept errors that mean "this connection went away before it was
/// taken": the next accept is unaffected.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        error.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    )
}

/// The longest pause after an accept error that is not the connection's
/// own (out of file descriptors, out of memory): the process waits for
/// connections to end rather than spin on the error.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Serves `router` over TLS on `listener` with the default [`Limits`].
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    serve_tls_with(listener, tls, router, shutdown, Limits::default()).await
}

/// Serves `router` over TLS on `listener` until `shutdown` turns true.
/// Connections in progress are finished; new ones are no longer accepted.
/// No accept or connection error ends it.
pub async fn serve_tls_with(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let mut backoff = FIRST_ACCEPT_BACKOFF;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        };
        let (tcp, peer): (_, SocketAddr) = match accepted {
            Ok(connection) => {
                backoff = FIRST_ACCEPT_BACKOFF;
                connection
            }
            Err(error) if is_connection_error(&error) => {
                tracing::debug!(%error, "a webhook connection ended before it was accepted");
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?backoff, "accepting a webhook connection failed; accepting again");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                }
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(limits.tls_handshake, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            // HTTP/1.1 only: the TLS config offers just that in ALPN, and the
            // API server's webhook client speaks it.
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "webhook connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_review_of_two_largest_objects_fits() {
        let object = "x".repeat(APISERVER_MAX_REQUEST_BYTES);
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "UPDATE", "object": {"data": object}, "oldObject": {"data": object}},
        });
        assert!(serde_json::to_vec(&review).unwrap().len() < MAX_REVIEW_BYTES);
    }

    #[test]
    fn connection_errors_are_told_apart_from_resource_errors() {
        let aborted = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert!(is_connection_error(&aborted));
        let emfile = std::io::Error::from_raw_os_error(24);
        assert!(!is_connection_error(&emfile));
    }
}
