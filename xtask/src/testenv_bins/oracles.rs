//! Test oracles of our own, written in Go: small programs in `xtask/oracles/<name>`
//! (a module with its committed `go.sum`) over Go libraries from the module proxy,
//! which tests compare our code with.
//!
//! - `gotemplate`: Go `text/template` + sprig as the Go vrouter-operator renders
//!   (sprig's function map without its denylist), for vrouter-render's
//!   differential tests of `vrouter_gotemplate::convert`.
//! - `kstatus`: sigs.k8s.io/cli-utils' kstatus status computation (what Flux
//!   reads health with), for the operator's test that the conditions it writes
//!   are read as Current, InProgress and Failed by the real library. It shares
//!   k8s.io/api and apimachinery v0.37.2 with kube-apiserver, so a machine that
//!   built that reuses their compiled packages.
//! - `promql`: Prometheus's PromQL parser, naming the metrics each query of
//!   the chart's dashboard and alerting rules selects, for the test that the
//!   operator exports every one. It shares github.com/prometheus/prometheus
//!   v0.316.0 with `promtool`.
//!
//! Each is built into `<cache>/bin/<name>` with the dependency versions its
//! `go.sum` pins (`-mod=readonly`, so a build never edits the repository),
//! stamped with a SHA-256 of its sources and the Go version: a changed program is
//! rebuilt, an unchanged one never. Tests find it with
//! `vrouter_test_apiserver::go_template_oracle()` / `kstatus_oracle()` and fail
//! saying how to build it when it is missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use super::{go, go_output, source_hash};

/// The oracles, by directory name under `xtask/oracles/`.
pub const ORACLES: &[&str] = &["gotemplate", "kstatus", "promql"];
/// Bumped whenever the build recipe below changes.
const RECIPE_REVISION: u32 = 1;

/// Builds every oracle that is missing or stale; the caller holds the cache's
/// build lock. Returns (name, path) in [`ORACLES`] order.
pub fn ensure(root: &Path, cache: &Path) -> anyhow::Result<Vec<(&'static str, PathBuf)>> {
    ORACLES
        .iter()
        .map(|name| Ok((*name, ensure_one(&root.join("xtask/oracles").join(name), cache, name)?)))
        .collect()
}

fn ensure_one(dir: &Path, cache: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let target = cache.join("bin").join(name);
    let stamp_path = cache.join("bin").join(format!("{name}.stamp"));
    let stamp = format!(
        "recipe {RECIPE_REVISION}\n{name} source sha256 {}\n{}",
        source_hash(dir)?,
        go_output(dir, &["version"])?
    );
    if target.is_file() && fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(target);
    }
    println!("testenv: building the {name} oracle from {}", dir.display());
    let started = Instant::now();
    let partial = cache.join("bin").join(format!("{name}.partial"));
    let partial_arg = partial.to_string_lossy().into_owned();
    go(
        dir,
        &[
            "build",
            "-mod=readonly",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            &partial_arg,
            ".",
        ],
    )?;
    fs::rename(&partial, &target).with_context(|| format!("moving {} into place", target.display()))?;
    fs::write(&stamp_path, stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    println!(
        "testenv: built {name} in {:.0?} -> {}",
        started.elapsed(),
        target.display()
    );
    Ok(target)
}
