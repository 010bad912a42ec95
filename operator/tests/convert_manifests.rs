//! `vrouter-operator convert`: Go-syntax manifests printed or rewritten in tera,
//! what cannot be converted reported by file, object, field and line:column
//! with nothing written, and `render` recognising a Go template before and
//! rendering it after.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use vrouter_operator::cli::convert::{EXIT_UNCONVERTIBLE, EXIT_UNREADABLE};
use vrouter_operator::cli::render::{self as offline_render, EXIT_INVALID};
use vrouter_render::{TemplateEngine, TemplateKind};

fn testdata(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata").join(dir)
}

fn operator(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
        .args(args)
        .args(paths)
        .output()
        .unwrap()
}

/// A copy of `dir`'s YAML files in a temporary directory.
fn copy_of(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    copy
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

#[test]
fn the_go_template_corpus_converts_and_every_template_is_admitted() {
    let output = operator(&["convert"], &[&testdata("go-templates")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("converted 13 template field(s) in 8 file(s)"),
        "{stderr}"
    );
    let engine = TemplateEngine::new();
    let docs = documents(&String::from_utf8(output.stdout).unwrap());
    let mut templates = 0;
    for doc in docs.iter().filter(|d| d["kind"] == "VRouterTemplate") {
        for (field, kind) in [("config", TemplateKind::Config), ("commands", TemplateKind::Commands)] {
            if let Some(source) = doc["spec"][field].as_str() {
                engine
                    .check(doc["metadata"]["name"].as_str().unwrap(), kind, source)
                    .unwrap_or_else(|e| panic!("{e}\n{source}"));
            }
        }
        templates += 1;
    }
    assert_eq!(templates, 10);
    // Params are untouched.
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "VRouterParams" && d["spec"]["params"]["asn"] == 65001)
    );
}

#[test]
fn render_says_go_before_convert_and_renders_after() {
    let site = copy_of(&testdata("migrating-from-go"));
    // Before: render names the Go construct, its tera form and the command.
    let before = operator(&["render"], &[site.path()]);
    let stderr = String::from_utf8_lossy(&before.stderr);
    assert_eq!(before.status.code(), Some(EXIT_INVALID), "{stderr}");
    assert!(
        stderr.contains(
            "site-a.yaml: VRouterTemplate network/bgp-router: spec.commands: template `bgp-router` (commands) at line 1, \
             column 23: `{{ .hostname }}` is Go template syntax"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("where it is `{{ hostname }}`"), "{stderr}");
    assert!(stderr.contains("vrouter-operator convert"), "{stderr}");
    // Convert in place: the comments stay, the template is tera.
    let file = site.path().join("site-a.yaml");
    let original = std::fs::read_to_string(&file).unwrap();
    let converted = operator(&["convert", "--in-place"], &[site.path()]);
    assert_eq!(
        converted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&converted.stderr)
    );
    let notes = String::from_utf8_lossy(&converted.stderr);
    assert!(
        notes.contains("`quote` was dropped") || notes.contains("quotes"),
        "{notes}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("# A site as the Go vrouter-operator's users declare it"),
        "{text}"
    );
    assert_eq!(
        text.split("---").skip(1).collect::<Vec<_>>(),
        original.split("---").skip(1).collect::<Vec<_>>(),
        "only the template changes"
    );
    // After: it renders, with the neighbour's description one argument.
    let objects = offline_render::load(&[site.path().to_owned()]).unwrap();
    let configs = offline_render::render(&objects).unwrap_or_else(|p| panic!("{p:#?}"));
    assert_eq!(
        configs[0].spec.commands,
        "set system host-name edge-1\nset system name-server 8.8.8.8\n\
         set protocols bgp 65000 neighbor 192.0.2.2 remote-as 64513\n\
         set protocols bgp 65000 neighbor 192.0.2.2 description 'transit provider A'\n"
    );
    assert_eq!(
        configs[0].spec.config,
        "protocols {\n    bgp 65000 {\n        parameters {\n            router-id 192.0.2.11\n        }\n    }\n}\n"
    );
}

#[test]
fn what_has_no_tera_form_is_reported_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.yaml");
    let text = "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata: {name: t, namespace: net}\n\
                spec:\n  commands: |\n    set system host-name {{ .hostname }}\n    set system time-zone {{ now | date \"MST\" }}\n";
    std::fs::write(&file, text).unwrap();
    let output = operator(&["convert", "--in-place"], &[&file]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(EXIT_UNCONVERTIBLE), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: {}: VRouterTemplate net/t: spec.commands: 2:25: `now`: templates have no clock",
            file.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    // The Go original's syntax-only test templates: each refused with where.
    let output = operator(&["convert"], &[&testdata("go-templates/refused")]);
    assert_eq!(output.status.code(), Some(EXIT_UNCONVERTIBLE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("spec.config: 1:").count(), 3, "{stderr}");
}

#[test]
fn unreadable_files_exit_two() {
    let output = operator(&["convert"], &[Path::new("/nonexistent/manifests.yaml")]);
    assert_eq!(output.status.code(), Some(EXIT_UNREADABLE));
}
