//! A serial rollout applied by the operator's pods through the real
//! vrouter-daemon (its server on the test's loopback, reached from the pods
//! at an address inside the node's namespace), with the leader's pod
//! deleted between the two routers: the other replica takes over and
//! finishes the rollout, and each router ran its config once.

use kube::ResourceExt;
use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};

use super::*;

const BINDING: &str = "edge";
const ROUTERS: [&str; 2] = ["router-a", "router-b"];

/// The daemon's server and one agent per router, the server reachable
/// from the pods at the returned address.
pub async fn daemon_site(node: &mut TestNode) -> (Daemon, Vec<Agent>, String) {
    let daemon = Daemon::start();
    let port: u16 = daemon
        .address()
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("the daemon's control address has a port");
    let address = node.expose(port).expect("the daemon exposed to the pods");
    let mut agents = Vec::new();
    for router in ROUTERS {
        agents.push(daemon.start_agent(router, AgentFlags::default()).await);
    }
    (daemon, agents, address)
}

pub async fn create(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", object.metadata.name));
}

pub fn api_of(ns: &TestNamespace, kind: &str, plural: &str) -> Api<DynamicObject> {
    api_in(ns.client(), ns.name(), kind, plural)
}

/// One of the operator's kinds in `namespace`, untyped (as a user's manifest is).
pub fn api_in(client: kube::Client, namespace: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("vrouter.kojuro.date", "v1", kind);
    Api::namespaced_with(client, namespace, &ApiResource::from_gvk_with_plural(&gvk, plural))
}

/// How long the rollout soaks after a router is Applied: the leader is
/// deleted within it (a Lease renewal, about 2 s, after the first router is
/// seen Applied), so no apply is in flight when it stops; the test checks
/// the second config is still unwritten just before the deletion.
const SOAK: &str = "20s";

/// A template, one daemon target per router and a binding that rolls out
/// one router at a time, soaking [`SOAK`] after each is Applied.
async fn declare_the_rollout(ns: &TestNamespace, address: &str) {
    // The grant a cluster administrator gives the namespace (docs/security.md).
    let grant =
        json!({"metadata": {"annotations": {"vrouter.kojuro.date/allowed-daemon-agents": format!("{address}/*")}}});
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client())
        .patch(
            ns.name(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(grant),
        )
        .await
        .expect("granting the namespace the daemon's agents");
    create(
        &api_of(ns, "VRouterTemplate", "vroutertemplates"),
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTemplate",
               "metadata": {"name": "host"}, "spec": {"commands": "set system host-name {{ hostName }}\n"}}),
    )
    .await;
    let targets = api_of(ns, "VRouterTarget", "vroutertargets");
    for router in ROUTERS {
        create(
            &targets,
            json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
                   "metadata": {"name": router},
                   "spec": {"provider": {"type": "vrouter-daemon",
                                         "daemon": {"address": address, "agentID": router, "timeoutSeconds": 60}},
                            "params": {"hostName": router}}}),
        )
        .await;
    }
    create(
        &api_of(ns, "VRouterBinding", "vrouterbindings"),
        json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterBinding",
               "metadata": {"name": BINDING},
               "spec": {"templateRefs": [{"name": "host"}],
                        "targetRefs": ROUTERS.iter().map(|r| json!({"name": r})).collect::<Vec<_>>(),
                        "rollout": {"mode": "WaitForApplied", "pollInterval": "1s", "waitAfterApplied": SOAK}}}),
    )
    .await;
}

pub fn condition_is_true(object: &DynamicObject, kind: &str) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// The binding's configs (by its label), by the router each is for.
async fn configs_by_router(ns: &TestNamespace) -> Option<Vec<(String, DynamicObject)>> {
    let list = api_of(ns, "VRouterConfig", "vrouterconfigs")
        .list(&ListParams::default().labels(&format!("vrouter.kojuro.date/binding={BINDING}")))
        .await
        .ok()?;
    Some(
        list.items
            .into_iter()
            .filter_map(|c| Some((c.data["spec"]["targetRef"]["name"].as_str()?.to_owned(), c)))
            .collect(),
    )
}

