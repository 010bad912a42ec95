//! References between objects, and the schema helpers shared by several kinds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A reference to an object by name. An empty namespace means the namespace
/// of the object holding the reference; the webhooks reject any other
/// namespace for references that cross a trust boundary (see `docs/security.md`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct NameRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
}

impl NameRef {
    pub fn new(name: impl Into<String>) -> Self {
        NameRef {
            namespace: String::new(),
            name: name.into(),
        }
    }

    /// The namespace this reference points into, given the namespace of the
    /// object that holds it.
    pub fn resolve_namespace<'a>(&'a self, referrer_namespace: &'a str) -> &'a str {
        if self.namespace.is_empty() {
            referrer_namespace
        } else {
            &self.namespace
        }
    }

    /// True when the reference names a namespace other than the referrer's.
    pub fn crosses_namespace(&self, referrer_namespace: &str) -> bool {
        self.resolve_namespace(referrer_namespace) != referrer_namespace
    }
}

/// A key in a Secret in the referrer's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

/// A Secret in the referrer's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretReference {
    pub name: String,
}

/// The reference that makes an object the operator writes controlled by
/// `self`: kube's controller reference, with `blockOwnerDeletion` set as
/// Kubernetes' own controllers set it, so the owner's foreground deletion
/// waits for what it owns.
pub trait ControllerRef: Resource<DynamicType = ()> {
    /// `None` for an object without a name or uid (one read from a file).
    fn controller_ref(&self) -> Option<OwnerReference> {
        Some(OwnerReference {
            block_owner_deletion: Some(true),
            ..self.controller_owner_ref(&())?
        })
    }
}

impl<K: Resource<DynamicType = ()>> ControllerRef for K {}

/// Schema of a schemaless `params` block: any JSON, kept as written.
pub(crate) fn preserve_unknown_fields(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "Arbitrary params, merged in three layers and handed to the templates."
    })
}

pub(crate) fn default_true() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_namespace_resolves_to_the_referrers_namespace() {
        let r = NameRef::new("site-a");
        assert_eq!(r.resolve_namespace("prod"), "prod");
        assert!(!r.crosses_namespace("prod"));
    }

    #[test]
    fn a_controller_reference_blocks_the_owners_deletion() {
        let mut binding = crate::VRouterBinding::new("bgp", Default::default());
        assert_eq!(binding.controller_ref(), None, "no uid: read from a file");
        binding.metadata.uid = Some("uid-1".into());
        assert_eq!(
            binding.controller_ref(),
            Some(OwnerReference {
                api_version: "vrouter.kojuro.date/v1".into(),
                kind: "VRouterBinding".into(),
                name: "bgp".into(),
                uid: "uid-1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            })
        );
    }

    #[test]
    fn explicit_namespace_is_kept() {
        let r = NameRef {
            namespace: "other".into(),
            name: "site-a".into(),
        };
        assert_eq!(r.resolve_namespace("prod"), "other");
        assert!(r.crosses_namespace("prod"));
        let same = NameRef {
            namespace: "prod".into(),
            name: "site-a".into(),
        };
        assert!(!same.crosses_namespace("prod"));
    }
}
