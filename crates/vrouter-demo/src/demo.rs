//! The demo's steps, in the order a person watches them: start the control
//! plane and the simulated routers, apply the examples, wait for every
//! VRouterConfig to reach Applied, show one router's rendered config, break
//! one router by hand and watch the operator repair it.
//!
//! Everything started here is owned by locals of [`run`]: when the future
//! is dropped (finished, failed, or cancelled by Ctrl-C) the controllers
//! stop, the agents are killed, and the control plane and every temporary
//! directory are removed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use tokio::sync::watch;
use vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS;
use vrouter_api::vm_access::ANNOTATION_ALLOWED_TARGET_NAMESPACES;
use vrouter_api::{Phase, VRouterConfig, VRouterStatus, VRouterTarget};
use vrouter_operator::runtime::context::{Context, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_providers::{GuestPaths, KubeLookup};
use vrouter_test_apiserver::TestEnv;

use crate::examples;
use crate::plan::{self, Item, Key, Plan, SimRouter, Simulation};
use crate::progress::{say, secs};
use crate::providers::DemoProviders;
use crate::sim::{CONFIG_BOOT_IN_GUEST, PROXMOX_NODE, SHOW_RUNNING_IN_GUEST, Simulated};

pub struct Options {
    pub examples: PathBuf,
    pub keep: bool,
    /// The longest any one step may take.
    pub step_timeout: Duration,
    pub log_file: PathBuf,
}

/// The token the simulated Proxmox VE accepts when no example names one.
const FALLBACK_TOKEN: (&str, &str) = ("demo@pve!demo", "demo-only");
/// How often the demo looks at the API server while it waits.
const POLL: Duration = Duration::from_millis(200);
/// What the demo's hand edit writes into the router's startup config.
const HAND_EDITED: &str = "system {\n    host-name edited-by-hand\n}\n";
/// The drift check's interval for the demo (the operator's default is 5m).
const DEMO_SYNC_INTERVAL: &str = "1s";

/// Runs the demo. `finished` is set once every step has succeeded (so an
/// interrupt of `--keep` afterwards is a normal end).
pub async fn run(opts: &Options, finished: &AtomicBool) -> anyhow::Result<()> {
    let started = Instant::now();
    let sources = examples::load(&opts.examples)?;
    let files: BTreeSet<&str> = sources.iter().map(|s| s.file.as_str()).collect();
    say(
        "examples",
        format!(
            "{} objects in {} files from {}",
            sources.len(),
            files.len(),
            opts.examples.display()
        ),
    );
    let routers = plan::routers(&sources);
    let token = plan::proxmox_token(&sources).unwrap_or((FALLBACK_TOKEN.0.into(), FALLBACK_TOKEN.1.into()));

    say("setup", "starting etcd and kube-apiserver on 127.0.0.1 ...");
    let t = Instant::now();
    let env = TestEnv::start()
        .await
        .map_err(|e| anyhow!("cannot start the local control plane: {e}"))?;
    say(
        "setup",
        format!(
            "kube-apiserver ready at {} with the vrouter CRDs installed ({})",
            env.apiserver_url(),
            secs(t.elapsed())
        ),
    );

    let sim = Simulated::start(&routers, (&token.0, &token.1)).await?;
    for router in &routers {
        say("router", describe(router, &sim));
    }
    let plan = plan::plan(&sources, &sim.loopback());
    for note in &plan.notes {
        say(note.kind.tag(), &note.text);
    }
    let client = env.client();
    create_namespaces(&client, &plan).await?;
    let (stop, controllers) = start_operator(&client, &sim, opts);

    for item in &plan.items {
        apply(&client, item).await?;
        say("apply", format!("{:<28} {} {}", item.file, item.kind, item.key));
    }

    let describe_target: HashMap<Key, String> = routers
        .iter()
        .map(|r| (r.target.clone(), short_description(r)))
        .collect();
    wait_all_applied(&client, &plan, &describe_target, opts.step_timeout).await?;
    show_rendered(&client, &plan, &sim).await?;
    repair_drift(&client, &plan, &sim, opts.step_timeout).await?;

    let total = plan.expected.len();
    say(
        "done",
        format!(
            "demo complete: {total}/{total} VRouterConfigs Applied, drift repaired, in {}",
            secs(started.elapsed())
        ),
    );
    finished.store(true, Ordering::SeqCst);

    if opts.keep {
        check_kubeconfig(&env).await?;
        say("keep", "everything keeps running. In another terminal:");
        println!("         export KUBECONFIG={}", env.kubeconfig_path().display());
        println!("         kubectl get vroutertargets,vrouterbindings,vrouterconfigs,vrouterstatuses -A");
        say("keep", "press Ctrl-C to stop everything and clean up");
        std::future::pending::<()>().await;
    }
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers).await;
    Ok(())
}

