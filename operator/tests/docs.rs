//! Every YAML block and command in `README.md` and `docs/*.md` is exercised.
//!
//! - ```` ```yaml ```` blocks are parsed as manifests; each page's objects,
//!   together with `testdata/examples/`, go through the offline render (the
//!   admission rules that need no cluster, reference resolution, rendering),
//!   and references the offline render does not resolve (a config's target, a
//!   target's ProxmoxCluster, a cluster's Secret, a status's config) must
//!   resolve too.
//! - Each command of a ```` ```sh ```` block must be one a test or CI runs
//!   (`cargo xtask test`, `render testdata/examples`, …) — the proof is
//!   checked to still be there — or a `kubectl`/`helm` command naming only
//!   resource types, conditions, status fields, labels, annotations, chart
//!   values and files that exist. Nothing is run against a cluster.
//! - ```` ```text ```` blocks (diagrams, output) are not checked; any other
//!   fence fails, so nothing slips through unchecked.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vrouter_operator::server::webhook_certs::shell::{ROTATE_CA, ROTATE_SERVING};

use kube::CustomResourceExt;
use serde_json::Value;
use vrouter_api::constants::{ANNOTATION_PAUSED, LABEL_BINDING, LABEL_BINDING_PAUSED, LABEL_TARGET, condition};
use vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS;
use vrouter_api::manifest::{Manifest, parse_documents_strictly};
use vrouter_api::vm_access::ANNOTATION_ALLOWED_TARGET_NAMESPACES;
use vrouter_api::{
    ProxmoxCluster, VRouterBinding, VRouterConfig, VRouterParams, VRouterStatus, VRouterTarget, VRouterTemplate,
};
use vrouter_operator::cli::render::{self as offline_render, Loaded};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The documentation pages checked: the README and every page under docs/.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A fenced block: its info string, the line of its opening fence, its text.
#[derive(Debug)]
struct Block {
    info: String,
    line: usize,
    text: String,
}

fn fenced_blocks(markdown: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some(Block {
                        info: info.trim().to_owned(),
                        line: i + 1,
                        text: String::new(),
                    });
                }
            }
            Some(block) => {
                if trimmed.trim_end() == "```" {
                    blocks.push(open.take().unwrap());
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
            }
        }
    }
    match open {
        Some(block) => Err(format!("line {}: the fence opened here is never closed", block.line)),
        None => Ok(blocks),
    }
}

/// The commands of a `sh` block, each with its line: comments and blank
/// lines skipped, `\` continuations joined, a trailing `# comment` dropped.
/// In a `console` block only lines after a `$ ` prompt are commands (and
/// their continuations); the rest is output.
fn commands(block: &Block) -> Vec<(usize, String)> {
    let console = block.info == "console";
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in block.text.lines().enumerate() {
        let line_no = block.line + 1 + i;
        let raw = match (console, pending.is_some(), raw.trim_start().strip_prefix("$ ")) {
            (false, _, _) | (true, true, None) => raw,
            (true, _, Some(command)) => command,
            (true, false, None) => continue,
        };
        let line = strip_comment(raw).trim().to_owned();
        let (start, mut text) = pending.take().unwrap_or((line_no, String::new()));
        if line.is_empty() && text.is_empty() {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            text.push_str(head);
            text.push(' ');
            pending = Some((start, text));
            continue;
        }
        text.push_str(&line);
        out.push((start, text.trim().to_owned()));
    }
    if let Some((start, text)) = pending {
        out.push((start, text.trim().to_owned()));
    }
    out
}

fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => return &line[..at],
            _ => {}
        }
        previous = c;
    }
    line
}

/// Shell words, with quotes removed.
fn words(command: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => out.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => w.extend(chars.next()),
                        Some(c) => w.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            // A `<placeholder>` the reader fills in, not a redirection.
            '<' if chars
                .clone()
                .take_while(|c| *c != '>')
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
                && chars.clone().any(|c| c == '>') =>
            {
                let w = word.get_or_insert_with(String::new);
                w.push('<');
                for c in chars.by_ref() {
                    w.push(c);
                    if c == '>' {
                        break;
                    }
                }
            }
            '|' | ';' | '&' | '>' | '<' | '$' | '`' => {
                return Err(format!("`{c}`: pipes, redirections and substitutions are not checked"));
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    Ok(out)
}

fn exists(path: &str) -> Result<(), String> {
    if root().join(path).exists() {
        Ok(())
    } else {
        Err(format!("{path} does not exist in the repository"))
    }
}

/// `needle` must still occur in `path`: the proof that a test runs a command.
fn proven_by(path: &str, needle: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(root().join(path)).map_err(|e| format!("{path}: {e}"))?;
    if text.contains(needle) {
        Ok(())
    } else {
        Err(format!(
            "{path} no longer contains {needle:?}, which showed that a test runs this command"
        ))
    }
}

/// Every `*.rs` file under `dir`, concatenated.
fn sources_under(dir: &str) -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(&root().join(dir), &mut out);
    out
}

// ---------------------------------------------------------------- kinds

/// One custom resource as kubectl sees it: its names and its schema.
struct Kind {
    kind: String,
    names: Vec<String>,
    schema: Value,
}

fn crd_kind(crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition) -> Kind {
    let names = &crd.spec.names;
    let mut all = vec![names.plural.clone(), names.kind.to_lowercase()];
    all.extend(names.singular.clone());
    all.extend(names.short_names.clone().unwrap_or_default());
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.clone())
            .expect("generated CRDs carry a schema"),
    )
    .unwrap();
    Kind {
        kind: names.kind.clone(),
        names: all,
        schema,
    }
}

fn kinds() -> Vec<Kind> {
    vec![
        crd_kind(VRouterTemplate::crd()),
        crd_kind(VRouterParams::crd()),
        crd_kind(VRouterTarget::crd()),
        crd_kind(VRouterBinding::crd()),
        crd_kind(VRouterConfig::crd()),
        crd_kind(ProxmoxCluster::crd()),
        crd_kind(VRouterStatus::crd()),
    ]
}

