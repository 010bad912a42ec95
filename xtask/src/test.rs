//! `cargo xtask test`: the one command that prepares a new machine and runs
//! the whole suite. CI calls it through `.ci/run`. With `--quick` it runs
//! only the test targets that need no heavy peer (docs/development.md, "The
//! quick loop").

use std::path::{Path, PathBuf};

use vrouter_test_vm::quick_loop::QUICK_LOOP_ENV;

/// The variable naming the operator's image archive to the test node's
/// `helm install` test (`crates/vrouter-test-node/tests/helm.rs`).
pub const OPERATOR_IMAGE_ENV: &str = "VROUTER_OPERATOR_IMAGE";

/// Every test target: `heavy-tests` turns on the targets that need a real
/// guest, the test node or the Go operator (each crate declares them with
/// `required-features`), and the operator's crash-point tests need its
/// `crash-points` feature, which the release build (Dockerfile) never has.
const TESTS: &[&str] = &[
    "test",
    "--workspace",
    "--locked",
    "--features",
    "heavy-tests",
    "--features",
    "vrouter-operator/crash-points",
];

/// The quick loop: without `heavy-tests`, cargo leaves the heavy targets out;
/// the harnesses refuse any heavy peer a remaining test asks for.
const QUICK_TESTS: &[&str] = &["test", "--workspace", "--locked"];

pub fn run(root: &Path, quick: bool) -> anyhow::Result<()> {
    if quick {
        return run_quick(root);
    }
    crate::prepare::ensure_debian_packages(crate::prepare::TEST_PACKAGES)?;
    crate::guest_image::run()?;
    println!("==> test control plane");
    crate::testenv_bins::run(root)?;
    println!("==> test oracles");
    crate::oracles::run(root)?;
    step(root, "format", &["fmt", "--all", "--", "--check"])?;
    step(
        root,
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            "heavy-tests",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    println!("==> generated CRDs");
    crate::gen_crds::run(root, true)?;
    println!("==> chart README");
    crate::chart_readme::run(root, true)?;
    let image = operator_image(root)?;
    let env = [(OPERATOR_IMAGE_ENV, image.display().to_string())];
    // Every failing test binary is reported, not only the first.
    crate::cargo_step::run(root, "tests", &[TESTS, &["--no-fail-fast"]].concat(), &env)?;
    Ok(())
}

/// Prepares only what the quick targets use (no guest image, no QEMU, no
/// test node packages, no Go operator) and runs them, with no format,
/// clippy or generated-file checks.
fn run_quick(root: &Path) -> anyhow::Result<()> {
    crate::prepare::ensure_debian_packages(crate::prepare::QUICK_TEST_PACKAGES)?;
    println!("==> test control plane (no Go operator)");
    crate::testenv_bins::ensure_quick(root)?;
    println!("==> test oracles");
    crate::oracles::run(root)?;
    let env = [(QUICK_LOOP_ENV, "1".to_owned())];
    crate::quick_run::run(root, QUICK_TESTS, &env)
}

/// Compiles the tests (which builds the operator's debug binary, with the
/// same dependencies, so the test step compiles nothing again) and builds
/// the operator's image from that binary, with no release build.
fn operator_image(root: &Path) -> anyhow::Result<PathBuf> {
    step(root, "test build", &[TESTS, &["--no-run"]].concat())?;
    let target = crate::image::target_dir(root);
    let out = target.join("image").join("vrouter-operator-test.oci.tar");
    println!("==> operator image for the test node");
    crate::image::build_binary(root, target.join("debug").join("vrouter-operator"), out.clone())?;
    Ok(out)
}

/// Runs `cargo <args>` in the workspace, failing with the step's name.
fn step(root: &Path, name: &str, args: &[&str]) -> anyhow::Result<()> {
    crate::cargo_step::run(root, name, args, &[])
}
