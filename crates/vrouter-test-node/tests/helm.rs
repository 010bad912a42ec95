//! The operator as users run it: `helm install` of the chart
//! `deploy/helm/vrouter-operator` with the operator's real image (the
//! archive `cargo xtask image` writes, imported into the node's
//! containerd) on the test node. Both replicas run from that image and
//! become Ready, one of them holds the leader Lease and renews it, the API
//! server calls the admission webhook through its Service and the chart's
//! caBundle and refuses an invalid object with the operator's message, and
//! `/metrics` answers over the chart's metrics Service only to a caller
//! bound to the chart's `metrics-reader` ClusterRole. Then the faults: the
//! chart's ServiceAccount execs into a pod through the API server and the
//! kubelet, and the API server's authoriser refuses it (403) what its role
//! does not grant; a Proxmox target is applied from the pods through the
//! in-test Proxmox API and a real QEMU guest, the leader's container is
//! SIGKILLed from the host mid-apply, the kubelet restarts it, and the
//! apply ends Applied having run once ([`proxmox`]); the leader's pod is
//! deleted mid-rollout and the other replica leads before the Lease would
//! have expired ([`rollout`]); the examples of `testdata/examples/` are
//! applied and all end Applied, their KubeVirt targets through launcher
//! pods whose `virsh` reaches a real libvirtd ([`examples`]); every
//! replica is stopped and creates are refused
//! (`failurePolicy: Fail`) while status writes go through, until the
//! replicas return.
//!
//! The webhook's serving certificate is made here (no cert-manager on the
//! node): a Secret `<fullname>-webhook-tls` signed by a test CA whose PEM is
//! given as `webhook.caBundle`, as the chart documents for clusters without
//! cert-manager.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::{
    ApiResource, AttachParams, DeleteParams, DynamicObject, GroupVersionKind, ListParams, LogParams, Patch,
    PatchParams, PostParams,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use vrouter_test_apiserver::TestNamespace;
use vrouter_test_node::{NODE_NAME, TestNode, WAIT_TIMEOUT};

#[path = "helm/examples.rs"]
mod examples;
#[path = "helm/proxmox.rs"]
mod proxmox;
#[path = "helm/rollout.rs"]
mod rollout;

/// The variable `cargo xtask test` sets to the image archive it built.
const IMAGE_ENV: &str = "VROUTER_OPERATOR_IMAGE";
/// The release name; it contains the chart's name, so it is also the
/// chart's `fullname`, the prefix of every object the chart makes.
const RELEASE: &str = "vrouter-operator";
const REPLICAS: usize = 2;
const SELECTOR: &str = "app.kubernetes.io/name=vrouter-operator,app.kubernetes.io/instance=vrouter-operator";
/// The pod and ServiceAccount that scrape `/metrics` from inside the cluster.
const SCRAPER: &str = "scraper";
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_operator_image_which_leads_validates_and_serves_metrics() {
    let image = OperatorImage::from_env();
    let started = Instant::now();
    let guest = proxmox::boot_guest();
    let mut node = match TestNode::start().await {
        Ok(node) => node,
        Err(e) => panic!("cannot start the test node: {e}"),
    };
    node.import_image(&image.archive)
        .unwrap_or_else(|e| panic!("importing {}: {e}", image.archive.display()));
    let ns = node
        .namespace("vrouter-system")
        .await
        .expect("a namespace with its ServiceAccount");
    let (daemon, agents, daemon_address) = rollout::daemon_site(&mut node).await;
    // Before the operator starts: it watches VMIs when the cluster serves them.
    vrouter_test_apiserver::install_vmi_crd(&node.client())
        .await
        .expect("the VMI CRD");
    let ca = webhook_certificate(&ns).await;
    let installing = Instant::now();
    helm_install(&node, &ns, &ca).await;
    eprintln!("helm install --wait: {:.1}s", installing.elapsed().as_secs_f64());
    // Their boot (and libvirtd's QEMU probe) overlaps the checks below.
    let kubevirt_guests = examples::boot_guests();

    let pods = operator_pods_ready(&node, &ns).await;
    runs_the_imported_image(&pods, &image);
    one_replica_leads(&node, &ns, &pods).await;
    the_webhook_refuses_an_invalid_target(&node, &ns).await;
    metrics_are_served_to_readers(&node, &ns, &pods).await;
    the_operators_role_meets_the_kubelet(&node, &ns).await;
    let site = proxmox::proxmox_site(&mut node, &ns, guest).await;
    let pods = proxmox::a_leader_killed_mid_apply_applies_once(&node, &ns, &site).await;
    let pods = rollout::a_rollout_survives_its_leader(&node, &ns, &pods, &daemon_address, &agents).await;
    let applying_examples = Instant::now();
    examples::the_examples_apply(&node, &site, &daemon, &daemon_address, kubevirt_guests).await;
    eprintln!("examples: {:.1}s", applying_examples.elapsed().as_secs_f64());
    rollout::own_writes_while_no_webhook_answers(&node, &ns, &agents).await;
    webhooks_down_refuse_creates_until_they_return(&node, &ns, &pods).await;
    eprintln!("whole test: {:.1}s", started.elapsed().as_secs_f64());
}

