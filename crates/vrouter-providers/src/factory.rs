//! Builds the provider a VRouterTarget names, from the target and the
//! objects it references (a ProxmoxCluster and its credentials Secret, or a
//! remote-cluster kubeconfig Secret).
//!
//! [`plan`] is the pure part: which provider, which objects to fetch, and
//! every check that needs only the target. [`build_provider`] fetches
//! through an [`ObjectLookup`] — the API server in the operator
//! ([`KubeLookup`]), objects already at hand in tests ([`StaticLookup`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use vrouter_api::daemon_access;
use vrouter_api::proxmox_cluster::{SECRET_KEY_TOKEN_ID, SECRET_KEY_TOKEN_SECRET};
use vrouter_api::validate;
use vrouter_api::vm_access;
use vrouter_api::{DaemonConfig, ProxmoxCluster, SelectedProvider, VRouterTarget};

use crate::daemon::{DaemonOptions, DaemonProvider};
use crate::error::{KubeAccess, ProviderError};
use crate::guest::{GuestPaths, GuestTiming};
use crate::kubevirt::{KubeVirtOptions, KubeVirtProvider};
use crate::provider::Provider;
use crate::proxmox::{
    ApiToken, ClusterClient, ProxmoxClients, ProxmoxProvider, ProxmoxSettings, SharedClient, TrustSettings,
};
use crate::proxmox_trust_source::trust_settings;

/// Fetches the objects a target references. `Ok(None)` means "does not exist".
#[async_trait]
pub trait ObjectLookup: Send + Sync {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Arc<Secret>>, ProviderError>;
    async fn proxmox_cluster(&self, namespace: &str, name: &str) -> Result<Option<Arc<ProxmoxCluster>>, ProviderError>;
    /// The annotations of Namespace `name` (`None`: it does not exist), for
    /// the VM namespace's consent to a cross-namespace target. A lookup
    /// that cannot read Namespaces refuses, so such a target is not reached.
    async fn namespace_annotations(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, ProviderError> {
        Err(ProviderError::InvalidTarget {
            target: format!("Namespace {name}"),
            reason: "this lookup cannot read Namespaces, so a grant cannot be checked".into(),
        })
    }
}

/// Looks objects up in the API server.
#[derive(Clone)]
pub struct KubeLookup {
    client: kube::Client,
}

impl KubeLookup {
    pub fn new(client: kube::Client) -> Self {
        KubeLookup { client }
    }
}

#[async_trait]
impl ObjectLookup for KubeLookup {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Arc<Secret>>, ProviderError> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|found| found.map(Arc::new))
            .map_err(|e| {
                ProviderError::kube(
                    KubeAccess::new("get", "secrets", namespace),
                    format!("get Secret {namespace}/{name}"),
                    e,
                )
            })
    }

    async fn namespace_annotations(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, ProviderError> {
        Api::<Namespace>::all(self.client.clone())
            .get_opt(name)
            .await
            .map(|ns| ns.map(|ns| ns.metadata.annotations.unwrap_or_default()))
            .map_err(|e| {
                ProviderError::kube(
                    KubeAccess::new("get", "namespaces", ""),
                    format!("get Namespace {name}"),
                    e,
                )
            })
    }

    async fn proxmox_cluster(&self, namespace: &str, name: &str) -> Result<Option<Arc<ProxmoxCluster>>, ProviderError> {
        Api::<ProxmoxCluster>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|found| found.map(Arc::new))
            .map_err(|e| {
                ProviderError::kube(
                    KubeAccess::new("get", "proxmoxclusters.vrouter.kojuro.date", namespace),
                    format!("get ProxmoxCluster {namespace}/{name}"),
                    e,
                )
            })
    }
}

/// Objects handed over directly, e.g. from a reflector store or a test.
#[derive(Clone, Debug, Default)]
pub struct StaticLookup {
    pub secrets: Vec<Secret>,
    pub proxmox_clusters: Vec<ProxmoxCluster>,
    pub namespaces: Vec<Namespace>,
}

fn same_object(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, namespace: &str, name: &str) -> bool {
    meta.namespace.as_deref() == Some(namespace) && meta.name.as_deref() == Some(name)
}

#[async_trait]
impl ObjectLookup for StaticLookup {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Arc<Secret>>, ProviderError> {
        Ok(self
            .secrets
            .iter()
            .find(|s| same_object(&s.metadata, namespace, name))
            .map(|s| Arc::new(s.clone())))
    }

