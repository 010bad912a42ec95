//! `vrouter-operator render`: the examples render to the committed golden
//! output, broken manifests are reported by file, object and field, and the
//! exit codes are the documented ones.

use std::path::{Path, PathBuf};
use std::process::Command;

use vrouter_operator::offline_render::{self, EXIT_INVALID, EXIT_UNREADABLE};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/examples")
}

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
}

#[test]
fn the_examples_render_to_the_golden_output() {
    let objects = offline_render::load(&[examples()]).unwrap();
    let configs = offline_render::render(&objects).unwrap_or_else(|p| panic!("{p:#?}"));
    assert_eq!(configs.len(), 2, "bgp-binding renders two routers");
    insta::assert_snapshot!("examples", offline_render::to_yaml(&configs, false).unwrap());
}

#[test]
fn the_binary_prints_the_configs_and_exits_zero() {
    let output = binary().arg("render").arg(examples()).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("name: bgp-binding.site-a-routers"), "{text}");
    // --script adds each router's apply script.
    let output = binary().args(["render", "--script"]).arg(examples()).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.matches("# apply script for ").count(), 2);
    assert!(text.contains("#   load /dev/stdin <<'VROUTER_CONFIG_EOF_"), "{text}");
}

const BROKEN: &str = r#"
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: t1, namespace: net}
spec:
  provider: {type: proxmox}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterBinding
metadata: {name: b, namespace: net}
spec:
  templateRefs: [{name: nowhere}]
  targetRefs: [{name: t1}]
"#;

#[test]
fn a_broken_manifest_is_reported_by_file_object_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, BROKEN).unwrap();
    let objects = offline_render::load(std::slice::from_ref(&file)).unwrap();
    let problems = offline_render::render(&objects).unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let name = file.display().to_string();
    assert!(
        text.contains(&format!(
            "{name}: VRouterTarget net/t1: spec.provider.proxmox: must be set when spec.provider.type is proxmox"
        )),
        "{text:#?}"
    );
    assert!(
        text.contains(&format!(
            "{name}: VRouterBinding net/b: spec.templateRefs[0].name: VRouterTemplate \"nowhere\" is not among the given manifests"
        )),
        "{text:#?}"
    );
    let output = binary().arg("render").arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(EXIT_INVALID));
    assert!(String::from_utf8_lossy(&output.stderr).contains("spec.templateRefs[0].name"));
}

#[test]
fn unreadable_input_exits_two_naming_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.yaml");
    std::fs::write(&file, "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTarget\nmetadata: {name: t}\nspec: {provider: {type: proxmox, proxmox: {vmid: abc, clusterRef: {name: c}}}}\n").unwrap();
    let output = binary().arg("render").arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(EXIT_UNREADABLE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("typo.yaml") && stderr.contains("spec.provider.proxmox.vmid"),
        "{stderr}"
    );
    let missing = binary()
        .args(["render", "/nonexistent/manifests.yaml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(EXIT_UNREADABLE));
}

const WITH_WARNINGS: &str = r#"
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTemplate
metadata: {name: raw, namespace: net}
spec:
  commands: "set system host-name {{ hostName | safe }}\n"
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: t1, namespace: net}
spec:
  provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve}}}
  params: {hostName: r1}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterBinding
metadata: {name: b, namespace: net}
spec:
  templateRefs: [{name: raw}]
  targetRefs: [{name: t1}]
"#;

#[test]
fn admission_warnings_are_printed_and_the_render_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("raw.yaml");
    std::fs::write(&file, WITH_WARNINGS).unwrap();
    let objects = offline_render::load(std::slice::from_ref(&file)).unwrap();
    let rendered = offline_render::render_with_warnings(&objects).unwrap_or_else(|p| panic!("{p:#?}"));
    assert_eq!(rendered.configs.len(), 1);
    let warnings: Vec<String> = rendered.warnings.iter().map(ToString::to_string).collect();
    let name = file.display().to_string();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(&format!("{name}: VRouterTemplate net/raw: spec.commands: "))
            && warnings[0].contains("safe"),
        "{warnings:#?}"
    );
    let output = binary().arg("render").arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("warning: {}", warnings[0])), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("set system host-name r1"));
}
