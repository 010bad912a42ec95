//! Shared fixtures of the controller tests: a namespace with Proxmox
//! targets served by the in-test Proxmox API over real qemu-ga agents, and
//! the operator's controllers running for it.
#![allow(dead_code)]

pub mod chart_dry_run;
pub mod go_migration;
pub mod go_operator;
pub mod go_takeover;
pub mod guest_rig;
pub mod https;
pub mod operator_process;
pub mod replica;
pub mod replica_process;
pub mod requests;
pub mod shipped_rbac;
pub mod status_refusals;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;
use vrouter_api::{Phase, VRouterConfig, VRouterStatus, VRouterTarget};
use vrouter_operator::controllers;
use vrouter_operator::runtime::context::{Context, Providers, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_providers::KeptProviders;
use vrouter_providers::proxmox::ProxmoxClients;
use vrouter_providers::{FactoryContext, GuestPaths, KubeLookup, ObjectLookup, Provider, ProviderError};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::{AgentProcess, start_agent};

const TOKEN_ID: &str = "operator@pve!test";
const TOKEN_SECRET: &str = "0b7c6f0e-test-only";

/// The production factory, with each target's guest-side paths pointing
/// into its own sandbox (all test guests share this machine's filesystem).
pub struct SandboxedProviders {
    client: kube::Client,
    lookup: Arc<dyn ObjectLookup>,
    paths: HashMap<String, GuestPaths>,
    /// Kept across reconciles, as the production factory keeps them.
    proxmox_clients: ProxmoxClients,
    /// Proxmox providers kept per target, as the operator's factory keeps them.
    kept: KeptProviders,
}

#[async_trait]
impl Providers for SandboxedProviders {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Arc<dyn Provider>, ProviderError> {
        let name = target.metadata.name.clone().unwrap_or_default();
        let factory = FactoryContext {
            client: Some(self.client.clone()),
            guest_paths: self.paths.get(&name).cloned().unwrap_or_default(),
            proxmox_clients: self.proxmox_clients.clone(),
            ..FactoryContext::default()
        };
        self.kept.provider(target, &*self.lookup, &factory).await
    }

    fn proxmox_clients(&self) -> ProxmoxClients {
        self.proxmox_clients.clone()
    }
}

pub struct Router {
    pub agent: AgentProcess,
    pub sandbox: GuestSandbox,
}

/// A namespace with a ProxmoxCluster and one Proxmox target per name, and
/// the operator's controllers running for that namespace.
pub struct Site {
    pub ns: TestNamespace,
    pub pve: FakeProxmox,
    pub routers: HashMap<String, Router>,
    pub stop: watch::Sender<bool>,
    pub ctx: Arc<Context>,
    pub providers: Arc<dyn Providers>,
}

/// A namespaced kind a test creates from JSON.
pub trait Namespaced:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
{
}

/// Creates `body` (apiVersion and kind filled in for our kinds) in `ns`.
pub async fn create<K: Namespaced>(ns: &TestNamespace, body: Value) -> K {
    try_create(ns, body).await.unwrap()
}

/// [`create`], returning the API server's refusal (an admission denial) as
/// its message.
pub async fn try_create<K: Namespaced>(ns: &TestNamespace, body: Value) -> Result<K, String> {
    let mut body = body;
    if body.get("apiVersion").is_none() {
        body["apiVersion"] = json!("vrouter.kojuro.date/v1");
        body["kind"] = json!(K::kind(&()));
    }
    let object: K = serde_json::from_value(body).unwrap();
    ns.api::<K>()
        .create(&PostParams::default(), &object)
        .await
        .map_err(|e| e.to_string())
}

pub async fn site(hint: &str, targets: &[&str], settings: Settings) -> Site {
    let client = TestEnv::shared().await.client();
    site_as(hint, targets, settings, client).await
}

/// Like [`site`], with the controllers using `operator_client` (the test
/// itself still sets up with admin rights).
pub async fn site_as(hint: &str, targets: &[&str], settings: Settings, operator_client: kube::Client) -> Site {
    let lookup = Arc::new(KubeLookup::new(operator_client.clone()));
    build_site(hint, targets, settings, operator_client, lookup, true).await
}

/// Like [`site_as`], with the providers reading Secrets and ProxmoxClusters
/// through `lookup` (e.g. one cache shared by several sites, as the
/// operator's one process shares it among all namespaces).
pub async fn site_with_lookup(
    hint: &str,
    targets: &[&str],
    operator_client: kube::Client,
    lookup: Arc<dyn ObjectLookup>,
) -> Site {
    build_site(hint, targets, Settings::default(), operator_client, lookup, true).await
}

/// A site whose controllers the test starts itself (`site.stop` is a
/// sender nobody listens to).
pub async fn site_idle(hint: &str, targets: &[&str]) -> Site {
    let client = TestEnv::shared().await.client();
    let lookup = Arc::new(KubeLookup::new(client.clone()));
    build_site(hint, targets, Settings::default(), client, lookup, false).await
}

/// An in-test Proxmox VE API presenting `identity`, accepting the token the
/// sites' credentials Secret holds.
pub async fn start_fake_proxmox(identity: vrouter_test_peers::tls::ServerIdentity) -> FakeProxmox {
    FakeProxmox::start_with_identity(TOKEN_ID, TOKEN_SECRET, identity).await
}

/// Like [`site`], with the ProxmoxCluster pointing at `pve` and the fields
/// of `spec` added to its spec.
pub async fn site_with_cluster(hint: &str, targets: &[&str], pve: FakeProxmox, spec: Value) -> Site {
    let client = TestEnv::shared().await.client();
    let lookup = Arc::new(KubeLookup::new(client.clone()));
    let env = TestEnv::shared().await;
    let ns = env.namespace(hint).await;
    let pve = proxmox_cluster_for(&ns, pve, spec).await;
    site_in(ns, pve, targets, Settings::default(), client, lookup, true).await
}

/// An in-test Proxmox VE API, and in `ns` its token Secret `pve-token` and
/// the ProxmoxCluster `pve` pointing at it.
pub async fn proxmox_cluster(ns: &TestNamespace) -> FakeProxmox {
    proxmox_cluster_with(ns, json!({})).await
}

/// Like [`proxmox_cluster`], with the fields of `spec` added to the
/// ProxmoxCluster's spec.
pub async fn proxmox_cluster_with(ns: &TestNamespace, spec: Value) -> FakeProxmox {
    let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
    proxmox_cluster_for(ns, pve, spec).await
}

/// Like [`proxmox_cluster_with`], for a Proxmox API the test started itself
/// (with the token of [`start_fake_proxmox`]).
pub async fn proxmox_cluster_for(ns: &TestNamespace, pve: FakeProxmox, spec: Value) -> FakeProxmox {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pve-token"},
        "stringData": {"api-token-id": TOKEN_ID, "api-token-secret": TOKEN_SECRET},
    }))
    .unwrap();
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut full_spec =
        json!({"endpoints": [pve.url(0)], "credentialsRef": {"name": "pve-token"}, "insecureSkipTLSVerify": true});
    if let (Some(full), Some(extra)) = (full_spec.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    create::<vrouter_api::ProxmoxCluster>(ns, json!({"metadata": {"name": "pve"}, "spec": full_spec})).await;
    pve
}

