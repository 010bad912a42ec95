//! TLS for the webhook server from mounted certificate files, reloaded when
//! they change: cert-manager rotates the Secret in place, and a restart to
//! pick up the new certificate would mean an admission outage.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
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
    /// Replaced whole by one assignment, never edited in place: a thread
    /// that panicked while holding the lock cannot have left it half
    /// written, so a poisoned lock is used as it is (see [`Self::read`]).
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

    /// The lock, poisoned or not: an admission outage because some other
    /// thread panicked would be worse than serving the last certificate.
    fn read(&self) -> RwLockReadGuard<'_, Loaded> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Loaded> {
        self.current.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reloads when either file changed. A half-written or broken pair keeps
    /// the previous certificate in service and reports the error.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamps = (modified(&self.cert_path), modified(&self.key_path));
        if self.read().stamps == stamps {
            return Ok(false);
        }
        let key = Arc::new(load_certified_key(&self.cert_path, &self.key_path)?);
        *self.write() = Loaded { key, stamps };
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
        self.read().key.clone()
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

/// A server configuration serving a certificate made now and signed by
/// itself, for `names`: what a Prometheus scraping with
/// `insecure_skip_verify` (the usual setting for pod endpoints) needs when
/// no certificate is mounted.
pub fn self_signed_server_config(names: Vec<String>) -> Result<Arc<ServerConfig>, rcgen::Error> {
    let made = rcgen::generate_simple_self_signed(names)?;
    let key =
        PrivateKeyDer::try_from(made.signing_key.serialize_der()).map_err(|_| rcgen::Error::CouldNotParseKeyPair)?;
    let signing_key =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|_| rcgen::Error::CouldNotParseKeyPair)?;
    let certified = Arc::new(CertifiedKey::new(vec![made.cert.der().clone()], signing_key));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(FixedCert(certified)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let cert = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    fn serial_of(key: &CertifiedKey) -> Vec<u8> {
        key.cert[0].as_ref().to_vec()
    }

    #[test]
    fn a_changed_pair_is_served_and_a_broken_one_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (cert, key) = self_signed("one.example");
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        let reloading = ReloadingCert::new(cert_path.clone(), key_path.clone()).unwrap();
        let first = serial_of(&reloading.current());
        assert!(
            !reloading.reload_if_changed().unwrap(),
            "unchanged files are not reloaded"
        );

        // cert-manager rotates the Secret: both files change.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (cert, key) = self_signed("two.example");
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        assert!(reloading.reload_if_changed().unwrap());
        let second = serial_of(&reloading.current());
        assert_ne!(first, second);

        // A half-written pair is refused and the current certificate stays.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&cert_path, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
        assert!(reloading.reload_if_changed().is_err());
        assert_eq!(serial_of(&reloading.current()), second);
    }

    #[test]
    fn a_lock_poisoned_by_a_panicking_thread_still_serves_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (cert, key) = self_signed("one.example");
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        let reloading = ReloadingCert::new(cert_path.clone(), key_path.clone()).unwrap();
        let first = serial_of(&reloading.current());
        let held = reloading.clone();
        let panicked = std::thread::spawn(move || {
            let _guard = held.current.write().unwrap();
            panic!("a thread dies holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(reloading.current.is_poisoned());
        assert_eq!(serial_of(&reloading.current()), first);

        std::thread::sleep(std::time::Duration::from_millis(20));
        let (cert, key) = self_signed("two.example");
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        assert!(reloading.reload_if_changed().unwrap());
        assert_ne!(serial_of(&reloading.current()), first);
    }

    #[test]
    fn missing_files_are_an_error_at_start_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = ReloadingCert::new(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }
}
