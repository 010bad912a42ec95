//! What the tests of the takeover from a running Go operator share, however
//! the Go operator was installed: its Deployment's pod as a process, the
//! sites applied through its webhooks, the webhook routing the cluster would
//! do, and what the objects and routers say before and after.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterConfig};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};

use super::go_migration::{go_site, kubectl, try_kubectl};
use super::go_operator::{GoOperator, WEBHOOK_PORT};
use super::shipped_rbac::kubeconfig_with_token;
use super::{final_phase, wait_for};

/// One namespace's site: its routers and their agents.
pub struct Site {
    pub ns: TestNamespace,
    pub routers: &'static [&'static str],
    pub first_id: usize,
    pub manifest: PathBuf,
}

impl Site {
    /// Sites `site-a` (two routers) and `site-b` (one), their manifests in
    /// `dir`, each namespace granted the agents of `daemon`.
    pub async fn two_namespaces(env: &TestEnv, dir: &Path, daemon: &Daemon) -> Vec<Site> {
        let mut sites = Vec::new();
        for (hint, routers, first_id) in [
            ("site-a", &["edge-1", "edge-2"][..], 11),
            ("site-b", &["edge-3"][..], 13),
        ] {
            let ns = env.namespace(hint).await;
            super::go_migration::grant_daemon(env, &ns, daemon);
            sites.push(Site {
                ns,
                routers,
                first_id,
                manifest: dir.join(format!("{hint}.yaml")),
            });
        }
        sites
    }

    pub fn write(&self, daemon: &Daemon, dns: &str) {
        std::fs::write(&self.manifest, go_site(daemon, self.routers, self.first_id, dns)).unwrap();
    }

    pub fn configs(&self) -> Vec<String> {
        self.routers.iter().map(|r| format!("site-a.{r}")).collect()
    }
}

/// Points every webhook of every webhook configuration that names Service
/// `service` at `https://127.0.0.1:PORT` with the same path, trusted by the
/// harness CA: what the Service's routing and cert-manager's CA injection do
/// in a cluster.
pub async fn route_webhooks(env: &TestEnv, service: &str, port: u16) {
    let ca_bundle = serde_json::to_value(env.webhook_tls().ca_bundle()).unwrap();
    route_webhooks_with(env, service, port, Some(ca_bundle)).await
}

/// [`route_webhooks`], with `ca_bundle` `None` keeping each webhook's own
/// bundle: the one an operator that makes its certificate publishes there.
/// That operator writes the configurations too, so a conflict is retried.
async fn route_webhooks_with(env: &TestEnv, service: &str, port: u16, ca_bundle: Option<serde_json::Value>) {
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: Api<DynamicObject> = Api::all_with(env.client(), &ApiResource::from_gvk(&gvk));
        let mut attempts = 0;
        while let Err(e) = route_each(&api, service, port, ca_bundle.as_ref()).await {
            attempts += 1;
            assert!(
                attempts < 10 && matches!(&e, kube::Error::Api(r) if r.code == 409),
                "routing {kind}s of {service}: {e}"
            );
        }
    }
}

async fn route_each(
    api: &Api<DynamicObject>,
    service: &str,
    port: u16,
    ca_bundle: Option<&serde_json::Value>,
) -> Result<(), kube::Error> {
    for mut configuration in api.list(&ListParams::default()).await? {
        let mut routed = false;
        for hook in configuration.data["webhooks"].as_array_mut().into_iter().flatten() {
            let target = &hook["clientConfig"]["service"];
            if target["name"] != service {
                continue;
            }
            let path = target["path"].as_str().unwrap_or("/").to_owned();
            let bundle = ca_bundle
                .cloned()
                .unwrap_or_else(|| hook["clientConfig"]["caBundle"].clone());
            hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": bundle});
            routed = true;
        }
        if routed {
            let name = configuration.metadata.name.clone().unwrap();
            api.replace(&name, &PostParams::default(), &configuration).await?;
        }
    }
    Ok(())
}

