//! What a namespace can reach, and where router secrets end up, with the
//! operator's webhooks registered on a real API server and its controllers
//! applying to KubeVirt VMs through the in-test Kubernetes exec endpoint
//! (a real qemu-ga behind it):
//!
//! - a VRouterTarget reaches a VM in another namespace only with that
//!   namespace's grant: refused at admission and at reconcile (nothing is
//!   exec'd), applied once granted;
//! - a router config holding a pre-shared key and passwords, applied and
//!   read back by drift detection, appears in no ConfigMap, Event, log
//!   line, status or exec URL — only in the drift Secret.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS;
use vrouter_api::vm_access::ANNOTATION_ALLOWED_TARGET_NAMESPACES;
use vrouter_api::{Phase, VRouterConfig, VRouterStatus, VRouterTarget};
use vrouter_operator::runtime::context::{Context, FactoryProviders, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_operator::server::tls::ReloadingCert;
use vrouter_operator::server::webhooks::review::Admission;
use vrouter_operator::server::webhooks::server::{self, VALIDATE_PATH};
use vrouter_operator::server::webhooks::target_cache::TargetCache;
use vrouter_providers::lookup_cache::CachedLookup;
use vrouter_providers::{FactoryContext, KubeLookup};
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::daemon::{AgentFlags, Daemon};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::{AgentProcess, start_agent};

use common::{final_phase, grant_daemon_agents, start_controllers, try_create, wait_for};

const KINDS: [&str; 7] = [
    "vroutertemplates",
    "vroutertargets",
    "vrouterbindings",
    "vrouterparams",
    "vrouterconfigs",
    "proxmoxclusters",
    "vrouterstatuses",
];

/// Everything this test binary logs, operator included, at debug level.
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

/// The webhook server on its own runtime (it must outlive each test's),
/// registered for every write of the operator's kinds; once per binary.
async fn webhooks() {
    static STARTED: OnceLock<()> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        STARTED.get_or_init(|| {
            let (ready, started) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(async move {
                    let env = TestEnv::shared().await;
                    let dir = tempfile::tempdir().unwrap().keep();
                    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
                    std::fs::write(&cert, env.webhook_tls().cert_pem()).unwrap();
                    std::fs::write(&key, env.webhook_tls().key_pem()).unwrap();
                    let tls = ReloadingCert::new(cert, key).unwrap().server_config();
                    let admission = Admission {
                        client: env.client(),
                        metrics: Metrics::new(),
                        templates: Arc::new(vrouter_render::TemplateEngine::new()),
                        targets: TargetCache::watch(env.client(), None),
                    };
                    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                    let port = listener.local_addr().unwrap().port();
                    let (_stop, stopped) = watch::channel(false);
                    tokio::spawn(server::serve_tls(listener, tls, server::router(admission), stopped));
                    register(env, port).await;
                    ready.send(()).unwrap();
                    std::future::pending::<()>().await;
                });
            });
            started.recv().expect("the webhook fixture failed to start");
        });
    })
    .await
    .unwrap();
}

async fn register(env: &TestEnv, port: u16) {
    let configuration = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("vrouter-operator-tenancy".into()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "validate.vrouter.kojuro.date".into(),
            client_config: env
                .webhook_tls()
                .client_config(format!("https://127.0.0.1:{port}{VALIDATE_PATH}")),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["vrouter.kojuro.date".into()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                resources: Some(KINDS.iter().map(|s| s.to_string()).collect()),
                scope: Some("Namespaced".into()),
            }]),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(10),
            ..Default::default()
        }]),
    };
    Api::<ValidatingWebhookConfiguration>::all(env.client())
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
    // The API server loads webhook configurations asynchronously: wait
    // until an invalid target is refused.
    let ns = env.namespace("webhook-ready").await;
    wait_for("the webhook to be called", Duration::from_secs(30), || async {
        let probe: VRouterTarget = serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"generateName": "probe-"}, "spec": {"provider": {"type": "proxmox"}},
        }))
        .unwrap();
        ns.api::<VRouterTarget>()
            .create(&PostParams::default(), &probe)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

