//! The examples users start from, `testdata/examples/`, applied as they
//! are on the node, with only the addresses the operator dials (the
//! Proxmox endpoints, the vrouter-daemon address) and the Proxmox token
//! replaced by the in-test peers'.
//!
//! The KubeVirt targets take KubeVirt's data path: each VMI has a launcher
//! pod (labelled as KubeVirt labels it) whose `compute` container holds the
//! host's `virsh`, with a real libvirtd's socket directory mounted where
//! libvirt keeps it; that libvirtd runs the guest under QEMU. The
//! operator's pods exec into the container through the API server and the
//! kubelet, under the chart's role. What stands in for KubeVirt is what its
//! controllers write: the VMI object, the launcher pod (made here, holding
//! only `virsh`: libvirtd runs beside the node rather than inside the
//! container, so that one daemon serves both VMIs), and the VMI's status,
//! written as virt-handler would once the pod runs.
//!
//! `kubectl wait --for=condition=Ready` (kubectl of the API server's
//! release) on the example binding returns; every config is Applied on the
//! router its target names, which ran it once, with every command, its
//! config fragment and its `save`; the daemon target is Ready (its agent
//! seen connected from the pods); and the two examples that show what the
//! operator writes (a generated config, a VRouterStatus) match what it
//! wrote. The namespaces are deleted before the guests stop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::discovery::pinned_kind;
use vrouter_api::VRouterStatus;
use vrouter_qga::Transport;
use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};
use vrouter_test_peers::vm::router::{RouterView, router_overlay};
use vrouter_test_peers::vm::{Domain, Libvirt, VirshTransport};

use super::proxmox::{BOOT_BOUND, ProxmoxSite, TOKEN_ID, TOKEN_SECRET};
use super::rollout::{api_in, condition_is_true};
use super::*;

/// The examples' own namespace, and the namespace of the VM that consents
/// to be configured from it (05-target-kubevirt.yaml).
const EXAMPLES_NS: &str = "network";
const VM_NS: &str = "production";
/// The VMI both KubeVirt examples name: 05's in [`VM_NS`], 10's in the
/// target's own namespace.
const VMI: &str = "vyos-router-a";
const BINDING: &str = "bgp-binding";
/// The examples that show what the operator writes, not what users apply.
const GENERATED_CONFIG: &str = "11-config-generated.yaml";
const OPERATOR_STATUS: &str = "12-status.yaml";
/// The daemon target of 08-target-daemon.yaml and the agent it names.
const DAEMON_TARGET: &str = "site-c-routers";
const DAEMON_AGENT: &str = "router-c";
/// The Proxmox guest, by the name [`guest_of`] gives it.
const PROXMOX: &str = "proxmox";
/// Which guest runs which config: the binding's two routers (05 through
/// KubeVirt, 06 through Proxmox) and 10's direct config, on the VMI of the
/// same name in the target's own namespace.
/// In the order of the guests' names.
const CONFIGS_BY_GUEST: [(&str, &str); 3] = [
    (EXAMPLES_NS, "vyos-router-a-config"),
    (VM_NS, "bgp-binding.site-a-routers"),
    (PROXMOX, "bgp-binding.site-b-routers"),
];
/// The example binding soaks 1m30s between its two routers.
const ROLLOUT_BOUND: Duration = Duration::from_secs(360);

