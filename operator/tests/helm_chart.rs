//! The Helm chart, rendered by a real `helm` (built by `cargo xtask testenv`)
//! and sent to a real kube-apiserver as a server-side dry run: every object
//! it installs is one the API server accepts, its RBAC is the plain
//! manifests', `watchNamespace` narrows that RBAC to one namespace, and a
//! webhook without a CA is refused at render time.

mod common;

use serde_json::Value;
use vrouter_test_apiserver::TestEnv;

use common::chart_dry_run::dry_run;
use common::shipped_rbac::{self, chart, helm, plain_manifest};

/// `helm template vr` of the chart with `sets`.
fn template(namespace: &str, sets: &[&str]) -> Result<Vec<Value>, String> {
    shipped_rbac::helm_template("vr", namespace, sets)
}

fn kinds(objects: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = objects.iter().map(|o| o["kind"].as_str().unwrap().to_owned()).collect();
    kinds.sort();
    kinds
}

fn one<'a>(objects: &'a [Value], kind: &str, name_ends: &str) -> &'a Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind && o["metadata"]["name"].as_str().unwrap().ends_with(name_ends))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} named *{name_ends}: {found:#?}");
    found[0]
}

#[test]
fn the_chart_lints_clean() {
    let output = helm().args(["lint", "--strict"]).arg(chart()).output().unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_default_install_is_accepted_and_grants_what_the_plain_manifests_grant() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("chart").await;
    let objects = template(ns.name(), &[]).unwrap();
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration"
        ]
    );
    dry_run(&env.client(), &objects).await;

    let rbac = plain_manifest("rbac.yaml");
    assert_eq!(
        one(&objects, "ClusterRole", "vrouter-operator")["rules"],
        one(&rbac, "ClusterRole", "vrouter-operator")["rules"]
    );
    assert_eq!(
        one(&objects, "Role", "leader-election")["rules"],
        one(&rbac, "Role", "leader-election")["rules"]
    );
    // The binding names the account the Deployment runs as.
    let binding = one(&objects, "ClusterRoleBinding", "vrouter-operator");
    let pod = &one(&objects, "Deployment", "vrouter-operator")["spec"]["template"]["spec"];
    assert_eq!(binding["subjects"][0]["name"], pod["serviceAccountName"]);
    assert_eq!(binding["subjects"][0]["namespace"], ns.name());
    // The operator makes the certificate (no cert-manager): it is told the
    // Secret, configuration and names its roles name, mounts no Secret, and
    // the configuration carries no caBundle for an upgrade to reset.
    assert!(pod.get("volumes").is_none(), "{:?}", pod["volumes"]);
    let env_of = |name: &str| {
        pod["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
            .unwrap_or_else(|| panic!("no {name} in the operator's env"))
    };
    assert_eq!(env_of("WEBHOOK_CERTS"), "operator");
    assert_eq!(env_of("WEBHOOK_CERT_NAMESPACE"), ns.name());
    let configuration = one(&objects, "ValidatingWebhookConfiguration", "vrouter-operator");
    assert_eq!(env_of("WEBHOOK_CONFIGURATIONS"), configuration["metadata"]["name"]);
    for hook in configuration["webhooks"].as_array().unwrap() {
        assert!(hook["clientConfig"].get("caBundle").is_none(), "{hook}");
        let service = &hook["clientConfig"]["service"];
        let name = format!("{}.{}.svc", service["name"].as_str().unwrap(), ns.name());
        assert!(
            env_of("WEBHOOK_CERT_NAMES")
                .as_str()
                .unwrap()
                .split(',')
                .any(|n| n == name)
        );
    }
    let role = one(&objects, "Role", "webhook-certs");
    assert_eq!(
        role["rules"][1]["resourceNames"],
        serde_json::json!([env_of("WEBHOOK_CERT_SECRET")])
    );
    let cluster_role = one(&objects, "ClusterRole", "webhook-certs");
    assert_eq!(
        cluster_role["rules"][0]["resourceNames"],
        serde_json::json!([configuration["metadata"]["name"]])
    );
}

