//! A config read from a router as a drift sync keeps it: its hash and
//! length always, its bytes only while they could still be stored in the
//! Secret ([`MAX_STORED_BYTES`]). A larger one can never be stored, so it
//! is reduced to its hash as soon as it is read: a sync never holds a large
//! config while it reads the next one, and many syncs at once hold hashes,
//! not configs of up to the read cap each.

use super::decide;
use crate::runtime::off_runtime;

/// The most a config stored in the Secret may take: a Secret lives in one
/// etcd object of at most 1.5 MiB; stay well below so the object with its
/// metadata always fits.
pub const MAX_STORED_BYTES: usize = 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadConfig {
    /// `sha256:<hex>` of the bytes read.
    pub hash: String,
    /// How many bytes were read.
    pub len: usize,
    /// The bytes read, or none when they are longer than a Secret holds.
    pub kept: Vec<u8>,
}

impl ReadConfig {
    /// `bytes` hashed, and dropped unless they could be stored.
    pub fn of(bytes: Vec<u8>) -> ReadConfig {
        let hash = decide::config_hash(&bytes);
        let len = bytes.len();
        let kept = if len <= MAX_STORED_BYTES { bytes } else { Vec::new() };
        ReadConfig { hash, len, kept }
    }

    /// [`ReadConfig::of`], hashed off the async workers: a config may be as
    /// long as the read cap.
    pub async fn off_runtime(bytes: Vec<u8>) -> ReadConfig {
        off_runtime::run(move || ReadConfig::of(bytes)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_secret_can_hold_is_kept() {
        for len in [0, 1, MAX_STORED_BYTES, MAX_STORED_BYTES + 1, 3 * MAX_STORED_BYTES] {
            let bytes = vec![b'a'; len];
            let read = ReadConfig::of(bytes.clone());
            assert_eq!(read.hash, decide::config_hash(&bytes), "{len}");
            assert_eq!(read.len, len);
            assert_eq!(read.kept.len(), if len <= MAX_STORED_BYTES { len } else { 0 }, "{len}");
        }
    }
}