/// Built-in resource types the docs may name, by every name kubectl accepts.
const CORE_TYPES: &[(&str, &[&str])] = &[
    ("Namespace", &["namespace", "namespaces", "ns"]),
    ("ConfigMap", &["configmap", "configmaps", "cm"]),
    ("Event", &["event", "events", "ev"]),
    ("Secret", &["secret", "secrets"]),
    ("Pod", &["pod", "pods", "po"]),
    ("Deployment", &["deployment", "deployments", "deploy"]),
    ("Lease", &["lease", "leases"]),
    (
        "VirtualMachineInstance",
        &["virtualmachineinstance", "virtualmachineinstances", "vmi", "vmis"],
    ),
    // The Go operator's kustomize install, which the migration guide hands
    // over or deletes object by object; operator/tests/migration_go_kustomize.rs
    // runs those commands of the guide as written.
    ("ServiceAccount", &["serviceaccount", "serviceaccounts", "sa"]),
    ("Service", &["service", "services", "svc"]),
    ("Role", &["role", "roles"]),
    ("RoleBinding", &["rolebinding", "rolebindings"]),
    ("ClusterRole", &["clusterrole", "clusterroles"]),
    ("ClusterRoleBinding", &["clusterrolebinding", "clusterrolebindings"]),
    (
        "ValidatingWebhookConfiguration",
        &["validatingwebhookconfiguration", "validatingwebhookconfigurations"],
    ),
    (
        "MutatingWebhookConfiguration",
        &["mutatingwebhookconfiguration", "mutatingwebhookconfigurations"],
    ),
    ("Certificate", &["certificate", "certificates", "cert"]),
    ("Issuer", &["issuer", "issuers"]),
];

/// The annotations by which Helm takes an object into a release; the guide
/// sets them on the one object both the Go kustomize install and this chart
/// name, and the migration test runs that step.
const HELM_OWNERSHIP: &[&str] = &["meta.helm.sh/release-name", "meta.helm.sh/release-namespace"];

/// Which condition each kind's controller sets, and the source and text that
/// show it (checked, so this table cannot silently go stale).
const CONDITIONS: &[(&str, &str, &str, &str)] = &[
    (
        "VRouterConfig",
        condition::APPLIED,
        "operator/src/controllers/vrouter_config",
        "condition::APPLIED",
    ),
    (
        "VRouterBinding",
        condition::READY,
        "operator/src/controllers/vrouter_binding",
        "condition::READY",
    ),
    (
        "VRouterStatus",
        condition::SYNCED,
        "operator/src/controllers/vrouter_status",
        "condition::SYNCED",
    ),
    (
        "ProxmoxCluster",
        condition::SYNCED,
        "operator/src/controllers/proxmox_cluster",
        "condition::SYNCED",
    ),
    (
        "VRouterConfig",
        condition::READY,
        "operator/src/controllers/vrouter_config",
        "conditions::summarise",
    ),
    (
        "VRouterConfig",
        condition::RECONCILING,
        "operator/src/controllers/vrouter_config",
        "conditions::summarise",
    ),
    (
        "VRouterConfig",
        condition::STALLED,
        "operator/src/controllers/vrouter_config",
        "conditions::summarise",
    ),
    (
        "VRouterStatus",
        condition::READY,
        "operator/src/controllers/vrouter_status",
        "conditions::summarise",
    ),
    (
        "VRouterStatus",
        condition::RECONCILING,
        "operator/src/controllers/vrouter_status",
        "conditions::summarise",
    ),
    (
        "VRouterStatus",
        condition::STALLED,
        "operator/src/controllers/vrouter_status",
        "conditions::summarise",
    ),
    (
        "ProxmoxCluster",
        condition::READY,
        "operator/src/controllers/proxmox_cluster",
        "conditions::summarise",
    ),
    (
        "ProxmoxCluster",
        condition::RECONCILING,
        "operator/src/controllers/proxmox_cluster",
        "conditions::summarise",
    ),
    (
        "ProxmoxCluster",
        condition::STALLED,
        "operator/src/controllers/proxmox_cluster",
        "conditions::summarise",
    ),
    (
        "VRouterTarget",
        condition::READY,
        "operator/src/controllers/vrouter_target",
        "conditions::summarise",
    ),
    (
        "VRouterTarget",
        condition::RECONCILING,
        "operator/src/controllers/vrouter_target",
        "conditions::summarise",
    ),
    (
        "VRouterTarget",
        condition::STALLED,
        "operator/src/controllers/vrouter_target",
        "conditions::summarise",
    ),
    (
        "VRouterBinding",
        condition::RECONCILING,
        "operator/src/controllers/vrouter_binding",
        "conditions::summarise",
    ),
    (
        "VRouterBinding",
        condition::STALLED,
        "operator/src/controllers/vrouter_binding",
        "conditions::summarise",
    ),
];

/// The keys the drift controller writes into its Secret.
const STORED_CONFIG_KEYS: &[&str] = &["startup", "running"];

struct Checker {
    kinds: Vec<Kind>,
}

impl Checker {
    /// The kind a kubectl resource type names (`vrc`, `vrouterconfigs`, `cm`…).
    fn kind_of(&self, type_: &str) -> Result<String, String> {
        let type_ = type_.split('.').next().unwrap_or(type_).to_lowercase();
        if let Some(k) = self.kinds.iter().find(|k| k.names.contains(&type_)) {
            return Ok(k.kind.clone());
        }
        CORE_TYPES
            .iter()
            .find(|(_, names)| names.contains(&type_.as_str()))
            .map(|(kind, _)| (*kind).to_owned())
            .ok_or_else(|| format!("unknown resource type {type_:?}"))
    }

