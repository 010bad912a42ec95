//! What the demo does with the examples before sending them to the API
//! server, as pure functions: which routers to simulate, which objects to
//! apply, which to leave out, and every substitution in words.
//!
//! The examples point at machines that do not exist here
//! (`pve1.example.com`, a daemon behind a cluster Service, KubeVirt VMs).
//! The demo serves each of them from a local simulation on 127.0.0.1 and
//! says so; it never sends a packet to an address from a manifest.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use vrouter_api::manifest::Manifest;
use vrouter_api::{ProviderType, VRouterTarget};

/// One parsed object and the file it came from.
#[derive(Debug, Clone)]
pub struct Source {
    pub file: String,
    pub manifest: Manifest,
}

/// `namespace/name` of a namespaced object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(namespace: &str, name: &str) -> Self {
        Key {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How one example target is simulated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Simulation {
    /// A VirtualMachineInstance and its virt-launcher pod on a simulated
    /// KubeVirt API; `virsh` reaches a real qemu-ga.
    KubeVirt { vmi_namespace: String, vmi: String },
    /// A VM on the simulated Proxmox VE API, in front of a real qemu-ga.
    Proxmox { vmid: i64 },
    /// A real vrouter-agent connected to the real vrouter-daemon server.
    Daemon { agent_id: String },
}

/// A router the demo simulates, one per example VRouterTarget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRouter {
    pub target: Key,
    pub simulation: Simulation,
}

/// The loopback addresses of the simulated peers.
#[derive(Debug, Clone)]
pub struct Loopback {
    pub proxmox_url: String,
    pub daemon_address: String,
    pub kube_api_url: String,
}

/// What kind of change a note describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// An address or a transport replaced by a local simulation.
    Substitute,
    /// A wait made shorter for the demo.
    Shorten,
    /// An example not applied, and why.
    Skip,
    /// An object the demo adds.
    Add,
}