/// The archive named by [`IMAGE_ENV`] and what its index says: the image
/// name containerd gives it and its manifest and config digests.
struct OperatorImage {
    archive: PathBuf,
    name: String,
    manifest_digest: String,
    config_digest: String,
}

impl OperatorImage {
    /// Fails, naming the commands that make the archive, when the variable
    /// or the file is missing: this test never passes without the image.
    fn from_env() -> OperatorImage {
        let Some(path) = std::env::var_os(IMAGE_ENV) else {
            panic!(
                "{IMAGE_ENV} is not set: `cargo xtask test` builds the operator's image and sets it; to run this \
                 test alone, build the archive with `cargo xtask image --out <path>` and set {IMAGE_ENV}=<path> \
                 (docs/operations.md)"
            )
        };
        // Relative to the workspace root, where `cargo xtask` writes it.
        let archive = workspace_root().join(path);
        assert!(
            archive.is_file(),
            "{IMAGE_ENV}={} is not a file: build it with `cargo xtask image --out <path>` (`cargo xtask test` does)",
            archive.display()
        );
        let index: Value = serde_json::from_slice(&archive_member(&archive, "index.json")).expect("index.json is JSON");
        let descriptor = &index["manifests"][0];
        let text = |v: &Value| {
            v.as_str()
                .expect("a string in the image's index or manifest")
                .to_owned()
        };
        let manifest_digest = text(&descriptor["digest"]);
        let manifest: Value =
            serde_json::from_slice(&archive_member(&archive, &blob(&manifest_digest))).expect("the manifest is JSON");
        OperatorImage {
            name: text(&descriptor["annotations"]["io.containerd.image.name"]),
            config_digest: text(&manifest["config"]["digest"]),
            manifest_digest,
            archive,
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn blob(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))
}

/// One file of a tar archive, read with the host's `tar`.
fn archive_member(archive: &Path, member: &str) -> Vec<u8> {
    let out = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(member)
        .output()
        .expect("tar runs");
    assert!(
        out.status.success(),
        "{member} in {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Creates the webhook's TLS Secret, signed by a new CA valid for the
/// webhook Service's names; returns the CA's PEM.
async fn webhook_certificate(ns: &TestNamespace) -> String {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("a CA key")).expect("the CA");
    let service = format!("{RELEASE}-webhook.{}.svc", ns.name());
    let mut params =
        CertificateParams::new(vec![service.clone(), format!("{service}.cluster.local")]).expect("serving parameters");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("a serving key");
    let cert = params.signed_by(&key, &ca).expect("the serving certificate");
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": format!("{RELEASE}-webhook-tls")},
        "stringData": {"tls.crt": cert.pem(), "tls.key": key.serialize_pem()},
    }))
    .expect("a valid Secret");
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("the webhook's Secret is created");
    ca.pem()
}

