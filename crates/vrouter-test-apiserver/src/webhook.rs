//! TLS material for admission webhooks served by the test process.

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;
use crate::certs::ServingCert;

/// A serving certificate for `127.0.0.1`, `::1` and `localhost`, signed by the
/// CA the API server is told to trust through `caBundle`.
///
/// Serve admission reviews over HTTPS with [`WebhookTls::server_config`] on a
/// loopback port, then register the webhook with
/// [`WebhookTls::client_config`]`("https://127.0.0.1:PORT/path")`.
pub struct WebhookTls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl WebhookTls {
    pub(crate) fn new(ca_pem: &str, cert: &ServingCert) -> WebhookTls {
        WebhookTls {
            ca_pem: ca_pem.to_owned(),
            cert_pem: cert.cert_pem.clone(),
            key_pem: cert.key_pem.clone(),
            cert_der: cert.cert_der.clone(),
            key_der: cert.key_der.clone(),
        }
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The serving certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The serving certificate's private key (PKCS#8 PEM).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The `caBundle` for a webhook registration.
    pub fn ca_bundle(&self) -> ByteString {
        ByteString(self.ca_pem.clone().into_bytes())
    }

    /// A `url:` client config pointing the API server at `url` with our CA.
    /// `url` must be an `https://127.0.0.1:PORT/...` or `https://localhost:PORT/...` address.
    pub fn client_config(&self, url: impl Into<String>) -> WebhookClientConfig {
        WebhookClientConfig {
            url: Some(url.into()),
            ca_bundle: Some(self.ca_bundle()),
            service: None,
        }
    }

    /// A rustls server configuration presenting the serving certificate. No
    /// ALPN protocols are set, so clients speak HTTP/1.1; set
    /// `alpn_protocols` for a server that also speaks HTTP/2.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(self.key_der.clone().into());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)?;
        Ok(config)
    }
}
