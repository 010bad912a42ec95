//! What a binding should produce, as pure functions: the names, labels and
//! owner of each generated VRouterConfig, which existing ones are orphans, and
//! whether an existing one needs a write.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;
use vrouter_api::constants::{LABEL_BINDING, LABEL_TARGET};
use vrouter_api::{
    NameRef, VRouterBinding, VRouterConfig, VRouterConfigSpec, VRouterParams, VRouterTarget, VRouterTemplate,
};
use vrouter_render::{TemplateEngine, TemplateSource, merge_layers};

/// Name of the config a binding generates for a target: `{binding}.{target}`.
pub fn config_name(binding: &str, target: &str) -> String {
    format!("{binding}.{target}")
}

/// A reference that points out of the binding's namespace. The webhook
/// rejects these; the controller refuses them too, so a cluster running
/// without webhooks (or with objects older than them) cannot be used to
/// reach another namespace's targets or credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} references namespace {namespace:?}; only the binding's own namespace {own:?} is allowed")]
pub struct CrossNamespace {
    pub field: String,
    pub namespace: String,
    pub own: String,
}

/// Every reference of the binding, with the field it sits in.
pub fn references(binding: &VRouterBinding) -> Vec<(String, &NameRef)> {
    let spec = &binding.spec;
    let mut out = Vec::new();
    if let Some(r) = &spec.template_ref {
        out.push(("spec.templateRef".to_owned(), r));
    }
    let lists = [
        ("spec.templateRefs", &spec.template_refs),
        ("spec.paramsRefs", &spec.params_refs),
        ("spec.targetRefs", &spec.target_refs),
    ];
    for (field, list) in lists {
        for (i, r) in list.iter().enumerate() {
            out.push((format!("{field}[{i}]"), r));
        }
    }
    out
}

/// The first reference that leaves the binding's namespace, if any.
pub fn check_same_namespace(binding: &VRouterBinding) -> Result<(), CrossNamespace> {
    let own = binding.metadata.namespace.clone().unwrap_or_default();
    for (field, r) in references(binding) {
        if r.crosses_namespace(&own) {
            return Err(CrossNamespace {
                field,
                namespace: r.namespace.clone(),
                own,
            });
        }
    }
    Ok(())
}

/// The owner reference that ties a generated config to its binding.
pub fn owner_reference(binding: &VRouterBinding) -> OwnerReference {
    OwnerReference {
        api_version: "vrouter.kojuro.date/v1".into(),
        kind: "VRouterBinding".into(),
        name: binding.metadata.name.clone().unwrap_or_default(),
        uid: binding.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The VRouterConfig a binding wants for one target.
pub fn desired_config(binding: &VRouterBinding, target: &str, config: String, commands: String) -> VRouterConfig {
    let binding_name = binding.metadata.name.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (LABEL_BINDING.to_owned(), binding_name.clone()),
        (LABEL_TARGET.to_owned(), target.to_owned()),
    ]);
    VRouterConfig {
        metadata: ObjectMeta {
            name: Some(config_name(&binding_name, target)),
            namespace: binding.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![owner_reference(binding)]),
            ..Default::default()
        },
        spec: VRouterConfigSpec {
            target_ref: NameRef::new(target),
            save: binding.spec.save,
            config,
            commands,
        },
        status: None,
    }
}

/// Whether `existing` differs from `desired` in anything the binding owns:
/// the spec, its two labels, or its controller owner reference.
pub fn needs_write(existing: &VRouterConfig, desired: &VRouterConfig) -> bool {
    if existing.spec != desired.spec {
        return true;
    }
    let labels = existing.metadata.labels.clone().unwrap_or_default();
    let wanted_labels = desired.metadata.labels.clone().unwrap_or_default();
    if wanted_labels.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return true;
    }
    !controlled_by_the_same_owner(existing, desired)
}

/// The controller of `existing` (`Kind name`) when that is not the binding
/// `desired` names as its owner; `None` when it has no controller or is
/// the binding's.
pub fn other_controller(existing: &VRouterConfig, desired: &VRouterConfig) -> Option<String> {
    controller_of(existing)
        .filter(|o| Some(&o.uid) != owner_uid(desired))
        .map(|o| format!("{} {:?}", o.kind, o.name))
}

/// Whether `existing` is controlled by the binding that `desired` names as
/// its owner: a config of the generated name that is not is someone else's.
pub fn controlled_by_the_same_owner(existing: &VRouterConfig, desired: &VRouterConfig) -> bool {
    controller_of(existing).is_some_and(|o| Some(&o.uid) == owner_uid(desired))
}

/// The API server allows one controller reference per object.
fn controller_of(object: &VRouterConfig) -> Option<&OwnerReference> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

fn owner_uid(desired: &VRouterConfig) -> Option<&String> {
    desired
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .map(|o| &o.uid)
}

