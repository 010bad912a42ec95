//! Structural checks of the Helm chart in `deploy/helm/vrouter-operator/`
//! that need no Helm and no API server, so they run in a plain `cargo test`:
//! every action is closed, every `.Values` path and every `include`
//! resolves, each manifest template is YAML once its actions are blanked
//! out, and the chart says the same as the plain manifests in
//! `deploy/operator/` (RBAC rules, webhook rules, security contexts,
//! resources) and the operator's flags (`operator/src/cli/args.rs`). Rendering
//! the chart with a real `helm` and sending it to a real API server is
//! `operator/tests/helm_chart.rs`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn chart() -> PathBuf {
    root().join("deploy/helm/vrouter-operator")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every file under templates/ and its subdirectories, by path below
/// templates/, with its text.
fn templates() -> Vec<(String, String)> {
    let dir = chart().join("templates");
    let mut files = Vec::new();
    files_below(&dir, &dir, &mut files);
    files.sort();
    assert!(files.len() >= 4, "expected the chart's templates, found {files:?}");
    files
}

fn files_below(base: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_below(base, &path, files);
        } else {
            let name = path.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            files.push((name, read(&path)));
        }
    }
}

fn manifest_templates() -> Vec<(String, String)> {
    templates()
        .into_iter()
        .filter(|(name, _)| name.ends_with(".yaml"))
        .collect()
}

/// The actions (`{{ ... }}` bodies) of a template, in order, or the first
/// structural error: an unclosed action, or `{{` inside an action.
fn actions(text: &str) -> Result<Vec<&str>, String> {
    let mut found = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        let body_start = open + 2;
        let Some(close) = rest[body_start..].find("}}") else {
            return Err(format!("`{{{{` at byte {} is never closed", offset + open));
        };
        let body = &rest[body_start..body_start + close];
        if body.contains("{{") {
            return Err(format!("`{{{{` at byte {} opens inside another action", offset + open));
        }
        found.push(body);
        let consumed = body_start + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    if rest.contains("}}") {
        return Err(format!(
            "`}}}}` at byte {} closes no action",
            offset + rest.find("}}").unwrap()
        ));
    }
    Ok(found)
}

/// The template with actions blanked: a line holding only actions (control
/// flow, `include ... | nindent`) is dropped, an inline action becomes `X`.
/// What remains is the shape of the manifest with every `if` taken.
fn blank_actions(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut plain = String::new();
        let mut rest = line;
        while let Some(open) = rest.find("{{") {
            // An unclosed action is reported by the balance test; keep it as text here.
            let Some(len) = rest[open..].find("}}") else { break };
            let close = open + len + 2;
            plain.push_str(&rest[..open]);
            plain.push('X');
            rest = &rest[close..];
        }
        plain.push_str(rest);
        if line.contains("{{") && plain.trim().chars().all(|c| c == 'X') {
            continue;
        }
        out.push_str(&plain);
        out.push('\n');
    }
    out
}

