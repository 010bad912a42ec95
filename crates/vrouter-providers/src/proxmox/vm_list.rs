//! One short-lived, shared snapshot of a cluster's VMs
//! (`/cluster/resources?type=vm`), for the VRouterTarget poll's "is the VM
//! running" (spec §7.5).
//!
//! Asked one VM at a time (`status/current`), a cluster of 1,000 targets
//! polled every 60 s costs 1,000 requests a minute, almost all of the
//! operator's idle CPU. The list carries every VM's `status`, so polls that
//! land within [`FRESH_FOR`] of each other read one answer. Concurrent
//! callers share one request (single flight): the first takes the lock and
//! asks, the others wait for its answer, including its error, so an
//! unreachable cluster costs one attempt per flight, not one per VM.
//!
//! Kept beside the cluster's HTTP client (`clients.rs`), under the same
//! key: a changed ProxmoxCluster or rotated token drops both together.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ClusterVm;
use crate::error::ProviderError;

/// How long a listing answers polls. Well under the 60 s poll interval, so
/// a poll is never more than this much older than one per VM would be.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// What the listing says about one VMID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmState {
    Running,
    Stopped,
    /// Not listed: destroyed (or never existed). The spec reads this as
    /// "not running", not as an error.
    Absent,
}

impl VmState {
    pub fn is_running(self) -> bool {
        self == VmState::Running
    }
}

/// The state of `vmid` in `vms`.
pub fn state_of(vms: &[ClusterVm], vmid: i64) -> VmState {
    match vms.iter().find(|vm| vm.vmid == vmid) {
        Some(vm) if vm.running => VmState::Running,
        Some(_) => VmState::Stopped,
        None => VmState::Absent,
    }
}

/// When a kept answer's request started and when its answer came.
#[derive(Clone, Copy, Debug)]
struct Flight {
    started: Instant,
    answered: Instant,
}

/// Whether a caller that began waiting at `arrived` may take, at `now`, the
/// answer of `flight`. Those who were waiting when it came shared that
/// flight and take its answer, listing or error, however long it took.
/// Later callers take a listing while it is fresh (its age counted from
/// the request's start), never an error: they ask again rather than
/// inherit an old failure.
fn reusable(answered_ok: bool, flight: Flight, arrived: Instant, now: Instant, fresh_for: Duration) -> bool {
    let waited_for_it = flight.answered >= arrived;
    waited_for_it || (answered_ok && now.saturating_duration_since(flight.started) < fresh_for)
}

struct Snapshot {
    flight: Flight,
    answer: Result<Arc<Vec<ClusterVm>>, ProviderError>,
}

/// The last listing of one cluster (for one credential).
pub(crate) struct VmList {
    fresh_for: Duration,
    last: tokio::sync::Mutex<Option<Snapshot>>,
}

impl std::fmt::Debug for VmList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmList").field("fresh_for", &self.fresh_for).finish()
    }
}

impl Default for VmList {
    fn default() -> Self {
        VmList::new(FRESH_FOR)
    }
}

