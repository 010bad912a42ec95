//! The move from the real Go vrouter-operator (docs/migrating-from-go.md,
//! section 2) on a real API server: the Go binary built from
//! `shared/peers/vrouter-operator-go` runs with its own CRDs, holds its Lease
//! and applies through the real vrouter-daemon to the routers' agents; this
//! operator, installed beside it as the guide says, applies nothing while it
//! runs, not even while the Go operator applies a change; the Go operator is SIGKILLed and this operator takes over. The
//! routers' own record of the scripts they ran (the stub `vbash` log of each
//! agent) shows every router got each config once.

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::core::ObjectMeta;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterStatus, VRouterTemplate};
use vrouter_test_apiserver::{Options, TestEnv, TestNamespace};
use vrouter_test_peers::daemon::{AgentFlags, Daemon};

use common::go_migration::{self as migration, binding_ready, convert_and_apply, kubectl, repository_root, runs};
use common::go_operator::{self, GoOperator, LEASE};
use common::replica_process::ReplicaProcess;
use common::{final_phase, wait_for};

/// The Go operator's writes are named after its binary (client-go's user
/// agent), as `cargo xtask testenv` names it.
const GO_MANAGER: &str = "vrouter-operator-go";
const ROUTERS: [&str; 2] = ["edge-1", "edge-2"];

fn go_site(daemon: &Daemon, dns: &str) -> String {
    migration::go_site(daemon, &ROUTERS, 11, dns)
}

async fn lease_holder(ns: &TestNamespace) -> Option<String> {
    migration::lease_holder(&ns.api::<Lease>(), LEASE).await
}

