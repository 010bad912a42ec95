//! The example manifests under testdata/examples: every one parses into the
//! typed resources and serializes back without losing a field; bad input is
//! refused with an error naming the field.

use std::fs;
use std::path::PathBuf;

use serde_json::Value;
use vrouter_api::manifest::{Manifest, parse_documents};
use vrouter_api::{Duration, RolloutMode, VRouterBinding, VRouterConfig};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/examples")
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<_> = fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

const DURATION_FIELDS: [&str; 4] = ["pollInterval", "waitAfterApplied", "waitInterval", "syncInterval"];

/// Every field of `original` is in `round_tripped` with the same value.
/// Defaults the types fill in may be added; durations compare by value
/// (`60s` is written back as Go writes it, `1m0s`).
fn assert_contained(original: &Value, round_tripped: &Value, path: &str) {
    match (original, round_tripped) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let child = format!("{path}.{key}");
                let Some(other) = b.get(key) else {
                    panic!("{child} was lost in the round trip");
                };
                if DURATION_FIELDS.contains(&key.as_str()) {
                    let parse = |v: &Value| v.as_str().unwrap().parse::<Duration>().unwrap();
                    assert_eq!(parse(value), parse(other), "{child}");
                } else {
                    assert_contained(value, other, &child);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: array length changed");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_contained(x, y, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(original, round_tripped, "{path}"),
    }
}

#[test]
fn every_example_round_trips_without_losing_a_field() {
    let files = example_files();
    assert!(files.len() >= 12, "examples missing: {files:?}");
    let mut ours = 0;
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let name = file.display().to_string();
        let objects = parse_documents(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        let originals: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        assert_eq!(objects.len(), originals.len(), "{name}");
        for (object, original) in objects.iter().zip(&originals) {
            if !matches!(object, Manifest::Other(_)) {
                ours += 1;
            }
            assert_contained(original, &object.to_value(), &format!("{name}:{}", object.kind()));
        }
    }
    assert!(ours >= 13, "{ours} objects of ours");
}

#[test]
fn examples_cover_every_kind() {
    let mut kinds = std::collections::BTreeSet::new();
    for file in example_files() {
        for object in parse_documents(&fs::read_to_string(&file).unwrap(), "x").unwrap() {
            kinds.insert(object.kind().to_owned());
        }
    }
    for kind in [
        "VRouterTemplate",
        "VRouterTarget",
        "VRouterBinding",
        "VRouterParams",
        "VRouterConfig",
        "ProxmoxCluster",
        "VRouterStatus",
    ] {
        assert!(kinds.contains(kind), "no example of {kind}");
    }
}

fn one<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn save_defaults_to_true_and_explicit_false_survives() {
    let absent: VRouterConfig = one("metadata: {name: a}\nspec: {targetRef: {name: t}}");
    assert!(absent.spec.save);
    let explicit: VRouterConfig = one("metadata: {name: a}\nspec: {targetRef: {name: t}, save: false}");
    assert!(!explicit.spec.save);
    let json = serde_json::to_value(&explicit).unwrap();
    assert_eq!(
        json["spec"]["save"],
        Value::Bool(false),
        "false is written, not omitted"
    );
    let back: VRouterConfig = serde_json::from_value(json).unwrap();
    assert!(!back.spec.save);
}

#[test]
fn rollout_absent_empty_and_unset_mode_all_mean_disabled() {
    for rollout in [
        "",
        "rollout: {}",
        "rollout: {pollInterval: 5s}",
        "rollout: {mode: Disabled}",
    ] {
        let yaml = format!("metadata: {{name: b}}\nspec:\n  targetRefs: [{{name: t}}]\n  {rollout}\n");
        let b: VRouterBinding = one(&yaml);
        assert_eq!(b.spec.effective_rollout_mode(), RolloutMode::Disabled, "{rollout:?}");
    }
    let b: VRouterBinding = one(
        "metadata: {name: b}\nspec: {targetRefs: [{name: t}], rollout: {mode: FixedInterval, waitInterval: 1m30s}}",
    );
    assert_eq!(b.spec.effective_rollout_mode(), RolloutMode::FixedInterval);
    let rollout = b.spec.rollout.unwrap();
    assert_eq!(rollout.wait_interval, Some(Duration::from_secs(90)));
    assert_eq!(
        rollout.poll_interval,
        Duration::from_secs(10),
        "pollInterval defaults to 10s"
    );
    assert_eq!(rollout.wait_after_applied, Duration::ZERO);
}

