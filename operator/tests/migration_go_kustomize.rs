//! The move from the Go vrouter-operator installed the way its README's
//! kustomize path does (`kubectl apply -k config/default` of
//! `shared/peers/vrouter-operator-go`: namespace `vrouter-operator-system`,
//! names prefixed `vrouter-operator-`, its webhooks and cert-manager
//! Certificate), following docs/migrating-from-go.md section 2 command by
//! command on a real API server, with real helm installing this chart.
//!
//! The harness runs no pods, so each Deployment's pod is a process: the
//! real Go binary with its Deployment's own args and its ServiceAccount's
//! token, and this operator's binary with the chart's ServiceAccount's
//! token. What the cluster would do around them is done by the test: the
//! webhook configurations reach each webhook server at a loopback URL with
//! the harness CA (the Service routing and cert-manager's CA injection), and
//! deleting the Go Deployment stops the Go process with SIGTERM (the
//! kubelet). The routers are agents of the real vrouter-daemon; each one's
//! stub `vbash` log is its record of the scripts it ran.

mod common;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use vrouter_api::VRouterStatus;
use vrouter_test_apiserver::{Options, TestEnv};
use vrouter_test_peers::daemon::Daemon;

use common::go_migration::{
    binding_ready, convert_and_apply, kubectl, lease_holder, repository_root, run_guide_step, runs,
};
use common::go_operator::{self, LEASE, WEBHOOK_PORT};
use common::go_takeover::{
    Site, all_applied, apply_as_go_user, assert_same_objects, generations, inventory, last_run_sets_name_server,
    route_webhooks, start_go_pod, start_routers, token_of,
};
use common::operator_process::OperatorProcess;
use common::shipped_rbac::documents;
use common::wait_for;

/// The namespace of the Go operator's kustomize install.
const SYSTEM: &str = "vrouter-operator-system";
/// The Service the Go operator's webhook configurations name.
const GO_WEBHOOK_SERVICE: &str = "vrouter-operator-webhook-service";

/// This operator's binary as the pod of the Deployment the chart
/// installed (guide step 2), with the chart's ServiceAccount, its webhook
/// reached as the chart registers it.
async fn start_our_pod(env: &TestEnv) -> OperatorProcess {
    let deployment = Api::<Deployment>::namespaced(env.client(), SYSTEM)
        .get("vrouter-operator")
        .await
        .unwrap();
    let account = deployment.spec.template.spec.unwrap().service_account_name.unwrap();
    let token = token_of(env, SYSTEM, &account).await;
    let args = [
        "--leader-elect=true",
        "--identity=rust-replica",
        &format!("--lease-name={LEASE}"),
        &format!("--lease-namespace={SYSTEM}"),
    ];
    let mut ours = OperatorProcess::start(env, &token, &args);
    ours.wait_ready(Duration::from_secs(60)).await;
    route_webhooks(env, "vrouter-operator-webhook", ours.webhook.port()).await;
    ours
}

/// Every object of the Go kustomize install that the guide does not keep
/// (CRDs, the namespace, the roles people may be bound to, the ClusterRole
/// handed to Helm) and that is still there.
fn go_leftovers(env: &TestEnv, kustomize: &Path) -> Vec<String> {
    let objects = documents(&kubectl(env, &["kustomize", kustomize.to_str().unwrap()]));
    let kept = |kind: &str, name: &str| {
        matches!(kind, "CustomResourceDefinition" | "Namespace")
            || (kind == "ClusterRole"
                && (name == "vrouter-operator-metrics-reader"
                    || ["-admin-role", "-editor-role", "-viewer-role"]
                        .iter()
                        .any(|s| name.ends_with(s))))
    };
    let mut left = Vec::new();
    for object in &objects {
        let (kind, name) = (
            object["kind"].as_str().unwrap(),
            object["metadata"]["name"].as_str().unwrap(),
        );
        if kept(kind, name) {
            continue;
        }
        let mut args = vec!["get", kind, name, "--ignore-not-found", "-o", "name"];
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            args.extend(["-n", namespace]);
        }
        if !kubectl(env, &args).trim().is_empty() {
            left.push(format!("{kind}/{name}"));
        }
    }
    assert!(objects.len() > 20, "the kustomize output: {objects:?}");
    left
}

