//! What a large Proxmox answer reserves from the process's budget of large
//! answers ([`crate::memory_budget`]).
//!
//! An answer may be [`super::http::MAX_RESPONSE_BYTES`] long. An answer
//! that grows past [`LARGE_ANSWER_BYTES`] reserves [`cost_of`] its length
//! (the cap's, while its length is not yet known) before it is read
//! further, and the lease travels with the answer until the provider has
//! made what it returns from it; smaller answers never wait.

use crate::memory_budget::{Deadline, LARGE_ANSWERS, LARGE_ANSWERS_MIB, Lease, MIB};

/// An answer longer than this is large (1 MiB).
pub(crate) const LARGE_ANSWER_BYTES: usize = MIB;

/// The most the buffers made from an answer take, as a multiple of its
/// length, at any moment while it is read. An `agent/exec-status` answer:
/// the body and the output strings decoded from it (each no longer than
/// its JSON), then those strings and their bytes, then the bytes and their
/// text (text longer than the bytes is refused before it is made): at most
/// twice. An `agent/file-read` answer: the body, the content decoded from
/// it when it holds escapes (no longer than the body) and the content's
/// bytes (one per character): at most three times.
const COST_FACTOR: usize = 3;

/// What reading an answer of `len` bytes may cost at once.
pub(crate) const fn cost_of(len: usize) -> usize {
    len.saturating_mul(COST_FACTOR)
}

// The largest answer fits the budget: its reservation is never clamped.
const _: () = assert!(cost_of(super::http::MAX_RESPONSE_BYTES) <= LARGE_ANSWERS_MIB as usize * MIB);

/// Leases what an answer of `len` bytes may cost, waiting for it off
/// `deadline`'s clock.
pub(crate) async fn admit(deadline: &Deadline, len: usize) -> Lease<'static> {
    deadline.reserve(&LARGE_ANSWERS, cost_of(len)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_of_an_answer() {
        assert_eq!(cost_of(0), 0);
        assert_eq!(cost_of(LARGE_ANSWER_BYTES), 3 * MIB);
        assert_eq!(cost_of(usize::MAX), usize::MAX);
        assert_eq!(
            crate::memory_budget::weight_mib(cost_of(super::super::http::MAX_RESPONSE_BYTES), LARGE_ANSWERS_MIB),
            102
        );
    }
}
