//! The hash by which a router's running and startup configs are compared:
//! drift detection records it, a confirmed apply checks the router came back
//! to it. One function for both, so the two can never disagree.

use sha2::{Digest, Sha256};

/// `sha256:<hex>` of a config's bytes.
pub fn config_hash(content: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(content)))
}