    async fn proxmox_cluster(&self, namespace: &str, name: &str) -> Result<Option<Arc<ProxmoxCluster>>, ProviderError> {
        Ok(self
            .proxmox_clusters
            .iter()
            .find(|c| same_object(&c.metadata, namespace, name))
            .map(|c| Arc::new(c.clone())))
    }

    async fn namespace_annotations(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, ProviderError> {
        Ok(self
            .namespaces
            .iter()
            .find(|ns| ns.metadata.name.as_deref() == Some(name))
            .map(|ns| ns.metadata.annotations.clone().unwrap_or_default()))
    }
}

/// Process-wide settings the factory applies to every provider it builds.
#[derive(Clone, Default)]
pub struct FactoryContext {
    /// The cluster the operator runs in, for KubeVirt VMs without a kubeconfig.
    pub client: Option<kube::Client>,
    pub guest_paths: GuestPaths,
    pub guest_timing: GuestTiming,
    pub kubevirt: KubeVirtOptions,
    pub daemon: DaemonOptions,
    /// Overrides of the Proxmox client's connect and request timeouts.
    pub proxmox_timeouts: Option<(Duration, Duration)>,
    /// One Proxmox client per ProxmoxCluster, kept across the providers
    /// built with this context (clones share it), so their connections
    /// stay open from one reconcile to the next.
    pub proxmox_clients: ProxmoxClients,
}

impl std::fmt::Debug for FactoryContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FactoryContext")
            .field("has_client", &self.client.is_some())
            .field("guest_paths", &self.guest_paths)
            .finish_non_exhaustive()
    }
}

/// A key of a Secret in a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretKeyAt {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

/// What a target needs before its provider can be built.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    KubeVirt {
        vm: String,
        namespace: String,
        /// A kubeconfig for a VM in another cluster.
        kubeconfig: Option<SecretKeyAt>,
    },
    Proxmox {
        vmid: i64,
        cluster_namespace: String,
        cluster_name: String,
        /// `status.proxmoxNode`; empty means "look it up".
        cached_node: String,
    },
    Daemon(DaemonConfig),
}

fn target_name(target: &VRouterTarget) -> String {
    format!(
        "VRouterTarget {}/{}",
        target.metadata.namespace.as_deref().unwrap_or(""),
        target.metadata.name.as_deref().unwrap_or("")
    )
}

/// Everything that can be decided from the target alone. The target's
/// object rules are `vrouter_api::validate::target`, the same the webhook
/// applies: a target stored before a rule existed (or with webhooks off) is
/// refused here with the webhook's own words.
pub fn plan(target: &VRouterTarget) -> Result<Plan, ProviderError> {
    // Named only on a refusal: every call for a provider plans.
    let invalid = |reason: String| ProviderError::InvalidTarget {
        target: target_name(target),
        reason,
    };
    let own_namespace = target
        .metadata
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .ok_or_else(|| invalid("the target has no namespace".into()))?;
    let findings = validate::target(target);
    let selected = target.spec.provider.selected();
    let (true, Some(selected)) = (findings.is_allowed(), selected) else {
        return Err(invalid(findings.denial_message()));
    };
    Ok(match selected {
        SelectedProvider::KubeVirt(kv) => Plan::KubeVirt {
            vm: kv.name.clone(),
            namespace: if kv.namespace.is_empty() {
                own_namespace.clone()
            } else {
                kv.namespace.clone()
            },
            // The Secret is the target's own: a kubeconfig carries
            // credentials, and borrowing another namespace's would cross
            // the tenancy boundary.
            kubeconfig: kv.kubeconfig.as_ref().map(|k| SecretKeyAt {
                namespace: own_namespace.clone(),
                name: k.secret_ref.name.clone(),
                key: k.secret_ref.key.clone(),
            }),
        },
        SelectedProvider::Proxmox(px) => Plan::Proxmox {
            vmid: px.vmid,
            cluster_namespace: own_namespace,
            cluster_name: px.cluster_ref.name.clone(),
            cached_node: target
                .status
                .as_ref()
                .map(|s| s.proxmox_node.clone())
                .unwrap_or_default(),
        },
        SelectedProvider::Daemon(d) => Plan::Daemon(d.clone()),
    })
}