impl VmList {
    pub(crate) fn new(fresh_for: Duration) -> Self {
        VmList {
            fresh_for,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The listing, from a fresh snapshot or from `list` (one caller at a
    /// time asks; the others wait for and share its answer).
    pub(crate) async fn get<F, Fut>(&self, list: F) -> Result<Arc<Vec<ClusterVm>>, ProviderError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<ClusterVm>, ProviderError>>,
    {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some(snapshot) = last.as_ref() {
            let ok = snapshot.answer.is_ok();
            if reusable(ok, snapshot.flight, arrived, Instant::now(), self.fresh_for) {
                return snapshot.answer.as_ref().map(Arc::clone).map_err(copy_of);
            }
        }
        let started = Instant::now();
        let answer = list().await.map(Arc::new);
        *last = Some(Snapshot {
            flight: Flight {
                started,
                answered: Instant::now(),
            },
            answer: answer.as_ref().map(Arc::clone).map_err(copy_of),
        });
        answer
    }
}

/// The error a waiter gets from the flight it shared: the same variant (the
/// target's conditions branch on it) for every error a listing returns.
fn copy_of(error: &ProviderError) -> ProviderError {
    match error {
        ProviderError::Unauthorized {
            endpoint,
            status,
            message,
        } => ProviderError::Unauthorized {
            endpoint: endpoint.clone(),
            status: *status,
            message: message.clone(),
        },
        ProviderError::Http {
            endpoint,
            method,
            path,
            status,
            message,
        } => ProviderError::Http {
            endpoint: endpoint.clone(),
            method: method.clone(),
            path: path.clone(),
            status: *status,
            message: message.clone(),
        },
        ProviderError::Unreachable { attempts } => ProviderError::Unreachable {
            attempts: attempts.clone(),
        },
        ProviderError::CertificateNotTrusted { attempts } => ProviderError::CertificateNotTrusted {
            attempts: attempts.clone(),
        },
        ProviderError::Timeout { operation, after } => ProviderError::Timeout {
            operation: operation.clone(),
            after: *after,
        },
        ProviderError::Protocol { peer, detail } => ProviderError::protocol(peer.clone(), detail.clone()),
        other => ProviderError::protocol("the Proxmox VE API", other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn vm(vmid: i64, running: bool) -> ClusterVm {
        ClusterVm {
            vmid,
            node: "pve1".into(),
            running,
            uptime: if running { 60 } else { 0 },
        }
    }

    #[test]
    fn each_vmid_reads_as_the_listing_says() {
        let listing = [vm(100, true), vm(101, false), vm(102, true)];
        let cases: [(&str, &[ClusterVm], i64, VmState); 6] = [
            ("listed running", &listing, 100, VmState::Running),
            ("listed stopped", &listing, 101, VmState::Stopped),
            ("another running VM", &listing, 102, VmState::Running),
            ("not listed (destroyed)", &listing, 103, VmState::Absent),
            ("an empty cluster", &[], 100, VmState::Absent),
            ("a VMID only a prefix of a listed one", &listing, 10, VmState::Absent),
        ];
        for (case, vms, vmid, state) in cases {
            assert_eq!(state_of(vms, vmid), state, "{case}");
        }
        assert!(VmState::Running.is_running());
        assert!(!VmState::Stopped.is_running() && !VmState::Absent.is_running());
    }

    #[test]
    fn who_may_take_a_kept_answer() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let fresh = Duration::from_secs(5);
        let flight = |started, answered| Flight { started, answered };
        // (case, answered ok, flight, arrived, now, reusable)
        let cases = [
            (
                "a listing still fresh",
                true,
                flight(t0, t0 + s),
                t0 + 3 * s,
                t0 + 3 * s,
                true,
            ),
            (
                "a listing as old as FRESH_FOR",
                true,
                flight(t0, t0 + s),
                t0 + 5 * s,
                t0 + 5 * s,
                false,
            ),
            (
                "a stale listing",
                true,
                flight(t0, t0 + s),
                t0 + 9 * s,
                t0 + 9 * s,
                false,
            ),
            (
                "a listing its waiter waited for",
                true,
                flight(t0, t0 + s),
                t0,
                t0 + s,
                true,
            ),
            (
                "a slow listing its waiter waited for",
                true,
                flight(t0, t0 + 9 * s),
                t0 + s,
                t0 + 9 * s,
                true,
            ),
            (
                "an error its waiter waited for",
                false,
                flight(t0, t0 + 2 * s),
                t0 + s,
                t0 + 2 * s,
                true,
            ),
            (
                "an error that came before it did",
                false,
                flight(t0, t0 + s),
                t0 + 2 * s,
                t0 + 2 * s,
                false,
            ),
        ];
        for (case, ok, flight, arrived, now, want) in cases {
            assert_eq!(reusable(ok, flight, arrived, now, fresh), want, "{case}");
        }
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_listing_and_one_error() {
        let list = VmList::new(Duration::from_secs(60));
        let asked = AtomicUsize::new(0);
        let listing = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(vec![vm(100, true)])
        };
        let answers = futures::future::join_all((0..8).map(|_| list.get(listing))).await;
        assert!(answers.iter().all(|a| a.as_ref().unwrap().len() == 1));
        assert_eq!(asked.load(Ordering::SeqCst), 1, "one request for 8 callers");

        let failing = VmList::new(Duration::from_secs(60));
        let failed = AtomicUsize::new(0);
        let refused = || async {
            failed.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Err(ProviderError::Unauthorized {
                endpoint: "https://127.0.0.1:8006".into(),
                status: 401,
                message: "authentication failure".into(),
            })
        };
        let answers = futures::future::join_all((0..8).map(|_| failing.get(refused))).await;
        assert!(answers.iter().all(|a| a.as_ref().unwrap_err().is_unauthorized()));
        assert_eq!(failed.load(Ordering::SeqCst), 1, "the waiters share the error");
        // A caller that comes after the failure asks again.
        assert!(failing.get(refused).await.is_err());
        assert_eq!(failed.load(Ordering::SeqCst), 2);
    }
}
