//! `VRouterBinding`: templates × targets, with common params and an optional
//! serial rollout.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::Duration;
use crate::refs::{NameRef, default_true};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "vrouter.kojuro.date",
    version = "v1",
    kind = "VRouterBinding",
    doc = "Renders templates for a set of targets into one VRouterConfig per target.",
    namespaced,
    category = "vrouter",
    status = "VRouterBindingStatus",
    shortname = "vrb",
    shortname = "vrouterbinding",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".spec.rollout.mode","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VRouterBindingSpec {
    /// Deprecated: use `templateRefs`. When set, it is applied first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<NameRef>,
    /// Templates in order; later templates' config and commands follow earlier ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_refs: Vec<NameRef>,
    /// VRouterParams merged in order below this binding's own params.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params_refs: Vec<NameRef>,
    /// The routers this binding configures by name; one VRouterConfig each.
    /// With `targetSelector`, the binding configures both sets (union); at
    /// least one of the two must be set.
    #[serde(default)]
    pub target_refs: Vec<NameRef>,
    /// The routers this binding configures by label: every VRouterTarget of
    /// the binding's namespace the selector matches, now and later. A target
    /// that stops matching leaves the binding (its VRouterConfig is deleted,
    /// as when its name is dropped from `targetRefs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_selector: Option<crate::selector::TargetSelector>,
    /// Persist the config after commit; copied to each generated VRouterConfig.
    #[serde(default = "default_true")]
    pub save: bool,
    /// Params common to every target: override paramsRefs, overridden by target params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::refs::preserve_unknown_fields")]
    pub params: Option<serde_json::Value>,
    /// Stagger config writes across targets instead of writing all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// Confirmed applies (see VRouterConfig `spec.confirm`); copied to each
    /// generated VRouterConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<crate::config::ConfirmSpec>,
    /// Stop every generated config from starting a new apply (an apply in
    /// flight finishes); spec changes are still written to the configs and
    /// apply once the binding is resumed (`false` or absent).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

impl VRouterBinding {
    /// The VRouterConfig this binding generates for `target`:
    /// `{binding}.{target}` (the rollout walk names it the same way).
    pub fn config_name(&self, target: &str) -> String {
        vrouter_rollout::config_name(self.metadata.name.as_deref().unwrap_or(""), target)
    }

    /// Every reference of the binding, in the order they render (templates,
    /// params, targets), each with the field it sits in.
    pub fn references(&self) -> Vec<BindingRef<'_>> {
        let spec = &self.spec;
        let mut out = Vec::new();
        if let Some(r) = &spec.template_ref {
            out.push(BindingRef {
                kind: ReferencedKind::Template,
                field: "spec.templateRef".to_owned(),
                name_ref: r,
            });
        }
        let lists = [
            (ReferencedKind::Template, "spec.templateRefs", &spec.template_refs),
            (ReferencedKind::Params, "spec.paramsRefs", &spec.params_refs),
            (ReferencedKind::Target, "spec.targetRefs", &spec.target_refs),
        ];
        for (kind, field, list) in lists {
            out.extend(list.iter().enumerate().map(|(i, r)| BindingRef {
                kind,
                field: format!("{field}[{i}]"),
                name_ref: r,
            }));
        }
        out
    }
}

/// The kinds a VRouterBinding references.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReferencedKind {
    Template,
    Params,
    Target,
}

impl ReferencedKind {
    /// The Kubernetes kind, as messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReferencedKind::Template => "VRouterTemplate",
            ReferencedKind::Params => "VRouterParams",
            ReferencedKind::Target => "VRouterTarget",
        }
    }
}

/// One reference of a binding: what it points at and where it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingRef<'a> {
    pub kind: ReferencedKind,
    /// `spec.templateRef`, `spec.templateRefs[0]`, `spec.paramsRefs[1]`, …
    pub field: String,
    pub name_ref: &'a NameRef,
}

impl VRouterBindingSpec {
    /// The templates in the order they render: the deprecated single
    /// `templateRef` first, then `templateRefs`.
    pub fn effective_template_refs(&self) -> impl Iterator<Item = &NameRef> {
        self.template_ref.iter().chain(self.template_refs.iter())
    }

    /// The references to objects of one kind, in order (for templates, the
    /// deprecated `templateRef` first).
    pub fn refs_of(&self, kind: ReferencedKind) -> impl Iterator<Item = &NameRef> {
        let (single, list) = match kind {
            ReferencedKind::Template => (self.template_ref.as_ref(), &self.template_refs),
            ReferencedKind::Params => (None, &self.params_refs),
            ReferencedKind::Target => (None, &self.target_refs),
        };
        single.into_iter().chain(list)
    }

    /// The targets the binding configures, given the names and labels of
    /// the targets of its namespace: `targetRefs` in order, then the ones
    /// `targetSelector` matches that are not named there, by name (an order
    /// that does not depend on how the candidates were listed).
    pub fn target_names<'a>(
        &self,
        candidates: impl IntoIterator<Item = (&'a str, &'a std::collections::BTreeMap<String, String>)>,
    ) -> Vec<String> {
        let mut names: Vec<String> = self.target_refs.iter().map(|r| r.name.clone()).collect();
        let Some(selector) = &self.target_selector else {
            return names;
        };
        let named: std::collections::HashSet<&str> = self.target_refs.iter().map(|r| r.name.as_str()).collect();
        let mut selected: Vec<&str> = candidates
            .into_iter()
            .filter(|(name, labels)| !named.contains(name) && selector.matches(labels))
            .map(|(name, _)| name)
            .collect();
        selected.sort_unstable();
        selected.dedup();
        names.extend(selected.into_iter().map(str::to_owned));
        names
    }

    /// The rollout mode in force: absent, `{}` and an unset mode all mean Disabled.
    pub fn effective_rollout_mode(&self) -> RolloutMode {
        self.rollout.as_ref().map_or(RolloutMode::Disabled, |r| r.mode)
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RolloutMode {
    /// Write every generated config in one reconcile.
    #[default]
    Disabled,
    /// One target at a time; advance when its config is Applied and has soaked.
    WaitForApplied,
    /// One target at a time; advance after a fixed interval, whatever the outcome.
    FixedInterval,
    /// Batches of targets (`waves`), each written whole and awaited until
    /// its configs are Applied or Failed.
    Waves,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    #[serde(default)]
    pub mode: RolloutMode,
    /// WaitForApplied: how often to look at the frontier's config.
    #[serde(default = "default_poll_interval")]
    #[schemars(extend("default" = "10s"))]
    pub poll_interval: Duration,
    /// WaitForApplied: soak time after the frontier is Applied before advancing.
    #[serde(default)]
    #[schemars(extend("default" = "0s"))]
    pub wait_after_applied: Duration,
    /// FixedInterval: the time between two writes; required (> 0) for that mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_interval: Option<Duration>,
    /// Waves: the batches, canary, pause and failure threshold; required for that mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<crate::waves::WavesSpec>,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        RolloutSpec {
            mode: RolloutMode::Disabled,
            poll_interval: default_poll_interval(),
            wait_after_applied: Duration::ZERO,
            wait_interval: None,
            waves: None,
        }
    }
}

fn default_poll_interval() -> Duration {
    Duration::from_secs(10)
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VRouterBindingStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The serial rollout frontier; only meaningful when a rollout mode is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// Mode Waves: where the rollout stands; absent when none is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<crate::waves::WavesStatus>,
    /// The binding generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The last target whose config the rollout wrote (or is about to write).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_updated_target: String,
    /// When that target was stamped, just before its write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}
