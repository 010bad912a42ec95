//! Health as GitOps tools read it, from objects the operator's controllers
//! wrote to a real kube-apiserver: the Argo CD health checks in
//! `deploy/argocd/health-checks.yaml` run under Lua 5.1 (the language of
//! Argo CD's gopher-lua), and Flux's reading through the kstatus library
//! itself (sigs.k8s.io/cli-utils, built by `cargo xtask testenv` as the
//! `kstatus` oracle). Each reaches the states a user would see.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use mlua::{Lua, LuaSerdeExt, SerializeOptions};
use serde::Serialize;
use serde_json::{Value, json};
use vrouter_api::constants::ANNOTATION_PAUSED;
use vrouter_api::{Phase, ProxmoxCluster, VRouterBinding, VRouterConfig, VRouterStatus, VRouterTarget};
use vrouter_operator::runtime::context::Settings;

use common::{config_phase, create, site, wait_for};

/// The health check for `kind`, as Argo CD reads it from argocd-cm.
fn script(kind: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/argocd/health-checks.yaml");
    let patch: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let key = format!("resource.customizations.health.vrouter.kojuro.date_{kind}");
    patch["data"][&key]
        .as_str()
        .unwrap_or_else(|| panic!("{path} has no {key}"))
        .to_owned()
}

/// Argo CD's verdict on `object`: (status, message).
fn health<K: Serialize + kube::Resource<DynamicType = ()>>(object: &K) -> (String, String) {
    let lua = Lua::new();
    // Argo CD hands the object over as decoded JSON: absent and null fields are nil.
    let options = SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    let value = lua.to_value_with(object, options).unwrap();
    lua.globals().set("obj", value).unwrap();
    let kind = K::kind(&());
    let verdict: mlua::Table = lua
        .load(script(&kind))
        .set_name(kind.as_ref())
        .eval()
        .unwrap_or_else(|e| panic!("the {kind} health check failed to run: {e}"));
    let status: String = verdict.get("status").unwrap();
    let message: String = verdict.get("message").unwrap();
    assert!(
        ["Healthy", "Progressing", "Degraded", "Suspended"].contains(&status.as_str()),
        "{kind}: {status:?} is not an Argo CD health status"
    );
    (status, message)
}

/// kstatus's verdict on `object` (Current, InProgress, Failed, Terminating):
/// (status, message), from sigs.k8s.io/cli-utils' `status.Compute`.
fn kstatus<K: Serialize + kube::Resource<DynamicType = ()>>(object: &K) -> (String, String) {
    let oracle = vrouter_test_apiserver::kstatus_oracle()
        .unwrap_or_else(|e| panic!("reading health as Flux does needs the kstatus oracle: {e}"));
    let mut json = serde_json::to_value(object).unwrap();
    // As the API server serves it: with its kind.
    json["apiVersion"] = json!(K::api_version(&()));
    json["kind"] = json!(K::kind(&()));
    let mut child = Command::new(&oracle)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", oracle.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "kstatus failed on {json}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    (
        answer["status"].as_str().unwrap().to_owned(),
        answer["message"].as_str().unwrap().to_owned(),
    )
}

/// Waits until kstatus reads the object as `status`; returns its message.
async fn wait_kstatus<K>(api: &kube::Api<K>, name: &str, status: &str) -> String
where
    K: Serialize + kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(
        &format!("kstatus to read {} {name} as {status}", K::kind(&())),
        Duration::from_secs(90),
        || async {
            let object = api.get_opt(name).await.ok()??;
            let (got, message) = kstatus(&object);
            (got == status).then_some(message)
        },
    )
    .await
}

/// Waits until Argo CD would call the object `status`; returns its message.
async fn wait_health<K>(api: &kube::Api<K>, name: &str, status: &str) -> String
where
    K: Serialize + kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(
        &format!("{} {name} to be {status}", K::kind(&())),
        Duration::from_secs(90),
        || async {
            let object = api.get_opt(name).await.ok()??;
            let (got, message) = health(&object);
            (got == status).then_some(message)
        },
    )
    .await
}

