//! The admission check of the worst template the limits allow: its
//! time and the most heap it holds at once, against the budgets of 100 ms and
//! 32 MiB. `cargo xtask bench` runs this and writes its section of
//! docs/benchmarks.md from the JSON it leaves in `VROUTER_BENCH_OUT`.
//!
//! "Worst" is searched, not assumed: for every shape of a family (nested loops,
//! sibling `if`s, values per line), the most lines that keep the source within
//! the size limit and the check accepting; the one whose check does the most
//! work (the check's own count) is measured. The largest template the size limit
//! allows at the deepest nesting, which the check refuses at its text limit, is
//! measured too.
//!
//! Memory is read from the kernel: each template is reviewed once more in a
//! fresh process (this binary with `--one`), which reports its resident size
//! before the review (`VmRSS`) and its peak after (`VmHWM`).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use vrouter_render::testing::template_cost::{NestedTemplate, review_work};
use vrouter_render::{TemplateEngine, TemplateKind};

const TIME_BUDGET: Duration = Duration::from_millis(100);
const MEMORY_BUDGET: u64 = 32 * 1024 * 1024;
const SAMPLES: usize = 15;

/// The template of `shape` with the most lines the size limit and the check
/// allow, and the check's work on it; none when even one line is refused.
fn largest_accepted(engine: &TemplateEngine, shape: NestedTemplate) -> Option<(NestedTemplate, u64)> {
    let with = |lines| NestedTemplate { lines, ..shape };
    let accepted = |lines| {
        let source = with(lines).source();
        if source.len() > engine.limits().max_template_bytes {
            return None;
        }
        let (work, outcome) = review_work(engine, TemplateKind::Commands, &source).ok()?;
        outcome.ok().map(|()| work.units())
    };
    accepted(1)?;
    let (mut good, mut bad) = (1, 2);
    while accepted(bad).is_some() {
        (good, bad) = (bad, bad * 2);
    }
    while bad - good > 1 {
        let mid = (good + bad) / 2;
        if accepted(mid).is_some() { good = mid } else { bad = mid }
    }
    accepted(good).map(|units| (with(good), units))
}

fn worst_accepted(engine: &TemplateEngine) -> (NestedTemplate, u64) {
    let mut shapes = Vec::new();
    for loops in [0, 1, 2, 3, 4, 8, 15] {
        for ifs in [0, 1, 8] {
            for values_per_line in [1, 8] {
                shapes.push(NestedTemplate {
                    loops,
                    ifs,
                    lines: 1,
                    values_per_line,
                });
            }
        }
    }
    shapes
        .into_iter()
        .filter_map(|shape| largest_accepted(engine, shape))
        .max_by_key(|(_, units)| *units)
        .expect("some shape is accepted")
}

/// The largest template of 15 loops and an `if` the size limit allows.
fn largest_at_depth(engine: &TemplateEngine) -> NestedTemplate {
    let mut shape = NestedTemplate {
        loops: 15,
        ifs: 1,
        lines: 1,
        values_per_line: 8,
    };
    while (NestedTemplate {
        lines: shape.lines + 1,
        ..shape
    })
    .source()
    .len()
        <= engine.limits().max_template_bytes
    {
        shape.lines += 1;
    }
    shape
}

struct Measured {
    median: Duration,
    max: Duration,
    rss_before_kib: u64,
    peak_kib: u64,
    accepted: bool,
}

/// Times `SAMPLES` reviews of `shape`, then reads one review's memory in a
/// process of its own.
fn measure(engine: &TemplateEngine, shape: NestedTemplate) -> Measured {
    let source = shape.source();
    let mut times = Vec::with_capacity(SAMPLES);
    let mut accepted = false;
    for _ in 0..SAMPLES {
        let start = Instant::now();
        let outcome = engine.review("worst", TemplateKind::Commands, &source);
        times.push(start.elapsed());
        accepted = outcome.is_ok();
    }
    times.sort();
    let (rss_before_kib, peak_kib) = memory_of_one_review(shape);
    Measured {
        median: times[SAMPLES / 2],
        max: times[SAMPLES - 1],
        rss_before_kib,
        peak_kib,
        accepted,
    }
}

