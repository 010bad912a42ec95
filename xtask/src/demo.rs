//! `cargo xtask demo [--keep]`: prepares what the demo needs and nothing
//! else (the guest agent and Redis packages, `kube-apiserver`, `etcd`, the
//! vrouter-daemon, VyOS's parser), then becomes
//! `cargo run` of the demo program (crates/vrouter-demo). Replacing this
//! process rather than waiting on a child means Ctrl-C reaches the demo
//! alone, and the prompt returns only after it has cleaned up.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use anyhow::Context;

pub fn run(root: &Path, keep: bool) -> anyhow::Result<()> {
    crate::prepare::ensure_debian_packages(crate::prepare::DEMO_PACKAGES)?;
    println!("==> local control plane and vrouter-daemon");
    crate::testenv_bins::ensure_demo(root)?;
    // The demo's routers are test guests, whose `load` is VyOS's parser.
    println!("==> VyOS's parser for the routers' load");
    crate::oracles::ensure(root, "vyosconfig")?;
    let mut args = vec!["run", "--quiet", "--package", "vrouter-demo", "--"];
    if keep {
        args.push("--keep");
    }
    println!("==> demo: cargo {}", args.join(" "));
    let error = Command::new(env!("CARGO")).args(&args).current_dir(root).exec();
    Err(error).context("starting cargo run for the demo")
}