/// Renders the binding for each target, in `targets` order: params merged
/// paramsRefs → binding → target, templates parsed once and rendered per
/// target. `templates`, `params` and `targets` are the resolved references,
/// in the binding's order. Any failure names the template or target and
/// nothing is returned, so nothing is written.
pub fn render_targets(
    binding: &VRouterBinding,
    templates: &[VRouterTemplate],
    params: &[VRouterParams],
    targets: &[VRouterTarget],
) -> Result<Vec<VRouterConfig>, String> {
    let names: Vec<String> = templates
        .iter()
        .map(|t| t.metadata.name.clone().unwrap_or_default())
        .collect();
    let sources: Vec<TemplateSource<'_>> = templates
        .iter()
        .zip(&names)
        .map(|(t, name)| TemplateSource {
            name,
            config: &t.spec.config,
            commands: &t.spec.commands,
        })
        .collect();
    let empty = Value::Object(Default::default());
    let mut layers: Vec<Value> = params
        .iter()
        .map(|p| p.spec.params.clone().unwrap_or(empty.clone()))
        .collect();
    layers.push(binding.spec.params.clone().unwrap_or(empty.clone()));
    // Parse once, render per target: parsing dominates a render.
    let prepared = TemplateEngine::new().prepare(&sources).map_err(|e| e.to_string())?;
    let mut desired = Vec::with_capacity(targets.len());
    for target in targets {
        let target_name = target.metadata.name.clone().unwrap_or_default();
        let mut all = layers.clone();
        all.push(target.spec.params.clone().unwrap_or(empty.clone()));
        let merged = merge_layers(&all).map_err(|e| format!("params for target {target_name:?}: {e}"))?;
        let rendered = prepared
            .render(&merged)
            .map_err(|e| format!("rendering for target {target_name:?}: {e}"))?;
        desired.push(desired_config(
            binding,
            &target_name,
            rendered.config,
            rendered.commands,
        ));
    }
    Ok(desired)
}

/// Names of existing configs (found by the binding label) that no target of
/// the binding wants any more. Deleting one only removes the object; the
/// router keeps its config, so this is safe at any point of a rollout.
pub fn orphans<'a>(desired_names: &HashSet<String>, existing: &'a [VRouterConfig]) -> Vec<&'a str> {
    existing
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .filter(|name| !desired_names.contains(*name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(yaml: &str) -> VRouterBinding {
        let mut b: VRouterBinding = serde_yaml::from_str(yaml).unwrap();
        b.metadata.namespace = Some("net".into());
        b.metadata.uid = Some("uid-1".into());
        b
    }

    fn simple() -> VRouterBinding {
        binding("metadata: {name: bgp}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}, {name: b}]}")
    }

    #[test]
    fn generated_configs_are_named_labelled_and_owned() {
        let c = desired_config(&simple(), "a", "cfg".into(), "cmd".into());
        assert_eq!(c.metadata.name.as_deref(), Some("bgp.a"));
        assert_eq!(c.metadata.namespace.as_deref(), Some("net"));
        let labels = c.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_BINDING], "bgp");
        assert_eq!(labels[LABEL_TARGET], "a");
        let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("VRouterBinding", "uid-1"));
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
        assert_eq!(c.spec.target_ref, NameRef::new("a"));
        assert!(c.spec.save);
    }

    #[test]
    fn save_false_is_propagated() {
        let b = binding("metadata: {name: bgp}\nspec: {targetRefs: [{name: a}], save: false}");
        assert!(!desired_config(&b, "a", String::new(), String::new()).spec.save);
    }

    #[test]
    fn a_matching_config_needs_no_write_and_any_owned_difference_does() {
        let desired = desired_config(&simple(), "a", "cfg".into(), "cmd".into());
        let mut existing = desired.clone();
        existing.metadata.resource_version = Some("7".into());
        existing
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "x".into());
        assert!(
            !needs_write(&existing, &desired),
            "extra labels and server fields are not ours"
        );

        let mut changed = existing.clone();
        changed.spec.commands = "other".into();
        assert!(needs_write(&changed, &desired));

        let mut relabelled = existing.clone();
        relabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_TARGET.into(), "b".into());
        assert!(needs_write(&relabelled, &desired));

        let mut unowned = existing.clone();
        unowned.metadata.owner_references = None;
        assert!(needs_write(&unowned, &desired));
    }

    #[test]
    fn a_config_controlled_by_another_object_is_named_and_an_uncontrolled_one_is_not() {
        let desired = desired_config(&simple(), "a", "cfg".into(), "cmd".into());
        assert_eq!(other_controller(&desired, &desired), None, "the binding's own");
        let mut unowned = desired.clone();
        unowned.metadata.owner_references = None;
        assert_eq!(other_controller(&unowned, &desired), None, "adoptable");
        let mut other = desired.clone();
        let reference = &mut other.metadata.owner_references.as_mut().unwrap()[0];
        reference.uid = "uid-of-another-binding".into();
        reference.name = "bgp-old".into();
        assert_eq!(
            other_controller(&other, &desired).as_deref(),
            Some(r#"VRouterBinding "bgp-old""#)
        );
        other.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert_eq!(
            other_controller(&other, &desired),
            None,
            "an owner that is not the controller"
        );
    }

    #[test]
    fn orphans_are_existing_configs_no_target_wants() {
        let b = simple();
        let existing = vec![
            desired_config(&b, "a", String::new(), String::new()),
            desired_config(&b, "gone", String::new(), String::new()),
        ];
        let desired: HashSet<String> = ["bgp.a".to_owned(), "bgp.b".to_owned()].into();
        assert_eq!(orphans(&desired, &existing), ["bgp.gone"]);
    }

    #[test]
    fn references_outside_the_namespace_are_refused_naming_the_field() {
        assert_eq!(check_same_namespace(&simple()), Ok(()));
        let same = binding("metadata: {name: bgp}\nspec: {targetRefs: [{name: a, namespace: net}]}");
        assert_eq!(check_same_namespace(&same), Ok(()));
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
            let b = binding(&format!("metadata: {{name: bgp}}\nspec: {spec}"));
            let err = check_same_namespace(&b).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.to_string().contains("\"x\""), "{err}");
        }
    }
}