    /// A jsonpath such as `{.status.conditions[?(@.type=="Ready")].status}`
    /// must name a field the kind's schema has.
    fn check_jsonpath(&self, kind: &str, path: &str) -> Result<(), String> {
        let inner = path
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .ok_or_else(|| format!("jsonpath {path:?} is not of the form {{.field}}"))?;
        let mut segments = Vec::new();
        let mut rest = inner;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                segments.push(r[..end].to_owned());
                rest = &r[end..];
            } else if rest.starts_with('[') {
                let end = rest.find(']').ok_or_else(|| format!("unclosed [ in {path:?}"))?;
                segments.push("[]".to_owned());
                rest = &rest[end + 1..];
            } else {
                return Err(format!("cannot read jsonpath {path:?}"));
            }
        }
        if kind == "Secret" {
            return match segments.as_slice() {
                [data, key] if data == "data" && STORED_CONFIG_KEYS.contains(&key.as_str()) => Ok(()),
                _ => Err(format!(
                    "{path:?}: the operator's Secrets hold only .data.startup and .data.running"
                )),
            };
        }
        let crd = self
            .kinds
            .iter()
            .find(|k| k.kind == kind)
            .ok_or_else(|| format!("jsonpath on {kind} is not checked; use it on the operator's kinds only"))?;
        let mut node = &crd.schema;
        for segment in &segments {
            node = if segment == "[]" {
                node.get("items")
            } else if segment == "metadata" {
                return Ok(()); // ObjectMeta, not part of the CRD schema
            } else {
                node.get("properties").and_then(|p| p.get(segment))
            }
            .ok_or_else(|| format!("{kind} has no field {path:?} (no {segment:?})"))?;
        }
        Ok(())
    }

    fn check_condition(&self, kind: &str, spec: &str) -> Result<(), String> {
        let name = spec.split('=').next().unwrap_or(spec);
        if CONDITIONS.iter().any(|(k, c, _, _)| *k == kind && *c == name) {
            Ok(())
        } else {
            let known: Vec<String> = CONDITIONS.iter().map(|(k, c, _, _)| format!("{k}: {c}")).collect();
            Err(format!("{kind} has no condition {name:?} ({})", known.join(", ")))
        }
    }

    fn check_kubectl(&self, args: &[String]) -> Result<(), String> {
        let mut positional = Vec::new();
        let mut files = Vec::new();
        let mut conditions = Vec::new();
        let mut jsonpaths = Vec::new();
        let mut labels = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with('-') => (f.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            let takes_value = [
                "-n",
                "--namespace",
                "-f",
                "--filename",
                "-o",
                "--output",
                "-l",
                "--selector",
                "--for",
                "--timeout",
                "--field-selector",
            ];
            if flag.starts_with('-') && takes_value.contains(&flag.as_str()) {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i).cloned().ok_or_else(|| format!("{flag} needs a value"))?
                    }
                };
                match flag.as_str() {
                    "-f" | "--filename" => files.push(value),
                    "-o" | "--output" => {
                        if let Some(path) = value.strip_prefix("jsonpath=") {
                            jsonpaths.push(path.to_owned());
                        } else if !["yaml", "json", "wide", "name"].contains(&value.as_str()) {
                            return Err(format!("unknown output format {value:?}"));
                        }
                    }
                    "-l" | "--selector" => labels.push(value),
                    "--for" => {
                        if let Some(c) = value.strip_prefix("condition=") {
                            conditions.push(c.to_owned());
                        } else if let Some(j) = value.strip_prefix("jsonpath=") {
                            let path_end = j.find('}').map_or(j.len(), |e| e + 1);
                            jsonpaths.push(j[..path_end].to_owned());
                        } else {
                            return Err(format!("--for={value}: only condition= and jsonpath= are checked"));
                        }
                    }
                    "--field-selector" => {
                        for selector in value.split(',') {
                            let field = selector.split('=').next().unwrap_or("");
                            if !["involvedObject.name", "involvedObject.kind"].contains(&field) {
                                return Err(format!("field selector {field:?} is not checked"));
                            }
                        }
                    }
                    _ => {}
                }
            } else if flag.starts_with('-') {
                if ![
                    "--all-namespaces",
                    "-A",
                    "--watch",
                    "-w",
                    "--overwrite",
                    "--ignore-not-found",
                ]
                .contains(&flag.as_str())
                {
                    return Err(format!("unknown kubectl flag {flag}"));
                }
            } else {
                positional.push(arg.clone());
            }
            i += 1;
        }
        for file in &files {
            exists(file)?;
        }
        for label in &labels {
            let key = label.split(['=', '!']).next().unwrap_or("");
            if ![LABEL_BINDING, LABEL_TARGET, LABEL_BINDING_PAUSED].contains(&key) {
                return Err(format!("label {key:?} is not one the operator sets"));
            }
        }
        let verb = positional.first().ok_or("kubectl without a verb")?;
        let resource = positional.get(1);
        let kind = match verb.as_str() {
            "apply" | "delete" if !files.is_empty() => {
                return if positional.len() == 1 {
                    Ok(())
                } else {
                    Err("both -f and a resource given".into())
                };
            }
            "create" => {
                return match positional.get(1).map(String::as_str) {
                    Some("namespace" | "ns") if positional.len() == 3 => Ok(()),
                    _ => Err("only `kubectl create namespace <name>` is checked".into()),
                };
            }
            "logs" => {
                let target = resource.ok_or("kubectl logs without a pod")?;
                if let Some((type_, _)) = target.split_once('/') {
                    self.kind_of(type_)?;
                }
                return Ok(());
            }
            "get" | "describe" | "wait" | "annotate" | "label" | "delete" | "edit" => {
                let resource = resource.ok_or_else(|| format!("kubectl {verb} without a resource"))?;
                let type_ = resource.split('/').next().unwrap_or(resource);
                let mut kinds = type_
                    .split(',')
                    .map(|t| self.kind_of(t))
                    .collect::<Result<Vec<_>, _>>()?;
                if kinds.len() != 1 && !(conditions.is_empty() && jsonpaths.is_empty()) {
                    return Err("conditions and jsonpaths are checked against one kind only".into());
                }
                kinds.remove(0)
            }
            other => return Err(format!("kubectl {other} is not a checked verb")),
        };
        if verb == "wait" && conditions.is_empty() && jsonpaths.is_empty() {
            return Err("kubectl wait without --for".into());
        }
        for c in &conditions {
            self.check_condition(&kind, c)?;
        }
        for j in &jsonpaths {
            self.check_jsonpath(&kind, j)?;
        }
        if verb == "annotate" {
            // `annotate type/name k=v` or `annotate type name k=v`.
            let first = if resource.is_some_and(|r| r.contains('/')) {
                2
            } else {
                3
            };
            for annotation in positional.iter().skip(first) {
                let key = annotation
                    .split_once('=')
                    .map(|(k, _)| k)
                    .or_else(|| annotation.strip_suffix('-'))
                    .ok_or_else(|| format!("annotation {annotation:?} is neither key=value nor key-"))?;
                let read: &[&str] = match kind.as_str() {
                    "Namespace" => &[ANNOTATION_ALLOWED_TARGET_NAMESPACES, ANNOTATION_ALLOWED_DAEMON_AGENTS],
                    "ClusterRole" => {
                        proven_by("operator/tests/migration_go_kustomize.rs", "run_guide_step(&env, 2")?;
                        HELM_OWNERSHIP
                    }
                    "Secret" => &[ANNOTATION_PAUSED, ROTATE_CA, ROTATE_SERVING],
                    _ => &[ANNOTATION_PAUSED],
                };
                if !read.contains(&key) {
                    return Err(format!(
                        "annotation {key:?} is not one the operator reads (nor, on a ClusterRole, Helm's ownership)"
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_helm(&self, args: &[String]) -> Result<(), String> {
        let verb = args.first().map(String::as_str);
        if verb == Some("uninstall") {
            return check_helm_uninstall(&args[1..]);
        }
        if !matches!(verb, Some("install" | "upgrade")) {
            return Err("only `helm install`, `helm upgrade` and `helm uninstall` are checked".into());
        }
        proven_by("xtask/tests/helm_chart.rs", "deploy/helm/vrouter-operator")?;
        let values = read("deploy/helm/vrouter-operator/values.yaml");
        let mut positional = Vec::new();
        let mut i = 1;
        while i < args.len() {
            match args[i].as_str() {
                "-n" | "--namespace" => i += 1,
                "--create-namespace" | "--install" => {}
                "--set" => {
                    i += 1;
                    let setting = args.get(i).ok_or("--set needs a value")?;
                    let key = setting.split(['.', '=']).next().unwrap_or("");
                    if !values.lines().any(|l| l.starts_with(&format!("{key}:"))) {
                        return Err(format!("--set {setting}: the chart has no value {key:?}"));
                    }
                }
                flag if flag.starts_with('-') => return Err(format!("unknown helm flag {flag}")),
                word => positional.push(word.to_owned()),
            }
            i += 1;
        }
        match positional.as_slice() {
            [_release, chart] if chart == "deploy/helm/vrouter-operator" => Ok(()),
            _ => Err("expected `helm install|upgrade <release> deploy/helm/vrouter-operator`".into()),
        }
    }

    fn check_cargo(&self, args: &[String]) -> Result<(), String> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match args.as_slice() {
            ["xtask", "test"] => proven_by(".ci/run", "cargo xtask test"),
            // The quick loop is run by hand, not by the suite: the flag must exist.
            ["xtask", "test", flags @ ..] => flags_exist("test", "Test {", "xtask/src/main.rs", flags),
            ["xtask", "gen-crds"] | ["xtask", "gen-crds", "--check"] => {
                proven_by("xtask/src/test.rs", "gen_crds::run(root, true)")
            }
            ["xtask", "chart-readme"] | ["xtask", "chart-readme", "--check"] => {
                proven_by("xtask/src/test.rs", "chart_readme::run(root, true)")
            }
            ["xtask", "testenv"] => proven_by("xtask/src/test.rs", "testenv_bins::run()"),
            ["xtask", "demo", rest @ ..] => {
                if rest.iter().any(|a| *a != "--keep") {
                    return Err(format!("cargo xtask demo {}: only --keep is checked", rest.join(" ")));
                }
                let tests = root().join("crates/vrouter-demo/tests");
                let proof = std::fs::read_dir(&tests)
                    .map_err(|e| format!("{}: {e} (the demo's own test proves this command)", tests.display()))?
                    .filter_map(|e| e.ok())
                    .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("demo")));
                if proof {
                    Ok(())
                } else {
                    Err("no test under crates/vrouter-demo/tests runs the demo".into())
                }
            }
            // Benchmarks are measured by hand, not run by the test command:
            // what is checked is that the command and each flag exist (the
            // test command compiles xtask, so they keep compiling).
            ["xtask", "bench", flags @ ..] => flags_exist("bench", "Bench(", "xtask/src/bench.rs", flags),
            // The image's content is proven by xtask's tests (archive layout,
            // reproducibility, equality with the Dockerfile); the command and
            // its flags are checked to exist.
            ["xtask", "image", flags @ ..] => flags_exist("image", "Image(", "xtask/src/image/mod.rs", flags),
            ["run", "-p", "vrouter-operator", "--", "render", rest @ ..] => {
                proven_by("operator/tests/offline_render.rs", ".arg(\"render\").arg(examples())")?;
                match rest {
                    ["testdata/examples"] => Ok(()),
                    ["--script", "testdata/examples"] => {
                        proven_by("operator/tests/offline_render.rs", "[\"render\", \"--script\"]")
                    }
                    _ => Err("the tests run `render [--script] testdata/examples` only".into()),
                }
            }
            ["test", "-p", krate, rest @ ..] | ["bench", "-p", krate, rest @ ..] => {
                let dir = crate_dir(krate)?;
                let (flag, sub) = if args[0] == "test" {
                    ("--test", "tests")
                } else {
                    ("--bench", "benches")
                };
                match rest {
                    [] => Ok(()),
                    [f, name, ..] if *f == flag => exists(&format!("{dir}/{sub}/{name}.rs")),
                    [dashes, ..] if *dashes == "--" => Ok(()),
                    _ => Err(format!("cargo {}: only -p <crate> [{flag} <name>] is checked", args[0])),
                }
            }
            _ => Err("not a cargo command any test runs".into()),
        }
    }

    fn check_command(&self, command: &str) -> Result<(), String> {
        let words = words(command)?;
        // `export A=b` and `A=b command …` only set the environment.
        let is_assignment = |w: &String| {
            w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        if words.first().is_some_and(|w| w == "export") && words.len() > 1 && words[1..].iter().all(is_assignment) {
            return Ok(());
        }
        let first_command = words.iter().position(|w| !is_assignment(w)).unwrap_or(words.len());
        let (program, args) = words[first_command..].split_first().ok_or("empty command")?;
        match program.as_str() {
            "cargo" => self.check_cargo(args),
            "kubectl" => self.check_kubectl(args),
            "helm" => self.check_helm(args),
            "vrouter-operator" => check_operator_cli(args),
            other => Err(format!("`{other}` is not a command any test runs")),
        }
    }
}

/// `helm uninstall <release> [-n <namespace>]`, which the chart's upgrade
/// tests run (and check that it leaves the CRDs and objects).
fn check_helm_uninstall(args: &[String]) -> Result<(), String> {
    proven_by("operator/tests/helm_upgrades.rs", "helm_ok(&[\"uninstall\", RELEASE")?;
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-n" | "--namespace" => i += 1,
            flag if flag.starts_with('-') => return Err(format!("unknown helm uninstall flag {flag}")),
            word => positional.push(word),
        }
        i += 1;
    }
    match positional.as_slice() {
        [_release] => Ok(()),
        _ => Err("expected `helm uninstall <release>`".into()),
    }
}

