//! [`TestEnv`]: a started control plane with the CRDs installed, and the
//! per-test namespaces handed out from it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, Resource};
use tokio::sync::OnceCell;

use crate::certs::Certs;
use crate::control_plane::{AUDIT_LOG, CA_FILE, ControlPlane, Options, SERVICE_ACCOUNT_KEY_FILE};
use crate::{Binaries, Error, WebhookTls};

/// How long the API server may take to answer `/readyz`. It takes about three
/// seconds on an idle machine; the margin is for a machine busy compiling.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the CRDs may take to become Established and served.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
/// Starts that fail because a process exited (e.g. a port taken between
/// choosing and binding it) are retried this many times in all.
const START_ATTEMPTS: u32 = 3;

static SHARED: OnceCell<TestEnv> = OnceCell::const_new();

/// A running etcd + kube-apiserver on loopback with the operator's CRDs
/// installed (unless started [`Options::without_crds`]). See the crate
/// documentation for how it is cleaned up.
pub struct TestEnv {
    plane: ControlPlane,
    config: Config,
    kubeconfig_path: PathBuf,
    webhook_tls: WebhookTls,
    namespaces: AtomicU64,
    /// Whether it installed the operator's CRDs (and a restart waits for them).
    crds: bool,
}

impl TestEnv {
    /// The control plane shared by every test in this test binary, started on
    /// first use. Panics, with the reason and how to fix it, when it cannot start.
    pub async fn shared() -> &'static TestEnv {
        match SHARED.get_or_try_init(TestEnv::start).await {
            Ok(env) => env,
            Err(e) => panic!("vrouter-test-apiserver: cannot start the test API server: {e}"),
        }
    }

    /// A control plane of its own, stopped and removed when dropped.
    pub async fn start() -> Result<TestEnv, Error> {
        TestEnv::start_with(Options::default()).await
    }

    /// A control plane of its own that records every request in an audit
    /// log ([`TestEnv::audit_events`]), with the
    /// `OwnerReferencesPermissionEnforcement` admission plugin on.
    pub async fn start_audited() -> Result<TestEnv, Error> {
        TestEnv::start_with(Options {
            audit: true,
            admission_plugins: vec!["OwnerReferencesPermissionEnforcement".to_owned()],
            ..Options::default()
        })
        .await
    }

    /// A control plane of its own, started as `options` say.
    pub async fn start_with(options: Options) -> Result<TestEnv, Error> {
        let binaries = Binaries::locate()?;
        let mut attempt = 1;
        loop {
            match TestEnv::start_once(&binaries, &options).await {
                Err(Error::ExitedEarly { .. }) if attempt < START_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    async fn start_once(binaries: &Binaries, options: &Options) -> Result<TestEnv, Error> {
        let extra_names = options
            .serving
            .as_ref()
            .map(|s| s.extra_names.clone())
            .unwrap_or_default();
        let certs = Certs::generate(&extra_names)?;
        let mut plane = ControlPlane::spawn(binaries, &certs, options)?;
        let kubeconfig = kubeconfig_yaml(plane.apiserver_port(), &certs);
        let kubeconfig_path = plane.dir().join("kubeconfig");
        std::fs::write(&kubeconfig_path, &kubeconfig)
            .map_err(Error::io(format!("writing {}", kubeconfig_path.display())))?;
        let config =
            Config::from_custom_kubeconfig(Kubeconfig::from_yaml(&kubeconfig)?, &KubeConfigOptions::default()).await?;
        let client = Client::try_from(config.clone())?;
        wait_ready(&mut plane, &client).await?;
        if !options.without_crds {
            install_crds(&plane, &client).await?;
        }
        Ok(TestEnv {
            crds: !options.without_crds,
            webhook_tls: WebhookTls::new(&certs.ca_pem, &certs.webhook),
            plane,
            config,
            kubeconfig_path,
            namespaces: AtomicU64::new(0),
        })
    }

    /// A new client with admin rights (group `system:masters`).
    ///
    /// Call it from the runtime that will use the client: a kube `Client`
    /// belongs to the Tokio runtime it was made in, and each `#[tokio::test]`
    /// has its own runtime, so the shared instance hands out clients rather
    /// than keeping one.
    pub fn client(&self) -> Client {
        Client::try_from(self.config.clone()).expect("a kube client builds from the harness's own config")
    }

    /// A token of ServiceAccount `namespace/name` from the TokenRequest API,
    /// valid for an hour: what the kubelet mounts into a pod of that account.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> Result<String, Error> {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        Api::<ServiceAccount>::namespaced(self.client(), namespace)
            .create_token_request(name, &PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| Error::NoToken(format!("{namespace}/{name}")))
    }

    /// A client that authenticates as ServiceAccount `namespace/name` with a
    /// [`TestEnv::service_account_token`]: the real authoriser judges what it
    /// may do.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Result<Client, Error> {
        let token = self.service_account_token(namespace, name).await?;
        let mut config = self.config.clone();
        config.auth_info =
            serde_json::from_value(serde_json::json!({ "token": token })).expect("a token is valid credentials");
        Ok(Client::try_from(config)?)
    }

    /// The client configuration behind [`TestEnv::client`].
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A kubeconfig file for the admin user, for processes a test starts.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// `https://127.0.0.1:PORT`.
    pub fn apiserver_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.plane.apiserver_port())
    }

    /// etcd's own client URL (`http://127.0.0.1:PORT`), for a test that
    /// talks to etcd itself (its v3 JSON gateway, e.g. to compact it).
    pub fn etcd_url(&self) -> &str {
        self.plane.etcd_url()
    }

    /// Puts `value` at `key` in etcd directly (a key outside the API
    /// server's `/registry`, to move the store's revision on); returns the
    /// revision after the put.
    pub async fn etcd_put(&self, key: &str, value: &str) -> Result<i64, Error> {
        crate::etcd::put(self.etcd_url(), key, value).await
    }

    /// Compacts etcd at `revision`, as the API server's own compaction (every
    /// 5 minutes) does: every older resource version is gone from etcd.
    pub async fn etcd_compact(&self, revision: i64) -> Result<(), Error> {
        crate::etcd::compact(self.etcd_url(), revision).await
    }

    /// Kills etcd and kube-apiserver with SIGKILL, as a node failure stops
    /// them. Only for a control plane of the test's own ([`TestEnv::start`]):
    /// every client of it loses the API until [`TestEnv::restart`].
    pub fn kill(&mut self) {
        self.plane.kill();
    }

    /// Starts etcd and kube-apiserver again on the data directory and ports
    /// they had (after [`TestEnv::kill`], or killing them now), and waits
    /// until the API server is ready and serves the operator's CRDs again.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.plane.restart()?;
        let client = self.client();
        wait_ready(&mut self.plane, &client).await?;
        if !self.crds {
            return Ok(());
        }
        wait_crds_served(&self.plane, &client, &vrouter_api::crds::all()).await
    }

    /// The CA certificate (PEM) the API server's certificate chains to.
    pub fn ca_path(&self) -> PathBuf {
        self.plane.dir().join(CA_FILE)
    }

    /// The service-account signing key (PEM), which a controller manager
    /// needs to sign tokens as the API server does.
    pub fn service_account_key_path(&self) -> PathBuf {
        self.plane.dir().join(SERVICE_ACCOUNT_KEY_FILE)
    }

    /// The temporary directory holding etcd's data, the certificates and the logs.
    pub fn data_dir(&self) -> &Path {
        self.plane.dir()
    }

    /// Every request the API server has recorded so far, one JSON audit
    /// event (`audit.k8s.io/v1` `Event`) each; empty unless started with
    /// [`TestEnv::start_audited`].
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.plane.dir().join(AUDIT_LOG))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The process ids of etcd and kube-apiserver.
    pub fn pids(&self) -> (u32, u32) {
        self.plane.pids()
    }

    /// The last lines kube-apiserver logged, for failure messages.
    pub fn apiserver_log_tail(&self) -> String {
        self.plane.apiserver_log_tail()
    }

    /// TLS material for admission webhooks served by the test process.
    pub fn webhook_tls(&self) -> &WebhookTls {
        &self.webhook_tls
    }

    /// Creates a fresh namespace named after `hint` (made DNS-safe) plus a
    /// counter. Panics when the API server refuses.
    ///
    /// Nothing deletes it: there is no namespace controller to finish a
    /// deletion, and the whole store goes away with the control plane.
    pub async fn namespace(&self, hint: &str) -> TestNamespace {
        let label = dns_label(hint);
        let n = self.namespaces.fetch_add(1, Ordering::Relaxed);
        let name = format!("{label}-{n}");
        let client = self.client();
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([("vrouter-test-apiserver/test".to_owned(), label)])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        if let Err(e) = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
        {
            panic!("vrouter-test-apiserver: creating namespace {name}: {e}");
        }
        TestNamespace { name, client }
    }
}

