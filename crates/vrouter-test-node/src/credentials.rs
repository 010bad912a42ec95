//! The node components' identities: a bearer token each (in the API
//! server's token file, with the user and groups RBAC's bootstrap roles
//! and the Node authorizer expect), and the client certificate the API
//! server presents to the kubelet.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use vrouter_test_apiserver::StaticToken;

use crate::Error;
use crate::config::NODE_NAME;
use crate::process::write_file;

/// One component's user.
pub(crate) struct Identity {
    pub user: String,
    pub token: String,
}

pub(crate) struct Credentials {
    pub kubelet: Identity,
    pub controller_manager: Identity,
    pub scheduler: Identity,
    pub kube_proxy: Identity,
    /// The CA the kubelet trusts for client certificates, and the API
    /// server's certificate and key signed by it.
    pub kubelet_client_ca: PathBuf,
    pub kubelet_client_cert: PathBuf,
    pub kubelet_client_key: PathBuf,
}

impl Credentials {
    /// New tokens and certificates, the files written into `dir`.
    pub fn generate(dir: &Path) -> Result<Credentials, Error> {
        let identity = |user: &str| Identity {
            user: user.to_owned(),
            token: random_hex(32),
        };
        let ca = kubelet_client_ca()?;
        let client = kubelet_client_cert(&ca)?;
        Ok(Credentials {
            kubelet: identity(&format!("system:node:{NODE_NAME}")),
            controller_manager: identity("system:kube-controller-manager"),
            scheduler: identity("system:kube-scheduler"),
            kube_proxy: identity("system:kube-proxy"),
            kubelet_client_ca: write_file(dir, "kubelet-client-ca.crt", &ca.pem())?,
            kubelet_client_cert: write_file(dir, "kubelet-client.crt", &client.0)?,
            kubelet_client_key: write_file(dir, "kubelet-client.key", &client.1)?,
        })
    }

    /// The token file lines: the kubelet in `system:nodes` (the Node
    /// authorizer's group), the others as the users the bootstrap
    /// ClusterRoleBindings name.
    pub fn tokens(&self) -> Vec<StaticToken> {
        let token = |identity: &Identity, groups: &[&str]| StaticToken {
            token: identity.token.clone(),
            user: identity.user.clone(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        vec![
            token(&self.kubelet, &["system:nodes"]),
            token(&self.controller_manager, &[]),
            token(&self.scheduler, &[]),
            token(&self.kube_proxy, &[]),
        ]
    }
}

fn kubelet_client_ca() -> Result<CertifiedIssuer<'static, KeyPair>, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "vrouter-test-node kubelet client CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    Ok(CertifiedIssuer::self_signed(params, KeyPair::generate()?)?)
}

/// The API server's client certificate and key (PEM) for kubelet calls.
fn kubelet_client_cert(ca: &CertifiedIssuer<'_, KeyPair>) -> Result<(String, String), Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-kubelet-client");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random number generator is available");
    hex::encode(buf)
}