/// The libvirtd and its two guests, one per VMI namespace, named as
/// KubeVirt names a VMI's domain (`<namespace>_<name>`), starting on a
/// thread of their own: libvirtd probes QEMU for up to a minute first.
pub struct KubeVirtGuests {
    starting: std::thread::JoinHandle<Vec<(&'static str, Domain)>>,
}

/// Starts libvirtd and both guests early: they boot while the node starts
/// and the chart installs.
pub fn boot_guests() -> KubeVirtGuests {
    let starting = std::thread::spawn(|| {
        let libvirt = Arc::new(Libvirt::start().unwrap_or_else(|e| panic!("starting libvirtd: {e}")));
        [VM_NS, EXAMPLES_NS]
            .into_iter()
            .map(|ns| {
                let domain = libvirt
                    .start_domain(&format!("{ns}_{VMI}"), router_overlay("vyos"))
                    .unwrap_or_else(|e| panic!("starting the guest of VMI {ns}/{VMI}: {e}"));
                (ns, domain)
            })
            .collect()
    });
    KubeVirtGuests { starting }
}

impl KubeVirtGuests {
    fn started(self) -> Vec<(&'static str, Domain)> {
        self.starting
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// Applies the examples and checks what became of them (module docs).
pub async fn the_examples_apply(
    node: &TestNode,
    pve: &ProxmoxSite,
    daemon: &Daemon,
    daemon_address: &str,
    guests: KubeVirtGuests,
) {
    let guests = tokio::task::spawn_blocking(move || guests.started())
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic()));
    let _agent: Agent = daemon.start_agent(DAEMON_AGENT, AgentFlags::default()).await;
    let image = node.import_virsh_image().expect("the virsh image");
    let mut views = BTreeMap::new();
    for (ns, domain) in &guests {
        let daemon_grant = (*ns == EXAMPLES_NS).then(|| format!("{daemon_address}/{DAEMON_AGENT}"));
        namespace_named(node, ns, *ns == VM_NS, daemon_grant).await;
        views.insert(*ns, kubevirt_vm(node, ns, domain, image).await);
    }
    let substitutes = Substitutes {
        pve_endpoint: format!("https://{}", pve.address),
        daemon_address: daemon_address.to_owned(),
    };
    for object in examples_to_apply() {
        apply(node, substitutes.apply(object)).await;
    }
    kubectl_wait_ready(node).await;

    let mut records = BTreeMap::new();
    records.insert(PROXMOX, GuestRecord::read(&pve.view).await);
    for (ns, view) in &views {
        records.insert(*ns, GuestRecord::read(view).await);
    }
    each_config_ran_once_on_its_router(node, &records).await;
    the_daemon_target_is_ready(node).await;
    the_operators_writes_match_the_examples(node).await;