/// Starts the operator's controllers in this process, every router reached
/// through its simulation; they stop when the returned sender says so.
fn start_operator(
    client: &kube::Client,
    sim: &Simulated,
    opts: &Options,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    say(
        "substitute",
        format!(
            "drift detection reads `{CONFIG_BOOT_IN_GUEST}` and runs `{}` in each simulated guest's own directory instead of {} and `{}`: the guests share this machine's filesystem",
            SHOW_RUNNING_IN_GUEST.join(" "),
            GuestPaths::default().config_boot,
            GuestPaths::default().running_config.join(" ")
        ),
    );
    let providers = Arc::new(DemoProviders {
        lookup: KubeLookup::new(client.clone()),
        kubevirt_client: sim.kube_api.client(),
        guest_paths: sim.guest_paths(),
        proxmox_clients: Default::default(),
        kept: Default::default(),
    });
    let ctx = Arc::new(Context::new(
        client.clone(),
        Metrics::new(),
        Settings::default(),
        providers,
    ));
    let (stop, mut stopping) = watch::channel(false);
    let controllers = tokio::spawn(vrouter_operator::controllers::run(ctx, None, async move {
        let _ = stopping.wait_for(|s| *s).await;
    }));
    say(
        "operator",
        format!(
            "controllers running in this process for all namespaces (log: {})",
            opts.log_file.display()
        ),
    );
    (stop, controllers)
}

fn short_description(router: &SimRouter) -> String {
    match &router.simulation {
        Simulation::KubeVirt { vmi_namespace, vmi } => format!("KubeVirt VMI {vmi_namespace}/{vmi}"),
        Simulation::Proxmox { vmid } => format!("Proxmox VE VM {vmid}"),
        Simulation::Daemon { agent_id } => format!("vrouter-daemon agent {agent_id}"),
    }
}

fn describe(router: &SimRouter, sim: &Simulated) -> String {
    let target = &router.target;
    let backing = match &router.simulation {
        Simulation::KubeVirt { .. } => format!("via the simulated KubeVirt API at {}", sim.kube_api.url()),
        Simulation::Proxmox { .. } => format!(
            "on node {PROXMOX_NODE} of the simulated Proxmox VE at {}",
            sim.proxmox.url(0)
        ),
        Simulation::Daemon { .. } => format!(
            "connected to the real vrouter-daemon server at {}",
            sim.daemon.address()
        ),
    };
    if let Some(agent) = sim.agents.get(&target.name) {
        return format!(
            "{target}: {} {backing}; real vrouter-agent, VyOS stand-ins in {}",
            short_description(router),
            agent.sandbox().dir().display()
        );
    }
    let guest = sim.guests.get(&target.name).map_or(String::new(), |g| {
        format!(
            "; real qemu-ga pid {} in {}, VyOS stand-ins in {}",
            g.agent.pid().unwrap_or_default(),
            g.root.display(),
            g.sandbox.dir().display()
        )
    });
    format!("{target}: {} {backing}{guest}", short_description(router))
}

async fn create_namespaces(client: &kube::Client, plan: &Plan) -> anyhow::Result<()> {
    let grants = cross_namespace_grants(plan);
    let mut namespaces: BTreeSet<&str> = plan.items.iter().map(|i| i.key.namespace.as_str()).collect();
    namespaces.extend(grants.keys().map(String::as_str));
    let api: Api<Namespace> = Api::all(client.clone());
    for name in namespaces {
        let annotations = grants.get(name).map(|allowed| {
            let value = allowed.iter().map(String::as_str).collect::<Vec<_>>().join(",");
            json!({ ANNOTATION_ALLOWED_TARGET_NAMESPACES: value })
        });
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}}))?;
        match api.create(&PostParams::default(), &namespace).await {
            Ok(_) => say("apply", format!("{:<28} Namespace {name}", "(for the examples)")),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating namespace {name}")),
        }
        if let Some(allowed) = grants.get(name) {
            let patch = json!({"metadata": {"annotations": annotations}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("granting namespace {name}'s VMs to VRouterTargets"))?;
            let from: Vec<&str> = allowed.iter().map(String::as_str).collect();
            say(
                "apply",
                format!(
                    "{:<28} Namespace {name} lets VRouterTargets in {} reach its VMs",
                    "(for the examples)",
                    from.join(", ")
                ),
            );
        }
    }
    grant_daemon_agents(&api, plan).await
}

