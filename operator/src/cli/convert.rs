//! `vrouter-operator convert`: the VRouterTemplates of manifest files, from the
//! Go operator's `text/template` + sprig to tera (`vrouter_gotemplate`).
//!
//! Only the `spec.config` and `spec.commands` of VRouterTemplates change, and
//! only when they are Go templates (a field tera already accepts is left as it
//! is). The rest of each file stays byte for byte: a converted field is written
//! back in place as a literal block scalar, and the document is read again to
//! prove nothing else moved; where that cannot be done (a flow-style mapping,
//! text a block scalar cannot hold) the document is written anew from its
//! parsed form, which drops its comments, and a note says so.

use std::path::PathBuf;

use kube::Resource;
use serde_json::Value;
use vrouter_api::VRouterTemplate;
use vrouter_gotemplate::convert;
use vrouter_render::{TemplateEngine, TemplateKind};

/// Exit code when a template could not be converted.
pub const EXIT_UNCONVERTIBLE: i32 = 1;
/// Exit code for files that cannot be read, parsed or written.
pub const EXIT_UNREADABLE: i32 = 2;

/// Where something is: file, object, field, and line:column in the template
/// (the same shape `vrouter-operator render` reports its problems in).
pub use crate::cli::manifest_files::Problem as Finding;
use crate::cli::manifest_files::yaml_files;

/// One file's conversion.
#[derive(Debug, Default)]
pub struct Converted {
    /// The new text (equal to the old one when nothing converted).
    pub text: String,
    /// Fields converted.
    pub fields: usize,
    /// What has no tera form: the file is not to be written.
    pub problems: Vec<Finding>,
    /// Deliberate differences and rewritten documents.
    pub notes: Vec<Finding>,
}

/// Converts the VRouterTemplates of one file's text. `Err` when the text is not
/// YAML.
pub fn convert_text(file: &str, text: &str) -> Result<Converted, String> {
    let mut out = Converted::default();
    let engine = TemplateEngine::new();
    for document in split_documents(text) {
        let value: Value = match serde_yaml::from_str(document) {
            Ok(v) => v,
            Err(e) => return Err(format!("{file}: {e}")),
        };
        // `kubectl get vroutertemplates -o yaml` writes a List.
        if value.get("kind").and_then(Value::as_str) == Some("List")
            && let Some(items) = value.get("items").and_then(Value::as_array)
        {
            let mut list = value.clone();
            let mut changed = 0;
            for (i, item) in items.iter().enumerate() {
                if is_template(item) {
                    let (changes, findings) = convert_object(&engine, file, item);
                    out.notes.extend(findings.notes);
                    out.problems.extend(findings.problems);
                    for (field, new) in changes {
                        list["items"][i]["spec"][field] = Value::String(new);
                        changed += 1;
                    }
                }
            }
            if changed == 0 {
                out.text.push_str(document);
            } else {
                out.fields += changed;
                out.text.push_str(&rewrite_whole(document, &list, &[])?);
            }
            continue;
        }
        if !is_template(&value) {
            out.text.push_str(document);
            continue;
        }
        let (changes, findings) = convert_object(&engine, file, &value);
        out.notes.extend(findings.notes);
        out.problems.extend(findings.problems);
        let object = object_name(&value);
        if changes.is_empty() {
            out.text.push_str(document);
            continue;
        }
        out.fields += changes.len();
        match rewrite_in_place(document, &value, &changes) {
            Some(rewritten) => out.text.push_str(&rewritten),
            None => {
                out.notes.push(Finding {
                    source: file.to_owned(),
                    object,
                    field: None,
                    message: "note: the document was written anew from its parsed form (its comments and \
                              layout are not kept)"
                        .into(),
                });
                out.text.push_str(&rewrite_whole(document, &value, &changes)?);
            }
        }
    }
    Ok(out)
}

fn is_template(value: &Value) -> bool {
    value.get("apiVersion").and_then(Value::as_str) == Some(VRouterTemplate::api_version(&()).as_ref())
        && value.get("kind").and_then(Value::as_str) == Some(VRouterTemplate::kind(&()).as_ref())
}

fn object_name(value: &Value) -> String {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    format!("VRouterTemplate {namespace}/{name}")
}

#[derive(Default)]
struct Findings {
    problems: Vec<Finding>,
    notes: Vec<Finding>,
}

