//! The admission rules of spec §6.2 that need nothing but the object itself.
//! Reference existence and delete protection need the API server and live in
//! `references`; template syntax uses the rendering engine.
//!
//! Every rule reports the field it concerns, and all violations are reported
//! at once, so one round trip tells the user everything that is wrong.

use std::collections::HashMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use vrouter_api::{
    NameRef, ProviderType, ProxmoxCluster, RolloutMode, VRouterBinding, VRouterConfig, VRouterStatus, VRouterTarget,
};

use crate::vrouterbinding::plan::config_name;

/// One thing wrong with an object, located by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// What admission found: denials block the request, warnings are shown to
/// the user (`kubectl` prints them) and let it through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub denials: Vec<Violation>,
    pub warnings: Vec<Violation>,
}

impl Findings {
    fn deny(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.denials.push(Violation {
            field: field.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Violation {
            field: field.into(),
            message: message.into(),
        });
    }

    pub fn is_allowed(&self) -> bool {
        self.denials.is_empty()
    }

    /// All denials in one message, as the API server shows it to the user.
    pub fn denial_message(&self) -> String {
        self.denials
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// On an update of an object that is being deleted, no rule applies: the
/// update is a controller removing its finalizer, and a spec gone stale (a
/// deleted reference, a rule added since) must not block the deletion.
pub fn skip_for_deletion(new: &ObjectMeta) -> bool {
    new.deletion_timestamp.is_some()
}

/// Kubernetes object names are DNS subdomains of at most 253 characters.
const MAX_NAME_LEN: usize = 253;

fn check_ref(findings: &mut Findings, field: &str, r: &NameRef, own_namespace: &str) {
    if r.name.is_empty() {
        findings.deny(format!("{field}.name"), "must not be empty");
    }
    if r.crosses_namespace(own_namespace) {
        findings.deny(
            format!("{field}.namespace"),
            format!(
                "references namespace {:?}, but only this object's own namespace {own_namespace:?} is allowed \
                 (cross-namespace references would let one namespace use another's routers or credentials)",
                r.namespace
            ),
        );
    }
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

pub fn target(t: &VRouterTarget) -> Findings {
    let mut f = Findings::default();
    let ns = namespace_of(&t.metadata);
    let p = &t.spec.provider;
    match p.type_ {
        ProviderType::KubeVirt => match &p.kubevirt {
            None => f.deny(
                "spec.provider.kubevirt",
                "must be set when spec.provider.type is kubevirt",
            ),
            Some(kv) if kv.name.is_empty() => f.deny("spec.provider.kubevirt.name", "must not be empty"),
            Some(kv) => {
                if let Some(kc) = &kv.kubeconfig {
                    if kc.secret_ref.name.is_empty() {
                        f.deny("spec.provider.kubevirt.kubeconfig.secretRef.name", "must not be empty");
                    }
                    if kc.secret_ref.key.is_empty() {
                        f.deny("spec.provider.kubevirt.kubeconfig.secretRef.key", "must not be empty");
                    }
                }
            }
        },
        ProviderType::Proxmox => match &p.proxmox {
            None => f.deny(
                "spec.provider.proxmox",
                "must be set when spec.provider.type is proxmox",
            ),
            Some(px) => check_ref(&mut f, "spec.provider.proxmox.clusterRef", &px.cluster_ref, ns),
        },
        ProviderType::VRouterDaemon => match &p.daemon {
            None => f.deny(
                "spec.provider.daemon",
                "must be set when spec.provider.type is vrouter-daemon",
            ),
            Some(d) => {
                if d.address.is_empty() {
                    f.deny("spec.provider.daemon.address", "must not be empty");
                }
                if d.agent_id.is_empty() {
                    f.deny("spec.provider.daemon.agentID", "must not be empty");
                }
            }
        },
    }
    // A block for another provider is ignored; say so, since it usually
    // means the type was forgotten.
    let blocks = [
        (ProviderType::KubeVirt, p.kubevirt.is_some(), "kubevirt"),
        (ProviderType::Proxmox, p.proxmox.is_some(), "proxmox"),
        (ProviderType::VRouterDaemon, p.daemon.is_some(), "daemon"),
    ];
    for (type_, present, block) in blocks {
        if present && type_ != p.type_ {
            f.warn(
                format!("spec.provider.{block}"),
                format!("is ignored because spec.provider.type is {}", p.type_.as_str()),
            );
        }
    }
    f
}

pub fn config(c: &VRouterConfig) -> Findings {
    let mut f = Findings::default();
    check_ref(&mut f, "spec.targetRef", &c.spec.target_ref, namespace_of(&c.metadata));
    f
}

pub fn status(s: &VRouterStatus) -> Findings {
    let mut f = Findings::default();
    check_ref(&mut f, "spec.configRef", &s.spec.config_ref, namespace_of(&s.metadata));
    if !s.spec.sync_interval.is_positive() {
        f.deny("spec.syncInterval", "must be greater than zero");
    }
    f
}

pub fn binding(b: &VRouterBinding) -> Findings {
    let mut f = Findings::default();
    let ns = namespace_of(&b.metadata);
    let spec = &b.spec;
    if spec.target_refs.is_empty() {
        f.deny("spec.targetRefs", "must list at least one target");
    }
    if spec.template_ref.is_none() && spec.template_refs.is_empty() {
        f.deny(
            "spec.templateRefs",
            "must list at least one template (or set the deprecated spec.templateRef)",
        );
    }
    if spec.template_ref.is_some() {
        f.warn(
            "spec.templateRef",
            "is deprecated; list the template first in spec.templateRefs instead",
        );
    }
    for (field, r) in crate::vrouterbinding::plan::references(b) {
        check_ref(&mut f, &field, r, ns);
    }
    // Two entries for one target would generate two configs with one name.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let binding_name = b.metadata.name.as_deref().unwrap_or("");
    for (i, r) in spec.target_refs.iter().enumerate() {
        if let Some(first) = seen.insert(r.name.as_str(), i) {
            f.deny(
                format!("spec.targetRefs[{i}]"),
                format!("duplicates spec.targetRefs[{first}] ({:?})", r.name),
            );
        }
        let generated = config_name(binding_name, &r.name);
        if generated.len() > MAX_NAME_LEN {
            f.deny(
                format!("spec.targetRefs[{i}].name"),
                format!("the generated VRouterConfig name {generated:?} would exceed {MAX_NAME_LEN} characters"),
            );
        }
    }
    // Only the selected mode's fields are checked: an otherwise-invalid
    // rollout block must never block a binding whose mode is Disabled.
    if let Some(rollout) = &spec.rollout {
        match rollout.mode {
            RolloutMode::Disabled => {}
            RolloutMode::FixedInterval => {
                if !rollout.wait_interval.is_some_and(|w| w.is_positive()) {
                    f.deny(
                        "spec.rollout.waitInterval",
                        "must be greater than zero when spec.rollout.mode is FixedInterval",
                    );
                }
            }
            RolloutMode::WaitForApplied => {
                if rollout.poll_interval.is_negative() {
                    f.deny("spec.rollout.pollInterval", "must not be negative");
                }
                if rollout.wait_after_applied.is_negative() {
                    f.deny("spec.rollout.waitAfterApplied", "must not be negative");
                }
            }
        }
    }
    f
}

pub fn proxmox_cluster(p: &ProxmoxCluster) -> Findings {
    let mut f = Findings::default();
    if p.spec.endpoints.is_empty() {
        f.deny("spec.endpoints", "must list at least one endpoint");
    }
    for (i, endpoint) in p.spec.endpoints.iter().enumerate() {
        let field = format!("spec.endpoints[{i}]");
        if endpoint.is_empty() {
            f.deny(field, "must not be empty");
        } else if endpoint.starts_with("http://") {
            // The provider refuses it too; denying here keeps a cluster that
            // could never sync out of the API.
            f.deny(
                field,
                "uses plain http: the API token must not cross the network unencrypted; use https:// (with insecureSkipTLSVerify for a self-signed certificate)",
            );
        } else if endpoint.strip_prefix("https://").is_none_or(str::is_empty) {
            f.deny(
                field,
                format!("{endpoint:?} is not an https:// URL such as https://pve1.example.com:8006"),
            );
        }
    }
    if !p.spec.sync_interval.is_positive() {
        f.deny(
            "spec.syncInterval",
            "must be greater than zero (a zero interval would poll the Proxmox API continuously)",
        );
    }
    if p.spec.credentials_ref.name.is_empty() {
        f.deny("spec.credentialsRef.name", "must not be empty");
    }
    if p.spec.insecure_skip_tls_verify {
        f.warn(
            "spec.insecureSkipTLSVerify",
            "disables certificate checks; the API token can be intercepted",
        );
    }
    f
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