/// The value under `key` of a Secret, as text.
pub(crate) fn secret_text(secret: &Secret, key: &str) -> Option<Result<String, std::string::FromUtf8Error>> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return Some(String::from_utf8(v.0.clone()));
    }
    secret.string_data.as_ref().and_then(|d| d.get(key)).cloned().map(Ok)
}

fn required_secret_text(secret: &Secret, key: &str, what: &str) -> Result<String, ProviderError> {
    let name = format!(
        "Secret {}/{}",
        secret.metadata.namespace.as_deref().unwrap_or(""),
        secret.metadata.name.as_deref().unwrap_or("")
    );
    let invalid = |reason: String| ProviderError::InvalidTarget {
        target: name.clone(),
        reason,
    };
    match secret_text(secret, key) {
        None => Err(invalid(format!("key {key:?} ({what}) is missing"))),
        Some(Err(_)) => Err(invalid(format!("key {key:?} ({what}) is not UTF-8 text"))),
        Some(Ok(v)) if v.trim().is_empty() => Err(invalid(format!("key {key:?} ({what}) is empty"))),
        Some(Ok(v)) => Ok(v.trim().to_string()),
    }
}

/// The API token of a ProxmoxCluster's credentials Secret.
pub fn proxmox_token(secret: &Secret) -> Result<ApiToken, ProviderError> {
    let id = required_secret_text(
        secret,
        SECRET_KEY_TOKEN_ID,
        "the Proxmox API token id, USER@REALM!TOKENID",
    )?;
    let value = required_secret_text(secret, SECRET_KEY_TOKEN_SECRET, "the Proxmox API token secret")?;
    if !crate::proxmox::token_part_is_valid(&value) {
        return Err(ProviderError::InvalidTarget {
            target: format!("Secret {}", secret.metadata.name.as_deref().unwrap_or("")),
            reason: format!("key {SECRET_KEY_TOKEN_SECRET:?} contains spaces or control characters"),
        });
    }
    Ok(ApiToken::new(id, value))
}

/// Checks that a kubeconfig from a Secret is self-contained: no exec or
/// auth-provider plugin (the operator would run a program the Secret's
/// author chose) and no file reference (the operator would read its own
/// files — its service-account token among them — and send them to the
/// server the Secret names).
pub fn check_kubeconfig_is_inline(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for named in &kubeconfig.auth_infos {
        let Some(auth) = &named.auth_info else { continue };
        let user = &named.name;
        if auth.exec.is_some() {
            return Err(format!(
                "user {user:?} uses an exec credential plugin, which is not allowed"
            ));
        }
        if auth.auth_provider.is_some() {
            return Err(format!(
                "user {user:?} uses an auth-provider plugin, which is not allowed"
            ));
        }
        for (field, set) in [
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ] {
            if set {
                return Err(format!(
                    "user {user:?} sets {field}, a file path; only inline data (token, client-certificate-data, client-key-data) is allowed"
                ));
            }
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "cluster {:?} sets certificate-authority, a file path; use certificate-authority-data",
                named.name
            ));
        }
    }
    Ok(())
}

/// Checks that the API server a remote kubeconfig points at is reached over
/// `https://`. Its credentials may exec into virt-launcher pods, which is
/// control over the hypervisor: over plain http they would travel in clear.
/// `insecure-skip-tls-verify` stays allowed (as `insecureSkipTLSVerify` is
/// for Proxmox): the traffic is still encrypted, and docs/security.md says
/// what it gives up. The message names only the scheme, never the URL, which
/// may carry userinfo.
pub fn check_kubeconfig_server(server: &http::Uri) -> Result<(), String> {
    match server.scheme_str() {
        Some("https") => Ok(()),
        Some(other) => Err(format!(
            "the server uses {other}://; the kubeconfig's credentials (which can exec into virt-launcher pods) are only sent over https://"
        )),
        None => Err("the server address has no scheme; write https://host:port".into()),
    }
}

