//! `cargo xtask <command>`: the project's automation, in Rust so it runs the
//! same on every machine.

mod bench;
mod cargo_step;
mod chart_readme;
mod demo;
mod gen_crds;
mod guest_image;
mod image;
mod oracles;
mod prepare;
mod quick_run;
mod test;
mod testenv_bins;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "vrouter-operator project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write one YAML per CRD under deploy/crds/, and a template per CRD into the Helm chart, from the vrouter-api types.
    GenCrds {
        /// Exit non-zero when the committed files differ from what the types generate.
        #[arg(long)]
        check: bool,
    },
    /// Write the chart's README.md from its README.md.gotmpl and the comments of its values.yaml.
    ChartReadme {
        /// Exit non-zero when the committed README differs from what they make.
        #[arg(long)]
        check: bool,
    },
    /// Prepare everything the suite needs, then run all checks and tests.
    Test {
        /// Only the tests that need no heavy peer (no real guest, test node or Go operator), and no checks.
        #[arg(long)]
        quick: bool,
    },
    /// Build (when missing) the etcd, kube-apiserver, helm, vrouter-daemon and Go oracles the tests run against.
    Testenv,
    /// Build (when missing or changed) the test oracles under xtask/oracles/ (Go ones, and VyOS's config parser in OCaml).
    Oracles,
    /// Install QEMU and libvirt, and build (when missing) the guest image the real-guest tests boot.
    GuestImage,
    /// Watch the operator configure simulated routers on this machine (no cluster needed).
    Demo {
        /// Leave everything running afterwards and print a kubeconfig; Ctrl-C stops and cleans up.
        #[arg(long)]
        keep: bool,
    },
    /// Run every benchmark, the scale run and the apply-latency run; write docs/benchmarks.md.
    Bench(bench::Options),
    /// Build the operator's container image as an OCI image-layout archive (no registry, no daemon).
    Image(image::Options),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.command {
        Command::GenCrds { check } => gen_crds::run(&root, check),
        Command::ChartReadme { check } => chart_readme::run(&root, check),
        Command::Test { quick } => test::run(&root, quick),
        Command::Testenv => testenv_bins::run(&root),
        Command::Oracles => oracles::run(&root),
        Command::GuestImage => guest_image::run(),
        Command::Demo { keep } => demo::run(&root, keep),
        Command::Bench(options) => bench::run(&root, &options),
        Command::Image(options) => image::run(&root, &options),
    }
}

/// The workspace root: xtask lives one level below it.
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}