/// `helm install --wait` of the chart as a user without cert-manager runs
/// it, the image already on the node; Helm's own files in the node's
/// directory.
async fn helm_install(node: &TestNode, ns: &TestNamespace, ca_pem: &str) {
    let helm = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
    let home = node.dir().join("helm");
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let out = tokio::process::Command::new(helm)
        .args(["install", RELEASE])
        .arg(workspace_root().join("deploy/helm/vrouter-operator"))
        .args(["--namespace", ns.name(), "--kubeconfig"])
        .arg(node.env().kubeconfig_path())
        .args([
            "--set",
            &format!("replicas={REPLICAS}"),
            "--set",
            "image.pullPolicy=Never",
        ])
        .args(["--set", "webhook.certManager.enabled=false", "--set"])
        .arg(format!("webhook.caBundle={ca_bundle}"))
        // The harness installed the CRDs, as an admin does with `kubectl
        // apply -f deploy/crds/`; the chart leaves them to that.
        .args(["--set", "crds.install=false"])
        .args(["--wait", "--timeout", "4m"])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .await
        .expect("helm runs");
    if !out.status.success() {
        let pods = ns.api::<Pod>().list(&ListParams::default()).await.map(|l| l.items);
        let statuses: Vec<_> = pods.iter().flatten().map(|p| (&p.metadata.name, &p.status)).collect();
        panic!(
            "helm install failed:\n{}{}\npods: {statuses:#?}\nlast kubelet log lines:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            node.log_tail("kubelet")
        );
    }
}

/// The chart's replicas, all Running and Ready on the node.
async fn operator_pods_ready(node: &TestNode, ns: &TestNamespace) -> Vec<Pod> {
    let api: Api<Pod> = ns.api();
    let pods = node
        .until("both operator replicas Running and Ready", || async {
            let list = api.list(&ListParams::default().labels(SELECTOR)).await.ok()?;
            let live: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            (live.len() == REPLICAS && live.iter().all(is_ready)).then_some(live)
        })
        .await;
    for pod in &pods {
        assert_eq!(pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some(NODE_NAME));
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        assert_eq!(phase, Some("Running"), "{:?}", pod.metadata.name);
    }
    pods
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().expect("pods have names")
}

/// Each replica's container runs the imported image: its name, with the
/// archive's digest as the image ID, never restarted.
fn runs_the_imported_image(pods: &[Pod], image: &OperatorImage) {
    for pod in pods {
        let name = pod_name(pod);
        let spec = &pod.spec.as_ref().expect("a pod spec").containers[0];
        assert_eq!(
            spec.image.as_deref(),
            Some(image.name.as_str()),
            "{name}: the chart's image"
        );
        assert_eq!(spec.image_pull_policy.as_deref(), Some("Never"), "{name}");
        let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone());
        let status = &statuses.expect("container statuses")[0];
        assert_eq!(status.image, image.name, "{name}: the image the kubelet ran");
        let by_config = status.image_id == image.config_digest;
        let by_manifest = status.image_id.ends_with(&format!("@{}", image.manifest_digest));
        assert!(
            by_config || by_manifest,
            "{name}: image ID {} is neither the archive's config {} nor its manifest {}",
            status.image_id,
            image.config_digest,
            image.manifest_digest
        );
        assert!(status.ready && status.restart_count == 0, "{name}: {status:?}");
    }
}

/// The value of `key` in the chart's `values.yaml` (a key that occurs once).
fn chart_value(key: &str) -> String {
    let values = std::fs::read_to_string(workspace_root().join("deploy/helm/vrouter-operator/values.yaml"))
        .expect("the chart's values.yaml");
    let prefix = format!("{key}:");
    values
        .lines()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_else(|| panic!("values.yaml sets {key}"))
}

/// The chart's `leaderElection.leaseName`.
fn lease_name() -> String {
    chart_value("leaseName")
}

/// The chart's `leaderElection.leaseDuration`, in seconds there.
fn lease_duration() -> Duration {
    let text = chart_value("leaseDuration");
    let seconds = text.strip_suffix('s').and_then(|n| n.parse().ok());
    Duration::from_secs(seconds.unwrap_or_else(|| panic!("leaseDuration {text:?} is not whole seconds")))
}

