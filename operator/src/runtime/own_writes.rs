//! The watch events a controller's own writes come back as. A status write
//! returns the object as stored, with its new resourceVersion; the watch
//! then delivers that same version as an event. Reconciling on it would
//! look at a state the controller itself just decided on, and (when the
//! event overtakes the controller's next step) read the router again for
//! nothing. A controller records what it wrote here and drops the events
//! that carry exactly that version; any change by someone else (a person,
//! another controller, a new generation) has another version and passes.
//!
//! An event that arrives before its write is recorded passes too: that is
//! one reconcile too many, never one too few.
//!
//! Until a write's echo has come, the controller's store holds the object
//! from before the write: a reconcile woken meanwhile by something else (a
//! related object's event) would decide from that older view and write
//! over it, a conflict. [`OwnWrites::awaiting_echo`] tells it to wait
//! instead, and lets that echo through to wake it. It also knows the
//! versions a write of ours replaced ([`OwnWrites::record_over`]): a
//! reconcile handed one of those took its object from the store just before
//! the echo came in, and deciding from it would be the same conflict (the
//! one 409 on VRouterStatuses, and the one on VRouterBindings, of issue
//! 25's 1,000-target runs).
//!
//! A write's echo is waited for as long as the watch may still deliver it,
//! not for a fixed few seconds: a watch never skips a version except when
//! it lists again (after its resourceVersion expired), and a list is
//! announced by `Init` and ended by `InitDone`. At 10,000 routers the
//! store ran more than 5 s behind the writes; a wait that gave up then
//! let the binding create 76 configs again (409s) and let echoes that came
//! late wake their controllers as if someone else had written.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::watcher;

/// Namespace and name of one object of the kind an [`OwnWrites`] is for.
type Key = (Option<String>, String);

fn key_of(object: &impl Resource) -> Key {
    let meta = object.meta();
    (meta.namespace.clone(), meta.name.clone().unwrap_or_default())
}

/// Per object of one kind: the resourceVersions of the controller's own
/// writes whose events have not come yet, and the last versions the watch
/// delivered. A reconcile may write twice (before and after a dispatch), so
/// the first echo can arrive after the second write is recorded; and an
/// echo can overtake the write's own response, or a write can change
/// nothing and keep the version the watch already delivered: a write of a
/// version already seen waits for nothing. The kind's full object and its
/// metadata-only form (a metadata watch) share the key, so either can be
/// recorded or seen.
#[derive(Default)]
pub struct OwnWrites {
    objects: Mutex<HashMap<Key, Versions>>,
    /// When the watch was seen to begin listing again, until the list is in.
    relist_began: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Versions {
    pending: Vec<(String, Instant)>,
    seen: Vec<String>,
    /// Versions a write of ours replaced: an object at one of them is
    /// older than what the API server holds.
    replaced: Vec<String>,
    /// A reconcile found the store behind a pending write and waits for
    /// its echo, which therefore wakes the controller.
    deferred: bool,
}

/// How soon a reconcile that found the store behind a write of its own
/// looks again, should the echo's own wake-up not come first.
pub const ECHO_WAIT: Duration = Duration::from_secs(5);

/// How long a write's echo is waited for at most. Echoes are only lost to a
/// list, which [`OwnWrites::passes`] sees; this bounds the wait should one be
/// lost some other way (a write whose request went out before a list and
/// whose answer came after it, the list showing a later version).
const ECHO_GIVE_UP: Duration = Duration::from_secs(60);

/// Versions of one object remembered at most, of each list.
const REMEMBERED: usize = 4;

fn push_bounded<T>(list: &mut Vec<T>, item: T) {
    if list.len() == REMEMBERED {
        list.remove(0);
    }
    list.push(item);
}

impl OwnWrites {
    /// `written` is the object as the API server answered a write of ours.
    pub fn record(&self, written: &impl Resource) {
        let Some(version) = written.meta().resource_version.clone() else {
            return;
        };
        let mut objects = self.lock();
        let versions = objects.entry(key_of(written)).or_default();
        if !versions.seen.contains(&version) {
            push_bounded(&mut versions.pending, (version, Instant::now()));
        }
    }

    /// [`OwnWrites::record`], and `base` (the object the write was made
    /// from) is known to be replaced, unless the write changed nothing and
    /// kept its version.
    pub fn record_over(&self, base: &impl Resource, written: &impl Resource) {
        self.record(written);
        let (Some(old), Some(new)) = (&base.meta().resource_version, &written.meta().resource_version) else {
            return;
        };
        if old != new {
            let mut objects = self.lock();
            let versions = objects.entry(key_of(written)).or_default();
            if !versions.replaced.contains(old) {
                push_bounded(&mut versions.replaced, old.clone());
            }
        }
    }

