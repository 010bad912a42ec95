//! Admission of a 10,000-target binding through the registered webhook
//! (`operator/tests/webhooks.rs`), and its section of docs/benchmarks.md.

use std::path::Path;

use super::read_json;
use crate::cargo_step;

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
    cargo_step::run(root, "webhook admission of a 10,000-target binding", &args, &env)?;
    let figures = read_json(&out)?;
    Ok(format!(
        "\n## Admission of a 10,000-target binding\n\n`{}`: a VRouterBinding of {} VRouterTargets created \
         through the API server with the operator's webhooks registered (10 s timeout), from the CREATE \
         request to its answer: {:.0} ms by name (`targetRefs`), {:.0} ms by selector (`targetSelector`). \
         The names are checked against the webhook's own cache of targets; with one GET per name it \
         was refused after the 10 s timeout.\n",
        cargo_step::command_line(&env, &args),
        figures["targets"],
        figures["by_name_ms"].as_f64().unwrap_or(0.0),
        figures["by_selector_ms"].as_f64().unwrap_or(0.0),
    ))
}
