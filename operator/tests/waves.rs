//! A binding rolling out in waves (`spec.rollout.mode: Waves`), against a
//! real kube-apiserver with real qemu-ga guests behind the in-test Proxmox
//! API: a failing canary halts the rollout before the next wave, and a
//! pause until resumed holds until `resume` (the CLI's, then GitOps').

mod common;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterTarget, VRouterTemplate};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestNamespace;

use common::{condition, config_phase, create, site, wait_for};

async fn merge<K: common::Namespaced>(ns: &TestNamespace, name: &str, patch: Value) {
    ns.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Each router's host name and address come from its target's params; a
/// `set` with `INVALID` in it fails on the guest as it does on VyOS.
async fn setup(ns: &TestNamespace, names: &[&str], failing: Option<&str>) {
    create::<VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "addr"}, "spec": {"commands": "set system host-name {{ hostName }}\nset interfaces ethernet eth0 address {{ address }}\n"}}),
    )
    .await;
    for &name in names {
        let address = if Some(name) == failing {
            "INVALID"
        } else {
            "192.0.2.1/24"
        };
        let params = json!({"spec": {"params": {"hostName": name, "address": address}}});
        merge::<VRouterTarget>(ns, name, params).await;
    }
}

async fn binding(ns: &TestNamespace, names: &[&str], waves: Value) {
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "fleet"}, "spec": {
            "templateRefs": [{"name": "addr"}],
            "targetRefs": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "rollout": {"mode": "Waves", "pollInterval": "1s", "waves": waves},
        }}),
    )
    .await;
}

/// The binding's Ready (status, reason, message) once `pick` accepts it.
async fn ready_when(
    ns: &TestNamespace,
    what: &str,
    pick: impl Fn(&(String, String, String)) -> bool,
) -> VRouterBinding {
    let bindings = ns.api::<VRouterBinding>();
    wait_for(what, Duration::from_secs(120), || async {
        let b = bindings.get("fleet").await.ok()?;
        let c = b
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        let seen = (c.status, c.reason, c.message);
        pick(&seen).then_some(b)
    })
    .await
}

/// Ready's reason and message.
fn ready(b: &VRouterBinding) -> (String, String) {
    let c = b
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    (c.reason.clone(), c.message.clone())
}

async fn exists(ns: &TestNamespace, config: &str) -> bool {
    ns.api::<VRouterConfig>().get_opt(config).await.unwrap().is_some()
}

