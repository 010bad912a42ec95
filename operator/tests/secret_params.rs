//! Secret params: a param taken from a Secret (`secretKeyRef`) reaches the
//! router and no object but the Secret. Real kube-apiserver, the operator's
//! controllers in this process (their logs captured), a sandbox guest
//! (real qemu-ga, bash with the stub vyatta functions) through the real
//! apply path.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{Discovery, verbs};
use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig};
use vrouter_operator::runtime::context::Settings;
use vrouter_operator::runtime::metrics::ControllerLabels;

use common::{create, site, wait_for};

/// A value with characters each escape treats differently; no single quote
/// (VyOS cannot take one).
const VALUE: &str = "Pa$$ w0rd;\"x\\y`id`";

fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_writer(move || Sink(sink.clone()))
            .with_ansi(false)
            .init();
        logs
    })
    .clone()
}

/// The value as it could appear written down anywhere.
fn encodings(value: &str) -> Vec<String> {
    let json = serde_json::to_string(value).unwrap();
    vec![
        value.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(value),
        json.trim_matches('"').to_owned(),
        vrouter_render::escape::command_word(value).unwrap().into_owned(),
        vrouter_render::escape::config_value(value).unwrap().into_owned(),
        // The distinctive part alone, in case it is cut or re-quoted.
        "w0rd;".to_owned(),
    ]
}

/// Every object the API server serves that can be listed, but Secrets.
async fn every_object_but_secrets(client: &kube::Client) -> Vec<(String, String)> {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if resource.kind == "Secret" || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for object in list {
                let text = serde_json::to_string(&object).unwrap();
                out.push((
                    format!("{}/{}", resource.kind, object.metadata.name.unwrap_or_default()),
                    text,
                ));
            }
        }
    }
    out
}

fn assert_nowhere(value: &str, place: &str, text: &str) {
    for encoded in encodings(value) {
        assert!(
            !text.contains(&encoded),
            "{place} holds the secret value as {encoded:?}"
        );
    }
}

#[tokio::test]
async fn a_secret_param_reaches_the_router_and_no_object_event_or_log_line() {
    let logs = captured_logs();
    let site = site("secret-params", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "stringData": {"password": VALUE},
    }))
    .unwrap();
    ns.api::<Secret>().create(&Default::default(), &secret).await.unwrap();
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "login"}, "spec": {
            "config": "system {\n    login {\n        password {{ pw }}\n    }\n}\n",
            "commands": "set system login user vyos authentication plaintext-password {{ pw }}\n",
        }}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {
            "templateRefs": [{"name": "login"}],
            "params": {"pw": {"secretKeyRef": {"name": "db", "key": "password"}}},
            "targetRefs": [{"name": "r1"}],
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let config = wait_for("edge.r1 applied", Duration::from_secs(60), || async {
        let config = configs.get_opt("edge.r1").await.ok()??;
        let status = config.status.as_ref()?;
        assert_ne!(status.phase, Phase::Failed, "{}", status.message);
        (status.phase == Phase::Applied).then_some(config)
    })
    .await;

    // The router received the value, escaped for each place.
    let sandbox = &site.routers["r1"].sandbox;
    assert!(
        sandbox.calls().contains(&format!(
            "set system login user vyos authentication plaintext-password {VALUE}"
        )),
        "{:?}",
        sandbox.calls()
    );
    let loaded = String::from_utf8(sandbox.loaded_config().unwrap()).unwrap();
    let in_config = vrouter_render::escape::config_value(VALUE).unwrap();
    assert!(loaded.contains(&format!("password {in_config}\n")), "{loaded}");
    // The config holds the reference, not the value.
    assert!(
        config.spec.commands.contains("@vrouter-secret:db/password@"),
        "{}",
        config.spec.commands
    );

    for (place, text) in every_object_but_secrets(&ns.client()).await {
        assert_nowhere(VALUE, &place, &text);
    }
    let log = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(log.contains("dispatching apply"), "the operator's logs were captured");
    assert_nowhere(VALUE, "the operator's log", &log);
}

/// The config's apply script runs, from the dispatches the operator logged
/// for `config` (its name is unique to one test).
fn dispatches_logged(logs: &Mutex<Vec<u8>>, config: &str) -> usize {
    let log = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    log.lines()
        .filter(|l| l.contains("dispatching apply") && l.contains(&format!("config={config} ")))
        .count()
}

#[tokio::test]
async fn rotating_the_secret_applies_the_new_value_once() {
    let logs = captured_logs();
    let site = site("secret-rotation", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let secrets = ns.api::<Secret>();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "vpn"},
        "stringData": {"psk": "first-psk"},
    }))
    .unwrap();
    secrets.create(&Default::default(), &secret).await.unwrap();
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "ipsec"}, "spec": {
            "commands": "set vpn ipsec authentication psk peer secret {{ psk }}\n",
        }}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "rotor"}, "spec": {
            "templateRefs": [{"name": "ipsec"}],
            "params": {"psk": {"secretKeyRef": {"name": "vpn", "key": "psk"}}},
            "targetRefs": [{"name": "r1"}],
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let applied_with = |apply_id: Option<String>| {
        let configs = configs.clone();
        async move {
            let config = configs.get_opt("rotor.r1").await.ok()??;
            let status = config.status.clone()?;
            assert_ne!(status.phase, Phase::Failed, "{}", status.message);
            (status.phase == Phase::Applied && Some(&status.apply_id) != apply_id.as_ref()).then_some(config)
        }
    };
    let first = wait_for("rotor.r1 applied", Duration::from_secs(60), || applied_with(None)).await;
    let first_status = first.status.clone().unwrap();
    let rv = secrets.get("vpn").await.unwrap().metadata.resource_version.unwrap();
    assert_eq!(first_status.secrets_version, format!("vpn={rv}"));
    let generation = first.metadata.generation;

    // Rotate: the value changes, the config's spec does not.
    secrets
        .patch(
            "vpn",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"psk": "second-psk"}})),
        )
        .await
        .unwrap();
    let second = wait_for("rotor.r1 applied again", Duration::from_secs(60), || {
        applied_with(Some(first_status.apply_id.clone()))
    })
    .await;
    assert_eq!(
        second.metadata.generation, generation,
        "a rotation is not a spec change"
    );
    let rv = secrets.get("vpn").await.unwrap().metadata.resource_version.unwrap();
    assert_eq!(second.status.as_ref().unwrap().secrets_version, format!("vpn={rv}"));

    // Wake the config once more without a rotation: nothing is due.
    let reconciles = || {
        site.ctx
            .metrics
            .reconciles
            .get_or_create(&ControllerLabels {
                controller: vrouter_operator::controllers::vrouter_config::CONTROLLER,
            })
            .get()
    };
    let before_poke = reconciles();
    configs
        .patch(
            "rotor.r1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"test/poke": "1"}}})),
        )
        .await
        .unwrap();
    let sandbox = &site.routers["r1"].sandbox;
    wait_for("the poke reconciled", Duration::from_secs(30), || async {
        (reconciles() > before_poke).then_some(())
    })
    .await;
    let calls = sandbox.calls();
    let psk_sets: Vec<&String> = calls.iter().filter(|c| c.starts_with("set vpn ipsec")).collect();
    assert_eq!(
        psk_sets,
        [
            "set vpn ipsec authentication psk peer secret first-psk",
            "set vpn ipsec authentication psk peer secret second-psk"
        ],
        "one apply per value"
    );
    let commits = calls
        .iter()
        .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
        .count();
    assert_eq!(commits, 2, "{calls:?}");
    assert_eq!(dispatches_logged(&logs, "rotor.r1"), 2);
}
