//! The Go vrouter-operator this project reimplements, built from the snapshot
//! vendored in `shared/peers/vrouter-operator-go`: the migration tests run it
//! as the operator a user moves from.
//!
//! Its `go.mod` requires the vrouter-daemon's Go package at a version the
//! module proxy may not hold, so the build points it at the daemon snapshot
//! vendored beside it (`go mod edit -replace`), in a copy of both under the
//! cache (`src/vrouter-operator-go-<hash>/{operator,vrouter-daemon}`). The
//! binary is keyed by a SHA-256 of the two source trees: a new snapshot of
//! either is built once, an unchanged pair never again. Its other Go
//! dependencies come from the Go module proxy.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::{daemon, go, hex, peer_source, source_hash};

/// File name under `bin/`.
pub const BINARY: &str = "vrouter-operator-go";
/// Bumped whenever the build recipe below changes.
const RECIPE_REVISION: u32 = 1;
/// The daemon's module path, as the operator's `go.mod` requires it.
const DAEMON_MODULE: &str = "github.com/tjjh89017/vrouter-daemon";
/// The operator's `main` package.
const PACKAGE: &str = "./cmd/";

/// The vendored Go operator source for the workspace at `root`.
pub fn source_dir(root: &Path) -> anyhow::Result<PathBuf> {
    peer_source::find(
        root,
        "vrouter-operator-go",
        "the migration tests run the real Go operator built from it",
    )
}

/// One key for the pair of trees the binary is built from.
fn combined_hash(operator: &str, daemon: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("operator {operator}\ndaemon {daemon}\n"));
    hex(&hasher.finalize())
}

fn stamp(operator_hash: &str, daemon_hash: &str) -> String {
    format!(
        "recipe {RECIPE_REVISION}\nvrouter-operator-go source sha256 {operator_hash}\n\
         {DAEMON_MODULE} replaced by vrouter-daemon source sha256 {daemon_hash}\npackage {PACKAGE}\n"
    )
}

/// Builds the Go operator into `<cache>/bin/vrouter-operator-go` unless a
/// binary built from these very sources is there already; returns its path.
/// The caller holds the cache's build lock.
pub fn ensure(root: &Path, cache: &Path) -> anyhow::Result<PathBuf> {
    let (operator_source, daemon_source) = (source_dir(root)?, daemon::source_dir(root)?);
    let (operator_hash, daemon_hash) = (source_hash(&operator_source)?, source_hash(&daemon_source)?);
    let target = cache.join("bin").join(BINARY);
    let stamp_path = cache.join("bin").join(format!("{BINARY}.stamp"));
    let stamp = stamp(&operator_hash, &daemon_hash);
    if target.is_file() && fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(target);
    }
    println!(
        "testenv: building the Go vrouter-operator from {} (sha256 {}) with {} as {DAEMON_MODULE}",
        operator_source.display(),
        &operator_hash[..16],
        daemon_source.display()
    );
    let started = Instant::now();
    let copy = cache.join("src").join(format!(
        "{BINARY}-{}",
        &combined_hash(&operator_hash, &daemon_hash)[..16]
    ));
    let (operator, daemon) = (copy.join("operator"), copy.join("vrouter-daemon"));
    peer_source::copy_tree(&operator_source, &operator)?;
    peer_source::copy_tree(&daemon_source, &daemon)?;
    go(
        &operator,
        &["mod", "edit", &format!("-replace={DAEMON_MODULE}={}", daemon.display())],
    )?;
    build(&operator, &target)?;
    fs::write(&stamp_path, stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    println!(
        "testenv: built the Go vrouter-operator in {:.0?} -> {}",
        started.elapsed(),
        target.display()
    );
    Ok(target)
}

/// `go build` into a partial file, checked before it takes `target`'s place.
fn build(module: &Path, target: &Path) -> anyhow::Result<()> {
    let partial = target.with_file_name(format!("{BINARY}.partial"));
    let partial_arg = partial.to_string_lossy().into_owned();
    go(
        module,
        &["build", "-trimpath", "-ldflags", "-s -w", "-o", &partial_arg, PACKAGE],
    )?;
    // controller-runtime's scaffold: the flag the migration tests rely on.
    peer_source::check_usage(&partial, "-leader-elect")?;
    fs::rename(&partial, target).with_context(|| format!("moving {} into place", target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_names_both_sources() {
        let stamp = stamp("op", "dm");
        assert!(stamp.contains("vrouter-operator-go source sha256 op"), "{stamp}");
        assert!(stamp.contains("vrouter-daemon source sha256 dm"), "{stamp}");
    }

    #[test]
    fn either_source_changes_the_copys_key() {
        let key = combined_hash("a", "b");
        assert_ne!(key, combined_hash("a", "c"));
        assert_ne!(key, combined_hash("c", "b"));
        assert_eq!(key, combined_hash("a", "b"));
    }

    #[test]
    fn a_missing_source_names_the_go_operator_and_its_tests() {
        let dir = tempfile::tempdir().unwrap();
        let err = source_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("shared/peers/vrouter-operator-go"), "{err}");
        assert!(err.contains("migration tests"), "{err}");
    }
}
