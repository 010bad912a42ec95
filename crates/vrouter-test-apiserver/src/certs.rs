//! Key material for one control plane, made fresh for every start: nothing is
//! reused between runs and nothing leaves the data directory.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::CertificateDer;

use crate::Error;

/// A certificate and its private key, in the forms the consumers want.
pub(crate) struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
    pub key_der: Vec<u8>,
}

pub(crate) struct Certs {
    /// The CA every serving certificate here chains to; clients trust it.
    pub ca_pem: String,
    /// kube-apiserver's serving certificate.
    pub apiserver: ServingCert,
    /// The serving certificate for webhooks run by the test process.
    pub webhook: ServingCert,
    /// The service-account token signing key (PKCS#8 PEM) and its public half.
    pub service_account_key_pem: String,
    pub service_account_pub_pem: String,
    /// The bearer token of the admin user (group `system:masters`).
    pub admin_token: String,
}

impl Certs {
    /// `extra_names`: what the API server's certificate covers besides loopback.
    pub fn generate(extra_names: &[String]) -> Result<Certs, Error> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "vrouter-test-apiserver CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let service_account = KeyPair::generate()?;
        Ok(Certs {
            ca_pem: ca.pem(),
            apiserver: serving_cert(&ca, "kube-apiserver", extra_names)?,
            webhook: serving_cert(&ca, "vrouter-test-apiserver webhook", &[])?,
            service_account_key_pem: service_account.serialize_pem(),
            service_account_pub_pem: service_account.public_key_pem(),
            admin_token: random_hex(32),
        })
    }
}

/// A leaf certificate for a server on loopback (`127.0.0.1`, `::1` and
/// `localhost`) and `extra_names`.
fn serving_cert(
    ca: &CertifiedIssuer<'_, KeyPair>,
    common_name: &str,
    extra_names: &[String],
) -> Result<ServingCert, Error> {
    let mut names = vec!["127.0.0.1".to_owned(), "::1".to_owned(), "localhost".to_owned()];
    names.extend_from_slice(extra_names);
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    Ok(ServingCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
        key_der: key.serialize_der(),
    })
}

/// `bytes` random bytes from the OS, hex-encoded.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random number generator is available");
    hex::encode(buf)
}