impl NoteKind {
    pub fn tag(self) -> &'static str {
        match self {
            NoteKind::Substitute => "substitute",
            NoteKind::Shorten => "shorten",
            NoteKind::Skip => "skip",
            NoteKind::Add => "add",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub kind: NoteKind,
    pub text: String,
}

/// One object to create, as JSON, with where it came from.
#[derive(Debug, Clone)]
pub struct Item {
    pub file: String,
    pub kind: String,
    pub key: Key,
    pub value: Value,
}

/// Everything the demo applies and expects.
#[derive(Debug, Clone)]
pub struct Plan {
    pub items: Vec<Item>,
    pub notes: Vec<Note>,
    /// Every VRouterConfig that must reach Applied, with its target.
    pub expected: Vec<(Key, Key)>,
}

/// The longest a binding waits after an apply in the demo.
pub const DEMO_WAIT_AFTER_APPLIED: &str = "2s";
/// The binding's rollout poll interval in the demo.
pub const DEMO_POLL_INTERVAL: &str = "1s";

fn namespace_of(value: &Value) -> String {
    value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned()
}

fn name_of(value: &Value) -> String {
    value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn target_namespace(target: &VRouterTarget) -> String {
    target.metadata.namespace.clone().unwrap_or_else(|| "default".into())
}

/// The router each example target stands for.
pub fn routers(sources: &[Source]) -> Vec<SimRouter> {
    sources
        .iter()
        .filter_map(|s| match &s.manifest {
            Manifest::Target(t) => Some(t),
            _ => None,
        })
        .map(|target| {
            let namespace = target_namespace(target);
            let key = Key::new(&namespace, target.metadata.name.as_deref().unwrap_or_default());
            let provider = &target.spec.provider;
            let simulation = match provider.type_ {
                ProviderType::Proxmox => Simulation::Proxmox {
                    vmid: provider.proxmox.as_ref().map_or(0, |p| p.vmid),
                },
                ProviderType::VRouterDaemon => Simulation::Daemon {
                    agent_id: provider.daemon.as_ref().map(|d| d.agent_id.clone()).unwrap_or_default(),
                },
                ProviderType::KubeVirt => {
                    let vm = provider.kubevirt.as_ref();
                    Simulation::KubeVirt {
                        vmi_namespace: target.kubevirt_namespace().unwrap_or(namespace),
                        vmi: vm.map(|k| k.name.clone()).unwrap_or_default(),
                    }
                }
            };
            SimRouter {
                target: key,
                simulation,
            }
        })
        .collect()
}

/// The API token a ProxmoxCluster's credentials Secret holds, so the
/// simulated Proxmox VE accepts exactly the example's token.
pub fn proxmox_token(sources: &[Source]) -> Option<(String, String)> {
    let cluster = sources.iter().find_map(|s| match &s.manifest {
        Manifest::ProxmoxCluster(c) => Some(c),
        _ => None,
    })?;
    let secret_name = &cluster.spec.credentials_ref.name;
    sources.iter().find_map(|s| match &s.manifest {
        Manifest::Other(v) if v.get("kind").and_then(Value::as_str) == Some("Secret") && name_of(v) == *secret_name => {
            let field = |key: &str| {
                v.pointer(&format!("/stringData/{key}"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            Some((field("api-token-id")?, field("api-token-secret")?))
        }
        _ => None,
    })
}

fn duration(text: &str) -> Option<Duration> {
    serde_json::from_value::<vrouter_api::Duration>(json!(text))
        .ok()
        .map(|d| d.to_std())
}

/// Lowers `value[pointer]` (a duration string) to `to` when it is longer;
/// returns the old text when it changed.
fn shorten(value: &mut Value, pointer: &str, to: &str) -> Option<String> {
    let slot = value.pointer_mut(pointer)?;
    let old = slot.as_str()?.to_owned();
    if duration(&old)? <= duration(to)? {
        return None;
    }
    *slot = json!(to);
    Some(old)
}

/// Turns the examples into what the demo applies: addresses replaced by
/// the loopback simulations, long waits shortened, operator-written
/// objects left out, and a config added for any target nothing configures.
pub fn plan(sources: &[Source], loopback: &Loopback) -> Plan {
    let mut plan = Plan {
        items: Vec::new(),
        notes: Vec::new(),
        expected: Vec::new(),
    };
    for source in sources {
        if let Some(item) = plan.adapt(source, loopback) {
            plan.items.push(item);
        }
    }
    plan.configure_the_unconfigured(sources);
    plan
}

impl Plan {
    fn note(&mut self, kind: NoteKind, text: String) {
        self.notes.push(Note { kind, text });
    }

    /// What the demo applies for one example object, or `None` for an
    /// object the operator writes itself.
    fn adapt(&mut self, source: &Source, loopback: &Loopback) -> Option<Item> {
        let mut value = source.manifest.to_value();
        let kind = source.manifest.kind().to_owned();
        let key = Key::new(&namespace_of(&value), &name_of(&value));
        match &source.manifest {
            Manifest::Status(_) => {
                self.note(
                    NoteKind::Skip,
                    format!(
                        "{} ({kind} {key}): the operator creates one per applied VRouterConfig; the example is for reference",
                        source.file
                    ),
                );
                return None;
            }
            Manifest::Config(config) if config.metadata.owner_references.as_ref().is_some_and(|o| !o.is_empty()) => {
                self.note(
                    NoteKind::Skip,
                    format!(
                        "{} ({kind} {key}): written by the binding controller, not by users; the example is for reference",
                        source.file
                    ),
                );
                return None;
            }
            Manifest::Config(config) => {
                if let Some(status) = value.as_object_mut() {
                    status.remove("status");
                }
                self.expected
                    .push((key.clone(), Key::new(&key.namespace, &config.spec.target_ref.name)));
            }
            Manifest::ProxmoxCluster(cluster) => {
                value["spec"]["endpoints"] = json!([loopback.proxmox_url]);
                value["spec"]["insecureSkipTLSVerify"] = json!(true);
                self.note(
                    NoteKind::Substitute,
                    format!(
                        "ProxmoxCluster {key}: endpoints {} -> {} (simulated Proxmox VE with a self-signed certificate, so insecureSkipTLSVerify: true)",
                        cluster.spec.endpoints.join(", "),
                        loopback.proxmox_url
                    ),
                );
            }
            Manifest::Target(target) => self.adapt_target(target, &key, &mut value, loopback),
            Manifest::Binding(binding) => {
                self.shorten_rollout(&key, &mut value);
                for target in &binding.spec.target_refs {
                    let name = binding.config_name(&target.name);
                    self.expected
                        .push((Key::new(&key.namespace, &name), Key::new(&key.namespace, &target.name)));
                }
            }
            _ => {}
        }
        Some(Item {
            file: source.file.clone(),
            kind,
            key,
            value,
        })
    }

    /// Points a target at the simulation that plays its provider.
    fn adapt_target(&mut self, target: &VRouterTarget, key: &Key, value: &mut Value, loopback: &Loopback) {
        let provider = &target.spec.provider;
        match provider.type_ {
            ProviderType::VRouterDaemon => {
                let old = provider.daemon.as_ref().map(|d| d.address.clone()).unwrap_or_default();
                value["spec"]["provider"]["daemon"]["address"] = json!(loopback.daemon_address);
                self.note(
                    NoteKind::Substitute,
                    format!(
                        "VRouterTarget {key}: daemon address {old} -> {} (local vrouter-daemon)",
                        loopback.daemon_address
                    ),
                );
            }
            ProviderType::KubeVirt => {
                let vmi = provider.kubevirt.as_ref().map(|k| k.name.as_str()).unwrap_or_default();
                let vmi_ns = target.kubevirt_namespace().unwrap_or_else(|| key.namespace.clone());
                self.note(
                    NoteKind::Substitute,
                    format!(
                        "VRouterTarget {key}: KubeVirt VMI {vmi_ns}/{vmi} is served by a simulated KubeVirt API at {} (unchanged manifest)",
                        loopback.kube_api_url
                    ),
                );
            }
            ProviderType::Proxmox => {}
        }
    }

    /// Shortens a binding's rollout waits to the demo's.
    fn shorten_rollout(&mut self, key: &Key, value: &mut Value) {
        for (field, to) in [
            ("waitAfterApplied", DEMO_WAIT_AFTER_APPLIED),
            ("pollInterval", DEMO_POLL_INTERVAL),
        ] {
            if let Some(old) = shorten(value, &format!("/spec/rollout/{field}"), to) {
                self.note(
                    NoteKind::Shorten,
                    format!("VRouterBinding {key}: spec.rollout.{field} {old} -> {to}"),
                );
            }
        }
    }

    /// Adds a one-command config for every router nothing configures.
    fn configure_the_unconfigured(&mut self, sources: &[Source]) {
        let configured: BTreeSet<Key> = self.expected.iter().map(|(_, target)| target.clone()).collect();
        for router in routers(sources) {
            if configured.contains(&router.target) {
                continue;
            }
            let key = Key::new(&router.target.namespace, &format!("{}-demo", router.target.name));
            self.note(
                NoteKind::Add,
                format!(
                    "VRouterConfig {key}: nothing in the examples configures VRouterTarget {}, so the demo gives it one command",
                    router.target
                ),
            );
            self.items.push(Item {
                file: "(added by the demo)".into(),
                kind: "VRouterConfig".into(),
                key: key.clone(),
                value: json!({
                    "apiVersion": "vrouter.kojuro.date/v1",
                    "kind": "VRouterConfig",
                    "metadata": {"name": key.name, "namespace": key.namespace},
                    "spec": {
                        "targetRef": {"name": router.target.name},
                        "commands": format!("set system host-name {}\n", router.target.name),
                    },
                }),
            });
            self.expected.push((key, router.target.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn examples() -> Vec<Source> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/examples");
        crate::examples::load(&dir).unwrap()
    }

    fn loopback() -> Loopback {
        Loopback {
            proxmox_url: "https://127.0.0.1:1001".into(),
            daemon_address: "127.0.0.1:1002".into(),
            kube_api_url: "http://127.0.0.1:1003".into(),
        }
    }

    fn all_strings(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|v| all_strings(v, out)),
            Value::Object(o) => o.values().for_each(|v| all_strings(v, out)),
            _ => {}
        }
    }

    #[test]
    fn no_applied_object_keeps_an_address_from_the_examples() {
        let plan = plan(&examples(), &loopback());
        let mut strings = Vec::new();
        plan.items.iter().for_each(|i| all_strings(&i.value, &mut strings));
        let outside: Vec<&String> = strings
            .iter()
            .filter(|s| s.contains("example.com") || s.contains(".svc"))
            .collect();
        assert!(outside.is_empty(), "{outside:?}");
        let cluster = plan.items.iter().find(|i| i.kind == "ProxmoxCluster").unwrap();
        assert_eq!(cluster.value["spec"]["endpoints"], json!(["https://127.0.0.1:1001"]));
        let daemon = plan.items.iter().find(|i| i.key.name == "site-c-routers").unwrap();
        assert_eq!(daemon.value["spec"]["provider"]["daemon"]["address"], "127.0.0.1:1002");
    }

    #[test]
    fn every_example_target_gets_a_config_and_operator_objects_are_left_out() {
        let plan = plan(&examples(), &loopback());
        let expected: Vec<String> = plan.expected.iter().map(|(c, t)| format!("{c} -> {t}")).collect();
        assert_eq!(
            expected,
            [
                "network/bgp-binding.site-a-routers -> network/site-a-routers",
                "network/bgp-binding.site-b-routers -> network/site-b-routers",
                "network/vyos-router-a-config -> network/vyos-router-a-target",
                "network/site-c-routers-demo -> network/site-c-routers",
            ]
        );
        assert!(!plan.items.iter().any(|i| i.kind == "VRouterStatus"));
        assert!(!plan.items.iter().any(|i| i.key.name == "bgp-binding.site-a-routers"));
        let skipped = plan.notes.iter().filter(|n| n.kind == NoteKind::Skip).count();
        assert_eq!(skipped, 2);
    }

    #[test]
    fn long_rollout_waits_are_shortened_and_said() {
        let plan = plan(&examples(), &loopback());
        let binding = plan.items.iter().find(|i| i.kind == "VRouterBinding").unwrap();
        assert_eq!(binding.value["spec"]["rollout"]["waitAfterApplied"], "2s");
        assert_eq!(binding.value["spec"]["rollout"]["pollInterval"], "1s");
        let said: Vec<&str> = plan
            .notes
            .iter()
            .filter(|n| n.kind == NoteKind::Shorten)
            .map(|n| n.text.as_str())
            .collect();
        assert_eq!(
            said,
            [
                "VRouterBinding network/bgp-binding: spec.rollout.waitAfterApplied 1m30s -> 2s",
                "VRouterBinding network/bgp-binding: spec.rollout.pollInterval 10s -> 1s",
            ]
        );
    }

    #[test]
    fn a_short_wait_is_left_alone() {
        let mut value = json!({"spec": {"rollout": {"waitAfterApplied": "1s"}}});
        assert_eq!(shorten(&mut value, "/spec/rollout/waitAfterApplied", "2s"), None);
        assert_eq!(value["spec"]["rollout"]["waitAfterApplied"], "1s");
        assert_eq!(shorten(&mut value, "/spec/rollout/absent", "2s"), None);
    }

    #[test]
    fn routers_follow_the_targets_providers() {
        let routers = routers(&examples());
        let sims: Vec<(String, Simulation)> = routers
            .into_iter()
            .map(|r| (r.target.to_string(), r.simulation))
            .collect();
        assert_eq!(
            sims,
            [
                (
                    "network/site-a-routers".to_string(),
                    Simulation::KubeVirt {
                        vmi_namespace: "production".into(),
                        vmi: "vyos-router-a".into()
                    }
                ),
                ("network/site-b-routers".to_string(), Simulation::Proxmox { vmid: 100 }),
                (
                    "network/site-c-routers".to_string(),
                    Simulation::Daemon {
                        agent_id: "router-c".into()
                    }
                ),
                (
                    "network/vyos-router-a-target".to_string(),
                    Simulation::KubeVirt {
                        vmi_namespace: "network".into(),
                        vmi: "vyos-router-a".into()
                    }
                ),
            ]
        );
        assert_eq!(
            proxmox_token(&examples()),
            Some(("vrouter@pve!operator".into(), "replace-me".into()))
        );
    }
}
