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

use super::{go, source_files, source_hash};
use anyhow::{Context, bail};

/// Where the snapshot sits relative to the workspace root: CI clones the
/// repository beside `shared/`.
const SOURCE_BESIDE_ROOT: &str = "../shared/peers/vrouter-daemon";
/// The same folder, as found from any ancestor of the workspace (a git
/// worktree lives deeper than the main checkout).
const SOURCE_UNDER_ANCESTOR: &str = "shared/peers/vrouter-daemon";
/// Bumped whenever the build recipe below changes.
const RECIPE_REVISION: u32 = 1;
/// The two programs, as `cmd/<name>` packages of the daemon's module.
pub const PROGRAMS: [&str; 2] = ["vrouter-server", "vrouter-agent"];

/// The vendored daemon source for the workspace at `root`.
pub fn source_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let found = root
        .ancestors()
        .skip(1)
        .map(|dir| dir.join(SOURCE_UNDER_ANCESTOR))
        .find(|dir| dir.join("go.mod").is_file());
    found.ok_or_else(|| {
        anyhow::anyhow!(
            "the vrouter-daemon source is missing: expected {} (the read-only shared/ folder beside the \
             repository, holding peers/vrouter-daemon with its go.mod); the daemon provider's tests run \
             against the real vrouter-daemon built from it",
            root.join(SOURCE_BESIDE_ROOT).display()
        )
    })
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
    if copy.exists() {
        fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    for relative in source_files(&source)? {
        let to = copy.join(&relative);
        fs::create_dir_all(to.parent().unwrap_or(&copy)).with_context(|| format!("creating {}", to.display()))?;
        // The copy must be writable even though shared/ is not.
        let bytes = fs::read(source.join(&relative)).with_context(|| format!("reading {}", relative.display()))?;
        fs::write(&to, bytes).with_context(|| format!("writing {}", to.display()))?;
    }
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
    let output = std::process::Command::new(binary)
        .arg("-h")
        .output()
        .with_context(|| format!("running {} -h", binary.display()))?;
    let usage = String::from_utf8_lossy(&output.stderr);
    let expected = if binary.ends_with("vrouter-server") {
        "-control-listen"
    } else {
        "-disconnect-policy"
    };
    if !usage.contains(expected) {
        bail!("{} -h does not mention {expected}; printed {usage:?}", binary.display());
    }
    Ok(())
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
    fn a_missing_source_names_the_path_beside_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("clone");
        fs::create_dir(&root).unwrap();
        let err = source_dir(&root).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{}/../shared/peers/vrouter-daemon", root.display())),
            "{err}"
        );
        fs::create_dir_all(dir.path().join("shared/peers/vrouter-daemon")).unwrap();
        fs::write(dir.path().join("shared/peers/vrouter-daemon/go.mod"), "module x\n").unwrap();
        assert_eq!(
            source_dir(&root).unwrap(),
            dir.path().join("shared/peers/vrouter-daemon")
        );
    }

    #[test]
    fn the_stamp_names_the_source_hash() {
        assert!(stamp("abc").contains("sha256 abc"));
        assert!(stamp("abc").contains("./cmd/vrouter-server ./cmd/vrouter-agent"));
    }
}
