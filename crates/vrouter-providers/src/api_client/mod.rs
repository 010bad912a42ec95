//! The Kubernetes client the operator uses, for its own API server and for
//! remote clusters named by a kubeconfig Secret: kube's client stack with
//! bounds on every wait.
//!
//! - connecting: [`ApiTimeouts::connect`];
//! - sending: each write to the socket within [`ApiTimeouts::write`];
//! - every request: its answer's head (and a plain request's whole answer)
//!   within [`ApiTimeouts::request`], retries included ([`deadline`]);
//! - every connection: closed after [`ApiTimeouts::read`] without a byte
//!   from the server, counted from the last write. It is longer than a
//!   watch lasts (kube asks the server to end a watch after 290 s, and its
//!   watcher gives up on a silent one 5 s later), so a quiet watch is never
//!   cut; it ends connections nothing else bounds (a stalled exec session);
//! - TCP keepalive ([`ApiTimeouts::keepalive_idle`]) notices a peer that is
//!   gone without a word (a node or NAT entry lost) on any connection;
//! - 429/503/504: sent again at most [`retry::MAX_RETRIES`] times, a
//!   server's `Retry-After` followed up to [`retry::MAX_DELAY`] ([`retry`]).

pub mod deadline;
pub mod retry;

use std::time::Duration;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

use self::deadline::DeadlineLayer;
use self::retry::BoundedRetry;

/// How long the client waits for each step of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiTimeouts {
    pub connect: Duration,
    pub write: Duration,
    /// Every request, all its attempts included: the head of the answer,
    /// and for a plain request (not a watch or exec) its whole body.
    pub request: Duration,
    /// A connection with no byte from the server for this long, counted
    /// from the last write, is closed.
    pub read: Duration,
    /// Idle time before the first TCP keepalive probe; probes follow every
    /// `keepalive_interval`, and the connection is dropped after
    /// `keepalive_retries` unanswered ones.
    pub keepalive_idle: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_retries: u32,
}

impl Default for ApiTimeouts {
    fn default() -> Self {
        ApiTimeouts {
            connect: Duration::from_secs(10),
            write: Duration::from_secs(30),
            request: Duration::from_secs(30),
            read: Duration::from_secs(300),
            keepalive_idle: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(10),
            keepalive_retries: 3,
        }
    }
}

/// A client for `config` with `timeouts` and the bounded retry. The
/// timeouts and retry of `config` itself are replaced.
/// A proxy in `config` is refused: this stack has no proxy connector, and
/// bypassing a configured proxy silently could reach the wrong network.
pub fn client(config: kube::Config, timeouts: &ApiTimeouts) -> Result<kube::Client, kube::Error> {
    if let Some(proxy_url) = &config.proxy_url {
        return Err(kube::Error::ProxyProtocolUnsupported {
            proxy_url: Box::new(proxy_url.clone()),
        });
    }
    let connector = timed_connector(&config, timeouts)?;
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build::<_, Body>(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(DeadlineLayer {
            deadline: timeouts.request,
        })
        .layer(RetryLayer::new(BoundedRetry::default()))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(ClientBuilder::new(service, config.default_namespace.clone()).build())
}

/// The client of the environment's Kubernetes configuration (the pod's
/// service account in a cluster, else `KUBECONFIG`), as [`client`] makes it.
pub async fn infer(timeouts: &ApiTimeouts) -> Result<kube::Client, InferError> {
    let config = kube::Config::infer().await?;
    Ok(client(config, timeouts)?)
}

#[derive(Debug, thiserror::Error)]
pub enum InferError {
    #[error("no Kubernetes configuration found: {0}")]
    Config(#[from] kube::config::InferConfigError),
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

fn timed_connector(
    config: &kube::Config,
    timeouts: &ApiTimeouts,
) -> Result<TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>, kube::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_keepalive(Some(timeouts.keepalive_idle));
    tcp.set_keepalive_interval(Some(timeouts.keepalive_interval));
    tcp.set_keepalive_retries(Some(timeouts.keepalive_retries));
    let mut timed = TimeoutConnector::new(config.rustls_https_connector_with_connector(tcp)?);
    timed.set_connect_timeout(Some(timeouts.connect));
    timed.set_write_timeout(Some(timeouts.write));
    timed.set_read_timeout(Some(timeouts.read));
    // The read timeout counts from the request written, not from when its
    // pooled connection went idle.
    timed.set_reset_reader_on_write(true);
    Ok(timed)
}