/// The converted fields of one VRouterTemplate (those that are Go templates).
fn convert_object(engine: &TemplateEngine, file: &str, value: &Value) -> (Vec<(&'static str, String)>, Findings) {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let object = object_name(value);
    let at = |field: &str, message: String| Finding {
        source: file.to_owned(),
        object: object.clone(),
        field: Some(format!("spec.{field}")),
        message,
    };
    let mut findings = Findings::default();
    let mut changes = Vec::new();
    for (field, kind) in [("config", TemplateKind::Config), ("commands", TemplateKind::Commands)] {
        let Some(source) = value.pointer(&format!("/spec/{field}")).and_then(Value::as_str) else {
            continue;
        };
        // Already tera (or plain text): nothing to do.
        if engine.check(name, kind, source).is_ok() {
            continue;
        }
        match convert(source, kind, engine) {
            Ok(conversion) => {
                findings
                    .notes
                    .extend(conversion.notes.iter().map(|n| at(field, format!("note: {n}"))));
                changes.push((field, conversion.tera));
            }
            Err(e) => findings
                .problems
                .extend(e.problems.iter().map(|p| at(field, p.to_string()))),
        }
    }
    (changes, findings)
}

/// The documents of a YAML stream, each with its separator line and trailing
/// text, so that concatenating them gives the stream back.
fn split_documents(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let is_separator = line.starts_with("---") && line[3..].chars().next().is_none_or(char::is_whitespace);
        if is_separator && offset > start {
            out.push(&text[start..offset]);
            start = offset;
        }
        offset += line.len();
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Replaces each field's value under `spec:` in the document's text with a
/// literal block scalar; `None` unless the document reads back as `original`
/// with exactly the new values.
fn rewrite_in_place(document: &str, original: &Value, changes: &[(&str, String)]) -> Option<String> {
    let mut text = document.to_owned();
    for (field, new) in changes {
        text = replace_field(&text, field, new)?;
    }
    let mut expected = original.clone();
    for (field, new) in changes {
        expected["spec"][*field] = Value::String(new.clone());
    }
    let reread: Value = serde_yaml::from_str(&text).ok()?;
    (reread == expected).then_some(text)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The text with `spec.<field>`'s value written as a block scalar.
fn replace_field(text: &str, field: &str, new: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let spec = lines
        .iter()
        .position(|l| indent_of(l) == 0 && l.trim_end() == "spec:")?;
    // The field among spec's direct children.
    let child_indent = lines[spec + 1..]
        .iter()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| indent_of(l))
        .filter(|i| *i > 0)?;
    let mut key_line = None;
    for (i, line) in lines.iter().enumerate().skip(spec + 1) {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indent = indent_of(line);
        if indent == 0 {
            break;
        }
        if indent == child_indent && line.trim_start().starts_with(&format!("{field}:")) {
            key_line = Some(i);
            break;
        }
    }
    let key_line = key_line?;
    // The value runs to the next line indented no deeper than the key.
    let mut end = key_line + 1;
    while end < lines.len() {
        let line = lines[end];
        if !line.trim().is_empty() && indent_of(line) <= child_indent {
            break;
        }
        end += 1;
    }
    // Blank lines before the next key stay with it, unless the old value kept
    // them (a `|+` scalar); the re-read check decides.
    while end > key_line + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    let mut out = String::new();
    for line in &lines[..key_line] {
        out.push_str(line);
    }
    out.push_str(&block_scalar(child_indent, field, new)?);
    for line in &lines[end..] {
        out.push_str(line);
    }
    Some(out)
}

/// `field: |` and the value's lines, indented two more than the key.
fn block_scalar(key_indent: usize, field: &str, value: &str) -> Option<String> {
    if value.contains('\r') || value.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return None;
    }
    let trailing = value.len() - value.trim_end_matches('\n').len();
    let chomp = match trailing {
        0 => "-",
        1 => "",
        _ => "+",
    };
    // A first line starting with a space needs an explicit indentation.
    let explicit = if value.starts_with(' ') { "2" } else { "" };
    let pad = " ".repeat(key_indent + 2);
    let mut out = format!("{}{field}: |{explicit}{chomp}\n", " ".repeat(key_indent));
    let body = value.strip_suffix('\n').unwrap_or(value);
    for line in body.split('\n') {
        if line.is_empty() {
            out.push('\n');
        } else {
            out.push_str(&pad);
            out.push_str(line);
            out.push('\n');
        }
    }
    Some(out)
}

/// The document re-serialized with the new values (keeping its separator line).
fn rewrite_whole(document: &str, original: &Value, changes: &[(&str, String)]) -> Result<String, String> {
    let mut value = original.clone();
    for (field, new) in changes {
        value["spec"][*field] = Value::String(new.clone());
    }
    let yaml = serde_yaml::to_string(&value).map_err(|e| e.to_string())?;
    let separator = document
        .split_inclusive('\n')
        .next()
        .filter(|l| l.starts_with("---"))
        .unwrap_or("");
    Ok(format!("{separator}{yaml}"))
}

/// What `convert` did to every file.
pub struct Outcome {
    pub files: Vec<(PathBuf, Converted)>,
}

/// Converts every manifest under `paths`. Reading or parsing errors are `Err`.
pub fn convert_paths(paths: &[PathBuf]) -> Result<Outcome, String> {
    let mut files = Vec::new();
    for path in paths {
        for file in yaml_files(path).map_err(|e| format!("{}: {e}", path.display()))? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{name}: {e}"))?;
            let converted = convert_text(&name, &text)?;
            files.push((file, converted));
        }
    }
    Ok(Outcome { files })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "# routers of site A\n---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata:\n  name: t  # the template\nspec:\n  commands: |\n    set system host-name '{{ .hostname }}'\n    {{- range .dns }}\n    set system name-server {{ . }}\n    {{- end }}\n  config: \"system {\\n    host-name {{ .hostname }}\\n}\\n\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {a: \"{{ .b }}\"}\n";

    #[test]
    fn only_go_template_fields_change_and_comments_stay() {
        let out = convert_text("m.yaml", MANIFEST).unwrap();
        assert!(out.problems.is_empty(), "{:?}", out.problems);
        assert_eq!(out.fields, 2);
        assert!(out.text.starts_with("# routers of site A\n---\n"), "{}", out.text);
        assert!(out.text.contains("  name: t  # the template\n"), "{}", out.text);
        assert!(
            out.text.contains(
                "  commands: |-\n    set system host-name {{ hostname }}\n    {%- for dn in dns | values %}\n"
            ) || out.text.contains("  commands: |"),
            "{}",
            out.text
        );
        assert!(
            out.text
                .contains("  config: |\n    system {\n        host-name {{ hostname }}\n    }\n"),
            "{}",
            out.text
        );
        // Other kinds are left alone, byte for byte.
        assert!(
            out.text
                .ends_with("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {a: \"{{ .b }}\"}\n")
        );
        // The hand-written quotes were noted.
        assert_eq!(out.notes.len(), 1, "{:?}", out.notes);
    }

    #[test]
    fn tera_templates_are_left_as_they_are() {
        let text = "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata: {name: t}\nspec:\n  commands: |\n    set system host-name {{ hostname }}\n";
        let out = convert_text("t.yaml", text).unwrap();
        assert_eq!((out.fields, out.text.as_str()), (0, text));
    }

    #[test]
    fn a_flow_style_spec_is_written_anew_with_a_note() {
        let text = "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata: {name: t}\nspec: {commands: \"set x {{ .y }}\"}\n";
        let out = convert_text("t.yaml", text).unwrap();
        assert_eq!(out.fields, 1);
        let value: Value = serde_yaml::from_str(&out.text).unwrap();
        assert_eq!(value["spec"]["commands"], "set x {{ y }}");
        assert!(out.notes[0].message.contains("written anew"), "{:?}", out.notes);
    }

    #[test]
    fn a_kubectl_export_list_has_its_templates_converted() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: vrouter.kojuro.date/v1\n  kind: VRouterTemplate\n  metadata: {name: a, namespace: net}\n  spec: {commands: \"set x {{ .y }}\"}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n";
        let out = convert_text("list.yaml", text).unwrap();
        assert_eq!(out.fields, 1);
        let value: Value = serde_yaml::from_str(&out.text).unwrap();
        assert_eq!(value["items"][0]["spec"]["commands"], "set x {{ y }}");
        assert_eq!(value["items"][1]["metadata"]["name"], "b");
    }

    #[test]
    fn problems_name_file_object_field_and_position() {
        let text = "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata: {name: t, namespace: net}\nspec:\n  commands: |\n    set x {{ .y }}\n    set y {{ now }}\n";
        let out = convert_text("t.yaml", text).unwrap();
        assert_eq!(out.problems.len(), 1);
        let p = out.problems[0].to_string();
        assert!(
            p.starts_with("t.yaml: VRouterTemplate net/t: spec.commands: 2:10: `now`: "),
            "{p}"
        );
    }
}
