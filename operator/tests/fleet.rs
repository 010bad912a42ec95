//! A binding at fleet scale, against a real kube-apiserver with real qemu-ga
//! guests behind the in-test Proxmox API: pausing a binding.

mod common;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use vrouter_api::constants::LABEL_BINDING_PAUSED;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterTarget, VRouterTemplate};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestNamespace;

use common::{condition, create, site, wait_for};

async fn merge<K: common::Namespaced>(ns: &TestNamespace, name: &str, patch: Value) {
    ns.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The `set system host-name …` lines router `name`'s guest has run.
fn host_names_set(site: &common::Site, name: &str) -> Vec<String> {
    site.routers[name]
        .sandbox
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("set system host-name"))
        .collect()
}

/// Waits until `name` is Applied at its current generation with `commands`.
async fn applied_with(ns: &TestNamespace, name: &str, commands: &str) -> VRouterConfig {
    let configs = ns.api::<VRouterConfig>();
    wait_for(
        &format!("{name} applied with {commands:?}"),
        Duration::from_secs(90),
        || async {
            let c = configs.get_opt(name).await.ok()??;
            let status = c.status.as_ref()?;
            let current = status.observed_generation == c.metadata.generation.unwrap_or(0);
            (c.spec.commands == commands && current && status.phase == Phase::Applied).then_some(c)
        },
    )
    .await
}

async fn ready_reason(ns: &TestNamespace, binding: &str) -> Option<(String, String)> {
    let b = ns.api::<VRouterBinding>().get(binding).await.ok()?;
    condition(&b.status?.conditions, "Ready")
}

async fn event_reasons(ns: &TestNamespace, binding: &str) -> Vec<String> {
    let events = ns.api::<Event>().list(&ListParams::default()).await.unwrap().items;
    events
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(binding))
        .filter_map(|e| e.reason)
        .collect()
}

async fn template(ns: &TestNamespace, prefix: &str) {
    let spec = json!({"commands": format!("set system host-name {{{{ '{prefix}-' ~ hostName }}}}\n")});
    if ns.api::<VRouterTemplate>().get_opt("names").await.unwrap().is_some() {
        merge::<VRouterTemplate>(ns, "names", json!({ "spec": spec })).await;
    } else {
        create::<VRouterTemplate>(ns, json!({"metadata": {"name": "names"}, "spec": spec})).await;
    }
}

