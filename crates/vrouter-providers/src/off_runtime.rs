//! CPU-bound work on a guest's answer, run off the async workers.
//!
//! A guest chooses its answers, up to the caps: decoding a Proxmox answer at
//! the response cap (its JSON, the bytes behind its text, their UTF-8) is
//! seconds of CPU in a debug build. The operator's runtime has one async
//! worker by default; run there, that work holds up every watch, reconcile
//! and Lease renewal, and a missed renewal ends the process. On tokio's
//! blocking pool it holds only its own thread.

/// Runs `work` on the blocking pool and returns its result. A panic in
/// `work` is raised again here, where the caller's panic handling applies.
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        // Only a runtime shutting down cancels a blocking task before it runs.
        Err(failed) => panic!("work on the blocking pool was cancelled: {failed}"),
    }
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
    async fn a_panic_in_the_work_reaches_the_caller() {
        let caught = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run(|| -> u8 {
            panic!("a bug in the decoding")
        })))
        .await;
        assert!(caught.is_err());
    }
}
