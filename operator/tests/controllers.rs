//! The controllers against a real kube-apiserver, with Proxmox targets served
//! by the in-test Proxmox API over real qemu-ga agents whose "vbash" is bash
//! with stub vyatta functions: everything from the binding to the bytes
//! `load` receives in the guest is real.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use vrouter_api::constants::FINALIZER;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterTarget};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestNamespace;
use vrouter_test_peers::daemon::{AgentFlags, Daemon};
use vrouter_test_peers::proxmox::FakeProxmox;

use common::{condition, config_phase, create, final_phase, site, start_controllers, wait_for};

#[tokio::test]
async fn a_binding_over_three_targets_merges_three_layers_and_applies_everywhere() {
    let site = site("ctl-binding", &["r1", "r2", "r3"], Settings::default()).await;
    let ns = &site.ns;
    create::<vrouter_api::VRouterParams>(ns, json!({"metadata": {"name": "site"}, "spec": {"params": {"ntp": "192.0.2.1", "dns": "192.0.2.53", "motd": "site"}}})).await;
    create::<vrouter_api::VRouterParams>(
        ns,
        json!({"metadata": {"name": "region"}, "spec": {"params": {"ntp": "192.0.2.2"}}}),
    )
    .await;
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "base"}, "spec": {
            "config": "system {\n    host-name {{ hostName }}\n}\n",
            "commands": "set system ntp server {{ ntp }}\nset system name-server {{ dns }}\nset system login banner pre-login {{ motd }}\nset protocols bgp system-as {{ asn }}\n",
        }}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {
            "templateRefs": [{"name": "base"}],
            "paramsRefs": [{"name": "site"}, {"name": "region"}],
            "params": {"dns": "198.51.100.53"},
            "targetRefs": [{"name": "r1"}, {"name": "r2"}, {"name": "r3"}],
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    for (i, name) in ["r1", "r2", "r3"].iter().enumerate() {
        let config_name = format!("edge.{name}");
        let (phase, applied, message) = final_phase(&configs, &config_name, Duration::from_secs(60)).await;
        assert_eq!(phase, Phase::Applied, "{config_name}: {message}");
        assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
        let config = configs.get(&config_name).await.unwrap();
        // paramsRefs in order, then the binding, then the target.
        let asn = 4_200_000_000u64 + i as u64;
        assert_eq!(
            config.spec.commands,
            format!(
                "set system ntp server 192.0.2.2\nset system name-server 198.51.100.53\nset system login banner pre-login site\nset protocols bgp system-as {asn}\n"
            )
        );
        // The guest's `load` received exactly the rendered config.
        let loaded = site.routers[*name]
            .sandbox
            .loaded_config()
            .expect("load ran in the guest");
        assert_eq!(String::from_utf8(loaded).unwrap(), config.spec.config);
    }
    let bindings = ns.api::<VRouterBinding>();
    let ready = wait_for("binding Ready", Duration::from_secs(30), || async {
        let b = bindings.get("edge").await.ok()?;
        condition(&b.status?.conditions, "Ready")
    })
    .await;
    assert_eq!(ready, ("True".into(), "ReconcileSucceeded".into()));
}

/// A direct config on router r1 of a fresh site, whose apply must end Failed.
struct FailingApply {
    /// The config's name; the site's namespace is named `ctl-<name>`.
    name: &'static str,
    settings: Settings,
    commands: &'static str,
    /// The reason of the Applied=False condition.
    reason: &'static str,
    /// Text the phase message contains.
    message: Option<&'static str>,
    /// Nothing may run in the guest's vbash.
    nothing_runs: bool,
}

async fn check_failing_apply(case: FailingApply) {
    let name = case.name;
    let site = site(&format!("ctl-{name}"), &["r1"], case.settings).await;
    create::<VRouterConfig>(
        &site.ns,
        json!({"metadata": {"name": name}, "spec": {"targetRef": {"name": "r1"}, "commands": case.commands}}),
    )
    .await;
    let configs = site.ns.api::<VRouterConfig>();
    let (phase, applied, message) = final_phase(&configs, name, Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Failed, "{name}: {message}");
    assert_eq!(applied, Some(("False".into(), case.reason.into())), "{name}: {message}");
    if let Some(part) = case.message {
        assert!(message.contains(part), "{name}: {message}");
    }
    if case.nothing_runs {
        let calls = site.routers["r1"].sandbox.calls();
        assert!(calls.is_empty(), "{name}: nothing ran in the guest's vbash: {calls:?}");
    }
}

#[tokio::test]
async fn a_set_failure_with_exit_zero_is_failed() {
    check_failing_apply(FailingApply {
        name: "marker",
        settings: Settings::default(),
        commands: "set interfaces ethernet eth0 address INVALID\n",
        reason: "ConfigFailed",
        message: Some("Set failed"),
        nothing_runs: false,
    })
    .await;
}

#[tokio::test]
async fn an_apply_that_never_exits_becomes_apply_timeout() {
    check_failing_apply(FailingApply {
        name: "timeout",
        settings: Settings {
            apply_timeout: Duration::from_secs(3),
            ..Settings::default()
        },
        // The guest runs the commands in its shell: this apply outlives the timeout.
        commands: "sleep 30\n",
        reason: "ApplyTimeout",
        message: None,
        nothing_runs: false,
    })
    .await;
}