/// A KubeVirt VM `vm` in namespace `vm_namespace` behind the in-test
/// Kubernetes API (its virt-launcher pod's agent is a real qemu-ga), and the
/// operator's controllers for namespace `tenant`.
struct KubeVirtSite {
    api: FakeKubeApi,
    sandbox: GuestSandbox,
    _agent: AgentProcess,
    _stop: watch::Sender<bool>,
}

async fn kubevirt_site(tenant: &TestNamespace, vm_namespace: &str, vm: &str) -> KubeVirtSite {
    let env = TestEnv::shared().await;
    let agent = start_agent();
    let sandbox = GuestSandbox::new(agent.dir(), "vyos");
    let api = FakeKubeApi::start().await;
    let uid = "5d1f7a2e-7c1b-4a8e-9b0f-3c2d1e0f9a8b";
    api.put_vmi(vm_namespace, vm, uid, "Running", "node-a");
    api.put_launcher_pod(
        vm_namespace,
        &format!("virt-launcher-{vm}-x1"),
        vm,
        uid,
        "node-a",
        "Running",
        Some(agent.socket_path()),
    );
    sandbox.put_file("config.boot", b"");
    let settings = Settings::default();
    // The objects (Secrets, Namespaces) come from the real API server,
    // uncached so a grant takes effect at once; the VM is reached through
    // the in-test API.
    let providers = Arc::new(FactoryProviders::new(
        CachedLookup::new(KubeLookup::new(env.client()), Duration::ZERO),
        FactoryContext {
            client: Some(api.client()),
            guest_paths: sandbox.paths(),
            ..FactoryContext::default()
        },
    ));
    let ctx = Arc::new(Context::new(env.client(), Metrics::new(), settings, providers));
    let stop = start_controllers(&ctx, tenant.name());
    KubeVirtSite {
        api,
        sandbox,
        _agent: agent,
        _stop: stop,
    }
}

/// Sets (or, with `None`, removes) the grant on Namespace `namespace`.
async fn grant(env: &TestEnv, namespace: &str, allowed: Option<&str>) {
    Api::<Namespace>::all(env.client())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_ALLOWED_TARGET_NAMESPACES: allowed}}})),
        )
        .await
        .unwrap();
}

fn kubevirt_target(vm: &str, vm_namespace: &str) -> Value {
    json!({"metadata": {"name": "t"}, "spec": {"provider": {"type": "kubevirt",
        "kubevirt": {"name": vm, "namespace": vm_namespace}}}})
}

