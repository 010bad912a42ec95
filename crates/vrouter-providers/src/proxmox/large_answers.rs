//! How many large Proxmox answers the process holds at once.
//!
//! An answer may be [`super::http::MAX_RESPONSE_BYTES`] long, and reading
//! one costs several times that: the body, the output streams decoded from
//! it, their bytes, their text. Drift detection reads every router's
//! configs many at a time (`--status-concurrency`), so routers whose
//! guests answer at the caps would together take the operator past its
//! memory limit. An answer that grows past [`LARGE_ANSWER_BYTES`] waits
//! here for one of [`LARGE_AT_ONCE`] places before it is read further, and
//! keeps it until the provider has made what it returns; smaller answers
//! (every usual one: a config is tens of KiB) never wait.

use tokio::sync::{Semaphore, SemaphorePermit};

/// An answer longer than this is large (1 MiB).
pub(crate) const LARGE_ANSWER_BYTES: usize = 1024 * 1024;

/// Large answers held at once, process-wide. docs/benchmarks.md has the
/// peak memory this gives with every router answering at the caps.
pub(crate) const LARGE_AT_ONCE: usize = 2;

static GATE: Semaphore = Semaphore::const_new(LARGE_AT_ONCE);

/// A place for one large answer, held until dropped.
pub(crate) async fn admit() -> SemaphorePermit<'static> {
    GATE.acquire().await.expect("the gate is a static that is never closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_more_than_the_limit_are_admitted_at_once() {
        let held: Vec<_> = futures::future::join_all((0..LARGE_AT_ONCE).map(|_| admit())).await;
        let next = tokio::time::timeout(std::time::Duration::from_millis(50), admit()).await;
        assert!(next.is_err(), "a place past the limit was given");
        drop(held);
        let _again = admit().await;
    }
}
