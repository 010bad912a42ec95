//! `cargo xtask image`: the operator's container image as an OCI
//! image-layout archive, built without a registry or a container daemon
//! from the release binary and the files it needs at run time, then
//! checked as an importer would read it and compared with the Dockerfile.

mod build;
mod check;
mod dockerfile;
mod layer;
mod ldd;
mod matches;
mod oci;
mod spec;

#[cfg(test)]
mod dockerfile_tests;
#[cfg(test)]
mod image_tests;
#[cfg(test)]
mod layer_tests;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Where to write the archive (default: <target dir>/image/vrouter-operator-<version>.oci.tar).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The image's name in the archive (default: the chart's repository and appVersion).
    #[arg(long)]
    name: Option<String>,
    /// Use this binary instead of running `cargo build --release -p vrouter-operator`.
    #[arg(long)]
    binary: Option<PathBuf>,
}

/// The archive of the image of `binary` at `out`, with the default name:
/// what `cargo xtask test` builds from the debug binary of the test build
/// for the test node's `helm install` (no release build).
pub fn build_binary(root: &Path, binary: PathBuf, out: PathBuf) -> anyhow::Result<()> {
    let options = Options {
        out: Some(out),
        name: None,
        binary: Some(binary),
    };
    run(root, &options)
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else `<root>/target`.
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

pub fn run(root: &Path, options: &Options) -> anyhow::Result<()> {
    let target = target_dir(root);
    let binary = match &options.binary {
        Some(binary) => binary.clone(),
        None => {
            let args = ["build", "--release", "--locked", "-p", "vrouter-operator"];
            crate::cargo_step::run(root, "release build", &args, &[])?;
            target.join("release/vrouter-operator")
        }
    };
    ldd::check(&binary, &spec::libraries())?;
    let name = options.name.clone().unwrap_or_else(spec::default_name);
    let started = Instant::now();
    let inputs = build::Inputs {
        binary,
        repo: root.to_path_buf(),
        system_root: PathBuf::from("/"),
    };
    let built = build::build(&name, &inputs)?;
    let out = options.out.clone().unwrap_or_else(|| {
        target
            .join("image")
            .join(format!("vrouter-operator-{}.oci.tar", env!("CARGO_PKG_VERSION")))
    });
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&out, &built.archive).with_context(|| format!("writing {}", out.display()))?;
    let checked = verify(root, &std::fs::read(&out)?)?;
    println!(
        "image {}\n  manifest {}\n  layer {} bytes ({} gzip), archive {} bytes, built in {:.1}s\n  \
         a valid OCI layout, and the same image as the Dockerfile\n{}",
        checked.name,
        checked.manifest_digest,
        built.layer_tar_size,
        built.layer_gzip_size,
        built.archive.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// Reads the written archive back and fails when it is not a valid layout
/// or says something else than the Dockerfile.
fn verify(root: &Path, archive: &[u8]) -> anyhow::Result<check::Checked> {
    let checked = check::check(archive)?;
    let text = std::fs::read_to_string(root.join("Dockerfile")).context("reading the Dockerfile")?;
    let stage = dockerfile::final_stage(&text)?;
    let differences = matches::differences(&stage, &checked, root);
    if !differences.is_empty() {
        bail!("the image and the Dockerfile differ:\n  {}", differences.join("\n  "));
    }
    Ok(checked)
}
