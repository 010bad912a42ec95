//! The rustls certificate verifiers of the Proxmox client, one per
//! [`Trust`] plan. Every refusal carries a [`Refused`] naming the
//! certificate's SHA-256 fingerprint (and the pinned ones when a pin did not
//! match), so the ProxmoxCluster's status says which certificate was seen
//! without anyone having to reproduce the handshake.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use sha2::{Digest, Sha256};
use vrouter_api::fingerprint::Sha256Fingerprint;

/// Why a server certificate was refused. Its text names the certificate by
/// fingerprint, and the fingerprints expected when a pin decided.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error(
        "certificate refused: its SHA-256 fingerprint is {seen}, which is not in spec.certificateFingerprints ({})",
        list(expected)
    )]
    NotPinned {
        seen: Sha256Fingerprint,
        expected: Vec<Sha256Fingerprint>,
    },
    #[error("certificate refused (SHA-256 fingerprint {seen}): {why}; trusted are {roots}")]
    Chain {
        seen: Sha256Fingerprint,
        why: String,
        roots: &'static str,
    },
}

fn list(pins: &[Sha256Fingerprint]) -> String {
    pins.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The [`Refused`] inside a rustls error, when one of these verifiers made it.
pub(crate) fn refusal(error: &rustls::Error) -> Option<&Refused> {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => inner.downcast_ref(),
        _ => None,
    }
}

pub(crate) fn fingerprint(cert: &CertificateDer<'_>) -> Sha256Fingerprint {
    Sha256Fingerprint(Sha256::digest(cert.as_ref()).into())
}

fn refuse(refused: Refused) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(refused))))
}

/// Chain and host name checked by webpki against `chain` (when set), and
/// the end-entity certificate one of `pins` (when not empty). The pin is
/// checked first: when both fail, the pin is the more precise answer.
#[derive(Debug)]
pub(crate) struct CheckingVerifier {
    pub chain: Option<Arc<WebPkiServerVerifier>>,
    /// Names the roots in a chain refusal ("the system roots", "only spec.caBundle").
    pub roots: &'static str,
    pub pins: Vec<Sha256Fingerprint>,
    pub algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for CheckingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let seen = fingerprint(end_entity);
        if !self.pins.is_empty() && !self.pins.contains(&seen) {
            return Err(refuse(Refused::NotPinned {
                seen,
                expected: self.pins.clone(),
            }));
        }
        if let Some(chain) = &self.chain {
            chain
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                .map_err(|e| {
                    refuse(Refused::Chain {
                        seen,
                        why: e.to_string(),
                        roots: self.roots,
                    })
                })?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `insecureSkipTLSVerify`: any certificate. The handshake signature is
/// still checked, so the session is encrypted to whoever holds the key of
/// the certificate presented — which may be anyone in the path.
#[derive(Debug)]
pub(crate) struct AcceptAnyCertificate {
    pub algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
