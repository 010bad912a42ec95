//! The scale runs of `cargo xtask bench` (`operator/tests/scale.rs`): what
//! each run is, how it is started, and its section of docs/benchmarks.md
//! with issue 25's budgets.
//!
//! Three runs:
//! - 1,000 targets on instant guests, the released binary as its own
//!   process: the operator is the bottleneck, and issue 25's budgets apply;
//! - 10,000 targets on instant guests: everything Applied, the operator's
//!   peak RSS and its requests per config;
//! - 1,000 targets over real qemu-ga agents, the operator in the test
//!   process: the same workload with real guests doing real work, reported
//!   without time budgets (two cores run the guests' shells too).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::{met, num, read_json};
use crate::cargo_step;

/// Issue 25's budgets for the 1,000-target run on instant guests.
mod budget {
    pub const ALL_APPLIED_S: f64 = 15.0;
    pub const BINDING_TO_QUIET_S: f64 = 25.0;
    pub const STARTUP_TO_QUIET_S: f64 = 15.0;
    pub const OPERATOR_CPU_APPLY_S: f64 = 8.0;
    pub const PROXMOX_REQUESTS_PER_CONFIG: f64 = 20.0;
    pub const WRITTEN_VS_PLAIN: f64 = 2.0;
    pub const IDLE_CPU_S: f64 = 2.0;
    /// The 10,000-target run's operator peak RSS.
    pub const PEAK_RSS_MIB: f64 = 300.0;
}

/// One scale run's shape.
#[derive(Clone, Debug)]
pub struct Run {
    pub targets: u64,
    /// `instant` or `agents` (`VROUTER_SCALE_GUESTS`).
    pub guests: &'static str,
    /// Real qemu-ga agents, for `agents`.
    pub agents: u64,
    pub idle_secs: u64,
}

/// What a run measured.
pub struct Measured {
    pub run: Run,
    pub figures: Value,
    /// Whether the test's own assertions passed.
    pub ok: bool,
    pub command: String,
}

/// Runs the scale test with `run`'s shape; its budget assertions are
/// reported rather than fatal (the page says which budget is missed).
pub fn measure(root: &Path, run: &Run) -> anyhow::Result<Measured> {
    let out = std::env::temp_dir().join(format!("vrouter-bench-scale-{}-{}.json", run.guests, run.targets));
    let _ = std::fs::remove_file(&out);
    let env = [
        ("VROUTER_SCALE_TARGETS", run.targets.to_string()),
        ("VROUTER_SCALE_GUESTS", run.guests.to_owned()),
        ("VROUTER_SCALE_AGENTS", run.agents.to_string()),
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
    let name = format!("scale run, {} targets, {} guests", run.targets, run.guests);
    let ok = cargo_step::run(root, &name, &args, &env).is_ok();
    Ok(Measured {
        run: run.clone(),
        figures: read_json(&out)?,
        ok,
        command: cargo_step::command_line(&env, &args),
    })
}

/// A table row: figure, value, budget (empty when none).
type Row = (String, String, String);

fn row(figure: impl Into<String>, value: String, budget: String) -> Row {
    (figure.into(), value, budget)
}

fn at_most(value: f64, limit: f64, unit: &str) -> String {
    format!("≤ {limit}{unit} ({})", met(value <= limit))
}

/// The run's section of the page.
pub fn render(out: &mut String, m: &Measured) {
    let s = &m.figures;
    let targets = num(s, "targets");
    let _ = writeln!(
        out,
        "\n## Scale: one binding over {targets} Proxmox targets, {}\n\n`{}`\n\n{}\n",
        heading(&m.run),
        m.command,
        description(&m.run),
    );
    let _ = writeln!(out, "| figure | value | budget |\n| --- | --- | --- |");
    let rows = time_rows(s, &m.run)
        .into_iter()
        .chain(cpu_and_memory_rows(s, &m.run))
        .chain(request_rows(s))
        .chain(proxmox_rows(s));
    for (figure, value, budget) in rows {
        let _ = writeln!(out, "| {figure} | {value} | {budget} |");
    }
    if !m.ok {
        let _ = writeln!(
            out,
            "\nThe scale test's own assertions failed in this run; the rows marked **not met** say which."
        );
    }
    series_tables(out, s, targets);
}

fn heading(run: &Run) -> String {
    match run.guests {
        "instant" => "instant guests".to_owned(),
        _ => format!("{} real qemu-ga agents", run.agents),
    }
}

fn description(run: &Run) -> &'static str {
    match run.guests {
        "instant" => {
            "A real kube-apiserver and etcd on loopback; the in-test Proxmox API answers every guest-agent \
             call at once from a guest played in memory (`vrouter_test_peers::instant_guest`: apply time ≈ 0, \
             so the operator is the bottleneck, issue 25's workload). The operator is the released binary, \
             run as its own process with its default settings: its CPU and peak RSS are its own, read from \
             /proc."
        }
        _ => {
            "A real kube-apiserver and etcd on loopback; the in-test Proxmox API carries every agent call to \
             real qemu-ga agents (several VMIDs per agent, each VMID with its own guest sandbox), whose shells \
             run the readiness check, the apply wrapper and drift detection's reads on the same two cores. \
             The operator's controllers run in the test process on a Tokio runtime of their own (each router \
             needs its sandbox's guest paths); its CPU is that runtime's threads'."
        }
    }
}

