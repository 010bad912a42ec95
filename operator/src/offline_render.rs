//! `vrouter-operator render`: what the operator would write, from manifest
//! files alone, like `helm template`. It applies the admission rules that
//! need no cluster, resolves each binding's references among the given
//! objects, and renders with the same engine and code as the controller.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use vrouter_api::manifest::{Manifest, parse_documents};
use vrouter_api::{VRouterConfig, VRouterParams, VRouterTarget, VRouterTemplate};
use vrouter_render::{TemplateEngine, TemplateKind};

use crate::vrouterbinding::plan;
use crate::webhooks::rules::{self, Findings};

/// Exit code for manifests that are invalid or do not render.
pub const EXIT_INVALID: i32 = 1;
/// Exit code for files that cannot be read or parsed at all.
pub const EXIT_UNREADABLE: i32 = 2;

/// One thing wrong, located by file, object and field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub source: String,
    pub object: String,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.object)?;
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// An object read from a file.
pub struct Loaded {
    pub source: String,
    pub manifest: Manifest,
}

fn yaml_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every manifest under `paths` (files, or directories of `*.yaml`).
pub fn load(paths: &[PathBuf]) -> Result<Vec<Loaded>, String> {
    let mut out = Vec::new();
    for path in paths {
        for file in yaml_files(path).map_err(|e| format!("{}: {e}", path.display()))? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{name}: {e}"))?;
            let manifests = parse_documents(&text, &name).map_err(|e| e.to_string())?;
            out.extend(manifests.into_iter().map(|manifest| Loaded {
                source: name.clone(),
                manifest,
            }));
        }
    }
    Ok(out)
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// What admission would say of one object: denials become problems,
/// warnings are kept to be shown, as `kubectl apply` shows them.
fn sort_findings(
    source: &str,
    object: String,
    findings: Findings,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) {
    let locate = |v: crate::webhooks::rules::Violation| Problem {
        source: source.to_owned(),
        object: object.clone(),
        field: Some(v.field),
        message: v.message,
    };
    problems.extend(findings.denials.into_iter().map(locate));
    warnings.extend(findings.warnings.into_iter().map(locate));
}

/// The outcome of a render that succeeded.
pub struct Rendered {
    /// The VRouterConfigs, sorted by namespace and name.
    pub configs: Vec<VRouterConfig>,
    /// What admission would accept with a warning (e.g. a template's
    /// `| safe`, which turns escaping off).
    pub warnings: Vec<Problem>,
}

/// Validates every object and renders every binding. Returns the generated
/// VRouterConfigs sorted by namespace and name, or every problem found.
pub fn render(objects: &[Loaded]) -> Result<Vec<VRouterConfig>, Vec<Problem>> {
    render_with_warnings(objects).map(|r| r.configs)
}

