//! The rustls client configuration of a ProxmoxCluster, from its [`Trust`]
//! plan (decided in `trust`, verified in `verifier`). The vrouter-daemon
//! client takes its certificate verifier from here too.

use std::sync::{Arc, LazyLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};

use super::trust::Trust;
use super::verifier::{AcceptAnyCertificate, CheckingVerifier};

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The platform's trust anchors, read once per process.
static NATIVE_ROOTS: LazyLock<Arc<RootCertStore>> = LazyLock::new(|| {
    let mut roots = RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    for error in &loaded.errors {
        tracing::warn!(%error, "reading a system CA certificate failed");
    }
    let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
    tracing::debug!(added, ignored, "loaded system CA certificates for the TLS clients");
    Arc::new(roots)
});

/// How a chain refusal names the roots that were trusted, in the words of
/// the object whose field chose them.
pub(crate) struct RootsNamed {
    /// No CA bundle set: the system roots.
    pub system: &'static str,
    /// A CA bundle set: only its certificates.
    pub bundle: &'static str,
}

const PROXMOX_ROOTS: RootsNamed = RootsNamed {
    system: "the operator's system roots (spec.caBundle is not set)",
    bundle: "only the certificates of spec.caBundle",
};

/// The client configuration that accepts what `trust` says, and nothing else.
pub(crate) fn client_config(trust: &Trust) -> Result<Arc<ClientConfig>, rustls::Error> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier(trust, &PROXMOX_ROOTS)?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The certificate verifier of `trust`: every refusal is a [`super::verifier::Refused`]
/// naming the certificate seen and, for a chain, the roots as `names` says.
pub(crate) fn verifier(trust: &Trust, names: &RootsNamed) -> Result<Arc<dyn ServerCertVerifier>, rustls::Error> {
    let algorithms = provider().signature_verification_algorithms;
    Ok(match trust {
        Trust::AnyCertificate => Arc::new(AcceptAnyCertificate { algorithms }),
        Trust::SystemRoots => Arc::new(CheckingVerifier {
            chain: Some(webpki(NATIVE_ROOTS.clone())?),
            roots: names.system,
            pins: Vec::new(),
            algorithms,
        }),
        Trust::Bundle { roots, pins } => {
            let mut store = RootCertStore::empty();
            for root in roots {
                store.add(root.clone())?;
            }
            Arc::new(CheckingVerifier {
                chain: Some(webpki(Arc::new(store))?),
                roots: names.bundle,
                pins: pins.clone(),
                algorithms,
            })
        }
        Trust::Pinned(pins) => Arc::new(CheckingVerifier {
            chain: None,
            roots: "only the pinned certificates",
            pins: pins.clone(),
            algorithms,
        }),
    })
}

fn webpki(roots: Arc<RootCertStore>) -> Result<Arc<WebPkiServerVerifier>, rustls::Error> {
    WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| rustls::Error::General(format!("no certificate verifier for these roots: {e}")))
}
