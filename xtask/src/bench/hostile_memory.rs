//! The hostile-guest memory run of `cargo xtask bench`
//! (`operator/tests/hostile_memory.rs`): the released operator binary against
//! the real API server, with Proxmox guests answering at the caps the
//! operator allows, and its peak RSS against the chart's memory limit.
//! `cargo xtask bench --only hostile-memory` runs this alone and rewrites
//! only this section of docs/benchmarks.md. A run over budget fails the
//! bench, after its section is written.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

use super::{met, num, read_json};
use crate::cargo_step;

/// The section's heading.
pub const HEADING: &str = "## Peak memory under hostile guests";

/// Runs the test in the release profile; its section, and whether it met
/// its budget (the test's own assertion).
pub fn run(root: &Path) -> anyhow::Result<(String, bool)> {
    let out = std::env::temp_dir().join("vrouter-bench-hostile-memory.json");
    let _ = std::fs::remove_file(&out);
    let env = [("VROUTER_BENCH_OUT", out.display().to_string())];
    let args = [
        "test",
        "--release",
        "-p",
        "vrouter-operator",
        "--features",
        "bench-runs",
        "--test",
        "hostile_memory",
        "--",
        "--nocapture",
    ];
    let ok = cargo_step::run(root, "hostile-guest memory run", &args, &env).is_ok();
    let figures = read_json(&out).context("the hostile-guest memory run wrote no figures")?;
    Ok((render(&figures, &cargo_step::command_line(&env, &args)), ok))
}

/// Runs it and replaces this section of `page`, leaving the others.
pub fn update_page(root: &Path, page: &Path) -> anyhow::Result<()> {
    let (section, ok) = run(root)?;
    let text = std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let text = super::template_review::replace_section(&text, HEADING, &section);
    std::fs::write(page, text).with_context(|| format!("writing {}", page.display()))?;
    if !ok {
        bail!(
            "the operator's peak memory under hostile guests is over its budget (see {})",
            page.display()
        );
    }
    Ok(())
}

fn today() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

fn render(figures: &Value, command: &str) -> String {
    let machine = super::machine().unwrap_or_default();
    let peak = num(figures, "operator_peak_rss_mib");
    let budget = num(figures, "budget_mib");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{HEADING}\n\n`{command}` (release profile), {}, on {} cores ({}), {} of memory. The released \
         `vrouter-operator` binary as its own process against the real API server, at its default \
         concurrency, managing {} Proxmox routers whose guests answer at the caps (a config.boot of {} bytes, \
         every byte above 0x7F so Proxmox's answer is twice as long, just under its response cap; a running \
         config as large), {} whose agents answer one byte a second and {} whose commands never exit. It ran \
         {:.0} s: {} reads of the large config.boot, {} exec-status calls.\n",
        today(),
        machine.get("cores").map_or("?", String::as_str),
        machine.get("cpu").map_or("?", String::as_str),
        machine.get("memory").map_or("?", String::as_str),
        figures["big_routers"],
        figures["config_boot_bytes"],
        figures["slow_routers"],
        figures["never_exiting_routers"],
        num(figures, "seconds"),
        figures["large_config_reads"],
        figures["exec_status_calls"],
    );
    let _ = writeln!(
        out,
        "| operator peak RSS (`VmHWM`) | budget | chart limit |\n| --- | --- | --- |\n\
         | {peak:.1} MiB | ≤ {budget:.0} MiB ({}) | {:.0} MiB |",
        met(peak <= budget),
        num(figures, "chart_limit_mib"),
    );
    out
}
