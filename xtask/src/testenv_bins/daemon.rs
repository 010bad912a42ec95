//! The real vrouter-daemon (`vrouter-server` and `vrouter-agent`), built from
//! the snapshot vendored in `shared/peers/vrouter-daemon` beside the workspace.
//!
//! `shared/` is read-only in CI, and `go build` may touch `go.mod`/`go.sum`, so
//! the source is copied into the cache first (`src/vrouter-daemon-<hash>`).
//! The binaries are keyed by a SHA-256 of the source tree: a new snapshot is
//! built once, an unchanged one never again. Go dependencies come from the Go
//! module proxy, like the other testenv binaries.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{go, peer_source, source_hash};
use anyhow::Context;

/// Bumped whenever the build recipe below changes.
const RECIPE_REVISION: u32 = 1;
/// The two programs, as `cmd/<name>` packages of the daemon's module.
pub const PROGRAMS: [&str; 2] = ["vrouter-server", "vrouter-agent"];

/// The vendored daemon source for the workspace at `root`.
pub fn source_dir(root: &Path) -> anyhow::Result<PathBuf> {
    peer_source::find(
        root,
        "vrouter-daemon",
        "the daemon provider's tests run against the real vrouter-daemon built from it",
    )
}

fn stamp(hash: &str) -> String {
    format!(
        "recipe {RECIPE_REVISION}\nvrouter-daemon source sha256 {hash}\npackages {}\n",
        PROGRAMS.map(|p| format!("./cmd/{p}")).join(" ")
    )
}

/// Builds the daemon's programs into `<cache>/bin` unless binaries built from
/// this very source are there already. Returns their paths in [`PROGRAMS`] order.
/// The caller holds the cache's build lock.
pub fn ensure(root: &Path, cache: &Path) -> anyhow::Result<[PathBuf; 2]> {
    let source = source_dir(root)?;
    let hash = source_hash(&source)?;
    let bin = cache.join("bin");
    let targets = PROGRAMS.map(|p| bin.join(p));
    let stamp_path = bin.join("vrouter-daemon.stamp");
    let stamp = stamp(&hash);
    if targets.iter().all(|t| t.is_file()) && fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(targets);
    }
    println!(
        "testenv: building vrouter-server and vrouter-agent from {} (sha256 {})",
        source.display(),
        &hash[..16]
    );
    let started = Instant::now();
    let copy = cache.join("src").join(format!("vrouter-daemon-{}", &hash[..16]));
    peer_source::copy_tree(&source, &copy)?;
    let out = cache.join("bin").join("vrouter-daemon.partial");
    if out.exists() {
        fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let out_arg = format!("{}/", out.display());
    let mut args = vec!["build", "-trimpath", "-ldflags", "-s -w", "-o", &out_arg];
    let packages = PROGRAMS.map(|p| format!("./cmd/{p}"));
    args.extend(packages.iter().map(String::as_str));
    go(&copy, &args)?;
    for (program, target) in PROGRAMS.iter().zip(&targets) {
        let built = out.join(program);
        check_usage(&built)?;
        fs::rename(&built, target).with_context(|| format!("moving {} into place", target.display()))?;
    }
    fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    fs::write(&stamp_path, stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    println!(
        "testenv: built vrouter-server and vrouter-agent in {:.0?} -> {}",
        started.elapsed(),
        bin.display()
    );
    Ok(targets)
}

/// Neither program has a version flag; `-h` lists the flags the tests use.
fn check_usage(binary: &Path) -> anyhow::Result<()> {
    let expected = if binary.ends_with("vrouter-server") {
        "-control-listen"
    } else {
        "-disconnect-policy"
    };
    peer_source::check_usage(binary, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_paths_and_contents_but_not_git() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("cmd/a")).unwrap();
        fs::write(dir.path().join("go.mod"), "module x\n").unwrap();
        fs::write(dir.path().join("cmd/a/main.go"), "package main\n").unwrap();
        let first = source_hash(dir.path()).unwrap();
        fs::create_dir_all(dir.path().join(".git")).unwrap();
        fs::write(dir.path().join(".git/HEAD"), "ref: x\n").unwrap();
        assert_eq!(source_hash(dir.path()).unwrap(), first, ".git plays no part");
        fs::write(dir.path().join("cmd/a/main.go"), "package main // changed\n").unwrap();
        let changed = source_hash(dir.path()).unwrap();
        assert_ne!(changed, first);
        fs::rename(dir.path().join("cmd/a"), dir.path().join("cmd/b")).unwrap();
        assert_ne!(
            source_hash(dir.path()).unwrap(),
            changed,
            "a moved file changes the hash"
        );
    }

    #[test]
    fn a_missing_source_names_the_daemon_and_its_tests() {
        let dir = tempfile::tempdir().unwrap();
        let err = source_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("shared/peers/vrouter-daemon"), "{err}");
        assert!(err.contains("daemon provider's tests"), "{err}");
    }

    #[test]
    fn the_stamp_names_the_source_hash() {
        assert!(stamp("abc").contains("sha256 abc"));
        assert!(stamp("abc").contains("./cmd/vrouter-server ./cmd/vrouter-agent"));
    }
}