/// `cargo xtask <command> [--flag [value]]…`: the command exists in xtask's
/// CLI and each flag is a field of its options (`--a-b` is `a_b:`).
fn flags_exist(command: &str, variant: &str, options: &str, flags: &[&str]) -> Result<(), String> {
    proven_by("xtask/src/main.rs", variant)?;
    let source = read(options);
    let mut expects_value = false;
    for word in flags {
        if expects_value && !word.starts_with("--") {
            expects_value = false;
            continue;
        }
        let name = word.trim_start_matches("--").split('=').next().unwrap_or("");
        let field = format!("{}:", name.replace('-', "_"));
        let declared = source.lines().any(|l| {
            let l = l.trim_start().trim_start_matches("pub ");
            l.starts_with(&field)
        });
        if !word.starts_with("--") || name.is_empty() || !declared {
            return Err(format!("cargo xtask {command} has no flag {word}"));
        }
        expects_value = !word.contains('=');
    }
    Ok(())
}

/// `vrouter-operator convert|render [flag] PATH…` and `resume BINDING`: the
/// subcommands a user runs, with the flags the tests run them with.
fn check_operator_cli(args: &[String]) -> Result<(), String> {
    const TEST: &str = "operator/tests/convert_manifests.rs";
    let (subcommand, rest) = args.split_first().ok_or("vrouter-operator without a subcommand")?;
    let (flags, paths): (Vec<&String>, Vec<&String>) = rest.iter().partition(|a| a.starts_with('-'));
    if paths.is_empty() {
        return Err(format!("vrouter-operator {subcommand} without a file or directory"));
    }
    let flags: Vec<&str> = flags.iter().map(|f| f.as_str()).collect();
    match (subcommand.as_str(), flags.as_slice()) {
        ("convert", []) => proven_by(TEST, "operator(&[\"convert\"]"),
        ("convert", ["--in-place"]) => proven_by(TEST, "operator(&[\"convert\", \"--in-place\"]"),
        ("render", []) => proven_by(TEST, "operator(&[\"render\"]"),
        ("render", ["--script"]) => proven_by("operator/tests/offline_render.rs", "[\"render\", \"--script\"]"),
        ("resume", []) => proven_by("operator/tests/waves.rs", ".args([\"resume\", &binding])"),
        ("history", ["-n"]) => proven_by(
            "operator/tests/config_history.rs",
            "cli(&[\"history\", config, \"-n\", ns]",
        ),
        ("rollback", ["-n", "--to-revision"]) => proven_by(
            "operator/tests/config_history.rs",
            "&[\"rollback\", \"edge.r1\", \"-n\", namespace, \"--to-revision\", \"1\"]",
        ),
        (subcommand, flags) => Err(format!(
            "vrouter-operator {subcommand} {}: the tests run `convert [--in-place]` and `render [--script]` only",
            flags.join(" ")
        )),
    }
}