/// One replica holds the chart's Lease and renews it; it, and only it,
/// logged that it leads.
async fn one_replica_leads(node: &TestNode, ns: &TestNamespace, pods: &[Pod]) {
    let names: Vec<String> = pods.iter().map(pod_name).collect();
    let holder = renewing_holder(node, ns, &names).await;
    let api: Api<Pod> = ns.api();
    for name in &names {
        let leads = node
            .until("the replica's log", || async {
                let log = api.logs(name, &LogParams::default()).await.ok()?;
                log.contains("competing for the Lease")
                    .then(|| log.contains(r#""message":"leading""#))
            })
            .await;
        assert_eq!(
            leads,
            *name == holder,
            "{name} logged leading: {leads}; the Lease's holder is {holder}"
        );
    }
}

/// The API server asks the webhook through the chart's Service, trusting
/// the caBundle; the operator refuses a proxmox target with no proxmox
/// block, naming the field.
async fn the_webhook_refuses_an_invalid_target(node: &TestNode, ns: &TestNamespace) {
    let targets = targets_api(ns.client(), ns);
    let target: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
        "metadata": {"name": "no-proxmox-block"},
        "spec": {"provider": {"type": "proxmox"}},
    }))
    .expect("a valid object");
    // Ready pods reach the Service's endpoints a moment later: until then
    // the API server cannot call the webhook at all.
    let message = node
        .until("the webhook answering", || async {
            match targets.create(&PostParams::default(), &target).await {
                Ok(_) => panic!("the invalid VRouterTarget was admitted"),
                Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => None,
                Err(kube::Error::Api(status)) => Some(status.message),
                Err(e) => panic!("creating the VRouterTarget: {e}"),
            }
        })
        .await;
    for part in [
        r#"admission webhook "validate.vrouter.kojuro.date" denied the request"#,
        "spec.provider.proxmox: must be set when spec.provider.type is proxmox",
    ] {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
}

/// `/metrics` over HTTPS through the chart's metrics Service, from a pod:
/// refused without a token, served to a ServiceAccount bound to the
/// chart's `metrics-reader` ClusterRole; and the replicas' own counters
/// show the refusal above.
async fn metrics_are_served_to_readers(node: &TestNode, ns: &TestNamespace, pods: &[Pod]) {
    let scraper = start_scraper(node, ns).await;
    let service = ns
        .api::<Service>()
        .get(&format!("{RELEASE}-metrics"))
        .await
        .expect("the metrics Service");
    let spec = service.spec.expect("a Service spec");
    // The chart's Service port is the container's (metrics.port).
    let port = spec.ports.expect("ports")[0].port;
    let address = format!("{}:{port}", spec.cluster_ip.expect("a cluster IP"));
    let anonymous = node
        .until("an anonymous scrape answered", || async {
            exec(ns, &scraper, &scrape(&address, false))
                .await
                .filter(|text| !text.contains("\nstatus 000\n"))
        })
        .await;
    assert!(
        anonymous.contains("\nstatus 401\n") && !anonymous.contains("# TYPE"),
        "without a token: {anonymous}"
    );
    // Each replica caches an answer for a minute: a refusal from before
    // the binding reached the API server's authoriser lasts that long.
    let served = node
        .until("metrics served to the reader", || async {
            let text = exec(ns, &scraper, &scrape(&address, true)).await?;
            let complete = text.contains("# TYPE vrouter_") && text.contains("# EOF\n");
            (complete && text.ends_with("\nstatus 200\nexit 0\n")).then_some(text)
        })
        .await;
    assert!(
        !served.contains("Unauthorized") && !served.contains("Forbidden"),
        "{served}"
    );
    let series = r#"vrouter_admission_reviews_total{kind="VRouterTarget",allowed="false"}"#;
    let mut scraped = Vec::new();
    for pod in pods {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("a pod IP");
        // A replica keeps a refusal from before the binding for a minute.
        scraped.push(
            node.until("each replica serving the reader", || async {
                let text = exec(ns, &scraper, &scrape(&format!("{ip}:{port}"), true)).await?;
                text.ends_with("\nstatus 200\nexit 0\n").then_some(text)
            })
            .await,
        );
    }
    let refusals: f64 = scraped.iter().map(|text| sample(text, series)).sum();
    assert!(
        refusals >= 1.0,
        "no replica counted the refused VRouterTarget:\n{}",
        scraped.join("\n")
    );
}

