//! Which server certificates a ProxmoxCluster's connections accept: a pure
//! decision from what the user wrote (docs/providers.md, "Proxmox trust").
//!
//! - nothing set: the operator's system roots, host name checked;
//! - `caBundle`: ONLY the bundle's certificates are roots (the system roots
//!   are not added: a cluster CA names what this cluster is, and a public CA
//!   would let anyone with a public certificate for the name receive the
//!   token); chain and host name checked;
//! - `certificateFingerprints` alone: the endpoint's own certificate must be
//!   one of those listed, and nothing else is asked of it (Proxmox VE's
//!   default certificate is self-signed by the cluster CA and often names a
//!   node, not the address used), as Proxmox VE itself trusts a pinned
//!   fingerprint;
//! - both: chain, host name AND fingerprint;
//! - `insecureSkipTLSVerify`: any certificate, and never together with the
//!   other two (a check both asked for and turned off is refused, so no
//!   setting silently wins over another).
//!
//! Whatever the plan, the handshake signature is verified against the
//! certificate accepted, so the peer holds that certificate's key.

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use vrouter_api::fingerprint::{FingerprintError, Sha256Fingerprint};

/// A ProxmoxCluster's trust settings as written: the CA bundle as the text
/// read from its Secret. Public material only (no credential), so printable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustSettings {
    pub insecure_skip_verify: bool,
    pub ca_bundle_pem: Option<String>,
    pub certificate_fingerprints: Vec<String>,
}

impl TrustSettings {
    /// Only `insecureSkipTLSVerify` (or the system roots when false).
    pub fn insecure(insecure_skip_verify: bool) -> Self {
        TrustSettings {
            insecure_skip_verify,
            ..TrustSettings::default()
        }
    }
}

/// What the connections of one cluster accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The system roots; chain and host name checked.
    SystemRoots,
    /// Only `roots`; chain and host name checked, and, when `pins` is not
    /// empty, the certificate is one of them.
    Bundle {
        roots: Vec<CertificateDer<'static>>,
        pins: Vec<Sha256Fingerprint>,
    },
    /// The certificate is one of these; nothing else is checked of it.
    Pinned(Vec<Sha256Fingerprint>),
    /// Any certificate (`insecureSkipTLSVerify`).
    AnyCertificate,
}

/// Why the settings give no plan; each names the field to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("spec.certificateFingerprints[{index}] {value:?} {error}")]
    Fingerprint {
        index: usize,
        value: String,
        error: FingerprintError,
    },
    #[error(
        "spec.{field} cannot be combined with insecureSkipTLSVerify: one asks for a certificate check, the other turns every check off"
    )]
    Contradiction { field: &'static str },
    #[error("the CA bundle holds no PEM certificate (no -----BEGIN CERTIFICATE----- block)")]
    EmptyBundle,
    #[error("the CA bundle is not valid PEM: {0}")]
    BadPem(String),
    #[error("certificate {index} of the CA bundle cannot be a root: {reason}")]
    BadCertificate { index: usize, reason: String },
}

/// The plan for `settings`, or the first thing wrong with them.
pub(crate) fn decide(settings: &TrustSettings) -> Result<Trust, TrustError> {
    let pins = parse_pins(&settings.certificate_fingerprints)?;
    if settings.insecure_skip_verify {
        return match (pins.is_empty(), &settings.ca_bundle_pem) {
            (false, _) => Err(TrustError::Contradiction {
                field: "certificateFingerprints",
            }),
            (true, Some(_)) => Err(TrustError::Contradiction { field: "caBundle" }),
            (true, None) => Ok(Trust::AnyCertificate),
        };
    }
    match &settings.ca_bundle_pem {
        Some(pem) => Ok(Trust::Bundle {
            roots: parse_bundle(pem)?,
            pins,
        }),
        None if pins.is_empty() => Ok(Trust::SystemRoots),
        None => Ok(Trust::Pinned(pins)),
    }
}

