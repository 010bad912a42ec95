//! One table per row of spec §6.2 (the rules that need no API server).

use super::*;
use serde::de::DeserializeOwned;

fn parse<T: DeserializeOwned>(yaml: &str) -> T {
    let mut value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
    value["metadata"]["namespace"] = "net".into();
    value["metadata"]["name"] = value["metadata"]["name"].as_str().map_or("obj".into(), Into::into);
    serde_json::from_value(value).unwrap()
}

/// Asserts the findings deny exactly the given fields, each message
/// containing the given text.
fn assert_denied(findings: &Findings, expected: &[(&str, &str)]) {
    let got: Vec<_> = findings.denials.iter().map(|v| v.field.as_str()).collect();
    let want: Vec<_> = expected.iter().map(|(field, _)| *field).collect();
    assert_eq!(got, want, "{findings:#?}");
    for (violation, (_, text)) in findings.denials.iter().zip(expected) {
        assert!(violation.message.contains(text), "{violation}");
    }
}

#[test]
fn target_provider_block_must_match_the_type() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("{provider: {kubevirt: {name: vm}}}", &[]),
        (
            "{provider: {type: kubevirt}}",
            &[("spec.provider.kubevirt", "must be set")],
        ),
        (
            "{provider: {kubevirt: {name: ''}}}",
            &[("spec.provider.kubevirt.name", "must not be empty")],
        ),
        (
            "{provider: {type: proxmox}}",
            &[("spec.provider.proxmox", "must be set")],
        ),
        (
            "{provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve}}}}",
            &[],
        ),
        (
            "{provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: ''}}}}",
            &[("spec.provider.proxmox.clusterRef.name", "must not be empty")],
        ),
        (
            "{provider: {type: vrouter-daemon}}",
            &[("spec.provider.daemon", "must be set")],
        ),
        (
            "{provider: {type: vrouter-daemon, daemon: {address: '', agentID: ''}}}",
            &[
                ("spec.provider.daemon.address", "empty"),
                ("spec.provider.daemon.agentID", "empty"),
            ],
        ),
        (
            "{provider: {type: vrouter-daemon, daemon: {address: ' ', agentID: r1}}}",
            &[("spec.provider.daemon.address", "must not be empty")],
        ),
        (
            "{provider: {type: proxmox, proxmox: {vmid: 0, clusterRef: {name: pve}}}}",
            &[("spec.provider.proxmox.vmid", "between 100 and 999999999")],
        ),
        (
            "{provider: {type: vrouter-daemon, daemon: {address: 'd:1', agentID: r1}}}",
            &[],
        ),
    ];
    for (spec, denied) in cases {
        let t: VRouterTarget = parse(&format!("metadata: {{name: t}}\nspec: {spec}"));
        assert_denied(&target(&t), denied);
    }
}

#[test]
fn target_daemon_scheme_and_ca_bundle() {
    let ca = "caBundle: {secretRef: {name: ca, key: ca.crt}}";
    let cases: Vec<(String, &[(&str, &str)])> = vec![
        ("address: 'http://d:1'".into(), &[]),
        ("address: 'https://d:1'".into(), &[]),
        ("address: 'HTTPS://d:1'".into(), &[]),
        (format!("address: 'https://d:1', {ca}"), &[]),
        (
            "address: 'grpc://d:1'".into(),
            &[("spec.provider.daemon.address", "scheme \"grpc\" is not supported")],
        ),
        (
            format!("address: 'd:1', {ca}"),
            &[("spec.provider.daemon.caBundle", "only used with an https:// address")],
        ),
        (
            format!("address: 'http://d:1', {ca}"),
            &[("spec.provider.daemon.caBundle", "only used with an https:// address")],
        ),
        (
            "address: 'https://d:1', caBundle: {secretRef: {name: '', key: ' '}}".into(),
            &[
                ("spec.provider.daemon.caBundle.secretRef.name", "must not be empty"),
                ("spec.provider.daemon.caBundle.secretRef.key", "must not be empty"),
            ],
        ),
    ];
    for (daemon, denied) in cases {
        let t: VRouterTarget = parse(&format!(
            "metadata: {{name: t}}\nspec: {{provider: {{type: vrouter-daemon, daemon: {{agentID: r1, {daemon}}}}}}}"
        ));
        assert_denied(&target(&t), denied);
    }
}

