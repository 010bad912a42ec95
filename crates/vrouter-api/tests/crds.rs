//! The generated CRDs: snapshots, structural-schema rules, and the defaults
//! and enums the specification puts on each field.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

fn crd(plural: &str) -> CustomResourceDefinition {
    vrouter_api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap_or_else(|| panic!("no CRD {plural}"))
}

fn schema(plural: &str) -> Value {
    let crd = crd(plural);
    assert_eq!(crd.spec.versions.len(), 1);
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The schema of the property at a dotted path, e.g. `spec.rollout.mode`.
fn prop(plural: &str, path: &str) -> Value {
    let mut node = schema(plural);
    for part in path.split('.') {
        node = match part {
            "[]" => node["items"].clone(),
            name => node["properties"][name].clone(),
        };
        assert!(!node.is_null(), "{plural}: no property at {path}");
    }
    node
}

#[test]
fn seven_crds_in_one_group_and_version() {
    let all = vrouter_api::crds::all();
    let mut plurals: Vec<_> = all.iter().map(|c| c.spec.names.plural.clone()).collect();
    plurals.sort();
    assert_eq!(
        plurals,
        [
            "proxmoxclusters",
            "vrouterbindings",
            "vrouterconfigs",
            "vrouterparams",
            "vrouterstatuses",
            "vroutertargets",
            "vroutertemplates"
        ]
    );
    for c in &all {
        assert_eq!(c.spec.group, "vrouter.kojuro.date");
        assert_eq!(c.spec.scope, "Namespaced");
        assert_eq!(c.spec.versions[0].name, "v1");
        assert!(c.spec.versions[0].served && c.spec.versions[0].storage);
    }
}

#[test]
fn generated_crds_match_snapshots() {
    for c in vrouter_api::crds::all() {
        let name = c.spec.names.plural.clone();
        insta::assert_snapshot!(name, vrouter_api::crds::to_yaml(&c));
    }
}

/// Walks a schema and returns every violation of the structural-schema rules
/// this project holds itself to: every node typed unless it is a params block,
/// and `x-kubernetes-preserve-unknown-fields` nowhere but on `params`.
fn structural_violations(node: &Value, path: &str, out: &mut Vec<String>) {
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    let is_params = path.ends_with(".params");
    if preserve && !is_params {
        out.push(format!("{path}: preserve-unknown-fields outside params"));
    }
    if is_params && !preserve {
        out.push(format!("{path}: params must preserve unknown fields"));
    }
    // Kubernetes types an int-or-string node itself (a count or "10%").
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&json!(true));
    if node.get("type").is_none() && !preserve && !int_or_string {
        out.push(format!("{path}: no type"));
    }
    for keyword in ["anyOf", "oneOf", "allOf", "$ref", "not"] {
        if node.get(keyword).is_some() {
            out.push(format!("{path}: uses {keyword}"));
        }
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            structural_violations(child, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = node.get("items") {
        structural_violations(items, &format!("{path}[]"), out);
    }
}

#[test]
fn every_schema_is_structural_with_schemaless_params_only() {
    let mut params_seen = 0;
    for c in vrouter_api::crds::all() {
        let plural = c.spec.names.plural.clone();
        let mut violations = Vec::new();
        structural_violations(&schema(&plural), &plural, &mut violations);
        assert!(violations.is_empty(), "{violations:#?}");
        params_seen += serde_json::to_string(&c)
            .unwrap()
            .matches("x-kubernetes-preserve-unknown-fields")
            .count();
    }
    // Exactly the three params blocks: target, binding and VRouterParams.
    assert_eq!(params_seen, 3);
}

#[test]
fn the_structural_check_catches_an_untyped_field() {
    let bad = json!({"type": "object", "properties": {"spec": {"properties": {"x": {}}}}});
    let mut violations = Vec::new();
    structural_violations(&bad, "t", &mut violations);
    assert_eq!(violations, ["t.spec: no type", "t.spec.x: no type"]);
}

#[test]
fn defaults_are_where_the_spec_puts_them() {
    let cases = [
        ("vrouterconfigs", "spec.save", json!(true)),
        ("vrouterbindings", "spec.save", json!(true)),
        ("vroutertargets", "spec.provider.type", json!("kubevirt")),
        ("vrouterbindings", "spec.rollout.mode", json!("Disabled")),
        ("vrouterbindings", "spec.rollout.pollInterval", json!("10s")),
        ("vrouterbindings", "spec.rollout.waitAfterApplied", json!("0s")),
        ("proxmoxclusters", "spec.syncInterval", json!("60s")),
        ("proxmoxclusters", "spec.checkGuestUptime", json!(true)),
        ("proxmoxclusters", "spec.insecureSkipTLSVerify", json!(false)),
        ("vroutertargets", "spec.provider.daemon.timeoutSeconds", json!(60)),
        ("vrouterstatuses", "spec.syncInterval", json!("5m")),
        ("vrouterconfigs", "status.phase", json!("Pending")),
    ];
    for (plural, path, default) in cases {
        assert_eq!(prop(plural, path)["default"], default, "{plural} {path}");
    }
    // FixedInterval's waitInterval is required by the webhook, never defaulted.
    assert!(
        prop("vrouterbindings", "spec.rollout.waitInterval")
            .get("default")
            .is_none()
    );
}

#[test]
fn enums_are_where_the_spec_puts_them() {
    let cases = [
        (
            "vrouterbindings",
            "spec.rollout.mode",
            json!(["Disabled", "WaitForApplied", "FixedInterval", "Waves"]),
        ),
        (
            "vroutertargets",
            "spec.provider.type",
            json!(["kubevirt", "proxmox", "vrouter-daemon"]),
        ),
        (
            "vrouterconfigs",
            "status.phase",
            json!(["Pending", "Applying", "Applied", "Failed"]),
        ),
    ];
    for (plural, path, values) in cases {
        assert_eq!(prop(plural, path)["enum"], values, "{plural} {path}");
    }
}

#[test]
fn durations_are_strings_and_integers_are_64_bit() {
    for (plural, path) in [
        ("vrouterbindings", "spec.rollout.pollInterval"),
        ("vrouterbindings", "spec.rollout.waitInterval"),
        ("proxmoxclusters", "spec.syncInterval"),
        ("vrouterstatuses", "spec.syncInterval"),
    ] {
        assert_eq!(prop(plural, path)["type"], "string", "{plural} {path}");
    }
    assert_eq!(prop("vroutertargets", "spec.provider.proxmox.vmid")["format"], "int64");
    assert_eq!(prop("vrouterconfigs", "status.execPID")["format"], "int64");
}

#[test]
fn numeric_bounds_the_server_enforces() {
    let vmid = prop("vroutertargets", "spec.provider.proxmox.vmid");
    assert_eq!(
        (vmid["minimum"].as_f64(), vmid["maximum"].as_f64()),
        (Some(100.0), Some(999_999_999.0))
    );
    assert_eq!(
        prop("vroutertargets", "spec.provider.daemon.timeoutSeconds")["minimum"].as_f64(),
        Some(1.0)
    );
}

#[test]
fn status_subresource_where_the_spec_says() {
    for c in vrouter_api::crds::all() {
        let has_status = c.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some();
        let expected = !matches!(c.spec.names.plural.as_str(), "vroutertemplates" | "vrouterparams");
        assert_eq!(has_status, expected, "{}", c.spec.names.plural);
    }
}

#[test]
fn short_names_and_printer_columns() {
    let cases: [(&str, &[&str], &[&str]); 7] = [
        ("vroutertemplates", &["vrtt", "vroutertemplate"], &["Age"]),
        (
            "vroutertargets",
            &["vrt", "vroutertarget"],
            // `VM Running` as the Go operator names it.
            &["Provider", "VM Running", "Node", "Age"],
        ),
        (
            "vrouterbindings",
            &["vrb", "vrouterbinding"],
            &["Ready", "Reason", "Rollout", "Age"],
        ),
        ("vrouterparams", &["vrtp", "vrouterparams"], &["Age"]),
        (
            "vrouterconfigs",
            &["vrc", "vrouterconfig"],
            &["Phase", "Ready", "Reason", "Target", "Age"],
        ),
        (
            "proxmoxclusters",
            &["pxc", "proxmoxcluster"],
            &["Endpoint", "LastSync", "Age"],
        ),
        (
            "vrouterstatuses",
            &["vrs", "vrouterstatus"],
            &["Config", "Drift", "LastFetch", "Age"],
        ),
    ];
    for (plural, short, columns) in cases {
        let c = crd(plural);
        assert_eq!(c.spec.names.short_names.as_deref().unwrap(), short, "{plural}");
        let got: Vec<_> = c.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|col| col.name.as_str())
            .collect();
        assert_eq!(got, columns, "{plural}");
        // `kubectl get vrouter` lists every kind.
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["vrouter".to_owned()][..]),
            "{plural}"
        );
    }
    let phase = &crd("vrouterconfigs").spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap()[0];
    assert_eq!(phase.json_path, ".status.phase");
}