fn parse_pins(written: &[String]) -> Result<Vec<Sha256Fingerprint>, TrustError> {
    written
        .iter()
        .enumerate()
        .map(|(index, value)| {
            Sha256Fingerprint::parse(value).map_err(|error| TrustError::Fingerprint {
                index,
                value: value.clone(),
                error,
            })
        })
        .collect()
}

/// The certificates of a PEM bundle, each one usable as a root.
fn parse_bundle(pem: &str) -> Result<Vec<CertificateDer<'static>>, TrustError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TrustError::BadPem(e.to_string()))?;
    if certs.is_empty() {
        return Err(TrustError::EmptyBundle);
    }
    let mut store = RootCertStore::empty();
    for (index, cert) in certs.iter().enumerate() {
        store.add(cert.clone()).map_err(|e| TrustError::BadCertificate {
            index,
            reason: e.to_string(),
        })?;
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9:0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9";

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn settings(insecure: bool, bundle: Option<&str>, pins: &[&str]) -> TrustSettings {
        TrustSettings {
            insecure_skip_verify: insecure,
            ca_bundle_pem: bundle.map(str::to_owned),
            certificate_fingerprints: pins.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[derive(Debug, PartialEq)]
    enum Want {
        System,
        Bundle { roots: usize, pins: usize },
        Pinned(usize),
        Any,
        Refused(&'static str),
    }

    fn outcome(got: Result<Trust, TrustError>) -> Result<Want, String> {
        match got {
            Ok(Trust::SystemRoots) => Ok(Want::System),
            Ok(Trust::Bundle { roots, pins }) => Ok(Want::Bundle {
                roots: roots.len(),
                pins: pins.len(),
            }),
            Ok(Trust::Pinned(pins)) => Ok(Want::Pinned(pins.len())),
            Ok(Trust::AnyCertificate) => Ok(Want::Any),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn every_combination_of_the_trust_settings() {
        let ca = ca_pem();
        let two = format!("{ca}\n{}", ca_pem());
        let plain_lower = PIN.replace(':', "").to_lowercase();
        let not_a_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let cases: Vec<(TrustSettings, Want)> = vec![
            (settings(false, None, &[]), Want::System),
            (settings(true, None, &[]), Want::Any),
            (settings(false, Some(&ca), &[]), Want::Bundle { roots: 1, pins: 0 }),
            (settings(false, Some(&two), &[]), Want::Bundle { roots: 2, pins: 0 }),
            (settings(false, None, &[PIN]), Want::Pinned(1)),
            (settings(false, None, &[PIN, &plain_lower]), Want::Pinned(2)),
            (settings(false, Some(&ca), &[PIN]), Want::Bundle { roots: 1, pins: 1 }),
            (
                settings(true, None, &[PIN]),
                Want::Refused("spec.certificateFingerprints cannot be combined with insecureSkipTLSVerify"),
            ),
            (
                settings(true, Some(&ca), &[]),
                Want::Refused("spec.caBundle cannot be combined with insecureSkipTLSVerify"),
            ),
            (
                settings(false, None, &[PIN, "AB:CD"]),
                Want::Refused("spec.certificateFingerprints[1] \"AB:CD\" has 4 hex digits"),
            ),
            (
                settings(true, None, &["nope"]),
                Want::Refused("spec.certificateFingerprints[0] \"nope\" contains 'n'"),
            ),
            (
                settings(false, Some(""), &[]),
                Want::Refused("holds no PEM certificate"),
            ),
            (
                settings(false, Some("just text, no PEM"), &[]),
                Want::Refused("holds no PEM certificate"),
            ),
            (
                settings(
                    false,
                    Some("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
                    &[],
                ),
                Want::Refused("not valid PEM"),
            ),
            (
                settings(false, Some(not_a_cert), &[]),
                Want::Refused("certificate 0 of the CA bundle cannot be a root"),
            ),
        ];
        for (input, want) in cases {
            let got = outcome(decide(&input));
            match (&got, &want) {
                (Err(message), Want::Refused(words)) => {
                    assert!(message.contains(words), "{input:?}: {message}")
                }
                _ => assert_eq!(got, Ok(want), "{input:?}"),
            }
        }
    }
}