async fn build_site(
    hint: &str,
    targets: &[&str],
    settings: Settings,
    operator_client: kube::Client,
    lookup: Arc<dyn ObjectLookup>,
    start: bool,
) -> Site {
    let env = TestEnv::shared().await;
    let ns = env.namespace(hint).await;
    let pve = proxmox_cluster(&ns).await;
    site_in(ns, pve, targets, settings, operator_client, lookup, start).await
}

/// The targets, providers and controllers of a site in `ns`, whose
/// ProxmoxCluster `pve` exists.
async fn site_in(
    ns: TestNamespace,
    pve: FakeProxmox,
    targets: &[&str],
    settings: Settings,
    operator_client: kube::Client,
    lookup: Arc<dyn ObjectLookup>,
    start: bool,
) -> Site {
    let mut routers = HashMap::new();
    let mut paths = HashMap::new();
    for (i, name) in targets.iter().enumerate() {
        let agent = start_agent();
        let sandbox = GuestSandbox::new(agent.dir(), "vyos");
        let vmid = 100 + i as i64;
        pve.add_vm(vmid, "pve1", agent.socket_path());
        paths.insert(name.to_string(), sandbox.paths());
        create::<VRouterTarget>(
            &ns,
            json!({"metadata": {"name": name}, "spec": {
                "provider": {"type": "proxmox", "proxmox": {"vmid": vmid, "clusterRef": {"name": "pve"}}},
                "params": {"hostName": name, "asn": 4_200_000_000u64 + i as u64},
            }}),
        )
        .await;
        routers.insert(name.to_string(), Router { agent, sandbox });
    }
    let providers: Arc<dyn Providers> = Arc::new(SandboxedProviders {
        client: operator_client.clone(),
        lookup,
        paths,
        proxmox_clients: ProxmoxClients::default(),
        kept: KeptProviders::default(),
    });
    let ctx = Arc::new(Context::new(
        operator_client,
        Metrics::new(),
        settings,
        providers.clone(),
    ));
    let stop = if start {
        start_controllers(&ctx, ns.name())
    } else {
        watch::channel(false).0
    };
    Site {
        ns,
        pve,
        routers,
        stop,
        ctx,
        providers,
    }
}

