//! The memory the process lets large guest answers take at once.
//!
//! Every byte of a guest's answer is the guest's to choose, up to the caps
//! (a Proxmox answer of [`crate::proxmox`]'s response cap, a `virsh` output
//! of [`crate::kubevirt::virsh::MAX_VIRSH_STDOUT_BYTES`]), and reading one
//! costs a few times its length: the answer, the text decoded from it, the
//! bytes behind that text. Drift detection reads many routers at once, so
//! routers whose guests all answer at the caps would together take the
//! operator past its memory limit if each read went ahead on its own.
//!
//! So an answer that grows past its transport's "large" threshold reserves
//! what its reading will cost from one process-wide budget
//! ([`LARGE_ANSWERS`], counted in MiB) before it is read further, in one
//! reservation, and keeps that [`Lease`] until the buffers it covers are
//! dropped. Invariants: the MiB leased at once never exceed the budget's
//! total; a lease is never grown, only shrunk (a task never waits for more
//! while holding some, so leases cannot deadlock each other); one cost is
//! at most the whole budget (a larger one is clamped and then runs alone).
//! Small answers (every usual one: a config is tens of KiB) never wait.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// One MiB, the unit the budget counts in.
pub const MIB: usize = 1024 * 1024;

/// The process-wide budget of large answers, in MiB. docs/benchmarks.md
/// has the peak memory this gives with every router answering at the caps.
pub const LARGE_ANSWERS_MIB: u32 = 128;

/// The budget every large guest answer of the process reserves from.
pub static LARGE_ANSWERS: Budget = Budget::new(LARGE_ANSWERS_MIB);

/// The whole MiB `bytes` take (at least one), at most `total_mib`.
pub fn weight_mib(bytes: usize, total_mib: u32) -> u32 {
    let mib = bytes.div_ceil(MIB).max(1);
    u32::try_from(mib).unwrap_or(u32::MAX).min(total_mib)
}

/// A number of MiB shared by everything that reserves from it.
#[derive(Debug)]
pub struct Budget {
    gate: Semaphore,
    total_mib: u32,
    /// The most MiB ever leased at once, for the figures and the tests.
    peak_mib: AtomicU32,
}

impl Budget {
    pub const fn new(total_mib: u32) -> Self {
        Budget {
            gate: Semaphore::const_new(total_mib as usize),
            total_mib,
            peak_mib: AtomicU32::new(0),
        }
    }

    /// Waits until `bytes` (in whole MiB, at most the total) are free and
    /// leases them until the lease is dropped.
    pub async fn reserve(&self, bytes: usize) -> Lease<'_> {
        let weight = weight_mib(bytes, self.total_mib);
        let permit = self
            .gate
            .acquire_many(weight)
            .await
            .expect("a budget's semaphore is never closed");
        self.peak_mib.fetch_max(self.held_mib(), Ordering::Relaxed);
        Lease {
            permit,
            total_mib: self.total_mib,
        }
    }

    pub fn total_mib(&self) -> u32 {
        self.total_mib
    }

    /// The MiB leased now.
    pub fn held_mib(&self) -> u32 {
        let free = u32::try_from(self.gate.available_permits()).unwrap_or(u32::MAX);
        self.total_mib.saturating_sub(free)
    }

    /// The most MiB leased at once since the process started.
    pub fn peak_mib(&self) -> u32 {
        self.peak_mib.load(Ordering::Relaxed)
    }
}

/// MiB of a [`Budget`], held until dropped.
#[derive(Debug)]
pub struct Lease<'a> {
    permit: SemaphorePermit<'a>,
    total_mib: u32,
}

impl Lease<'_> {
    pub fn mib(&self) -> u32 {
        u32::try_from(self.permit.num_permits()).unwrap_or(u32::MAX)
    }

    /// Gives back what is above `bytes`, once the buffers the lease covers
    /// are known to take no more. Never grows the lease.
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = weight_mib(bytes, self.total_mib);
        let surplus = self.mib().saturating_sub(keep);
        if surplus > 0 {
            drop(self.permit.split(surplus as usize));
        }
    }
}

/// A call's time limit that stands still while the call waits for a
/// budget: a call queued behind other routers' large answers is timed out
/// for its own slowness only, never for the budget's queue.
#[derive(Debug)]
pub struct Deadline {
    limit: Duration,
    waits: Mutex<Waits>,
}

#[derive(Debug, Default)]
struct Waits {
    /// The budget waits that ended.
    done: Duration,
    /// When the budget wait under way began.
    since: Option<Instant>,
}

