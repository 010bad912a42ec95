//! TLS to an `https://` daemon address: a rustls connection per channel,
//! whose certificate check is the Proxmox client's own (`proxmox::tls`):
//! with a CA bundle, ONLY its certificates are roots; without one, the
//! operator's system roots. Chain and host name are always checked, and an
//! `https://` address is never dialled in plaintext: a failed handshake
//! fails the call.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::error::ProviderError;
use crate::proxmox::{RootsNamed, Trust, TrustSettings, certificate_refusal, certificate_verifier, crypto_provider};

/// The roots a refusal names, in the target's own fields.
const DAEMON_ROOTS: RootsNamed = RootsNamed {
    system: "the operator's system roots (spec.provider.daemon.caBundle is not set)",
    bundle: "only the certificates of spec.provider.daemon.caBundle",
};

/// A CA bundle as read from its Secret: the PEM text and where it came
/// from (`Secret ns/name key "k"`), for messages. Public material only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonCaBundle {
    pub pem: String,
    pub source: String,
}

/// How one `https://` address is dialled: the client configuration, the
/// name the certificate must carry, and the bundle's hash (channels with
/// different bundles are never shared).
#[derive(Clone)]
pub(crate) struct DaemonTls {
    config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
    /// SHA-256 of the bundle's PEM text; `None` for the system roots.
    pub ca_hash: Option<[u8; 32]>,
}

/// What an `https://` endpoint did instead of completing a trusted
/// handshake. Carries no secret: certificates are public.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsFailure {
    /// The certificate presented is not trusted (chain, name, expiry).
    #[error("presented a certificate that is not trusted: {0}")]
    NotTrusted(String),
    /// The peer does not speak TLS, or broke off the handshake.
    #[error("did not complete a TLS handshake: {0}")]
    Handshake(String),
}

/// A trusted TLS connection, as hyper reads and writes it.
type Io = TokioIo<TlsStream<TcpStream>>;
type BoxError = Box<dyn StdError + Send + Sync>;
/// A connection being made.
type Dialling = Pin<Box<dyn Future<Output = Result<Io, BoxError>> + Send>>;

fn invalid(reason: String) -> ProviderError {
    ProviderError::InvalidTls { reason }
}

impl DaemonTls {
    /// The TLS settings for `uri` (an `https://` URI with a host), trusting
    /// `bundle` alone when given.
    pub fn new(uri: &http::Uri, bundle: Option<&DaemonCaBundle>) -> Result<DaemonTls, ProviderError> {
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let server_name = ServerName::try_from(host.to_owned()).map_err(|e| {
            invalid(format!(
                "spec.provider.daemon.address: {host:?} is not a TLS server name: {e}"
            ))
        })?;
        let trust = trust_of(bundle)?;
        let verifier = certificate_verifier(&trust, &DAEMON_ROOTS)
            .map_err(|e| invalid(format!("spec.provider.daemon.caBundle: {e}")))?;
        let mut config = ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format!("TLS configuration: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // gRPC is HTTP/2 only; a server that answers no ALPN is spoken to
        // in HTTP/2 all the same (a TLS-terminating proxy often offers none).
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(DaemonTls {
            config: Arc::new(config),
            server_name,
            ca_hash: bundle.map(|b| Sha256::digest(b.pem.as_bytes()).into()),
        })
    }

    /// A TCP connection to `uri`'s host and port with a completed,
    /// trusted handshake on it.
    async fn connect(
        self: Arc<Self>,
        uri: http::Uri,
    ) -> Result<TokioIo<TlsStream<TcpStream>>, Box<dyn StdError + Send + Sync>> {
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = uri.port_u16().ok_or("the address has no port")?;
        let tcp = TcpStream::connect((host, port)).await?;
        tcp.set_nodelay(true)?;
        let tls = TlsConnector::from(self.config.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(classify)?;
        Ok(TokioIo::new(tls))
    }

    /// The connector tonic dials through.
    pub fn connector(
        self: Arc<Self>,
    ) -> impl tower::Service<http::Uri, Response = Io, Error = BoxError, Future = Dialling> + Clone + Send + 'static
    {
        tower::service_fn(move |uri: http::Uri| {
            let tls = self.clone();
            Box::pin(tls.connect(uri)) as Dialling
        })
    }
}

/// The trust plan of a bundle (or the system roots), each refusal naming
/// the Secret and key the bundle came from.
fn trust_of(bundle: Option<&DaemonCaBundle>) -> Result<Trust, ProviderError> {
    let settings = TrustSettings {
        ca_bundle_pem: bundle.map(|b| b.pem.clone()),
        ..TrustSettings::default()
    };
    crate::proxmox::decide_trust(&settings).map_err(|e| {
        let from = bundle.map(|b| format!(" ({})", b.source)).unwrap_or_default();
        invalid(format!("spec.provider.daemon.caBundle{from}: {e}"))
    })
}

/// A handshake error that TLS itself raised (a refused certificate, a
/// peer that sent no TLS) as a [`TlsFailure`]; a bare I/O error (reset,
/// refused) stays one, as the network's and not the settings' fault.
fn classify(error: std::io::Error) -> BoxError {
    let Some(tls) = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
        return Box::new(error);
    };
    let failure = match certificate_refusal(tls) {
        Some(refused) => TlsFailure::NotTrusted(refused.to_string()),
        None if matches!(tls, rustls::Error::InvalidCertificate(_)) => TlsFailure::NotTrusted(tls.to_string()),
        None => TlsFailure::Handshake(tls.to_string()),
    };
    Box::new(failure)
}

/// The [`TlsFailure`] somewhere in the sources of a failed call.
pub(crate) fn tls_failure(status: &tonic::Status) -> Option<&TlsFailure> {
    let mut source: Option<&(dyn StdError + 'static)> = status.source();
    while let Some(error) = source {
        if let Some(failure) = error.downcast_ref::<TlsFailure>() {
            return Some(failure);
        }
        source = error.source();
    }
    None
}