fn spec(shape: NestedTemplate) -> String {
    format!(
        "{},{},{},{}",
        shape.loops, shape.ifs, shape.lines, shape.values_per_line
    )
}

fn parse_spec(spec: &str) -> NestedTemplate {
    let n: Vec<usize> = spec.split(',').map(|n| n.parse().expect("a number")).collect();
    NestedTemplate {
        loops: n[0],
        ifs: n[1],
        lines: n[2],
        values_per_line: n[3],
    }
}

/// `VmRSS` before and `VmHWM` after one review, in KiB, from a fresh process.
fn memory_of_one_review(shape: NestedTemplate) -> (u64, u64) {
    let exe = std::env::current_exe().expect("this bench's path");
    let out = Command::new(exe)
        .args(["--one", &spec(shape)])
        .output()
        .expect("running the bench again");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let (before, peak) = text.trim().split_once(' ').expect("two numbers");
    (before.parse().expect("KiB"), peak.parse().expect("KiB"))
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("the field in /proc/self/status")
}

/// `--one SPEC`: one review, printing `VmRSS` before it and `VmHWM` after.
fn one_review(spec: &str) {
    let source = parse_spec(spec).source();
    let engine = TemplateEngine::new();
    let before = status_kib("VmRSS");
    let outcome = engine.review("worst", TemplateKind::Commands, &source);
    let peak = status_kib("VmHWM");
    drop(outcome);
    println!("{before} {peak}");
}

fn report(name: &str, shape: NestedTemplate, m: &Measured) -> serde_json::Value {
    let bytes = shape.source().len();
    let grew_kib = m.peak_kib.saturating_sub(m.rss_before_kib);
    println!(
        "{name}: {} loops, {} ifs, {} lines × {} values, {} bytes: {} in {:.2} ms median ({:.2} ms max), \
         peak RSS {:.1} MiB ({:.1} MiB over the RSS before it)",
        shape.loops,
        shape.ifs,
        shape.lines,
        shape.values_per_line,
        bytes,
        if m.accepted { "accepted" } else { "refused" },
        m.median.as_secs_f64() * 1e3,
        m.max.as_secs_f64() * 1e3,
        m.peak_kib as f64 / 1024.0,
        grew_kib as f64 / 1024.0,
    );
    json!({
        "name": name,
        "loops": shape.loops,
        "ifs": shape.ifs,
        "lines": shape.lines,
        "values_per_line": shape.values_per_line,
        "bytes": bytes,
        "accepted": m.accepted,
        "median_ms": m.median.as_secs_f64() * 1e3,
        "max_ms": m.max.as_secs_f64() * 1e3,
        "rss_before_kib": m.rss_before_kib,
        "peak_rss_kib": m.peak_kib,
        "time_budget_met": m.max <= TIME_BUDGET,
        "memory_budget_met": grew_kib * 1024 <= MEMORY_BUDGET,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--one") {
        one_review(&args[at + 1]);
        return;
    }
    let engine = TemplateEngine::new();
    let (worst, _) = worst_accepted(&engine);
    let deep = NestedTemplate {
        loops: 15,
        ifs: 9,
        lines: 400,
        values_per_line: 1,
    };
    let refused = largest_at_depth(&engine);
    let mut rows = Vec::new();
    for (name, shape) in [
        ("worst accepted", worst),
        ("largest at 15 loops", refused),
        ("deep nesting", deep),
    ] {
        let measured = measure(&engine, shape);
        rows.push(report(name, shape, &measured));
    }
    if let Some(out) = std::env::var_os("VROUTER_BENCH_OUT") {
        let doc = json!({ "samples": SAMPLES, "rows": rows });
        std::fs::write(&out, serde_json::to_vec_pretty(&doc).expect("JSON")).expect("writing VROUTER_BENCH_OUT");
    }
}
