//! Running an object's own rules off the async workers, with a deadline.
//!
//! The rules are CPU-bound (a VRouterTemplate's check walks its control-flow
//! paths), and the operator's runtime has one worker by default: run there, a
//! review would hold up every reconcile, watch and lease renewal while it
//! computes. On tokio's blocking pool it holds only its own thread.

use std::time::Duration;

/// How long an object's rules may take before the review is denied: inside
/// the API server's webhook timeout (10 s in the chart) with room for the
/// reference lookups that follow, so the answer is the operator's and says why.
pub const RULES_DEADLINE: Duration = Duration::from_secs(8);

/// Runs `rules` on the blocking pool and waits for it at most `deadline`. A
/// rules run past the deadline keeps its thread until it ends (a thread cannot
/// be stopped), which the template check's own limits bound; its answer is
/// dropped.
pub async fn run<T: Send + 'static>(
    deadline: Duration,
    rules: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let task = tokio::task::spawn_blocking(rules);
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failed)) => Err(format!("checking it failed: {failed}")),
        Err(_) => Err(format!("checking it did not finish within {deadline:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_rules_run_on_another_thread_than_the_runtime() {
        let runtime_thread = std::thread::current().id();
        let (rules_thread, value) = run(RULES_DEADLINE, || (std::thread::current().id(), 42)).await.unwrap();
        assert_eq!(value, 42);
        assert_ne!(rules_thread, runtime_thread);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn rules_past_the_deadline_are_denied_and_the_runtime_goes_on() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // The rules cannot finish before the answer is in: they wait for a
        // message sent only afterwards.
        let outcome = run(Duration::from_millis(50), move || wait.recv().is_ok()).await;
        assert_eq!(outcome, Err("checking it did not finish within 50ms".to_owned()));
        release.send(()).ok();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn rules_that_panic_are_denied_without_ending_the_process() {
        let outcome = run(RULES_DEADLINE, || -> u8 { panic!("a bug in the rules") }).await;
        let message = outcome.unwrap_err();
        assert!(message.starts_with("checking it failed: "), "{message}");
        assert!(message.contains("panicked"), "{message}");
    }
}
