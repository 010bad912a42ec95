//! CPU-bound work on what a router answered, run off the async workers.
//!
//! A router's configs are the guest's to choose, up to the read cap, and
//! hashing one that large takes seconds of CPU in a debug build. The
//! operator's runtime has one async worker by default: run there, the work
//! holds up every watch, reconcile and Lease renewal, and a missed renewal
//! ends the process. On tokio's blocking pool it holds only its own thread.

/// Runs `work` on the blocking pool; a panic in `work` is raised again
/// inside the reconcile that asked for it (whose panics are caught and
/// counted). One home for the rule, shared with the providers' decoding.
pub use vrouter_providers::off_runtime::run;

/// [`crate::runtime::config_hash::config_hash`] of `content`, off the async workers.
pub async fn config_hash(content: Vec<u8>) -> String {
    run(move || crate::runtime::config_hash::config_hash(&content)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_hash_is_the_one_computed_in_place() {
        let hash = config_hash(b"system {\n}\n".to_vec()).await;
        assert_eq!(hash, crate::runtime::config_hash::config_hash(b"system {\n}\n"));
    }
}
