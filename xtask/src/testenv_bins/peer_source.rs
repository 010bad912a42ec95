//! The Go programs vendored read-only in `shared/peers/<folder>` beside the
//! workspace ([`daemon`](super::daemon), [`go_operator`](super::go_operator)):
//! where a snapshot is, and a writable copy of it to build in.
//!
//! `shared/` is read-only in CI, and `go build` may touch `go.mod`/`go.sum`
//! (and `go mod edit` does), so each build works in a copy under the cache.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::source_files;

/// The snapshot `shared/peers/<folder>` for the workspace at `root`, found
/// from any ancestor of it (CI clones the repository beside `shared/`; a git
/// worktree lives deeper than the main checkout). `what` says in the error
/// which tests need it.
pub fn find(root: &Path, folder: &str, what: &str) -> anyhow::Result<PathBuf> {
    let under_ancestor = format!("shared/peers/{folder}");
    let found = root
        .ancestors()
        .skip(1)
        .map(|dir| dir.join(&under_ancestor))
        .find(|dir| dir.join("go.mod").is_file());
    found.ok_or_else(|| {
        anyhow::anyhow!(
            "the {folder} source is missing: expected {} (the read-only shared/ folder beside the \
             repository, holding peers/{folder} with its go.mod); {what}",
            root.join("..").join(&under_ancestor).display()
        )
    })
}

/// Replaces `copy` with a writable copy of the tree at `source` (without
/// `.git`).
pub fn copy_tree(source: &Path, copy: &Path) -> anyhow::Result<()> {
    if copy.exists() {
        fs::remove_dir_all(copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    for relative in source_files(source)? {
        let to = copy.join(&relative);
        fs::create_dir_all(to.parent().unwrap_or(copy)).with_context(|| format!("creating {}", to.display()))?;
        // Written, not copied: the copy must be writable even though shared/ is not.
        let bytes = fs::read(source.join(&relative)).with_context(|| format!("reading {}", relative.display()))?;
        fs::write(&to, bytes).with_context(|| format!("writing {}", to.display()))?;
    }
    Ok(())
}

/// Whether `binary -h` (a Go `flag` usage) names `flag`; `Err` with what it
/// printed when not, so a build of the wrong program never lands in `bin/`.
pub fn check_usage(binary: &Path, flag: &str) -> anyhow::Result<()> {
    let output = std::process::Command::new(binary)
        .arg("-h")
        .output()
        .with_context(|| format!("running {} -h", binary.display()))?;
    let usage = String::from_utf8_lossy(&output.stderr);
    if !usage.contains(flag) {
        anyhow::bail!("{} -h does not mention {flag}; printed {usage:?}", binary.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_snapshot_names_the_path_beside_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("clone");
        fs::create_dir(&root).unwrap();
        let err = find(&root, "thing", "its tests need it").unwrap_err().to_string();
        assert!(
            err.contains(&format!("{}/../shared/peers/thing", root.display())),
            "{err}"
        );
        assert!(err.contains("its tests need it"), "{err}");
        fs::create_dir_all(dir.path().join("shared/peers/thing")).unwrap();
        fs::write(dir.path().join("shared/peers/thing/go.mod"), "module x\n").unwrap();
        assert_eq!(find(&root, "thing", "").unwrap(), dir.path().join("shared/peers/thing"));
    }

    #[test]
    fn the_copy_replaces_what_was_there_and_leaves_git_out() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("src");
        fs::create_dir_all(source.join(".git")).unwrap();
        fs::create_dir_all(source.join("cmd")).unwrap();
        fs::write(source.join("go.mod"), "module x\n").unwrap();
        fs::write(source.join("cmd/main.go"), "package main\n").unwrap();
        fs::write(source.join(".git/HEAD"), "ref\n").unwrap();
        let copy = dir.path().join("copy");
        fs::create_dir_all(&copy).unwrap();
        fs::write(copy.join("stale.go"), "package stale\n").unwrap();
        copy_tree(&source, &copy).unwrap();
        assert_eq!(fs::read_to_string(copy.join("cmd/main.go")).unwrap(), "package main\n");
        assert!(!copy.join("stale.go").exists());
        assert!(!copy.join(".git").exists());
    }
}