async fn remote_client(secret: &Secret, at: &SecretKeyAt) -> Result<kube::Client, ProviderError> {
    let name = format!("kubeconfig Secret {}/{} key {:?}", at.namespace, at.name, at.key);
    let invalid = |reason: String| ProviderError::InvalidTarget {
        target: name.clone(),
        reason,
    };
    let yaml = required_secret_text(secret, &at.key, "a kubeconfig")?;
    // The parser's message may quote the document, which holds credentials.
    let kubeconfig =
        Kubeconfig::from_yaml(&yaml).map_err(|_| invalid("the value is not a kubeconfig YAML document".into()))?;
    check_kubeconfig_is_inline(&kubeconfig).map_err(invalid)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(format!("cannot build a client from it: {e}")))?;
    // The URL kube resolved from the current context: the one it will use.
    check_kubeconfig_server(&config.cluster_url).map_err(invalid)?;
    crate::api_client::client(config, &crate::api_client::ApiTimeouts::default())
        .map_err(|e| invalid(format!("cannot build a client from it: {e}")))
}

/// Why a ProxmoxCluster's sync got no client, by the step that failed (the
/// Synced condition gives each its own reason). Each carries an error that
/// never holds the token.
#[derive(Debug, thiserror::Error)]
pub enum ClusterClientError {
    /// The credentials Secret is unnamed, missing or unreadable.
    #[error("{0}")]
    CredentialsNotFound(ProviderError),
    /// The Secret holds no usable API token.
    #[error("{0}")]
    InvalidCredentials(ProviderError),
    /// No client could be built from the cluster's spec.
    #[error("{0}")]
    Client(ProviderError),
    /// The trust settings cannot be used (the CA bundle is missing or not
    /// PEM, a fingerprint is malformed, checks contradict each other).
    #[error("{0}")]
    Tls(ProviderError),
}

/// The cluster-wide Proxmox client of a ProxmoxCluster (for the
/// ProxmoxCluster controller's sync), its credentials Secret read through
/// `lookup`. Its errors never carry the token.
pub async fn proxmox_cluster_client(
    cluster: &ProxmoxCluster,
    lookup: &dyn ObjectLookup,
    ctx: &FactoryContext,
) -> Result<ClusterClient, ClusterClientError> {
    let secret = credentials_secret(cluster, lookup)
        .await
        .map_err(ClusterClientError::CredentialsNotFound)?;
    let token = proxmox_token(&secret).map_err(ClusterClientError::InvalidCredentials)?;
    let trust = trust_settings(cluster, lookup).await.map_err(tls_or_lookup)?;
    let defaults = ProxmoxSettings::new(Vec::new(), ApiToken::new("", ""), 1);
    let (connect, request) = ctx
        .proxmox_timeouts
        .unwrap_or((defaults.connect_timeout, defaults.request_timeout));
    ClusterClient::sharing(
        Some(&shared_client(cluster, ctx)),
        &cluster.spec.endpoints,
        token,
        &trust,
        connect,
        request,
    )
    .map_err(tls_or_lookup)
}

/// Unusable trust settings apart from every other failure to build.
fn tls_or_lookup(error: ProviderError) -> ClusterClientError {
    match error {
        e @ ProviderError::InvalidTls { .. } => ClusterClientError::Tls(e),
        e => ClusterClientError::Client(e),
    }
}

/// Where the providers of `cluster`'s VMs take their client from.
fn shared_client(cluster: &ProxmoxCluster, ctx: &FactoryContext) -> SharedClient {
    SharedClient {
        clients: ctx.proxmox_clients.clone(),
        cluster: format!(
            "{}/{}",
            cluster.metadata.namespace.as_deref().unwrap_or(""),
            cluster.metadata.name.as_deref().unwrap_or("")
        ),
    }
}

/// A ProxmoxCluster's credentials Secret, from the cluster's own namespace.
async fn credentials_secret(cluster: &ProxmoxCluster, lookup: &dyn ObjectLookup) -> Result<Arc<Secret>, ProviderError> {
    let namespace = cluster.metadata.namespace.as_deref().unwrap_or_default();
    // Named only on a refusal: every call for a provider looks the Secret up.
    let cluster_name = || {
        format!(
            "ProxmoxCluster {namespace}/{}",
            cluster.metadata.name.as_deref().unwrap_or("")
        )
    };
    let secret_name = &cluster.spec.credentials_ref.name;
    if secret_name.is_empty() {
        return Err(ProviderError::InvalidTarget {
            target: cluster_name(),
            reason: "spec.credentialsRef.name is empty".into(),
        });
    }
    lookup
        .secret(namespace, secret_name)
        .await?
        .ok_or_else(|| ProviderError::ReferenceNotFound {
            kind: "Secret",
            namespace: namespace.to_owned(),
            name: secret_name.clone(),
            referrer: cluster_name(),
        })
}

