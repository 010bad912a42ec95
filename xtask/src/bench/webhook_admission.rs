//! Admission of a 10,000-target binding through the registered webhook
//! (`operator/tests/webhooks.rs`), and its section of docs/benchmarks.md.
//! `cargo xtask bench --only webhook-admission` runs this alone and
//! rewrites only this section.

use std::path::Path;

use anyhow::Context as _;

use super::read_json;
use crate::cargo_step;

/// The section's heading.
pub const HEADING: &str = "## Admission of a 10,000-target binding";

/// Runs it and replaces this section of `page`, leaving the others.
pub fn update_page(root: &Path, page: &Path) -> anyhow::Result<()> {
    let section = run(root)?;
    let text = std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let text = super::template_review::replace_section(&text, HEADING, &section);
    std::fs::write(page, text).with_context(|| format!("writing {}", page.display()))
}

/// Runs the test in the release profile and returns its section.
pub fn run(root: &Path) -> anyhow::Result<String> {
    let out = std::env::temp_dir().join("vrouter-bench-webhook-admission.json");
    let env = [("VROUTER_BENCH_OUT", out.display().to_string())];
    let args = [
        "test",
        "--release",
        "-p",
        "vrouter-operator",
        "--test",
        "webhooks",
        "--",
        "ten_thousand_targets",
    ];
    let _ = std::fs::remove_file(&out);
    let load_before = super::fleet_waves::load_average();
    cargo_step::run(root, "webhook admission of a 10,000-target binding", &args, &env)?;
    let load_after = super::fleet_waves::load_average();
    let figures = read_json(&out)?;
    Ok(format!(
        "\n{HEADING}\n\n`{}` (release profile): a VRouterBinding of {} VRouterTargets created \
         through the API server with the operator's webhooks registered (10 s timeout), from the CREATE \
         request to its answer: {:.0} ms by name (`targetRefs`), {:.0} ms by selector (`targetSelector`). \
         The names are checked against the webhook's own cache of targets; with one GET per name it \
         was refused after the 10 s timeout. The machine was shared with other builds during the run: \
         load average {} before, {} after.\n",
        cargo_step::command_line(&env, &args),
        figures["targets"],
        figures["by_name_ms"].as_f64().unwrap_or(0.0),
        figures["by_selector_ms"].as_f64().unwrap_or(0.0),
        load_before,
        load_after,
    ))
}