/// The workspace directory of a package.
fn crate_dir(name: &str) -> Result<String, String> {
    let mut candidates = vec!["operator".to_owned(), "xtask".to_owned()];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        candidates.push(format!("crates/{}", entry.unwrap().file_name().to_string_lossy()));
    }
    candidates
        .into_iter()
        .find(|dir| {
            std::fs::read_to_string(root().join(dir).join("Cargo.toml"))
                .is_ok_and(|t| t.contains(&format!("name = \"{name}\"")))
        })
        .ok_or_else(|| format!("no workspace crate named {name:?}"))
}

// ---------------------------------------------------------------- manifests

fn meta_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// References the offline render leaves to the cluster, resolved among
/// `objects` (and the configs the bindings render).
fn unresolved(objects: &[Loaded], rendered: &[VRouterConfig], page: &str) -> Vec<String> {
    let mut keys: HashSet<(String, String, String)> = HashSet::new();
    for loaded in objects {
        let (kind, ns, name) = match &loaded.manifest {
            Manifest::Other(v) => (
                v["kind"].as_str().unwrap_or("").to_owned(),
                v.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_owned(),
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            ),
            m => {
                let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
                    serde_json::from_value(m.to_value()["metadata"].clone()).unwrap();
                let (ns, name) = meta_key(&meta);
                (m.kind().to_owned(), ns, name)
            }
        };
        keys.insert((kind, ns, name));
    }
    for config in rendered {
        let (ns, name) = meta_key(&config.metadata);
        keys.insert(("VRouterConfig".into(), ns, name));
    }
    let mut problems = Vec::new();
    let missing = |source: &str, kind: &str, ns: &str, name: &str, field: &str| {
        (!keys.contains(&(kind.to_owned(), ns.to_owned(), name.to_owned()))).then(|| {
            format!("{source}: {field}: {kind} {ns}/{name} is not defined on this page or in testdata/examples")
        })
    };
    for loaded in objects.iter().filter(|l| l.source.starts_with(page)) {
        match &loaded.manifest {
            Manifest::Target(t) => {
                if let Some(p) = &t.spec.provider.proxmox {
                    let (ns, _) = meta_key(&t.metadata);
                    problems.extend(missing(
                        &loaded.source,
                        "ProxmoxCluster",
                        &ns,
                        &p.cluster_ref.name,
                        "spec.provider.proxmox.clusterRef",
                    ));
                }
            }
            Manifest::ProxmoxCluster(p) => {
                let (ns, _) = meta_key(&p.metadata);
                problems.extend(missing(
                    &loaded.source,
                    "Secret",
                    &ns,
                    &p.spec.credentials_ref.name,
                    "spec.credentialsRef",
                ));
                let secret = objects.iter().find_map(|l| match &l.manifest {
                    Manifest::Other(v)
                        if v["kind"] == "Secret"
                            && v.pointer("/metadata/name").and_then(Value::as_str)
                                == Some(p.spec.credentials_ref.name.as_str()) =>
                    {
                        Some(v)
                    }
                    _ => None,
                });
                if let Some(secret) = secret {
                    for key in ["api-token-id", "api-token-secret"] {
                        let present = ["stringData", "data"].iter().any(|d| secret[d].get(key).is_some());
                        if !present {
                            problems.push(format!(
                                "{}: the credentials Secret lacks the key {key:?}",
                                loaded.source
                            ));
                        }
                    }
                }
            }
            Manifest::Status(s) => {
                let (ns, _) = meta_key(&s.metadata);
                problems.extend(missing(
                    &loaded.source,
                    "VRouterConfig",
                    &ns,
                    &s.spec.config_ref.name,
                    "spec.configRef",
                ));
            }
            _ => {}
        }
    }
    problems
}

// ---------------------------------------------------------------- links

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// become hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside fenced blocks).
fn anchors(markdown: &str) -> HashSet<String> {
    let mut in_fence = false;
    let mut out = HashSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Relative links (`[text](file.md#anchor)`, `[text](#anchor)`) must point at
/// a file of the repository and, with an anchor, at one of its headings.
fn broken_links(page: &str, markdown: &str) -> Vec<String> {
    let dir = Path::new(page).parent().unwrap_or(Path::new(""));
    let mut failures = Vec::new();
    let mut in_fence = false;
    for (i, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let link = &after[..end];
            rest = &after[end..];
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.to_owned()
            } else {
                dir.join(file).to_string_lossy().into_owned()
            };
            let read = if file.is_empty() {
                Ok(markdown.to_owned())
            } else {
                std::fs::read_to_string(root().join(&target))
            };
            let Ok(text) = read else {
                if !root().join(&target).is_dir() {
                    failures.push(format!("{page}:{}: link to {link:?}: {target} does not exist", i + 1));
                }
                continue;
            };
            if !anchor.is_empty() && !anchors(&text).contains(anchor) {
                failures.push(format!(
                    "{page}:{}: link to {link:?}: {target} has no heading #{anchor}",
                    i + 1
                ));
            }
        }
    }
    failures
}