/// Moving from the Go kustomize install: every CRD and custom
/// resource survives the guide's steps (same uids), no router applies the
/// Go operator's configs again, and a later change is applied once, by this
/// operator.
#[tokio::test]
async fn the_go_kustomize_install_moves_to_this_operator_by_the_guide_losing_and_reapplying_nothing() {
    let env = TestEnv::start_with(Options {
        without_crds: true,
        ..Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("cannot start the test API server: {e}"));
    let dir = tempfile::tempdir().unwrap();
    // cert-manager (its CRDs) and KubeVirt's VMI CRD, which the Go
    // operator's target controller watches, are in the cluster beforehand.
    let cert_manager = repository_root().join("testdata/helm/cert-manager-crds.yaml");
    kubectl(&env, &["apply", "-f", cert_manager.to_str().unwrap()]);
    kubectl(&env, &["wait", "--for=condition=Established", "crd", "--all"]);
    common::install_vmi_crd(&env.client()).await;

    // The Go operator, installed by its README's kustomize path.
    let kustomize = go_operator::source().join("config/default");
    kubectl(&env, &["apply", "-k", kustomize.to_str().unwrap()]);
    route_webhooks(&env, GO_WEBHOOK_SERVICE, WEBHOOK_PORT).await;
    let mut go = start_go_pod(&env, SYSTEM, dir.path()).await;

    // Sites in two namespaces, applied by the Go operator.
    let daemon = Daemon::start();
    let sites = Site::two_namespaces(&env, dir.path(), &daemon).await;
    let agents = start_routers(&daemon, &sites).await;
    for site in &sites {
        site.write(&daemon, "192.0.2.53");
        apply_as_go_user(&env, site).await;
    }
    for site in &sites {
        all_applied(site, &go.log()).await;
        wait_for("the Go operator's binding Ready", Duration::from_secs(60), || async {
            binding_ready(&site.ns).await.filter(|(status, _)| status == "True")
        })
        .await;
    }
    // The Go operator applied each router; now and then it dispatches one
    // config's script twice (two reconciles in the same second), so what
    // counts is what it ran, each router at least once.
    let go_runs = runs(&agents);
    assert!(
        go_runs.iter().all(|n| *n >= 1),
        "a router the Go operator did not apply: {go_runs:?}"
    );
    let before = inventory(&env);
    assert_eq!(
        before
            .keys()
            .filter(|k| k.starts_with("CustomResourceDefinition/"))
            .count(),
        6,
        "{before:?}"
    );
    let applied_generations = generations(&sites).await;
    let leases = Api::<Lease>::namespaced(env.client(), SYSTEM);
    let go_holder = lease_holder(&leases, LEASE)
        .await
        .expect("the Go operator holds its Lease");

    // Guide step 1.
    run_guide_step(&env, 1, dir.path());
    // Guide step 2: installed beside the Go operator, this one waits (its
    // pod started once the chart is installed).
    let outputs = run_guide_step(&env, 2, dir.path());
    let ours = start_our_pod(&env).await;
    wait_for(
        "this operator to wait for the Go Lease",
        Duration::from_secs(60),
        || async {
            ours.log()
                .contains("waiting for the Lease held by another replica")
                .then_some(())
        },
    )
    .await;
    let lease = outputs.last().unwrap();
    assert!(lease.contains(&format!("holderIdentity: {go_holder}")), "{lease}");
    assert_eq!(lease_holder(&leases, LEASE).await, Some(go_holder));
    assert_eq!(
        runs(&agents),
        go_runs,
        "a router applied again while the Go operator leads"
    );

    // Guide step 3: the Go Deployment and its webhooks deleted as the guide
    // names them; the kubelet stops the pod.
    run_guide_step(&env, 3, dir.path());
    go.terminate();
    wait_for("this operator to take the Lease", Duration::from_secs(90), || async {
        (lease_holder(&leases, LEASE).await.as_deref() == Some("rust-replica")).then_some(())
    })
    .await;

    // Guide step 4: the converted templates, through this operator's
    // webhook only (a Go webhook left registered would refuse them: its
    // server is gone).
    for site in &sites {
        convert_and_apply(&env, &site.ns, &site.manifest);
    }

    // Guide step 5: the configs settle without being applied again.
    run_guide_step(&env, 5, dir.path());
    for site in &sites {
        wait_for(
            "the binding rendered by this operator",
            Duration::from_secs(90),
            || async { binding_ready(&site.ns).await.filter(|(status, _)| status == "True") },
        )
        .await;
        let statuses = site.ns.api::<VRouterStatus>();
        for name in site.configs() {
            wait_for(&format!("{name}'s VRouterStatus"), Duration::from_secs(90), || async {
                statuses.get_opt(&name).await.ok()?
            })
            .await;
        }
    }
    assert_eq!(
        generations(&sites).await,
        applied_generations,
        "the rendering changed a config"
    );
    assert_eq!(runs(&agents), go_runs, "a router applied again after the takeover");

    // Guide step 6: the rest of the Go install goes, every object of it the
    // guide does not keep; nothing of the API with it.
    run_guide_step(&env, 6, dir.path());
    assert_eq!(
        go_leftovers(&env, &kustomize),
        Vec::<String>::new(),
        "left of the Go install"
    );
    assert_same_objects(&before, &inventory(&env));

    // A later change: applied once per router, by this operator.
    for site in &sites {
        site.write(&daemon, "192.0.2.54");
        convert_and_apply(&env, &site.ns, &site.manifest);
    }
    let once_more: Vec<usize> = go_runs.iter().map(|n| n + 1).collect();
    wait_for("each router to apply the change", Duration::from_secs(120), || async {
        (runs(&agents) == once_more).then_some(())
    })
    .await;
    for site in &sites {
        all_applied(site, &ours.log()).await;
    }
    last_run_sets_name_server(&agents, "192.0.2.54");
    // The configs settle: no second apply of the change.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runs(&agents), once_more);
}