#[tokio::test]
async fn a_script_that_cannot_be_built_fails_at_once_instead_of_retrying() {
    check_failing_apply(FailingApply {
        name: "nul",
        settings: Settings::default(),
        commands: "set system host-name a\0b\n",
        reason: "ConfigFailed",
        message: Some("NUL byte"),
        nothing_runs: true,
    })
    .await;
}

/// A VRouterTarget of type vrouter-daemon for agent `agent` behind `daemon`.
/// The namespace is granted every agent of that daemon.
async fn daemon_target(ns: &TestNamespace, name: &str, daemon: &Daemon, agent: &str, timeout_seconds: i32) {
    let every_agent = format!("{}/*", daemon.address());
    common::grant_daemon_agents(&ns.client(), ns.name(), Some(&every_agent)).await;
    create::<VRouterTarget>(
        ns,
        json!({"metadata": {"name": name}, "spec": {"provider": {"type": "vrouter-daemon", "daemon": {
            "address": daemon.address(), "agentID": agent, "timeoutSeconds": timeout_seconds,
        }}}}),
    )
    .await;
}

#[tokio::test]
async fn a_binding_applies_through_the_real_vrouter_daemon_server_and_agent() {
    let site = site("ctl-daemon-e2e", &[], Settings::default()).await;
    let ns = &site.ns;
    let daemon = Daemon::start();
    let agent = daemon.start_agent("metal-1", AgentFlags::default()).await;
    daemon_target(ns, "metal-1", &daemon, "metal-1", 60).await;
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "metal"}, "spec": {
            "config": "system {\n    host-name {{ hostName }}\n}\ninterfaces {\n    loopback lo {\n        description {{ site }}\n    }\n}\n",
            "commands": "set system ntp server {{ ntp }}\nset protocols bgp system-as {{ asn }}\n",
        }}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {
            "templateRefs": [{"name": "metal"}],
            "params": {"hostName": "metal-1", "site": "tokyo <east> & more", "ntp": "192.0.2.2", "asn": 64512},
            "targetRefs": [{"name": "metal-1"}],
        }}),
    )
    .await;
    let bindings = ns.api::<VRouterBinding>();
    let ready = wait_for("the binding's Ready condition", Duration::from_secs(60), || async {
        ready_of(&bindings.get("edge").await.ok()?)
    })
    .await;
    assert_eq!(ready.0, "True", "{ready:?}");
    let configs = ns.api::<VRouterConfig>();
    let (phase, applied, message) = final_phase(&configs, "edge.metal-1", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}\nagent log:\n{}", agent.log());
    assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
    let config = configs.get("edge.metal-1").await.unwrap();
    // The real agent's script loaded exactly the rendered config, then ran
    // the rendered commands, committed and saved.
    assert_eq!(
        String::from_utf8(agent.sandbox().loaded_config().expect("load ran on the router")).unwrap(),
        config.spec.config
    );
    // Go's JSON on the way to the agent escapes these; they arrive as written.
    assert!(
        config.spec.config.contains("tokyo <east> & more"),
        "{}",
        config.spec.config
    );
    assert_eq!(
        agent.sandbox().calls(),
        [
            "source /opt/vyatta/etc/functions/script-template",
            "configure",
            "load /dev/stdin",
            "set system ntp server 192.0.2.2",
            "set protocols bgp system-as 64512",
            "commit",
            "save",
        ]
    );
}

#[tokio::test]
async fn a_daemon_apply_that_times_out_fails_at_once_with_its_error() {
    // The operator's own apply timeout is far away: the daemon's 1 s ends it.
    let site = site("ctl-daemon", &[], Settings::default()).await;
    let ns = &site.ns;
    let daemon = Daemon::start();
    let agent = daemon.start_agent("edge-1", AgentFlags::default()).await;
    daemon_target(ns, "d1", &daemon, "edge-1", 1).await;
    // The script outlasts the target's 1 s: it waits for the test.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "d1"}, "spec": {"targetRef": {"name": "d1"}, "commands": format!("{}\nset system host-name d1\n", agent.gate("d1"))}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let (phase, applied, message) = final_phase(&configs, "d1", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Failed);
    assert_eq!(applied, Some(("False".into(), "ApplyTimeout".into())));
    assert_eq!(
        message,
        "apply ended without a result: vrouter-daemon ApplyConfig timed out after 1s"
    );
    // The agent finishes the script anyway; it was dispatched once, not once per poll.
    agent.open_gate("d1");
    wait_for("the script's save on the router", Duration::from_secs(60), || async {
        agent.sandbox().calls().contains(&"save".to_string()).then_some(())
    })
    .await;
    let calls = agent.sandbox().calls();
    assert_eq!(calls.iter().filter(|c| *c == "configure").count(), 1, "{calls:?}");
}

#[tokio::test]
async fn a_daemon_config_without_save_fails_at_once_and_nothing_runs_on_the_router() {
    let site = site("ctl-daemon-nosave", &[], Settings::default()).await;
    let ns = &site.ns;
    let daemon = Daemon::start();
    let agent = daemon.start_agent("edge-3", AgentFlags::default()).await;
    daemon_target(ns, "d3", &daemon, "edge-3", 60).await;
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "d3"}, "spec": {"targetRef": {"name": "d3"}, "save": false, "commands": "set system host-name d3\n"}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let (phase, applied, message) = final_phase(&configs, "d3", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Failed);
    assert_eq!(applied, Some(("False".into(), "ConfigFailed".into())));
    assert!(message.contains("always runs `save`"), "{message}");
    assert_eq!(
        agent.sandbox().calls(),
        Vec::<String>::new(),
        "the agent would have saved"
    );
}