#[test]
fn target_proxmox_cluster_ref_must_stay_in_the_namespace() {
    let t: VRouterTarget = parse(
        "metadata: {name: t}\nspec: {provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve, namespace: other}}}}",
    );
    assert_denied(
        &target(&t),
        &[("spec.provider.proxmox.clusterRef.namespace", "\"other\"")],
    );
    let same: VRouterTarget = parse(
        "metadata: {name: t}\nspec: {provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve, namespace: net}}}}",
    );
    assert!(target(&same).is_allowed());
}

#[test]
fn target_kubevirt_namespace_stays_free() {
    let t: VRouterTarget =
        parse("metadata: {name: t}\nspec: {provider: {kubevirt: {name: vm, namespace: production}}}");
    assert!(target(&t).is_allowed());
}

#[test]
fn target_a_block_of_another_provider_is_a_warning() {
    let t: VRouterTarget = parse(
        "metadata: {name: t}\nspec: {provider: {kubevirt: {name: vm}, proxmox: {vmid: 100, clusterRef: {name: p}}}}",
    );
    let f = target(&t);
    assert!(f.is_allowed());
    assert_eq!(f.warnings[0].field, "spec.provider.proxmox");
}

#[test]
fn config_target_ref_must_be_named_and_in_the_namespace() {
    let ok: VRouterConfig = parse("metadata: {name: c}\nspec: {targetRef: {name: t}}");
    assert!(config(&ok).is_allowed());
    let cross: VRouterConfig = parse("metadata: {name: c}\nspec: {targetRef: {name: t, namespace: other}}");
    assert_denied(
        &config(&cross),
        &[("spec.targetRef.namespace", "only this object's own namespace")],
    );
    let empty: VRouterConfig = parse("metadata: {name: c}\nspec: {targetRef: {name: ''}}");
    assert_denied(&config(&empty), &[("spec.targetRef.name", "must not be empty")]);
}

#[test]
fn confirm_needs_whole_minutes_and_a_check_that_ends_first() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("{}", &[]),
        ("{timeout: 5m}", &[]),
        ("{timeout: 24h}", &[]),
        (
            "{timeout: 5m, check: {command: [/bin/ping, -c, '1', upstream], timeout: 20s}}",
            &[],
        ),
        ("{timeout: 90s}", &[("spec.confirm.timeout", "whole number of minutes")]),
        ("{timeout: 0s}", &[("spec.confirm.timeout", "from 1m to 1440m")]),
        ("{timeout: -5m}", &[("spec.confirm.timeout", "got -5m0s")]),
        ("{timeout: 25h}", &[("spec.confirm.timeout", "from 1m to 1440m")]),
        (
            "{timeout: 1m, check: {command: [], timeout: 1m}}",
            &[
                ("spec.confirm.check.command", "must name a program"),
                ("spec.confirm.check.timeout", "shorter than spec.confirm.timeout (1m0s)"),
            ],
        ),
        (
            "{check: {command: [' '], timeout: 0s}}",
            &[
                ("spec.confirm.check.command[0]", "must not be empty"),
                ("spec.confirm.check.timeout", "greater than zero"),
            ],
        ),
    ];
    for (confirm, expected) in cases {
        let c: VRouterConfig = parse(&format!(
            "metadata: {{name: c}}\nspec: {{targetRef: {{name: t}}, confirm: {confirm}}}"
        ));
        assert_denied(&config(&c), expected);
        let b: VRouterBinding = parse(&format!(
            "metadata: {{name: b}}\nspec: {{templateRefs: [{{name: t}}], targetRefs: [{{name: a}}], confirm: {confirm}}}"
        ));
        assert_denied(&binding(&b), expected);
    }
}