/// The YAML documents of a manifest template, actions blanked.
fn documents(name: &str, text: &str) -> Vec<Value> {
    let blanked = blank_actions(text);
    serde_yaml::Deserializer::from_str(&blanked)
        .map(|doc| {
            Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{name} is not YAML once its actions are blanked: {e}\n{blanked}"))
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

fn chart_objects() -> Vec<Value> {
    manifest_templates()
        .iter()
        .flat_map(|(name, text)| documents(name, text))
        .collect()
}

fn plain_objects(file: &str) -> Vec<Value> {
    let path = root().join("deploy/operator").join(file);
    let text = read(&path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} among {} objects", objects.len()))
}

fn values() -> Value {
    let path = chart().join("values.yaml");
    serde_yaml::from_str(&read(&path)).unwrap_or_else(|e| panic!("values.yaml is not YAML: {e}"))
}

fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, key| v.as_mapping()?.get(key))
}

#[test]
fn action_scanner_rejects_unbalanced_braces() {
    assert_eq!(actions("a: {{ .Values.x }} b: {{ .Values.y }}").unwrap().len(), 2);
    assert!(actions("a: {{ .Values.x }").unwrap_err().contains("never closed"));
    assert!(
        actions("a: {{ .Values.x {{ y }}")
            .unwrap_err()
            .contains("inside another")
    );
    assert!(actions("a: .Values.x }}").unwrap_err().contains("closes no action"));
}

#[test]
fn every_template_has_balanced_actions_and_closed_blocks() {
    for (name, text) in templates() {
        let actions = actions(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Each if/with/range/define opens a block that one `end` closes.
        let keyword = |a: &str| a.trim_matches('-').split_whitespace().next().unwrap_or("").to_string();
        let opens = actions
            .iter()
            .filter(|a| ["if", "with", "range", "define"].contains(&keyword(a).as_str()))
            .count();
        let ends = actions.iter().filter(|a| keyword(a) == "end").count();
        assert_eq!(opens, ends, "{name}: {opens} blocks opened, {ends} ended");
        assert!(
            actions
                .iter()
                .all(|a| !a.trim_matches('-').trim().starts_with("/*") || a.trim_matches('-').trim().ends_with("*/")),
            "{name}: an unclosed template comment"
        );
    }
}

#[test]
fn every_values_path_the_templates_use_is_in_values_yaml() {
    let values = values();
    let mut used = BTreeSet::new();
    for (name, text) in templates() {
        for (at_byte, _) in text.match_indices(".Values.") {
            let path: String = text[at_byte + ".Values.".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            used.insert((path.trim_end_matches('.').to_string(), name.clone()));
        }
    }
    assert!(used.len() >= 15, "expected many values in use, found {used:?}");
    let missing: Vec<_> = used.iter().filter(|(path, _)| at(&values, path).is_none()).collect();
    assert!(missing.is_empty(), "values.yaml lacks {missing:?}");
}

#[test]
fn every_include_names_a_defined_template() {
    let quoted_after = |text: &str, word: &str| -> BTreeSet<String> {
        text.match_indices(word)
            .filter_map(|(i, _)| text[i + word.len()..].trim_start().strip_prefix('"'))
            .filter_map(|rest| rest.split('"').next().map(str::to_string))
            .collect()
    };
    let all: String = templates().into_iter().map(|(_, text)| text).collect();
    let defined = quoted_after(&all, "define ");
    let included: BTreeSet<String> = quoted_after(&all, "include ")
        .union(&quoted_after(&all, "template "))
        .cloned()
        .collect();
    assert!(defined.contains("vrouter-operator.fullname"), "{defined:?}");
    let undefined: Vec<_> = included.difference(&defined).collect();
    assert!(undefined.is_empty(), "included but never defined: {undefined:?}");
}

#[test]
fn every_manifest_template_is_yaml_of_named_kubernetes_objects() {
    let objects = chart_objects();
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    // ClusterRole(Binding) or Role(Binding) by watchNamespace: blanked to X.
    for kind in [
        "ServiceAccount",
        "X",
        "XBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "Issuer",
        "Certificate",
        "ValidatingWebhookConfiguration",
        "CustomResourceDefinition",
    ] {
        assert!(kinds.contains(kind), "the chart has no {kind}: {kinds:?}");
    }
    for object in &objects {
        assert!(object["apiVersion"].is_string(), "no apiVersion: {object:?}");
        assert!(object["metadata"]["name"].is_string(), "no metadata.name: {object:?}");
    }
}

#[test]
fn chart_rbac_grants_exactly_what_the_plain_manifest_grants() {
    // The operator's role is a ClusterRole or, with watchNamespace, a Role:
    // its kind is a template action, blanked here; the real render of both
    // is checked in operator/tests/helm_chart.rs with helm itself.
    let chart = chart_objects();
    let plain = plain_objects("rbac.yaml");
    let operator_role = chart
        .iter()
        .find(|o| o["kind"] == "X" && o["rules"].is_sequence())
        .expect("the operator's role");
    assert_eq!(operator_role["rules"], find(&plain, "ClusterRole")["rules"]);
    assert_eq!(find(&chart, "Role")["rules"], find(&plain, "Role")["rules"]);
}

#[test]
fn chart_webhooks_match_the_plain_manifest() {
    let chart = chart_objects();
    let plain = plain_objects("webhook.yaml");
    let (chart_hooks, plain_hooks) = (
        find(&chart, "ValidatingWebhookConfiguration")["webhooks"]
            .as_sequence()
            .unwrap(),
        find(&plain, "ValidatingWebhookConfiguration")["webhooks"]
            .as_sequence()
            .unwrap(),
    );
    assert_eq!(chart_hooks.len(), plain_hooks.len());
    for (c, p) in chart_hooks.iter().zip(plain_hooks) {
        for field in ["name", "rules", "sideEffects", "admissionReviewVersions"] {
            assert_eq!(c[field], p[field], "webhook {:?}: {field} differs", p["name"]);
        }
        assert_eq!(
            c["clientConfig"]["service"]["path"],
            p["clientConfig"]["service"]["path"]
        );
    }
    let values = values();
    assert_eq!(
        Some(&plain_hooks[0]["failurePolicy"]),
        at(&values, "webhook.failurePolicy")
    );
    assert_eq!(
        Some(&plain_hooks[0]["timeoutSeconds"]),
        at(&values, "webhook.timeoutSeconds")
    );
}

#[test]
fn default_values_match_the_plain_deployment() {
    let values = values();
    let plain = plain_objects("deployment.yaml");
    let deployment = find(&plain, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(at(&values, "replicas"), Some(&deployment["spec"]["replicas"]));
    assert_eq!(at(&values, "podSecurityContext"), Some(&pod["securityContext"]));
    assert_eq!(at(&values, "securityContext"), Some(&container["securityContext"]));
    assert_eq!(at(&values, "resources"), Some(&container["resources"]));
    let image = container["image"].as_str().unwrap();
    let repository = at(&values, "image.repository").and_then(Value::as_str).unwrap();
    assert_eq!(image, format!("{repository}:{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(
        at(&values, "image.tag").and_then(Value::as_str),
        Some(""),
        "the tag defaults to appVersion"
    );
}

#[test]
fn chart_yaml_is_v2_and_versioned_like_the_workspace() {
    let chart: Value = serde_yaml::from_str(&read(&chart().join("Chart.yaml"))).unwrap();
    assert_eq!(chart["apiVersion"].as_str(), Some("v2"));
    assert_eq!(chart["name"].as_str(), Some("vrouter-operator"));
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"].as_str(), Some(version));
    assert_eq!(chart["appVersion"].as_str(), Some(version));
}

#[test]
fn every_env_var_the_chart_sets_is_a_flag_the_operator_reads() {
    // The flags, including those flattened in from their own files.
    let cli = ["args.rs", "webhook_cert_args.rs"]
        .map(|file| read(&root().join("operator/src/cli").join(file)))
        .concat();
    let flags: BTreeSet<&str> = cli
        .match_indices("env = \"")
        .filter_map(|(i, m)| cli[i + m.len()..].split('"').next())
        .collect();
    assert!(flags.contains("APPLY_TIMEOUT"), "{flags:?}");
    let deployment = find(&chart_objects(), "Deployment").clone();
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap()
        .clone();
    let names: Vec<&str> = env.iter().filter_map(|e| e["name"].as_str()).collect();
    assert!(names.len() >= 8, "{names:?}");
    let unknown: Vec<_> = names.iter().filter(|n| !flags.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the operator reads no {unknown:?}; it reads {flags:?}"
    );
}

/// The chart's CRDs are templates (Helm upgrades them with the release),
/// one per generated CRD, each holding that CRD's YAML; the chart has no
/// `crds/` directory, whose CRDs Helm would install once and never upgrade.
/// `cargo xtask gen-crds --check` compares them byte for byte.
#[test]
fn chart_crds_are_templates_of_the_generated_crds() {
    assert!(
        !chart().join("crds").exists(),
        "the chart's crds/ is gone: its CRDs are templates/crds/ (run `cargo xtask gen-crds`)"
    );
    let dir = chart().join("templates/crds");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut plain: Vec<String> = fs::read_dir(root().join("deploy/crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    plain.sort();
    assert_eq!(names.len(), 7, "{names:?}");
    assert_eq!(names, plain, "run `cargo xtask gen-crds`");
    for name in names {
        let template = read(&dir.join(&name));
        let body = read(&root().join("deploy/crds").join(&name));
        let spec = &body[body.find("\nspec:\n").unwrap()..];
        assert!(template.starts_with("{{- if .Values.crds.install }}\n"), "{name}");
        assert!(template.contains("helm.sh/resource-policy: keep"), "{name}");
        assert!(
            template.contains(spec),
            "{name}: not the generated CRD; run `cargo xtask gen-crds`"
        );
    }
}