#[tokio::test]
async fn each_kind_reaches_every_health_in_argo_cd_and_in_kstatus_as_the_operator_writes_it() {
    let settings = Settings {
        target_poll: Duration::from_secs(1),
        ..Settings::default()
    };
    let site = site("gitops-health", &["r1", "r2", "r3", "r4", "r5"], settings).await;
    let ns = &site.ns;
    let configs = ns.api::<VRouterConfig>();

    // A config that applies: Healthy; its VRouterStatus and target too.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "good"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name good\n"}}),
    )
    .await;
    assert_eq!(wait_health(&configs, "good", "Healthy").await, "applied");
    wait_kstatus(&configs, "good", "Current").await;
    let statuses = ns.api::<VRouterStatus>();
    let status_name = wait_for("good's VRouterStatus", Duration::from_secs(60), || async {
        let list = statuses.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|s| s.spec.config_ref.name == "good")
            .and_then(|s| s.metadata.name)
    })
    .await;
    wait_health(&statuses, &status_name, "Healthy").await;
    wait_kstatus(&statuses, &status_name, "Current").await;
    wait_health(&ns.api::<VRouterTarget>(), "r1", "Healthy").await;
    wait_kstatus(&ns.api::<VRouterTarget>(), "r1", "Current").await;
    wait_health(&ns.api::<ProxmoxCluster>(), "pve", "Healthy").await;
    wait_kstatus(&ns.api::<ProxmoxCluster>(), "pve", "Current").await;

    // A config whose `set` fails: Degraded, saying why; Failed for kstatus.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "bad"}, "spec": {"targetRef": {"name": "r2"}, "commands": "set interfaces ethernet eth0 address INVALID\n"}}),
    )
    .await;
    let message = wait_health(&configs, "bad", "Degraded").await;
    assert!(message.starts_with("ConfigFailed: "), "{message}");
    let message = wait_kstatus(&configs, "bad", "Failed").await;
    assert!(message.contains("exited with code"), "{message}");

    // A config whose target does not exist cannot progress: Degraded, Failed.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "nowhere"}, "spec": {"targetRef": {"name": "absent"}, "commands": "set system host-name x\n"}}),
    )
    .await;
    let message = wait_health(&configs, "nowhere", "Degraded").await;
    assert!(message.starts_with("TargetUnavailable: "), "{message}");
    let message = wait_kstatus(&configs, "nowhere", "Failed").await;
    assert!(message.contains("\"absent\" not found"), "{message}");

    // An apply in flight: Progressing, not merely "no status yet"; InProgress.
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "slow"}, "spec": {"targetRef": {"name": "r3"}, "commands": "set system host-name slow\nsleep 120\n"}}),
    )
    .await;
    wait_for("slow's apply to run", Duration::from_secs(60), || async {
        let (phase, _, _) = config_phase(&configs, "slow").await?;
        (phase == Phase::Applying).then_some(())
    })
    .await;
    let slow = configs.get("slow").await.unwrap();
    let (verdict, message) = health(&slow);
    assert_eq!(verdict, "Progressing", "{message}");
    assert!(message.starts_with("Applying"), "{message}");
    let (verdict, message) = kstatus(&slow);
    assert_eq!(verdict, "InProgress", "{message}");
    assert_eq!(message, "applying generation 1");

    // A new generation the operator has not looked at yet is not Healthy.
    let mut good = configs.get("good").await.unwrap();
    good.spec.commands = "set system host-name good2\n".into();
    let generation = good.metadata.generation.unwrap();
    good.metadata.generation = Some(generation + 1);
    let (verdict, message) = health(&good);
    assert_eq!(verdict, "Progressing", "{message}");
    let (verdict, message) = kstatus(&good);
    assert_eq!(verdict, "InProgress", "{message}");

    // Paused for debugging: Suspended.
    configs
        .patch(
            "good",
            &PatchParams::default(),
            // The operator's own annotation name: the Lua check must name the same.
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_PAUSED: "true"}}})),
        )
        .await
        .unwrap();
    wait_health(&configs, "good", "Suspended").await;

    // A binding that renders: Healthy; one whose template is missing: Degraded.
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "name"}, "spec": {"commands": "set system host-name {{ hostName }}\n"}}),
    )
    .await;
    let bindings = ns.api::<VRouterBinding>();
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {"templateRefs": [{"name": "name"}], "targetRefs": [{"name": "r4"}]}}),
    )
    .await;
    wait_health(&bindings, "edge", "Healthy").await;
    wait_kstatus(&bindings, "edge", "Current").await;
    // Paused (`spec.paused`): Suspended; kstatus has no such state and reads
    // its Stalled condition (nothing moves until a person resumes it).
    bindings
        .patch(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let message = wait_health(&bindings, "edge", "Suspended").await;
    assert!(message.starts_with("Paused: "), "{message}");
    wait_kstatus(&bindings, "edge", "Failed").await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "broken"}, "spec": {"templateRefs": [{"name": "nowhere"}], "targetRefs": [{"name": "r4"}]}}),
    )
    .await;
    let message = wait_health(&bindings, "broken", "Degraded").await;
    assert!(message.starts_with("ReconcileError: "), "{message}");
    let message = wait_kstatus(&bindings, "broken", "Failed").await;
    assert!(message.contains("nowhere"), "{message}");

    // A rollout waiting for an apply that takes its time: Progressing, InProgress.
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "slowly"}, "spec": {"commands": "set system host-name {{ hostName }}\nsleep 120\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "careful"}, "spec": {"templateRefs": [{"name": "slowly"}], "targetRefs": [{"name": "r5"}],
            "rollout": {"mode": "WaitForApplied", "pollInterval": "1s", "waitAfterApplied": "0s"}}}),
    )
    .await;
    let careful = wait_for(
        "careful's rollout to wait for its apply",
        Duration::from_secs(60),
        || async {
            let binding = bindings.get_opt("careful").await.ok()??;
            let ready = binding
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.reason == "RolloutInProgress").then_some(binding)
        },
    )
    .await;
    let (verdict, message) = health(&careful);
    assert_eq!(verdict, "Progressing", "{message}");
    assert!(message.starts_with("RolloutInProgress: "), "{message}");
    let (verdict, message) = kstatus(&careful);
    assert_eq!(verdict, "InProgress", "{message}");

    // A ProxmoxCluster whose Secret does not exist: Degraded, Failed.
    let clusters = ns.api::<ProxmoxCluster>();
    create::<ProxmoxCluster>(
        ns,
        json!({"metadata": {"name": "nocreds"}, "spec": {"endpoints": ["https://127.0.0.1:9"], "credentialsRef": {"name": "missing"}}}),
    )
    .await;
    let message = wait_health(&clusters, "nocreds", "Degraded").await;
    assert!(message.starts_with("CredentialsNotFound: "), "{message}");
    let message = wait_kstatus(&clusters, "nocreds", "Failed").await;
    assert!(message.contains("missing"), "{message}");
    // A changed spec is InProgress until the operator has synced it.
    let mut pve = clusters.get("pve").await.unwrap();
    pve.metadata.generation = pve.metadata.generation.map(|g| g + 1);
    assert_eq!(kstatus(&pve).0, "InProgress");

    // A VRouterStatus whose config does not exist: Degraded, Failed.
    create::<VRouterStatus>(
        ns,
        json!({"metadata": {"name": "orphan"}, "spec": {"configRef": {"name": "gone"}}}),
    )
    .await;
    let message = wait_health(&statuses, "orphan", "Degraded").await;
    assert!(message.starts_with("SyncFailed: "), "{message}");
    let message = wait_kstatus(&statuses, "orphan", "Failed").await;
    assert!(message.contains("\"gone\" not found"), "{message}");
    let mut orphan = statuses.get("orphan").await.unwrap();
    orphan.metadata.generation = orphan.metadata.generation.map(|g| g + 1);
    assert_eq!(kstatus(&orphan).0, "InProgress");

    // A target whose ProxmoxCluster does not exist: Degraded, Failed.
    let targets = ns.api::<VRouterTarget>();
    create::<VRouterTarget>(
        ns,
        json!({"metadata": {"name": "lost"}, "spec": {"provider": {"type": "proxmox", "proxmox": {"vmid": 999, "clusterRef": {"name": "elsewhere"}}}}}),
    )
    .await;
    let message = wait_health(&targets, "lost", "Degraded").await;
    assert!(message.starts_with("ProviderUnavailable: "), "{message}");
    let message = wait_kstatus(&targets, "lost", "Failed").await;
    assert!(message.contains("elsewhere"), "{message}");

    // A target whose VM stops: no longer Healthy; InProgress until it runs.
    wait_health(&targets, "r4", "Healthy").await;
    site.pve.set_running(103, false);
    wait_health(&targets, "r4", "Progressing").await;
    let message = wait_kstatus(&targets, "r4", "InProgress").await;
    assert!(message.contains("waiting for the VM to run"), "{message}");
}

#[test]
fn every_kind_of_ours_has_a_check_and_nothing_else_is_in_the_patch() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/argocd/health-checks.yaml");
    let patch: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut keys: Vec<&str> = patch["data"].as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    let mut expected: Vec<String> = [
        "ProxmoxCluster",
        "VRouterBinding",
        "VRouterConfig",
        "VRouterStatus",
        "VRouterTarget",
    ]
    .iter()
    .map(|k| format!("resource.customizations.health.vrouter.kojuro.date_{k}"))
    .collect();
    expected.sort();
    assert_eq!(keys, expected);
    // A merge patch of argocd-cm: data only.
    assert_eq!(patch.as_object().unwrap().len(), 1, "{patch:#}");
}