#[tokio::test]
async fn a_daemon_server_killed_mid_apply_is_applied_again_once_it_is_back() {
    let site = site("ctl-daemon-crash", &[], Settings::default()).await;
    let ns = &site.ns;
    let mut daemon = Daemon::start();
    let agent = daemon.start_agent("edge-2", AgentFlags::default()).await;
    daemon_target(ns, "d2", &daemon, "edge-2", 60).await;
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "d2"}, "spec": {"targetRef": {"name": "d2"}, "commands": format!("{}\nset system host-name d2\n", agent.gate("d2"))}}),
    )
    .await;
    wait_for("the first script started", Duration::from_secs(60), || async {
        agent.sandbox().calls().contains(&"configure".to_string()).then_some(())
    })
    .await;
    daemon.kill_server();
    let configs = ns.api::<VRouterConfig>();
    // While the server is down the apply cannot be looked at: it stays
    // Applying, saying why.
    let message = wait_for("the unreachable server noticed", Duration::from_secs(60), || async {
        let (phase, _, message) = config_phase(&configs, "d2").await?;
        (phase == Phase::Applying && message.contains("could not read the apply's result")).then_some(message)
    })
    .await;
    assert!(message.contains("Unavailable"), "{message}");
    agent.open_gate("d2");
    // Whether that apply ran is unknown to the operator: once the server
    // answers, it applies again instead of failing the config.
    daemon.restart_server();
    let (phase, applied, message) = final_phase(&configs, "d2", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
    let calls = agent.sandbox().calls();
    assert_eq!(calls.iter().filter(|c| *c == "save").count(), 2, "{calls:?}");
}

#[tokio::test]
async fn two_configs_for_one_router_apply_one_after_the_other() {
    let site = site("ctl-one-router", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let configs = ns.api::<VRouterConfig>();
    let gate = start_a_gated_apply_on_r1(&site).await;
    create_b_on_r1(ns).await;
    wait_for("b to wait for a", Duration::from_secs(30), || b_waits_for_a(&configs)).await;
    open_gate(&gate);
    assert_both_applied_b_after_a(&site).await;
}

/// Config `a` on r1, whose apply stops between its two commands until the
/// test opens the returned gate (a file in r1's guest): a sleep would let a
/// loaded machine finish `a` before the test looks. Returns once it runs.
async fn start_a_gated_apply_on_r1(site: &common::Site) -> std::path::PathBuf {
    let ns = &site.ns;
    let gate = site.routers["r1"].sandbox.dir().join("gate");
    let commands = format!(
        "set system host-name a\nwhile [ ! -e {} ]; do sleep 0.1; done\nset system domain-name a.example\n",
        gate.display()
    );
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "a"}, "spec": {"targetRef": {"name": "r1"}, "commands": commands}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("a's apply to run", Duration::from_secs(30), || async {
        let status = configs.get_opt("a").await.ok()??.status?;
        (status.exec_pid > 0).then_some(())
    })
    .await;
    gate
}

fn open_gate(gate: &std::path::Path) {
    std::fs::write(gate, b"").expect("open the gate in r1's guest");
}

async fn create_b_on_r1(ns: &TestNamespace) {
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "b"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name b\n"}}),
    )
    .await;
}

