//! `vrouter-operator diff` (also `kubectl vrouter diff`): what applying the
//! given manifests would change on each router, as unified diffs of each
//! VRouterConfig the cluster holds against the one the manifests render —
//! the config.boot fragment `load` replaces the router's config with, and the
//! commands that run after it. Secret values are masked on both sides. Exit
//! codes follow `kubectl diff`: 0 nothing differs, 1 something does, 2 the
//! manifests or the cluster could not be read.
//!
//! With `--binding`, the desired side is the binding as the cluster holds
//! it, rendered from the templates, params and targets the cluster holds
//! ([`live`]), and each router's config is compared too: the rendered
//! config.boot against the router's config as drift detection last read it.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use similar::TextDiff;
use vrouter_api::{VRouterConfig, VRouterStatus};
use vrouter_render::secrets::SecretMasker;

pub mod live;

pub const EXIT_SAME: i32 = 0;
pub const EXIT_DIFFERS: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// What the cluster holds for one rendered config.
#[derive(Clone, Debug, Default)]
pub struct Live {
    pub config: Option<VRouterConfig>,
    /// Its VRouterStatus saw the router's config change outside the
    /// operator (drift repair, if on, restores it without any apply).
    pub drifted: bool,
}

/// The unified diff of one config rendered from manifests, or `None` when
/// applying it changes nothing. Pure: the caller reads [`Live`].
pub fn diff_config(desired: &VRouterConfig, live: &Live) -> Option<String> {
    diff_config_from(desired, "manifests", live)
}

/// [`diff_config`] of a config rendered from `desired_source` (named in
/// the diff's `+++` header).
pub fn diff_config_from(desired: &VRouterConfig, desired_source: &str, live: &Live) -> Option<String> {
    let id = format!(
        "{}/{}",
        desired.namespace().unwrap_or_else(|| "default".into()),
        desired.name_any()
    );
    let empty = Default::default();
    let (old, source) = match &live.config {
        Some(config) => (&config.spec, "cluster"),
        None => (&empty, "not in the cluster"),
    };
    let new = &desired.spec;
    let mut masker = SecretMasker::new();
    let fields = [
        (
            "targetRef",
            format!("{}\n", old.target_ref.name),
            format!("{}\n", new.target_ref.name),
        ),
        ("save", format!("{}\n", old.save), format!("{}\n", new.save)),
        ("config", masker.mask(&old.config), masker.mask(&new.config)),
        ("commands", masker.mask(&old.commands), masker.mask(&new.commands)),
    ];
    let mut out = String::new();
    for (field, before, after) in &fields {
        if live.config.is_some() && before == after {
            continue;
        }
        if live.config.is_none() && after.trim().is_empty() {
            continue;
        }
        let before = if live.config.is_some() { before.as_str() } else { "" };
        let text = TextDiff::from_lines(before, after.as_str())
            .unified_diff()
            .context_radius(3)
            .header(
                &format!("{id} {field} ({source})"),
                &format!("{id} {field} ({desired_source})"),
            )
            .to_string();
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    if out.is_empty() {
        return None;
    }
    if live.drifted {
        let _ = writeln!(
            out,
            "# {id}: the router drifted from its applied config; an apply restores it"
        );
    }
    Some(out)
}

/// A router's config, as `diff --binding` compares a rendered one with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterConfig {
    pub text: String,
    /// Where it was read, for the diff's header.
    pub source: String,
}

/// The unified diff of the router's config against the rendered config.boot
/// fragment `load` would replace it with, or `None` when they are the same
/// tree (layout and comments aside) or the rendered config has no fragment:
/// then `load` resets the router to its default config before the commands
/// run, which only the router knows. Both sides are normalized
/// ([`vrouter_render::normalize_config_boot`]) when VyOS's parser reads
/// them, compared as written otherwise; secret values are masked.
pub fn diff_router_config(desired: &VRouterConfig, router: &RouterConfig) -> Option<String> {
    if desired.spec.config.trim().is_empty() {
        return None;
    }
    let id = format!(
        "{}/{}",
        desired.namespace().unwrap_or_else(|| "default".into()),
        desired.name_any()
    );
    let (before, after) = match (
        vrouter_render::normalize_config_boot(&router.text),
        vrouter_render::normalize_config_boot(&desired.spec.config),
    ) {
        (Ok(before), Ok(after)) => (before, after),
        _ => (router.text.clone(), desired.spec.config.clone()),
    };
    if before == after {
        return None;
    }
    let mut masker = SecretMasker::new();
    let (before, after) = (masker.mask(&before), masker.mask(&after));
    let mut text = TextDiff::from_lines(&before, &after)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{id} config.boot ({})", router.source),
            &format!("{id} config.boot (rendered)"),
        )
        .to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Some(text)
}

/// Reads what the cluster holds for each of `desired`: a GET per config and
/// one LIST of VRouterStatuses per namespace.
pub async fn read_live(client: &Client, desired: &[VRouterConfig]) -> Result<Vec<Live>, kube::Error> {
    let mut drifted_by_namespace: HashMap<String, HashSet<String>> = HashMap::new();
    let mut out = Vec::with_capacity(desired.len());
    for config in desired {
        let ns = config.namespace().unwrap_or_else(|| "default".into());
        if !drifted_by_namespace.contains_key(&ns) {
            let statuses = Api::<VRouterStatus>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await?;
            let drifted = statuses
                .items
                .into_iter()
                .filter(|s| s.status.as_ref().is_some_and(|s| s.drift_detected))
                .map(|s| s.spec.config_ref.name)
                .collect();
            drifted_by_namespace.insert(ns.clone(), drifted);
        }
        let name = config.name_any();
        let live = Api::<VRouterConfig>::namespaced(client.clone(), &ns)
            .get_opt(&name)
            .await?;
        out.push(Live {
            config: live,
            drifted: drifted_by_namespace[&ns].contains(&name),
        });
    }
    Ok(out)
}
