//! CPU-bound work on what a router answered, run off the async workers.
//!
//! A router's configs are the guest's to choose, up to the read cap, and
//! hashing one that large takes seconds of CPU in a debug build. The
//! operator's runtime has one async worker by default: run there, the work
//! holds up every watch, reconcile and Lease renewal, and a missed renewal
//! ends the process. On tokio's blocking pool it holds only its own thread.

/// Runs `work` on the blocking pool and returns its result. A panic in
/// `work` is raised again here, inside the reconcile that asked for it
/// (whose panics are caught and counted).
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        // Only a runtime shutting down cancels a blocking task before it runs.
        Err(failed) => panic!("work on the blocking pool was cancelled: {failed}"),
    }
}

/// [`crate::runtime::config_hash::config_hash`] of `content`, off the async workers.
pub async fn config_hash(content: Vec<u8>) -> String {
    run(move || crate::runtime::config_hash::config_hash(&content)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_work_runs_on_another_thread_than_the_runtime() {
        let runtime_thread = std::thread::current().id();
        let work_thread = run(|| std::thread::current().id()).await;
        assert_ne!(work_thread, runtime_thread);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_hash_is_the_one_computed_in_place() {
        let hash = config_hash(b"system {\n}\n".to_vec()).await;
        assert_eq!(hash, crate::runtime::config_hash::config_hash(b"system {\n}\n"));
    }
}
