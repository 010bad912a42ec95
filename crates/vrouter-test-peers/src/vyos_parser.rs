//! VyOS's own config.boot parser for the test guests' `load`: the
//! `vyosconfig` oracle (`xtask/oracles/vyosconfig` over
//! `shared/peers/vyos1x-config`), which `cargo xtask oracles` builds into the
//! test cache under a key of its sources (the FNV-1a 64 of
//! `xtask/src/oracles.rs`). Its `load FILE` mode exits 0 when VyOS reads the
//! file and prints VyOS's message and exits 1 when VyOS refuses it.

use std::path::{Path, PathBuf};

/// The oracle's sources, in the order the key covers them.
const SOURCES: [&str; 2] = ["dune", "vyosconfig.ml"];

/// The host's oracle binary. Panics, saying how to build it, when it is
/// missing: a guest whose `load` read nothing as VyOS does would let a
/// config VyOS refuses pass the tests.
pub fn binary() -> PathBuf {
    let path = expected_path();
    assert!(
        path.is_file(),
        "VyOS's parser {} is missing; the test guests' `load` runs it. Build it with \
         `cargo xtask oracles` (installs Debian's OCaml packages and builds \
         ../shared/peers/vyos1x-config with dune; `cargo xtask test` does it too)",
        path.display()
    );
    path
}

/// Where `cargo xtask oracles` puts the binary built from today's sources.
fn expected_path() -> PathBuf {
    let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/oracles/vyosconfig");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in SOURCES {
        let path = source_dir.join(file);
        let bytes =
            std::fs::read(&path).unwrap_or_else(|e| panic!("the vyosconfig oracle's source {}: {e}", path.display()));
        for byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let cache = vrouter_test_apiserver::cache_dir().unwrap_or_else(|e| panic!("{e}"));
    cache.join("bin").join(format!("vyosconfig-{hash:016x}"))
}
