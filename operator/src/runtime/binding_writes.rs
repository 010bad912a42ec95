//! A binding's config writes go before the applies they start.
//!
//! A binding over many targets writes its configs in a burst, and every
//! config written wakes the config controller, whose applies (provider
//! calls, status writes, VRouterStatus creates) then compete with the rest
//! of the burst for the API server and the operator's cores. Until the
//! burst is written, nothing is applied from it anyway (each apply is of
//! one config), while the binding's status and `kubectl get vrc` lag
//! behind. So a config of that binding with a new generation to apply
//! waits, a bounded time, while the binding's writes are in flight;
//! applies already running are polled as usual, re-applies (a reboot,
//! drift) do not wait, and neither do configs of other bindings or none.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;

/// The longest a new config's apply waits for its binding's writes: a
/// binding that writes for longer (thousands of targets) lets applies
/// start after this, sharing the server with its writes.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Write batches in flight, by the uid of the binding writing them.
#[derive(Debug)]
pub struct BindingWrites {
    in_flight: watch::Sender<BTreeMap<String, usize>>,
}

impl Default for BindingWrites {
    fn default() -> Self {
        BindingWrites {
            in_flight: watch::Sender::new(BTreeMap::new()),
        }
    }
}

/// One batch of a binding's writes, in flight until dropped.
#[must_use = "the batch counts as in flight only while this lives"]
pub struct Batch<'a> {
    writes: &'a BindingWrites,
    binding: String,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.writes.in_flight.send_modify(|batches| {
            if let Some(n) = batches.get_mut(&self.binding) {
                *n -= 1;
                if *n == 0 {
                    batches.remove(&self.binding);
                }
            }
        });
    }
}

impl BindingWrites {
    /// Marks a batch of the binding with uid `binding` in flight until the
    /// returned guard drops.
    pub fn batch(&self, binding: &str) -> Batch<'_> {
        self.in_flight
            .send_modify(|batches| *batches.entry(binding.to_owned()).or_default() += 1);
        Batch {
            writes: self,
            binding: binding.to_owned(),
        }
    }

    /// Returns once the binding with uid `binding` has no batch in flight,
    /// or after `at_most`.
    pub async fn written(&self, binding: &str, at_most: Duration) {
        let mut in_flight = self.in_flight.subscribe();
        let _ = tokio::time::timeout(at_most, in_flight.wait_for(|batches| !batches.contains_key(binding))).await;
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
        writes.written("b1", MAX_WAIT).await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        // Until the last of the binding's two batches ends; another
        // binding's batch is not waited for.
        let (first, second) = (writes.batch("b1"), writes.batch("b1"));
        let _other = writes.batch("b2");
        let waiter = tokio::spawn({
            let writes = writes.clone();
            async move {
                let started = tokio::time::Instant::now();
                writes.written("b1", MAX_WAIT).await;
                started.elapsed()
            }
        });
        let started = tokio::time::Instant::now();
        writes.written("b3", MAX_WAIT).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "a binding with no batch");
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "one batch is still in flight");
        drop(second);
        assert_eq!(waiter.await.unwrap(), Duration::from_secs(2));

        // A batch that never ends holds a waiter for the bound only.
        let started = tokio::time::Instant::now();
        writes.written("b2", MAX_WAIT).await;
        assert_eq!(started.elapsed(), MAX_WAIT);
    }
}
