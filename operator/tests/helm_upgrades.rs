//! The chart's installs, upgrades and uninstall done for real: a real `helm`
//! (built by `cargo xtask testenv`) against a real kube-apiserver of the
//! test's own, started without the operator's CRDs so that each chart
//! installs them as in a user's cluster. No pod runs there (no node), so
//! the API server is started without webhook admission: the webhook
//! configurations are created, upgraded and deleted by Helm, never called.
//! What is checked is what Helm does to the objects.
//!
//! - The Go operator's chart (`shared/peers/vrouter-operator-go`, beside
//!   the repository), installed as its README says, then `helm upgrade` to
//!   this chart exactly as a user types it: every CRD and every custom
//!   resource in two namespaces is still there (same uid), the CRDs carry
//!   this chart's schema and the keep policy, the upgrade exits 0.
//! - An earlier version of this chart (its CRDs in `crds/`, made here from
//!   the current chart with a CRD field taken out): the upgrade is refused
//!   with the step that adopts the CRDs, nothing changed; after that step
//!   the upgrade brings the field. An earlier version with its CRDs as
//!   templates: a plain upgrade brings it.
//! - `helm uninstall` leaves every CRD and object.
//! - CRDs applied with kubectl: adopted only on request (the refusal names
//!   the step); `crds.install=false` leaves them alone.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vrouter_test_apiserver::{Options, TestEnv};

use common::shipped_rbac::{chart, documents};

/// The Go operator's README install: this release in this namespace.
const RELEASE: &str = "vrouter-operator";
const NAMESPACE: &str = "vrouter-system";
const GROUP: &str = "vrouter.kojuro.date";
/// The namespaces the users' objects live in.
const SITES: [&str; 2] = ["site-a", "site-b"];
/// How long a CRD Helm installed may take to be served.
const SERVED_TIMEOUT: Duration = Duration::from_secs(60);

/// Each kind with its plural; the Go operator serves all but the last.
const KINDS: [(&str, &str); 7] = [
    ("VRouterTemplate", "vroutertemplates"),
    ("VRouterParams", "vrouterparams"),
    ("VRouterTarget", "vroutertargets"),
    ("VRouterBinding", "vrouterbindings"),
    ("VRouterConfig", "vrouterconfigs"),
    ("ProxmoxCluster", "proxmoxclusters"),
    ("VRouterStatus", "vrouterstatuses"),
];
const GO_KINDS: usize = 6;

/// A field of this chart's VRouterBinding schema that the Go operator's
/// has not, and that the earlier chart made here lacks.
const NEW_FIELD: &str = "confirm";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_owned(),
        version: "v1".to_owned(),
        api_version: format!("{GROUP}/v1"),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// One object of `kind`, valid under both operators' schemas, each
/// referring to the others by name.
fn object(kind: &str) -> Value {
    let spec = match kind {
        "VRouterTemplate" => json!({"commands": "set system host-name {{ hostname }}\n"}),
        "VRouterParams" => json!({"params": {"hostname": "r1"}}),
        "VRouterTarget" => json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm"}}}),
        "VRouterBinding" => json!({
            "templateRef": {"name": "r"},
            "targetRefs": [{"name": "r"}],
            "paramsRefs": [{"name": "r"}],
        }),
        "VRouterConfig" => json!({"targetRef": {"name": "r"}, "commands": "set system host-name r1\n"}),
        "ProxmoxCluster" => json!({"endpoints": ["https://127.0.0.1:8006"], "credentialsRef": {"name": "r"}}),
        "VRouterStatus" => json!({"configRef": {"name": "r"}}),
        other => panic!("no object for {other}"),
    };
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": kind, "metadata": {"name": "r"}, "spec": spec})
}

/// A custom resource the test created, and its uid then.
#[derive(Debug)]
struct Created {
    kind: &'static str,
    plural: &'static str,
    namespace: &'static str,
    uid: String,
}

/// What a helm command did.
struct Ran {
    ok: bool,
    output: String,
}

/// A control plane of the test's own, with cert-manager's kinds.
struct Cluster {
    env: TestEnv,
    helm_home: tempfile::TempDir,
}

impl Cluster {
    /// Without the operator's CRDs: each chart installs them.
    async fn start() -> Cluster {
        Cluster::start_with(true).await
    }