    /// Whether `seen` is exactly a version one of our writes of it produced
    /// (each is an echo once). An object that is being deleted always
    /// passes, and is forgotten.
    pub fn is_echo(&self, seen: &impl Resource) -> bool {
        let key = key_of(seen);
        let mut objects = self.lock();
        if seen.meta().deletion_timestamp.is_some() {
            objects.remove(&key);
            return false;
        }
        let Some(version) = seen.meta().resource_version.clone() else {
            return false;
        };
        let versions = objects.entry(key).or_default();
        let at = versions.pending.iter().position(|(v, _)| *v == version);
        if let Some(at) = at {
            versions.pending.remove(at);
        }
        push_bounded(&mut versions.seen, version);
        // The echo a deferred reconcile waits for wakes it.
        let awaited = at.is_some() && std::mem::take(&mut versions.deferred);
        at.is_some() && !awaited
    }

    /// Whether a watch event is to wake the controller: not when it is the
    /// echo of an own write. A deleted object is forgotten (its event
    /// passes), so the versions kept stay bounded by the objects that exist.
    pub fn passes<K: Resource>(&self, event: &watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => !self.is_echo(object),
            watcher::Event::Delete(object) => {
                self.lock().remove(&key_of(object));
                true
            }
            watcher::Event::Init => {
                *lock(&self.relist_began) = Some(Instant::now());
                true
            }
            // The list holds every write answered before it began (at its
            // version or a later one), and the versions it skipped are
            // never delivered. A write answered after that is waited for
            // still: its echo follows the list, or the list shows it.
            watcher::Event::InitDone => {
                if let Some(began) = lock(&self.relist_began).take() {
                    for versions in self.lock().values_mut() {
                        versions.pending.retain(|(_, at)| *at >= began);
                    }
                }
                true
            }
        }
    }

    /// Whether a write of `object` has not come back through the watch yet
    /// (the store is behind that write), for at most [`ECHO_GIVE_UP`]. Its
    /// echo then wakes the controller, which filters its echoes otherwise.
    pub fn awaiting_echo(&self, object: &impl Resource) -> bool {
        self.awaiting_echo_at(object, Instant::now())
    }

    /// [`OwnWrites::awaiting_echo`] by name, for an object a write of ours
    /// may have created that the caller has no copy of.
    pub fn awaiting_echo_of(&self, namespace: &str, name: &str) -> bool {
        self.awaiting_echo_key(&(Some(namespace.to_owned()), name.to_owned()), Instant::now())
    }

    fn awaiting_echo_at(&self, object: &impl Resource, now: Instant) -> bool {
        self.awaiting_echo_key(&key_of(object), now)
    }

    /// Whether `object` is a version a write of ours replaced (for a
    /// controller whose own echoes wake it, so that it needs no wait for
    /// them, only not to decide from what they replaced).
    pub fn is_replaced(&self, object: &impl Resource) -> bool {
        let Some(version) = &object.meta().resource_version else {
            return false;
        };
        self.lock()
            .get(&key_of(object))
            .is_some_and(|versions| versions.replaced.contains(version))
    }

    fn awaiting_echo_key(&self, key: &Key, now: Instant) -> bool {
        let mut objects = self.lock();
        let Some(versions) = objects.get_mut(key) else {
            return false;
        };
        versions
            .pending
            .retain(|(_, at)| now.duration_since(*at) < ECHO_GIVE_UP);
        versions.deferred = !versions.pending.is_empty();
        versions.deferred
    }

