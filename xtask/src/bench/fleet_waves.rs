//! The fleet rollout run of `cargo xtask bench` (`operator/tests/scale.rs`
//! with `VROUTER_SCALE_SHAPE=selector-waves`): one binding choosing 10,000
//! targets by label and rolling out in waves of 5 %, on instant guests, the
//! released operator binary as its own process. `cargo xtask bench --only
//! fleet-waves` runs this alone and rewrites only this section of
//! docs/benchmarks.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

use super::{met, num, read_json};
use crate::cargo_step;

/// The section's heading.
pub const HEADING: &str = "## Fleet rollout: targets chosen by a selector, in waves of 5 %";

/// The run's size and idle observation.
pub struct Run {
    pub targets: u64,
    pub idle_secs: u64,
}

/// What a run measured, with the machine's load around it.
pub struct Measured {
    figures: Value,
    ok: bool,
    command: String,
    load_before: String,
    load_after: String,
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg has them.
pub(super) fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split(' ').take(3).collect::<Vec<_>>().join(" ")
}

/// Runs the scale test in the selector-waves shape; its assertions are
/// reported on the page rather than fatal.
pub fn measure(root: &Path, run: &Run) -> anyhow::Result<Measured> {
    let out = std::env::temp_dir().join(format!("vrouter-bench-fleet-waves-{}.json", run.targets));
    let _ = std::fs::remove_file(&out);
    let env = [
        ("VROUTER_SCALE_TARGETS", run.targets.to_string()),
        ("VROUTER_SCALE_GUESTS", "instant".to_owned()),
        ("VROUTER_SCALE_SHAPE", "selector-waves".to_owned()),
        ("VROUTER_SCALE_IDLE_SECS", run.idle_secs.to_string()),
        ("VROUTER_BENCH_OUT", out.display().to_string()),
    ];
    let args = [
        "test",
        "--release",
        "-p",
        "vrouter-operator",
        "--test",
        "scale",
        "--",
        "--nocapture",
    ];
    let load_before = load_average();
    let name = format!("fleet rollout, {} targets by selector, waves of 5 %", run.targets);
    let ok = cargo_step::run(root, &name, &args, &env).is_ok();
    let load_after = load_average();
    Ok(Measured {
        figures: read_json(&out).context("the fleet rollout run wrote no figures")?,
        ok,
        command: cargo_step::command_line(&env, &args),
        load_before,
        load_after,
    })
}

/// Runs it and replaces this section of `page`, leaving the others.
pub fn update_page(root: &Path, page: &Path, run: &Run) -> anyhow::Result<()> {
    let section = render(&measure(root, run)?);
    let text = std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let text = super::template_review::replace_section(&text, HEADING, &section);
    std::fs::write(page, text).with_context(|| format!("writing {}", page.display()))
}

/// The section of the page.
pub fn render(m: &Measured) -> String {
    let s = &m.figures;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{HEADING}\n\n`{}`\n\nOne VRouterBinding over {} VRouterTargets chosen by `targetSelector` (every \
         target carries the label), `spec.rollout.mode: Waves` with `batchSize: 5%` ({} waves of {}), no \
         pause, `pollInterval: 1s`. Otherwise the 10,000-target scale run: a real kube-apiserver and etcd on \
         loopback, instant guests behind the in-test Proxmox API, the released operator binary as its own \
         process with its default settings. The harness's own watches see every config and the binding; \
         the test fails if a wave is seen twice or out of order, if the binding does not end Ready after the \
         last wave, if more configs are written and not Applied at once than a wave holds, or if a config is \
         Applied twice for one generation. The machine was shared with other builds during the run: load \
         average {} before, {} after.\n",
        m.command, s["targets"], s["wave_count"], s["wave_size"], m.load_before, m.load_after,
    );
    let _ = writeln!(out, "| figure | value | holds |\n| --- | --- | --- |");
    for (figure, value, holds) in rows(s) {
        let _ = writeln!(out, "| {figure} | {value} | {holds} |");
    }
    if !m.ok {
        let _ = writeln!(
            out,
            "\nThe test's own assertions failed in this run; the rows marked **not met** say which, the run's \
             output the rest."
        );
    }
    super::scale::series_tables(&mut out, s, num(s, "targets"));
    out
}

type Row = (String, String, String);

fn rows(s: &Value) -> Vec<Row> {
    rollout_rows(s).into_iter().chain(cost_rows(s)).collect()
}

fn row(figure: &str, value: String, holds: String) -> Row {
    (figure.to_owned(), value, holds)
}