    /// With the operator's CRDs already installed by the harness, as
    /// `kubectl apply -f deploy/crds/` installs them, unless `without_crds`.
    async fn start_with(without_crds: bool) -> Cluster {
        let options = Options {
            without_crds,
            without_webhook_admission: true,
            ..Options::default()
        };
        let env = TestEnv::start_with(options)
            .await
            .unwrap_or_else(|e| panic!("cannot start the test API server: {e}"));
        let cluster = Cluster {
            env,
            helm_home: tempfile::tempdir().unwrap(),
        };
        cluster.create_cert_manager_crds().await;
        for site in SITES {
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": site}})).unwrap();
            Api::<Namespace>::all(cluster.env.client())
                .create(&PostParams::default(), &ns)
                .await
                .unwrap();
        }
        cluster
    }

    async fn create_cert_manager_crds(&self) {
        let path = workspace_root().join("testdata/helm/cert-manager-crds.yaml");
        let crds: Api<CustomResourceDefinition> = Api::all(self.env.client());
        for crd in documents(&std::fs::read_to_string(&path).unwrap()) {
            crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap())
                .await
                .unwrap_or_else(|e| panic!("creating the CRDs of {}: {e}", path.display()));
        }
        for (kind, plural) in [("Certificate", "certificates"), ("Issuer", "issuers")] {
            let resource = ApiResource {
                group: "cert-manager.io".to_owned(),
                version: "v1".to_owned(),
                api_version: "cert-manager.io/v1".to_owned(),
                kind: kind.to_owned(),
                plural: plural.to_owned(),
            };
            self.wait_served(&resource).await;
        }
    }

    /// `helm ARGS` against this control plane, with Helm's own files in a
    /// directory of the test's.
    async fn helm(&self, args: &[&str]) -> Ran {
        let path = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
        let home = self.helm_home.path();
        let out = tokio::process::Command::new(path)
            .args(args)
            .arg("--kubeconfig")
            .arg(self.env.kubeconfig_path())
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .await
            .expect("helm runs");
        Ran {
            ok: out.status.success(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    async fn helm_ok(&self, args: &[&str]) {
        let ran = self.helm(args).await;
        assert!(ran.ok, "helm {} failed:\n{}", args.join(" "), ran.output);
    }

    /// `kubectl ARGS` against this control plane.
    async fn kubectl(&self, args: &[&str]) {
        let path = vrouter_test_apiserver::kubectl().unwrap_or_else(|e| panic!("{e}"));
        let out = tokio::process::Command::new(path)
            .args(args)
            .arg("--kubeconfig")
            .arg(self.env.kubeconfig_path())
            .output()
            .await
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until `resource` answers a list (its CRD Established).
    async fn wait_served(&self, resource: &ApiResource) {
        let api = Api::<DynamicObject>::all_with(self.env.client(), resource);
        let started = Instant::now();
        while api.list(&ListParams::default().limit(1)).await.is_err() {
            assert!(
                started.elapsed() < SERVED_TIMEOUT,
                "{} not served within {SERVED_TIMEOUT:?}",
                resource.plural
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates one object of each of the first `kinds` kinds in each site.
    async fn create_objects(&self, kinds: usize) -> Vec<Created> {
        let mut created = Vec::new();
        for (kind, plural) in &KINDS[..kinds] {
            let resource = resource(kind, plural);
            self.wait_served(&resource).await;
            for namespace in SITES {
                let api = Api::<DynamicObject>::namespaced_with(self.env.client(), namespace, &resource);
                let object: DynamicObject = serde_json::from_value(object(kind)).unwrap();
                let made = api
                    .create(&PostParams::default(), &object)
                    .await
                    .unwrap_or_else(|e| panic!("creating {kind} in {namespace}: {e}"));
                created.push(Created {
                    kind,
                    plural,
                    namespace,
                    uid: made.metadata.uid.unwrap(),
                });
            }
        }
        created
    }

    /// The uid of every CRD of the operator's group, by name.
    async fn crd_uids(&self) -> BTreeMap<String, String> {
        self.crds()
            .await
            .into_iter()
            .map(|crd| (crd.metadata.name.unwrap(), crd.metadata.uid.unwrap()))
            .collect()
    }

    async fn crds(&self) -> Vec<CustomResourceDefinition> {
        let all = Api::<CustomResourceDefinition>::all(self.env.client())
            .list(&ListParams::default())
            .await
            .unwrap();
        all.items.into_iter().filter(|crd| crd.spec.group == GROUP).collect()
    }

    /// Every CRD of `crds` and every object of `objects` is still there,
    /// the same object (same uid), and nothing else of those kinds is.
    async fn assert_nothing_lost(&self, crds: &BTreeMap<String, String>, objects: &[Created]) {
        let now = self.crd_uids().await;
        for (name, uid) in crds {
            assert_eq!(now.get(name), Some(uid), "CRD {name} is gone or was made anew: {now:?}");
        }
        for object in objects {
            let api = Api::<DynamicObject>::namespaced_with(
                self.env.client(),
                object.namespace,
                &resource(object.kind, object.plural),
            );
            let found = api.get_opt("r").await.unwrap_or_else(|e| panic!("{object:?}: {e}"));
            let uid = found.and_then(|o| o.metadata.uid);
            assert_eq!(uid.as_ref(), Some(&object.uid), "{object:?} is gone or was made anew");
        }
    }

    /// Every CRD of this chart is there, owned by the release and annotated
    /// to be kept.
    async fn assert_crds_are_the_charts_and_kept(&self) {
        let crds = self.crds().await;
        let names: Vec<String> = crds.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
        assert_eq!(crds.len(), vrouter_api::crds::all().len(), "{names:?}");
        for crd in crds {
            let name = crd.metadata.name.unwrap();
            let annotations = crd.metadata.annotations.unwrap_or_default();
            let labels = crd.metadata.labels.unwrap_or_default();
            assert_eq!(
                annotations.get("helm.sh/resource-policy").map(String::as_str),
                Some("keep"),
                "{name}"
            );
            assert_eq!(
                annotations.get("meta.helm.sh/release-name").map(String::as_str),
                Some(RELEASE),
                "{name}"
            );
            assert_eq!(
                labels.get("helm.sh/chart").map(String::as_str),
                Some(format!("vrouter-operator-{}", env!("CARGO_PKG_VERSION")).as_str()),
                "{name}: this chart's labels"
            );
        }
    }

    /// Writes `spec.confirm` into site-a's VRouterBinding and returns what
    /// the API server kept of it (`None`: its schema pruned the field).
    async fn write_new_field(&self) -> Option<Value> {
        let (kind, plural) = KINDS[3];
        let api = Api::<DynamicObject>::namespaced_with(self.env.client(), SITES[0], &resource(kind, plural));
        let patch = json!({"spec": {NEW_FIELD: {"timeout": "5m"}}});
        let written = api
            .patch("r", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("writing spec.{NEW_FIELD} of {kind}: {e}"));
        written.data["spec"].get(NEW_FIELD).cloned()
    }

    async fn deployment_exists(&self, name: &str) -> bool {
        Api::<Deployment>::namespaced(self.env.client(), NAMESPACE)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart_arg() -> String {
    chart().display().to_string()
}

/// The Go operator's chart, from the read-only `shared/` folder beside the
/// repository (or beside an ancestor of a worktree).
fn go_chart() -> String {
    let relative = "shared/peers/vrouter-operator-go/charts/vrouter-operator";
    let root = workspace_root().canonicalize().unwrap();
    root.ancestors()
        .skip(1)
        .map(|dir| dir.join(relative))
        .find(|dir| dir.join("Chart.yaml").is_file())
        .unwrap_or_else(|| {
            panic!(
                "the Go operator's chart is missing: expected {} (the read-only shared/ folder beside the \
                 repository, holding peers/vrouter-operator-go); the upgrade from it is tested with that real chart",
                root.join("..").join(relative).display()
            )
        })
        .display()
        .to_string()
}

#[tokio::test]
async fn helm_upgrade_from_the_go_chart_keeps_every_crd_and_object() {
    let cluster = Cluster::start().await;
    let go = go_chart();
    cluster
        .helm_ok(&["install", RELEASE, &go, "-n", NAMESPACE, "--create-namespace"])
        .await;
    let objects = cluster.create_objects(GO_KINDS).await;
    let crds = cluster.crd_uids().await;
    assert_eq!(crds.len(), GO_KINDS, "the Go chart's CRDs: {crds:?}");
    assert_eq!(
        cluster.write_new_field().await,
        None,
        "the Go schema has no spec.{NEW_FIELD}"
    );

    // Exactly what a user types.
    cluster
        .helm_ok(&["upgrade", RELEASE, &chart_arg(), "-n", NAMESPACE])
        .await;
    cluster.assert_nothing_lost(&crds, &objects).await;
    cluster.assert_crds_are_the_charts_and_kept().await;
    assert_eq!(
        cluster.write_new_field().await,
        Some(json!({"timeout": "5m"})),
        "this chart's schema keeps spec.{NEW_FIELD}"
    );
    // This operator's Deployment replaced the Go operator's.
    assert!(cluster.deployment_exists("vrouter-operator").await);
    assert!(!cluster.deployment_exists("vrouter-operator-controller-manager").await);
}

/// Without the CRDs in this chart (`crds.install=false`), Helm would delete
/// the Go release's CRDs, which have no keep policy: refused, naming the
/// step, before anything is deleted.
#[tokio::test]
async fn leaving_the_go_charts_crds_out_of_the_upgrade_is_refused_before_anything_is_deleted() {
    let cluster = Cluster::start().await;
    let go = go_chart();
    cluster
        .helm_ok(&["install", RELEASE, &go, "-n", NAMESPACE, "--create-namespace"])
        .await;
    let objects = cluster.create_objects(GO_KINDS).await;
    let crds = cluster.crd_uids().await;
    let refused = cluster
        .helm(&[
            "upgrade",
            RELEASE,
            &chart_arg(),
            "-n",
            NAMESPACE,
            "--set",
            "crds.install=false",
        ])
        .await;
    assert!(!refused.ok, "{}", refused.output);
    assert!(
        refused
            .output
            .contains("crds.install=false would make Helm delete CRDs")
            && refused.output.contains("vrouterbindings.vrouter.kojuro.date")
            && refused.output.contains("with crds.install=true and crds.keep=true"),
        "{}",
        refused.output
    );
    cluster.assert_nothing_lost(&crds, &objects).await;
    // The step it names, then what was asked.
    cluster
        .helm_ok(&["upgrade", RELEASE, &chart_arg(), "-n", NAMESPACE])
        .await;
    cluster
        .helm_ok(&[
            "upgrade",
            RELEASE,
            &chart_arg(),
            "-n",
            NAMESPACE,
            "--set",
            "crds.install=false",
        ])
        .await;
    cluster.assert_nothing_lost(&crds, &objects).await;
}

/// The earlier chart's layouts this test builds.
#[derive(Clone, Copy)]
enum Earlier {
    /// CRDs in `crds/`, as chart 0.1.0 had them.
    CrdsDirectory,
    /// CRDs as templates, as now.
    Templates,
}

/// `text` (a CRD's YAML) without the VRouterBinding spec's new field: its
/// line and every line indented deeper below it.
fn without_new_field(text: &str) -> String {
    // The depth of the spec's properties in the generated YAML.
    const INDENT: usize = 14;
    let key = format!("{}{NEW_FIELD}:", " ".repeat(INDENT));
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if line == key {
            skipping = true;
            continue;
        }
        if skipping && indent > INDENT {
            continue;
        }
        skipping = false;
        out.push_str(line);
        out.push('\n');
    }
    assert_ne!(out, text, "no {key:?} in the VRouterBinding CRD");
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// An earlier version of this chart in `dir`: the current one whose
/// VRouterBinding CRD lacks [`NEW_FIELD`], laid out as `layout` says.
fn earlier_chart(dir: &Path, layout: Earlier) -> String {
    let chart_dir = dir.join("vrouter-operator");
    copy_dir(&chart(), &chart_dir);
    let binding = "vrouterbindings.vrouter.kojuro.date.yaml";
    let templates = chart_dir.join("templates/crds");
    match layout {
        Earlier::Templates => {
            let text = std::fs::read_to_string(templates.join(binding)).unwrap();
            std::fs::write(templates.join(binding), without_new_field(&text)).unwrap();
        }
        Earlier::CrdsDirectory => {
            std::fs::remove_dir_all(&templates).unwrap();
            std::fs::remove_file(chart_dir.join("templates/crds-check.yaml")).unwrap();
            let crds = chart_dir.join("crds");
            copy_dir(&workspace_root().join("deploy/crds"), &crds);
            let text = std::fs::read_to_string(crds.join(binding)).unwrap();
            std::fs::write(crds.join(binding), without_new_field(&text)).unwrap();
        }
    }
    chart_dir.display().to_string()
}

/// Installs the earlier chart of `layout` and creates an object of every
/// kind in each site; checks the earlier schema really lacks the field.
async fn install_earlier(cluster: &Cluster, dir: &Path, layout: Earlier) -> (BTreeMap<String, String>, Vec<Created>) {
    let earlier = earlier_chart(dir, layout);
    cluster
        .helm_ok(&["install", RELEASE, &earlier, "-n", NAMESPACE, "--create-namespace"])
        .await;
    let objects = cluster.create_objects(KINDS.len()).await;
    assert_eq!(
        cluster.write_new_field().await,
        None,
        "the earlier schema has no spec.{NEW_FIELD}"
    );
    (cluster.crd_uids().await, objects)
}

#[tokio::test]
async fn an_upgrade_from_the_charts_crds_directory_names_the_adoption_step_then_brings_the_new_field() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (crds, objects) = install_earlier(&cluster, dir.path(), Earlier::CrdsDirectory).await;

    let refused = cluster.helm(&["upgrade", RELEASE, &chart_arg(), "-n", NAMESPACE]).await;
    assert!(!refused.ok, "{}", refused.output);
    cluster.assert_nothing_lost(&crds, &objects).await;
    assert_eq!(cluster.write_new_field().await, None, "nothing changed");
    // The message names the step; it is run exactly as printed.
    let steps: Vec<&str> = refused
        .output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("kubectl "))
        .collect();
    assert_eq!(steps.len(), 2, "{}", refused.output);
    for step in steps {
        let args: Vec<&str> = step.split_whitespace().collect();
        assert!(args.len() >= 2 + KINDS.len(), "every CRD is named: {step}");
        cluster.kubectl(&args).await;
    }

    cluster
        .helm_ok(&["upgrade", RELEASE, &chart_arg(), "-n", NAMESPACE])
        .await;
    cluster.assert_nothing_lost(&crds, &objects).await;
    cluster.assert_crds_are_the_charts_and_kept().await;
    assert_eq!(cluster.write_new_field().await, Some(json!({"timeout": "5m"})));
}

#[tokio::test]
async fn an_upgrade_from_an_earlier_chart_with_crd_templates_brings_the_new_field() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (crds, objects) = install_earlier(&cluster, dir.path(), Earlier::Templates).await;
    cluster
        .helm_ok(&["upgrade", RELEASE, &chart_arg(), "-n", NAMESPACE])
        .await;
    cluster.assert_nothing_lost(&crds, &objects).await;
    cluster.assert_crds_are_the_charts_and_kept().await;
    assert_eq!(cluster.write_new_field().await, Some(json!({"timeout": "5m"})));
}

#[tokio::test]
async fn helm_uninstall_leaves_every_crd_and_object() {
    let cluster = Cluster::start().await;
    cluster
        .helm_ok(&["install", RELEASE, &chart_arg(), "-n", NAMESPACE, "--create-namespace"])
        .await;
    let objects = cluster.create_objects(KINDS.len()).await;
    let crds = cluster.crd_uids().await;
    assert_eq!(crds.len(), KINDS.len());
    cluster.helm_ok(&["uninstall", RELEASE, "-n", NAMESPACE]).await;
    cluster.assert_nothing_lost(&crds, &objects).await;
    // The release's own objects are gone: uninstall did run.
    assert!(!cluster.deployment_exists("vrouter-operator").await);
    // Installed again, the release takes its kept CRDs back as they are.
    cluster
        .helm_ok(&["install", RELEASE, &chart_arg(), "-n", NAMESPACE])
        .await;
    cluster.assert_nothing_lost(&crds, &objects).await;
}

/// CRDs applied with kubectl (the test API server installs them as
/// `kubectl apply -f deploy/crds/` does): a default install is refused with
/// the step that adopts them, nothing created; with `crds.install=false`
/// (as `crates/vrouter-test-node/tests/helm.rs` installs) the chart leaves
/// them as they are, through install and uninstall.
#[tokio::test]
async fn crds_applied_with_kubectl_are_adopted_only_on_request() {
    let cluster = Cluster::start_with(false).await;
    let objects = cluster.create_objects(KINDS.len()).await;
    let crds = cluster.crd_uids().await;
    let refused = cluster
        .helm(&["install", RELEASE, &chart_arg(), "-n", NAMESPACE, "--create-namespace"])
        .await;
    assert!(!refused.ok, "{}", refused.output);
    assert!(refused.output.contains("kubectl label crd"), "{}", refused.output);
    assert!(
        !cluster.deployment_exists("vrouter-operator").await,
        "nothing installed"
    );

    cluster
        .helm_ok(&[
            "install",
            RELEASE,
            &chart_arg(),
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            "crds.install=false",
        ])
        .await;
    assert!(cluster.deployment_exists("vrouter-operator").await);
    let untouched = cluster
        .crds()
        .await
        .into_iter()
        .all(|crd| crd.metadata.labels.is_none());
    assert!(untouched, "the release took no CRD");
    cluster.helm_ok(&["uninstall", RELEASE, "-n", NAMESPACE]).await;
    cluster.assert_nothing_lost(&crds, &objects).await;
}