/// A `curl` of `/metrics` at `address` (with the pod's token or none):
/// the body, then `status <HTTP code>` and `exit <curl's exit code>` on
/// lines of their own, curl's errors included. `--insecure`: the operator's
/// certificate is its own, self-signed.
fn scrape(address: &str, token: bool) -> String {
    let header = if token {
        format!(r#"--header "Authorization: Bearer $(cat {TOKEN_PATH})""#)
    } else {
        String::new()
    };
    format!(
        "curl --silent --show-error --insecure --max-time 20 --write-out '\\nstatus %{{http_code}}\\n' {header} \
         https://{address}/metrics 2>&1; echo \"exit $?\""
    )
}

/// The value of the sample `series` in a text exposition (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(series))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .sum()
}

/// A pod with curl whose ServiceAccount is bound to the chart's
/// `metrics-reader` ClusterRole; returns its name once it runs.
async fn start_scraper(node: &TestNode, ns: &TestNamespace) -> String {
    let image = node
        .import_curl_image()
        .expect("the curl image (curl installed on the host)");
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": SCRAPER}})).expect("an account");
    ns.api::<ServiceAccount>()
        .create(&PostParams::default(), &account)
        .await
        .expect("the scraper's ServiceAccount");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-{SCRAPER}", ns.name())},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{RELEASE}-metrics-reader")},
        "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": ns.name()}],
    }))
    .expect("a binding");
    Api::<ClusterRoleBinding>::all(ns.client())
        .create(&PostParams::default(), &binding)
        .await
        .expect("the scraper's binding");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": SCRAPER},
        "spec": {
            "serviceAccountName": SCRAPER,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "while true; do sleep 1; done"],
            }],
        },
    }))
    .expect("a valid Pod");
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the scraper pod");
    node.until("the scraper pod Ready", || async {
        pods.get(SCRAPER).await.ok().filter(is_ready)
    })
    .await;
    SCRAPER.to_owned()
}

/// What `sh -c script` in the pod's container prints on stdout; none when
/// the exec session itself failed (a loaded kubelet), for the caller to
/// try again.
async fn exec(ns: &TestNamespace, pod: &str, script: &str) -> Option<String> {
    let params = AttachParams::default().stdin(false).stdout(true).stderr(false);
    let attached = ns.api::<Pod>().exec(pod, ["sh", "-c", script], &params).await;
    let mut attached = attached
        .map_err(|e| eprintln!("exec {script:?} in {pod}: {e}; trying again"))
        .ok()?;
    let mut stdout = attached.stdout().expect("stdout was asked for");
    let mut out = String::new();
    let read = stdout.read_to_string(&mut out).await;
    drop(stdout);
    let joined = attached.join().await;
    (read.is_ok() && joined.is_ok()).then_some(out)
}

