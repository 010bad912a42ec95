//! A binding's config writes go before the applies they start.
//!
//! A binding over many targets writes its configs in a burst, and every
//! config written wakes the config controller, whose applies (provider
//! calls, status writes, VRouterStatus creates) then compete with the rest
//! of the burst for the API server and the operator's cores. Until the
//! burst is written, nothing is applied from it anyway (each apply is of
//! one config), while the binding's status and `kubectl get vrc` lag
//! behind. So a config with a new generation to apply waits, a bounded
//! time, while a binding's writes are in flight; applies already running
//! are polled as usual, and re-applies (a reboot, drift) do not wait.

use std::time::Duration;

use tokio::sync::watch;

/// The longest a new config's apply waits for binding writes: a binding
/// that writes for longer (thousands of targets) lets applies start after
/// this, sharing the server with its writes.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Binding write batches in flight, across bindings.
#[derive(Debug)]
pub struct BindingWrites {
    in_flight: watch::Sender<usize>,
}

impl Default for BindingWrites {
    fn default() -> Self {
        BindingWrites {
            in_flight: watch::Sender::new(0),
        }
    }
}

/// One batch of a binding's writes, in flight until dropped.
#[must_use = "the batch counts as in flight only while this lives"]
pub struct Batch<'a> {
    writes: &'a BindingWrites,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.writes.in_flight.send_modify(|n| *n -= 1);
    }
}

impl BindingWrites {
    /// Marks a batch of writes in flight until the returned guard drops.
    pub fn batch(&self) -> Batch<'_> {
        self.in_flight.send_modify(|n| *n += 1);
        Batch { writes: self }
    }

    /// Returns once no batch is in flight, or after `at_most`.
    pub async fn written(&self, at_most: Duration) {
        let mut in_flight = self.in_flight.subscribe();
        let _ = tokio::time::timeout(at_most, in_flight.wait_for(|n| *n == 0)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_while_a_batch_is_in_flight_and_no_longer_than_its_bound() {
        let writes = Arc::new(BindingWrites::default());
        // Nothing in flight: at once.
        let started = tokio::time::Instant::now();
        writes.written(MAX_WAIT).await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        // Until the last of two batches ends.
        let (first, second) = (writes.batch(), writes.batch());
        let waiter = tokio::spawn({
            let writes = writes.clone();
            async move {
                let started = tokio::time::Instant::now();
                writes.written(MAX_WAIT).await;
                started.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "one batch is still in flight");
        drop(second);
        assert_eq!(waiter.await.unwrap(), Duration::from_secs(2));

        // A batch that never ends holds a waiter for the bound only.
        let _stuck = writes.batch();
        let started = tokio::time::Instant::now();
        writes.written(MAX_WAIT).await;
        assert_eq!(started.elapsed(), MAX_WAIT);
    }
}
