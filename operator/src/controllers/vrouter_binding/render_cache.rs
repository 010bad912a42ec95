//! The last render of each binding, kept while nothing it was made from
//! changed. A render reads the binding's spec and every template, params
//! and target it references, and nothing else; at 1,000 targets it costs
//! tens of milliseconds and a copy of every referent, and WaitForApplied
//! decides again at every poll and every config that progresses, from the
//! same inputs.
//!
//! A render is keyed by the binding's uid and generation and by the uid
//! and generation of each referent in reference order: a spec change bumps
//! a generation, a deleted and recreated object has a new uid, and a
//! reference added, removed or reordered changes the list. A status write
//! (a target's vmRunning, its node) changes neither, and the render reads
//! no status. A referent not in its watch's store gives no key: that
//! render is made the long way and not kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use vrouter_api::VRouterConfig;

/// One object as a render depends on it: its uid and generation.
pub type Version = (String, i64);

/// What a render was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderKey {
    pub binding: Version,
    /// Templates, then params, then targets, each in reference order.
    pub referents: Vec<Version>,
}

/// Whether a render made from `kept` can stand for one from `now`.
pub fn still_current(kept: &RenderKey, now: &RenderKey) -> bool {
    kept == now
}

/// A render, shared by the reconciles that read it.
pub type Render = Arc<Vec<VRouterConfig>>;

/// Each binding's (by uid) last render and what it was made from.
type Renders = HashMap<String, (RenderKey, Render)>;

/// The last render of each binding (by uid), with what it was made from.
#[derive(Default)]
pub struct RenderCache {
    renders: Mutex<Renders>,
}

impl RenderCache {
    /// The render kept for `key`'s binding, when it was made from `key`.
    pub fn get(&self, key: &RenderKey) -> Option<Render> {
        let renders = self.lock();
        let (kept, render) = renders.get(&key.binding.0)?;
        still_current(kept, key).then(|| render.clone())
    }

    /// Keeps `render`, made from `key`, in place of the binding's last one.
    pub fn put(&self, key: RenderKey, render: Render) {
        self.lock().insert(key.binding.0.clone(), (key, render));
    }

    /// Forgets the render of the binding with `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Renders> {
        self.renders.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(uid: &str, generation: i64) -> Version {
        (uid.to_owned(), generation)
    }

    fn key(binding: Version, referents: &[Version]) -> RenderKey {
        RenderKey {
            binding,
            referents: referents.to_vec(),
        }
    }

    #[test]
    fn a_render_stands_until_anything_it_was_made_from_changes() {
        let kept = key(version("b", 1), &[version("t", 1), version("r1", 1), version("r2", 1)]);
        let cases = [
            ("the same inputs", kept.clone(), true),
            ("the binding's spec", key(version("b", 2), &kept.referents), false),
            ("the binding made anew", key(version("b2", 1), &kept.referents), false),
            (
                "a template's spec",
                key(version("b", 1), &[version("t", 2), version("r1", 1), version("r2", 1)]),
                false,
            ),
            (
                "a target made anew",
                key(version("b", 1), &[version("t", 1), version("r1x", 1), version("r2", 1)]),
                false,
            ),
            (
                "targets reordered",
                key(version("b", 1), &[version("t", 1), version("r2", 1), version("r1", 1)]),
                false,
            ),
            (
                "a target removed",
                key(version("b", 1), &[version("t", 1), version("r1", 1)]),
                false,
            ),
        ];
        for (what, now, stands) in cases {
            assert_eq!(still_current(&kept, &now), stands, "{what}");
        }
    }

    #[test]
    fn the_cache_keeps_one_render_per_binding() {
        let cache = RenderCache::default();
        let first = key(version("b", 1), &[version("t", 1)]);
        assert!(cache.get(&first).is_none());
        cache.put(first.clone(), Arc::new(Vec::new()));
        assert!(cache.get(&first).is_some());
        let second = key(version("b", 2), &[version("t", 1)]);
        assert!(cache.get(&second).is_none(), "another generation");
        cache.put(second.clone(), Arc::new(Vec::new()));
        assert!(cache.get(&first).is_none(), "replaced");
        cache.forget("b");
        assert!(cache.get(&second).is_none(), "forgotten");
    }
}