#[test]
fn deprecated_template_ref_comes_first() {
    let b: VRouterBinding = one(
        "metadata: {name: b}\nspec: {templateRef: {name: old}, templateRefs: [{name: a}, {name: b}], targetRefs: [{name: t}]}",
    );
    let names: Vec<_> = b.spec.effective_template_refs().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["old", "a", "b"]);
}

#[test]
fn integers_keep_their_exact_value_in_params() {
    let t: vrouter_api::VRouterTarget = one(
        "metadata: {name: t}\nspec: {provider: {type: proxmox, proxmox: {vmid: 9007199254740993, clusterRef: {name: c}}}, params: {asn: 4294967295, id: 9007199254740993}}",
    );
    assert_eq!(t.spec.provider.proxmox.as_ref().unwrap().vmid, 9007199254740993);
    let params = serde_json::to_string(t.spec.params.as_ref().unwrap()).unwrap();
    assert!(
        params.contains("4294967295") && params.contains("9007199254740993"),
        "{params}"
    );
}

fn parse_error(yaml: &str) -> vrouter_api::manifest::ManifestError {
    parse_documents(yaml, "bad.yaml").expect_err("must be refused")
}

#[test]
fn a_wrong_type_is_refused_naming_the_field() {
    let err = parse_error(
        "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTarget\nmetadata: {name: t}\nspec:\n  provider:\n    type: proxmox\n    proxmox: {vmid: \"abc\", clusterRef: {name: c}}\n",
    );
    assert_eq!(err.field.as_deref(), Some("spec.provider.proxmox.vmid"));
    let text = err.to_string();
    assert!(text.contains("bad.yaml: document 1 (VRouterTarget \"t\")"), "{text}");
    assert!(text.contains("field `spec.provider.proxmox.vmid`"), "{text}");
    assert!(text.contains("invalid type: string \"abc\""), "{text}");
}

#[test]
fn an_unknown_rollout_mode_is_refused_naming_the_field_and_the_choices() {
    let err = parse_error(
        "---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata: {name: ok}\nspec: {}\n---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterBinding\nmetadata: {name: b}\nspec: {targetRefs: [{name: t}], rollout: {mode: Fast}}\n",
    );
    assert_eq!(err.document, 2);
    assert_eq!(err.field.as_deref(), Some("spec.rollout.mode"));
    assert!(err.message.contains("unknown variant `Fast`"), "{}", err.message);
    assert!(err.message.contains("WaitForApplied"), "{}", err.message);
}

#[test]
fn a_bad_duration_and_an_unknown_provider_are_refused() {
    let err = parse_error(
        "apiVersion: vrouter.kojuro.date/v1\nkind: ProxmoxCluster\nmetadata: {name: p}\nspec: {endpoints: [x], credentialsRef: {name: s}, syncInterval: soon}\n",
    );
    assert_eq!(err.field.as_deref(), Some("spec.syncInterval"));
    assert!(err.message.contains("invalid duration \"soon\""), "{}", err.message);
    let err = parse_error(
        "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTarget\nmetadata: {name: t}\nspec: {provider: {type: libvirt}}\n",
    );
    assert_eq!(err.field.as_deref(), Some("spec.provider.type"));
}

#[test]
fn missing_required_fields_and_foreign_versions_are_refused() {
    let err = parse_error("apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTarget\nmetadata: {name: t}\nspec: {}\n");
    assert!(err.message.contains("missing field `provider`"), "{}", err.message);
    // A binding's targets may come from targetRefs or targetSelector, so an
    // empty spec parses and the rules refuse it, naming both.
    let b: VRouterBinding = one("metadata: {name: b}\nspec: {}");
    let findings = vrouter_api::validate::binding(&b);
    assert!(!findings.is_allowed());
    assert!(
        findings
            .denial_message()
            .contains("spec.targetRefs: must list at least one target (or set spec.targetSelector)"),
        "{}",
        findings.denial_message()
    );
    let err = parse_error("apiVersion: vrouter.kojuro.date/v2\nkind: VRouterBinding\nmetadata: {name: b}\n");
    assert_eq!(err.field.as_deref(), Some("apiVersion"));
    let err = parse_error("apiVersion: vrouter.kojuro.date/v1\nkind: VRouterThing\nmetadata: {name: b}\n");
    assert!(err.message.contains("unknown kind \"VRouterThing\""));
    let err = parse_error("metadata: {name: b}\n");
    assert_eq!(err.field.as_deref(), Some("kind"));
}
