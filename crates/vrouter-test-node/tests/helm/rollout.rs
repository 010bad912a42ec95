//! A serial rollout applied by the operator's pods through the real
//! vrouter-daemon (its server on the test's loopback, reached from the pods
//! at an address inside the node's namespace), with the leader's pod
//! deleted between the two routers: the other replica takes over and
//! finishes the rollout, and each router ran its config once.

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
    let gvk = GroupVersionKind::gvk("vrouter.kojuro.date", "v1", kind);
    ns.dynamic_api(&ApiResource::from_gvk_with_plural(&gvk, plural))
}

/// How long the rollout soaks after a router is Applied: the leader is
/// deleted within it (a Lease renewal, about 2 s, after the first router is
/// seen Applied), so no apply is in flight when it stops; the test checks
/// the second config is still unwritten just before the deletion.
const SOAK: &str = "20s";

/// A template, one daemon target per router and a binding that rolls out
/// one router at a time, soaking [`SOAK`] after each is Applied.
async fn declare_the_rollout(ns: &TestNamespace, address: &str) {
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
        let commits = calls.iter().filter(|c| *c == "commit").count();
        assert_eq!(commits, 1, "{router} committed once: {calls:?}");
        assert!(
            calls.contains(&format!("set system host-name {router}")),
            "{router}: {calls:?}"
        );
    }
    pods
}