/// Grants each namespace the daemon agents its examples' targets name, as a
/// cluster administrator would (`vrouter_api::daemon_access`).
async fn grant_daemon_agents(api: &Api<Namespace>, plan: &Plan) -> anyhow::Result<()> {
    let mut grants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for item in plan.items.iter().filter(|i| i.kind == "VRouterTarget") {
        let target = serde_json::from_value::<VRouterTarget>(item.value.clone()).ok();
        if let Some(reach) = target.and_then(|t| t.daemon_reach()) {
            let entry = format!("{}/{}", reach.endpoint, reach.agent_id);
            grants.entry(reach.target_namespace).or_default().insert(entry);
        }
    }
    for (name, entries) in grants {
        let value = entries.into_iter().collect::<Vec<_>>().join(",");
        let patch = json!({"metadata": {"annotations": {ANNOTATION_ALLOWED_DAEMON_AGENTS: &value}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("granting namespace {name} its vrouter-daemon agents"))?;
        say(
            "apply",
            format!(
                "{:<28} Namespace {name} may reach vrouter-daemon agents {value}",
                "(for the examples)"
            ),
        );
    }
    Ok(())
}

/// For each VM namespace the examples' KubeVirt targets reach from another
/// namespace, those target namespaces: the VM namespace must consent
/// (`vrouter_api::vm_access`).
fn cross_namespace_grants(plan: &Plan) -> BTreeMap<String, BTreeSet<String>> {
    let mut grants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for item in plan.items.iter().filter(|i| i.kind == "VRouterTarget") {
        let Ok(target) = serde_json::from_value::<VRouterTarget>(item.value.clone()) else {
            continue;
        };
        if let Some(reach) = target.cross_namespace_vm() {
            grants
                .entry(reach.vm_namespace)
                .or_default()
                .insert(reach.target_namespace);
        }
    }
    grants
}

async fn apply(client: &kube::Client, item: &Item) -> anyhow::Result<()> {
    let api_version = item.value["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, &item.kind);
    // The CRDs know their plurals (`vrouterparams`, not a guessed `…paramses`).
    let plural = vrouter_api::crds::all()
        .into_iter()
        .find(|crd| crd.spec.group == group && crd.spec.names.kind == item.kind)
        .map(|crd| crd.spec.names.plural);
    let resource = match plural {
        Some(plural) => ApiResource::from_gvk_with_plural(&gvk, &plural),
        None => ApiResource::from_gvk(&gvk),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &item.key.namespace, &resource);
    let object: DynamicObject = serde_json::from_value(item.value.clone())
        .with_context(|| format!("{}: {} {} is not a Kubernetes object", item.file, item.kind, item.key))?;
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("{}: creating {} {}", item.file, item.kind, item.key))?;
    Ok(())
}

/// Waits until every expected VRouterConfig is Applied, printing each
/// phase change as it happens.
async fn wait_all_applied(
    client: &kube::Client,
    plan: &Plan,
    routers: &HashMap<Key, String>,
    limit: Duration,
) -> anyhow::Result<()> {
    let total = plan.expected.len();
    say("wait", format!("{total} VRouterConfigs to reach Applied"));
    let api: Api<VRouterConfig> = Api::all(client.clone());
    let started = Instant::now();
    let mut seen: HashMap<Key, (Phase, String)> = HashMap::new();
    let mut applied = 0;
    loop {
        let list = api.list(&Default::default()).await.context("listing VRouterConfigs")?;
        let by_key: HashMap<Key, &VRouterConfig> = list
            .items
            .iter()
            .map(|c| {
                (
                    Key::new(
                        c.metadata.namespace.as_deref().unwrap_or_default(),
                        c.metadata.name.as_deref().unwrap_or_default(),
                    ),
                    c,
                )
            })
            .collect();
        for (key, target) in &plan.expected {
            let Some(config) = by_key.get(key) else { continue };
            let status = config.status.clone().unwrap_or_default();
            let now = (status.phase, status.message.clone());
            if seen.get(key) == Some(&now) {
                continue;
            }
            let router = routers.get(target).map_or("?", String::as_str);
            if status.phase == Phase::Applied {
                applied += 1;
                println!(
                    "[{applied}/{total}] applied   {key}  on {router}  ({})",
                    secs(started.elapsed())
                );
            } else {
                let why = if status.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", status.message)
                };
                println!("      {:<9} {key}{why}", status.phase.as_str());
            }
            if seen.get(key).is_some_and(|(p, _)| *p == Phase::Applied) && status.phase != Phase::Applied {
                applied -= 1;
            }
            seen.insert(key.clone(), now);
        }
        if applied == total {
            return Ok(());
        }
        if started.elapsed() > limit {
            let missing: Vec<String> = plan
                .expected
                .iter()
                .filter(|(k, _)| seen.get(k).is_none_or(|(p, _)| *p != Phase::Applied))
                .map(|(k, _)| match seen.get(k) {
                    Some((phase, message)) => format!("{k} ({}: {message})", phase.as_str()),
                    None => format!("{k} (never created)"),
                })
                .collect();
            bail!("not Applied after {}: {}", secs(limit), missing.join("; "));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The generated config the demo shows: one a binding rendered, on a
/// router with a guest (so what it ran can be shown too).
fn render_pick<'a>(plan: &'a Plan, sim: &Simulated) -> Option<&'a (Key, Key)> {
    let with_guest = |(_, t): &&(Key, Key)| sim.guests.contains_key(&t.name);
    plan.expected
        .iter()
        .filter(with_guest)
        .rfind(|(c, _)| c.name.contains('.'))
        .or_else(|| plan.expected.iter().find(with_guest))
}

async fn show_rendered(client: &kube::Client, plan: &Plan, sim: &Simulated) -> anyhow::Result<()> {
    let Some((config_key, target)) = render_pick(plan, sim) else {
        say("render", "no router with a guest to show");
        return Ok(());
    };
    let api: Api<VRouterConfig> = Api::namespaced(client.clone(), &config_key.namespace);
    let config = api.get(&config_key.name).await.context("reading the config to show")?;
    let origin = config
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(vrouter_api::constants::LABEL_BINDING))
        .map_or("written directly".to_owned(), |b| {
            format!("rendered by VRouterBinding {}/{b}", config_key.namespace)
        });
    say(
        "render",
        format!("VRouterConfig {config_key} for VRouterTarget {target}, {origin}:"),
    );
    print_block("config (a config.boot fragment)", &config.spec.config);
    print_block("commands", &config.spec.commands);
    let guest = &sim.guests[&target.name];
    let ran = guest.sandbox.calls().join("\n");
    say(
        "render",
        "what the router ran in its guest (vbash on the simulated VyOS, in order):",
    );
    print_block("calls", &ran);
    if let Some(loaded) = guest.sandbox.loaded_config() {
        say(
            "render",
            format!("`load` received {} bytes of config.boot fragment", loaded.len()),
        );
    }
    Ok(())
}

fn print_block(title: &str, text: &str) {
    println!("    {title}:");
    if text.trim().is_empty() {
        println!("      (empty)");
    }
    for line in text.lines() {
        println!("      | {line}");
    }
}

/// Edits a router's startup config by hand and waits for the operator to
/// notice and apply the declared config again.
async fn repair_drift(client: &kube::Client, plan: &Plan, sim: &Simulated, limit: Duration) -> anyhow::Result<()> {
    // A config written directly, on a router with a guest; else any such.
    let with_guest = |(_, t): &&(Key, Key)| sim.guests.contains_key(&t.name);
    let Some((config_key, target)) = plan
        .expected
        .iter()
        .filter(with_guest)
        .find(|(c, _)| !c.name.contains('.'))
        .or_else(|| plan.expected.iter().find(with_guest))
    else {
        bail!("no simulated router with a guest to show drift detection on");
    };
    let guest = &sim.guests[&target.name];
    let statuses: Api<VRouterStatus> = Api::namespaced(client.clone(), &config_key.namespace);
    let baseline = wait_for_baseline(&statuses, config_key, target, limit).await?;
    let commits = || {
        guest
            .sandbox
            .calls()
            .iter()
            .filter(|c| vrouter_test_peers::guest::is_commit_call(c))
            .count()
    };
    let before = commits();
    let config_boot = guest.config_boot();
    std::fs::write(&config_boot, HAND_EDITED).with_context(|| format!("editing {}", config_boot.display()))?;
    say(
        "drift",
        format!(
            "someone changes {target} by hand and saves (its /config/config.boot now says host-name edited-by-hand)"
        ),
    );
    let configs: Api<VRouterConfig> = Api::namespaced(client.clone(), &config_key.namespace);
    watch_the_repair(
        &statuses,
        &configs,
        config_key,
        &baseline.baseline_hash,
        || commits() - before,
        limit,
    )
    .await
}

/// Waits for the VRouterStatus the operator creates after the first apply,
/// makes it sync every second, and waits for its first baseline.
async fn wait_for_baseline(
    statuses: &Api<VRouterStatus>,
    config_key: &Key,
    target: &Key,
    limit: Duration,
) -> anyhow::Result<vrouter_api::VRouterStatusStatus> {
    say(
        "drift",
        format!("waiting for the VRouterStatus {config_key} the operator creates after the first apply"),
    );
    wait(limit, "the VRouterStatus", || async {
        statuses.get_opt(&config_key.name).await.ok().flatten()
    })
    .await?;
    statuses
        .patch(
            &config_key.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": DEMO_SYNC_INTERVAL}})),
        )
        .await
        .context("shortening the drift check interval")?;
    say(
        "shorten",
        format!("VRouterStatus {config_key}: spec.syncInterval 5m -> {DEMO_SYNC_INTERVAL}"),
    );
    let baseline = wait(limit, "a baseline of the startup config", || async {
        statuses
            .get_opt(&config_key.name)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.status)
            .filter(|s| !s.baseline_hash.is_empty())
    })
    .await?;
    say(
        "drift",
        format!("baseline of {target}'s /config/config.boot: {}", baseline.baseline_hash),
    );
    Ok(baseline)
}