// ---------------------------------------------------------------- the test

#[derive(Default)]
struct Counts {
    yaml_blocks: usize,
    objects: usize,
    rendered_configs: usize,
    command_blocks: usize,
    commands: usize,
    text_blocks: usize,
    links: usize,
}

fn check_page(page: &str, checker: &Checker, examples: &[Loaded], counts: &mut Counts) -> Vec<String> {
    let markdown = read(page);
    let mut failures = broken_links(page, &markdown);
    counts.links += markdown.matches("](").count();
    failures.extend(check_markdown(page, &markdown, checker, examples, counts));
    failures
}

fn check_markdown(
    page: &str,
    markdown: &str,
    checker: &Checker,
    examples: &[Loaded],
    counts: &mut Counts,
) -> Vec<String> {
    let blocks = match fenced_blocks(markdown) {
        Ok(b) => b,
        Err(e) => return vec![format!("{page}:{e}")],
    };
    let mut failures = Vec::new();
    let mut objects: Vec<Loaded> = Vec::new();
    for block in &blocks {
        let at = format!("{page}:{}", block.line);
        match block.info.as_str() {
            "yaml" => {
                counts.yaml_blocks += 1;
                match parse_documents_strictly(&block.text, &at) {
                    Ok(parsed) if parsed.is_empty() => failures.push(format!("{at}: an empty yaml block")),
                    Ok(parsed) => {
                        counts.objects += parsed.len();
                        objects.extend(parsed.into_iter().map(|parsed| Loaded {
                            source: at.clone(),
                            manifest: parsed.manifest,
                            unknown_fields: parsed.unknown_fields,
                        }));
                    }
                    Err(e) => failures.push(format!("{at}: {e}")),
                }
            }
            "sh" | "bash" | "console" => {
                counts.command_blocks += 1;
                for (line, command) in commands(block) {
                    counts.commands += 1;
                    if let Err(why) = checker.check_command(&command) {
                        failures.push(format!("{page}:{line}: `{command}`: {why}"));
                    }
                }
            }
            "text" => counts.text_blocks += 1,
            other => failures.push(format!(
                "{at}: a ```{other} block is not checked: use ```yaml for manifests, ```sh (or ```console, \
                 with `$ ` prompts) for commands, ```text for diagrams and output"
            )),
        }
    }
    if objects.is_empty() {
        return failures;
    }
    // The examples first, so the page's own objects win where names meet.
    let mut set: Vec<Loaded> = examples.to_vec();
    set.extend(objects);
    match offline_render::render_with_warnings(&set) {
        Ok(rendered) => {
            let configs = rendered.configs;
            // Examples in the docs should be ones admission accepts silently.
            failures.extend(
                rendered
                    .warnings
                    .iter()
                    .filter(|w| w.source.starts_with(page))
                    .map(|w| format!("{w} (an admission warning)")),
            );
            let page_bindings: Vec<(String, String)> = set
                .iter()
                .filter(|l| l.source.starts_with(page))
                .filter_map(|l| match &l.manifest {
                    Manifest::Binding(b) => Some(meta_key(&b.metadata)),
                    _ => None,
                })
                .collect();
            for (ns, name) in &page_bindings {
                let rendered = configs
                    .iter()
                    .filter(|c| {
                        c.metadata.namespace.as_deref() == Some(ns.as_str())
                            && c.metadata.labels.as_ref().and_then(|l| l.get(LABEL_BINDING)) == Some(name)
                    })
                    .count();
                if rendered == 0 {
                    failures.push(format!("{page}: the binding {ns}/{name} rendered no VRouterConfig"));
                }
                counts.rendered_configs += rendered;
            }
            failures.extend(unresolved(&set, &configs, page));
        }
        Err(problems) => {
            failures.extend(problems.iter().map(ToString::to_string));
            failures.extend(unresolved(&set, &[], page));
        }
    }
    failures
}

#[test]
fn every_yaml_block_and_command_in_the_docs_is_exercised() {
    let checker = Checker { kinds: kinds() };
    for (kind, _, source, needle) in CONDITIONS {
        assert!(
            sources_under(source).contains(needle),
            "{source} no longer sets {needle} on {kind}: update CONDITIONS in this test"
        );
    }
    let examples = offline_render::load(&[root().join("testdata/examples")]).unwrap();
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    let mut per_page = BTreeMap::new();
    for page in pages() {
        let before = (counts.yaml_blocks, counts.commands);
        failures.extend(check_page(&page, &checker, &examples, &mut counts));
        per_page.insert(page, (counts.yaml_blocks - before.0, counts.commands - before.1));
    }
    let mut report = String::new();
    for (page, (yaml, commands)) in &per_page {
        let _ = writeln!(report, "  {page}: {yaml} yaml blocks, {commands} commands");
    }
    println!(
        "checked {} yaml blocks ({} objects, {} configs rendered from the pages' bindings), \
         {} commands in {} command blocks, {} links; skipped {} text blocks:\n{report}",
        counts.yaml_blocks,
        counts.objects,
        counts.rendered_configs,
        counts.commands,
        counts.command_blocks,
        counts.links,
        counts.text_blocks
    );
    assert!(
        failures.is_empty(),
        "{} problem(s) in the docs:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        counts.yaml_blocks > 0 && counts.commands > 0,
        "no blocks found: is the page list right?"
    );
}

// ------------------------------------------------- the checker fails loudly

fn checker() -> Checker {
    Checker { kinds: kinds() }
}

