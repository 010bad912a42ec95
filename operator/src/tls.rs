//! TLS for the webhook server from mounted certificate files, reloaded when
//! they change: cert-manager rotates the Secret in place, and a restart to
//! pick up the new certificate would mean an admission outage.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading certificate chain {path}: {source}")]
    Certs {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("certificate file {0} holds no certificate")]
    NoCerts(PathBuf),
    #[error("reading private key {path}: {source}")]
    Key {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("private key {path} is not usable: {source}")]
    UnusableKey { path: PathBuf, source: rustls::Error },
}

/// Loads a PEM chain and key into a rustls certified key.
pub fn load_certified_key(cert_path: &Path, key_path: &Path) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_path)
        .and_then(|iter| iter.collect())
        .map_err(|source| TlsError::Certs {
            path: cert_path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCerts(cert_path.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|source| TlsError::Key {
        path: key_path.to_owned(),
        source,
    })?;
    let signing_key = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|source| TlsError::UnusableKey {
        path: key_path.to_owned(),
        source,
    })?;
    Ok(CertifiedKey::new(certs, signing_key))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

struct Loaded {
    key: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
}

/// A certificate resolver that serves the current files' certificate.
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Loaded>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Loads the files now; a missing or broken file is an error at start-up.
    pub fn new(cert_path: PathBuf, key_path: PathBuf) -> Result<Arc<Self>, TlsError> {
        let key = Arc::new(load_certified_key(&cert_path, &key_path)?);
        let stamps = (modified(&cert_path), modified(&key_path));
        Ok(Arc::new(ReloadingCert {
            cert_path,
            key_path,
            current: RwLock::new(Loaded { key, stamps }),
        }))
    }

    /// Reloads when either file changed. A half-written or broken pair keeps
    /// the previous certificate in service and reports the error.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamps = (modified(&self.cert_path), modified(&self.key_path));
        if self.current.read().expect("lock poisoned").stamps == stamps {
            return Ok(false);
        }
        let key = Arc::new(load_certified_key(&self.cert_path, &self.key_path)?);
        *self.current.write().expect("lock poisoned") = Loaded { key, stamps };
        Ok(true)
    }

    /// Checks the files every `every` until the task is dropped.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            match self.reload_if_changed() {
                Ok(true) => tracing::info!(cert = %self.cert_path.display(), "reloaded webhook certificate"),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "webhook certificate changed but could not be loaded; keeping the previous one")
                }
            }
        }
    }

    /// The certificate currently served.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().expect("lock poisoned").key.clone()
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

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