/// Every CRD of the vrouter API and every object of its kinds, by
/// kind/namespace/name, with its uid.
pub fn inventory(env: &TestEnv) -> BTreeMap<String, String> {
    let line = "{range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}={.metadata.uid}{\"\\n\"}{end}";
    let crds = kubectl(env, &["get", "crd", "-o", &format!("jsonpath={line}")]);
    let objects = kubectl(
        env,
        &[
            "get",
            "vroutertemplates,vrouterparams,vroutertargets,vrouterbindings,vrouterconfigs",
            "-A",
            "-o",
            &format!("jsonpath={line}"),
        ],
    );
    crds.lines()
        .filter(|l| l.contains(".vrouter.kojuro.date="))
        .chain(objects.lines())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Every object of `before` is still there, the same object (same uid).
pub fn assert_same_objects(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    for (object, uid) in before {
        assert_eq!(
            after.get(object),
            Some(uid),
            "{object} lost or replaced during the move"
        );
    }
}

/// Waits until something listens on `addr`.
pub async fn listening(addr: SocketAddr, what: &str) {
    wait_for(what, Duration::from_secs(60), || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await;
}

/// A token of ServiceAccount `name` of `namespace`, as its pod has.
pub async fn token_of(env: &TestEnv, namespace: &str, name: &str) -> String {
    env.service_account_token(namespace, name)
        .await
        .unwrap_or_else(|e| panic!("a token of {namespace}/{name}: {e}"))
}

/// The Go operator as the pod of the one Deployment its install created in
/// `namespace`: that Deployment's args and ServiceAccount, its webhook
/// server listening.
pub async fn start_go_pod(env: &TestEnv, namespace: &str, dir: &Path) -> GoOperator {
    let deployments = Api::<Deployment>::namespaced(env.client(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(deployments.items.len(), 1, "the Go install has one Deployment");
    let pod = deployments.items[0].spec.clone().template.spec.unwrap();
    let args = pod.containers[0].args.clone().unwrap_or_default();
    let account = pod
        .service_account_name
        .expect("the Go Deployment names its ServiceAccount");
    let kubeconfig = dir.join("go-kubeconfig");
    kubeconfig_with_token(env, &token_of(env, namespace, &account).await, &kubeconfig);
    let mut go = GoOperator::start_as_deployment(env, namespace, &kubeconfig, &args);
    go.wait_ready(Duration::from_secs(120)).await;
    listening(
        SocketAddr::from(([127, 0, 0, 1], WEBHOOK_PORT)),
        "the Go operator's webhook server",
    )
    .await;
    go
}

/// `kubectl apply` of the site while the Go webhooks judge it, again until
/// accepted, as its user would: they look the binding's targets up in the
/// Go operator's cache, which sees the targets created by the same apply a
/// moment later.
pub async fn apply_as_go_user(env: &TestEnv, site: &Site) {
    let args = ["apply", "-n", site.ns.name(), "-f", site.manifest.to_str().unwrap()];
    let mut last = String::new();
    for _ in 0..30 {
        match try_kubectl(env, &args) {
            Ok(_) => return,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("the Go webhooks kept refusing the site: {last}");
}

/// The routers of `site` Applied (the final phase of each config).
pub async fn all_applied(site: &Site, log: &str) {
    let configs = site.ns.api::<VRouterConfig>();
    for name in site.configs() {
        let (phase, _, message) = final_phase(&configs, &name, Duration::from_secs(120)).await;
        assert_eq!(phase, Phase::Applied, "{}/{name}: {message}\n{log}", site.ns.name());
    }
}

/// The generation of every config of `sites`, in order.
pub async fn generations(sites: &[Site]) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for site in sites {
        for name in site.configs() {
            let config = site.ns.api::<VRouterConfig>().get(&name).await.unwrap();
            out.push(config.metadata.generation);
        }
    }
    out
}

/// An agent of the daemon for every router of `sites`, in order.
pub async fn start_routers(daemon: &Daemon, sites: &[Site]) -> Vec<Agent> {
    let mut agents = Vec::new();
    for router in sites.iter().flat_map(|s| s.routers.iter()) {
        agents.push(daemon.start_agent(router, AgentFlags::default()).await);
    }
    agents
}

/// Each agent's last script set the name server to `dns`.
pub fn last_run_sets_name_server(agents: &[Agent], dns: &str) {
    for agent in agents {
        let calls = agent.sandbox().calls();
        let last_run = &calls[calls.iter().rposition(|c| c == "configure").unwrap()..];
        assert!(
            last_run.contains(&format!("set system name-server {dns}")),
            "{last_run:?}"
        );
    }
}

/// The name this test gives the pod of this chart's Deployment (its
/// `POD_NAME`, the Lease holder's identity).
pub const OUR_POD: &str = "vrouter-operator-pod-0";

/// This operator's binary as the pod of the Deployment `vrouter-operator`
/// that this chart installed in `namespace`: that Deployment's environment
/// (the downward API's pod name and namespace filled in as the kubelet
/// fills them) and ServiceAccount, its webhook reached as the chart
/// registers it. Only the listeners are moved to free loopback ports.
pub async fn start_chart_pod(env: &TestEnv, namespace: &str) -> super::operator_process::OperatorProcess {
    let deployment = Api::<Deployment>::namespaced(env.client(), namespace)
        .get("vrouter-operator")
        .await
        .unwrap();
    let pod = deployment.spec.template.spec.unwrap();
    let account = pod.service_account_name.clone().unwrap();
    let mut vars: Vec<(String, String)> = pod.containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|var| {
            let field = var.value_from.and_then(|from| from.field_ref).map(|f| f.field_path);
            let value = match field.as_deref() {
                None => var.value.unwrap_or_default(),
                Some("metadata.name") => OUR_POD.to_owned(),
                Some("metadata.namespace") => namespace.to_owned(),
                Some(other) => panic!("the chart's Deployment reads {other} from the downward API"),
            };
            (var.name, value)
        })
        .collect();
    // The chart's default: the operator makes its webhook certificate for
    // the Service's names. Here the API server dials a loopback address
    // instead of the Service, so the certificate names that address too,
    // and the webhooks keep the bundle the operator publishes.
    let operator_made = vars
        .iter()
        .any(|(name, value)| name == "WEBHOOK_CERTS" && value == "operator");
    if operator_made {
        let names = vars
            .iter_mut()
            .find(|(name, _)| name == "WEBHOOK_CERT_NAMES")
            .expect("the chart names the certificate's Service names");
        names.1.push_str(",127.0.0.1");
    }
    let token = token_of(env, namespace, &account).await;
    let mut ours = super::operator_process::OperatorProcess::start_with_env(env, &token, &[], &vars);
    ours.wait_ready(Duration::from_secs(60)).await;
    let harness_ca = (!operator_made).then(|| serde_json::to_value(env.webhook_tls().ca_bundle()).unwrap());
    route_webhooks_with(env, "vrouter-operator-webhook", ours.webhook.port(), harness_ca).await;
    ours
}