/// A namespace created for one test, with a client to use in it.
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl TestNamespace {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A typed API for namespaced resources in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// An untyped API, e.g. to send objects exactly as written.
    pub fn dynamic_api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.name, resource)
    }
}

/// Polls `/readyz` until it answers `ok`, failing early if a process exits.
async fn wait_ready(plane: &mut ControlPlane, client: &Client) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        plane.check_running()?;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("a static request is valid");
        if let Ok(body) = client.request_text(request).await
            && body.trim() == "ok"
        {
            return Ok(());
        }
        if started.elapsed() > READY_TIMEOUT {
            return Err(Error::Timeout {
                what: "kube-apiserver /readyz".to_owned(),
                seconds: READY_TIMEOUT.as_secs(),
                log_tail: plane.apiserver_log_tail(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Creates every CRD of the operator, then waits until each is Established
/// and its resource answers a list.
async fn install_crds(plane: &ControlPlane, client: &Client) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let all = vrouter_api::crds::all();
    for crd in &all {
        crds.create(&PostParams::default(), crd).await?;
    }
    wait_crds_served(plane, client, &all).await
}

/// Waits until each of `all` is Established and its resource answers a list.
async fn wait_crds_served(
    plane: &ControlPlane,
    client: &Client,
    all: &[CustomResourceDefinition],
) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    for crd in all {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let resource = served_resource(crd);
        loop {
            let established = crds.get(&name).await?.status.is_some_and(|status| {
                status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established
                && Api::<DynamicObject>::all_with(client.clone(), &resource)
                    .list(&ListParams::default().limit(1))
                    .await
                    .is_ok()
            {
                break;
            }
            if started.elapsed() > CRD_TIMEOUT {
                return Err(Error::Timeout {
                    what: format!("CRD {name} Established and served"),
                    seconds: CRD_TIMEOUT.as_secs(),
                    log_tail: plane.apiserver_log_tail(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// The resource a CRD serves, at its storage version.
fn served_resource(crd: &CustomResourceDefinition) -> ApiResource {
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| crd.spec.versions.first())
        .map(|v| v.name.clone())
        .unwrap_or_default();
    let group = crd.spec.group.clone();
    ApiResource {
        api_version: format!("{group}/{version}"),
        group,
        version,
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    }
}

fn kubeconfig_yaml(port: u16, certs: &Certs) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(&certs.ca_pem);
    let token = &certs.admin_token;
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: testenv\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\n\
         users:\n\
         - name: admin\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: testenv\n  context:\n    cluster: testenv\n    user: admin\n    namespace: default\n\
         current-context: testenv\n"
    )
}

/// `hint` as the start of a DNS-1123 label: lower-case alphanumerics and
/// single dashes, at most 40 characters (room for the counter), never empty.
fn dns_label(hint: &str) -> String {
    let mut out = String::new();
    for c in hint.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let trimmed = out.trim_end_matches('-');
    if trimmed.is_empty() {
        "test".to_owned()
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::dns_label;

    #[test]
    fn namespace_hints_become_dns_labels() {
        assert_eq!(dns_label("crds::save_defaults_to_true"), "crds-save-defaults-to-true");
        assert_eq!(dns_label("--Odd__Name--"), "odd-name");
        assert_eq!(dns_label("::"), "test");
        let long = dns_label(&"a".repeat(100));
        assert_eq!(long.len(), 40);
    }
}
