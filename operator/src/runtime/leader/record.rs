//! The pure decisions of the election, as client-go's `leaderelection`
//! makes them: what the Lease record says, whether this replica may take it,
//! and when a leader must stop because it has not renewed in time. The
//! shell in [`super`] reads and writes the Lease and keeps the clock.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// The three durations of an election, with client-go's meaning and
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a follower waits, from the moment it last saw the record
    /// change, before it takes the Lease over. Written to the Lease.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal: past
    /// it, the leader stops starting work. Shorter than `lease_duration`, so
    /// the old leader has stopped before a follower can take over.
    pub renew_deadline: Duration,
    /// How often the Lease is read and renewed (or its takeover attempted).
    pub retry_period: Duration,
}

impl Default for Timing {
    /// client-go's (and controller-runtime's) defaults.
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Timings that cannot fence a leader.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error(
        "the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?}): \
         a follower could take over while the old leader still works"
    )]
    LeaseNotLongerThanRenewDeadline { lease: Duration, renew: Duration },
    #[error(
        "the renew deadline ({renew:?}) must be longer than the retry period ({retry:?}) \
         by a fifth at least, so that a leader gets more than one try to renew"
    )]
    RenewDeadlineTooShort { renew: Duration, retry: Duration },
    #[error("the lease duration must be whole seconds of at least 1s (the Lease stores seconds), not {0:?}")]
    LeaseNotWholeSeconds(Duration),
}

impl Timing {
    /// Checks the rules client-go enforces, and that the Lease can hold the
    /// duration exactly.
    pub fn validated(self) -> Result<Timing, TimingError> {
        let Timing {
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        } = self;
        if lease.subsec_nanos() != 0 || lease < Duration::from_secs(1) {
            return Err(TimingError::LeaseNotWholeSeconds(lease));
        }
        if lease <= renew {
            return Err(TimingError::LeaseNotLongerThanRenewDeadline { lease, renew });
        }
        // client-go's JitterFactor: a retry may come 1.2 periods late.
        if renew <= retry.mul_f64(1.2) {
            return Err(TimingError::RenewDeadlineTooShort { renew, retry });
        }
        Ok(self)
    }
}

/// What the Lease's spec says, in the fields client-go reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Empty when nobody holds it (released).
    pub holder: String,
    pub duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

/// What to do with the Lease on one try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, held by this replica.
    Create,
    /// This replica holds it: write a new renew time.
    Renew,
    /// It is released, or its holder has not renewed for its duration (as
    /// this replica has watched it): take it over.
    TakeOver,
    /// Another replica holds it and renewed recently: wait.
    Wait { holder: String },
}

/// How long a follower has seen the same record: it judges expiry by its
/// own clock from when the record last changed, never by the timestamps in
/// it, so clocks of different machines need not agree.
#[derive(Clone, Debug)]
pub struct Observed {
    record: Option<Record>,
    since: Instant,
}

impl Observed {
    pub fn new(now: Instant) -> Observed {
        Observed {
            record: None,
            since: now,
        }
    }

    /// Notes the record read at `now`; the clock restarts when it changed.
    pub fn see(&mut self, record: Option<&Record>, now: Instant) {
        if self.record.as_ref() != record {
            self.record = record.cloned();
            self.since = now;
        }
    }

    /// How long the record has stayed as it is.
    pub fn unchanged_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }
}

/// The step for the record `current` (none: no Lease), which has not
/// changed for `unchanged_for`, as seen by replica `me`.
pub fn decide(current: Option<&Record>, me: &str, unchanged_for: Duration) -> Step {
    let Some(record) = current else {
        return Step::Create;
    };
    if record.holder == me {
        return Step::Renew;
    }
    let duration = Duration::from_secs(u64::try_from(record.duration_seconds).unwrap_or(0));
    if record.holder.is_empty() || unchanged_for >= duration {
        return Step::TakeOver;
    }
    Step::Wait {
        holder: record.holder.clone(),
    }
}