async fn b_waits_for_a(configs: &kube::Api<VRouterConfig>) -> Option<()> {
    let (_, _, message) = config_phase(configs, "b").await?;
    (message == r#"waiting for VRouterConfig "a" to finish its apply on the same router"#).then_some(())
}

/// Both applied, and b's session started only after a's last command.
async fn assert_both_applied_b_after_a(site: &common::Site) {
    let configs = site.ns.api::<VRouterConfig>();
    for name in ["a", "b"] {
        let (phase, _, message) = final_phase(&configs, name, Duration::from_secs(60)).await;
        assert_eq!(phase, Phase::Applied, "{name}: {message}");
    }
    let calls = site.routers["r1"].sandbox.calls();
    let position = |call: &str| {
        calls
            .iter()
            .position(|c| c == call)
            .unwrap_or_else(|| panic!("{call}: {calls:#?}"))
    };
    assert!(
        position("set system host-name b") > position("set system domain-name a.example"),
        "the two applies interleaved: {calls:#?}"
    );
}

#[tokio::test]
async fn a_generated_config_that_lost_its_binding_label_is_put_right() {
    let site = site("ctl-relabel", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    fleet_template(ns).await;
    set_target_params(ns, "r1", json!({"hostName": "r1", "address": "192.0.2.1/24"})).await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "addr"}], "targetRefs": [{"name": "r1"}]}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "edge.r1", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    // Someone removes the label the binding finds its configs by.
    configs
        .patch(
            "edge.r1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"vrouter.kojuro.date/binding": null}}})),
        )
        .await
        .unwrap();
    let label = wait_for("the label back", Duration::from_secs(30), || async {
        let config = configs.get("edge.r1").await.ok()?;
        config.metadata.labels?.get("vrouter.kojuro.date/binding").cloned()
    })
    .await;
    assert_eq!(label, "edge");
    let bindings = ns.api::<VRouterBinding>();
    let ready = wait_for("binding Ready", Duration::from_secs(30), || async {
        ready_of(&bindings.get("edge").await.ok()?).filter(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!(ready.1, "ReconcileSucceeded");
}

#[tokio::test]
async fn after_a_restart_a_config_still_waits_for_the_apply_in_flight_on_its_router() {
    let site = site("ctl-one-router-restart", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let configs = ns.api::<VRouterConfig>();
    let gate = start_a_gated_apply_on_r1(&site).await;
    // The operator goes away mid-apply; b arrives; a new operator process
    // starts with nothing in memory. a is paused meanwhile, so the new
    // process does not poll it: only a's stored status says it is running.
    site.stop.send(true).unwrap();
    let pause = |value: Option<&str>| {
        let configs = configs.clone();
        let patch = json!({"metadata": {"annotations": {"vrouter.kojuro.date/paused": value}}});
        async move {
            configs
                .patch("a", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
                .await
                .unwrap();
        }
    };
    pause(Some("true")).await;
    create_b_on_r1(ns).await;
    let restarted = Arc::new(vrouter_operator::runtime::context::Context::new(
        site.ctx.client.clone(),
        vrouter_operator::runtime::metrics::Metrics::new(),
        site.ctx.settings.clone(),
        site.providers.clone(),
    ));
    let _stop = start_controllers(&restarted, ns.name());
    wait_for("b to wait for a", Duration::from_secs(30), || b_waits_for_a(&configs)).await;
    open_gate(&gate);
    pause(None).await;
    assert_both_applied_b_after_a(&site).await;
}

#[tokio::test]
async fn a_config_with_the_binding_label_but_another_controller_is_not_taken_over() {
    let site = site("ctl-other-controller", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {
            "name": "edge.r1",
            "labels": {"vrouter.kojuro.date/binding": "edge", "vrouter.kojuro.date/target": "r1"},
            "ownerReferences": [{"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterBinding", "name": "edge-old",
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true}],
        }, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name kept\n"}}),
    )
    .await;
    fleet_template(ns).await;
    set_target_params(ns, "r1", json!({"hostName": "r1", "address": "192.0.2.1/24"})).await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "addr"}], "targetRefs": [{"name": "r1"}]}}),
    )
    .await;
    let bindings = ns.api::<VRouterBinding>();
    let (_, reason, message) = wait_for("binding not Ready", Duration::from_secs(60), || async {
        ready_of(&bindings.get("edge").await.ok()?).filter(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!(reason, "ReconcileError");
    assert_eq!(
        message,
        r#"VRouterConfig "edge.r1" carries this binding's label but is controlled by VRouterBinding "edge-old""#
    );
    let config = ns.api::<VRouterConfig>().get("edge.r1").await.unwrap();
    assert_eq!(config.spec.commands, "set system host-name kept\n");
    assert_eq!(config.metadata.owner_references.unwrap()[0].name, "edge-old");
}

#[tokio::test]
async fn an_apply_whose_credentials_vanish_mid_apply_still_times_out() {
    let settings = Settings {
        apply_timeout: Duration::from_secs(4),
        ..Settings::default()
    };
    let site = site("ctl-vanished", &["r1"], settings).await;
    let ns = &site.ns;
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "slow"}, "spec": {"targetRef": {"name": "r1"}, "commands": "sleep 30\n"}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("the apply to run", Duration::from_secs(30), || async {
        let status = configs.get_opt("slow").await.ok()??.status?;
        (status.exec_pid > 0).then_some(())
    })
    .await;
    // The Proxmox token is deleted while the apply runs: the router can no
    // longer be reached to learn how it ended.
    ns.api::<k8s_openapi::api::core::v1::Secret>()
        .delete("pve-token", &Default::default())
        .await
        .unwrap();
    let (phase, applied, message) = final_phase(&configs, "slow", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Failed);
    assert_eq!(applied, Some(("False".into(), "ApplyTimeout".into())));
    // The message shows the timeout, or, once the config is looked at
    // again, the problem as it stands; the condition keeps why the apply
    // failed.
    assert!(message.contains("cannot reach the router: Secret "), "{message}");
    let config = configs.get("slow").await.unwrap();
    let condition = config
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Applied")
        .unwrap();
    assert!(
        condition
            .message
            .starts_with("apply did not finish within 4s (cannot reach the router: "),
        "{}",
        condition.message
    );
}

fn ready_of(binding: &VRouterBinding) -> Option<(String, String, String)> {
    let c = binding
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn fleet_template(ns: &TestNamespace) {
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "addr"}, "spec": {"commands": "set system host-name {{ hostName }}\nset interfaces ethernet eth0 address {{ address }}\n"}}),
    )
    .await;
}

