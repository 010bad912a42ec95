//! Drift detection's router reads wait while a burst of applies starts.
//!
//! A binding over many targets dispatches its applies in a burst, and each
//! config that reaches Applied gets a VRouterStatus whose first sync reads
//! the router back and writes a Secret and a status: three guest-agent round
//! trips and two API writes per router, competing with the rest of the
//! burst for the API server and the operator's cores. A baseline is not
//! urgent (the apply it follows was just read back from the router), and a
//! periodic drift read less so. So a sync that is due to read its router
//! waits until no apply has been started for [`QUIET`], but never past
//! [`MAX_WAIT`] into a burst: a burst's applies finish first and its
//! baselines follow, while applies that never stop (a long rollout, a
//! fleet that keeps re-applying) hold drift detection back by
//! [`MAX_WAIT`] once, not on every read.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long after the last started apply a burst counts as over.
pub const QUIET: Duration = Duration::from_secs(1);

/// How far into a burst drift reads wait; after that they go on beside it.
pub const MAX_WAIT: Duration = Duration::from_secs(15);

/// The current burst of started applies, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Burst {
    began: Instant,
    last: Instant,
}

/// When this process started applies lately.
#[derive(Debug, Default)]
pub struct ApplyDispatches {
    burst: Mutex<Option<Burst>>,
}

impl ApplyDispatches {
    /// An apply has just been started on its router.
    pub fn record(&self) {
        let mut burst = self.lock();
        *burst = Some(recorded(*burst, Instant::now()));
    }

    /// When an apply was last started, if ever.
    pub fn last(&self) -> Option<Instant> {
        self.lock().map(|b| b.last)
    }

    /// Whether a drift read may go now.
    pub fn is_quiet(&self) -> bool {
        next_look(*self.lock(), Instant::now()).is_none()
    }

    /// Returns once a drift read may go: no apply started for [`QUIET`], or
    /// the burst begun [`MAX_WAIT`] ago.
    pub async fn quiet(&self) {
        loop {
            let burst = *self.lock();
            match next_look(burst, Instant::now()) {
                Some(wake) => tokio::time::sleep_until(wake).await,
                None => return,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Burst>> {
        self.burst.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The burst after an apply started `now`: the same one when the last
/// start was less than [`QUIET`] ago, else a new one.
fn recorded(burst: Option<Burst>, now: Instant) -> Burst {
    match burst {
        Some(b) if now < b.last + QUIET => Burst { last: now, ..b },
        _ => Burst { began: now, last: now },
    }
}

/// When a waiting read looks again, or `None` when it may go: no burst,
/// the burst over ([`QUIET`] since its last start), or [`MAX_WAIT`] into it.
fn next_look(burst: Option<Burst>, now: Instant) -> Option<Instant> {
    let b = burst?;
    let over = b.last + QUIET;
    let bound = b.began + MAX_WAIT;
    (now < over && now < bound).then(|| over.min(bound))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_burst_is_starts_less_than_quiet_apart() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let first = recorded(None, t0);
        assert_eq!(first, Burst { began: t0, last: t0 });
        let on = recorded(Some(first), t0 + ms(900));
        assert_eq!(
            on,
            Burst {
                began: t0,
                last: t0 + ms(900)
            }
        );
        assert_eq!(
            recorded(Some(on), t0 + ms(900) + QUIET),
            Burst {
                began: t0 + ms(900) + QUIET,
                last: t0 + ms(900) + QUIET
            },
            "a start QUIET after the last begins a new burst"
        );
    }

    #[test]
    fn next_look_table() {
        let t0 = Instant::now();
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        let burst = |began, last| Some(Burst { began, last });
        // (burst, now) -> next look
        let cases = [
            (None, t0, None),
            (burst(t0, t0), t0, Some(t0 + QUIET)),
            (burst(t0, t0), t0 + ms(400), Some(t0 + QUIET)),
            (burst(t0, t0), t0 + QUIET, None),
            (burst(t0, t0 + s(3)), t0 + s(3), Some(t0 + s(3) + QUIET)),
            (burst(t0, t0 + s(3)), t0 + s(5), None),
            // MAX_WAIT into a burst that goes on, reads go beside it.
            (
                burst(t0, t0 + s(14) + ms(500)),
                t0 + s(14) + ms(600),
                Some(t0 + MAX_WAIT),
            ),
            (burst(t0, t0 + s(20)), t0 + s(20), None),
        ];
        for (burst, now, want) in cases {
            assert_eq!(next_look(burst, now), want, "{burst:?} {now:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_out_a_burst_and_no_further_than_its_bound_into_one() {
        let dispatches = Arc::new(ApplyDispatches::default());
        // Nothing started: at once.
        let started = Instant::now();
        assert!(dispatches.is_quiet());
        assert_eq!(dispatches.last(), None);
        dispatches.quiet().await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        // A burst of starts every 300 ms for 3 s: the wait ends QUIET
        // after the last one.
        let burst = tokio::spawn({
            let dispatches = dispatches.clone();
            async move {
                for _ in 0..10 {
                    dispatches.record();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        });
        tokio::task::yield_now().await;
        assert!(!dispatches.is_quiet());
        let started = Instant::now();
        dispatches.quiet().await;
        assert_eq!(started.elapsed(), Duration::from_millis(2_700) + QUIET);
        assert!(dispatches.is_quiet());
        burst.await.unwrap();

        // Starts that never stop hold reads back until MAX_WAIT into the
        // burst, and from then on not at all.
        let endless = tokio::spawn({
            let dispatches = dispatches.clone();
            async move {
                loop {
                    dispatches.record();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        });
        tokio::task::yield_now().await;
        let began = Instant::now();
        tokio::time::sleep(Duration::from_secs(5)).await;
        dispatches.quiet().await;
        assert_eq!(began.elapsed(), MAX_WAIT, "a read that came 5 s into the burst");
        let later = Instant::now();
        dispatches.quiet().await;
        assert_eq!(later.elapsed(), Duration::ZERO, "reads beside the burst");
        assert!(dispatches.is_quiet());
        endless.abort();
    }
}
