//! `vrouter-operator render`: what the operator would write, from manifest
//! files alone, like `helm template`. It applies the admission rules that
//! need no cluster (`vrouter_api::validate`), resolves each binding's
//! references among the given objects, and composes the configs with the
//! controller's own code (`vrouter_api::compose`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use vrouter_api::compose::render_configs;
use vrouter_api::manifest::{Manifest, parse_documents_strictly};
use vrouter_api::validate::{self, Violation};
use vrouter_api::{ReferencedKind, VRouterBinding, VRouterConfig, VRouterParams, VRouterTarget, VRouterTemplate};
use vrouter_render::TemplateEngine;

pub use crate::cli::manifest_files::Problem;
use crate::cli::manifest_files::yaml_files;

/// Exit code for manifests that are invalid or do not render.
pub const EXIT_INVALID: i32 = 1;
/// Exit code for files that cannot be read or parsed at all.
pub const EXIT_UNREADABLE: i32 = 2;

/// An object read from a file, with the fields of it that no typed resource
/// knows (which the API server's strict field validation would refuse).
#[derive(Clone)]
pub struct Loaded {
    pub source: String,
    pub manifest: Manifest,
    pub unknown_fields: Vec<String>,
}

/// Reads every manifest under `paths` (files, or directories of `*.yaml`).
pub fn load(paths: &[PathBuf]) -> Result<Vec<Loaded>, String> {
    let mut out = Vec::new();
    for path in paths {
        for file in yaml_files(path).map_err(|e| format!("{}: {e}", path.display()))? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{name}: {e}"))?;
            let parsed = parse_documents_strictly(&text, &name).map_err(|e| e.to_string())?;
            out.extend(parsed.into_iter().map(|parsed| Loaded {
                source: name.clone(),
                manifest: parsed.manifest,
                unknown_fields: parsed.unknown_fields,
            }));
        }
    }
    Ok(out)
}

type Key = (String, String);