#[tokio::test]
async fn a_target_reaches_a_vm_in_another_namespace_only_with_that_namespace_s_grant() {
    webhooks().await;
    let env = TestEnv::shared().await;
    let tenant = env.namespace("tenant").await;
    let vms = env.namespace("vms").await;
    let site = kubevirt_site(&tenant, vms.name(), "vm1").await;
    let how_to_grant = format!(
        "kubectl annotate namespace {} --overwrite {ANNOTATION_ALLOWED_TARGET_NAMESPACES}={}",
        vms.name(),
        tenant.name()
    );

    // Admission: refused, saying how to grant it.
    let refused = try_create::<VRouterTarget>(&tenant, kubevirt_target("vm1", vms.name()))
        .await
        .expect_err("a target reaching another namespace's VM without its grant was admitted");
    assert!(refused.contains("spec.provider.kubevirt.namespace"), "{refused}");
    assert!(refused.contains(&how_to_grant), "{refused}");
    // Another namespace's grant is not this one's.
    grant(env, vms.name(), Some("someone-else")).await;
    let refused = try_create::<VRouterTarget>(&tenant, kubevirt_target("vm1", vms.name()))
        .await
        .unwrap_err();
    assert!(refused.contains("=someone-else,"), "{refused}");

    // Granted, the target is admitted; the grant is then withdrawn.
    grant(env, vms.name(), Some(&format!("someone-else, {}", tenant.name()))).await;
    try_create::<VRouterTarget>(&tenant, kubevirt_target("vm1", vms.name()))
        .await
        .unwrap();
    grant(env, vms.name(), None).await;

    // Reconcile: the config names the refusal, and nothing reached the VM.
    try_create::<VRouterConfig>(
        &tenant,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "t"}, "commands": "set system host-name r1\n"}}),
    )
    .await
    .unwrap();
    let configs = tenant.api::<VRouterConfig>();
    let message = wait_for(
        "the refusal in the config's status",
        Duration::from_secs(60),
        || async {
            let message = configs.get("c").await.ok()?.status?.message;
            message.contains("does not allow").then_some(message)
        },
    )
    .await;
    assert!(message.contains(&how_to_grant), "{message}");
    assert_eq!(site.api.execs(), [], "an exec reached the VM without the grant");

    // Granted again: applied (a spec change wakes the config at once).
    grant(env, vms.name(), Some(tenant.name())).await;
    configs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"commands": "set system host-name r2\n"}})),
        )
        .await
        .unwrap();
    let (phase, _, message) = final_phase(&configs, "c", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    assert!(
        site.sandbox.calls().contains(&"set system host-name r2".to_owned()),
        "{:?}",
        site.sandbox.calls()
    );
    assert!(
        site.api.execs().iter().all(|e| e.namespace == vms.name()),
        "{:?}",
        site.api.execs()
    );
}

/// The forms a value could take in a text: as is, percent-encoded (a URL's
/// query), and base64 at each of the three alignments (a file written
/// through the guest agent), for the part of it that alignment fixes.
fn encodings(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    let percent: String = value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    forms.push(percent);
    for offset in 0..3 {
        let mut bytes = vec![b'A'; offset];
        bytes.extend_from_slice(value.as_bytes());
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
        // Characters mixing the prefix, and the last group (mixing what
        // follows), are not fixed by the value alone.
        let start = (offset * 4).div_ceil(3);
        let end = encoded.trim_end_matches('=').len().saturating_sub(4);
        if end > start + 8 {
            forms.push(encoded[start..end].to_owned());
        }
    }
    forms
}

fn assert_absent(place: &str, text: &str, secrets: &[&str]) {
    for secret in secrets {
        for form in encodings(secret) {
            assert!(!text.contains(&form), "{place} holds {secret:?} (as {form:?})");
        }
    }
}

