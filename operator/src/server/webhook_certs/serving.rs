//! The certificate a replica serves, replaced whole when the Secret changes:
//! connections already open keep theirs, new handshakes get the new one.

use std::sync::{Arc, PoisonError, RwLock};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("the stored serving certificate is not PEM: {0}")]
    Cert(rustls_pki_types::pem::Error),
    #[error("the stored serving certificate's key is not PEM: {0}")]
    Key(rustls_pki_types::pem::Error),
    #[error("the stored serving certificate's key is not usable: {0}")]
    Unusable(rustls::Error),
}

/// The served certificate and the PEM it came from (to tell a change).
#[derive(Debug)]
pub struct SwappableCert {
    current: RwLock<(String, Arc<CertifiedKey>)>,
}

fn certified(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, ServingError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(ServingError::Cert)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(ServingError::Key)?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(ServingError::Unusable)?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

impl SwappableCert {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<Self>, ServingError> {
        let key = certified(cert_pem, key_pem)?;
        Ok(Arc::new(SwappableCert {
            current: RwLock::new((cert_pem.to_owned(), key)),
        }))
    }

    /// Serves this pair from the next handshake on; `Ok(false)` when it is
    /// already the one served. A broken pair keeps the current one.
    pub fn swap(&self, cert_pem: &str, key_pem: &str) -> Result<bool, ServingError> {
        if self.current_pem() == cert_pem {
            return Ok(false);
        }
        let key = certified(cert_pem, key_pem)?;
        // Replaced whole by one assignment: a poisoned lock holds a whole value.
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (cert_pem.to_owned(), key);
        Ok(true)
    }

    pub fn current_pem(&self) -> String {
        self.current.read().unwrap_or_else(PoisonError::into_inner).0.clone()
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).1.clone()
    }

    /// A server configuration that always serves the current certificate.
    pub fn server_config(self: &Arc<Self>) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

impl ResolvesServerCert for SwappableCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