    // Before the guests stop: the operator cleans up after the configs.
    drop(views);
    for ns in [EXAMPLES_NS, VM_NS] {
        namespace_deleted(node, ns).await;
    }
    tokio::task::spawn_blocking(move || drop(guests))
        .await
        .expect("the guests stopped");
}

/// What a guest's stubs recorded since its last reset.
#[derive(Debug)]
struct GuestRecord {
    /// The apply ids, in order, each ended before the next began.
    runs: Vec<String>,
    calls: Vec<String>,
    loaded: Vec<String>,
}

impl GuestRecord {
    async fn read<T: Transport>(view: &RouterView<T>) -> GuestRecord {
        GuestRecord {
            runs: view
                .apply_runs()
                .await
                .expect("the guest's journal")
                .expect("no apply still runs in the guest"),
            calls: view.calls().await.expect("the guest's calls"),
            loaded: view.loaded_configs().await.expect("the guest's loads"),
        }
    }
}

/// Every config in the examples' namespace is Applied on the guest its
/// target names ([`CONFIGS_BY_GUEST`]), and each guest ran exactly its
/// configs, once each, with every command, the config fragment loaded and
/// `save` called when the config asks for it.
async fn each_config_ran_once_on_its_router(node: &TestNode, records: &BTreeMap<&str, GuestRecord>) {
    let configs = api_of_ns(node, "VRouterConfig", "vrouterconfigs")
        .list(&ListParams::default())
        .await
        .expect("the configs")
        .items;
    let mut by_guest: BTreeMap<&str, Vec<&DynamicObject>> = BTreeMap::new();
    for config in &configs {
        assert!(condition_is_true(config, "Applied"), "not Applied: {config:?}");
        by_guest.entry(guest_of(node, config).await).or_default().push(config);
    }
    let placed: Vec<(&str, String)> = by_guest
        .iter()
        .flat_map(|(guest, configs)| configs.iter().map(move |c| (*guest, c.name_any())))
        .collect();
    let expected: Vec<(&str, String)> = CONFIGS_BY_GUEST.iter().map(|(g, c)| (*g, (*c).to_owned())).collect();
    assert_eq!(placed, expected, "which guest runs which config");
    for (guest, record) in records {
        ran_its_configs_once(guest, &by_guest[guest], record);
    }
}

/// The daemon target (08), which no config names, is Ready: the pods
/// reached the vrouter-daemon and found its agent connected.
async fn the_daemon_target_is_ready(node: &TestNode) {
    let targets = api_of_ns(node, "VRouterTarget", "vroutertargets");
    node.until("the daemon target Ready", || async {
        let target = targets.get(DAEMON_TARGET).await.ok()?;
        (condition_is_true(&target, "Ready") && target.data["status"]["vmRunning"] == true).then_some(())
    })
    .await;
}

/// Deletes namespace `name` and waits until it is gone (the operator's
/// finalizers done).
async fn namespace_deleted(node: &TestNode, name: &str) {
    let namespaces = Api::<Namespace>::all(node.client());
    namespaces
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting namespace {name}: {e}"));
    node.until("the namespace gone", || async {
        namespaces.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A namespace with this exact name (the examples name theirs), its
/// `default` ServiceAccount there; `consents` annotates it to allow
/// targets in [`EXAMPLES_NS`] to configure its VMs; `daemon_grant` grants
/// its targets those vrouter-daemon agents.
async fn namespace_named(node: &TestNode, name: &str, consents: bool, daemon_grant: Option<String>) {
    let mut annotations = json!({});
    if consents {
        annotations["vrouter.kojuro.date/allowed-target-namespaces"] = json!(EXAMPLES_NS);
    }
    if let Some(grant) = daemon_grant {
        annotations["vrouter.kojuro.date/allowed-daemon-agents"] = json!(grant);
    }
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}})).expect("a Namespace");
    Api::<Namespace>::all(node.client())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    let accounts: Api<ServiceAccount> = Api::namespaced(node.client(), name);
    node.until("the namespace's default ServiceAccount", || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await;
}

/// What KubeVirt makes for a running VMI `ns/VMI`, made here: the VMI, its
/// launcher pod (`compute` container with virsh and the libvirtd's socket
/// directory), and once the pod runs, the VMI's status as virt-handler
/// writes it. Returns the test's own view into the guest.
async fn kubevirt_vm(node: &TestNode, ns: &str, domain: &Domain, image: &str) -> RouterView<VirshTransport> {
    let vmis = Api::<DynamicObject>::namespaced_with(node.client(), ns, &vmi_resource());
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": VMI},
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "256Mi"}}}},
    }))
    .expect("a VMI");
    let vmi = vmis
        .create(&PostParams::default(), &vmi)
        .await
        .unwrap_or_else(|e| panic!("creating VMI {ns}/{VMI}: {e}"));
    let uid = vmi.metadata.uid.expect("the VMI's uid");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": format!("virt-launcher-{VMI}-x7k2p"),
            "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": VMI, "kubevirt.io/created-by": uid},
        },
        "spec": {
            "containers": [{
                "name": "compute", "image": image, "imagePullPolicy": "Never",
                "command": ["/bin/sleep", "86400"],
                "volumeMounts": [{"name": "libvirt-runtime", "mountPath": "/var/run/libvirt"}],
            }],
            "volumes": [{"name": "libvirt-runtime",
                         "hostPath": {"path": domain.libvirt().socket_dir(), "type": "Directory"}}],
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
        },
    }))
    .expect("a launcher pod");
    let pods: Api<Pod> = Api::namespaced(node.client(), ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating the launcher pod in {ns}: {e}"));
    let pod_name = pod.metadata.name.clone().expect("named");
    node.until("the launcher pod Running", || async {
        let pod = pods.get(&pod_name).await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    vmis.patch(
        VMI,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "nodeName": NODE_NAME}})),
    )
    .await
    .unwrap_or_else(|e| panic!("writing VMI {ns}/{VMI}'s status: {e}"));
    domain
        .wait_for_agent(BOOT_BOUND)
        .await
        .unwrap_or_else(|e| panic!("the agent of VMI {ns}/{VMI}: {e}"));
    let view = RouterView::new(VirshTransport::new(domain, Duration::from_secs(60)));
    view.reset().await.expect("the guest's router state reset");
    view
}