impl Deadline {
    pub fn new(limit: Duration) -> Self {
        Deadline {
            limit,
            waits: Mutex::new(Waits::default()),
        }
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// [`Budget::reserve`], with the wait kept off the clock.
    pub async fn reserve<'b>(&self, budget: &'b Budget, bytes: usize) -> Lease<'b> {
        self.waits().since = Some(Instant::now());
        let lease = budget.reserve(bytes).await;
        let mut waits = self.waits();
        if let Some(since) = waits.since.take() {
            waits.done += since.elapsed();
        }
        lease
    }

    /// Runs `call` to its end, or `None` once it has run for the limit
    /// without counting its budget waits.
    pub async fn run<F: Future>(&self, call: F) -> Option<F::Output> {
        let started = Instant::now();
        let mut call = std::pin::pin!(call);
        loop {
            let left = self.limit.saturating_sub(self.used(started));
            if left.is_zero() {
                return None;
            }
            tokio::select! {
                out = &mut call => return Some(out),
                () = tokio::time::sleep(left) => {}
            }
        }
    }

    /// The time the call has run since `started`, less its budget waits.
    fn used(&self, started: Instant) -> Duration {
        let now = Instant::now();
        let waits = self.waits();
        let waiting = waits.since.map_or(Duration::ZERO, |since| now - since);
        (now - started).saturating_sub(waits.done + waiting)
    }

    fn waits(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.waits.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn weights_are_whole_mib_clamped_to_the_total() {
        let cases = [
            (0, 128, 1),
            (1, 128, 1),
            (MIB, 128, 1),
            (MIB + 1, 128, 2),
            (34 * MIB * 3, 128, 102),
            (200 * MIB, 128, 128),
            (usize::MAX, 128, 128),
        ];
        for (bytes, total, want) in cases {
            assert_eq!(weight_mib(bytes, total), want, "{bytes} bytes of {total} MiB");
        }
    }

    #[tokio::test]
    async fn a_lease_shrinks_and_gives_the_rest_back() {
        let budget = Budget::new(10);
        let mut lease = budget.reserve(7 * MIB).await;
        assert_eq!((lease.mib(), budget.held_mib()), (7, 7));
        lease.shrink_to(2 * MIB + 1);
        assert_eq!((lease.mib(), budget.held_mib()), (3, 3));
        lease.shrink_to(9 * MIB);
        assert_eq!(lease.mib(), 3, "a lease never grows");
        drop(lease);
        assert_eq!(budget.held_mib(), 0);
        assert_eq!(budget.peak_mib(), 7);
    }

    #[tokio::test]
    async fn a_reservation_waits_until_enough_is_given_back() {
        let budget = Budget::new(10);
        let first = budget.reserve(6 * MIB).await;
        let second = budget.reserve(6 * MIB);
        tokio::pin!(second);
        assert!(futures::poll!(second.as_mut()).is_pending(), "12 MiB leased out of 10");
        drop(first);
        let second = second.await;
        assert_eq!(budget.held_mib(), second.mib());
    }

    /// Many readers at once, each holding buffers as large as it reserved
    /// for: the bytes they hold together, counted by the readers themselves,
    /// never pass the budget, and every reader gets its turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_large_reads_never_hold_more_than_the_budget() {
        static BUDGET: Budget = Budget::new(64);
        let held = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let readers = (0..24usize).map(|i| {
            let (held, most) = (held.clone(), most.clone());
            tokio::spawn(async move {
                // 5 to 28 MiB, not whole: rounding must never undercount.
                let bytes = (5 + i) * MIB + i * 1000 + 1;
                let lease = BUDGET.reserve(bytes).await;
                let now = held.fetch_add(bytes, Ordering::SeqCst) + bytes;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                held.fetch_sub(bytes, Ordering::SeqCst);
                drop(lease);
            })
        });
        for reader in futures::future::join_all(readers).await {
            reader.expect("a reader");
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 64 * MIB, "the readers held {most} bytes at once");
        assert!(BUDGET.peak_mib() <= 64);
        assert_eq!(BUDGET.held_mib(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_does_not_run_while_its_call_waits_for_the_budget() {
        static BUDGET: Budget = Budget::new(4);
        let whole = BUDGET.reserve(4 * MIB).await;
        let deadline = Deadline::new(Duration::from_secs(2));
        let release = async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(whole);
        };
        let call = async {
            let lease = deadline.reserve(&BUDGET, MIB).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            lease.mib()
        };
        let (ran, ()) = tokio::join!(deadline.run(call), release);
        assert_eq!(
            ran,
            Some(1),
            "10 s in the budget's queue, 1 s of its own, within a 2 s limit"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_ends_a_call_slow_on_its_own() {
        static BUDGET: Budget = Budget::new(4);
        let deadline = Deadline::new(Duration::from_secs(2));
        let call = async {
            let _lease = deadline.reserve(&BUDGET, MIB).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
        };
        assert_eq!(deadline.run(call).await, None);
        assert_eq!(BUDGET.held_mib(), 0, "the lease went with the call");
    }
}