async fn set_target_params(ns: &TestNamespace, target: &str, params: Value) {
    let patch = json!({"spec": {"params": params}});
    ns.api::<VRouterTarget>()
        .patch(
            target,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn wait_for_applied_halts_on_a_failing_target_resumes_when_fixed_and_completes() {
    let names = ["r1", "r2", "r3", "r4", "r5"];
    let site = site("ctl-rollout", &names, Settings::default()).await;
    let ns = &site.ns;
    fleet_template(ns).await;
    for name in names {
        let address = if name == "r3" { "INVALID" } else { "192.0.2.1/24" };
        set_target_params(ns, name, json!({"hostName": name, "address": address})).await;
    }
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "fleet"}, "spec": {
            "templateRefs": [{"name": "addr"}],
            "targetRefs": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "rollout": {"mode": "WaitForApplied", "pollInterval": "1s", "waitAfterApplied": "0s"},
        }}),
    )
    .await;
    let bindings = ns.api::<VRouterBinding>();
    let configs = ns.api::<VRouterConfig>();
    let (_, _, message) = wait_for("the rollout to halt", Duration::from_secs(90), || async {
        ready_of(&bindings.get("fleet").await.ok()?).filter(|(_, reason, _)| reason == "RolloutHalted")
    })
    .await;
    assert_eq!(message, "VRouterConfig \"fleet.r3\" is Failed");
    // Targets before the failure were applied; none after it was written.
    for name in ["r1", "r2"] {
        assert_eq!(
            config_phase(&configs, &format!("fleet.{name}")).await.unwrap().0,
            Phase::Applied
        );
    }
    for name in ["r4", "r5"] {
        assert!(
            configs.get_opt(&format!("fleet.{name}")).await.unwrap().is_none(),
            "{name} written during a halt"
        );
    }
    // Fixing the failed target's params resumes the walk to the end.
    set_target_params(ns, "r3", json!({"hostName": "r3", "address": "192.0.2.3/24"})).await;
    let ready = wait_for("the rollout to complete", Duration::from_secs(120), || async {
        ready_of(&bindings.get("fleet").await.ok()?).filter(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(ready.1, "ReconcileSucceeded");
    for name in names {
        assert_eq!(
            config_phase(&configs, &format!("fleet.{name}")).await.unwrap().0,
            Phase::Applied,
            "{name}"
        );
    }
    let binding = bindings.get("fleet").await.unwrap();
    assert_eq!(binding.status.unwrap().rollout.unwrap().last_updated_target, "r5");
}

#[tokio::test]
async fn fixed_interval_keeps_its_spacing_between_writes() {
    let names = ["r1", "r2", "r3"];
    let site = site("ctl-fixed", &names, Settings::default()).await;
    let ns = &site.ns;
    fleet_template(ns).await;
    for name in names {
        set_target_params(ns, name, json!({"hostName": name, "address": "192.0.2.1/24"})).await;
    }
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "paced"}, "spec": {
            "templateRefs": [{"name": "addr"}],
            "targetRefs": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "rollout": {"mode": "FixedInterval", "waitInterval": "3s"},
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let mut created = Vec::new();
    for name in names {
        let config = wait_for(&format!("paced.{name}"), Duration::from_secs(60), || async {
            configs.get_opt(&format!("paced.{name}")).await.ok()?
        })
        .await;
        created.push(config.metadata.creation_timestamp.unwrap().0);
    }
    // creationTimestamp has whole seconds: 3 s apart can read as 2 s.
    for pair in created.windows(2) {
        let gap = pair[1].duration_since(pair[0]).as_secs();
        assert!(gap >= 2, "writes {gap} s apart with a 3 s interval: {created:?}");
    }
}

/// The first version of each of `names` the watch shows; the watch's list
/// is in before this returns, so no version created afterwards is missed.
async fn first_versions_of(
    api: kube::Api<VRouterConfig>,
    names: &[&str],
) -> tokio::task::JoinHandle<BTreeMap<String, VRouterConfig>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut seen = BTreeMap::new();
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while names.iter().any(|n| !seen.contains_key(n)) {
            let event = tokio::time::timeout(Duration::from_secs(60), events.next())
                .await
                .expect("the configs within a minute")
                .expect("the watch goes on")
                .expect("no watch error");
            match event {
                watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                    let name = c.metadata.name.clone().unwrap_or_default();
                    seen.entry(name).or_insert(c);
                }
                watcher::Event::InitDone => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                }
                watcher::Event::Init | watcher::Event::Delete(_) => {}
            }
        }
        seen
    });
    is_listed.await.expect("the config watch lists");
    task
}

