//! `cargo xtask oracles`: builds test oracles under `xtask/oracles/` (our
//! own small programs over other people's parsers) into the cache directory
//! `testenv_bins` uses, named by a key of their sources, so a source change
//! builds a new binary and an unchanged one builds nothing.
//!
//! - `shparse`: mvdan.cc/sh/v3/syntax (Go, from the module proxy), the second
//!   bash grammar the render check (`vrouter-render`, `src/verify/`) is proven
//!   against.
//! - `vyosconfig`: VyOS's own config.boot parser (OCaml, from
//!   `shared/peers/vyos1x-config`), what the project's config reader is
//!   proven against ([`vyosconfig`]).
//!
//! The tests find a binary with the same key (`crates/vrouter-render/tests/
//! support/oracle.rs`), and fail with how to build it when it is missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

pub mod vyosconfig;

/// The oracles, by directory name under `xtask/oracles/`.
const ORACLES: &[&str] = &["shparse", "vyosconfig"];

/// The files a key covers, in order, for the oracle `name`.
fn sources(name: &str) -> &'static [&'static str] {
    match name {
        "vyosconfig" => &["dune", "vyosconfig.ml"],
        _ => &["go.mod", "go.sum", "main.go"],
    }
}

pub fn run(root: &Path) -> anyhow::Result<()> {
    for name in ORACLES {
        let binary = ensure(root, name)?;
        println!("oracles: {name} {}", binary.display());
    }
    Ok(())
}

/// Builds the oracle `name` unless a binary built from the same sources exists.
pub fn ensure(root: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let source_dir = root.join("xtask/oracles").join(name);
    let key = source_key(&source_dir, sources(name))?;
    let cache = crate::testenv_bins::cache_dir()?;
    let bin_dir = cache.join("bin");
    let target = bin_dir.join(format!("{name}-{key}"));
    if target.is_file() {
        return Ok(target);
    }
    fs::create_dir_all(&bin_dir).with_context(|| format!("creating {}", bin_dir.display()))?;
    println!("oracles: building {name} from {}", source_dir.display());
    let started = Instant::now();
    let partial = bin_dir.join(format!("{name}-{key}.partial"));
    match name {
        "vyosconfig" => vyosconfig::build(root, &source_dir, &partial)?,
        _ => go_build(name, &source_dir, &partial)?,
    }
    fs::rename(&partial, &target).with_context(|| format!("moving {} into place", target.display()))?;
    println!("oracles: built {name} in {:.1?}", started.elapsed());
    Ok(target)
}

fn go_build(name: &str, source_dir: &Path, partial: &Path) -> anyhow::Result<()> {
    let partial_arg = partial.to_string_lossy().into_owned();
    let status = crate::testenv_bins::go_command(source_dir, &["build", "-trimpath", "-o", &partial_arg, "."])
        .env("GOFLAGS", "-mod=readonly -buildvcs=false")
        .status()
        .context("running `go build` (the oracles need `go` 1.26 or newer on PATH)")?;
    if !status.success() {
        bail!(
            "`go build` of the {name} oracle in {} failed ({status})",
            source_dir.display()
        );
    }
    Ok(())
}

/// FNV-1a 64 over the source `files` in order, in hex. The tests compute
/// the same key to find the binary.
fn source_key(dir: &Path, files: &[&str]) -> anyhow::Result<String> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let path = dir.join(file);
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        for byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    Ok(format!("{hash:016x}"))
}
