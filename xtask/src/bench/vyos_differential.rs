//! The VyOS-parser differential of `cargo xtask bench`
//! (`crates/vrouter-render/tests/vyos_differential.rs` at 10⁵ generated
//! configs): the project's reading of config.boot text against VyOS's own
//! parser, and its section of docs/benchmarks.md.

use std::path::Path;

use super::read_json;
use crate::cargo_step;

/// Generated cases of the long run.
const CASES: &str = "100000";

/// Runs the differential in the release profile and returns its section.
pub fn run(root: &Path) -> anyhow::Result<String> {
    let out = std::env::temp_dir().join("vrouter-bench-vyos-differential.json");
    let env = [
        ("VROUTER_VYOS_DIFF_CASES", CASES.to_owned()),
        ("VROUTER_BENCH_OUT", out.display().to_string()),
    ];
    let args = [
        "test",
        "--release",
        "-p",
        "vrouter-render",
        "--test",
        "vyos_differential",
        "--",
        "generated",
    ];
    cargo_step::run(root, "VyOS parser differential run", &args, &env)?;
    let figures = read_json(&out)?;
    Ok(format!(
        "\n## VyOS parser differential, long run\n\n`{}`: {} generated configs read by the project \
         (`vyos_set_commands`) and by VyOS's own parser (vyos1x-config, `xtask/oracles/vyosconfig`): \
         {} printed the same `set` commands, {} refused by both, {} disagreements, in {:.1} s \
         ({:.1} s of it in VyOS's parser). Exceptions by design: docs/vyos-config-reading.md.\n",
        cargo_step::command_line(&env, &args),
        figures["cases"],
        figures["same_commands"],
        figures["both_refuse"],
        figures["disagreements"],
        figures["total_secs"].as_f64().unwrap_or(0.0),
        figures["oracle_secs"].as_f64().unwrap_or(0.0),
    ))
}
