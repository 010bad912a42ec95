//! `cargo xtask test`: the one command that prepares a new machine and runs
//! the whole suite. CI calls it through `.ci/run`.

use std::path::Path;

pub fn run(root: &Path) -> anyhow::Result<()> {
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
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    println!("==> generated CRDs");
    crate::gen_crds::run(root, true)?;
    step(root, "tests", &["test", "--workspace", "--locked"])?;
    Ok(())
}

/// Runs `cargo <args>` in the workspace, failing with the step's name.
fn step(root: &Path, name: &str, args: &[&str]) -> anyhow::Result<()> {
    crate::cargo_step::run(root, name, args, &[])
}
