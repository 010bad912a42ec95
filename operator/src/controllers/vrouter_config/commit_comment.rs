//! The comment an apply's commit carries on the router (VyOS `commit
//! comment`): which config, which binding rendered it, which generation and
//! apply, so `show system commit` on the router says who changed it.

use kube::{Resource, ResourceExt};
use vrouter_api::VRouterConfig;
use vrouter_render::{CommitComment, CommitOrigin};

/// The comment for applying `config` as `apply`. The binding is the one the
/// config's controller owner reference names (the binding controller sets
/// it; a label a person can edit is not trusted for this); a config written
/// directly names no binding.
pub(super) fn for_apply(config: &VRouterConfig, apply: &str) -> CommitComment {
    let namespace = config.namespace().unwrap_or_default();
    let name = config.name_any();
    let binding = config.controlling_binding().map(|o| o.name.as_str());
    CommitComment::describe(&CommitOrigin {
        namespace: &namespace,
        config: &name,
        binding,
        generation: config.meta().generation.unwrap_or(0),
        apply,
    })
}

/// `namespace/name` of the binding controlling `config`, as the history
/// records it.
pub(super) fn binding_of(config: &VRouterConfig) -> Option<String> {
    let namespace = config.namespace().unwrap_or_default();
    config
        .controlling_binding()
        .map(|binding| format!("{namespace}/{}", binding.name))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use vrouter_api::{NameRef, VRouterConfigSpec};

    use super::*;

    fn config(owners: Vec<OwnerReference>) -> VRouterConfig {
        VRouterConfig {
            metadata: ObjectMeta {
                name: Some("bgp.r1".into()),
                namespace: Some("net".into()),
                generation: Some(5),
                owner_references: Some(owners),
                ..Default::default()
            },
            spec: VRouterConfigSpec {
                target_ref: NameRef::new("r1"),
                save: true,
                config: String::new(),
                commands: String::new(),
                confirm: None,
                rollback_to: None,
                revision_history_limit: None,
            },
            status: None,
        }
    }

    fn owner(kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "vrouter.kojuro.date/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn the_controlling_binding_is_named_and_nothing_else_is() {
        let table = [
            (vec![owner("VRouterBinding", "bgp", true)], Some("bgp")),
            (vec![], None),
            (vec![owner("VRouterBinding", "bgp", false)], None),
            (vec![owner("ConfigMap", "cm", true)], None),
        ];
        for (owners, binding) in table {
            let comment = for_apply(&config(owners), "g5-01");
            let expected = match binding {
                Some(b) => format!("vrouter-operator binding=net/{b} config=net/bgp.r1 generation=5 apply=g5-01"),
                None => "vrouter-operator config=net/bgp.r1 generation=5 apply=g5-01".into(),
            };
            assert_eq!(comment.text(), expected);
        }
    }
}