#[test]
fn status_config_ref_must_be_in_the_namespace() {
    let cross: VRouterStatus = parse("metadata: {name: s}\nspec: {configRef: {name: c, namespace: other}}");
    assert_denied(&status(&cross), &[("spec.configRef.namespace", "\"other\"")]);
    let zero: VRouterStatus = parse("metadata: {name: s}\nspec: {configRef: {name: c}, syncInterval: 0s}");
    assert_denied(&status(&zero), &[("spec.syncInterval", "greater than zero")]);
}

#[test]
fn a_selector_stands_in_for_target_refs_and_is_checked() {
    let selected: VRouterBinding =
        parse("metadata: {name: b}\nspec: {templateRefs: [{name: t}], targetSelector: {matchLabels: {site: a}}}");
    assert_denied(&binding(&selected), &[]);
    let everything: VRouterBinding =
        parse("metadata: {name: b}\nspec: {templateRefs: [{name: t}], targetSelector: {}}");
    assert_denied(&binding(&everything), &[]);
    let bad: VRouterBinding = parse(
        "metadata: {name: b}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}], \
         targetSelector: {matchExpressions: [{key: site, operator: Equals, values: [a]}, {key: x, operator: In}]}}",
    );
    assert_denied(
        &binding(&bad),
        &[
            ("spec.targetSelector.matchExpressions[0].operator", "not an operator"),
            ("spec.targetSelector.matchExpressions[1].values", "at least one value"),
        ],
    );
}

#[test]
fn binding_needs_targets_and_templates() {
    let none: VRouterBinding = parse("metadata: {name: b}\nspec: {targetRefs: []}");
    assert_denied(
        &binding(&none),
        &[
            ("spec.targetRefs", "at least one target"),
            ("spec.templateRefs", "at least one template"),
        ],
    );
    let deprecated: VRouterBinding =
        parse("metadata: {name: b}\nspec: {templateRef: {name: t}, targetRefs: [{name: a}]}");
    let f = binding(&deprecated);
    assert!(f.is_allowed());
    assert_eq!(f.warnings[0].field, "spec.templateRef");
}

#[test]
fn binding_every_reference_must_stay_in_the_namespace() {
    let b: VRouterBinding = parse(
        "metadata: {name: b}\nspec: {templateRef: {name: t0, namespace: x}, templateRefs: [{name: t, namespace: x}], \
         paramsRefs: [{name: p}, {name: q, namespace: x}], targetRefs: [{name: a, namespace: x}]}",
    );
    assert_denied(
        &binding(&b),
        &[
            ("spec.templateRef.namespace", "\"x\""),
            ("spec.templateRefs[0].namespace", "\"x\""),
            ("spec.paramsRefs[1].namespace", "\"x\""),
            ("spec.targetRefs[0].namespace", "\"x\""),
        ],
    );
}

#[test]
fn binding_duplicate_targets_and_overlong_names_are_denied() {
    let b: VRouterBinding =
        parse("metadata: {name: b}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}, {name: c}, {name: a}]}");
    assert_denied(&binding(&b), &[("spec.targetRefs[2]", "duplicates spec.targetRefs[0]")]);
    let long = "x".repeat(252);
    let b: VRouterBinding = parse(&format!(
        "metadata: {{name: b}}\nspec: {{templateRefs: [{{name: t}}], targetRefs: [{{name: {long}}}]}}"
    ));
    assert_denied(&binding(&b), &[("spec.targetRefs[0].name", "exceed 253")]);
}