/// Issue 25's time budgets apply to the 1,000-target run on instant guests.
fn budgeted(run: &Run) -> bool {
    run.guests == "instant" && run.targets <= 1000
}

fn time_rows(s: &Value, run: &Run) -> Vec<Row> {
    let targets = num(s, "targets");
    let b = budgeted(run);
    let budget_if = |value: f64, limit: f64, unit: &str| if b { at_most(value, limit, unit) } else { String::new() };
    let ratio = num(s, "written_vs_raw_ratio");
    let applied = num(s, "all_applied_seconds");
    let quiet = num(s, "binding_to_quiet_seconds");
    let startup = num(s, "startup_to_quiet_seconds");
    vec![
        row(
            format!("plain client: {targets} VRouterConfig creates, one after another"),
            format!("{:.1} s", num(s, "raw_create_sequential_seconds")),
            String::new(),
        ),
        row(
            format!(
                "plain client: {targets} VRouterConfig creates, {} in flight (as the binding controller)",
                num(s, "raw_create_concurrency")
            ),
            format!("{:.1} s", num(s, "raw_create_seconds")),
            "the physical limit".to_owned(),
        ),
        row(
            format!("binding created → {targets} VRouterConfigs written"),
            format!("{:.1} s", num(s, "configs_written_seconds")),
            String::new(),
        ),
        row(
            "ratio to the plain client with as many in flight",
            format!("{ratio:.2}×"),
            budget_if(ratio, budget::WRITTEN_VS_PLAIN, "×"),
        ),
        row(
            "binding created → all Applied",
            format!("{applied:.1} s"),
            if run.targets > 1000 {
                format!("all Applied ({})", met(num(s, "applied") >= targets))
            } else {
                budget_if(applied, budget::ALL_APPLIED_S, " s")
            },
        ),
        row(
            "binding created → quiet (no write for 3 s)",
            format!("{quiet:.1} s"),
            budget_if(quiet, budget::BINDING_TO_QUIET_S, " s"),
        ),
        row(
            format!("operator started with {targets} targets → quiet"),
            format!("{startup:.1} s"),
            budget_if(startup, budget::STARTUP_TO_QUIET_S, " s"),
        ),
    ]
}