/// The Lease's holder, once a replica among `names` holds it and has
/// renewed it since it was first seen here.
async fn renewing_holder(node: &TestNode, ns: &TestNamespace, names: &[String]) -> String {
    let leases: Api<Lease> = ns.api();
    let lease = lease_name();
    let held = |lease: Lease| {
        let spec = lease.spec?;
        Some((spec.holder_identity?, spec.renew_time?.0))
    };
    // The first record read may be a dead leader's, which another replica
    // then takes over: the one to see renew is whoever holds it last.
    let started = Instant::now();
    let mut seen: Option<(String, k8s_openapi::jiff::Timestamp)> = None;
    loop {
        let now = leases
            .get_opt(&lease)
            .await
            .ok()
            .flatten()
            .and_then(held)
            .filter(|(h, _)| names.contains(h));
        if let (Some((holder, renewed)), Some((now_holder, now_renewed))) = (&seen, &now)
            && holder == now_holder
            && now_renewed > renewed
        {
            return holder.clone();
        }
        if now.as_ref().map(|(h, _)| h) != seen.as_ref().map(|(h, _)| h) {
            seen = now;
        }
        assert!(
            started.elapsed() < WAIT_TIMEOUT,
            "a replica among {names:?} holding and renewing the Lease: not within {WAIT_TIMEOUT:?}; last seen {seen:?}; \
             last kubelet log lines:\n{}",
            node.log_tail("kubelet")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The chart's ServiceAccount, with a token from the TokenRequest API
/// like the one each replica is given: an exec into another pod goes
/// through the API server and the kubelet under the chart's role (the
/// KubeVirt provider's path), and what the role does not grant is refused
/// with 403 by the real authoriser.
async fn the_operators_role_meets_the_kubelet(node: &TestNode, ns: &TestNamespace) {
    let operator = node
        .env()
        .service_account_client(ns.name(), RELEASE)
        .await
        .expect("a client as the chart's ServiceAccount");
    let pods: Api<Pod> = Api::namespaced(operator.clone(), ns.name());
    let params = AttachParams::default().stdin(false).stdout(true).stderr(false);
    let mut attached = pods
        .exec(SCRAPER, ["cat", "/etc/hostname"], &params)
        .await
        .expect("the chart's role allows pods/exec");
    let mut out = String::new();
    let mut stdout = attached.stdout().expect("stdout was asked for");
    stdout.read_to_string(&mut out).await.expect("exec output is UTF-8");
    drop(stdout);
    attached.join().await.expect("the exec session ends");
    assert_eq!(out.trim(), SCRAPER, "the exec ran in the scraper pod");
    let forbidden = [
        (
            "pods/log get",
            pods.logs(SCRAPER, &LogParams::default()).await.map(drop),
        ),
        (
            "pods delete",
            pods.delete(SCRAPER, &DeleteParams::default()).await.map(drop),
        ),
        (
            "secrets delete",
            Api::<Secret>::namespaced(operator.clone(), ns.name())
                .delete("any", &DeleteParams::default())
                .await
                .map(drop),
        ),
        (
            "deployments get",
            Api::<Deployment>::namespaced(operator, ns.name())
                .get(RELEASE)
                .await
                .map(drop),
        ),
    ];
    for (what, result) in forbidden {
        match result {
            Err(kube::Error::Api(status)) if status.code == 403 => {}
            other => panic!("{what} as the operator: not refused with 403: {other:?}"),
        }
    }
}

/// The running container of `pod`'s single container: its ID and restarts.
fn container(pod: &Pod) -> Option<(String, i32, bool)> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?.clone();
    Some((status.container_id?, status.restart_count, status.ready))
}

/// The container of pod `leader` SIGKILLed from the host: the kubelet
/// starts it again in the same pod and it becomes Ready (it keeps its
/// identity, the pod's name, so it may resume its own Lease).
async fn kill_and_see_restarted(node: &TestNode, ns: &TestNamespace, leader: &str) {
    let api: Api<Pod> = ns.api();
    let (killed_id, restarts, _) = container(&api.get(leader).await.expect("the leader's pod")).expect("a container");
    node.kill_container(&killed_id)
        .expect("kill -9 of the leader's container");
    node.until("the killed leader restarted and Ready", || async {
        let (id, now_restarts, ready) = container(&api.get(leader).await.ok()?)?;
        (id != killed_id && now_restarts > restarts && ready).then_some(())
    })
    .await;
}

/// The leader's pod deleted: it releases the Lease as it stops, and another
/// replica leads well before the Lease could have expired; the
/// Deployment's replacement pod joins as a follower.
async fn a_deleted_leader_hands_over(node: &TestNode, ns: &TestNamespace, leader: &str) -> Vec<Pod> {
    let api: Api<Pod> = ns.api();
    let leases: Api<Lease> = ns.api();
    let lease = lease_name();
    api.delete(leader, &DeleteParams::default())
        .await
        .expect("the leader's pod is deleted");
    let deleted = Instant::now();
    let successor = node
        .until("another replica holding the Lease", || async {
            let holder = leases.get(&lease).await.ok()?.spec?.holder_identity?;
            (!holder.is_empty() && holder != leader).then_some(holder)
        })
        .await;
    let handover = deleted.elapsed();
    eprintln!(
        "Lease handed from {leader} to {successor} in {:.1}s",
        handover.as_secs_f64()
    );
    // Unreleased, the Lease is taken over no sooner than leaseDuration
    // after its last renewal, at most one retryPeriod (2 s) before the
    // deletion: 13 s or later. Released, within a retryPeriod or two.
    let unreleased_at_the_earliest = lease_duration() - Duration::from_secs(2);
    assert!(
        handover < unreleased_at_the_earliest - Duration::from_secs(3),
        "{successor} took the Lease {handover:?} after {leader} was deleted: it expired, it was not released"
    );
    let pods = operator_pods_ready(node, ns).await;
    let names: Vec<String> = pods.iter().map(pod_name).collect();
    assert!(!names.iter().any(|n| n == leader), "{leader} is gone: {names:?}");
    assert_eq!(renewing_holder(node, ns, &names).await, successor);
    pods
}

/// A VRouterTarget in `ns` with a valid spec (a VM of the same namespace).
fn valid_target(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
        "metadata": {"name": name},
        "spec": {"provider": {"type": "kubevirt", "kubevirt": {"name": "vm-a"}}},
    }))
    .expect("a valid object")
}