#[test]
fn binding_rollout_checks_only_the_selected_mode() {
    let base = "metadata: {name: b}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}], rollout: ";
    let cases: &[(&str, &[(&str, &str)])] = &[
        // Disabled, {} and absent never block, whatever else is set.
        ("{}}", &[]),
        ("{mode: Disabled, pollInterval: -5s, waitInterval: 0s}}", &[]),
        ("{pollInterval: -5s}}", &[]),
        (
            "{mode: FixedInterval}}",
            &[("spec.rollout.waitInterval", "greater than zero")],
        ),
        (
            "{mode: FixedInterval, waitInterval: 0s}}",
            &[("spec.rollout.waitInterval", "greater than zero")],
        ),
        (
            "{mode: FixedInterval, waitInterval: -1s}}",
            &[("spec.rollout.waitInterval", "greater than zero")],
        ),
        // FixedInterval ignores WaitForApplied's fields.
        ("{mode: FixedInterval, waitInterval: 1m, pollInterval: -1s}}", &[]),
        ("{mode: WaitForApplied}}", &[]),
        ("{mode: WaitForApplied, pollInterval: 0s, waitAfterApplied: 0s}}", &[]),
        (
            "{mode: WaitForApplied, pollInterval: -1s}}",
            &[("spec.rollout.pollInterval", "negative")],
        ),
        (
            "{mode: WaitForApplied, waitAfterApplied: -1s}}",
            &[("spec.rollout.waitAfterApplied", "negative")],
        ),
        // WaitForApplied ignores FixedInterval's field.
        ("{mode: WaitForApplied, waitInterval: -1s}}", &[]),
        ("{mode: Waves}}", &[("spec.rollout.waves", "required")]),
        (
            "{mode: Waves, waves: {batchSize: 2, canary: 1, maxFailures: '10%'}}}",
            &[],
        ),
        (
            "{mode: Waves, waves: {batchSize: '10'}}}",
            &[("spec.rollout.waves.batchSize", "a percentage")],
        ),
        (
            "{mode: Waves, waves: {batchSize: 0}}}",
            &[("spec.rollout.waves", "batchSize \"0\" is invalid")],
        ),
        (
            "{mode: Waves, waves: {batchSize: 1, canary: '150%'}}}",
            &[("spec.rollout.waves", "canary \"150%\" is invalid")],
        ),
        (
            "{mode: Waves, waves: {batchSize: 1, pause: -1s}}}",
            &[("spec.rollout.waves.pause", "negative")],
        ),
        // Waves' block is ignored by the other modes.
        ("{mode: Disabled, waves: {batchSize: 0}}}", &[]),
    ];
    for (rollout, denied) in cases {
        let b: VRouterBinding = parse(&format!("{base}{rollout}"));
        assert_denied(&binding(&b), denied);
    }
}

#[test]
fn proxmox_cluster_endpoints_interval_and_credentials() {
    let ok = "{endpoints: ['https://pve1.example.com:8006'], credentialsRef: {name: creds}}";
    let cases: &[(&str, &[(&str, &str)])] = &[
        (ok, &[]),
        (
            "{endpoints: [], credentialsRef: {name: creds}}",
            &[("spec.endpoints", "at least one")],
        ),
        (
            "{endpoints: ['https://a:8006', ''], credentialsRef: {name: creds}}",
            &[("spec.endpoints[1]", "must not be empty")],
        ),
        (
            "{endpoints: ['pve1:8006'], credentialsRef: {name: creds}}",
            &[("spec.endpoints[0]", "not an https:// URL")],
        ),
        (
            "{endpoints: ['https://a'], credentialsRef: {name: creds}, syncInterval: 0s}",
            &[("spec.syncInterval", "greater than zero")],
        ),
        (
            "{endpoints: ['https://a'], credentialsRef: {name: creds}, syncInterval: -1m}",
            &[("spec.syncInterval", "greater than zero")],
        ),
        (
            "{endpoints: ['https://a'], credentialsRef: {name: ''}}",
            &[("spec.credentialsRef.name", "must not be empty")],
        ),
    ];
    for (spec, denied) in cases {
        let p: ProxmoxCluster = parse(&format!("metadata: {{name: p}}\nspec: {spec}"));
        assert_denied(&proxmox_cluster(&p), denied);
    }
    let plain: ProxmoxCluster =
        parse("metadata: {name: p}\nspec: {endpoints: ['https://a:8006', 'http://b:8006'], credentialsRef: {name: c}}");
    assert_denied(&proxmox_cluster(&plain), &[("spec.endpoints[1]", "uses plain http")]);
    let insecure: ProxmoxCluster = parse(
        "metadata: {name: p}\nspec: {endpoints: ['https://a:8006'], credentialsRef: {name: c}, insecureSkipTLSVerify: true}",
    );
    let f = proxmox_cluster(&insecure);
    assert!(f.is_allowed());
    assert_eq!(f.warnings.len(), 1, "{:?}", f.warnings);
    assert_eq!(f.warnings[0].field, "spec.insecureSkipTLSVerify");
}