fn cpu_and_memory_rows(s: &Value, run: &Run) -> Vec<Row> {
    let b = budgeted(run);
    let apply_cpu = num(s, "operator_cpu_seconds_apply");
    let idle_cpu = num(s, "operator_cpu_seconds_idle");
    let idle = num(s, "idle_seconds");
    let idle_budget = if b && idle >= 300.0 {
        at_most(idle_cpu, budget::IDLE_CPU_S, " s")
    } else {
        String::new()
    };
    let mut rows = vec![
        row(
            "operator CPU, startup (first poll of every target, first cluster sync)",
            format!("{:.1} s", num(s, "operator_cpu_seconds_startup")),
            String::new(),
        ),
        row(
            "operator CPU, binding → all Applied and quiet",
            format!("{apply_cpu:.1} s"),
            if b {
                at_most(apply_cpu, budget::OPERATOR_CPU_APPLY_S, " s")
            } else {
                String::new()
            },
        ),
        row(
            "operator CPU per apply",
            format!("{:.1} ms", num(s, "operator_cpu_ms_per_apply")),
            String::new(),
        ),
        row(
            format!("operator CPU, {idle} s idle"),
            format!("{idle_cpu:.2} s"),
            idle_budget,
        ),
    ];
    match s["operator_peak_rss_mib"].as_f64() {
        Some(rss) => rows.push(row(
            "peak RSS of the operator process",
            format!("{rss:.0} MiB"),
            if run.targets >= 10_000 {
                at_most(rss, budget::PEAK_RSS_MIB, " MiB")
            } else {
                String::new()
            },
        )),
        None => rows.push(row(
            "peak RSS of the whole test process (operator + harness)",
            format!("{:.0} MiB", num(s, "process_peak_rss_mib")),
            String::new(),
        )),
    }
    rows
}

/// API traffic (issue 25): the reconcilers read what they watch from their
/// stores, and no two of the operator's writers conflict.
fn request_rows(s: &Value) -> Vec<Row> {
    let per_config = num(s, "requests_per_config");
    let idle = num(s, "idle_seconds");
    let (gets, idle_reads) = (num(s, "watched_gets"), num(s, "idle_watched_reads"));
    vec![
        row(
            "API requests per VRouterConfig (all verbs, binding → quiet)",
            format!("{per_config:.2}"),
            at_most(per_config, num(s, "requests_per_config_budget"), ""),
        ),
        row(
            format!("GETs of watched kinds, binding → quiet / GETs and LISTs of them in {idle} s idle"),
            format!("{gets} / {idle_reads}"),
            format!("0 / 0 ({})", met(gets == 0.0 && idle_reads == 0.0)),
        ),
        row(
            "409 Conflicts, binding → quiet (VRouterStatuses / all kinds)",
            format!("{} / {}", num(s, "vrouterstatus_conflicts"), num(s, "conflicts_total")),
            format!("0 / 0 ({})", met(num(s, "conflicts_total") == 0.0)),
        ),
        row(
            format!("idle writes in {idle} s, heartbeats left out"),
            format!("{}", num(s, "idle_other_writes")),
            format!("0 ({})", met(num(s, "idle_other_writes") == 0.0)),
        ),
        row(
            format!("idle heartbeat writes in {idle} s"),
            format!("{}", num(s, "idle_heartbeat_writes")),
            format!(
                "≤ {} ({})",
                num(s, "idle_heartbeat_bound"),
                met(num(s, "idle_heartbeat_writes") <= num(s, "idle_heartbeat_bound"))
            ),
        ),
    ]
}

/// Traffic to the Proxmox API (issue 25): the cluster's client keeps its
/// connections open, so an apply costs no TLS handshake of its own.
fn proxmox_rows(s: &Value) -> Vec<Row> {
    let requests = num(s, "proxmox_requests_per_config");
    let handshakes = num(s, "tls_handshakes_per_apply");
    vec![
        row(
            "Proxmox API requests per VRouterConfig, binding → quiet",
            format!("{requests:.1}"),
            at_most(requests, budget::PROXMOX_REQUESTS_PER_CONFIG, ""),
        ),
        row(
            "TLS handshakes with the Proxmox API per apply, binding → quiet",
            format!("{handshakes:.3}"),
            at_most(handshakes, num(s, "tls_handshakes_per_apply_budget"), ""),
        ),
    ]
}