#[test]
fn kubectl_commands_are_checked_against_kinds_conditions_and_fields() {
    let c = checker();
    let cases: &[(&str, Option<&str>)] = &[
        ("kubectl wait --for=condition=Applied vrc/x -n network", None),
        ("kubectl wait --for=condition=Ready vrouterbinding/x", None),
        ("kubectl wait --for=condition=Ready vrouterconfig/x", None),
        ("kubectl wait --for=condition=Stalled=false vroutertarget/x", None),
        ("kubectl wait --for=condition=Synced pxc/x", None),
        (
            "kubectl wait --for=condition=Synced vrouterconfig/x",
            Some("VRouterConfig has no condition \"Synced\""),
        ),
        (
            "kubectl wait --for=condition=Applied vrb/x",
            Some("VRouterBinding has no condition \"Applied\""),
        ),
        ("kubectl get vroutres -n x", Some("unknown resource type \"vroutres\"")),
        ("kubectl get vrt x -o jsonpath='{.status.vmRunning}'", None),
        (
            "kubectl get vrt x -o jsonpath='{.status.running}'",
            Some("VRouterTarget has no field"),
        ),
        (
            "kubectl get vrb x -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}'",
            None,
        ),
        ("kubectl wait --for=jsonpath='{.status.phase}'=Applied vrc/x", None),
        ("kubectl get secret vrs-x-config -o jsonpath='{.data.startup}'", None),
        (
            "kubectl get secret vrs-x-config -o jsonpath='{.data.boot}'",
            Some("only .data.startup"),
        ),
        (
            "kubectl annotate namespace vms --overwrite vrouter.kojuro.date/allowed-target-namespaces=a,b",
            None,
        ),
        (
            "kubectl annotate namespace vms vrouter.kojuro.date/paused=true",
            Some("not one the operator reads"),
        ),
        (
            "kubectl annotate clusterrole r meta.helm.sh/release-name=a meta.helm.sh/release-namespace=b",
            None,
        ),
        (
            "kubectl annotate clusterrole r vrouter.kojuro.date/paused=true",
            Some("not one the operator reads"),
        ),
        ("kubectl delete secret s -n x --ignore-not-found", None),
        ("kubectl get vrc -l vrouter.kojuro.date/binding=b", None),
        ("kubectl get vrc -l app=b", Some("label \"app\"")),
        ("kubectl annotate vrc x vrouter.kojuro.date/paused=true", None),
        ("kubectl annotate vrc x vrouter.kojuro.date/paused-", None),
        (
            "kubectl annotate vrc x vrouter.kojuro.date/pause=true",
            Some("not one the operator reads"),
        ),
        ("kubectl apply -f testdata/examples/", None),
        ("kubectl apply -f testdata/nowhere/", Some("does not exist")),
        ("kubectl wait vrc/x", Some("without --for")),
        ("kubectl exec pod", Some("not a checked verb")),
        ("kubectl exec -it pod -- sh", Some("unknown kubectl flag -it")),
    ];
    for (command, expected) in cases {
        let got = c.check_command(command);
        match expected {
            None => assert!(got.is_ok(), "{command}: {got:?}"),
            Some(part) => {
                let err = got.expect_err(command);
                assert!(err.contains(part), "{command}: {err}");
            }
        }
    }
}

#[test]
fn only_commands_a_test_runs_are_accepted() {
    let c = checker();
    for ok in [
        "cargo xtask test",
        "cargo xtask gen-crds",
        "cargo xtask image --out /tmp/operator.oci.tar --binary target/release/vrouter-operator",
        "cargo xtask bench --large-targets 10000",
        "cargo run -p vrouter-operator -- render testdata/examples",
        "cargo run -p vrouter-operator -- render --script testdata/examples",
        "cargo test -p vrouter-operator --test docs",
        "export KUBECONFIG=/tmp/demo/kubeconfig",
        "KUBECONFIG=/tmp/demo/kubeconfig kubectl get vrouterconfigs -A",
        "helm install vrouter-operator deploy/helm/vrouter-operator -n vrouter-system --create-namespace",
        "helm uninstall vrouter-operator -n vrouter-system",
        "vrouter-operator convert --in-place manifests/",
        "vrouter-operator render site-a.yaml site-b.yaml",
    ] {
        assert!(c.check_command(ok).is_ok(), "{ok}: {:?}", c.check_command(ok));
    }
    for (bad, part) in [
        (
            "cargo run -p vrouter-operator -- render my/files",
            "render [--script] testdata/examples",
        ),
        ("cargo test -p vrouter-operator --test nowhere", "does not exist"),
        ("cargo xtask deploy", "not a cargo command"),
        ("cargo xtask image --push", "cargo xtask image has no flag --push"),
        ("cargo xtask bench --turbo", "cargo xtask bench has no flag --turbo"),
        ("curl http://localhost:8080/metrics", "`curl` is not a command"),
        (
            "helm install r deploy/helm/vrouter-operator --set nonsense=1",
            "no value \"nonsense\"",
        ),
        ("kubectl get vrc | grep x", "pipes"),
        ("helm uninstall a b -n x", "expected `helm uninstall <release>`"),
        ("helm uninstall a --keep-history", "unknown helm uninstall flag"),
        ("vrouter-operator convert --force x.yaml", "`convert [--in-place]`"),
        ("vrouter-operator convert", "without a file"),
        ("vrouter-operator serve x", "`convert [--in-place]`"),
        ("KUBECONFIG=/tmp/k kubectl get vrc -l x=y", "label \"x\""),
    ] {
        let err = c.check_command(bad).expect_err(bad);
        assert!(err.contains(part), "{bad}: {err}");
    }
}

#[test]
fn unknown_fences_and_bad_manifests_fail_with_their_file_and_line() {
    let blocks = fenced_blocks("text\n```yaml\nkind: X\n```\n\n```\nplain\n```\n").unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!((blocks[0].info.as_str(), blocks[0].line), ("yaml", 2));
    assert_eq!((blocks[1].info.as_str(), blocks[1].line), ("", 6));
    assert!(fenced_blocks("```sh\nnever closed\n").unwrap_err().contains("line 1"));

    let page = "```\nunlabelled\n```\n\
                ```yaml\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterTarget\n\
                metadata: {name: t, namespace: n}\nspec: {provider: {type: proxmox}}\n```\n\
                ```yaml\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterConfig\n\
                metadata: {name: c, namespace: n}\nspec: {targetRef: {name: nowhere}}\n```\n\
                ```sh\nkubectl wait --for=condition=Synced vrc/c\n```\n\
                ```yaml\nkind: [\n```\n";
    let failures = check_markdown("page.md", page, &checker(), &[], &mut Counts::default());
    let expected = [
        "page.md:1: a ``` block is not checked",
        "page.md:4: VRouterTarget n/t: spec.provider.proxmox: must be set when spec.provider.type is proxmox",
        "page.md:10: VRouterConfig n/c: spec.targetRef.name: VRouterTarget \"nowhere\" is not among the given manifests",
        "page.md:17: `kubectl wait --for=condition=Synced vrc/c`: VRouterConfig has no condition \"Synced\"",
        "page.md:19: page.md:19: document 1",
    ];
    for e in expected {
        assert!(
            failures.iter().any(|f| f.starts_with(e)),
            "missing {e:?} in {failures:#?}"
        );
    }
    assert_eq!(failures.len(), expected.len(), "{failures:#?}");

    // A set that renders, but with something admission only warns about.
    let page = "```yaml\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\n\
                metadata: {name: w, namespace: n}\nspec: {commands: \"{{ x | safe }}\"}\n```\n";
    let failures = check_markdown("page2.md", page, &checker(), &[], &mut Counts::default());
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("page2.md:1: VRouterTemplate n/w: spec.commands: ")
            && failures[0].ends_with("(an admission warning)"),
        "{failures:#?}"
    );
}