/// The rollout declared, the first router Applied and the second not yet
/// written (the soak), the leader's pod deleted; the other replica leads
/// and the binding becomes Ready (what `kubectl wait
/// --for=condition=Ready` waits for); each router saw one commit.
pub async fn a_rollout_survives_its_leader(
    node: &TestNode,
    ns: &TestNamespace,
    pods: &[Pod],
    address: &str,
    agents: &[Agent],
) -> Vec<Pod> {
    declare_the_rollout(ns, address).await;
    let first_applied = node
        .until("the first router's config Applied", || async {
            let configs = configs_by_router(ns).await?;
            let applied: Vec<&String> = configs
                .iter()
                .filter(|(_, c)| condition_is_true(c, "Applied"))
                .map(|(r, _)| r)
                .collect();
            (applied.len() == 1).then(|| (applied[0].clone(), configs.len()))
        })
        .await;
    assert_eq!(
        first_applied.1, 1,
        "the second router's config is written only after the soak"
    );
    let names: Vec<String> = pods.iter().map(pod_name).collect();
    let seen_applied = Instant::now();
    let leader = renewing_holder(node, ns, &names).await;
    let written = configs_by_router(ns).await.expect("the configs");
    assert_eq!(
        written.len(),
        1,
        "the soak ended before the leader could be deleted ({:.1} s after the first router was seen Applied): \
         {SOAK} is too short here",
        seen_applied.elapsed().as_secs_f64(),
    );
    let pods = a_deleted_leader_hands_over(node, ns, &leader).await;
    let bindings = api_of(ns, "VRouterBinding", "vrouterbindings");
    node.until("the binding Ready", || async {
        let binding = bindings.get(BINDING).await.ok()?;
        condition_is_true(&binding, "Ready").then_some(())
    })
    .await;
    let configs = configs_by_router(ns).await.expect("the configs");
    assert_eq!(configs.len(), ROUTERS.len());
    assert!(
        configs.iter().all(|(_, c)| condition_is_true(c, "Applied")),
        "{configs:?}"
    );
    for (router, agent) in ROUTERS.iter().zip(agents) {
        let calls = agent.sandbox().calls();
        let commits = calls
            .iter()
            .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
            .count();
        assert_eq!(commits, 1, "{router} committed once: {calls:?}");
        assert!(
            calls.contains(&format!("set system host-name {router}")),
            "{router}: {calls:?}"
        );
    }
    pods
}

