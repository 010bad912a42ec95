//! The scale test's second shape (`VROUTER_SCALE_SHAPE=selector-waves`):
//! the binding chooses its targets by label (`targetSelector`) and rolls out
//! in waves of 5 % (`spec.rollout.mode: Waves`, no pause), so the figures
//! are those of a fleet rollout rather than of one all-at-once write.
//!
//! What the harness holds such a rollout to: the binding walks every wave
//! in order, one after another, and ends Ready after the last; no more
//! configs are in flight (written, not yet Applied) than a wave holds; and
//! no config is Applied twice for one generation.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};
use vrouter_api::VRouterBinding;

/// The binding's shape (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Every target named in `targetRefs`, written at once.
    Refs,
    /// Targets chosen by label, rolled out in waves of [`BATCH_PERCENT`].
    SelectorWaves,
}

/// The wave size, as a percentage of the targets.
pub const BATCH_PERCENT: usize = 5;

/// The label every target carries and the selector matches.
pub const LABEL: (&str, &str) = ("fleet", "edge");

pub fn shape() -> Shape {
    match std::env::var("VROUTER_SCALE_SHAPE").as_deref() {
        Err(_) | Ok("refs") => Shape::Refs,
        Ok("selector-waves") => Shape::SelectorWaves,
        Ok(other) => panic!("VROUTER_SCALE_SHAPE={other:?} is neither `refs` nor `selector-waves`"),
    }
}

/// Configs a wave of `targets` holds (the percentage rounded up, as the
/// walk rounds it).
pub fn wave_size(targets: usize) -> usize {
    (targets * BATCH_PERCENT).div_ceil(100)
}

/// How many waves `targets` make.
pub fn wave_count(targets: usize) -> usize {
    targets.div_ceil(wave_size(targets))
}

/// The binding of the selector-waves shape: the same templates and params
/// as the by-name binding, its targets by label, waves with no pause.
pub fn binding_body(mut by_name: Value) -> Value {
    let spec = by_name["spec"].as_object_mut().expect("a binding spec");
    spec.remove("targetRefs");
    spec.insert("targetSelector".into(), json!({"matchLabels": {LABEL.0: LABEL.1}}));
    spec.insert(
        "rollout".into(),
        json!({"mode": "Waves", "pollInterval": "1s",
               "waves": {"batchSize": format!("{BATCH_PERCENT}%")}}),
    );
    by_name
}

/// What the harness saw of the binding while it rolled out.
#[derive(Debug, Default)]
pub struct BindingSeen {
    /// Each distinct `status.waves` (wave, of) in the order seen.
    pub waves: Vec<(u32, u32)>,
    /// Ready True for the current generation, with its message, and when.
    pub ready: Option<(String, Instant)>,
    /// The watch's first list is done: its own requests are over before
    /// the requests of the run are counted.
    pub listed: bool,
}

impl BindingSeen {
    fn saw(&mut self, binding: &VRouterBinding) {
        let Some(status) = &binding.status else {
            return;
        };
        if let Some(w) = &status.waves {
            let step = (w.wave, w.waves);
            if self.waves.last() != Some(&step) {
                self.waves.push(step);
            }
        }
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
        let current = ready.filter(|c| c.status == "True" && c.observed_generation == binding.metadata.generation);
        if let (Some(c), None) = (current, &self.ready) {
            self.ready = Some((c.message.clone(), Instant::now()));
        }
    }
}

/// Watches the binding `name` from now on.
pub fn watch_binding(
    api: Api<VRouterBinding>,
    name: &str,
    seen: Arc<Mutex<BindingSeen>>,
) -> tokio::task::JoinHandle<()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(b) | watcher::Event::InitApply(b)) => seen.lock().unwrap().saw(&b),
                Ok(watcher::Event::InitDone) => seen.lock().unwrap().listed = true,
                _ => {}
            }
        }
    })
}

/// What is wrong with the waves seen, for `targets` targets: they must go
/// 1, 2, … up to the last, each once, in order (a status write may be
/// missed by the watch only if the wave after it is seen, so gaps are
/// allowed but no step back and no repeat).
pub fn waves_wrong(seen: &[(u32, u32)], targets: usize) -> Option<String> {
    let of = wave_count(targets) as u32;
    if seen.iter().any(|&(_, n)| n != of) {
        return Some(format!("a wave count other than {of}: {seen:?}"));
    }
    if seen.windows(2).any(|w| w[1].0 <= w[0].0) {
        return Some(format!("a wave seen again or out of order: {seen:?}"));
    }
    match seen.last() {
        Some(&(last, _)) if last == of => None,
        _ => Some(format!("the last wave ({of}) never seen: {seen:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_targets_make_twenty_waves_of_five_hundred() {
        assert_eq!((wave_size(10_000), wave_count(10_000)), (500, 20));
        assert_eq!((wave_size(100), wave_count(100)), (5, 20));
        assert_eq!((wave_size(30), wave_count(30)), (2, 15));
    }

    #[test]
    fn waves_must_rise_to_the_last_without_repeats() {
        let ok: Vec<(u32, u32)> = (1..=20).map(|w| (w, 20)).collect();
        assert_eq!(waves_wrong(&ok, 10_000), None);
        assert_eq!(waves_wrong(&[(1, 20), (3, 20), (20, 20)], 10_000), None);
        assert!(waves_wrong(&[(1, 20), (2, 20), (2, 20)], 10_000).is_some());
        assert!(waves_wrong(&[(1, 20), (3, 20), (2, 20), (20, 20)], 10_000).is_some());
        assert!(waves_wrong(&[(1, 20), (19, 20)], 10_000).is_some());
        assert!(waves_wrong(&[(1, 21), (21, 21)], 10_000).is_some());
        assert!(waves_wrong(&[], 10_000).is_some());
    }
}