fn targets_api(client: kube::Client, ns: &TestNamespace) -> Api<DynamicObject> {
    rollout::api_in(client, ns.name(), "VRouterTarget", "vroutertargets")
}

/// Whether the API server refused a request because it could not call the
/// validating webhook (`failurePolicy: Fail`).
fn refused_for_no_webhook(status: &kube::core::Status) -> bool {
    status
        .message
        .contains(r#"failed calling webhook "validate.vrouter.kojuro.date""#)
}

/// Scales the chart's Deployment to `replicas`.
async fn scale(ns: &TestNamespace, replicas: usize) {
    ns.api::<Deployment>()
        .patch(
            RELEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("the chart's Deployment scales");
}

/// Every replica stopped, so no webhook answers: with the chart's
/// `failurePolicy: Fail` the API server refuses creates and spec updates,
/// while status writes, which the webhooks do not intercept, go through
/// (an operator replica that starts before its webhook is served can still
/// report). Scaled back, the webhooks admit again.
async fn webhooks_down_refuse_creates_until_they_return(node: &TestNode, ns: &TestNamespace, pods: &[Pod]) {
    let targets = targets_api(ns.client(), ns);
    targets
        .create(&PostParams::default(), &valid_target("before-outage"))
        .await
        .expect("a valid target is admitted while the webhooks run");
    scale(ns, 0).await;
    let api: Api<Pod> = ns.api();
    node.until("every operator pod gone", || async {
        let left = api.list(&ListParams::default().labels(SELECTOR)).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    let refused = |result: Result<DynamicObject, kube::Error>, what: &str| match result {
        Err(kube::Error::Api(status)) => assert!(refused_for_no_webhook(&status), "{what}: {}", status.message),
        other => panic!("{what} while no webhook runs: {other:?}"),
    };
    refused(
        targets
            .create(&PostParams::default(), &valid_target("during-outage"))
            .await,
        "a create",
    );
    let new_spec = Patch::Merge(json!({"spec": {"provider": {"kubevirt": {"name": "vm-b"}}}}));
    refused(
        targets.patch("before-outage", &PatchParams::default(), &new_spec).await,
        "a spec update",
    );
    let status = Patch::Merge(json!({"status": {"vmRunning": false}}));
    targets
        .patch_status("before-outage", &PatchParams::default(), &status)
        .await
        .expect("a status write is not sent to the webhooks");
    scale(ns, pods.len()).await;
    operator_pods_ready(node, ns).await;
    // Ready pods reach the Service's endpoints a moment later.
    node.until("the webhooks admitting again", || async {
        match targets
            .create(&PostParams::default(), &valid_target("after-outage"))
            .await
        {
            Ok(_) => Some(()),
            Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => None,
            Err(e) => panic!("creating a target after the outage: {e}"),
        }
    })
    .await;
}