#[tokio::test]
async fn a_binding_creates_its_configs_finalized_and_deletes_the_one_whose_target_it_drops() {
    let site = site("ctl-orphan", &["r1", "r2"], Settings::default()).await;
    let ns = &site.ns;
    fleet_template(ns).await;
    for name in ["r1", "r2"] {
        set_target_params(ns, name, json!({"hostName": name, "address": "192.0.2.1/24"})).await;
    }
    let configs = ns.api::<VRouterConfig>();
    let first_versions = first_versions_of(configs.clone(), &["pair.r1", "pair.r2"]).await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "pair"}, "spec": {"templateRefs": [{"name": "addr"}], "targetRefs": [{"name": "r1"}, {"name": "r2"}]}}),
    )
    .await;
    // Created with the config controller's finalizer: no write of its own
    // adds it afterwards.
    for (name, first) in first_versions.await.unwrap() {
        assert!(
            first
                .metadata
                .finalizers
                .unwrap_or_default()
                .iter()
                .any(|f| f == FINALIZER),
            "{name}: the binding's create carries {FINALIZER}"
        );
    }
    let patch = json!({"spec": {"targetRefs": [{"name": "r1"}]}});
    ns.api::<VRouterBinding>()
        .patch(
            "pair",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
    wait_for("pair.r2 to be deleted", Duration::from_secs(60), || async {
        configs.get_opt("pair.r2").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(configs.get_opt("pair.r1").await.unwrap().is_some());
}

#[tokio::test]
async fn a_part_the_template_no_longer_has_is_removed_from_the_config_not_applied_again() {
    let site = site("ctl-dropped", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "base"}, "spec": {
            "config": "system {\n    host-name first\n}\n",
            "commands": "set system ntp server 192.0.2.1\n",
        }}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "base"}], "targetRefs": [{"name": "r1"}]}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let applied = |host: &'static str| {
        let configs = configs.clone();
        async move {
            let config = configs.get_opt("edge.r1").await.ok()??;
            let done = config.spec.config.contains(host)
                && config.status.as_ref().map(|s| s.phase) == Some(Phase::Applied)
                && config.status.as_ref().map(|s| s.observed_generation) == config.metadata.generation;
            done.then_some(config)
        }
    };
    wait_for("the first apply", Duration::from_secs(60), || applied("first")).await;
    // The template drops its commands and changes its config.
    ns.api::<vrouter_api::VRouterTemplate>()
        .patch(
            "base",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"commands": null, "config": "system {\n    host-name second\n}\n"}}),
            ),
        )
        .await
        .unwrap();
    let config = wait_for("the second apply", Duration::from_secs(60), || applied("second")).await;
    assert_eq!(config.spec.commands, "", "the dropped commands stayed on the config");
    let calls = site.routers["r1"].sandbox.calls();
    let after_second_load = calls.iter().rposition(|c| c.starts_with("load")).expect("load ran");
    assert!(
        !calls[after_second_load..].iter().any(|c| c.contains("ntp")),
        "the dropped commands ran again: {calls:#?}"
    );
}

#[tokio::test]
async fn a_config_the_binding_cannot_write_makes_it_not_ready_and_stays_as_it_was() {
    let site = site("ctl-taken", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    // Someone already made a config under the name the binding would write.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "edge.r1"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name by-hand\n"}}),
    )
    .await;
    fleet_template(ns).await;
    set_target_params(ns, "r1", json!({"hostName": "r1", "address": "192.0.2.1/24"})).await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "addr"}], "targetRefs": [{"name": "r1"}]}}),
    )
    .await;
    let bindings = ns.api::<VRouterBinding>();
    let (status, reason, message) = wait_for("binding not Ready", Duration::from_secs(60), || async {
        ready_of(&bindings.get("edge").await.ok()?).filter(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ReconcileError"));
    assert_eq!(
        message,
        r#"Kubernetes API: vrouterconfigs.vrouter.kojuro.date "edge.r1" already exists (AlreadyExists)"#
    );
    let config = ns.api::<VRouterConfig>().get("edge.r1").await.unwrap();
    assert_eq!(config.spec.commands, "set system host-name by-hand\n");
}

fn exec_calls(pve: &FakeProxmox) -> usize {
    pve.seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path.ends_with("/agent/exec"))
        .count()
}

#[tokio::test]
async fn an_operator_restarted_mid_apply_finishes_the_apply_without_a_second_dispatch() {
    let mut site = site("ctl-restart", &["r1"], Settings::default()).await;
    let ns = site.ns.name().to_owned();
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "sleep 2\nset system host-name r1\n"}})).await;
    let configs = site.ns.api::<VRouterConfig>();
    wait_for("the apply to start", Duration::from_secs(60), || async {
        configs.get("c").await.ok()?.status.filter(|s| s.exec_pid > 0)
    })
    .await;
    // The operator stops mid-apply and a new one takes over.
    site.stop.send(true).unwrap();
    let execs_before = exec_calls(&site.pve);
    site.stop = start_controllers(&site.ctx, &ns);
    let (phase, _, message) = final_phase(&configs, "c", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    // Apply scripts are started by `agent/exec` with /bin/vbash's stand-in;
    // readiness checks use exec too, so compare dispatches through the guest.
    let sets: Vec<_> = site.routers["r1"]
        .sandbox
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("set system host-name"))
        .collect();
    assert_eq!(
        sets.len(),
        1,
        "applied once: {sets:?} ({execs_before} execs before the restart)"
    );
}

#[tokio::test]
async fn a_guest_agent_restarted_mid_apply_the_result_is_recovered_from_the_router() {
    let mut site = site("ctl-lost", &["r1"], Settings::default()).await;
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "sleep 2\nset system host-name r1\n"}})).await;
    let configs = site.ns.api::<VRouterConfig>();
    wait_for("the apply to start", Duration::from_secs(60), || async {
        configs.get("c").await.ok()?.status.filter(|s| s.exec_pid > 0)
    })
    .await;
    site.routers.get_mut("r1").unwrap().agent.restart().unwrap();
    // The new agent does not know the pid: the operator asks the router
    // about the apply id and takes the result it recorded.
    let (phase, _, message) = final_phase(&configs, "c", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    let apply_id = configs.get("c").await.unwrap().status.unwrap().apply_id;
    let router = &site.routers["r1"].sandbox;
    assert_eq!(
        router.apply_journal(),
        [format!("{apply_id} started"), format!("{apply_id} 0")],
        "one run, recorded by the router"
    );
    let sets: Vec<_> = router
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("set system host-name"))
        .collect();
    assert_eq!(sets, ["set system host-name r1"], "the script ran once");
}