/// [`render`], keeping the warnings admission would give.
pub fn render_with_warnings(objects: &[Loaded]) -> Result<Rendered, Vec<Problem>> {
    let engine = TemplateEngine::new();
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut templates: HashMap<(String, String), &VRouterTemplate> = HashMap::new();
    let mut params: HashMap<(String, String), &VRouterParams> = HashMap::new();
    let mut targets: HashMap<(String, String), &VRouterTarget> = HashMap::new();
    let mut bindings = Vec::new();
    for Loaded { source, manifest } in objects {
        let object = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let (ns, name) = key(meta);
            format!("{} {ns}/{name}", manifest.kind())
        };
        match manifest {
            Manifest::Template(t) => {
                for (field, kind, text) in [
                    ("spec.config", TemplateKind::Config, &t.spec.config),
                    ("spec.commands", TemplateKind::Commands, &t.spec.commands),
                ] {
                    let located = |message: String| Problem {
                        source: source.clone(),
                        object: object(&t.metadata),
                        field: Some(field.into()),
                        message,
                    };
                    match engine.review(t.metadata.name.as_deref().unwrap_or(""), kind, text) {
                        Ok(found) => warnings.extend(found.into_iter().map(|w| located(w.to_string()))),
                        Err(e) => problems.push(located(e.to_string())),
                    }
                }
                templates.insert(key(&t.metadata), t);
            }
            Manifest::Params(p) => {
                params.insert(key(&p.metadata), p);
            }
            Manifest::Target(t) => {
                sort_findings(
                    source,
                    object(&t.metadata),
                    rules::target(t),
                    &mut problems,
                    &mut warnings,
                );
                targets.insert(key(&t.metadata), t);
            }
            Manifest::Binding(b) => {
                sort_findings(
                    source,
                    object(&b.metadata),
                    rules::binding(b),
                    &mut problems,
                    &mut warnings,
                );
                bindings.push((source, b));
            }
            Manifest::Config(c) => sort_findings(
                source,
                object(&c.metadata),
                rules::config(c),
                &mut problems,
                &mut warnings,
            ),
            Manifest::ProxmoxCluster(p) => sort_findings(
                source,
                object(&p.metadata),
                rules::proxmox_cluster(p),
                &mut problems,
                &mut warnings,
            ),
            Manifest::Status(s) => sort_findings(
                source,
                object(&s.metadata),
                rules::status(s),
                &mut problems,
                &mut warnings,
            ),
            Manifest::Other(_) => {}
        }
    }
    let mut configs = Vec::new();
    for (source, binding) in bindings {
        let (ns, name) = key(&binding.metadata);
        let object = format!("VRouterBinding {ns}/{name}");
        let mut missing = Vec::new();
        let mut resolve = |field: String, r: &vrouter_api::NameRef| -> (String, String) {
            let k = (r.resolve_namespace(&ns).to_owned(), r.name.clone());
            let (kind, found) = if field.starts_with("spec.templateRef") {
                ("VRouterTemplate", templates.contains_key(&k))
            } else if field.starts_with("spec.paramsRefs") {
                ("VRouterParams", params.contains_key(&k))
            } else {
                ("VRouterTarget", targets.contains_key(&k))
            };
            if !found {
                missing.push(Problem {
                    source: source.clone(),
                    object: object.clone(),
                    field: Some(format!("{field}.name")),
                    message: format!("{kind} {:?} is not among the given manifests", r.name),
                });
            }
            k
        };
        let refs = plan::references(binding);
        let keys: Vec<(String, (String, String))> =
            refs.iter().map(|(f, r)| (f.clone(), resolve(f.clone(), r))).collect();
        if !missing.is_empty() {
            problems.extend(missing);
            continue;
        }
        let pick = |prefix: &'static str| -> Vec<(String, String)> {
            keys.iter()
                .filter(|(f, _)| f.starts_with(prefix))
                .map(|(_, k)| k.clone())
                .collect()
        };
        let t: Vec<VRouterTemplate> = pick("spec.templateRef")
            .into_iter()
            .map(|k| templates[&k].clone())
            .collect();
        let p: Vec<VRouterParams> = pick("spec.paramsRefs")
            .into_iter()
            .map(|k| params[&k].clone())
            .collect();
        let g: Vec<VRouterTarget> = pick("spec.targetRefs")
            .into_iter()
            .map(|k| targets[&k].clone())
            .collect();
        match plan::render_targets(binding, &t, &p, &g) {
            Ok(rendered) => configs.extend(rendered),
            Err(message) => problems.push(Problem {
                source: source.clone(),
                object,
                field: None,
                message,
            }),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    configs.sort_by_key(|c| key(&c.metadata));
    Ok(Rendered { configs, warnings })
}

/// The configs as a YAML stream; with `script`, each followed by the apply
/// script the KubeVirt and Proxmox providers would run (its heredoc
/// delimiter is random on every run, as in the operator).
pub fn to_yaml(configs: &[VRouterConfig], script: bool) -> Result<String, String> {
    let mut out = String::new();
    for config in configs {
        // Owner references need the binding's uid, which only a cluster has.
        let mut config = config.clone();
        config.metadata.owner_references = None;
        let config = &config;
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(config).map_err(|e| e.to_string())?);
        if script {
            let text =
                vrouter_render::render_apply_script(&config.spec.config, &config.spec.commands, config.spec.save)
                    .map_err(|e| format!("apply script for {:?}: {e}", config.metadata.name))?;
            out.push_str(&format!(
                "# apply script for {}:\n",
                config.metadata.name.as_deref().unwrap_or("")
            ));
            for line in text.lines() {
                out.push_str("#   ");
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(out)
}