/// The webhook Service without endpoints while the operator runs (its pods
/// serve the webhooks, so this is how an outage of the webhooks alone
/// looks to the API server). The operator's status writes, which the
/// webhooks do not intercept, go through: a reboot stamped on router-b's
/// target is applied again and reported Applied during the outage. Its
/// writes that they do intercept are refused and retried: router-a's
/// config, deleted during the outage, keeps its finalizer until the
/// webhooks return; then it is gone, the binding writes it again, and it
/// is applied once more. Each router ran exactly one more commit.
pub async fn own_writes_while_no_webhook_answers(node: &TestNode, ns: &TestNamespace, agents: &[Agent]) {
    let commits_before: Vec<usize> = agents.iter().map(commits_of).collect();
    let configs = configs_by_router(ns).await.expect("the configs");
    let config_of = |router: &str| {
        configs
            .iter()
            .find(|(r, _)| r == router)
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("{router}'s config in {configs:?}"))
    };
    let (deleted, rebooted) = (config_of(ROUTERS[0]), config_of(ROUTERS[1]));
    webhook_endpoints(ns, false).await;
    let probe = api_of(ns, "VRouterTarget", "vroutertargets");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let outage_target = || {
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"name": "during-outage"},
            "spec": {"provider": {"type": "kubevirt", "kubevirt": {"name": "vm-a"}}}}))
        .expect("a valid object")
    };
    // The API server looks the Service's endpoints up only when it opens a
    // connection, and reuses one it has open: the webhook server closes a
    // connection idle for 10 s, so each probe comes after that (one
    // admitted would keep the connection open).
    let mut probes = 0;
    loop {
        tokio::time::sleep(WEBHOOK_IDLE_CLOSE).await;
        match probe.create(&dry_run, &outage_target()).await {
            Err(kube::Error::Api(status)) if refused_for_no_webhook(&status) => break,
            answer => {
                probes += 1;
                assert!(probes < 8, "the webhooks still answer without endpoints: {answer:?}");
            }
        }
    }

    let configs_api = api_of(ns, "VRouterConfig", "vrouterconfigs");
    configs_api
        .delete(&deleted.name_any(), &DeleteParams::default())
        .await
        .expect("a config deleted (deletes are not sent to the webhooks)");
    let applied_before = rebooted.data["status"]["lastAppliedTime"].clone();
    let now = k8s_openapi::jiff::Timestamp::now();
    api_of(ns, "VRouterTarget", "vroutertargets")
        .patch_status(
            ROUTERS[1],
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"lastRebootTime": now.to_string()}})),
        )
        .await
        .expect("a reboot stamped on router-b's target");
    node.until("router-b applied again during the outage", || async {
        let config = configs_api.get(&rebooted.name_any()).await.ok()?;
        let applied = &config.data["status"]["lastAppliedTime"];
        (condition_is_true(&config, "Applied") && *applied != applied_before).then_some(())
    })
    .await;
    assert_eq!(
        commits_of(&agents[1]),
        commits_before[1] + 1,
        "router-b re-applied once"
    );
    let terminating = configs_api
        .get(&deleted.name_any())
        .await
        .expect("the deleted config waits for its finalizer's removal, an update the webhooks must admit");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    match probe.create(&dry_run, &outage_target()).await {
        Err(kube::Error::Api(status)) if refused_for_no_webhook(&status) => {}
        other => panic!("the outage lasted through router-b's apply: {other:?}"),
    }

    webhook_endpoints(ns, true).await;
    let deleted_uid = deleted.uid().expect("a uid");
    node.until("router-a's config written again and Applied", || async {
        let config = configs_api.get(&deleted.name_any()).await.ok()?;
        (config.uid().as_deref() != Some(deleted_uid.as_str()) && condition_is_true(&config, "Applied")).then_some(())
    })
    .await;
    let bindings = api_of(ns, "VRouterBinding", "vrouterbindings");
    node.until("the binding Ready after the outage", || async {
        condition_is_true(&bindings.get(BINDING).await.ok()?, "Ready").then_some(())
    })
    .await;
    let commits: Vec<usize> = agents.iter().map(commits_of).collect();
    let want: Vec<usize> = commits_before.iter().map(|c| c + 1).collect();
    assert_eq!(commits, want, "one more commit on each router");
}

fn commits_of(agent: &Agent) -> usize {
    agent
        .sandbox()
        .calls()
        .iter()
        .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
        .count()
}

/// Longer than the webhook server keeps an idle connection open
/// (`operator/src/server/webhooks/server.rs`).
const WEBHOOK_IDLE_CLOSE: Duration = Duration::from_secs(11);

/// Takes the chart's webhook Service's endpoints away (`false`), by a
/// selector label no pod has, or gives them back.
async fn webhook_endpoints(ns: &TestNamespace, serving: bool) {
    let outage = if serving { Value::Null } else { json!("on") };
    ns.api::<Service>()
        .patch(
            &format!("{RELEASE}-webhook"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"vrouter.test/webhook-outage": outage}}})),
        )
        .await
        .expect("the webhook Service patched");
}