/// Runs the operator's controllers for one namespace until the returned
/// sender is dropped or set.
pub fn start_controllers(ctx: &Arc<Context>, namespace: &str) -> watch::Sender<bool> {
    let (stop, mut stopped) = watch::channel(false);
    tokio::spawn(controllers::run(ctx.clone(), Some(namespace.to_owned()), async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    stop
}

/// Waits (at most `limit`) for the VRouterStatus `name` the operator creates
/// for an applied config, then makes it read the router every
/// `sync_interval`; returns it as it was first seen.
pub async fn vrouter_status_syncing_every(
    ns: &TestNamespace,
    name: &str,
    sync_interval: &str,
    limit: Duration,
) -> VRouterStatus {
    let statuses = ns.api::<VRouterStatus>();
    let first = wait_for("the VRouterStatus", limit, || async {
        statuses.get_opt(name).await.ok()?
    })
    .await;
    statuses
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": sync_interval}})),
        )
        .await
        .unwrap();
    first
}

/// Polls `check` until it returns `Some`, for at most `limit`: the
/// equivalent of `kubectl wait`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    vrouter_test_peers::eventually(limit, check)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

pub fn condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

pub async fn config_phase(api: &Api<VRouterConfig>, name: &str) -> Option<(Phase, Option<(String, String)>, String)> {
    let config = api.get_opt(name).await.ok()??;
    let status = config.status?;
    Some((status.phase, condition(&status.conditions, "Applied"), status.message))
}

/// Waits up to `limit` for the config to end Applied or Failed; returns
/// its phase, Applied condition and message.
pub async fn final_phase(
    api: &Api<VRouterConfig>,
    name: &str,
    limit: Duration,
) -> (Phase, Option<(String, String)>, String) {
    wait_for(&format!("{name} to be Applied or Failed"), limit, || async {
        config_phase(api, name)
            .await
            .filter(|(p, _, _)| matches!(p, Phase::Applied | Phase::Failed))
    })
    .await
}

/// KubeVirt's VMI CRD, as far as the operator reads it.
pub async fn install_vmi_crd(client: &kube::Client) {
    vrouter_test_apiserver::install_vmi_crd(client)
        .await
        .unwrap_or_else(|e| panic!("installing the VMI CRD: {e}"));
}

/// Sets the daemon grant on Namespace `namespace` to `entries`
/// (`ENDPOINT/AGENT`, comma-separated), as a cluster administrator would;
/// `None` removes it.
pub async fn grant_daemon_agents(client: &kube::Client, namespace: &str, entries: Option<&str>) {
    use vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_ALLOWED_DAEMON_AGENTS: entries}}})),
        )
        .await
        .unwrap();
}