/// Watches a hand-edited router until drift detection saw the edit and the
/// declared config was applied again (`reapplies` counts those applies).
async fn watch_the_repair(
    statuses: &Api<VRouterStatus>,
    configs: &Api<VRouterConfig>,
    config_key: &Key,
    baseline: &str,
    reapplies: impl Fn() -> usize,
    limit: Duration,
) -> anyhow::Result<()> {
    let edited = Instant::now();
    let mut detected = false;
    loop {
        let status = statuses
            .get_opt(&config_key.name)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.status)
            .unwrap_or_default();
        let phase = configs
            .get_opt(&config_key.name)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.status)
            .map(|s| s.phase)
            .unwrap_or_default();
        if !detected && (status.drift_detected || phase != Phase::Applied || reapplies() > 0) {
            detected = true;
            say(
                "drift",
                format!(
                    "detected after {}: VRouterStatus {config_key} driftDetected, VRouterConfig sent back to be applied again",
                    secs(edited.elapsed())
                ),
            );
        }
        if detected
            && reapplies() > 0
            && phase == Phase::Applied
            && !status.drift_detected
            && status.baseline_hash != baseline
        {
            say(
                "drift",
                format!(
                    "repaired after {}: the declared config was applied again ({} apply), VRouterConfig {config_key} Applied, new baseline {}",
                    secs(edited.elapsed()),
                    reapplies(),
                    status.baseline_hash
                ),
            );
            let running = if status.running_config_hash.is_empty() {
                "not readable".to_owned()
            } else {
                status.running_config_hash.clone()
            };
            say(
                "drift",
                format!(
                    "the router's configs as last read are in Secret {}/{} (startup {}, running {running})",
                    config_key.namespace, status.config_secret_ref, status.startup_config_hash
                ),
            );
            return Ok(());
        }
        if edited.elapsed() > limit {
            bail!(
                "the drift of {config_key} was not repaired within {} (config {}, driftDetected {}, re-applies {})",
                secs(limit),
                phase.as_str(),
                status.drift_detected,
                reapplies()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn wait<T, F, Fut>(limit: Duration, what: &str, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    vrouter_test_peers::eventually(limit, check)
        .await
        .ok_or_else(|| anyhow!("timed out after {} waiting for {what}", secs(limit)))
}

/// Proves the kubeconfig the demo prints works before printing it.
async fn check_kubeconfig(env: &TestEnv) -> anyhow::Result<()> {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig_path()).context("reading the kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    Api::<VRouterConfig>::all(client)
        .list(&Default::default())
        .await
        .context("the kubeconfig does not reach the API server")?;
    Ok(())
}