/// GET /metrics over HTTP from the operator's metrics server.
async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

fn counter(text: &str, series: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn metrics_served_over_http_move_after_an_apply() {
    let site = site("ctl-metrics", &["r1"], Settings::default()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Plain HTTP, as with --metrics-secure=false.
    let router = vrouter_operator::server::health_and_metrics::metrics_router(site.ctx.metrics.clone(), None);
    tokio::spawn(async move { axum::serve(listener, router).await });

    let before = scrape(addr).await;
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "m"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name m\n"}})).await;
    let configs = site.ns.api::<VRouterConfig>();
    wait_for("Applied", Duration::from_secs(60), || async {
        config_phase(&configs, "m")
            .await
            .filter(|(p, _, _)| *p == Phase::Applied)
    })
    .await;
    let after = scrape(addr).await;
    let applied = "vrouter_applies_total{result=\"applied\"}";
    assert_eq!(counter(&before, applied), 0);
    assert_eq!(counter(&after, applied), 1, "{after}");
    let reconciles = "vrouter_reconciles_total{controller=\"vrouterconfig\"}";
    assert!(counter(&after, reconciles) > counter(&before, reconciles));
    assert_eq!(counter(&after, "vrouter_apply_observed_seconds_count"), 1);
}

/// Patches `body` into the status of config `name` as someone other than
/// the config controller would; returns the version written.
async fn patch_config_status_as_another_writer(api: &kube::Api<VRouterConfig>, name: &str, body: Value) -> String {
    let patch = kube::api::Patch::Merge(json!({ "status": body }));
    let written = api
        .patch_status(name, &kube::api::PatchParams::default(), &patch)
        .await
        .unwrap();
    written.metadata.resource_version.unwrap()
}

/// A reboot stamped on target `name` now, as the ProxmoxCluster controller
/// stamps one.
async fn stamp_reboot(ns: &TestNamespace, name: &str) {
    let now = k8s_openapi::jiff::Timestamp::now();
    ns.api::<VRouterTarget>()
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"lastRebootTime": now.to_string()}})),
        )
        .await
        .unwrap();
}

/// Patches `body` into config `name` (metadata or spec); returns the version written.
async fn patch_config(api: &kube::Api<VRouterConfig>, name: &str, body: Value) -> String {
    let written = api
        .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(body))
        .await
        .unwrap();
    written.metadata.resource_version.unwrap()
}

/// A status write as the config controller makes it, recorded as its own.
async fn write_own_status(
    client: &kube::Client,
    api: &kube::Api<VRouterConfig>,
    own: &vrouter_operator::runtime::own_writes::OwnWrites,
    message: &str,
) -> String {
    let current = api.get("c").await.unwrap();
    let before = current.status.clone().unwrap_or_default();
    let next = vrouter_api::VRouterConfigStatus {
        message: message.into(),
        ..before.clone()
    };
    let written = vrouter_operator::runtime::status_writes::patch_status(client, &current, Some(&before), &next)
        .await
        .unwrap()
        .expect("the status changed");
    own.record(&written);
    written.metadata.resource_version.unwrap()
}

#[tokio::test]
async fn the_config_watch_drops_its_own_status_writes_and_passes_every_change_made_by_others() {
    use futures::StreamExt;
    let env = vrouter_test_apiserver::TestEnv::shared().await;
    let ns = env.namespace("ctl-echo").await;
    let client = env.client();
    let api = ns.api::<VRouterConfig>();
    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name c\n"}}),
    )
    .await;
    let own = Arc::new(vrouter_operator::runtime::own_writes::OwnWrites::default());
    let watch = Arc::new(vrouter_operator::runtime::watches::SharedWatch::new(api.clone()));
    let store = watch.store();
    let triggers = vrouter_operator::controllers::vrouter_config::config_triggers(watch.subscribe(), own.clone());
    let watching = watch.clone();
    let _watching = tokio::spawn(async move {
        use futures::FutureExt;
        watching.run(futures::future::pending::<()>().boxed().shared()).await
    });
    let mut triggers = std::pin::pin!(triggers);
    // Watch events come in the order of their versions: the event after an
    // own write and someone's change is the change, or the write's echo
    // passed the filter.
    let mut next_version = async || -> String {
        let event = tokio::time::timeout(Duration::from_secs(60), triggers.next())
            .await
            .expect("the watch delivers within a minute")
            .expect("the watch goes on")
            .expect("no watch error");
        event.metadata.resource_version.unwrap()
    };
    let created = next_version().await;
    assert_eq!(api.get("c").await.unwrap().metadata.resource_version.unwrap(), created);

    let mut changes = vec![];
    let own_write = write_own_status(&client, &api, &own, "written by the controller").await;
    let others_status =
        patch_config_status_as_another_writer(&api, "c", json!({"phase": "Pending", "message": "drift seen"})).await;
    changes.push((
        "a status someone else wrote",
        others_status.clone(),
        next_version().await,
    ));
    let stored = store.get(&kube::runtime::reflector::ObjectRef::new("c").within(ns.name()));
    assert_eq!(
        stored.and_then(|c| c.metadata.resource_version.clone()),
        Some(others_status),
        "the store holds every version, the dropped echo ({own_write}) included"
    );
    write_own_status(&client, &api, &own, "again by the controller").await;
    let paused = patch_config(
        &api,
        "c",
        json!({"metadata": {"annotations": {"vrouter.kojuro.date/paused": "true"}}}),
    )
    .await;
    changes.push(("an annotation", paused, next_version().await));
    write_own_status(&client, &api, &own, "once more by the controller").await;
    let labelled = patch_config(&api, "c", json!({"metadata": {"labels": {"team": "net"}}})).await;
    changes.push(("a label", labelled, next_version().await));
    write_own_status(&client, &api, &own, "and again by the controller").await;
    let new_spec = patch_config(&api, "c", json!({"spec": {"commands": "set system host-name d\n"}})).await;
    changes.push(("a new generation", new_spec, next_version().await));
    for (what, written, delivered) in changes {
        assert_eq!(
            delivered, written,
            "{what} wakes the controller, and nothing before it did"
        );
    }
}