/// The record to write for `step` (not for [`Step::Wait`]), by `me` at time
/// `now`.
pub fn next_record(step: &Step, current: Option<&Record>, me: &str, timing: &Timing, now: Timestamp) -> Option<Record> {
    let duration_seconds = i32::try_from(timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let fresh = |transitions| Record {
        holder: me.to_owned(),
        duration_seconds,
        acquire_time: Some(now),
        renew_time: Some(now),
        transitions,
    };
    match (step, current) {
        (Step::Create, _) | (Step::TakeOver | Step::Renew, None) => Some(fresh(0)),
        (Step::TakeOver, Some(old)) => Some(fresh(old.transitions.saturating_add(1))),
        (Step::Renew, Some(old)) => Some(Record {
            duration_seconds,
            renew_time: Some(now),
            ..old.clone()
        }),
        (Step::Wait { .. }, _) => None,
    }
}

/// The record a leader leaves when it shuts down, as client-go's
/// `ReleaseOnCancel` does: no holder, a one-second duration, so a follower
/// takes over at its next try.
pub fn released(current: &Record, now: Timestamp) -> Record {
    Record {
        holder: String::new(),
        duration_seconds: 1,
        renew_time: Some(now),
        acquire_time: Some(now),
        ..current.clone()
    }
}

/// The leader's fence: the instant past which it has not renewed within
/// the renew deadline and must stop. `renewed_at` is when the last
/// successful renewal was *sent* (the earliest time the API server can have
/// stamped it), so the fence never lags the record the followers see.
pub fn fence(renewed_at: Instant, timing: &Timing) -> Instant {
    renewed_at + timing.renew_deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn held_by(holder: &str, seconds: i32) -> Record {
        Record {
            holder: holder.into(),
            duration_seconds: seconds,
            acquire_time: Some(at("2026-01-01T00:00:00Z")),
            renew_time: Some(at("2026-01-01T00:00:05Z")),
            transitions: 3,
        }
    }

    #[test]
    fn decisions_follow_client_go() {
        let s = Duration::from_secs;
        let cases: &[(Option<Record>, Duration, Step)] = &[
            (None, s(0), Step::Create),
            (Some(held_by("me", 15)), s(100), Step::Renew),
            (Some(held_by("other", 15)), s(14), Step::Wait { holder: "other".into() }),
            (Some(held_by("other", 15)), s(15), Step::TakeOver),
            (Some(held_by("", 15)), s(0), Step::TakeOver),
            // A Go replica's 4 s Lease expires by its own duration, not ours.
            (Some(held_by("go-replica", 4)), s(4), Step::TakeOver),
            (
                Some(held_by("go-replica", 4)),
                s(3),
                Step::Wait {
                    holder: "go-replica".into(),
                },
            ),
        ];
        for (record, unchanged, want) in cases {
            assert_eq!(
                &decide(record.as_ref(), "me", *unchanged),
                want,
                "{record:?} unchanged {unchanged:?}"
            );
        }
    }

    #[test]
    fn a_follower_times_the_record_from_its_last_change() {
        let t0 = Instant::now();
        let mut seen = Observed::new(t0);
        let a = held_by("other", 15);
        seen.see(Some(&a), t0);
        seen.see(Some(&a), t0 + Duration::from_secs(10));
        assert_eq!(
            seen.unchanged_for(t0 + Duration::from_secs(12)),
            Duration::from_secs(12)
        );
        // A renewal (new renewTime) restarts the clock.
        let renewed = Record {
            renew_time: Some(at("2026-01-01T00:00:07Z")),
            ..a
        };
        seen.see(Some(&renewed), t0 + Duration::from_secs(13));
        assert_eq!(seen.unchanged_for(t0 + Duration::from_secs(14)), Duration::from_secs(1));
    }

    #[test]
    fn records_written_keep_or_count_the_transitions() {
        let timing = Timing::default();
        let now = at("2026-01-01T00:01:00Z");
        let renewed = next_record(&Step::Renew, Some(&held_by("me", 4)), "me", &timing, now).unwrap();
        assert_eq!(renewed.acquire_time, Some(at("2026-01-01T00:00:00Z")));
        assert_eq!((renewed.renew_time, renewed.transitions), (Some(now), 3));
        assert_eq!(renewed.duration_seconds, 15);
        let taken = next_record(&Step::TakeOver, Some(&held_by("other", 15)), "me", &timing, now).unwrap();
        assert_eq!((taken.holder.as_str(), taken.transitions), ("me", 4));
        assert_eq!(taken.acquire_time, Some(now));
        let created = next_record(&Step::Create, None, "me", &timing, now).unwrap();
        assert_eq!((created.transitions, created.duration_seconds), (0, 15));
        assert_eq!(
            next_record(&Step::Wait { holder: "x".into() }, None, "me", &timing, now),
            None
        );
        let gone = released(&held_by("me", 15), now);
        assert_eq!(
            (gone.holder.as_str(), gone.duration_seconds, gone.transitions),
            ("", 1, 3)
        );
    }

    #[test]
    fn timings_that_cannot_fence_are_refused() {
        let s = Duration::from_secs;
        let t = |lease, renew, retry| Timing {
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        };
        assert_eq!(Timing::default().validated(), Ok(Timing::default()));
        assert!(matches!(
            t(s(10), s(10), s(2)).validated(),
            Err(TimingError::LeaseNotLongerThanRenewDeadline { .. })
        ));
        assert!(matches!(
            t(s(15), s(2), s(2)).validated(),
            Err(TimingError::RenewDeadlineTooShort { .. })
        ));
        assert!(matches!(
            t(Duration::from_millis(1500), s(1), Duration::from_millis(100)).validated(),
            Err(TimingError::LeaseNotWholeSeconds(_))
        ));
        let msg = t(s(10), s(12), s(2)).validated().unwrap_err().to_string();
        assert!(msg.contains("must be longer than the renew deadline"), "{msg}");
    }

    #[test]
    fn the_fence_is_the_renew_deadline_after_the_last_renewal_was_sent() {
        let sent = Instant::now();
        let timing = Timing::default();
        assert_eq!(fence(sent, &timing), sent + Duration::from_secs(10));
        // A follower takes over no sooner than lease_duration after it saw
        // that renewal, which came after it was sent: the fence is earlier
        // by lease_duration - renew_deadline.
        assert!(fence(sent, &timing) + (timing.lease_duration - timing.renew_deadline) <= sent + timing.lease_duration);
    }
}