#[tokio::test]
async fn watch_namespace_narrows_rbac_to_that_namespace() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("chart-narrow").await;
    let watched = env.namespace("chart-watched").await;
    let objects = template(
        ns.name(),
        &[
            &format!("watchNamespace={}", watched.name()),
            "webhook.certManager.enabled=false",
            "webhook.caBundle=Y2EK",
        ],
    )
    .unwrap();
    // Nothing cluster-wide but the webhook and the metrics authorisation
    // (TokenReview and SubjectAccessReview are cluster-scoped, and so is
    // the reader role for Prometheus).
    let cluster_wide: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"].as_str().unwrap().starts_with("Cluster"))
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        cluster_wide
            .iter()
            .all(|n| n.ends_with("-metrics-auth") || n.ends_with("-metrics-reader")),
        "{cluster_wide:?}"
    );
    dry_run(&env.client(), &objects).await;
    let role = one(&objects, "Role", "vrouter-operator");
    assert_eq!(role["metadata"]["namespace"], watched.name());
    assert_eq!(
        role["rules"],
        one(&plain_manifest("rbac.yaml"), "ClusterRole", "vrouter-operator")["rules"]
    );
    let binding = one(&objects, "RoleBinding", "vrouter-operator");
    assert_eq!(binding["metadata"]["namespace"], watched.name());
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["namespace"], ns.name());
    // The leader-election Lease stays in the release namespace.
    assert_eq!(
        one(&objects, "Role", "leader-election")["metadata"]["namespace"],
        ns.name()
    );
    let env_vars = &one(&objects, "Deployment", "vrouter-operator")["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env_vars
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "WATCH_NAMESPACE" && e["value"] == watched.name()),
        "{env_vars:#?}"
    );
    let hooks = &one(&objects, "ValidatingWebhookConfiguration", "vrouter-operator")["webhooks"];
    assert!(
        hooks
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["clientConfig"]["caBundle"] == "Y2EK"),
        "{hooks:#?}"
    );
}