#[tokio::test]
async fn router_secrets_reach_only_the_router_and_the_drift_secret() {
    let logs = captured_logs();
    webhooks().await;
    let env = TestEnv::shared().await;
    let ns = env.namespace("secrets").await;
    let site = kubevirt_site(&ns, ns.name(), "vm1").await;
    let psk = "psk-Qw7dZ2xV9mK4";
    let hash = "$6$rT5kP1yX$encHq8Lm3Zb0Wc";
    let plain = "plain-Jv6sN2tR8eU";
    let secrets = [psk, hash, plain];
    try_create::<VRouterTarget>(
        &ns,
        json!({"metadata": {"name": "t"}, "spec": {"provider": {"type": "kubevirt", "kubevirt": {"name": "vm1"}}}}),
    )
    .await
    .unwrap();
    let config = format!(
        "vpn {{\n    ipsec {{\n        site-to-site {{\n            peer 192.0.2.1 {{\n                authentication {{\n                    pre-shared-secret {psk}\n                }}\n            }}\n        }}\n    }}\n}}\n\
         system {{\n    login {{\n        user vyos {{\n            authentication {{\n                encrypted-password \"{hash}\"\n                plaintext-password {plain}\n            }}\n        }}\n    }}\n}}\n"
    );
    let commands = format!(
        "set vpn ipsec site-to-site peer 192.0.2.1 authentication pre-shared-secret {psk}\n\
         set system login user vyos authentication encrypted-password '{hash}'\n\
         set system login user vyos authentication plaintext-password {plain}\n"
    );
    try_create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "t"}, "config": config, "commands": commands}}),
    )
    .await
    .unwrap();
    let configs = ns.api::<VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "c", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}");

    // Drift detection reads the router back, twice.
    let statuses = ns.api::<VRouterStatus>();
    wait_for("the VRouterStatus", Duration::from_secs(60), || async {
        statuses.get_opt("c").await.ok()?
    })
    .await;
    statuses
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "1s"}})),
        )
        .await
        .unwrap();
    let reads_before = site.sandbox.running_config_reads();
    let stored = wait_for("two syncs and the drift Secret", Duration::from_secs(60), || async {
        let status = statuses.get("c").await.ok()?.status?;
        (site.sandbox.running_config_reads() >= reads_before + 2 && status.config_secret_ref == "vrs-c-config")
            .then_some(())?;
        ns.api::<Secret>().get_opt("vrs-c-config").await.ok()?
    })
    .await;

    // They did reach the router, and the drift Secret holds them.
    let running = String::from_utf8_lossy(&site.sandbox.running_config()).into_owned();
    let stored_text: String = stored
        .data
        .unwrap()
        .values()
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    for secret in secrets {
        assert!(running.contains(secret), "the router's running config lacks {secret:?}");
        assert!(stored_text.contains(secret), "the drift Secret lacks {secret:?}");
    }
    assert_eq!(stored.type_.as_deref(), Some("vrouter.kojuro.date/router-config"));

    // Nowhere else: ConfigMaps and Events of every namespace, the statuses
    // of every object of the operator, the exec URLs, the log.
    let all = ListParams::default();
    let config_maps = Api::<ConfigMap>::all(env.client()).list(&all).await.unwrap();
    assert_absent("a ConfigMap", &serde_json::to_string(&config_maps).unwrap(), &secrets);
    let events = Api::<k8s_openapi::api::events::v1::Event>::all(env.client())
        .list(&all)
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.namespace.as_deref()) == Some(ns.name())),
        "the operator recorded events here"
    );
    assert_absent("an Event", &serde_json::to_string(&events).unwrap(), &secrets);
    let core_events = Api::<k8s_openapi::api::core::v1::Event>::all(env.client())
        .list(&all)
        .await
        .unwrap();
    assert_absent("an Event", &serde_json::to_string(&core_events).unwrap(), &secrets);
    let statuses_text: BTreeMap<&str, String> = BTreeMap::from([
        (
            "a VRouterConfig status",
            serde_json::to_string(
                &configs
                    .list(&all)
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .map(|c| &c.status)
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
        ),
        (
            "a VRouterStatus status",
            serde_json::to_string(
                &statuses
                    .list(&all)
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .map(|s| &s.status)
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
        ),
        (
            "a VRouterTarget status",
            serde_json::to_string(
                &ns.api::<VRouterTarget>()
                    .list(&all)
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .map(|t| &t.status)
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
        ),
    ]);
    for (place, text) in &statuses_text {
        assert_absent(place, text, &secrets);
    }
    let execs = site.api.execs();
    assert!(execs.len() > 5, "{} execs", execs.len());
    for exec in &execs {
        assert_absent("an exec URL", &exec.uri, &secrets);
    }
    // The script did travel, on the execs' stdin.
    let stdin: String = execs
        .iter()
        .map(|e| String::from_utf8_lossy(&e.stdin).into_owned())
        .collect();
    assert!(
        encodings(psk)[2..].iter().any(|form| stdin.contains(form)),
        "the apply script went through stdin"
    );
    let log = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(log.contains("vrouter_operator"), "the operator's log was captured");
    assert_absent("the operator's log", &log, &secrets);
}

fn daemon_target(daemon: &Daemon, agent: &str) -> Value {
    json!({"metadata": {"name": "d"}, "spec": {"provider": {"type": "vrouter-daemon",
        "daemon": {"address": daemon.address(), "agentID": agent, "timeoutSeconds": 60}}}})
}

#[tokio::test]
async fn a_target_reaches_a_daemon_agent_only_with_its_namespace_s_grant() {
    webhooks().await;
    let env = TestEnv::shared().await;
    let tenant = env.namespace("daemon-tenant").await;
    let daemon = Daemon::start();
    let agent = daemon.start_agent("edge-1", AgentFlags::default()).await;
    // Uncached Namespaces, so a withdrawn grant takes effect at once.
    let providers = Arc::new(FactoryProviders::new(
        CachedLookup::new(KubeLookup::new(env.client()), Duration::ZERO),
        FactoryContext::default(),
    ));
    let ctx = Arc::new(Context::new(
        env.client(),
        Metrics::new(),
        Settings::default(),
        providers,
    ));
    let _stop = start_controllers(&ctx, tenant.name());
    let named = format!(
        "namespace {:?} is not granted agent \"edge-1\" of the vrouter-daemon at {:?}",
        tenant.name(),
        daemon.address()
    );
    let how_to_grant = format!(
        "kubectl annotate namespace {} --overwrite {ANNOTATION_ALLOWED_DAEMON_AGENTS}=",
        tenant.name()
    );

    // Admission: refused, naming the namespace, endpoint and agent.
    let refused = try_create::<VRouterTarget>(&tenant, daemon_target(&daemon, "edge-1"))
        .await
        .expect_err("a daemon target without its namespace's grant was admitted");
    assert!(refused.contains("spec.provider.daemon"), "{refused}");
    assert!(refused.contains(&named), "{refused}");
    assert!(
        refused.contains(&format!("{how_to_grant}{}/edge-1", daemon.address())),
        "{refused}"
    );
    // Another agent of the same daemon is not this one.
    let other = format!("{}/edge-2", daemon.address());
    grant_daemon_agents(&env.client(), tenant.name(), Some(&other)).await;
    let refused = try_create::<VRouterTarget>(&tenant, daemon_target(&daemon, "edge-1"))
        .await
        .unwrap_err();
    assert!(refused.contains(&named), "{refused}");

    // Granted by pattern, the target is admitted; the grant is then withdrawn.
    let by_pattern = format!("{other}, {}/edge-*", daemon.address());
    grant_daemon_agents(&env.client(), tenant.name(), Some(&by_pattern)).await;
    try_create::<VRouterTarget>(&tenant, daemon_target(&daemon, "edge-1"))
        .await
        .unwrap();
    grant_daemon_agents(&env.client(), tenant.name(), None).await;

    // Reconcile fails closed: the config names the refusal; nothing ran.
    try_create::<VRouterConfig>(
        &tenant,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "d"}, "commands": "set system host-name r1\n"}}),
    )
    .await
    .unwrap();
    let configs = tenant.api::<VRouterConfig>();
    let message = wait_for(
        "the refusal in the config's status",
        Duration::from_secs(60),
        || async {
            let message = configs.get("c").await.ok()?.status?.message;
            message.contains("is not granted").then_some(message)
        },
    )
    .await;
    assert!(message.contains(&named), "{message}");
    assert_eq!(
        agent.sandbox().calls(),
        Vec::<String>::new(),
        "the agent ran a script without the grant"
    );

    // Granted again: applied through the real daemon and agent.
    grant_daemon_agents(&env.client(), tenant.name(), Some(&by_pattern)).await;
    configs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"commands": "set system host-name r2\n"}})),
        )
        .await
        .unwrap();
    let (phase, _, message) = final_phase(&configs, "c", Duration::from_secs(90)).await;
    assert_eq!(phase, Phase::Applied, "{message}\nagent log:\n{}", agent.log());
    assert!(
        agent.sandbox().calls().contains(&"set system host-name r2".to_owned()),
        "{:?}",
        agent.sandbox().calls()
    );
}
