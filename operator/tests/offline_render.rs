//! `vrouter-operator render`: the examples render to the committed golden
//! output, broken manifests are reported by file, object and field, and the
//! exit codes are the documented ones.

use std::path::{Path, PathBuf};
use std::process::Command;

use vrouter_operator::cli::render::{self as offline_render, EXIT_INVALID, EXIT_UNREADABLE};

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
    assert_eq!(
        configs.len(),
        3,
        "bgp-binding renders two routers, and 10-config-direct.yaml configures one by hand"
    );
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
    assert_eq!(text.matches("# apply script for ").count(), 3);
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

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// The script a `--script` render printed for `name`: the lines after its
/// header with the `#   ` taken off, lines ending at `\n` only.
fn printed_script(stdout: &[u8], name: &str) -> Vec<u8> {
    let header = format!("# apply script for {name}:\n");
    let text = std::str::from_utf8(stdout).unwrap();
    let start = text.find(&header).unwrap_or_else(|| panic!("no {header:?} in {text}")) + header.len();
    let mut script = Vec::new();
    for line in text[start..].split_inclusive('\n') {
        let Some(body) = line.strip_prefix("#   ") else { break };
        script.extend_from_slice(body.as_bytes());
    }
    script
}

/// The heredoc delimiter is random on every render; everything else must match.
fn without_delimiter(script: &[u8]) -> String {
    let text = String::from_utf8(script.to_vec()).unwrap();
    let marker = "VROUTER_CONFIG_EOF_";
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(marker) {
        out.push_str(&rest[..at + marker.len()]);
        rest = rest[at + marker.len()..].trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        out.push('*');
    }
    out.push_str(rest);
    out
}

const CARRIAGE_RETURNS: &str = "apiVersion: vrouter.kojuro.date/v1
kind: VRouterTemplate
metadata: {name: crlf, namespace: net}
spec:
  config: \"system {\\r\\n    host-name {{ hostName }}\\r\\n}\\r\\n\"
  commands: \"set system time-zone UTC\\r\\nset system host-name {{ hostName }}\\n\"
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: t1, namespace: net}
spec:
  provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve}}}
  params: {hostName: \"r1\\r\"}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterBinding
metadata: {name: b, namespace: net}
spec:
  templateRefs: [{name: crlf}]
  targetRefs: [{name: t1}]
";

#[test]
fn scripts_are_printed_byte_for_byte_carriage_returns_included() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "crlf.yaml", CARRIAGE_RETURNS);
    let objects = offline_render::load(std::slice::from_ref(&file)).unwrap();
    let configs = offline_render::render(&objects).unwrap_or_else(|p| panic!("{p:#?}"));
    assert_eq!(configs.len(), 1);
    let spec = &configs[0].spec;
    let expected = vrouter_render::render_apply_script(&spec.config, &spec.commands, spec.save).unwrap();
    assert!(
        expected.contains("\r\n"),
        "the case needs a carriage return before a newline: {expected:?}"
    );

    let output = binary().args(["render", "--script"]).arg(&file).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = printed_script(&output.stdout, "b.t1");
    assert_eq!(without_delimiter(&printed), without_delimiter(expected.as_bytes()));
}

/// A confirmed config prints the script that runs: `commit-confirm`, no `save`.
#[test]
fn a_confirmed_config_prints_its_commit_confirm_script() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = HAND_WRITTEN.replace("  save: false\n", "  confirm: {timeout: 3m}\n");
    let file = write(&dir, "confirm.yaml", &manifest);
    let output = binary().args(["render", "--script"]).arg(&file).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(printed_script(&output.stdout, "by-hand")).unwrap();
    let expected = vrouter_render::render_apply_script_as(
        "",
        "set system host-name by-hand\n",
        vrouter_render::Commit::Confirmed { minutes: 3 },
    )
    .unwrap();
    assert_eq!(printed, expected);
    assert!(
        printed.contains("commit-confirm 3 <<<'y'\n") && !printed.contains("save"),
        "{printed}"
    );
}

const HAND_WRITTEN: &str = r#"
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: t1, namespace: net}
spec:
  provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve}}}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterConfig
metadata: {name: by-hand, namespace: net}
spec:
  targetRef: {name: t1}
  save: false
  commands: "set system host-name by-hand\n"
"#;