pub(super) fn series_tables(out: &mut String, s: &Value, targets: f64) {
    for (title, key) in [
        ("API requests from binding creation until quiet", "requests_by_series"),
        ("API requests while idle", "idle_requests_by_series"),
        ("409 Conflicts from binding creation until quiet", "conflicts_by_series"),
    ] {
        let rows = s[key].as_array().cloned().unwrap_or_default();
        if rows.is_empty() {
            let _ = writeln!(out, "\n{title}: none.");
            continue;
        }
        let _ = writeln!(
            out,
            "\n{title}, by verb and resource:\n\n| verb | resource | requests | per VRouterConfig |\n| --- | --- | --- | --- |"
        );
        for r in rows {
            let count = num(&r, "count");
            let _ = writeln!(
                out,
                "| {} | {} | {count} | {:.2} |",
                r["verb"].as_str().unwrap_or("?"),
                r["resource"].as_str().unwrap_or("?"),
                count / targets
            );
        }
    }
    let _ = writeln!(
        out,
        "\nProxmox API calls from binding creation until quiet: {}",
        calls_line(&s["proxmox_calls"])
    );
    let _ = writeln!(
        out,
        "\nProxmox API calls while idle: {}",
        calls_line(&s["proxmox_calls_idle"])
    );
}

fn calls_line(calls: &Value) -> String {
    let items: Vec<String> = calls
        .as_object()
        .into_iter()
        .flatten()
        .map(|(call, n)| format!("`{call}` {n}"))
        .collect();
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn instant(targets: u64) -> Run {
        Run {
            targets,
            guests: "instant",
            agents: 0,
            idle_secs: 300,
        }
    }

    #[test]
    fn the_thousand_target_instant_run_carries_the_issue_budgets() {
        let s = json!({"targets": 1000, "all_applied_seconds": 16.0, "binding_to_quiet_seconds": 20.0,
            "startup_to_quiet_seconds": 3.0, "written_vs_raw_ratio": 1.5, "operator_cpu_seconds_apply": 9.0,
            "operator_cpu_seconds_idle": 1.0, "idle_seconds": 300, "operator_peak_rss_mib": 80.0});
        let rows: Vec<Row> = time_rows(&s, &instant(1000))
            .into_iter()
            .chain(cpu_and_memory_rows(&s, &instant(1000)))
            .collect();
        let budget_of = |prefix: &str| {
            rows.iter()
                .find(|r| r.0.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix}: {rows:?}"))
                .2
                .clone()
        };
        assert_eq!(budget_of("binding created → all Applied"), "≤ 15 s (**not met**)");
        assert_eq!(budget_of("binding created → quiet"), "≤ 25 s (met)");
        assert_eq!(budget_of("ratio to the plain"), "≤ 2× (met)");
        assert_eq!(budget_of("operator CPU, binding"), "≤ 8 s (**not met**)");
        assert_eq!(budget_of("operator CPU, 300 s idle"), "≤ 2 s (met)");
        assert_eq!(budget_of("peak RSS of the operator"), "", "RSS is budgeted at 10,000");
    }

    #[test]
    fn the_large_run_is_held_to_everything_applied_and_its_rss() {
        let s = json!({"targets": 10000, "applied": 10000, "all_applied_seconds": 200.0,
            "operator_peak_rss_mib": 310.0, "idle_seconds": 60});
        let rows: Vec<Row> = time_rows(&s, &instant(10_000))
            .into_iter()
            .chain(cpu_and_memory_rows(&s, &instant(10_000)))
            .collect();
        let applied = rows.iter().find(|r| r.0 == "binding created → all Applied").unwrap();
        assert_eq!(applied.2, "all Applied (met)");
        let rss = rows.iter().find(|r| r.0.starts_with("peak RSS")).unwrap();
        assert_eq!(rss.2, "≤ 300 MiB (**not met**)");
    }

    #[test]
    fn real_agent_runs_have_no_time_budgets() {
        let run = Run {
            targets: 1000,
            guests: "agents",
            agents: 20,
            idle_secs: 60,
        };
        let s = json!({"targets": 1000, "all_applied_seconds": 42.0, "process_peak_rss_mib": 150.0});
        assert!(
            time_rows(&s, &run)
                .iter()
                .all(|r| r.2.is_empty() || r.2 == "the physical limit")
        );
        let rss = cpu_and_memory_rows(&s, &run);
        assert!(
            rss.iter()
                .any(|r| r.0.starts_with("peak RSS of the whole test process"))
        );
    }
}