#[test]
fn proxmox_cluster_trust_settings() {
    const PIN: &str = "0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9:0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9";
    let base = "endpoints: ['https://a:8006'], credentialsRef: {name: c}";
    let bundle = "caBundle: {secretRef: {name: pve-ca, key: ca.crt}}";
    let pin = format!("certificateFingerprints: ['{PIN}']");
    let lower_plain = format!("certificateFingerprints: ['{}']", PIN.replace(':', "").to_lowercase());
    let cases: Vec<(String, &[(&str, &str)])> = vec![
        (bundle.to_string(), &[]),
        (pin.clone(), &[]),
        (lower_plain, &[]),
        (format!("{bundle}, {pin}"), &[]),
        (
            "certificateFingerprints: ['AA:BB:CC']".to_string(),
            &[("spec.certificateFingerprints[0]", "has 6 hex digits")],
        ),
        (
            format!("certificateFingerprints: ['{PIN}', 'sha256 Fingerprint={PIN}']"),
            &[("spec.certificateFingerprints[1]", "not a hex digit")],
        ),
        (
            "caBundle: {secretRef: {name: '', key: ' '}}".to_string(),
            &[
                ("spec.caBundle.secretRef.name", "must not be empty"),
                ("spec.caBundle.secretRef.key", "must not be empty"),
            ],
        ),
        (
            format!("insecureSkipTLSVerify: true, {pin}"),
            &[(
                "spec.certificateFingerprints",
                "cannot be combined with insecureSkipTLSVerify",
            )],
        ),
        (
            format!("insecureSkipTLSVerify: true, {bundle}"),
            &[("spec.caBundle", "cannot be combined with insecureSkipTLSVerify")],
        ),
    ];
    for (trust, denied) in cases {
        let p: ProxmoxCluster = parse(&format!("metadata: {{name: p}}\nspec: {{{base}, {trust}}}"));
        assert_denied(&proxmox_cluster(&p), denied);
    }
}

#[test]
fn denials_are_reported_together_in_one_message() {
    let none: VRouterBinding = parse("metadata: {name: b}\nspec: {targetRefs: []}");
    let message = binding(&none).denial_message();
    assert!(
        message.starts_with(
            "spec.targetRefs: must list at least one target (or set spec.targetSelector); spec.templateRefs:"
        ),
        "{message}"
    );
}

#[test]
fn updates_of_objects_being_deleted_skip_every_rule() {
    let mut t: VRouterTarget = parse("metadata: {name: t}\nspec: {provider: {type: proxmox}}");
    assert!(!skip_for_deletion(&t.metadata));
    t.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    assert!(skip_for_deletion(&t.metadata));
}

#[test]
fn references_outside_the_namespace_are_refused_naming_the_field() {
    let simple: VRouterBinding =
        parse("metadata: {name: bgp}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}, {name: b}]}");
    assert_eq!(same_namespace_references(&simple), Ok(()));
    let same: VRouterBinding = parse("metadata: {name: bgp}\nspec: {targetRefs: [{name: a, namespace: net}]}");
    assert_eq!(same_namespace_references(&same), Ok(()));
    let cases = [
        (
            "{templateRef: {name: t, namespace: x}, targetRefs: [{name: a}]}",
            "spec.templateRef",
        ),
        (
            "{templateRefs: [{name: t}, {name: u, namespace: x}], targetRefs: [{name: a}]}",
            "spec.templateRefs[1]",
        ),
        (
            "{paramsRefs: [{name: p, namespace: x}], targetRefs: [{name: a}]}",
            "spec.paramsRefs[0]",
        ),
        (
            "{targetRefs: [{name: a}, {name: b, namespace: x}]}",
            "spec.targetRefs[1]",
        ),
    ];
    for (spec, field) in cases {
        let b: VRouterBinding = parse(&format!("metadata: {{name: bgp}}\nspec: {spec}"));
        let err = same_namespace_references(&b).unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.to_string().contains("\"x\""), "{err}");
    }
}