#[test]
fn hand_written_configs_are_checked_and_printed_with_their_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "direct.yaml", HAND_WRITTEN);
    let output = binary().args(["render", "--script"]).arg(&file).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    assert!(text.contains("name: by-hand"), "{text}");
    let script = String::from_utf8(printed_script(&output.stdout, "by-hand")).unwrap();
    assert!(script.contains("set system host-name by-hand\n"), "{script}");

    // Its target is not among the manifests: refused, naming the field.
    let orphan = write(
        &dir,
        "orphan.yaml",
        &HAND_WRITTEN.replace("targetRef: {name: t1}", "targetRef: {name: gone}"),
    );
    let output = binary().arg("render").arg(&orphan).output().unwrap();
    assert_eq!(output.status.code(), Some(EXIT_INVALID));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "{}: VRouterConfig net/by-hand: spec.targetRef.name: VRouterTarget \"gone\" is not among the given manifests",
            orphan.display()
        )),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing is printed when something is wrong");

    // A target of the same name in another namespace is not its target.
    let elsewhere = write(
        &dir,
        "elsewhere.yaml",
        &HAND_WRITTEN.replacen("namespace: net", "namespace: other", 1),
    );
    let output = binary().arg("render").arg(&elsewhere).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(EXIT_INVALID),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn a_hand_written_config_under_a_name_a_binding_writes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clash = format!(
        "{WITH_WARNINGS}---\n{}",
        HAND_WRITTEN
            .split("---")
            .nth(1)
            .unwrap()
            .replace("name: by-hand", "name: b.t1")
    );
    let file = write(&dir, "clash.yaml", &clash);
    let output = binary().arg("render").arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(EXIT_INVALID));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("VRouterConfig net/b.t1: metadata.name: a VRouterBinding among the given manifests writes"),
        "{stderr}"
    );
}

const TYPOS: &str = r#"
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTemplate
metadata: {name: typo, namespace: net, lables: {a: b}}
spec:
  comands: "set system host-name x\n"
  commands: "set system time-zone UTC\n"
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: t1, namespace: net}
spec:
  provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve, namspace: x}}}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterBinding
metadata: {name: b, namespace: net}
spec:
  templateRefs: [{name: typo}]
  targetRefs: [{name: t1, extra: 1}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other-kinds-are-not-ours}
anything: goes
"#;

#[test]
fn unknown_fields_are_warned_about_by_path_and_strict_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "typos.yaml", TYPOS);
    let objects = offline_render::load(std::slice::from_ref(&file)).unwrap();
    let found: Vec<String> = offline_render::unknown_fields(&objects)
        .iter()
        .map(|p| format!("{}: {}", p.object, p.field.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        found,
        [
            "VRouterTemplate net/typo: metadata.lables",
            "VRouterTemplate net/typo: spec.comands",
            "VRouterTarget net/t1: spec.provider.proxmox.clusterRef.namspace",
            "VRouterBinding net/b: spec.targetRefs[0].extra",
        ]
    );

    let output = binary().arg("render").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: {}: VRouterTemplate net/typo: spec.comands: unknown field",
            file.display()
        )),
        "{stderr}"
    );

    let output = binary().args(["render", "--strict"]).arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(EXIT_INVALID), "{stderr}");
    assert!(
        stderr.contains("error: ") && stderr.contains("spec.comands: unknown field"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());

    // The examples hold no unknown field.
    let examples = offline_render::load(&[examples()]).unwrap();
    assert!(offline_render::unknown_fields(&examples).is_empty());
}

const SELECTED: &str = r#"
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTemplate
metadata: {name: t, namespace: net}
spec: {commands: "set system host-name x\n"}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: edge-2, namespace: net, labels: {role: edge}}
spec: {provider: {type: proxmox, proxmox: {vmid: 101, clusterRef: {name: pve}}}}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: edge-1, namespace: net, labels: {role: edge}}
spec: {provider: {type: proxmox, proxmox: {vmid: 100, clusterRef: {name: pve}}}}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: core-1, namespace: net, labels: {role: core}}
spec: {provider: {type: proxmox, proxmox: {vmid: 102, clusterRef: {name: pve}}}}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterTarget
metadata: {name: edge-9, namespace: other, labels: {role: edge}}
spec: {provider: {type: proxmox, proxmox: {vmid: 109, clusterRef: {name: pve}}}}
---
apiVersion: vrouter.kojuro.date/v1
kind: VRouterBinding
metadata: {name: b, namespace: net}
spec:
  templateRefs: [{name: t}]
  targetSelector:
    matchExpressions: [{key: role, operator: In, values: [edge]}]
"#;

/// A selector picks the labelled targets of the binding's own namespace
/// among the manifests, by name; a bad operator is refused naming its field.
#[test]
fn a_target_selector_selects_among_the_given_targets_by_label() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "selected.yaml", SELECTED);
    let objects = offline_render::load(&[file]).unwrap();
    let configs = offline_render::render(&objects).unwrap_or_else(|p| panic!("{p:#?}"));
    let names: Vec<_> = configs.iter().filter_map(|c| c.metadata.name.as_deref()).collect();
    assert_eq!(names, ["b.edge-1", "b.edge-2"]);

    let bad = write(&dir, "bad.yaml", &SELECTED.replace("operator: In", "operator: in"));
    let output = binary().arg("render").arg(&bad).output().unwrap();
    assert_eq!(output.status.code(), Some(EXIT_INVALID));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("spec.targetSelector.matchExpressions[0].operator: \"in\" is not an operator"),
        "{stderr}"
    );
}