/// The operator's own identity reaches a same-cluster KubeVirt VM: another
/// namespace's VM only with that namespace's consent (`vrouter_api::vm_access`).
async fn check_vm_namespace_grant(
    target: &VRouterTarget,
    lookup: &dyn ObjectLookup,
    referrer: &str,
) -> Result<(), ProviderError> {
    let Some(reach) = target.cross_namespace_vm() else {
        return Ok(());
    };
    let annotations = lookup.namespace_annotations(&reach.vm_namespace).await?;
    vm_access::check_vm_access(&reach, annotations.as_ref()).map_err(|denied| ProviderError::VmAccessDenied {
        target: referrer.to_owned(),
        denied,
    })
}

/// A daemon agent is reached only with the grant on the target's own
/// Namespace (`vrouter_api::daemon_access`), checked before anything is dialled.
async fn check_daemon_grant(
    target: &VRouterTarget,
    lookup: &dyn ObjectLookup,
    referrer: &str,
) -> Result<(), ProviderError> {
    let Some(reach) = target.daemon_reach() else {
        return Ok(());
    };
    let annotations = lookup.namespace_annotations(&reach.target_namespace).await?;
    daemon_access::check_daemon_access(&reach, annotations.as_ref()).map_err(|denied| {
        ProviderError::DaemonAccessDenied {
            target: referrer.to_owned(),
            denied: Box::new(denied),
        }
    })
}

/// Builds the provider for `target`.
pub async fn build_provider(
    target: &VRouterTarget,
    lookup: &dyn ObjectLookup,
    ctx: &FactoryContext,
) -> Result<Box<dyn Provider>, ProviderError> {
    build_planned(plan(target)?, target, lookup, ctx).await
}

/// Builds the provider `plan` (made from `target`) names.
pub(crate) async fn build_planned(
    plan: Plan,
    target: &VRouterTarget,
    lookup: &dyn ObjectLookup,
    ctx: &FactoryContext,
) -> Result<Box<dyn Provider>, ProviderError> {
    let referrer = target_name(target);
    match plan {
        Plan::KubeVirt {
            vm,
            namespace,
            kubeconfig,
        } => {
            let client = match kubeconfig {
                Some(at) => {
                    let secret = lookup.secret(&at.namespace, &at.name).await?.ok_or_else(|| {
                        ProviderError::ReferenceNotFound {
                            kind: "Secret",
                            namespace: at.namespace.clone(),
                            name: at.name.clone(),
                            referrer: referrer.clone(),
                        }
                    })?;
                    remote_client(&secret, &at).await?
                }
                None => {
                    check_vm_namespace_grant(target, lookup, &referrer).await?;
                    ctx.client.clone().ok_or_else(|| ProviderError::InvalidTarget {
                        target: referrer.clone(),
                        reason: "no Kubernetes client is configured for same-cluster KubeVirt VMs".into(),
                    })?
                }
            };
            Ok(Box::new(KubeVirtProvider::new(
                client,
                &vm,
                &namespace,
                ctx.guest_paths.clone(),
                ctx.guest_timing,
                ctx.kubevirt.clone(),
            )?))
        }
        Plan::Proxmox {
            vmid,
            cluster_namespace,
            cluster_name,
            cached_node,
        } => {
            let sources = ProxmoxSources::look_up(&cluster_namespace, &cluster_name, target, lookup).await?;
            Ok(Box::new(sources.provider(vmid, cached_node, ctx)?))
        }
        Plan::Daemon(config) => {
            check_daemon_grant(target, lookup, &referrer).await?;
            let bundle = crate::daemon::ca_source::ca_bundle(target, &config, lookup).await?;
            Ok(Box::new(DaemonProvider::with_ca_bundle(
                &config,
                bundle.as_ref(),
                ctx.daemon.clone(),
            )?))
        }
    }
}

/// What a Proxmox VM's provider is built from besides the target: its
/// ProxmoxCluster and the cluster's credentials Secret.
pub(crate) struct ProxmoxSources {
    pub cluster: Arc<ProxmoxCluster>,
    pub secret: Arc<Secret>,
    pub trust: TrustSettings,
}

