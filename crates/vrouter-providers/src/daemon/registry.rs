//! Handles for applies that run in the background of this process.
//!
//! The daemon's `ApplyConfig` answers only when the apply has finished, but
//! the Provider contract is "dispatch, then poll". So the call runs in a
//! task and the controller gets a handle. Handles live in memory: after an
//! operator restart they are unknown, which the poll reports as
//! [`ProviderError::ExecResultLost`] so the controller dispatches afresh.
//!
//! A handle carries a random per-process epoch in its upper 32 bits. Without
//! it a restarted process would hand out handle 1 again, and a config still
//! holding the old process's handle 1 would read another apply's result.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::ProviderError;
use crate::provider::{ExecHandle, ExecOutcome, ExecStatus};

/// How long a finished result stays readable. Polls are idempotent within
/// this window, so a controller whose status write failed can read it again.
const RETENTION: Duration = Duration::from_secs(30 * 60);

/// How a background apply ended without an outcome. Kept as data (not a
/// [`ProviderError`]) so every poll can report it again.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Failure {
    Timeout {
        after: Duration,
    },
    Grpc {
        code: tonic::Code,
        message: String,
    },
    /// Whether the apply ran is unknown, or it never reached the agent: only
    /// a fresh dispatch (once the agent is connected again) can tell.
    Lost {
        reason: String,
    },
}

impl Failure {
    fn to_error(&self, handle: ExecHandle) -> ProviderError {
        match self {
            Failure::Lost { reason } => ProviderError::ExecResultLost {
                handle: handle.get(),
                reason: reason.clone(),
            },
            Failure::Timeout { after } => ProviderError::Timeout {
                operation: "vrouter-daemon ApplyConfig".into(),
                after: *after,
            },
            Failure::Grpc { code, message } => ProviderError::Grpc {
                operation: "ApplyConfig",
                code: *code,
                message: message.clone(),
            },
        }
    }
}

type Done = Option<Result<ExecOutcome, Failure>>;

struct Entry {
    /// The daemon address and agent this apply went to; a handle polled
    /// through a provider for another router is not its own.
    owner: String,
    done: watch::Receiver<Done>,
    finished_at: Mutex<Option<Instant>>,
}

/// Completes one registered apply.
pub(crate) struct Completion {
    tx: watch::Sender<Done>,
    entry: Arc<Entry>,
}

impl Completion {
    pub(crate) fn finish(self, result: Result<ExecOutcome, Failure>) {
        *self.entry.finished_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        // The receiver lives in the registry entry, so this cannot fail.
        let _ = self.tx.send(Some(result));
    }
}

/// The in-memory table of background applies. One per process
/// ([`ExecRegistry::global`]); tests make more to play a restarted operator.
pub struct ExecRegistry {
    epoch: i64,
    next: Mutex<u32>,
    entries: Mutex<HashMap<i64, Arc<Entry>>>,
    /// The handle of each apply id started through this registry, keyed by
    /// owner and id: all the record of an apply the daemon's API allows.
    applies: Mutex<HashMap<(String, String), i64>>,
}

impl std::fmt::Debug for ExecRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRegistry")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

static GLOBAL: LazyLock<Arc<ExecRegistry>> = LazyLock::new(|| Arc::new(ExecRegistry::new()));

impl ExecRegistry {
    /// A registry with a fresh random epoch, as a newly started process has.
    pub fn new() -> Self {
        let mut bytes = [0u8; 4];
        // Without OS randomness the epoch still differs per process.
        if getrandom::fill(&mut bytes).is_err() {
            bytes = std::process::id().to_le_bytes();
        }
        // 31 bits, never zero: handles stay positive (execPID > 0 means
        // "in flight" to the controller).
        let epoch = i64::from(u32::from_le_bytes(bytes) & 0x7fff_ffff).max(1);
        ExecRegistry {
            epoch,
            next: Mutex::new(0),
            entries: Mutex::new(HashMap::new()),
            applies: Mutex::new(HashMap::new()),
        }
    }

    pub fn global() -> Arc<ExecRegistry> {
        GLOBAL.clone()
    }