/// The chart renders the generated CRDs (their spec exactly), labelled as
/// the release's and annotated to be kept; `crds.keep=false` drops the
/// annotation and `crds.install=false` the CRDs.
#[test]
fn the_chart_crds_are_the_generated_ones_kept_and_gated() {
    let crds = |sets: &[&str]| -> Vec<Value> {
        let objects = template("vrouter-system", sets).unwrap();
        objects
            .into_iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .collect()
    };
    let rendered = crds(&[]);
    let generated = vrouter_api::crds::all();
    assert_eq!(rendered.len(), generated.len());
    for expected in &generated {
        let name = expected.metadata.name.as_deref().unwrap();
        let crd = rendered
            .iter()
            .find(|crd| crd["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("the chart renders no CRD {name}"));
        assert_eq!(crd["spec"], serde_json::to_value(&expected.spec).unwrap(), "{name}");
        assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
        assert_eq!(crd["metadata"]["labels"]["app.kubernetes.io/instance"], "vr");
    }
    assert!(
        crds(&["crds.keep=false"])
            .iter()
            .all(|crd| crd["metadata"].get("annotations").is_none())
    );
    assert!(crds(&["crds.install=false"]).is_empty());
}

#[test]
fn a_manual_webhook_certificate_without_a_ca_is_refused_at_render_time() {
    let err = template("vrouter-system", &["webhook.certificates=manual"]).unwrap_err();
    assert!(err.contains("webhook.caBundle is required"), "{err}");
    // Without webhooks there is nothing to trust.
    let objects = template(
        "vrouter-system",
        &["webhook.enabled=false", "webhook.certificates=manual"],
    )
    .unwrap();
    assert!(!kinds(&objects).contains(&"ValidatingWebhookConfiguration".to_owned()));
}

/// cert-manager signs with an existing Issuer or ClusterIssuer named in the
/// values (the chart then makes no Issuer of its own), with the chart's
/// self-signed Issuer by default; any other kind is refused at render time.
#[test]
fn cert_manager_signs_with_the_issuer_the_values_name() {
    let certificate_issuer = |sets: &[&str]| -> (Value, bool) {
        let sets = [sets, &["webhook.certificates=certManager"]].concat();
        let objects = template("vrouter-system", &sets).unwrap();
        let issuer = one(&objects, "Certificate", "webhook")["spec"]["issuerRef"].clone();
        let makes_issuer = objects.iter().any(|o| o["kind"] == "Issuer");
        (issuer, makes_issuer)
    };
    assert_eq!(
        certificate_issuer(&[]),
        (
            serde_json::json!({"group": "cert-manager.io", "kind": "Issuer", "name": "vr-vrouter-operator-selfsigned"}),
            true
        )
    );
    for kind in ["Issuer", "ClusterIssuer"] {
        let (kind_set, name_set) = (
            format!("webhook.certManager.issuerRef.kind={kind}"),
            "webhook.certManager.issuerRef.name=corp-ca".to_owned(),
        );
        assert_eq!(
            certificate_issuer(&[&kind_set, &name_set]),
            (
                serde_json::json!({"group": "cert-manager.io", "kind": kind, "name": "corp-ca"}),
                false
            ),
            "{kind}"
        );
    }
    let err = template(
        "vrouter-system",
        &[
            "webhook.certificates=certManager",
            "webhook.certManager.issuerRef.kind=Vault",
            "webhook.certManager.issuerRef.name=x",
        ],
    )
    .unwrap_err();
    assert!(
        err.contains(r#"webhook.certManager.issuerRef.kind is "Vault": it must be Issuer or ClusterIssuer"#),
        "{err}"
    );
}

/// The value of the operator container's environment variable `name` in the
/// chart rendered with `sets`.
fn env_value(sets: &[&str], name: &str) -> Value {
    let objects = template("vrouter-operator-system", sets).unwrap();
    let env_vars =
        one(&objects, "Deployment", "vrouter-operator")["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    env_vars
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
        .unwrap_or_else(|| panic!("no {name} in {env_vars:#?}"))
}

/// The Lease is the Go operator's by default, so the two exclude each other
/// in one namespace during a migration; a value gives a release its own.
#[test]
fn the_lease_is_the_go_operators_unless_a_value_names_another() {
    assert_eq!(
        env_value(&[], "LEASE_NAME"),
        vrouter_operator::runtime::leader::DEFAULT_LEASE_NAME
    );
    assert_eq!(env_value(&["leaderElection.leaseName=site-a"], "LEASE_NAME"), "site-a");
}

/// The election's timing is client-go's by default, and each duration has
/// its value.
#[test]
fn the_election_timing_is_client_gos_unless_values_tune_it() {
    let defaults = [
        ("LEASE_DURATION", "15s"),
        ("RENEW_DEADLINE", "10s"),
        ("RETRY_PERIOD", "2s"),
    ];
    for (name, value) in defaults {
        assert_eq!(env_value(&[], name), value, "{name}");
    }
    let sets = [
        "leaderElection.leaseDuration=30s",
        "leaderElection.renewDeadline=20s",
        "leaderElection.retryPeriod=4s",
    ];
    for (name, value) in [
        ("LEASE_DURATION", "30s"),
        ("RENEW_DEADLINE", "20s"),
        ("RETRY_PERIOD", "4s"),
    ] {
        assert_eq!(env_value(&sets, name), value, "{name}");
    }
}

/// Drift repair is on unless the chart value turns it off for every config.
#[test]
fn drift_repair_is_on_unless_the_value_turns_it_off() {
    assert_eq!(env_value(&[], "DRIFT_REPAIR"), "true");
    assert_eq!(env_value(&["driftRepair=false"], "DRIFT_REPAIR"), "false");
}

/// The runtime's worker threads are a chart value, the binary's default
/// unless set.
#[test]
fn the_worker_threads_are_a_value_defaulting_to_the_binarys() {
    use clap::Parser;
    let defaults = vrouter_operator::cli::Args::try_parse_from(["vrouter-operator"]).unwrap();
    assert_eq!(env_value(&[], "WORKER_THREADS"), defaults.worker_threads.to_string());
    assert_eq!(env_value(&["workerThreads=3"], "WORKER_THREADS"), "3");
}

/// Every controller's concurrency is a chart value; the chart's defaults
/// are the binary's own, so an install without values runs as the flags'
/// documentation says.
#[test]
fn each_controllers_concurrency_is_a_value_defaulting_to_the_binarys() {
    let defaults = vrouter_operator::runtime::context::Concurrency::default();
    let cases = [
        ("configs", "CONFIG_CONCURRENCY", defaults.configs),
        ("statuses", "STATUS_CONCURRENCY", defaults.statuses),
        ("targets", "TARGET_CONCURRENCY", defaults.targets),
        ("bindings", "BINDING_CONCURRENCY", defaults.bindings),
        ("clusters", "CLUSTER_CONCURRENCY", defaults.clusters),
        ("clusterSweep", "CLUSTER_SWEEP_CONCURRENCY", defaults.cluster_sweep),
    ];
    for (value, env, default) in cases {
        assert_eq!(env_value(&[], env), default.to_string(), "{value}");
        let set = format!("concurrency.{value}=3");
        assert_eq!(env_value(&[&set], env), "3", "{value}");
    }
}

#[tokio::test]
async fn the_plain_manifests_are_accepted_too() {
    let env = TestEnv::shared().await;
    // The manifests name their namespace; it is created for real (dry-run
    // objects in a namespace that does not exist are refused).
    let namespace = plain_manifest("namespace.yaml");
    assert_eq!(kinds(&namespace), ["Namespace"]);
    let name = namespace[0]["metadata"]["name"].as_str().unwrap();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(env.client());
    if namespaces.get_opt(name).await.unwrap().is_none() {
        namespaces
            .create(
                &Default::default(),
                &serde_json::from_value(namespace[0].clone()).unwrap(),
            )
            .await
            .unwrap();
    }
    let objects: Vec<Value> = [
        "rbac.yaml",
        "metrics-rbac.yaml",
        "secret-policy.yaml",
        "deployment.yaml",
        "webhook.yaml",
    ]
    .iter()
    .flat_map(|f| plain_manifest(f))
    .collect();
    assert!(objects.len() >= 8, "{:?}", kinds(&objects));
    dry_run(&env.client(), &objects).await;
}
