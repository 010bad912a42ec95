//! One `cargo` invocation of an xtask, printed as it can be typed again.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// Runs `cargo <args>` in the workspace with `env` added, printing the
/// command first and failing with the step's name.
pub fn run(root: &Path, name: &str, args: &[&str], env: &[(&str, String)]) -> anyhow::Result<()> {
    println!("==> {name}: {}", command_line(env, args));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(root)
        .status()
        .with_context(|| format!("starting cargo for {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// The command as a person would type it (the JSON output path left out).
pub fn command_line(env: &[(&str, String)], args: &[&str]) -> String {
    let mut line: Vec<String> = env
        .iter()
        .filter(|(k, _)| *k != "VROUTER_BENCH_OUT")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    line.push("cargo".into());
    line.extend(args.iter().map(|a| a.to_string()));
    line.join(" ")
}