/// Runs `vrouter-operator resume <binding>` against the test API server;
/// returns what it printed.
async fn resume_cli(binding: &str) -> String {
    let kubeconfig = vrouter_test_apiserver::TestEnv::shared()
        .await
        .kubeconfig_path()
        .to_owned();
    let binding = binding.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
            .args(["resume", &binding])
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "resume failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

async fn event_notes(ns: &TestNamespace) -> Vec<(String, String)> {
    let events = ns.api::<Event>().list(&ListParams::default()).await.unwrap().items;
    events
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("fleet"))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// The canary wave (r1) fails: the binding halts with nothing of the next
/// wave written; fixing r1's params rewrites the canary alone, and once it
/// is Applied the rollout goes on wave by wave to the end.
#[tokio::test]
async fn a_failing_canary_halts_before_the_next_wave_and_once_fixed_the_rollout_ends() {
    let names = ["r1", "r2", "r3", "r4", "r5"];
    let site = site("waves-canary", &names, Settings::default()).await;
    let ns = &site.ns;
    setup(ns, &names, Some("r1")).await;
    binding(ns, &names, json!({"batchSize": 2, "canary": 1})).await;

    let halted = ready_when(ns, "the canary to halt the rollout", |(_, reason, _)| {
        reason == "RolloutHalted"
    })
    .await;
    assert_eq!(
        condition(&halted.status.as_ref().unwrap().conditions, "Ready")
            .unwrap()
            .0,
        "False"
    );
    let (_, message) = ready(&halted);
    assert_eq!(message, "wave 1 of 3 halted: 1 configs Failed, 0 tolerated");
    let waves = halted.status.unwrap().waves.unwrap();
    assert_eq!((waves.wave, waves.waves), (1, 3));
    let configs = ns.api::<VRouterConfig>();
    assert_eq!(config_phase(&configs, "fleet.r1").await.unwrap().0, Phase::Failed);
    for name in ["r2", "r3", "r4", "r5"] {
        assert!(
            !exists(ns, &format!("fleet.{name}")).await,
            "{name} written past a halted canary"
        );
    }
    wait_for("a RolloutHalted event", Duration::from_secs(30), || async {
        let notes = event_notes(ns).await;
        notes.iter().any(|(reason, _)| reason == "RolloutHalted").then_some(())
    })
    .await;

    merge::<VRouterTarget>(ns, "r1", json!({"spec": {"params": {"address": "192.0.2.9/24"}}})).await;
    let done = ready_when(ns, "the rollout to end", |(status, _, _)| status == "True").await;
    assert_eq!(
        ready(&done),
        (
            "ReconcileSucceeded".to_owned(),
            "all 3 waves done, every config Applied".to_owned()
        )
    );
    assert!(done.status.unwrap().waves.is_none(), "no rollout under way");
    for name in names {
        let config = format!("fleet.{name}");
        assert_eq!(
            config_phase(&configs, &config).await.unwrap().0,
            Phase::Applied,
            "{name}"
        );
    }
    let notes = event_notes(ns).await;
    let reasons: Vec<&str> = notes.iter().map(|(reason, _)| reason.as_str()).collect();
    for reason in ["WaveStarted", "RolloutHalted", "RolloutCompleted"] {
        assert!(reasons.contains(&reason), "no {reason} event: {notes:?}");
    }
    // kube's recorder folds Events of one object, reason and action into a
    // series that keeps the first note: each wave's start has an action of
    // its own, so each wave is told in its own Event.
    for wave in 1..=3 {
        let start = format!("wave {wave} of 3, writing ");
        assert!(
            notes
                .iter()
                .any(|(reason, note)| reason == "WaveStarted" && note.starts_with(&start)),
            "no WaveStarted event for wave {wave}: {notes:?}"
        );
    }
}

/// `untilResumed` holds after each wave: the status says so and nothing of
/// the next wave is written, even when the binding is reconciled again. The
/// CLI's `resume` starts the next wave (and only it); a new value written
/// into the field by hand, as GitOps would, starts the last one.
#[tokio::test]
async fn a_pause_until_resumed_holds_and_each_resume_starts_the_next_wave() {
    let names = ["r1", "r2", "r3"];
    let site = site("waves-resume", &names, Settings::default()).await;
    let ns = &site.ns;
    setup(ns, &names, None).await;
    binding(ns, &names, json!({"batchSize": 1, "untilResumed": true})).await;

    let held = ready_when(ns, "the hold after wave 1", |(_, reason, _)| reason == "RolloutPaused").await;
    assert_eq!(ready(&held).1, "wave 1 of 3 done, paused until resumed");
    let waves = held.status.clone().unwrap().waves.unwrap();
    assert_eq!((waves.wave, waves.held_at_resume.as_deref()), (1, Some("")));
    let configs = ns.api::<VRouterConfig>();
    assert_eq!(config_phase(&configs, "fleet.r1").await.unwrap().0, Phase::Applied);
    // A reconcile of the held binding (a label changes its metadata) writes
    // nothing new: the hold is the binding's state, not a timer.
    merge::<VRouterBinding>(ns, "fleet", json!({"metadata": {"labels": {"poke": "1"}}})).await;
    merge::<VRouterTemplate>(ns, "addr", json!({"metadata": {"labels": {"poke": "1"}}})).await;
    let again = ready_when(ns, "the hold to stand", |(_, reason, _)| reason == "RolloutPaused").await;
    assert_eq!(ready(&again).1, "wave 1 of 3 done, paused until resumed");
    assert!(!exists(ns, "fleet.r2").await, "r2 written during the hold");

    let note = resume_cli(&format!("{}/fleet", ns.name())).await;
    assert!(note.contains("wave 1 of 3 done, paused until resumed"), "{note}");
    let held = ready_when(ns, "the hold after wave 2", |(_, _, message)| {
        message == "wave 2 of 3 done, paused until resumed"
    })
    .await;
    assert_eq!(config_phase(&configs, "fleet.r2").await.unwrap().0, Phase::Applied);
    assert!(!exists(ns, "fleet.r3").await, "one resume started two waves");
    let token = held.spec.rollout.unwrap().waves.unwrap().resume;
    assert_eq!(held.status.unwrap().waves.unwrap().held_at_resume, Some(token));

    merge::<VRouterBinding>(
        ns,
        "fleet",
        json!({"spec": {"rollout": {"waves": {"resume": "gitops-1"}}}}),
    )
    .await;
    let done = ready_when(ns, "the rollout to end", |(status, _, _)| status == "True").await;
    assert_eq!(ready(&done).0, "ReconcileSucceeded");
    assert_eq!(config_phase(&configs, "fleet.r3").await.unwrap().0, Phase::Applied);
}