/// Every field manager that wrote `meta`'s object.
fn managers(meta: &ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// Asserts that only the Go operator and kubectl wrote the site's configs
/// and binding (the API server names a writer after its user agent, so any
/// other writer shows), and that no VRouterStatus (which this operator keeps
/// per config) exists.
async fn nothing_written_by_ours(ns: &TestNamespace) {
    let lp = ListParams::default();
    let mut written: Vec<String> = Vec::new();
    for config in ns.api::<VRouterConfig>().list(&lp).await.unwrap() {
        written.extend(managers(&config.metadata));
    }
    for binding in ns.api::<VRouterBinding>().list(&lp).await.unwrap() {
        written.extend(managers(&binding.metadata));
    }
    assert!(
        written.iter().any(|m| m == GO_MANAGER),
        "the Go operator's writes are not named {GO_MANAGER}: {written:?}"
    );
    assert!(
        written.iter().all(|m| m == GO_MANAGER || m.starts_with("kubectl")),
        "written by someone else than the Go operator and kubectl: {written:?}"
    );
    let statuses = ns.api::<VRouterStatus>().list(&lp).await.unwrap();
    assert!(statuses.items.is_empty(), "{:?}", statuses.items);
}

/// Waits until the Go operator reports every config Applied for
/// `generation` (its condition's observedGeneration).
async fn applied_as_of_generation(ns: &TestNamespace, generation: i64) {
    let configs = ns.api::<VRouterConfig>();
    for router in ROUTERS {
        let name = format!("site-a.{router}");
        wait_for(
            &format!("{name} Applied at generation {generation}"),
            Duration::from_secs(60),
            || async {
                let config = configs.get(&name).await.ok()?;
                let status = config.status?;
                let applied = status.conditions.iter().find(|c| c.type_ == "Applied")?;
                (status.phase == Phase::Applied
                    && applied.status == "True"
                    && applied.observed_generation == Some(generation)
                    && config.metadata.generation == Some(generation))
                .then_some(())
            },
        )
        .await;
    }
}

async fn generations(ns: &TestNamespace) -> Vec<Option<i64>> {
    let configs = ns.api::<VRouterConfig>();
    let mut out = Vec::new();
    for router in ROUTERS {
        out.push(
            configs
                .get(&format!("site-a.{router}"))
                .await
                .unwrap()
                .metadata
                .generation,
        );
    }
    out
}

/// Moving from the Go operator: the real Go operator holds the Lease and
/// applies; while it runs this operator applies nothing; after it stops this
/// operator takes over with no router applied twice; a later change is
/// applied once, by this operator; the Go operator started again waits.
#[tokio::test]
async fn the_real_go_operator_applies_then_this_operator_takes_over_without_applying_again() {
    let env = TestEnv::start_with(Options {
        without_crds: true,
        ..Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("cannot start the test API server: {e}"));
    // The Go operator's CRDs, as `make install` puts them; its target
    // controller also watches KubeVirt's VMIs.
    let go_crds = go_operator::source().join("config/crd/bases");
    kubectl(&env, &["apply", "-f", go_crds.to_str().unwrap()]);
    common::install_vmi_crd(&env.client()).await;
    let ns = env.namespace("go-operator").await;
    let daemon = Daemon::start();
    migration::grant_daemon(&env, &ns, &daemon);
    let mut agents = Vec::new();
    for router in ROUTERS {
        agents.push(daemon.start_agent(router, AgentFlags::default()).await);
    }

    // The Go operator applies the site.
    let mut go = GoOperator::start(&env, ns.name());
    go.wait_ready(Duration::from_secs(120)).await;
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site-a.yaml");
    std::fs::write(&site, go_site(&daemon, "192.0.2.53")).unwrap();
    kubectl(&env, &["apply", "-n", ns.name(), "-f", site.to_str().unwrap()]);
    let configs = ns.api::<VRouterConfig>();
    for router in ROUTERS {
        let (phase, condition, message) =
            final_phase(&configs, &format!("site-a.{router}"), Duration::from_secs(120)).await;
        assert_eq!(phase, Phase::Applied, "{message}\n{}", go.log());
        assert_eq!(condition.map(|c| c.0).as_deref(), Some("True"));
    }
    // The Go operator now and then runs a new config twice within a second
    // (its own behaviour, not under test here): what follows counts from
    // what it actually ran.
    let first = runs(&agents);
    assert!(
        first.iter().all(|&n| n >= 1),
        "the Go operator applied each router: {first:?}"
    );
    // The Go operator's binding settles too before it stops, so the next
    // Ready=False is this operator's.
    wait_for(
        "the Go operator's binding to be Ready",
        Duration::from_secs(60),
        || async { binding_ready(&ns).await.filter(|(status, _)| status == "True") },
    )
    .await;
    let calls = agents[0].sandbox().calls();
    assert!(calls.contains(&"set system host-name edge-1".to_owned()), "{calls:?}");
    let go_holder = lease_holder(&ns).await.expect("the Go operator holds its Lease");

    // Guide step 1: this operator's CRDs over the Go operator's.
    kubectl(
        &env,
        &["apply", "-f", repository_root().join("deploy/crds").to_str().unwrap()],
    );
    // Guide step 2: this operator beside the running Go operator.
    let ours = ReplicaProcess::start(&env, "rust-replica", ns.name(), LEASE, &env.apiserver_url(), &[]);
    wait_for(
        "this operator to wait for the Go operator's Lease",
        Duration::from_secs(60),
        || async {
            ours.log()
                .contains("waiting for the Lease held by another replica")
                .then_some(())
        },
    )
    .await;
    // A change while both run: the Go operator applies it, once per router.
    std::fs::write(&site, go_site(&daemon, "192.0.2.55")).unwrap();
    kubectl(&env, &["apply", "-n", ns.name(), "-f", site.to_str().unwrap()]);
    wait_for(
        "the Go operator to apply the change",
        Duration::from_secs(120),
        || async {
            runs(&agents)
                .iter()
                .zip(&first)
                .all(|(now, before)| now > before)
                .then_some(())
        },
    )
    .await;
    applied_as_of_generation(&ns, 2).await;
    // Several of the Go operator's renewals (every 2 s) while ours competes.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(lease_holder(&ns).await.as_deref(), Some(go_holder.as_str()));
    nothing_written_by_ours(&ns).await;
    let go_runs = runs(&agents);
    assert!(
        go_runs.iter().zip(&first).all(|(now, before)| now > before),
        "only the Go operator applied while it leads: {first:?} then {go_runs:?}"
    );
    let once_more: Vec<usize> = go_runs.iter().map(|n| n + 1).collect();
    let applied_generations = generations(&ns).await;

    // Guide step 3: the Go operator stops (a crash: its Lease expires).
    go.kill();
    wait_for("this operator to take the Lease", Duration::from_secs(90), || async {
        (lease_holder(&ns).await.as_deref() == Some("rust-replica")).then_some(())
    })
    .await;
    // Ours leads and renders: the binding's template is still Go syntax,
    // which it reports without changing any config (guide step 4).
    wait_for(
        "this operator to report the Go template",
        Duration::from_secs(90),
        || async {
            binding_ready(&ns)
                .await
                .filter(|(status, message)| status == "False" && message.contains("Go template syntax"))
        },
    )
    .await;
    // Guide section 1 and step 4: the templates converted and applied.
    convert_and_apply(&env, &ns, &site);
    let template = ns.api::<VRouterTemplate>().get("bgp-router").await.unwrap();
    assert!(
        template.spec.commands.contains("{{ hostname }}"),
        "{}",
        template.spec.commands
    );

    // This operator has rendered the converted template for every router
    // (the binding is Ready again) and looked at every config (each has its
    // VRouterStatus), and applied none again: the rendering is the Go
    // operator's, so no config changed.
    wait_for(
        "the binding rendered by this operator",
        Duration::from_secs(90),
        || async { binding_ready(&ns).await.filter(|(status, _)| status == "True") },
    )
    .await;
    let statuses = ns.api::<VRouterStatus>();
    for router in ROUTERS {
        let name = format!("site-a.{router}");
        wait_for(&format!("{name}'s VRouterStatus"), Duration::from_secs(90), || async {
            statuses.get_opt(&name).await.ok()?
        })
        .await;
    }
    assert_eq!(
        generations(&ns).await,
        applied_generations,
        "the rendering changed a config"
    );
    assert_eq!(runs(&agents), go_runs, "a router applied again after the takeover");

    // A later change: applied once per router, by this operator.
    std::fs::write(&site, go_site(&daemon, "192.0.2.54")).unwrap();
    convert_and_apply(&env, &ns, &site);
    wait_for("each router to apply the change", Duration::from_secs(120), || async {
        (runs(&agents) == once_more).then_some(())
    })
    .await;
    for router in ROUTERS {
        let (phase, _, message) = final_phase(&configs, &format!("site-a.{router}"), Duration::from_secs(60)).await;
        assert_eq!(phase, Phase::Applied, "{message}\n{}", ours.log());
    }
    for agent in &agents {
        let calls = agent.sandbox().calls();
        let last_run = &calls[calls.iter().rposition(|c| c == "configure").unwrap()..];
        assert!(
            last_run.contains(&"set system name-server 192.0.2.54".to_owned()),
            "{last_run:?}"
        );
    }
    // The configs settle: no second apply of the change.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runs(&agents), once_more);

    // A Go replica started again (a rollback of the switch, a stale
    // Deployment) waits in turn: this operator renews the Lease in the form
    // client-go's leader election reads.
    drop(go);
    let mut again = GoOperator::start(&env, ns.name());
    again.wait_ready(Duration::from_secs(120)).await;
    wait_for("the Go operator to try its Lease", Duration::from_secs(60), || async {
        again
            .log()
            .to_lowercase()
            .contains("attempting to acquire leader lease")
            .then_some(())
    })
    .await;
    // Longer than the Lease's duration: a record client-go misread as
    // expired would have been taken by now.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        !again.log().to_lowercase().contains("successfully acquired lease"),
        "{}",
        again.log()
    );
    assert_eq!(lease_holder(&ns).await.as_deref(), Some("rust-replica"));
    assert_eq!(runs(&agents), once_more);
}