fn vmi_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    ApiResource::from_gvk_with_plural(&gvk, "virtualmachineinstances")
}

fn examples_dir() -> PathBuf {
    workspace_root().join("testdata/examples")
}

/// Every object of the examples users apply, in the files' order.
fn examples_to_apply() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("testdata/examples")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name != GENERATED_CONFIG && name != OPERATOR_STATUS
        })
        .flat_map(|path| documents(&path))
        .collect()
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.split("\n---\n")
        .map(|document| serde_yaml::from_str::<Value>(document).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|value| !value.is_null())
        .collect()
}

/// The example of `file` (one object).
fn example(file: &str) -> Value {
    let mut objects = documents(&examples_dir().join(file));
    assert_eq!(objects.len(), 1, "{file} holds one object");
    objects.remove(0)
}

/// What the in-test peers replace in the examples.
struct Substitutes {
    pve_endpoint: String,
    daemon_address: String,
}

impl Substitutes {
    /// `object` with the peers' addresses and credentials. The in-test
    /// Proxmox API's certificate is self-signed, so its cluster skips
    /// verification (the ProxmoxCluster has no CA field to trust it by).
    fn apply(&self, mut object: Value) -> Value {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "Secret" => {
                object["stringData"]["api-token-id"] = json!(TOKEN_ID);
                object["stringData"]["api-token-secret"] = json!(TOKEN_SECRET);
            }
            "ProxmoxCluster" => {
                object["spec"]["endpoints"] = json!([self.pve_endpoint]);
                object["spec"]["insecureSkipTLSVerify"] = json!(true);
            }
            "VRouterTarget" if object["spec"]["provider"]["daemon"].is_object() => {
                object["spec"]["provider"]["daemon"]["address"] = json!(self.daemon_address);
            }
            _ => {}
        }
        object
    }
}

/// Creates `object` in the namespace its metadata names, as `kubectl
/// apply` would create it.
async fn apply(node: &TestNode, object: Value) {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().expect("kind"));
    let (resource, _) = pinned_kind(&node.client(), &gvk)
        .await
        .unwrap_or_else(|e| panic!("the API serves {gvk:?}: {e}"));
    let namespace = object["metadata"]["namespace"].as_str().expect("a namespaced example");
    let api = Api::<DynamicObject>::namespaced_with(node.client(), namespace, &resource);
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("applying {} {:?}: {e}", gvk.kind, object.metadata.name));
}

/// `kubectl wait --for=condition=Ready vrouterbinding/bgp-binding`, the
/// command the README gives, returns (kubectl of the API server's release,
/// which `cargo xtask testenv` builds).
async fn kubectl_wait_ready(node: &TestNode) {
    let kubectl = vrouter_test_apiserver::kubectl().unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(node.env().kubeconfig_path())
        .args(["--namespace", EXAMPLES_NS, "wait", "--for=condition=Ready"])
        .arg(format!("vrouterbinding/{BINDING}"))
        .arg(format!("--timeout={}s", ROLLOUT_BOUND.as_secs()))
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl wait: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn api_of_ns(node: &TestNode, kind: &str, plural: &str) -> Api<DynamicObject> {
    api_in(node.client(), EXAMPLES_NS, kind, plural)
}

/// Which guest a config's target is: `proxmox`, or the namespace of its
/// KubeVirt VM (the target's own when it names none).
async fn guest_of(node: &TestNode, config: &DynamicObject) -> &'static str {
    let target = config.data["spec"]["targetRef"]["name"].as_str().expect("a targetRef");
    let target = api_of_ns(node, "VRouterTarget", "vroutertargets")
        .get(target)
        .await
        .expect("the config's target");
    let provider = &target.data["spec"]["provider"];
    if provider["proxmox"].is_object() {
        return PROXMOX;
    }
    match provider["kubevirt"]["namespace"].as_str().unwrap_or(EXAMPLES_NS) {
        VM_NS => VM_NS,
        EXAMPLES_NS => EXAMPLES_NS,
        other => panic!("a VM namespace the examples do not use: {other}"),
    }
}