#[test]
fn sh_blocks_split_into_commands_with_their_lines() {
    let block = Block {
        info: "sh".into(),
        line: 10,
        text: "# a comment\nkubectl get vrc   # trailing\n\nhelm upgrade r chart \\\n  --set a=b\necho '# not a comment'\n"
            .into(),
    };
    assert_eq!(
        commands(&block),
        vec![
            (12, "kubectl get vrc".to_owned()),
            (14, "helm upgrade r chart  --set a=b".to_owned()),
            (16, "echo '# not a comment'".to_owned()),
        ]
    );
    let console = Block {
        info: "console".into(),
        line: 1,
        text: "$ kubectl get vrc \\\n    -n network\nNAME   PHASE\nx      Applied\n$ helm install r c\n".into(),
    };
    assert_eq!(
        commands(&console),
        vec![
            (2, "kubectl get vrc  -n network".to_owned()),
            (6, "helm install r c".to_owned())
        ]
    );
    assert_eq!(
        words("kubectl get x -o jsonpath='{.a b}' \"c d\"").unwrap(),
        ["kubectl", "get", "x", "-o", "jsonpath={.a b}", "c d"]
    );
}

#[test]
fn relative_links_must_reach_a_file_and_heading() {
    assert_eq!(
        slug(" Readiness (KubeVirt and Proxmox VE)"),
        "readiness-kubevirt-and-proxmox-ve"
    );
    assert_eq!(
        slug(" From the Go operator's text/template and sprig"),
        "from-the-go-operators-texttemplate-and-sprig"
    );
    let page = "# Top\n\n[ok](#top) [ok](templates.md#params-merge) [web](https://example.com)\n\
                [gone](nowhere.md) [no heading](templates.md#nothing)\n```text\n[in a fence](x.md)\n```\n";
    let failures = broken_links("docs/page.md", page);
    assert_eq!(
        failures,
        [
            "docs/page.md:4: link to \"nowhere.md\": docs/nowhere.md does not exist",
            "docs/page.md:4: link to \"templates.md#nothing\": docs/templates.md has no heading #nothing",
        ]
    );
}

// ---------------------------------------------------------------- architecture

/// The heading of the table in docs/architecture.md that maps each spec
/// behaviour to its file and its test.
const BEHAVIOUR_TABLE: &str = "## Where each behaviour lives";

/// The backticked words of a table cell.
fn backticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether `source` defines `name` as a test function: `#[test]` or
/// `#[tokio::test]` among the attributes right above its `fn`.
fn defines_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().map(str::trim_start).collect();
    lines.iter().enumerate().any(|(i, line)| {
        (line.starts_with(&format!("fn {name}(")) || line.starts_with(&format!("async fn {name}(")))
            && lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"))
    })
}

/// What is wrong with one row of the behaviour table: a section, at least
/// one implementing file or directory that exists, and at least one test
/// (`file::name`) that exists.
fn check_behaviour_row(row: &str, read_source: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let cells: Vec<&str> = row.trim().trim_matches('|').split('|').map(str::trim).collect();
    let [section, behaviour, implemented, proven] = cells[..] else {
        return vec![format!(
            "{row}: want 4 columns (§, behaviour, implemented in, proven by)"
        )];
    };
    let mut problems = Vec::new();
    if section.is_empty() || behaviour.is_empty() {
        problems.push(format!("{row}: a § and a behaviour are required"));
    }
    let files = backticked(implemented);
    let tests = backticked(proven);
    if files.is_empty() || tests.is_empty() {
        problems.push(format!("{behaviour}: names no implementing file or no test"));
    }
    for file in files {
        if let Err(e) = exists(file) {
            problems.push(format!("{behaviour}: {e}"));
        }
    }
    for test in tests {
        let Some((file, name)) = test.split_once("::") else {
            problems.push(format!("{behaviour}: {test:?} is not file::test_name"));
            continue;
        };
        match read_source(file) {
            None => problems.push(format!("{behaviour}: {file} does not exist")),
            Some(source) if !defines_test(&source, name) => {
                problems.push(format!("{behaviour}: {file} has no test named {name}"))
            }
            Some(_) => {}
        }
    }
    problems
}

/// The rows of the behaviour table.
fn behaviour_rows(markdown: &str) -> Vec<&str> {
    markdown
        .lines()
        .skip_while(|l| l.trim() != BEHAVIOUR_TABLE)
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect()
}

#[test]
fn the_architecture_table_names_files_and_tests_that_exist() {
    let page = read("docs/architecture.md");
    let rows = behaviour_rows(&page);
    assert!(rows.len() >= 30, "{BEHAVIOUR_TABLE} lists {} behaviours", rows.len());
    let sections: HashSet<&str> = rows.iter().filter_map(|r| r.split('|').nth(1)).map(str::trim).collect();
    for section in [
        "§2.2", "§4.1", "§6.2", "§7.1", "§7.2", "§7.3", "§7.4", "§7.5", "§7.6", "§8",
    ] {
        assert!(
            sections.iter().any(|s| s.split(", ").any(|part| part == section)),
            "no row for {section}"
        );
    }
    let read_source = |file: &str| std::fs::read_to_string(root().join(file)).ok();
    let problems: Vec<String> = rows
        .iter()
        .flat_map(|row| check_behaviour_row(row, read_source))
        .collect();
    assert!(problems.is_empty(), "docs/architecture.md:\n{}", problems.join("\n"));
}

#[test]
fn a_behaviour_row_naming_a_missing_file_or_test_is_refused() {
    let source = "#[test]\nfn real_test() {}\nfn helper() {}\n";
    let read_source = |file: &str| (file == "a.rs").then(|| source.to_owned());
    let ok = "| §1 | x | `operator/src/lib.rs` | `a.rs::real_test` |";
    assert_eq!(check_behaviour_row(ok, read_source), Vec::<String>::new());
    let bad = "| §1 | x | `operator/src/nowhere.rs` | `a.rs::helper`, `a.rs::gone`, `b.rs::t`, `a.rs` |";
    assert_eq!(
        check_behaviour_row(bad, read_source),
        [
            "x: operator/src/nowhere.rs does not exist in the repository",
            "x: a.rs has no test named helper",
            "x: a.rs has no test named gone",
            "x: b.rs does not exist",
            "x: \"a.rs\" is not file::test_name",
        ]
    );
}
