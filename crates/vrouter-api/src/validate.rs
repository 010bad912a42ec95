//! The object rules of spec §6.2 that need nothing but the object itself:
//! the one place they are written. The admission webhook, `vrouter-operator
//! render`, the provider factory and the binding controller all call them,
//! so an object the webhook admits is one the controllers accept, and a
//! manifest `render` accepts is one the webhook admits.
//!
//! Reference existence and delete protection need the API server and live
//! in the operator's webhook. Every rule reports the field it concerns, and
//! all violations are reported at once, so one round trip tells the user
//! everything that is wrong.

use std::collections::HashMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use vrouter_render::{TemplateEngine, TemplateKind};

use crate::config::{CONFIRM_TIMEOUT_RANGE, ConfirmSpec};
use crate::fingerprint::Sha256Fingerprint;
use crate::manifest::Manifest;
use crate::target::SelectedProvider;
use crate::{
    NameRef, ProviderType, ProxmoxCluster, RolloutMode, VRouterBinding, VRouterConfig, VRouterStatus, VRouterTarget,
    VRouterTemplate,
};

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
    pub fn deny(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.denials.push(Violation {
            field: field.into(),
            message: message.into(),
        });
    }

    pub fn warn(&mut self, field: impl Into<String>, message: impl Into<String>) {
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

/// Proxmox VE allots VMIDs in this range; the CRD schema says the same, and
/// this rule covers manifests that never meet the API server (`render`).
const VMID_RANGE: std::ops::RangeInclusive<i64> = 100..=999_999_999;

/// Empty or only white space: no name, address or id is that.
fn blank(value: &str) -> bool {
    value.trim().is_empty()
}

fn check_ref(findings: &mut Findings, field: &str, r: &NameRef, own_namespace: &str) {
    if blank(&r.name) {
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

/// The rules of a VRouterTarget: the block its provider type selects is
/// present and complete; a block of another provider is only a warning.
pub fn target(t: &VRouterTarget) -> Findings {
    let mut f = Findings::default();
    check_secret_params(&mut f, &t.spec.params);
    let ns = namespace_of(&t.metadata);
    let p = &t.spec.provider;
    match p.selected() {
        None => f.deny(
            format!("spec.provider.{}", block_name(p.type_)),
            format!("must be set when spec.provider.type is {}", p.type_.as_str()),
        ),
        Some(SelectedProvider::KubeVirt(kv)) => {
            if blank(&kv.name) {
                f.deny("spec.provider.kubevirt.name", "must not be empty");
            }
            if let Some(kc) = &kv.kubeconfig {
                if blank(&kc.secret_ref.name) {
                    f.deny("spec.provider.kubevirt.kubeconfig.secretRef.name", "must not be empty");
                }
                if blank(&kc.secret_ref.key) {
                    f.deny("spec.provider.kubevirt.kubeconfig.secretRef.key", "must not be empty");
                }
            }
        }
        Some(SelectedProvider::Proxmox(px)) => {
            if !VMID_RANGE.contains(&px.vmid) {
                f.deny(
                    "spec.provider.proxmox.vmid",
                    format!(
                        "must be between {} and {} (Proxmox VE's VMID range), got {}",
                        VMID_RANGE.start(),
                        VMID_RANGE.end(),
                        px.vmid
                    ),
                );
            }
            check_ref(&mut f, "spec.provider.proxmox.clusterRef", &px.cluster_ref, ns);
        }
        Some(SelectedProvider::Daemon(d)) => {
            if blank(&d.address) {
                f.deny("spec.provider.daemon.address", "must not be empty");
            }
            if blank(&d.agent_id) {
                f.deny("spec.provider.daemon.agentID", "must not be empty");
            }
            daemon_transport(&mut f, d);
        }
    }
    // A block for another provider is ignored; say so, since it usually
    // means the type was forgotten.
    let blocks = [
        (ProviderType::KubeVirt, p.kubevirt.is_some()),
        (ProviderType::Proxmox, p.proxmox.is_some()),
        (ProviderType::VRouterDaemon, p.daemon.is_some()),
    ];
    for (type_, present) in blocks {
        if present && type_ != p.type_ {
            f.warn(
                format!("spec.provider.{}", block_name(type_)),
                format!("is ignored because spec.provider.type is {}", p.type_.as_str()),
            );
        }
    }
    f
}

/// A daemon address's scheme is one the provider dials, and a CA bundle
/// goes with `https://` only: with a plaintext address it would secure
/// nothing while reading as if it did.
fn daemon_transport(f: &mut Findings, d: &crate::DaemonConfig) {
    let transport = match crate::DaemonTransport::of(&d.address) {
        Ok(transport) => transport,
        Err(why) => return f.deny("spec.provider.daemon.address", why),
    };
    let Some(bundle) = &d.ca_bundle else { return };
    if transport != crate::DaemonTransport::Tls {
        f.deny(
            "spec.provider.daemon.caBundle",
            "is only used with an https:// address; write the address as https://host:port or remove caBundle",
        );
    }
    if blank(&bundle.secret_ref.name) {
        f.deny("spec.provider.daemon.caBundle.secretRef.name", "must not be empty");
    }
    if blank(&bundle.secret_ref.key) {
        f.deny("spec.provider.daemon.caBundle.secretRef.key", "must not be empty");
    }
}

/// The field of `spec.provider` that configures a provider type.
fn block_name(type_: ProviderType) -> &'static str {
    match type_ {
        ProviderType::KubeVirt => "kubevirt",
        ProviderType::Proxmox => "proxmox",
        ProviderType::VRouterDaemon => "daemon",
    }
}

pub fn config(c: &VRouterConfig) -> Findings {
    let mut f = Findings::default();
    check_ref(&mut f, "spec.targetRef", &c.spec.target_ref, namespace_of(&c.metadata));
    if let Some(confirm) = &c.spec.confirm {
        check_confirm(&mut f, confirm);
    }
    f
}

/// `spec.confirm` of a config or binding: a timeout `commit-confirm` can
/// take, and a check that can run and end before the router rolls back.
fn check_confirm(f: &mut Findings, confirm: &ConfirmSpec) {
    if confirm.minutes().is_none() {
        f.deny(
            "spec.confirm.timeout",
            format!(
                "must be a whole number of minutes from {}m to {}m (VyOS's commit-confirm counts minutes), got {}",
                CONFIRM_TIMEOUT_RANGE.start(),
                CONFIRM_TIMEOUT_RANGE.end(),
                confirm.timeout
            ),
        );
    }
    let Some(check) = &confirm.check else { return };
    match check.command.first() {
        None => f.deny(
            "spec.confirm.check.command",
            "must name a program to run in the guest (omit spec.confirm.check for no check)",
        ),
        Some(program) if blank(program) => f.deny("spec.confirm.check.command[0]", "must not be empty"),
        Some(_) => {}
    }
    if !check.timeout.is_positive() {
        f.deny("spec.confirm.check.timeout", "must be greater than zero");
    } else if check.timeout >= confirm.timeout {
        f.deny(
            "spec.confirm.check.timeout",
            format!(
                "must be shorter than spec.confirm.timeout ({}): the check must end before the router rolls back",
                confirm.timeout
            ),
        );
    }
}

pub fn status(s: &VRouterStatus) -> Findings {
    let mut f = Findings::default();
    check_ref(&mut f, "spec.configRef", &s.spec.config_ref, namespace_of(&s.metadata));
    if !s.spec.sync_interval.is_positive() {
        f.deny("spec.syncInterval", "must be greater than zero");
    }
    f
}

/// A binding names its targets, selects them by label, or both; with
/// neither it would configure nothing, which is never what was meant.
fn check_targets(f: &mut Findings, spec: &crate::VRouterBindingSpec) {
    match &spec.target_selector {
        None if spec.target_refs.is_empty() => f.deny(
            "spec.targetRefs",
            "must list at least one target (or set spec.targetSelector)",
        ),
        None => {}
        Some(selector) => {
            for problem in selector.problems("spec.targetSelector") {
                f.deny(problem.field, problem.message);
            }
        }
    }
}

pub fn binding(b: &VRouterBinding) -> Findings {
    let mut f = Findings::default();
    let ns = namespace_of(&b.metadata);
    let spec = &b.spec;
    check_targets(&mut f, spec);
    check_secret_params(&mut f, &spec.params);
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
    for r in b.references() {
        check_ref(&mut f, &r.field, r.name_ref, ns);
    }
    // Two entries for one target would generate two configs with one name.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, r) in spec.target_refs.iter().enumerate() {
        if let Some(first) = seen.insert(r.name.as_str(), i) {
            f.deny(
                format!("spec.targetRefs[{i}]"),
                format!("duplicates spec.targetRefs[{first}] ({:?})", r.name),
            );
        }
        let generated = b.config_name(&r.name);
        if generated.len() > MAX_NAME_LEN {
            f.deny(
                format!("spec.targetRefs[{i}].name"),
                format!("the generated VRouterConfig name {generated:?} would exceed {MAX_NAME_LEN} characters"),
            );
        }
    }
    if let Some(confirm) = &spec.confirm {
        check_confirm(&mut f, confirm);
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
            RolloutMode::Waves => check_waves(&mut f, rollout),
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

/// The rules of a VRouterParams: the block is schemaless, but each secret
/// param in it must be a well-formed `secretKeyRef`.
pub fn params(p: &crate::VRouterParams) -> Findings {
    let mut f = Findings::default();
    check_secret_params(&mut f, &p.spec.params);
    f
}

/// Each malformed `secretKeyRef` in a params layer, denied naming its field.
fn check_secret_params(f: &mut Findings, params: &Option<serde_json::Value>) {
    if let Some(params) = params {
        for (field, reason) in vrouter_render::secret_params::malformed_refs(params, "spec.params") {
            f.deny(field, reason);
        }
    }
}

/// Mode Waves: a `waves` block whose sizes cut a fleet into waves.
fn check_waves(f: &mut Findings, rollout: &crate::RolloutSpec) {
    let Some(waves) = &rollout.waves else {
        f.deny("spec.rollout.waves", "is required when spec.rollout.mode is Waves");
        return;
    };
    if rollout.poll_interval.is_negative() {
        f.deny("spec.rollout.pollInterval", "must not be negative");
    }
    if waves.pause.is_some_and(|p| p.is_negative()) {
        f.deny("spec.rollout.waves.pause", "must not be negative");
    }
    match waves.policy(rollout.poll_interval).map(|p| p.validate()) {
        Err(e) => f.deny(e.field, e.to_string()),
        Ok(Err(e)) => f.deny("spec.rollout.waves", e.to_string()),
        Ok(Ok(())) => {}
    }
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
                "uses plain http: the API token must not cross the network unencrypted; use https:// (with certificateFingerprints for a self-signed certificate)",
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
    if blank(&p.spec.credentials_ref.name) {
        f.deny("spec.credentialsRef.name", "must not be empty");
    }
    proxmox_trust(&mut f, &p.spec);
    f
}

/// The trust settings: every fingerprint well-formed, a CA bundle reference
/// complete, and no certificate check both asked for and turned off (the
/// operator would have to pick one, and either pick surprises someone).
fn proxmox_trust(f: &mut Findings, spec: &crate::ProxmoxClusterSpec) {
    for (i, pin) in spec.certificate_fingerprints.iter().enumerate() {
        if let Err(e) = Sha256Fingerprint::parse(pin) {
            f.deny(format!("spec.certificateFingerprints[{i}]"), format!("{pin:?} {e}"));
        }
    }
    if let Some(bundle) = &spec.ca_bundle {
        if blank(&bundle.secret_ref.name) {
            f.deny("spec.caBundle.secretRef.name", "must not be empty");
        }
        if blank(&bundle.secret_ref.key) {
            f.deny("spec.caBundle.secretRef.key", "must not be empty");
        }
    }
    if !spec.insecure_skip_tls_verify {
        return;
    }
    let contradicts = [
        (
            "spec.certificateFingerprints",
            !spec.certificate_fingerprints.is_empty(),
        ),
        ("spec.caBundle", spec.ca_bundle.is_some()),
    ];
    for (field, set) in contradicts {
        if set {
            f.deny(
                field,
                "cannot be combined with insecureSkipTLSVerify: one asks for a certificate check, the other turns every check off; remove insecureSkipTLSVerify",
            );
        }
    }
    f.warn(
        "spec.insecureSkipTLSVerify",
        "disables certificate checks; the API token can be intercepted (set certificateFingerprints to trust a self-signed certificate instead)",
    );
}

/// The rules of a VRouterTemplate: `config` and `commands` parse with the
/// engine the controllers render with, so a template admitted here never
/// fails to parse at reconcile. Every `| safe` (escaping turned off) is a
/// warning to the author.
pub fn template(t: &VRouterTemplate, engine: &TemplateEngine) -> Findings {
    let mut findings = Findings::default();
    let name = t.metadata.name.as_deref().unwrap_or("");
    let parts = [
        ("spec.config", TemplateKind::Config, &t.spec.config),
        ("spec.commands", TemplateKind::Commands, &t.spec.commands),
    ];
    for (field, kind, source) in parts {
        if source.is_empty() {
            continue;
        }
        match engine.review(name, kind, source) {
            Ok(warnings) => {
                for warning in warnings {
                    findings.warn(field, warning.to_string());
                }
            }
            Err(error) => findings.deny(field, error.to_string()),
        }
    }
    findings
}

/// The rules of any object of ours; VRouterParams (a schemaless block) and
/// objects of other kinds have none.
pub fn manifest(object: &Manifest, templates: &TemplateEngine) -> Findings {
    match object {
        Manifest::Template(t) => template(t, templates),
        Manifest::Target(t) => target(t),
        Manifest::Binding(b) => binding(b),
        Manifest::Config(c) => config(c),
        Manifest::ProxmoxCluster(p) => proxmox_cluster(p),
        Manifest::Status(s) => status(s),
        Manifest::Params(p) => params(p),
        Manifest::Other(_) => Findings::default(),
    }
}

/// A reference that points out of the binding's namespace. Admission
/// rejects these; the controller refuses them too, so a cluster running
/// without webhooks (or with objects older than them) cannot be used to
/// reach another namespace's targets or credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} references namespace {namespace:?}; only the binding's own namespace {own:?} is allowed")]
pub struct CrossNamespace {
    pub field: String,
    pub namespace: String,
    pub own: String,
}

/// The first reference of `binding` that leaves its namespace, if any.
pub fn same_namespace_references(binding: &VRouterBinding) -> Result<(), CrossNamespace> {
    let own = namespace_of(&binding.metadata);
    match binding
        .references()
        .into_iter()
        .find(|r| r.name_ref.crosses_namespace(own))
    {
        Some(r) => Err(CrossNamespace {
            field: r.field,
            namespace: r.name_ref.namespace.clone(),
            own: own.to_owned(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
