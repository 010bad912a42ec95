//! Server certificates for loopback (`127.0.0.1`/`localhost`) and the rustls
//! server configuration around them: self-signed, or issued by a CA of
//! their own as a Proxmox VE node's `pve-ssl.pem` is by the cluster's
//! `pve-root-ca.pem`.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

const NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// A server's certificate and key, and the CA that issued it (if any).
#[derive(Clone)]
pub struct ServerIdentity {
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
    /// The issuing CA's certificate as PEM; `None` for a self-signed one.
    pub ca_pem: Option<String>,
}

impl ServerIdentity {
    /// A fresh self-signed certificate (Proxmox VE's default as a client sees
    /// it without the cluster CA).
    pub fn self_signed() -> Self {
        let names: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
        let certified = rcgen::generate_simple_self_signed(names).expect("rcgen generates a self-signed certificate");
        ServerIdentity {
            cert_der: certified.cert.der().to_vec(),
            key_der: certified.signing_key.serialize_der(),
            ca_pem: None,
        }
    }

    /// A fresh certificate issued by a fresh CA.
    pub fn issued_by_ca() -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Proxmox Virtual Environment (test)");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("a self-signed CA");
        let params =
            CertificateParams::new(NAMES.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("leaf parameters");
        let key = KeyPair::generate().expect("a leaf key");
        let cert = params.signed_by(&key, &ca).expect("the CA signs the leaf");
        ServerIdentity {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            ca_pem: Some(ca.pem()),
        }
    }

    /// The certificate's SHA-256 fingerprint as Proxmox VE shows it: upper-case
    /// hex pairs joined by ':'.
    pub fn sha256_fingerprint(&self) -> String {
        Sha256::digest(&self.cert_der)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// A rustls server configuration presenting this certificate.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        let cert = CertificateDer::from(self.cert_der.clone());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("the generated key matches its certificate");
        Arc::new(config)
    }
}

/// A fresh self-signed certificate and the server config serving it.
pub fn self_signed_server_config() -> Arc<ServerConfig> {
    ServerIdentity::self_signed().server_config()
}