    pub(crate) fn register(&self, owner: &str) -> (ExecHandle, Completion) {
        let seq = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            *next = next.wrapping_add(1).max(1);
            *next
        };
        let handle = (self.epoch << 32) | i64::from(seq);
        let (tx, rx) = watch::channel(None);
        let entry = Arc::new(Entry {
            owner: owner.to_string(),
            done: rx,
            finished_at: Mutex::new(None),
        });
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| {
            e.finished_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none_or(|t| t.elapsed() < RETENTION)
        });
        entries.insert(handle, entry.clone());
        (ExecHandle(handle), Completion { tx, entry })
    }

    /// Notes that `handle` runs apply id `apply` of `owner`.
    pub(crate) fn name_apply(&self, owner: &str, apply: &str, handle: ExecHandle) {
        let mut applies = self.applies.lock().unwrap_or_else(|e| e.into_inner());
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        applies.retain(|_, h| entries.contains_key(h));
        applies.insert((owner.to_owned(), apply.to_owned()), handle.get());
    }

    /// The handle of apply id `apply` of `owner`, while its entry is kept.
    pub(crate) fn handle_of(&self, owner: &str, apply: &str) -> Option<ExecHandle> {
        let applies = self.applies.lock().unwrap_or_else(|e| e.into_inner());
        let handle = *applies.get(&(owner.to_owned(), apply.to_owned()))?;
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.contains_key(&handle).then_some(ExecHandle(handle))
    }

    pub(crate) fn poll(&self, handle: ExecHandle, owner: &str) -> Result<ExecStatus, ProviderError> {
        let lost = |reason: String| ProviderError::ExecResultLost {
            handle: handle.get(),
            reason,
        };
        let entry = {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.get(&handle.get()).cloned()
        };
        let Some(entry) = entry else {
            let reason = if handle.get() >> 32 == self.epoch {
                "no such apply in this operator process (expired or never dispatched)"
            } else {
                "it was issued by another operator process (the operator restarted)"
            };
            return Err(lost(reason.to_string()));
        };
        if entry.owner != owner {
            return Err(lost(format!("it belongs to {}, not {owner}", entry.owner)));
        }
        let done = entry.done.borrow().clone();
        match done {
            None => Ok(ExecStatus::Running),
            Some(Ok(outcome)) => Ok(ExecStatus::Exited(outcome)),
            Some(Err(failure @ Failure::Lost { .. })) => Err(failure.to_error(handle)),
            Some(Err(failure)) => Err(ProviderError::ApplyEnded {
                source: Box::new(failure.to_error(handle)),
            }),
        }
    }
}

impl Default for ExecRegistry {
    fn default() -> Self {
        ExecRegistry::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_positive_distinct_and_per_process() {
        let a = ExecRegistry::new();
        let b = ExecRegistry::new();
        let (h1, _c1) = a.register("x");
        let (h2, _c2) = a.register("x");
        assert!(h1.get() > 0 && h2.get() > 0);
        assert_ne!(h1, h2);
        // A restarted process (b) does not know a's handles, even after
        // issuing its own first handle.
        let (_hb, _cb) = b.register("x");
        assert!(b.poll(h1, "x").unwrap_err().is_exec_result_lost());
    }

    #[test]
    fn poll_reports_running_then_the_outcome_repeatedly() {
        let r = ExecRegistry::new();
        let (h, c) = r.register("addr/agent");
        assert_eq!(r.poll(h, "addr/agent").unwrap(), ExecStatus::Running);
        let outcome = ExecOutcome {
            exit_code: 0,
            stdout: "ok".into(),
            ..Default::default()
        };
        c.finish(Ok(outcome.clone()));
        for _ in 0..2 {
            assert_eq!(r.poll(h, "addr/agent").unwrap(), ExecStatus::Exited(outcome.clone()));
        }
        let err = r.poll(h, "addr/other").unwrap_err();
        assert!(err.is_exec_result_lost(), "{err}");
    }

    #[test]
    fn failures_are_reported_on_every_poll() {
        let r = ExecRegistry::new();
        let (h, c) = r.register("o");
        c.finish(Err(Failure::Timeout {
            after: Duration::from_secs(3),
        }));
        assert!(r.poll(h, "o").unwrap_err().is_timeout());
        assert!(r.poll(h, "o").unwrap_err().is_timeout());
    }

    #[test]
    fn a_lost_apply_is_reported_as_lost_not_as_ended() {
        let r = ExecRegistry::new();
        let (h, c) = r.register("o");
        c.finish(Err(Failure::Lost {
            reason: "the agent disconnected".into(),
        }));
        for _ in 0..2 {
            let err = r.poll(h, "o").unwrap_err();
            assert!(err.is_exec_result_lost(), "{err}");
            assert!(err.apply_ended().is_none(), "{err}");
            assert!(err.to_string().contains("the agent disconnected"), "{err}");
        }
    }
}
