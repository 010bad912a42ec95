//! A self-signed certificate for `127.0.0.1`/`localhost` and the rustls
//! server configuration around it.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A fresh self-signed certificate and the server config serving it.
pub fn self_signed_server_config() -> Arc<ServerConfig> {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("rcgen generates a self-signed certificate");
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("the generated key matches its certificate");
    Arc::new(config)
}