/// How long the rollout took and whether it kept its waves.
fn rollout_rows(s: &Value) -> Vec<Row> {
    let targets = num(s, "targets");
    let waves: Vec<u64> = s["waves_seen"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let of = num(s, "wave_count");
    let in_order = waves.windows(2).all(|w| w[0] < w[1]) && waves.last().copied() == Some(of as u64);
    let twice = s["applied_twice"].as_array().map_or(0, Vec::len);
    let max_in_flight = num(s, "max_in_flight");
    let size = num(s, "wave_size");
    let r = row;
    vec![
        r(
            &format!("binding created → {targets} VRouterConfigs written"),
            format!("{:.1} s", num(s, "configs_written_seconds")),
            String::new(),
        ),
        r(
            "binding created → all Applied",
            format!("{:.1} s", num(s, "all_applied_seconds")),
            format!(
                "{} of {targets} ({})",
                num(s, "applied"),
                met(num(s, "applied") >= targets)
            ),
        ),
        r(
            "binding created → Ready (all waves done)",
            format!("{:.1} s", num(s, "binding_ready_seconds")),
            format!("`{}`", s["binding_ready_message"].as_str().unwrap_or("?")),
        ),
        r(
            "waves seen in `status.waves` by the harness's watch",
            format!(
                "{} distinct, the last {}",
                waves.len(),
                waves.last().copied().unwrap_or(0)
            ),
            format!("rising, each once, ending at {of} ({})", met(in_order)),
        ),
        r(
            "most configs written and not yet Applied at once",
            format!("{max_in_flight}"),
            format!("≤ {size} ({})", met(max_in_flight <= size)),
        ),
        r(
            "configs Applied twice for one generation",
            format!("{twice}"),
            format!("0 ({})", met(twice == 0)),
        ),
    ]
}

/// What the rollout cost the API server and the operator.
fn cost_rows(s: &Value) -> Vec<Row> {
    let targets = num(s, "targets");
    let per_config = num(s, "requests_per_config");
    let r = row;
    vec![
        r(
            "API requests per VRouterConfig (all verbs, binding → quiet)",
            format!("{per_config:.2}"),
            format!(
                "≤ {} ({})",
                num(s, "requests_per_config_budget"),
                met(per_config <= num(s, "requests_per_config_budget"))
            ),
        ),
        r(
            "409 Conflicts, binding → quiet",
            format!("{}", num(s, "conflicts_total")),
            format!("0 ({})", met(num(s, "conflicts_total") == 0.0)),
        ),
        r(
            "operator CPU, binding → all Applied and quiet",
            format!("{:.1} s", num(s, "operator_cpu_seconds_apply")),
            String::new(),
        ),
        r(
            &format!("operator started with {targets} targets → quiet"),
            format!("{:.1} s", num(s, "startup_to_quiet_seconds")),
            String::new(),
        ),
        r(
            "peak RSS of the operator process",
            format!("{:.0} MiB", num(s, "operator_peak_rss_mib")),
            String::new(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn holds(s: &Value, prefix: &str) -> String {
        rows(s).into_iter().find(|r| r.0.starts_with(prefix)).unwrap().2
    }

    #[test]
    fn a_rollout_that_kept_its_waves_meets_every_row() {
        let s = json!({"targets": 10000, "applied": 10000, "wave_count": 20, "wave_size": 500,
            "waves_seen": (1..=20).collect::<Vec<_>>(), "max_in_flight": 500, "applied_twice": [],
            "requests_per_config": 9.5, "requests_per_config_budget": 10.0, "conflicts_total": 0,
            "binding_ready_message": "all 20 waves done, every config Applied"});
        for r in rows(&s).into_iter().filter(|r| !r.2.is_empty()) {
            assert!(!r.2.contains("not met"), "{r:?}");
        }
    }

    #[test]
    fn a_wave_seen_twice_or_too_many_in_flight_is_not_met() {
        let s = json!({"targets": 10000, "applied": 10000, "wave_count": 20, "wave_size": 500,
            "waves_seen": [1, 2, 2, 20], "max_in_flight": 501, "applied_twice": ["(\"edge.r1\", 1) 2×"]});
        assert!(holds(&s, "waves seen").contains("not met"));
        assert!(holds(&s, "most configs").contains("not met"));
        assert!(holds(&s, "configs Applied twice").contains("not met"));
        let short = json!({"wave_count": 20, "waves_seen": [1, 19]});
        assert!(holds(&short, "waves seen").contains("not met"));
    }
}