/// A paused binding writes a changed spec to its configs but starts no
/// apply from it, while an unpaused binding over another router applies the
/// same change (the controllers did process it); resumed, it applies. Its
/// Ready condition and Events say it is paused, then resumed.
#[tokio::test]
async fn a_paused_binding_dispatches_nothing_new_and_applies_once_resumed() {
    let site = site("fleet-pause", &["r1", "r2"], Settings::default()).await;
    let ns = &site.ns;
    for name in ["r1", "r2"] {
        merge::<VRouterTarget>(ns, name, json!({"spec": {"params": {"hostName": name}}})).await;
    }
    template(ns, "v1").await;
    for (binding, target) in [("fleet", "r1"), ("control", "r2")] {
        create::<VRouterBinding>(
            ns,
            json!({"metadata": {"name": binding}, "spec": {"templateRefs": [{"name": "names"}], "targetRefs": [{"name": target}]}}),
        )
        .await;
    }
    applied_with(ns, "fleet.r1", "set system host-name v1-r1\n").await;
    applied_with(ns, "control.r2", "set system host-name v1-r2\n").await;

    merge::<VRouterBinding>(ns, "fleet", json!({"spec": {"paused": true}})).await;
    let (status, _) = wait_for("fleet Ready=False/Paused", Duration::from_secs(30), || async {
        ready_reason(ns, "fleet").await.filter(|(_, reason)| reason == "Paused")
    })
    .await;
    assert_eq!(status, "False");
    let configs = ns.api::<VRouterConfig>();
    let marked = configs.get("fleet.r1").await.unwrap();
    assert_eq!(
        marked.labels().get(LABEL_BINDING_PAUSED).map(String::as_str),
        Some("true")
    );
    assert!(
        configs
            .get("control.r2")
            .await
            .unwrap()
            .labels()
            .get(LABEL_BINDING_PAUSED)
            .is_none()
    );
    wait_for("a Paused event", Duration::from_secs(30), || async {
        event_reasons(ns, "fleet")
            .await
            .contains(&"Paused".to_owned())
            .then_some(())
    })
    .await;

    // One change reaches both bindings: the unpaused one applies it, the
    // paused one gets the new spec but starts nothing.
    template(ns, "v2").await;
    applied_with(ns, "control.r2", "set system host-name v2-r2\n").await;
    let written = wait_for("fleet.r1's new spec", Duration::from_secs(30), || async {
        let c = configs.get("fleet.r1").await.ok()?;
        (c.spec.commands == "set system host-name v2-r1\n").then_some(c)
    })
    .await;
    assert_eq!(
        host_names_set(&site, "r2"),
        ["set system host-name v1-r2", "set system host-name v2-r2"]
    );
    assert_eq!(
        host_names_set(&site, "r1"),
        ["set system host-name v1-r1"],
        "paused: nothing new on r1"
    );
    let status = written.status.unwrap();
    assert_ne!(
        status.observed_generation,
        written.metadata.generation.unwrap(),
        "not dispatched"
    );
    assert_eq!(status.exec_pid, 0);

    merge::<VRouterBinding>(ns, "fleet", json!({"spec": {"paused": false}})).await;
    let resumed = applied_with(ns, "fleet.r1", "set system host-name v2-r1\n").await;
    assert!(resumed.labels().get(LABEL_BINDING_PAUSED).is_none());
    assert_eq!(
        host_names_set(&site, "r1"),
        ["set system host-name v1-r1", "set system host-name v2-r1"]
    );
    wait_for(
        "fleet Ready=True and a Resumed event",
        Duration::from_secs(30),
        || async {
            let ready = ready_reason(ns, "fleet").await?;
            let resumed = event_reasons(ns, "fleet").await.contains(&"Resumed".to_owned());
            (ready.0 == "True" && resumed).then_some(())
        },
    )
    .await;
}

/// An apply running when its binding is paused is followed to its result:
/// the config ends Applied while it carries the paused label.
#[tokio::test]
async fn an_apply_in_flight_when_its_binding_is_paused_finishes() {
    let site = site("fleet-pause-inflight", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let gate = site.routers["r1"].sandbox.dir().join("gate");
    let commands = format!(
        "set system host-name gated\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
        gate.display()
    );
    create::<VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "gated"}, "spec": {"commands": commands}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "fleet"}, "spec": {"templateRefs": [{"name": "gated"}], "targetRefs": [{"name": "r1"}]}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    wait_for("fleet.r1's apply to run", Duration::from_secs(60), || async {
        let status = configs.get_opt("fleet.r1").await.ok()??.status?;
        (status.exec_pid > 0).then_some(())
    })
    .await;
    merge::<VRouterBinding>(ns, "fleet", json!({"spec": {"paused": true}})).await;
    wait_for(
        "fleet.r1 to carry the paused label",
        Duration::from_secs(30),
        || async {
            let c = configs.get_opt("fleet.r1").await.ok()??;
            c.labels().contains_key(LABEL_BINDING_PAUSED).then_some(())
        },
    )
    .await;
    std::fs::write(&gate, b"").expect("open the gate in r1's guest");
    let done = applied_with(ns, "fleet.r1", &commands).await;
    assert_eq!(
        done.labels().get(LABEL_BINDING_PAUSED).map(String::as_str),
        Some("true")
    );
    assert_eq!(host_names_set(&site, "r1"), ["set system host-name gated"]);
}