impl ProxmoxSources {
    /// ProxmoxCluster `namespace/name` and its Secret, for `target`.
    pub async fn look_up(
        namespace: &str,
        name: &str,
        target: &VRouterTarget,
        lookup: &dyn ObjectLookup,
    ) -> Result<Self, ProviderError> {
        let cluster =
            lookup
                .proxmox_cluster(namespace, name)
                .await?
                .ok_or_else(|| ProviderError::ReferenceNotFound {
                    kind: "ProxmoxCluster",
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    referrer: target_name(target),
                })?;
        let secret = credentials_secret(&cluster, lookup).await?;
        let trust = trust_settings(&cluster, lookup).await?;
        Ok(ProxmoxSources { cluster, secret, trust })
    }

    /// The provider of VM `vmid`, on `cached_node` if known.
    pub fn provider(
        &self,
        vmid: i64,
        cached_node: String,
        ctx: &FactoryContext,
    ) -> Result<ProxmoxProvider, ProviderError> {
        let token = proxmox_token(&self.secret)?;
        let cluster = &self.cluster;
        let mut settings = ProxmoxSettings::new(cluster.spec.endpoints.clone(), token, vmid);
        settings.trust = self.trust.clone();
        settings.cached_node = cached_node;
        settings.paths = ctx.guest_paths.clone();
        settings.timing = ctx.guest_timing;
        settings.shared_client = Some(shared_client(cluster, ctx));
        if let Some((connect, request)) = ctx.proxmox_timeouts {
            settings.connect_timeout = connect;
            settings.request_timeout = request;
        }
        ProxmoxProvider::new(settings)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    const TOKEN: &str = "sup3r-s3cret-bearer-t0ken";

    fn kubeconfig_secret(server: &str, cluster_extra: &str) -> (Secret, SecretKeyAt) {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: remote\nclusters:\n- name: remote\n  cluster:\n    server: {server}\n{cluster_extra}\
             contexts:\n- name: remote\n  context:\n    cluster: remote\n    user: remote\n\
             users:\n- name: remote\n  user:\n    token: {TOKEN}\n"
        );
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("remote".into()),
                namespace: Some("site-a".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "kubeconfig".to_string(),
                ByteString(yaml.into_bytes()),
            )])),
            ..Default::default()
        };
        let at = SecretKeyAt {
            namespace: "site-a".into(),
            name: "remote".into(),
            key: "kubeconfig".into(),
        };
        (secret, at)
    }

    #[tokio::test]
    async fn remote_kubeconfigs_must_use_https() {
        let skip_verify = "    insecure-skip-tls-verify: true\n";
        // (server, extra cluster fields, Ok or the words the refusal must contain)
        let cases: [(&str, &str, Result<(), &str>); 6] = [
            ("https://127.0.0.1:6443", "", Ok(())),
            ("https://localhost", "", Ok(())),
            // Still encrypted; what skipping verification gives up is in docs/security.md.
            ("https://127.0.0.1:6443", skip_verify, Ok(())),
            ("http://127.0.0.1:6443", "", Err("uses http://")),
            ("http://127.0.0.1:6443", skip_verify, Err("uses http://")),
            ("127.0.0.1:6443", "", Err("has no scheme")),
        ];
        for (server, extra, want) in cases {
            let (secret, at) = kubeconfig_secret(server, extra);
            let got = remote_client(&secret, &at).await;
            match (got, want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(words)) => {
                    let ProviderError::InvalidTarget { target, reason } = &e else {
                        panic!("{server}: want InvalidTarget, got {e:?}");
                    };
                    assert_eq!(target, "kubeconfig Secret site-a/remote key \"kubeconfig\"", "{server}");
                    assert!(reason.contains(words), "{server}: {reason}");
                    let shown = format!("{e} {e:?}");
                    assert!(!shown.contains(TOKEN), "{server}: the token leaked: {shown}");
                }
                (got, want) => panic!("{server} {extra:?}: got {:?}, want {want:?}", got.map(|_| "a client")),
            }
        }
    }

    #[test]
    fn server_scheme_rule() {
        for (url, ok) in [
            ("https://api.example:6443/prefix", true),
            ("http://api.example:6443", false),
            ("ws://api.example:6443", false),
            ("api.example:6443", false),
        ] {
            let uri: http::Uri = url.parse().unwrap();
            assert_eq!(check_kubeconfig_server(&uri).is_ok(), ok, "{url}");
        }
    }
}