/// `guest` ran exactly `configs`' applies, once each, and each config's
/// commands (there are some), its config fragment and its `save`.
fn ran_its_configs_once(guest: &str, configs: &[&DynamicObject], record: &GuestRecord) {
    let mut expected: Vec<&str> = configs
        .iter()
        .map(|c| c.data["status"]["applyId"].as_str().expect("an applyId"))
        .collect();
    let mut ran: Vec<&str> = record.runs.iter().map(String::as_str).collect();
    expected.sort();
    ran.sort();
    assert_eq!(ran, expected, "{guest}: the applies that ran");
    let mut saves = 0;
    for config in configs {
        let name = config.name_any();
        let spec = &config.data["spec"];
        let commands = spec["commands"].as_str().expect("commands");
        assert!(!commands.trim().is_empty(), "{name} has commands");
        for command in commands.lines().map(str::trim).filter(|c| !c.is_empty()) {
            assert!(
                record.calls.iter().any(|call| call == command),
                "{guest}: `{command}` of {name} did not run: {:?}",
                record.calls
            );
        }
        if let Some(fragment) = spec["config"].as_str().filter(|c| !c.is_empty()) {
            assert!(
                record.loaded.iter().any(|loaded| loaded == fragment),
                "{guest}: the config of {name} was not loaded: {:?}",
                record.loaded
            );
        }
        saves += usize::from(spec["save"] == true);
    }
    let saved = record.calls.iter().filter(|call| *call == "save").count();
    assert_eq!(saved, saves, "{guest}: save calls: {:?}", record.calls);
}

/// 11-config-generated.yaml and 12-status.yaml show what the operator
/// writes; what it wrote has their names, 11's labels, both owners and
/// their specs (11's commands are an excerpt: each of its lines is among
/// the generated ones).
async fn the_operators_writes_match_the_examples(node: &TestNode) {
    let shown = example(GENERATED_CONFIG);
    let name = shown["metadata"]["name"].as_str().expect("a name");
    let written = api_of_ns(node, "VRouterConfig", "vrouterconfigs")
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{GENERATED_CONFIG}'s config {name}: {e}"));
    for (key, value) in shown["metadata"]["labels"].as_object().expect("labels") {
        assert_eq!(
            written
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str),
            value.as_str(),
            "label {key}"
        );
    }
    let owner = &written.metadata.owner_references.as_ref().expect("an owner")[0];
    let shown_owner = &shown["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        (
            shown_owner["kind"].as_str().unwrap_or_default(),
            shown_owner["name"].as_str().unwrap_or_default(),
            shown_owner["controller"].as_bool()
        )
    );
    let spec = &written.data["spec"];
    for field in ["targetRef", "save", "config"] {
        assert_eq!(spec[field], shown["spec"][field], "{GENERATED_CONFIG}: spec.{field}");
    }
    let commands: Vec<&str> = spec["commands"].as_str().unwrap_or_default().lines().collect();
    for line in shown["spec"]["commands"].as_str().unwrap_or_default().lines() {
        assert!(
            commands.contains(&line),
            "{GENERATED_CONFIG}: `{line}` is not generated: {commands:?}"
        );
    }

    let shown: VRouterStatus = serde_json::from_value(example(OPERATOR_STATUS)).expect("a VRouterStatus");
    let name = shown.metadata.name.clone().expect("a name");
    let statuses = api_of_ns(node, "VRouterStatus", "vrouterstatuses");
    let written = node
        .until(
            "the VRouterStatus the operator creates after the first apply",
            || async { statuses.get(&name).await.ok() },
        )
        .await;
    let written: VRouterStatus =
        serde_json::from_value(serde_json::to_value(&written).expect("JSON")).expect("a VRouterStatus");
    assert_eq!(written.spec, shown.spec, "{OPERATOR_STATUS}: spec");
    let owner = &written.metadata.owner_references.as_ref().expect("an owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("VRouterConfig", shown.spec.config_ref.name.as_str())
    );
}
