//! What a VRouterBinding composes: for each target, the params merged in
//! three layers and the templates rendered into one VRouterConfig (spec
//! §7.1). The binding controller, `vrouter-operator render` and the demo
//! all compose with this code, so a manifest renders offline exactly as it
//! renders in the cluster.
//!
//! Fetching the referenced objects is the caller's I/O: the controller reads
//! them from the API server, `render` from files. [`VRouterBinding::references`]
//! lists what to fetch, in the order [`render_configs`] takes it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use vrouter_render::{MergeError, TemplateEngine, TemplateError, TemplateSource, merge_layers};

use crate::constants::{LABEL_BINDING, LABEL_BINDING_PAUSED, LABEL_TARGET};
use crate::{
    ControllerRef, NameRef, VRouterBinding, VRouterConfig, VRouterConfigSpec, VRouterParams, VRouterTarget,
    VRouterTemplate,
};

/// Why a binding could not be rendered. Nothing was rendered for any target.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// A template does not parse; the error names the template and where.
    #[error("{0}")]
    Template(#[source] Box<TemplateError>),
    /// One target's params layers could not be merged.
    #[error("params for target {target:?}: {source}")]
    Params { target: String, source: MergeError },
    /// A `secretKeyRef` param of one target is malformed.
    #[error("params for target {target:?}: {source}")]
    SecretParam {
        target: String,
        source: vrouter_render::secret_params::SecretParamError,
    },
    /// The templates failed to render for one target's params.
    #[error("rendering for target {target:?}: {source}")]
    Render { target: String, source: Box<TemplateError> },
}

/// The VRouterConfig `binding` wants for `target`, holding the rendered
/// `config` and `commands`: named `{binding}.{target}`, labelled with both
/// names, and controlled by the binding (when it has a uid: a binding read
/// from a file has none).
pub fn desired_config(binding: &VRouterBinding, target: &str, config: String, commands: String) -> VRouterConfig {
    let binding_name = binding.metadata.name.clone().unwrap_or_default();
    let mut labels = BTreeMap::from([
        (LABEL_BINDING.to_owned(), binding_name),
        (LABEL_TARGET.to_owned(), target.to_owned()),
    ]);
    if binding.spec.paused {
        // A config created while its binding is paused starts paused.
        labels.insert(LABEL_BINDING_PAUSED.to_owned(), "true".to_owned());
    }
    VRouterConfig {
        metadata: ObjectMeta {
            name: Some(binding.config_name(target)),
            namespace: binding.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: binding.controller_ref().map(|owner| vec![owner]),
            ..Default::default()
        },
        spec: VRouterConfigSpec {
            target_ref: NameRef::new(target),
            save: binding.spec.save,
            config,
            commands,
            confirm: binding.spec.confirm.clone(),
            rollback_to: None,
            revision_history_limit: None,
        },
        status: None,
    }
}

/// Renders `binding` for each of `targets`, in their order: params merged
/// paramsRefs → binding → target, templates parsed once and rendered per
/// target. `templates`, `params` and `targets` are the binding's resolved
/// references, in the order [`VRouterBinding::references`] lists them. Any
/// failure names the template or target, and nothing is returned, so a
/// caller writes nothing.
pub fn render_configs(
    binding: &VRouterBinding,
    templates: &[VRouterTemplate],
    params: &[VRouterParams],
    targets: &[VRouterTarget],
) -> Result<Vec<VRouterConfig>, ComposeError> {
    let sources: Vec<TemplateSource<'_>> = templates
        .iter()
        .map(|t| TemplateSource {
            name: t.metadata.name.as_deref().unwrap_or(""),
            config: &t.spec.config,
            commands: &t.spec.commands,
        })
        .collect();
    let layer = |params: &Option<Value>| params.clone().unwrap_or_else(|| Value::Object(Default::default()));
    let mut layers: Vec<Value> = params.iter().map(|p| layer(&p.spec.params)).collect();
    layers.push(layer(&binding.spec.params));
    // Parse once, render per target: parsing dominates a render.
    let prepared = TemplateEngine::new()
        .prepare(&sources)
        .map_err(|e| ComposeError::Template(Box::new(e)))?;
    let mut desired = Vec::with_capacity(targets.len());
    for target in targets {
        let target_name = target.metadata.name.clone().unwrap_or_default();
        let mut all = layers.clone();
        all.push(layer(&target.spec.params));
        let mut merged = merge_layers(&all).map_err(|source| ComposeError::Params {
            target: target_name.clone(),
            source,
        })?;
        // Secret values stay in their Secrets: the config holds placeholders,
        // which the config controller resolves just before delivery.
        vrouter_render::secret_params::replace_secret_refs(&mut merged).map_err(|source| {
            ComposeError::SecretParam {
                target: target_name.clone(),
                source,
            }
        })?;
        let rendered = prepared.render(&merged).map_err(|source| ComposeError::Render {
            target: target_name.clone(),
            source: Box::new(source),
        })?;
        desired.push(desired_config(
            binding,
            &target_name,
            rendered.config,
            rendered.commands,
        ));
    }
    Ok(desired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::{LABEL_BINDING, LABEL_TARGET};

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
    fn confirm_is_copied_into_every_generated_config() {
        let b = binding(
            "metadata: {name: bgp}\nspec: {targetRefs: [{name: a}], confirm: {timeout: 5m, check: {command: [/bin/true]}}}",
        );
        let confirm = desired_config(&b, "a", String::new(), String::new())
            .spec
            .confirm
            .unwrap();
        assert_eq!(confirm.minutes(), Some(5));
        assert_eq!(confirm.check.unwrap().command, ["/bin/true"]);
        assert_eq!(
            desired_config(&simple(), "a", String::new(), String::new())
                .spec
                .confirm,
            None
        );
    }

    /// What `render` and `diff` print is this render: a secret param shows
    /// as its placeholder, at every layer, and a malformed ref names its path.
    #[test]
    fn a_secret_param_renders_as_its_placeholder_and_a_bad_ref_is_refused() {
        let template: VRouterTemplate =
            serde_yaml::from_str("metadata: {name: t}\nspec: {commands: \"set a {{ pw }}\\nset b {{ host }}\\n\"}")
                .unwrap();
        let target: VRouterTarget = serde_yaml::from_str(
            "metadata: {name: a}\nspec: {provider: {type: kubevirt, kubevirt: {name: vm}}, params: {host: {secretKeyRef: {name: s, key: h}}}}",
        )
        .unwrap();
        let b = binding(
            "metadata: {name: bgp}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}], params: {pw: {secretKeyRef: {name: db, key: password}}}}",
        );
        let configs = render_configs(&b, std::slice::from_ref(&template), &[], std::slice::from_ref(&target)).unwrap();
        assert_eq!(
            configs[0].spec.commands,
            "set a @vrouter-secret:db/password@\nset b @vrouter-secret:s/h@\n"
        );
        let bad = binding(
            "metadata: {name: bgp}\nspec: {templateRefs: [{name: t}], targetRefs: [{name: a}], params: {pw: {secretKeyRef: {name: db}}}}",
        );
        let err = render_configs(&bad, &[template], &[], &[target])
            .unwrap_err()
            .to_string();
        assert!(err.contains("param pw.secretKeyRef.key: must be a Secret key"), "{err}");
    }

    #[test]
    fn save_false_is_propagated() {
        let b = binding("metadata: {name: bgp}\nspec: {targetRefs: [{name: a}], save: false}");
        assert!(!desired_config(&b, "a", String::new(), String::new()).spec.save);
    }
}