    /// Forgets `object` (one that is being deleted, for a controller that is
    /// not fed its events).
    pub fn forget(&self, object: &impl Resource) {
        self.lock().remove(&key_of(object));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Versions>> {
        lock(&self.objects)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn at(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("net".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_the_versions_our_writes_produced_are_echoes_and_each_only_once() {
        let own = OwnWrites::default();
        own.record(&at("a", "10"));
        assert!(!own.is_echo(&at("b", "10")), "another object");
        assert!(!own.is_echo(&at("a", "9")), "an older event still passes");
        assert!(own.is_echo(&at("a", "10")));
        assert!(!own.is_echo(&at("a", "10")), "a replay of the same version passes");
        assert!(!own.is_echo(&at("a", "11")), "someone else's change");
    }

    #[test]
    fn two_writes_in_a_row_are_both_echoes_whatever_order_their_events_take() {
        let own = OwnWrites::default();
        own.record(&at("a", "20"));
        own.record(&at("a", "21"));
        assert!(own.is_echo(&at("a", "20")));
        assert!(own.is_echo(&at("a", "21")));
        own.record(&at("a", "30"));
        own.record(&at("a", "31"));
        assert!(own.is_echo(&at("a", "31")));
        assert!(own.is_echo(&at("a", "30")));
        assert!(!own.is_echo(&at("a", "32")));
    }

    #[test]
    fn only_the_last_few_writes_of_an_object_are_remembered() {
        let own = OwnWrites::default();
        for version in 1..=REMEMBERED + 1 {
            own.record(&at("a", &version.to_string()));
        }
        assert!(!own.is_echo(&at("a", "1")), "the oldest is forgotten");
        assert!(own.is_echo(&at("a", &(REMEMBERED + 1).to_string())));
    }

    #[test]
    fn the_store_is_behind_until_the_echo_comes_or_the_wait_ends() {
        let own = OwnWrites::default();
        assert!(!own.awaiting_echo(&at("a", "1")), "nothing written");
        own.record(&at("a", "2"));
        assert!(own.awaiting_echo_of("net", "a"), "by name");
        assert!(!own.awaiting_echo_of("lab", "a"), "same name, another namespace");
        assert!(!own.awaiting_echo(&at("b", "1")), "another object");
        assert!(!own.is_echo(&at("a", "2")), "waited for, so it passes");
        assert!(!own.awaiting_echo(&at("a", "2")), "the echo came");
        own.record(&at("a", "3"));
        let slow = Instant::now() + ECHO_WAIT * 2;
        assert!(
            own.awaiting_echo_at(&at("a", "2"), slow),
            "a store that runs seconds behind is still behind"
        );
        let later = Instant::now() + ECHO_GIVE_UP;
        assert!(
            !own.awaiting_echo_at(&at("a", "2"), later),
            "an echo that never comes is waited for no longer"
        );
        assert!(!own.is_echo(&at("a", "3")), "and forgotten");
        own.record(&at("a", "4"));
        own.record(&at("b", "4"));
        let mut deleting = at("a", "4");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!own.is_echo(&deleting));
        assert!(!own.awaiting_echo(&at("a", "4")), "a deleted object is forgotten");
        assert!(own.awaiting_echo(&at("b", "4")));
        own.forget(&at("b", "4"));
        assert!(!own.awaiting_echo(&at("b", "4")), "forgotten on request");
    }

    #[test]
    fn the_echo_a_reconcile_waits_for_wakes_it() {
        let own = OwnWrites::default();
        own.record(&at("a", "2"));
        assert!(own.awaiting_echo(&at("a", "1")), "a reconcile finds the store behind");
        assert!(own.passes(&watcher::Event::Apply(at("a", "2"))), "its echo wakes it");
        own.record(&at("a", "3"));
        assert!(
            !own.passes(&watcher::Event::Apply(at("a", "3"))),
            "an echo nothing waits for stays quiet"
        );
    }

    #[test]
    fn a_list_ends_the_wait_for_the_writes_before_it_began() {
        let own = OwnWrites::default();
        own.record(&at("a", "2"));
        assert!(own.passes(&watcher::Event::<ConfigMap>::Init));
        std::thread::sleep(Duration::from_millis(2));
        own.record(&at("b", "3"));
        assert!(own.passes(&watcher::Event::InitApply(at("a", "5"))), "a later version");
        assert!(own.awaiting_echo(&at("a", "5")), "until the list is in");
        assert!(own.passes(&watcher::Event::<ConfigMap>::InitDone));
        assert!(!own.awaiting_echo(&at("a", "5")), "the list skipped version 2");
        assert!(own.awaiting_echo_of("net", "b"), "written while the list ran");
        assert!(
            own.passes(&watcher::Event::Apply(at("b", "3"))),
            "its echo, waited for, follows the list"
        );
        assert!(!own.awaiting_echo_of("net", "b"));
        own.record(&at("c", "6"));
        assert!(
            own.passes(&watcher::Event::<ConfigMap>::InitDone),
            "a list's end seen alone"
        );
        assert!(own.awaiting_echo_of("net", "c"), "ends no wait");
    }

    #[test]
    fn a_write_whose_version_the_watch_already_delivered_waits_for_nothing() {
        let own = OwnWrites::default();
        // The echo overtook the write's response.
        assert!(!own.is_echo(&at("a", "5")));
        own.record(&at("a", "5"));
        assert!(!own.awaiting_echo(&at("a", "5")));
        // A write that changed nothing keeps the version already seen.
        own.record(&at("a", "5"));
        assert!(!own.awaiting_echo(&at("a", "5")));
    }

    #[test]
    fn echoes_wake_nothing_and_a_deleted_object_is_forgotten() {
        let own = OwnWrites::default();
        own.record(&at("a", "7"));
        assert!(!own.passes(&watcher::Event::Apply(at("a", "7"))));
        assert!(own.passes(&watcher::Event::Apply(at("a", "8"))));
        own.record(&at("a", "9"));
        assert!(own.passes(&watcher::Event::Delete(at("a", "9"))));
        assert!(own.lock().is_empty(), "nothing kept of a deleted object");
    }

    #[test]
    fn an_object_a_write_of_ours_replaced_is_behind_even_after_the_echo() {
        let own = OwnWrites::default();
        own.record_over(&at("a", "1"), &at("a", "2"));
        assert!(own.is_echo(&at("a", "2")));
        assert!(
            own.is_replaced(&at("a", "1")),
            "handed the object from before the echo came in"
        );
        assert!(!own.is_replaced(&at("a", "2")));
        assert!(!own.is_replaced(&at("a", "3")), "someone else's later change");
        assert!(!own.is_replaced(&at("b", "1")), "another object");
        // A write that changed nothing keeps its version: not replaced.
        own.record_over(&at("a", "2"), &at("a", "2"));
        assert!(!own.is_replaced(&at("a", "2")));
    }

    #[test]
    fn an_object_being_deleted_is_never_an_echo() {
        let own = OwnWrites::default();
        own.record(&at("a", "10"));
        let mut deleting = at("a", "10");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!own.is_echo(&deleting));
    }
}
