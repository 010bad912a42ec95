//! What can happen to a simulated fleet, one step at a time.

use std::time::Duration;

/// How a router's next applies end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// The apply exits cleanly this long after dispatch.
    Succeed { after: Duration },
    /// The apply fails (non-zero exit or a failure marker) this long after
    /// dispatch.
    Fail { after: Duration },
    /// The apply never reports back; the config controller's apply timeout
    /// turns it into Failed.
    Hang,
    /// The VM is stopped: the config controller skips it, so a new
    /// generation is never dispatched and the config stays where it is.
    Stopped,
}

/// One step of a simulation. Targets are named by position in the current
/// `targetRefs`, taken modulo its length, so any random number names a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The binding controller reconciles now (a watch event).
    Reconcile,
    /// Virtual time moves to when the last decision asked to be requeued,
    /// and the binding controller reconciles then.
    FollowRequeue,
    /// The binding controller reconciles, but the process dies after the
    /// status stamp and before the config write.
    CrashAfterStamp,
    /// Virtual time passes; the config controllers dispatch and finish applies.
    Advance(Duration),
    /// A template or params change: these targets get a new render.
    Rerender { targets: Vec<usize> },
    /// A change that affects every target.
    RerenderAll,
    /// The render of a target goes back to what its config already holds.
    RevertRender { target: usize },
    /// The router's future applies behave like this.
    SetBehavior { target: usize, behavior: Behavior },
    /// The router reboots: a previously Applied config loses its Applied
    /// condition, an apply in flight is lost, and one re-apply of the current
    /// generation is forced.
    Reboot { target: usize },
    /// Someone repairs a Failed router by hand: its config reports Applied
    /// for its current generation.
    RecoverOutOfBand { target: usize },
    /// The user removes the target from `targetRefs` (ignored for the last
    /// one: admission keeps `targetRefs` non-empty).
    RemoveTarget { target: usize },
    /// The user appends a new router to `targetRefs`.
    AddTarget,
}
