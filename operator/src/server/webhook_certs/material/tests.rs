use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls_pki_types::{ServerName, UnixTime};

use super::*;

const NAME: &str = "vr-webhook.ns.svc";

fn names() -> Vec<String> {
    vec![NAME.to_owned(), "127.0.0.1".to_owned()]
}

/// Whether a TLS client trusting `bundle` accepts `cert` for `name`.
fn trusted(bundle: &str, cert: &str, name: &str) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    verifier
        .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
        .is_ok()
}

fn first_start() -> Stored {
    let plan = Plan {
        new_ca: true,
        bundle: vec![BundleCa::New],
        issue_serving: Some(BundleCa::New),
        publish: true,
    };
    carry_out(
        &plan,
        &Stored::default(),
        SystemTime::now(),
        &names(),
        Lifetimes::default(),
    )
    .unwrap()
}

#[test]
fn a_first_start_serves_a_certificate_its_bundle_trusts_and_the_secret_reads_back_the_same() {
    let stored = first_start();
    let serving = stored.serving.as_ref().unwrap();
    assert!(trusted(&stored.bundle_pem(), &serving.cert, NAME));
    assert!(trusted(&stored.bundle_pem(), &serving.cert, "127.0.0.1"));
    assert!(!trusted(&stored.bundle_pem(), &serving.cert, "other.ns.svc"));
    assert_eq!(serving.record.issuer, stored.cas[0].record.id);
    assert_eq!(Stored::from_data(&stored.to_data()).unwrap(), stored);
}

#[test]
fn a_ca_rotation_signs_with_a_stored_ca_and_trust_follows_the_bundle() {
    let old = Stored::from_data(&first_start().to_data()).unwrap();
    let old_id = old.cas[0].record.id.clone();
    // Step one: a new CA joins; the serving certificate stays.
    let joined = Plan {
        new_ca: true,
        bundle: vec![BundleCa::Kept(old_id.clone()), BundleCa::New],
        issue_serving: None,
        publish: true,
    };
    let both = carry_out(&joined, &old, SystemTime::now(), &names(), Lifetimes::default()).unwrap();
    let both = Stored::from_data(&both.to_data()).unwrap();
    assert_eq!(both.cas.len(), 2);
    assert_eq!(both.serving, old.serving);
    // Step two: the new CA, read back from the Secret, signs.
    let new_id = both.cas[1].record.id.clone();
    let moved = Plan {
        new_ca: false,
        bundle: vec![BundleCa::Kept(old_id), BundleCa::Kept(new_id.clone())],
        issue_serving: Some(BundleCa::Kept(new_id.clone())),
        publish: false,
    };
    let moved = carry_out(&moved, &both, SystemTime::now(), &names(), Lifetimes::default()).unwrap();
    let cert = &moved.serving.as_ref().unwrap().cert;
    assert_eq!(moved.serving.as_ref().unwrap().record.issuer, new_id);
    assert!(
        trusted(&both.bundle_pem(), cert, NAME),
        "the published two-CA bundle trusts it"
    );
    assert!(!trusted(&old.bundle_pem(), cert, NAME), "the old bundle alone does not");
    assert!(
        trusted(&both.bundle_pem(), &old.serving.as_ref().unwrap().cert, NAME),
        "replicas still serving the old certificate stay trusted"
    );
}

#[test]
fn a_secret_whose_record_does_not_describe_its_cas_is_refused() {
    let stored = first_start();
    let mut data = stored.to_data();
    data.insert("ca.crt".to_owned(), ByteString(first_start().bundle_pem().into_bytes()));
    assert!(matches!(Stored::from_data(&data), Err(MaterialError::Mismatch)));
    data.remove("certs.json");
    assert!(matches!(
        Stored::from_data(&data),
        Err(MaterialError::Missing("certs.json"))
    ));
}

#[test]
fn a_bundle_is_read_as_the_fingerprints_of_its_certificates() {
    let one = first_start();
    let two = first_start();
    let bundle = format!("{}{}", one.bundle_pem(), two.bundle_pem());
    assert_eq!(
        bundle_ids(bundle.as_bytes()),
        vec![one.cas[0].record.id.clone(), two.cas[0].record.id.clone()]
    );
    assert!(bundle_ids(b"not a certificate").is_empty());
}
