//! The release binary and image have no crash points: the operator's
//! `crash-points` feature is not a default one, nothing a release build pulls
//! in turns it on, and the Dockerfile's build names no feature.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The features of vrouter-operator that `cargo build --release -p
/// vrouter-operator` resolves, as `cargo tree` prints them.
fn release_features() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "vrouter-operator",
            "-e",
            "features,normal,build",
        ])
        .args(["-i", "vrouter-operator", "--prefix", "none", "-f", "{p} [{f}]"])
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_release_build_of_the_operator_has_no_crash_points() {
    let tree = release_features();
    assert!(
        tree.contains("vrouter-operator"),
        "cargo tree did not list the operator: {tree}"
    );
    assert!(
        !tree.contains("crash-points"),
        "a release build enables crash points:\n{tree}"
    );

    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let build = dockerfile
        .lines()
        .find(|l| l.contains("cargo build --release"))
        .expect("the Dockerfile builds the operator with cargo build --release");
    assert!(
        !build.contains("--features") && !build.contains("--all-features"),
        "{build}"
    );
}

#[test]
fn the_test_build_has_crash_points() {
    // The crash tests need the feature; `cargo xtask test` builds with it.
    let test_rs = std::fs::read_to_string(root().join("xtask/src/test.rs")).unwrap();
    assert!(
        test_rs.contains("vrouter-operator/crash-points"),
        "xtask test builds without crash points"
    );
}
