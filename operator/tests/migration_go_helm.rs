//! The move from the Go vrouter-operator installed the way its README
//! recommends, by Helm (release `vrouter-operator` in `vrouter-system`, the
//! chart of `shared/peers/vrouter-operator-go`), following the part of
//! docs/migrating-from-go.md section 2 on that release command by command,
//! with a real `helm` on a real API server.
//!
//! The harness runs no pods, so each Deployment's pod is a process: the real
//! Go binary with the args and ServiceAccount of the Deployment the Go chart
//! rendered, and this operator's binary with the environment and
//! ServiceAccount of the Deployment this chart rendered. What the cluster
//! would do around them is done by the test: the webhook configurations
//! reach each webhook server at a loopback URL with the harness CA, and the
//! Go Deployment deleted by the upgrade stops the Go process with SIGTERM
//! (the kubelet). The routers are agents of the real vrouter-daemon; each
//! one's stub `vbash` log is its record of the scripts it ran.

mod common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use vrouter_api::VRouterStatus;
use vrouter_test_apiserver::{Options, TestEnv};
use vrouter_test_peers::daemon::Daemon;

use common::go_migration::{
    binding_ready, convert_and_apply, helm, helm_path_commands, kubectl, lease_holder, repository_root, run_commands,
    runs,
};
use common::go_operator::{self, LEASE, WEBHOOK_PORT};
use common::go_takeover::{
    OUR_POD, Site, all_applied, apply_as_go_user, assert_same_objects, generations, inventory,
    last_run_sets_name_server, route_webhooks, start_chart_pod, start_go_pod, start_routers,
};
use common::wait_for;

/// The Go operator's README install: this release in this namespace.
const RELEASE: &str = "vrouter-operator";
const SYSTEM: &str = "vrouter-system";
/// The Service the Go chart's webhook configurations name.
const GO_WEBHOOK_SERVICE: &str = "vrouter-operator-webhook-service";
/// The Go chart's Deployment.
const GO_DEPLOYMENT: &str = "vrouter-operator-controller-manager";

/// Moving from the Go Helm release: `helm upgrade` of the Go
/// release to this chart, as the guide says, keeps every CRD and custom
/// resource (same uids); no router applies the Go operator's configs again
/// once this operator has taken over; a later change is applied once per
/// router, by this operator.
#[tokio::test]
async fn the_go_helm_release_upgraded_to_this_chart_by_the_guide_loses_and_reapplies_nothing() {
    let env = TestEnv::start_with(Options {
        without_crds: true,
        ..Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("cannot start the test API server: {e}"));
    let dir = tempfile::tempdir().unwrap();
    // cert-manager's CRDs (the Go chart's Certificates and Issuer) and
    // KubeVirt's VMI CRD (which the Go operator's target controller
    // watches) are in the cluster beforehand.
    let cert_manager = repository_root().join("testdata/helm/cert-manager-crds.yaml");
    kubectl(&env, &["apply", "-f", cert_manager.to_str().unwrap()]);
    kubectl(&env, &["wait", "--for=condition=Established", "crd", "--all"]);
    common::install_vmi_crd(&env.client()).await;

    // The Go operator, installed by its README's Helm path.
    let go_chart = go_operator::source().join("charts/vrouter-operator");
    let go_chart = go_chart.to_str().unwrap();
    helm(
        &env,
        &["install", RELEASE, go_chart, "-n", SYSTEM, "--create-namespace"],
        dir.path(),
    );
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
    // What the Go operator ran: each router at least once (now and then it
    // dispatches a new config's script twice within a second).
    let go_runs = runs(&agents);
    assert!(
        go_runs.iter().all(|n| *n >= 1),
        "a router the Go operator did not apply: {go_runs:?}"
    );
    let before = inventory(&env);
    let crds = before
        .keys()
        .filter(|k| k.starts_with("CustomResourceDefinition/"))
        .count();
    assert_eq!(crds, 6, "{before:?}");
    let applied_generations = generations(&sites).await;
    let leases = Api::<Lease>::namespaced(env.client(), SYSTEM);
    let go_holder = lease_holder(&leases, LEASE)
        .await
        .expect("the Go operator holds its Lease");

    // The guide: the templates are converted (their files; they are applied
    // once the Go webhooks are gone), then the release is upgraded in place.
    let commands = helm_path_commands();
    let (upgrade, cleanup) = commands.split_first().unwrap();
    assert_eq!(
        upgrade.join(" "),
        format!("helm upgrade {RELEASE} deploy/helm/vrouter-operator -n {SYSTEM}"),
        "the guide's first command"
    );
    run_commands(&env, std::slice::from_ref(upgrade), dir.path());
    assert_same_objects(&before, &inventory(&env));

    // Helm deleted the Go Deployment: the kubelet stops its pod, and starts
    // the pod of this chart's Deployment.
    let deployments = Api::<Deployment>::namespaced(env.client(), SYSTEM);
    assert!(
        deployments.get_opt(GO_DEPLOYMENT).await.unwrap().is_none(),
        "the upgrade left the Go Deployment"
    );
    go.terminate();
    let ours = start_chart_pod(&env, SYSTEM).await;
    wait_for("this operator to take the Lease", Duration::from_secs(90), || async {
        (lease_holder(&leases, LEASE).await.as_deref() == Some(OUR_POD)).then_some(())
    })
    .await;
    assert_ne!(go_holder, OUR_POD);

    // Step 4: the converted templates, through this operator's webhook.
    for site in &sites {
        convert_and_apply(&env, &site.ns, &site.manifest);
    }
    // Step 5: the configs settle without being applied again.
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

    // The rest of the guide's commands (the Secrets cert-manager made).
    run_commands(&env, cleanup, dir.path());
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