fn key(meta: &ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// `Kind namespace/name`, as problems name an object.
fn describe(kind: &str, meta: &ObjectMeta) -> String {
    let (ns, name) = key(meta);
    format!("{kind} {ns}/{name}")
}

/// The outcome of a render that succeeded.
pub struct Rendered {
    /// The VRouterConfigs, sorted by namespace and name.
    pub configs: Vec<VRouterConfig>,
    /// What admission would accept with a warning (e.g. a template's
    /// `| safe`, which turns escaping off).
    pub warnings: Vec<Problem>,
}

/// Validates every object and renders every binding. Returns the
/// VRouterConfigs the cluster would hold (those the bindings write, and the
/// hand-written ones among the manifests) sorted by namespace and name, or
/// every problem found.
pub fn render(objects: &[Loaded]) -> Result<Vec<VRouterConfig>, Vec<Problem>> {
    render_with_warnings(objects).map(|r| r.configs)
}

/// [`render`], keeping the warnings: what admission would accept with a
/// warning, and fields no resource knows.
pub fn render_with_warnings(objects: &[Loaded]) -> Result<Rendered, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut warnings = unknown_fields(objects);
    let engine = TemplateEngine::new();
    for Loaded { source, manifest, .. } in objects {
        let findings = validate::manifest(manifest, &engine);
        let object = || describe(manifest.kind(), manifest.metadata().unwrap_or(&ObjectMeta::default()));
        let locate = |v: Violation| Problem {
            source: source.clone(),
            object: object(),
            field: Some(v.field),
            message: v.message,
        };
        problems.extend(findings.denials.into_iter().map(locate));
        warnings.extend(findings.warnings.into_iter().map(locate));
    }
    let index = Index::of(objects);
    let mut configs = Vec::new();
    for (source, binding) in &index.bindings {
        match render_binding(&index, source, binding) {
            Ok(rendered) => configs.extend(rendered),
            Err(found) => problems.extend(found),
        }
    }
    let written: HashSet<Key> = configs.iter().map(|c| key(&c.metadata)).collect();
    for (source, config) in &index.configs {
        match check_hand_written(&index, &written, source, config) {
            Ok(true) => configs.push((*config).clone()),
            Ok(false) => {}
            Err(problem) => problems.push(problem),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    configs.sort_by_key(|c| key(&c.metadata));
    Ok(Rendered { configs, warnings })
}

/// Every field of our kinds that no resource knows (a `comands:` typo), as
/// the API server's strict field validation would name it.
pub fn unknown_fields(objects: &[Loaded]) -> Vec<Problem> {
    objects
        .iter()
        .flat_map(|loaded| {
            let object = describe(
                loaded.manifest.kind(),
                loaded.manifest.metadata().unwrap_or(&ObjectMeta::default()),
            );
            loaded.unknown_fields.iter().map(move |field| Problem {
                source: loaded.source.clone(),
                object: object.clone(),
                field: Some(field.clone()),
                message: "unknown field: the API server drops it or, with strict field validation, refuses the object"
                    .into(),
            })
        })
        .collect()
}

/// Whether a VRouterConfig among the manifests is one the cluster would hold
/// as written (`true`), or a copy of what a binding writes, shown for
/// reference (`false`: the binding's own output stands for it); an error when
/// its target is not among the manifests or a binding writes one of its name.
fn check_hand_written(
    index: &Index<'_>,
    written: &HashSet<Key>,
    source: &str,
    config: &VRouterConfig,
) -> Result<bool, Problem> {
    let problem = |field: &str, message: String| Problem {
        source: source.to_owned(),
        object: describe("VRouterConfig", &config.metadata),
        field: Some(field.into()),
        message,
    };
    if config.controlling_binding().is_some() {
        return Ok(false);
    }
    let (ns, name) = key(&config.metadata);
    if written.contains(&(ns.clone(), name)) {
        return Err(problem(
            "metadata.name",
            "a VRouterBinding among the given manifests writes a VRouterConfig of this name".into(),
        ));
    }
    let target = &config.spec.target_ref;
    if !index.has(ReferencedKind::Target, &(ns, target.name.clone())) {
        return Err(problem(
            "spec.targetRef.name",
            format!("VRouterTarget {:?} is not among the given manifests", target.name),
        ));
    }
    Ok(true)
}

/// The given objects a binding can reference, by namespace and name.
#[derive(Default)]
struct Index<'a> {
    templates: HashMap<Key, &'a VRouterTemplate>,
    params: HashMap<Key, &'a VRouterParams>,
    targets: HashMap<Key, &'a VRouterTarget>,
    bindings: Vec<(&'a str, &'a VRouterBinding)>,
    configs: Vec<(&'a str, &'a VRouterConfig)>,
}

impl<'a> Index<'a> {
    fn of(objects: &'a [Loaded]) -> Self {
        let mut index = Index::default();
        for Loaded { source, manifest, .. } in objects {
            match manifest {
                Manifest::Template(t) => _ = index.templates.insert(key(&t.metadata), t),
                Manifest::Params(p) => _ = index.params.insert(key(&p.metadata), p),
                Manifest::Target(t) => _ = index.targets.insert(key(&t.metadata), t),
                Manifest::Binding(b) => index.bindings.push((source, b)),
                Manifest::Config(c) => index.configs.push((source, c)),
                _ => {}
            }
        }
        index
    }

    fn has(&self, kind: ReferencedKind, key: &Key) -> bool {
        match kind {
            ReferencedKind::Template => self.templates.contains_key(key),
            ReferencedKind::Params => self.params.contains_key(key),
            ReferencedKind::Target => self.targets.contains_key(key),
        }
    }
}

/// One binding's configs, or a problem for each reference that is not
/// among the given objects, or the render's failure.
fn render_binding(
    index: &Index<'_>,
    source: &str,
    binding: &VRouterBinding,
) -> Result<Vec<VRouterConfig>, Vec<Problem>> {
    let (ns, _) = key(&binding.metadata);
    let object = describe("VRouterBinding", &binding.metadata);
    let problem = |field: Option<String>, message: String| Problem {
        source: source.to_owned(),
        object: object.clone(),
        field,
        message,
    };
    let references = binding.references();
    let resolved: Vec<(ReferencedKind, Key)> = references
        .iter()
        .map(|r| {
            (
                r.kind,
                (r.name_ref.resolve_namespace(&ns).to_owned(), r.name_ref.name.clone()),
            )
        })
        .collect();
    let missing: Vec<Problem> = references
        .iter()
        .zip(&resolved)
        .filter(|(_, (kind, k))| !index.has(*kind, k))
        .map(|(r, _)| {
            problem(
                Some(format!("{}.name", r.field)),
                format!(
                    "{} {:?} is not among the given manifests",
                    r.kind.as_str(),
                    r.name_ref.name
                ),
            )
        })
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let of = |kind: ReferencedKind| resolved.iter().filter(move |(k, _)| *k == kind).map(|(_, key)| key);
    let templates: Vec<VRouterTemplate> = of(ReferencedKind::Template)
        .map(|k| index.templates[k].clone())
        .collect();
    let params: Vec<VRouterParams> = of(ReferencedKind::Params).map(|k| index.params[k].clone()).collect();
    let targets = selected_targets(index, &ns, binding);
    render_configs(binding, &templates, &params, &targets).map_err(|e| vec![problem(None, e.to_string())])
}

/// The targets `binding` configures among the given manifests: its
/// `targetRefs` (all present: checked before), then those of its namespace
/// its `targetSelector` matches, as the controller selects them.
fn selected_targets(index: &Index<'_>, ns: &str, binding: &VRouterBinding) -> Vec<VRouterTarget> {
    let no_labels = std::collections::BTreeMap::new();
    let candidates = index
        .targets
        .iter()
        .filter(|((namespace, _), _)| namespace == ns)
        .map(|((_, name), t)| (name.as_str(), t.metadata.labels.as_ref().unwrap_or(&no_labels)));
    binding
        .spec
        .target_names(candidates)
        .into_iter()
        .filter_map(|name| index.targets.get(&(ns.to_owned(), name)).map(|t| (*t).clone()))
        .collect()
}

/// The configs as a YAML stream; with `script`, each followed by the apply
/// script the KubeVirt and Proxmox providers would run, byte for byte after
/// each `#   ` (its heredoc delimiter is random on every run, as in the
/// operator).
pub fn to_yaml(configs: &[VRouterConfig], script: bool) -> Result<String, String> {
    let mut out = String::new();
    for config in configs {
        // Owner references need the binding's uid, which only a cluster has;
        // status is the operator's to write.
        let mut config = config.clone();
        config.metadata.owner_references = None;
        config.status = None;
        let config = &config;
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(config).map_err(|e| e.to_string())?);
        if script {
            let text = vrouter_render::render_apply_script_as(
                &config.spec.config,
                &config.spec.commands,
                config.spec.commit(),
            )
            .map_err(|e| format!("apply script for {:?}: {e}", config.metadata.name))?;
            out.push_str(&format!(
                "# apply script for {}:\n",
                config.metadata.name.as_deref().unwrap_or("")
            ));
            out.push_str(&as_comment(&text));
        }
    }
    Ok(out)
}

/// `text` with `#   ` before each line. Lines end at `\n` only, so a `\r`
/// in a value stays where it is; a text without a final newline says so,
/// as diff does.
fn as_comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        out.push_str("#   ");
        out.push_str(line);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        out.push_str("\n# \\ no newline at end of script\n");
    }
    out
}