#[tokio::test]
async fn a_config_is_woken_by_an_annotation_a_status_and_a_reboot_stamp_that_others_write() {
    let site = site("ctl-woken", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let configs = ns.api::<VRouterConfig>();
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "c", "annotations": {"vrouter.kojuro.date/paused": "true"}},
               "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name r1\n"}}),
    )
    .await;
    let applies = || {
        site.routers["r1"]
            .sandbox
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("set system host-name"))
            .count()
    };
    wait_for(
        "the finalizer on the paused config",
        Duration::from_secs(60),
        || async {
            let c = configs.get("c").await.ok()?;
            let finalizers = c.metadata.finalizers.unwrap_or_default();
            finalizers
                .iter()
                .any(|f| f == vrouter_api::constants::FINALIZER)
                .then_some(())
        },
    )
    .await;
    assert_eq!(applies(), 0, "a paused config applies nothing");

    // The annotation removed by a person.
    patch_config(
        &configs,
        "c",
        json!({"metadata": {"annotations": {"vrouter.kojuro.date/paused": null}}}),
    )
    .await;
    let applied_after = async |count: usize, what: &str| {
        wait_for(what, Duration::from_secs(60), || async {
            let status = configs.get("c").await.ok()?.status?;
            (status.phase == Phase::Applied && applies() >= count).then_some(())
        })
        .await;
        assert_eq!(applies(), count, "{what}: applied exactly once more");
    };
    applied_after(1, "unpaused").await;

    // Drift detection sends the config back to Pending (another writer's status).
    patch_config_status_as_another_writer(&configs, "c", json!({"phase": "Pending", "message": "drift"})).await;
    applied_after(2, "sent back to Pending by another writer").await;

    // The ProxmoxCluster controller stamps a reboot on the target.
    stamp_reboot(ns, "r1").await;
    applied_after(3, "the target's reboot stamp").await;
}

/// A readiness check asks the guest's OS once per boot: later checks take
/// the OS found then (an OS changes only across a boot), and a reboot
/// stamped on the target makes the next check ask again.
#[tokio::test]
async fn the_guest_os_is_asked_once_per_boot() {
    use vrouter_operator::runtime::recently_ready::FRESH_FOR;
    let site = site("ctl-os-once", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let configs = ns.api::<VRouterConfig>();
    let sandbox = &site.routers["r1"].sandbox;
    let applies = || {
        sandbox
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("set system host-name"))
            .count()
    };
    let last_unit_checked = || sandbox.systemctl_calls().last().cloned().unwrap_or_default();
    let applied_after = async |count: usize, what: &str| {
        wait_for(what, Duration::from_secs(60), || async {
            let status = configs.get("c").await.ok()?.status?;
            (status.phase == Phase::Applied && applies() >= count).then_some(())
        })
        .await;
        assert_eq!(applies(), count, "{what}: applied exactly once more");
    };
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name a\n"}}),
    )
    .await;
    applied_after(1, "the first apply").await;
    assert!(
        last_unit_checked().ends_with(" vyos-router.service"),
        "{:?}",
        sandbox.systemctl_calls()
    );

    // The guest says it runs another OS, without a boot anyone saw; the
    // next apply's check (due again once the last is not fresh) takes the
    // OS found before and does not ask.
    sandbox.set_os_id("dozenos");
    let checks = sandbox.systemctl_calls().len();
    tokio::time::sleep(FRESH_FOR + Duration::from_secs(1)).await;
    patch_config(&configs, "c", json!({"spec": {"commands": "set system host-name b\n"}})).await;
    applied_after(2, "a new generation").await;
    assert!(sandbox.systemctl_calls().len() > checks, "the router was checked again");
    assert!(
        last_unit_checked().ends_with(" vyos-router.service"),
        "{:?}",
        sandbox.systemctl_calls()
    );

    // A boot stamped on the target: the OS is asked again.
    stamp_reboot(ns, "r1").await;
    applied_after(3, "the target's reboot stamp").await;
    assert!(
        last_unit_checked().ends_with(" dozenos-router.service"),
        "{:?}",
        sandbox.systemctl_calls()
    );
}
